"""RoPE (Su et al., 2021): relative positions by rotating queries and keys in self-attention."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.model.positions.base import PositionalEncoding, RelativePositions
from attnlab.problems import not_valid


class RotaryEmbedding(PositionalEncoding):
    """RoPE (Su et al., 2021, Eq. 34): rotate each pair (x_{2i}, x_{2i+1}) of a query or key at
    position m by the angle m * theta_i, theta_i = base^(-2i/d). Then <R_m q, R_n k> depends on
    q, k and the offset m - n only.

    forward() computes the cos/sin tables for the positions of one forward pass; the stack calls
    it once (through `relative`) and hands the tables to every layer, which rotates with
    apply_rope()."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:  # its one rule, asked once: here, whether built from a config or not
            raise ValueError(
                not_valid(
                    "d_k",
                    head_dim,
                    "an even head width with pos_encoding='rope' (d_k = d_model / n_heads "
                    "unless set)",
                )
            )
        self.head_dim, self.base = head_dim, base

    @classmethod
    def build(cls, cfg) -> RotaryEmbedding:
        return cls(cfg.head_dim)

    def forward(self, t: int, offset: int = 0, device=None) -> tuple[Tensor, Tensor]:
        """cos, sin of m * theta_i, each (T, d/2) float32, for positions m = offset .. offset +
        T - 1. (Computed in float32 whatever the model's dtype: angles grow with m.)"""
        two_i = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device)
        inv_freq = self.base ** (-two_i / self.head_dim)  # theta_i, (d/2,)
        pos = torch.arange(offset, offset + t, device=device, dtype=torch.float32)
        angle = torch.outer(pos, inv_freq)  # (T, d/2)
        return angle.cos(), angle.sin()

    def relative(self, t: int, s: int, like: Tensor) -> RelativePositions:
        return RelativePositions(rotation=self(t, s - t, like.device))


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, H, T, d) by the tables cos, sin (T, d/2) of RotaryEmbedding: same shape."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, d/2)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)


ENCODING = RotaryEmbedding
