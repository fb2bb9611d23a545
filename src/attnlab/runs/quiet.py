"""Known-harmless console lines, silenced once here, each with the reason.

A run's console should show attnlab's own lines, the progress bar and real warnings. Lightning
and W&B add lines on every run that tell a user nothing about it:

- Lightning's accelerator census ("GPU available: False, used: False", "TPU available: ...",
  "HPU available: ..."): the device a run uses is in its config (`trainer.accelerator`) and in
  results.json, and a device that cannot be used is refused before the run starts.
- Lightning's advertisement for litlogger ("Tip: For seamless cloud logging ...").
- Lightning's note that a model summary callback is already configured: attnlab's
  ParamsSummary, on purpose.

- Lightning's warning "Checkpoint directory ... exists and is not empty": a run directory holds
  checkpoints only when this run wrote them, and then the run is resuming (resume=auto;
  resume=never starts in a new directory), which is exactly when the folder is not empty.

Lines are dropped by a logging.Filter on the logger that emits them, so nothing else from that
logger is lost; `install()` is idempotent.
"""

from __future__ import annotations

import logging
import warnings

HARMLESS_PREFIXES = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "💡 Tip: For seamless cloud logging",
    # attnlab's ParamsSummary (training/summary.py) replaces Lightning's default on purpose
    "Trainer already configured with model summary callbacks",
)
# Lightning's rank_zero_info writes through this logger (lightning.pytorch.utilities.rank_zero).
LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)


class DropHarmless(logging.Filter):
    """Drops the records whose message starts with one of HARMLESS_PREFIXES."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(HARMLESS_PREFIXES)


_FILTER = DropHarmless()


def install() -> None:
    """Silence the known-harmless lines (see the module docstring)."""
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
