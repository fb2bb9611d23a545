"""Learned absolute positions (the paper's Table 3 row (E) alternative), added to the
embeddings: one vector per position up to max_len."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.model.positions.base import PositionalEncoding
from attnlab.problems import not_valid


class LearnedPositionalEmbedding(PositionalEncoding):
    """One learned vector per position up to max_len; longer sequences are an error, not a
    silent wrap. Positions beyond the training lengths never receive a gradient."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    @classmethod
    def build(cls, cfg) -> LearnedPositionalEmbedding:
        return cls(cfg.d_model, cfg.max_len)

    @classmethod
    def problems(cls, cfg) -> list[str]:
        if cfg.max_len is None:
            return [not_valid("max_len", None, "an integer >= 1 with pos_encoding='learned'")]
        return []

    @classmethod
    def limit(cls, cfg) -> int | None:
        return cfg.max_len

    def forward(self, t: int, offset: int = 0) -> Tensor:
        if offset + t > self.max_len:
            raise ValueError(
                f"sequence of length {offset + t} exceeds max_len={self.max_len} "
                "of the learned positional embedding"
            )
        pos = torch.arange(offset, offset + t, device=self.embedding.weight.device)
        return self.embedding(pos).unsqueeze(0)  # (1, T, d_model)

    def absolute(self, t: int, offset: int = 0) -> Tensor:
        return self(t, offset)


ENCODING = LearnedPositionalEmbedding
