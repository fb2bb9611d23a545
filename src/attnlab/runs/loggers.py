"""The loggers of a run: metrics.csv always; W&B (offline by itself) and TensorBoard when
configured (`logger=wandb`, `logger=tensorboard`, `logger=[wandb,tensorboard]`). A resumed run
continues their history (attnlab.runs.history)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from attnlab import programs
from attnlab.runs.history import logged_rows, wandb_segments
from attnlab.runs.identity import wandb_run_id
from attnlab.runs.wandb import skipping_unused_launch_inputs, wandb_mode, wandb_offline_reason

PROG = programs.TRAIN
TENSORBOARD_EXTRA = 'pip install "attnlab[tensorboard]"'


def build_loggers(cfg, run_dir: Path, name: str) -> list:
    """CSV (always: <run_dir>/metrics.csv), then W&B and TensorBoard where cfg.logger sets them."""
    from lightning.pytorch.utilities import rank_zero_only

    from attnlab.runs.lightning_loggers import ContinuingCSVLogger, ReplayingTensorBoardLogger

    previous = logged_rows(run_dir)  # read before the CSV logger continues the file
    loggers: list = [ContinuingCSVLogger(run_dir)]
    wandb_cfg = cfg.logger.get("wandb")
    if wandb_cfg is not None and wandb_mode() != "disabled":  # WANDB_MODE=disabled: no W&B
        with _keep_env("WANDB_MODE"):  # Lightning sets WANDB_MODE=dryrun for offline runs
            logger, offline_reason = _wandb_logger(cfg, wandb_cfg, run_dir, name, previous)
            with skipping_unused_launch_inputs():
                logger.experiment  # noqa: B018  wandb.init, here (rank 0; Lightning would later)
            loggers.append(logger)
            if offline_reason and rank_zero_only.rank == 0:
                print(f"{PROG}: W&B is offline ({offline_reason}); upload later with: "
                      f"{upload_command(run_dir, logger.experiment.id)}")  # fmt: skip
    tensorboard_cfg = cfg.logger.get("tensorboard")
    if tensorboard_cfg is not None:
        loggers.append(ReplayingTensorBoardLogger(run_dir, previous, tensorboard_cfg.subdir))
    return loggers


@contextmanager
def _keep_env(name: str):
    """Restore the environment variable `name` after the block (the next run of a multirun in
    this process must not see what the previous one's logger set)."""
    before = os.environ.get(name)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def upload_command(run_dir: Path, run_id: str) -> str:
    """`wandb sync` for every offline attempt of the run, oldest first, into one W&B run."""
    segments = " ".join(str(s) for s in wandb_segments(run_dir, run_id))
    return f"wandb sync --id {run_id} {segments}"


def _wandb_logger(cfg, wandb_cfg, run_dir: Path, name: str, previous: list[dict]):
    import wandb

    from attnlab.runs.lightning_loggers import ReplayingWandbLogger

    offline_reason = wandb_offline_reason(force_offline=wandb_cfg.offline)
    # Offline, wandb's own console output is replaced by the one line build_loggers prints.
    settings = wandb.Settings(silent=offline_reason is not None)
    logger = ReplayingWandbLogger(
        previous,
        name=name,
        project=wandb_cfg.project,
        entity=wandb_cfg.entity,
        group=cfg.group,
        tags=list(cfg.tags),
        save_dir=str(run_dir),
        offline=offline_reason is not None,
        log_model=wandb_cfg.log_model,
        settings=settings,
        id=wandb_run_id(run_dir),  # the same run directory continues the same W&B run
        resume="allow",
    )
    return logger, offline_reason
