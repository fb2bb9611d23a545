"""Weights & Biases around a run: whether it can go online, its run id, and closing it with the
run's final status. wandb is imported only when a function needs it."""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit


def wandb_mode() -> str:
    return os.environ.get("WANDB_MODE", "").lower()


def wandb_offline_reason(force_offline: bool = False) -> str | None:
    """Why W&B must run offline (None: it can go online): WANDB_MODE, logger.wandb.offline,
    no API key (env WANDB_API_KEY or ~/.netrc), or api.wandb.ai unreachable."""
    mode = wandb_mode()
    if mode in ("offline", "dryrun", "disabled"):
        return f"WANDB_MODE={mode}"
    if force_offline:
        return "logger.wandb.offline=true"
    base_url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not has_wandb_api_key(base_url):
        return "no W&B API key: set WANDB_API_KEY or run `wandb login`"
    if not reachable(base_url):
        return f"cannot reach {base_url}"
    return None


def has_wandb_api_key(base_url: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return bool(read_netrc_auth(host=base_url))
    except Exception:  # no netrc, unreadable netrc, or an older wandb layout
        return False


def reachable(url: str, timeout: float = 2.0) -> bool:
    """Can we open a TCP connection to the host of `url` within `timeout` (DNS included)?"""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ok = []

    def connect() -> None:
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _wandb_loggers(loggers) -> list:
    try:
        from lightning.pytorch.loggers import WandbLogger
    except ImportError:
        return []
    return [logger for logger in loggers if isinstance(logger, WandbLogger)]


def wandb_id(loggers) -> str | None:
    """The W&B run id of the first W&B logger, or None."""
    for logger in _wandb_loggers(loggers):
        return logger.experiment.id
    return None


def finish_wandb(loggers, results: dict) -> None:
    """Final and best metrics, the status and the peak learning rate into the W&B summary; close
    the run (multirun
    jobs share one process) with the status's exit code (attnlab.runs.status), so that W&B
    marks failed, diverged and interrupted runs as failed."""
    from attnlab.runs.status import exit_code

    for logger in _wandb_loggers(loggers):
        if logger._experiment is None:
            continue
        import wandb

        summary = {**results.get("metrics", {}), "status": results["status"]}
        for key in ("diverged_step", "peak_lr"):  # peak_lr: an LR sweep's axis (wandb_view.py)
            if results.get(key) is not None:
                summary[key] = results[key]
        logger.experiment.summary.update(summary)
        wandb.finish(exit_code=exit_code([results["status"]]))
