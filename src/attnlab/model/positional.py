"""Positional information: Section 3.5 (sinusoidal), learned absolute, RoPE and ALiBi.

Absolute encodings (sinusoidal, learned) are added to the scaled token embeddings at the bottom
of each stack. Relative schemes act inside self-attention: RoPE rotates queries and keys, ALiBi
biases the scores. Neither acts in encoder-decoder cross-attention: a target position and a source
position live on different axes, so their "distance" has no meaning (the decoder still sees word
order through its own self-attention, and the encoder through its own).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_encoding(
    n_positions: int,
    d_model: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)). Returns (n_positions, d_model), interleaved,
    computed in float64 and then cast to `dtype` on `device`."""
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (N, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (N, d_model/2)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(device=device, dtype=dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids (Sec. 3.5). The table grows on demand, so any length is accepted.

    The table follows the module's dtype and device, but is never merely cast: after
    `model.double()` or `model.half()` it is recomputed from float64 in the new dtype (a cast
    float32 table would be off by ~3e-8 in float64), and it grows in that dtype."""

    def __init__(self, d_model: int, max_len: int | None = None):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_encoding(max_len or 1024, d_model), persistent=False)
        self.computed_dtype = self.pe.dtype  # the dtype `pe` was computed in (not cast to)

    def forward(self, t: int, offset: int = 0) -> Tensor:
        """Returns (1, T, d_model) for positions offset .. offset + T - 1."""
        n = self.pe.size(0)
        if offset + t > n or self.pe.dtype != self.computed_dtype:
            n = 2 * (offset + t) if offset + t > n else n
            self.pe = sinusoidal_encoding(n, self.d_model, self.pe.dtype, self.pe.device)
            self.computed_dtype = self.pe.dtype
        return self.pe[offset : offset + t].unsqueeze(0)


class LearnedPositionalEmbedding(nn.Module):
    """Learned absolute positions (the paper's Table 3 row (E) alternative): one vector per
    position up to max_len; longer sequences are an error, not a silent wrap."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, t: int, offset: int = 0) -> Tensor:
        if offset + t > self.max_len:
            raise ValueError(
                f"sequence of length {offset + t} exceeds max_len={self.max_len} "
                "of the learned positional embedding"
            )
        pos = torch.arange(offset, offset + t, device=self.embedding.weight.device)
        return self.embedding(pos).unsqueeze(0)  # (1, T, d_model)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al., 2021, Eq. 34): rotate each pair (x_{2i}, x_{2i+1}) of a query or key at
    position m by the angle m * theta_i, theta_i = base^(-2i/d). Then <R_m q, R_n k> depends on
    q, k and the offset m - n only.

    forward() computes the cos/sin tables for the positions of one forward pass; the stack calls
    it once and hands the tables to every layer, which rotates with apply_rope()."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got d_k={head_dim}")
        self.head_dim, self.base = head_dim, base

    def forward(self, t: int, offset: int = 0, device=None) -> tuple[Tensor, Tensor]:
        """cos, sin of m * theta_i, each (T, d/2) float32, for positions m = offset .. offset +
        T - 1. (Computed in float32 whatever the model's dtype: angles grow with m.)"""
        two_i = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device)
        inv_freq = self.base ** (-two_i / self.head_dim)  # theta_i, (d/2,)
        pos = torch.arange(offset, offset + t, device=device, dtype=torch.float32)
        angle = torch.outer(pos, inv_freq)  # (T, d/2)
        return angle.cos(), angle.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, H, T, d) by the tables cos, sin (T, d/2) of RotaryEmbedding: same shape."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, d/2)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)


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


class ALiBi(nn.Module):
    """Attention with Linear Biases: score_ij += -m_h * |i - j|.

    In causal self-attention only j <= i is visible, so this is exactly Press et al.'s bias. In the
    (bidirectional) encoder we use the symmetric |i - j|, a common extension that does not by
    itself tell left from right (the model can still locate tokens relative to the sequence
    boundaries). Not applied in cross-attention (see the module docstring)."""

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, t: int, s: int, device=None, dtype=torch.float32) -> Tensor:
        """Bias (1, H, T, S) for T queries that are the last T of S key positions."""
        q_pos = torch.arange(s - t, s, device=device).unsqueeze(1)
        k_pos = torch.arange(s, device=device).unsqueeze(0)
        distance = (q_pos - k_pos).abs().to(dtype)  # (T, S)
        return -self.slopes.to(device=device, dtype=dtype)[None, :, None, None] * distance
