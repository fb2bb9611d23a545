"""The Trainer: the group `trainer` names a class (`_target_`, lightning.Trainer or a subclass)
and its keyword arguments; `trainer_problem` says why that class would refuse them on this
machine (asked when the run is built, so the preflight's dry build asks it too), and
`build_trainer` makes it with what attnlab adds itself (callbacks, loggers, the run directory,
SLURM requeueing: attnlab.config.trainer_schema.ATTNLAB_SETS).
"""

from __future__ import annotations

import logging
from pathlib import Path

from attnlab.problems import integer_problem, number_problem, present
from attnlab.runs.console import PROG, say


def build_trainer(cls, plain: dict, callbacks: list, run_dir: Path, loggers: list):
    """`cls` (trainer._target_) from cfg["trainer"]'s other keys, with the callbacks, preemption
    handling, RNG state in checkpoints, the progress bar and the summary; (trainer,
    preemption)."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities import rank_zero_only

    from attnlab.runs import quiet
    from attnlab.training.callbacks import LoggingStep, Preemption, RNGState
    from attnlab.training.environment import (
        apply_gpu_memory_share,
        cluster_plugins,
        warn_if_bf16_is_emulated,
    )
    from attnlab.training.progress import progress_bar
    from attnlab.training.pruning import sweep_pruning
    from attnlab.training.short_runs import validation_interval, warmup_warning
    from attnlab.training.stall_stop import stall_stop
    from attnlab.training.summary import ParamsSummary

    preemption = Preemption(run_dir / "checkpoints")
    callbacks = [*callbacks, preemption, RNGState(), LoggingStep()]
    callbacks += sweep_pruning()  # a trial of a searched sweep (attnlab.sweeps.search)
    callbacks += stall_stop()  # a study's stage-1 trial with tune.stop_stalled (sweeps.staged)
    kwargs = {k: v for k, v in plain["trainer"].items() if k != "_target_"}
    callbacks += progress_bar(kwargs.get("enable_progress_bar", True))
    if kwargs.get("enable_model_summary", True):
        callbacks.append(ParamsSummary())  # Lightning's, without a FLOPs column of zeros
    quiet.install()  # Lightning's GPU/TPU census and litlogger tip (attnlab.runs.quiet)
    interval, why = validation_interval(
        kwargs.get("val_check_interval"), kwargs.get("max_steps"),
        kwargs.get("accumulate_grad_batches", 1),
    )  # fmt: skip
    kwargs["val_check_interval"] = interval
    for line in (why, warmup_warning(plain["scheduler"], kwargs.get("max_steps"))):
        if line:
            say(line)
    trainer = cls(
        **kwargs,
        logger=loggers,
        callbacks=callbacks,
        # checkpoints come from a ModelCheckpoint in `callbacks` only (callbacks=none: none)
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        default_root_dir=str(run_dir),
        use_distributed_sampler=False,  # the data modules shard by rank themselves
        plugins=cluster_plugins(),
    )
    if trainer.fast_dev_run:
        trainer.loggers = loggers  # Lightning mutes loggers here; metrics.csv is always written
    if rank_zero_only.rank == 0:
        warn_if_bf16_is_emulated(trainer, PROG)
    apply_gpu_memory_share()  # attnlab-sweep --trials-per-gpu K: 1/K of each GPU's memory
    return trainer, preemption


_FP16_MIXED = ("16-mixed", "16")
# Lightning's order of resolving the Trainer's arguments: the device keys first.
_FIRST = ("accelerator", "devices", "num_nodes", "strategy", "precision")


def trainer_problem(cls, trainer: dict, optim: dict, local: bool = True) -> str | None:
    """Why `cls` (trainer._target_) would refuse `trainer` (cfg.trainer) on this machine, or
    None: the few values Lightning takes but cannot be meant (a negative clipping threshold,
    fp16 on a CPU, a fused optimizer under fp16's scaler), then the class's own refusal, found
    by building one from these arguments alone; the offending key is the first that, added
    to those before it, is refused. Not `local` (a remote launcher's jobs): the device keys are
    the other machine's, and only the values are checked."""
    clip = trainer.get("gradient_clip_val")
    problems = present(
        None if clip is None else number_problem("trainer.gradient_clip_val", clip, 0.0),
        integer_problem(
            "trainer.accumulate_grad_batches", trainer.get("accumulate_grad_batches", 1), 1
        ),
        _fused_problem(optim, trainer),
    )
    if problems or not local:
        return problems[0] if problems else None
    trainer = {k: v for k, v in trainer.items() if k != "_target_"}
    precision = str(trainer.get("precision", "32-true"))
    if precision in _FP16_MIXED and _accelerator(trainer) == "cpu":
        return (
            f"trainer.precision={precision} is not supported on a CPU (Lightning would use "
            "bf16-mixed instead); expected 32-true or bf16-mixed, or trainer.accelerator=gpu"
        )
    if _refusal(cls, trainer) is None:
        return None
    ordered = [k for k in _FIRST if k in trainer] + [k for k in trainer if k not in _FIRST]
    for i, key in enumerate(ordered):
        error = _refusal(cls, {k: trainer[k] for k in ordered[: i + 1]})
        if error is not None:
            return (
                f"trainer.{key}={trainer[key]!r} is not valid here: {' '.join(str(error).split())}"
            )
    return None


def _fused_problem(optim: dict, trainer: dict) -> str | None:
    """A fused optimizer unscales 16-mixed's gradients inside its step, too late for clipping
    (a rule between the optimizer and the Trainer, asked by their builder)."""
    if optim.get("fused") and str(trainer.get("precision")) in _FP16_MIXED:
        return (
            f"optim.fused=true does not work with trainer.precision={trainer['precision']} "
            "(its gradient scaler must unscale before clipping); expected optim.fused=null or "
            "false, or trainer.precision=bf16-mixed"
        )
    return None


def _accelerator(trainer: dict) -> str:
    accelerator = str(trainer.get("accelerator", "auto"))
    if accelerator == "auto":
        import torch

        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    return accelerator


def _refusal(cls, kwargs: dict) -> Exception | None:
    """`cls`'s exception for these arguments alone (quietly), or None."""
    import warnings

    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls(**kwargs, logger=False, enable_checkpointing=False, callbacks=[])
    except Exception as err:  # MisconfigurationException, ValueError, RuntimeError, ...
        return err
    finally:
        logger.setLevel(level)
    return None
