"""Several trials on one GPU: the environment variable through which attnlab-sweep
--trials-per-gpu K tells each trial its share of the GPU's memory (1/K), set by the runner
(attnlab.sweeps.runner.trial_env) and applied by attnlab-train
(attnlab.training.environment.apply_gpu_memory_share)."""

MEMORY_SHARE_ENV = "ATTNLAB_GPU_MEMORY_FRACTION"
