"""The training layer's choices, in one light module (no torch, no Lightning): the config schema
reads them to type its fields (attnlab-train --help loads no torch), the training code to check
its arguments."""

from __future__ import annotations

# What the summed token losses of a training batch are divided by: the target tokens of the
# global batch (all DDP ranks) or of this rank's share (attnlab.training.module).
LOSS_NORMALIZATIONS = ("tokens_global", "tokens")
OPTIMIZERS = ("adam", "adamw")  # attnlab.training.optimizer
