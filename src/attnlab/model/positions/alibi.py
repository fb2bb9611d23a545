"""ALiBi (Press et al., 2022): relative positions as a linear bias on the attention scores."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab.model.positions.base import PositionalEncoding, RelativePositions


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi head slopes (Press et al., 2022, Sec. 3): the geometric sequence starting at
    2^(-8/n) with that ratio; for n not a power of two, the slopes of the closest smaller power
    of two followed by every other slope of the next power of two. Returns (n_heads,)."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_two(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


class ALiBi(PositionalEncoding):
    """Attention with Linear Biases: score_ij += -m_h * |i - j|.

    In causal self-attention only j <= i is visible, so this is exactly Press et al.'s bias. In the
    (bidirectional) encoder we use the symmetric |i - j|, a common extension that does not by
    itself tell left from right (the model can still locate tokens relative to the sequence
    boundaries). Not applied in cross-attention (see the package's docstring)."""

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    @classmethod
    def build(cls, cfg) -> ALiBi:
        return cls(cfg.n_heads)

    def forward(self, t: int, s: int, device=None, dtype=torch.float32) -> Tensor:
        """Bias (1, H, T, S) for T queries that are the last T of S key positions."""
        q_pos = torch.arange(s - t, s, device=device).unsqueeze(1)
        k_pos = torch.arange(s, device=device).unsqueeze(0)
        distance = (q_pos - k_pos).abs().to(dtype)  # (T, S)
        return -self.slopes.to(device=device, dtype=dtype)[None, :, None, None] * distance

    def relative(self, t: int, s: int, like: Tensor) -> RelativePositions:
        return RelativePositions(bias=self(t, s, like.device, like.dtype))


ENCODING = ALiBi
