"""The loss normalizations and torch.compile's modes, in a module without torch or Lightning
(attnlab-train --help loads no torch); attnlab.training.arguments checks the module's arguments
against them."""

from __future__ import annotations

# What the summed token losses of a training batch are divided by: the target tokens of the
# global batch (all DDP ranks) or of this rank's share (attnlab.training.module).
LOSS_NORMALIZATIONS = ("tokens_global", "tokens")

# torch.compile's modes (its `mode` argument), model.compile_mode: reduce-overhead adds CUDA
# graphs (a GPU; static shapes: data.pad_to_multiple), the max-autotune ones search kernels.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
