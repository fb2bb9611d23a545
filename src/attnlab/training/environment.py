"""The machine a run trains on: SLURM requeueing, bf16 support of the CPU, a GPU memory share."""

from __future__ import annotations

import os
import signal
import sys

import torch

from attnlab import programs
from attnlab.runs.gpu_share import MEMORY_SHARE_ENV


def cluster_plugins() -> list:
    """Under SLURM: requeue on SIGUSR1 (Lightning saves an HPC checkpoint, resubmits the job,
    and the job's rerun resumes)."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect():
        return [SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)]
    return []


def cpu_has_native_bf16() -> bool:
    """Does this CPU compute bf16 natively (AVX512-BF16 or AMX), as oneDNN reports?"""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def warn_if_bf16_is_emulated(trainer, prog: str = programs.TRAIN) -> None:
    """One stderr line when bf16 autocast runs on a CPU that emulates bf16. On the 2-core AMD
    EPYC (AVX2) where this was written, a d_model=512 training step took 28x longer in
    bf16-mixed than in 32-true (e.g. experiment=multi30k, a GPU preset, with
    trainer.accelerator=cpu)."""
    from lightning.pytorch.accelerators import CPUAccelerator

    precision = str(trainer.precision)
    if isinstance(trainer.accelerator, CPUAccelerator) and "bf16" in precision:
        if not cpu_has_native_bf16():
            print(
                f"{prog}: warning: trainer.precision={precision} on a CPU without native bf16 "
                "(no AVX512-BF16/AMX) is emulated and many times slower than "
                "trainer.precision=32-true",
                file=sys.stderr,
            )


def apply_gpu_memory_share(environ=os.environ) -> float | None:
    """Limit this process's CUDA caching allocator to the share of each visible GPU's memory
    that attnlab-sweep gave it, so that K trials packed on one GPU cannot starve each other (a
    trial past its share fails with out-of-memory instead of taking a neighbour's). Returns the
    share applied, or None (no share set, or no CUDA)."""
    value = environ.get(MEMORY_SHARE_ENV)
    if not value or not torch.cuda.is_available():
        return None
    share = float(value)
    if not 0 < share <= 1:
        raise ValueError(f"{MEMORY_SHARE_ENV}={value} must be in (0, 1]")
    for device in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(share, device)
    return share
