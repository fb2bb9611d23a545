"""What lightning.Trainer would reject at start-up (an accelerator this machine lacks, devices
out of range, a precision the device does not support, a malformed max_time, ...), found before
anything is written by building a Trainer from cfg.trainer alone, as a dry run.

The offending key is the first one that, added to those before it, makes Lightning refuse; the
device keys come first, as Lightning resolves them first.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

FIRST = ("accelerator", "devices", "num_nodes", "strategy", "precision")
# Launchers that run the jobs on other machines: their devices are not this machine's.
REMOTE_LAUNCHERS = ("slurm", "submitit_slurm")


def trainer_problem(trainer: dict) -> str | None:
    """None if lightning.Trainer accepts these arguments here, else one line naming the key."""
    ordered = [k for k in FIRST if k in trainer] + [k for k in trainer if k not in FIRST]
    error = _refusal(trainer)
    if error is None:
        return None
    key = next(
        (k for i, k in enumerate(ordered) if _refusal({j: trainer[j] for j in ordered[: i + 1]})),
        ordered[-1],
    )
    reason = " ".join(str(error).split())
    return f"trainer.{key}={trainer[key]!r} is not valid here: {reason}"


def _refusal(kwargs: dict) -> Exception | None:
    import lightning as L

    try:
        with _quiet():
            L.Trainer(**kwargs, logger=False, enable_checkpointing=False, callbacks=[])
    except Exception as err:  # MisconfigurationException, ValueError, RuntimeError, ...
        return err
    return None


@contextmanager
def _quiet():
    """Without Lightning's start-up lines (GPU available: ..., etc.) and warnings."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
