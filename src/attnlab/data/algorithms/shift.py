"""shift: the answer is the input moved one place to the left, its first token last (a cyclic
shift). Each answer token is the input token one position on, so the model must look up a fixed
relative offset: a probe of what each positional encoding can address."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.vocab import PAD_ID


def target(x: Tensor, lengths: Tensor, n_symbols: int) -> Tensor:
    """x (n, L) right-padded with PAD, lengths (n,) -> y (n, L): y[i, j] = x[i, (j + 1) mod
    len_i] for j < len_i, PAD after."""
    pos = torch.arange(x.size(1))
    pad = pos[None, :] >= lengths[:, None]
    idx = (pos[None, :] + 1) % lengths[:, None].clamp(min=1)
    return x.gather(1, idx).masked_fill(pad, PAD_ID)
