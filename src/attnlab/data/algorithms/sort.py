"""sort: the answer is the input's symbols in ascending order."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.vocab import NUM_SPECIAL, PAD_ID


def target(x: Tensor, lengths: Tensor, n_symbols: int) -> Tensor:
    """x (n, L) right-padded with PAD, lengths (n,) -> y (n, L): each row's first len_i symbols
    sorted ascending, PAD after (pads sort last as a symbol above every real one)."""
    pad = torch.arange(x.size(1))[None, :] >= lengths[:, None]
    big = NUM_SPECIAL + n_symbols
    return x.masked_fill(pad, big).sort(dim=1).values.masked_fill(pad, PAD_ID)
