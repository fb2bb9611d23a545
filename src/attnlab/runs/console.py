"""attnlab-train's own lines: printed from rank zero and logged into the run's train.log."""

from __future__ import annotations

import logging

from attnlab import programs

PROG = programs.TRAIN

_log = logging.getLogger("attnlab_train")  # under Hydra: into train.log only (conf/train.yaml)


def say(message: str) -> None:
    """One line of attnlab-train's output, from rank zero only: printed, and logged into the
    run's train.log."""
    from lightning.pytorch.utilities import rank_zero_only  # (importing this module stays light)

    if rank_zero_only.rank == 0:
        print(f"{PROG}: {message}")
        _log.info(message)
