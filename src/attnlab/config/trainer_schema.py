"""cfg.trainer: the Trainer class (`_target_`: lightning.Trainer, or a subclass of one's own) and
every keyword argument of lightning.Trainer, as `trainer.<key>` (no `+`).

The keys attnlab-train sets itself (ATTNLAB_SETS) are not config keys: the config reaches them
another way, named in the message a user gets for `trainer.<key>=...`. tests/test_config.py
checks that TrainerConfig's fields and ATTNLAB_SETS together are exactly Trainer's signature, so
a Lightning upgrade that adds or renames an argument is noticed. No Lightning import here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Trainer arguments that attnlab.training.trainer.build_trainer passes itself, and the config
# that controls each.
ATTNLAB_SETS = {
    "logger": "logger=wandb|csv|tensorboard|none, or several: logger=[wandb,tensorboard]",
    "callbacks": "callbacks=default|early_stopping|translation|none and checkpoint.*",
    "enable_checkpointing": "callbacks=none (no checkpoints) and checkpoint.*",
    "default_root_dir": "paths.root",
    "plugins": "nothing: attnlab-train adds SLURM requeueing itself",
    "use_distributed_sampler": "nothing: attnlab's data modules shard the data by rank",
}


@dataclass
class TrainerConfig:
    """Keyword arguments of lightning.Trainer (see its docs for each); the defaults are
    Lightning's except where a comment says otherwise."""

    _target_: str = "lightning.Trainer"  # built by attnlab.training.trainer.build_trainer
    accelerator: str = "cpu"  # Lightning: auto
    strategy: str = "auto"
    devices: Any = 1  # Lightning: auto
    num_nodes: int = 1
    precision: str = "32-true"
    fast_dev_run: Any = False  # true or N: N batches of each split; the run is recorded "debug"
    max_epochs: int | None = None
    min_epochs: int | None = None
    max_steps: int = -1
    min_steps: int | None = None
    max_time: Any = None  # "DD:HH:MM:SS": stop training after this much wall time
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    limit_predict_batches: Any = None
    overfit_batches: Any = 0.0
    val_check_interval: Any = None  # int: every N training batches, float: fraction of an epoch
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: int = 2
    log_every_n_steps: int = 50
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    deterministic: Any = False
    benchmark: bool | None = None
    inference_mode: bool = True
    profiler: str | None = None  # simple, advanced, pytorch
    detect_anomaly: bool = False
    barebones: bool = False
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    enable_autolog_hparams: bool = True
    model_registry: str | None = None
