"""The interface every positional encoding implements (see the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn


@dataclass(frozen=True)
class RelativePositions:
    """What an encoding gives one self-attention call of T queries, the last T of S positions:
    rotation: (cos, sin), each (T, d_k/2), applied to queries and new keys (RoPE), or None;
    bias: (1, H, T, S), added to the attention scores (ALiBi), or None."""

    rotation: tuple[Tensor, Tensor] | None = None
    bias: Tensor | None = None


NO_RELATIVE = RelativePositions()


class PositionalEncoding(nn.Module):
    """One way to give the model word order. Each stack owns one, built by `from_config` (its
    state, e.g. a learned table, is the stack's `positions.*`).

    Subclasses implement `build(cfg)` and override what they provide: `absolute` (added to the
    embeddings), `relative` (for self-attention), `limit` (the most positions a config's
    encoding represents), and `problems` (their own rules on the config's fields, one line each
    naming the field; `from_config` raises the first when the stack is built: on the meta
    device in the preflight's dry build).

    An encoding's own options (T5's bucket count) are `OPTIONS` (name -> default), set by the
    config's `pos` mapping (`model.pos.num_buckets=16`) and read with `options(cfg)`; a key it
    does not declare is refused. `causal` says whether the stack's self-attention is (the
    decoder's, with its causal mask): an encoding whose positions read differently each way
    (T5's buckets) asks it."""

    OPTIONS: dict = {}
    causal: bool = False

    @classmethod
    def from_config(cls, cfg, causal: bool = False) -> PositionalEncoding:
        """The encoding for `cfg` (a TransformerConfig), checked by its own rules, for a stack
        whose self-attention is `causal` or not."""
        problems = cls.option_problems(cfg) or cls.problems(cfg)
        if problems:
            raise ValueError(problems[0])
        encoding = cls.build(cfg)
        encoding.causal = causal
        return encoding

    @classmethod
    def options(cls, cfg) -> dict:
        """OPTIONS with the config's `pos` values over them."""
        return {**cls.OPTIONS, **dict(getattr(cfg, "pos", None) or {})}

    @classmethod
    def option_problems(cls, cfg) -> list[str]:
        """A key of the config's `pos` that this encoding does not declare, one line."""
        import difflib

        name = getattr(cfg, "pos_encoding", cls.__name__)
        for key in getattr(cfg, "pos", None) or {}:
            if key not in cls.OPTIONS:
                close = difflib.get_close_matches(str(key), list(cls.OPTIONS), n=1)
                hint = f" (did you mean pos.{close[0]}?)" if close else ""
                known = ", ".join(cls.OPTIONS) or "none"
                return [
                    f"pos.{key} is not an option of pos_encoding={name!r}{hint}; its options: "
                    f"{known}"
                ]
        return []

    @classmethod
    def build(cls, cfg) -> PositionalEncoding:
        return cls()

    @classmethod
    def problems(cls, cfg) -> list[str]:
        """What this encoding cannot work with in `cfg`, one line each (field=value ...)."""
        return []

    @classmethod
    def limit(cls, cfg) -> int | None:
        """The most positions the encoding of `cfg` represents; None: any number."""
        return None

    def absolute(self, t: int, offset: int = 0) -> Tensor | None:
        """(1, T, d_model) for positions offset .. offset + T - 1, added to the embeddings; None
        for an encoding that adds nothing there."""
        return None

    def relative(self, t: int, s: int, like: Tensor) -> RelativePositions:
        """For T queries that are the last T of S positions (on like's device, in its dtype)."""
        return NO_RELATIVE
