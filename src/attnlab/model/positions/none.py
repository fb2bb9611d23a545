"""No positional encoding: the model sees a set, except through a causal mask (Haviv et al.,
2022: a causal decoder can count), an end-of-sequence token and the padding it may attend to."""

from __future__ import annotations

from attnlab.model.positions.base import PositionalEncoding


class NoPositions(PositionalEncoding):
    """Adds nothing and biases nothing."""


ENCODING = NoPositions
