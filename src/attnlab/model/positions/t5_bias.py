"""T5's relative position bias (Raffel et al., 2020, Sec. 2.1): a learned scalar per head and
relative-position bucket, added to the attention scores of self-attention.

The relative position j - i (key minus query) falls in one of `num_buckets` buckets: exact ones
for small distances (the first half of a direction's buckets), then log-spaced ones up to
`max_distance`, beyond which all distances share the last bucket. In the encoder (bidirectional)
half of the buckets are for keys before the query and half for keys after it; in the decoder
(causal: only keys at or before the query are visible) all of them are for the past. One table
of (num_buckets, n_heads) per stack, shared by its layers as T5 shares it; none in
cross-attention. The options are this encoding's own (`model.pos.num_buckets`,
`model.pos.max_distance`), checked here, with T5's defaults.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.model.positions.base import PositionalEncoding, RelativePositions
from attnlab.problems import integer_problem


def relative_position_bucket(
    relative: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucket of each relative position (key - query), an integer tensor of any shape ->
    the same shape of bucket indices in [0, num_buckets). As T5's `_relative_position_bucket`."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets  # keys after the query
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)  # keys at or before the query
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    scaled = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(
        max_distance / max_exact
    )
    large = max_exact + (scaled * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class T5Bias(PositionalEncoding):
    """score_ij += b[h, bucket(j - i)]: a learned (num_buckets, n_heads) table."""

    OPTIONS = {"num_buckets": 32, "max_distance": 128}  # T5's defaults

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias = nn.Embedding(num_buckets, n_heads)  # (num_buckets, H)

    @classmethod
    def build(cls, cfg) -> T5Bias:
        options = cls.options(cfg)
        return cls(cfg.n_heads, options["num_buckets"], options["max_distance"])

    @classmethod
    def problems(cls, cfg) -> list[str]:
        options = cls.options(cfg)
        buckets = integer_problem("pos.num_buckets", options["num_buckets"], 4)
        if buckets:  # half each way in the encoder, and half of those exact
            return [f"{buckets} (t5_bias: a quarter of the buckets exact each way)"]
        low = options["num_buckets"] // 2 + 1
        distance = integer_problem("pos.max_distance", options["max_distance"], low)
        if distance:
            return [f"{distance} (past the exact buckets of pos.num_buckets)"]
        return []

    def forward(self, t: int, s: int, device=None, dtype=torch.float32) -> Tensor:
        """Bias (1, H, T, S) for T queries that are the last T of S key positions."""
        q_pos = torch.arange(s - t, s, device=device).unsqueeze(1)
        k_pos = torch.arange(s, device=device).unsqueeze(0)
        buckets = relative_position_bucket(
            k_pos - q_pos, not self.causal, self.num_buckets, self.max_distance
        )  # (T, S)
        return self.bias(buckets).permute(2, 0, 1).unsqueeze(0).to(dtype)  # (1, H, T, S)

    def relative(self, t: int, s: int, like: Tensor) -> RelativePositions:
        return RelativePositions(bias=self(t, s, like.device, like.dtype))


ENCODING = T5Bias
