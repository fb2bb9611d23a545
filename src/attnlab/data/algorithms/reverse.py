"""reverse: the answer is the input read backwards."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.vocab import PAD_ID


def target(x: Tensor, lengths: Tensor, n_symbols: int) -> Tensor:
    """x (n, L) right-padded with PAD, lengths (n,) -> y (n, L): y[i, j] = x[i, len_i - 1 - j]
    for j < len_i, PAD after."""
    pos = torch.arange(x.size(1))
    pad = pos[None, :] >= lengths[:, None]
    idx = (lengths[:, None] - 1 - pos[None, :]).clamp(min=0)
    return x.gather(1, idx).masked_fill(pad, PAD_ID)
