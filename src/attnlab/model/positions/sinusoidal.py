"""Section 3.5: fixed sinusoids, added to the embeddings (the paper's encoding)."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.model.positions.base import PositionalEncoding
from attnlab.problems import not_valid


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


class SinusoidalPositionalEncoding(PositionalEncoding):
    """Fixed sinusoids (Sec. 3.5). The table grows on demand, so any length is accepted.

    The table follows the module's dtype and device, but is never merely cast: after
    `model.double()` or `model.half()` it is recomputed from float64 in the new dtype (a cast
    float32 table would be off by ~3e-8 in float64), and it grows in that dtype."""

    def __init__(self, d_model: int, max_len: int | None = None):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_encoding(max_len or 1024, d_model), persistent=False)
        self.computed_dtype = self.pe.dtype  # the dtype `pe` was computed in (not cast to)

    @classmethod
    def build(cls, cfg) -> SinusoidalPositionalEncoding:
        return cls(cfg.d_model, cfg.max_len)

    @classmethod
    def problems(cls, cfg) -> list[str]:
        if cfg.d_model % 2:
            expected = "an even number with pos_encoding='sinusoidal'"
            return [not_valid("d_model", cfg.d_model, expected)]
        return []

    def forward(self, t: int, offset: int = 0) -> Tensor:
        """Returns (1, T, d_model) for positions offset .. offset + T - 1."""
        n = self.pe.size(0)
        if offset + t > n or self.pe.dtype != self.computed_dtype:
            n = 2 * (offset + t) if offset + t > n else n
            self.pe = sinusoidal_encoding(n, self.d_model, self.pe.dtype, self.pe.device)
            self.computed_dtype = self.pe.dtype
        return self.pe[offset : offset + t].unsqueeze(0)

    def absolute(self, t: int, offset: int = 0) -> Tensor:
        return self(t, offset)


ENCODING = SinusoidalPositionalEncoding
