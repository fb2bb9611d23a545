"""The loggers of a run: metrics.csv always; W&B (offline by itself) and TensorBoard when
configured (`logger=wandb`, `logger=tensorboard`, `logger=[wandb,tensorboard]`). A resumed run
continues their history (attnlab.runs.history)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnlab import programs
from attnlab.runs.history import logged_rows, wandb_segments
from attnlab.runs.identity import wandb_run_id
from attnlab.runs.status import JOB_TYPE_ENV
from attnlab.runs.wandb import wandb_mode, wandb_offline_reason

PROG = programs.TRAIN
TENSORBOARD_EXTRA = 'pip install "attnlab[tensorboard]"'


@dataclass(frozen=True)
class RunForLoggers:
    """What every logger of a run is given besides its own config."""

    run_dir: Path
    name: str
    group: str | None
    tags: list[str]
    previous: list[dict]  # the rows a resumed run already logged (attnlab.runs.history)


def build_loggers(cfg, run_dir: Path, name: str) -> list:
    """CSV (always: <run_dir>/metrics.csv), then each logger cfg["logger"] configures (`cfg`:
    the run's config, plain or composed): its node is
    a partial of its `_target_` (conf/logger/*.yaml), called with the run; a builder may return
    None (W&B under WANDB_MODE=disabled)."""
    from hydra.utils import instantiate

    from attnlab.runs.lightning_loggers import ContinuingCSVLogger

    previous = logged_rows(run_dir)  # read before the CSV logger continues the file
    run = RunForLoggers(run_dir, name, cfg["group"], list(cfg["tags"]), previous)
    loggers: list = [ContinuingCSVLogger(run_dir)]
    for node in cfg["logger"].values():
        if node is not None:
            loggers.append(instantiate(node)(run))
    return [logger for logger in loggers if logger is not None]


def wandb_logger(run: RunForLoggers, project: str, entity: str | None = None,
                 offline: bool = False, log_model: bool = False):  # fmt: skip
    """Lightning's WandbLogger continuing the run's history, started here (wandb.init; offline
    when forced or without an API key or network, with one line saying how to upload), or None
    under WANDB_MODE=disabled."""
    from lightning.pytorch.utilities import rank_zero_only

    if wandb_mode() == "disabled":
        return None
    with _keep_env("WANDB_MODE"):  # Lightning sets WANDB_MODE=dryrun for offline runs
        logger, offline_reason = _wandb_logger(run, project, entity, offline, log_model)
        logger.experiment  # noqa: B018  wandb.init, here (rank 0; Lightning would later)
    if offline_reason and rank_zero_only.rank == 0:
        print(f"{PROG}: W&B is offline ({offline_reason}); upload later with: "
              f"{upload_command(run.run_dir, logger.experiment.id)}")  # fmt: skip
    return logger


def tensorboard_logger(run: RunForLoggers, subdir: str = "tensorboard"):
    """Lightning's TensorBoardLogger into <run_dir>/<subdir>, replaying a resumed run's rows."""
    from attnlab.runs.lightning_loggers import ReplayingTensorBoardLogger

    return ReplayingTensorBoardLogger(run.run_dir, run.previous, subdir)


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


def _wandb_logger(run: RunForLoggers, project, entity, offline: bool, log_model: bool):
    import wandb

    from attnlab.runs.lightning_loggers import ReplayingWandbLogger

    offline_reason = wandb_offline_reason(force_offline=offline)
    # Offline, wandb's own console output is replaced by the one line wandb_logger prints.
    settings = wandb.Settings(silent=offline_reason is not None)
    logger = ReplayingWandbLogger(
        run.previous,
        name=run.name,
        project=project,
        entity=entity,
        group=run.group,
        tags=run.tags,
        save_dir=str(run.run_dir),
        offline=offline_reason is not None,
        log_model=log_model,
        settings=settings,
        id=wandb_run_id(run.run_dir),  # the same run directory continues the same W&B run
        resume="allow",
        job_type=os.environ.get(JOB_TYPE_ENV) or None,  # a study's stage (attnlab-sweep sets it)
    )
    return logger, offline_reason
