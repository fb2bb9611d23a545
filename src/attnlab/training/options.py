"""The loss normalizations, in a module without torch or Lightning: the config schema types
loss.normalize with them (attnlab-train --help loads no torch), attnlab.training.module checks
its argument against them."""

from __future__ import annotations

# What the summed token losses of a training batch are divided by: the target tokens of the
# global batch (all DDP ranks) or of this rank's share (attnlab.training.module).
LOSS_NORMALIZATIONS = ("tokens_global", "tokens")
