"""copy: the answer is the input."""

from __future__ import annotations

from torch import Tensor


def target(x: Tensor, lengths: Tensor, n_symbols: int) -> Tensor:
    """x (n, L) right-padded with PAD, lengths (n,) -> y (n, L) = x."""
    return x.clone()
