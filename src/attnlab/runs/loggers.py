"""The loggers of a run: metrics.csv always, W&B when configured (offline by itself)."""

from __future__ import annotations

import warnings
from pathlib import Path

from attnlab.runs.identity import wandb_run_id
from attnlab.runs.wandb import wandb_mode, wandb_offline_reason

PROG = "attnlab-train"


def build_loggers(cfg, run_dir: Path, name: str) -> list:
    """CSV (always: <run_dir>/metrics.csv) and W&B when cfg.logger.wandb is set."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.utilities import rank_zero_only

    # The run directory already holds config.yaml: not a stale log directory.
    warnings.filterwarnings(
        "ignore", message="Experiment logs directory .* exists and is not empty"
    )
    loggers: list = [CSVLogger(save_dir=str(run_dir), name="", version="")]
    wandb_cfg = cfg.logger.get("wandb")
    if wandb_cfg is not None:
        logger, offline_reason = _wandb_logger(cfg, wandb_cfg, run_dir, name)
        loggers.append(logger)
        if offline_reason and rank_zero_only.rank == 0 and wandb_mode() != "disabled":
            run_path = Path(logger.experiment.dir).parent  # .../wandb/offline-run-<id>
            print(
                f"{PROG}: W&B is offline ({offline_reason}); upload later with: "
                f"wandb sync {run_path}"
            )
    return loggers


def _wandb_logger(cfg, wandb_cfg, run_dir: Path, name: str):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    offline_reason = wandb_offline_reason(force_offline=wandb_cfg.offline)
    # Offline, wandb's own console output is replaced by the one line build_loggers prints.
    settings = wandb.Settings(silent=offline_reason is not None)
    logger = WandbLogger(
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
