"""TransformerConfig: every architectural choice, and every ablation axis, is one field here.

This is the only declaration of the model's options: a choice field's `Literal` type lists its
choices (the tuples below are read from it), and attnlab-train's `model` config group is built
from this class (attnlab.config.structured), so a new switch is one field here and the code that
uses it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from attnlab.model.positions import NAMES as _ENCODINGS
from attnlab.problems import (
    choice_problem,
    integer_problem,
    not_valid,
    number_problem,
    present,
    raise_first,
)

Arch = Literal["encoder_decoder", "decoder_only"]
NormPosition = Literal["pre", "post"]
NormType = Literal["layernorm", "rmsnorm"]
PosEncoding = Literal[_ENCODINGS]  # the modules of attnlab.model.positions
Init = Literal["xavier", "depth_scaled"]
Activation = Literal["relu", "gelu"]
AttnScale = Literal["sqrt_dk", "none"]

ARCHS = get_args(Arch)
NORM_POSITIONS = get_args(NormPosition)
NORM_TYPES = get_args(NormType)
POS_ENCODINGS = get_args(PosEncoding)
INITS = get_args(Init)
ACTIVATIONS = get_args(Activation)
ATTN_SCALES = get_args(AttnScale)


def prefix_fields(message: str, prefix: str) -> str:
    """'n_heads=3 ...' -> prefix + 'n_heads=3 ...' for every TransformerConfig field named."""
    if not prefix:
        return message
    names = "|".join(sorted(TransformerConfig.__dataclass_fields__, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])({names})(?==|\.\w+\b)", rf"{prefix}\1", message)


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the Transformer. Defaults are the paper's base model (Table 3).

    d_k=None means d_model / n_heads (the paper); an explicit d_k decouples the per-head width
    from d_model, as in Table 3 rows (A) and (B). `max_len` bounds learned positions (and the
    precomputed sinusoidal table, which grows on demand); None means "no bound", legal for
    every encoding except "learned". `pos_encoding` names a module of attnlab.model.positions,
    which checks its own rules on these fields (RoPE: an even d_k; learned: a max_len;
    sinusoidal: an even d_model) when the model is built and in attnlab-train's preflight.

    Frozen: checked once, when made; `dataclasses.replace(cfg, field=...)` makes a changed copy.

    Controls for classic mistakes (defaults are the paper): `attn_scale="none"` drops Eq. 1's
    1/sqrt(d_k); `mask_source_padding=False` lets encoder self-attention and cross-attention
    attend to source pads; `mask_future=False` drops the decoder self-attention's causal mask
    (each target position sees the later ones: teacher-forced metrics look perfect while
    free-running generation, which has no future to see, fails). `activation_checkpointing`
    recomputes each layer in the backward pass (training only) to save memory; it changes no
    result. `skip_padding`: when logits are
    asked for at some positions only (Transformer.forward's logits_at, what the training and
    evaluation losses do), the position-wise work (projections, FFN, norms) runs on the real
    tokens of a padded batch only (attnlab.model.packing); the results are unchanged up to
    float rounding (with dropout, other random masks are drawn).
    """

    vocab_size: int = 37000  # from the data (attnlab-train sets it)
    arch: Arch = "encoder_decoder"  # encoder_decoder (the paper) or decoder_only
    d_model: int = 512  # width of every sublayer's input and output (Sec. 3)
    n_heads: int = 8  # h: parallel attention heads (Sec. 3.2.2)
    d_k: int | None = None  # per-head query/key/value width; null: d_model / n_heads
    d_ff: int = 2048  # inner width of the position-wise feed-forward network (Eq. 2)
    n_encoder_layers: int = 6  # N of the encoder stack (0 for decoder_only)
    n_decoder_layers: int = 6  # N of the decoder stack
    dropout: float = 0.1  # P_drop on sublayer outputs and embedding sums (Sec. 5.4)
    attn_dropout: float = 0.0  # dropout on the attention weights (not in the paper)
    # post: LayerNorm(x + Sublayer(x)), the paper; pre: x + Sublayer(LayerNorm(x))
    norm_position: NormPosition = "post"
    norm_type: NormType = "layernorm"  # layernorm or rmsnorm
    pos_encoding: PosEncoding = "sinusoidal"  # attnlab.model.positions: sinusoidal, rope, ...
    # The encoding's own options, e.g. {num_buckets: 32, max_distance: 128} for t5_bias: each
    # encoding declares and checks its own (attnlab.model.positions; model.pos.<option>=...).
    pos: dict[str, Any] = field(default_factory=dict)
    max_len: int | None = 1024  # longest position learned encodings hold; null: no bound
    share_embeddings: bool = True  # one matrix for both embeddings and the output (Sec. 3.4)
    init: Init = "xavier"  # xavier, or depth_scaled (GPT-2: N(0, 0.02), W^O and W_2 scaled)
    activation: Activation = "relu"  # the FFN's nonlinearity: relu (Eq. 2) or gelu
    pad_id: int = 0  # from the data (attnlab-train sets it)
    attn_scale: AttnScale = "sqrt_dk"  # none: no 1/sqrt(d_k) (a classic bug)
    mask_source_padding: bool = True  # false: queries see source pads (a classic bug)
    mask_future: bool = True  # false: decoder self-attention sees later positions (a classic bug)
    activation_checkpointing: bool = False  # recompute layers in backward
    skip_padding: bool = True  # position-wise work on real tokens only
    qk_norm: bool = False  # LayerNorm on each head's queries and keys (Dehghani et al., 2023)

    def __post_init__(self) -> None:
        if not isinstance(self.pos, Mapping):
            raise ValueError(
                f"pos={self.pos!r} is not valid; expected a mapping of the encoding's options"
            )
        object.__setattr__(self, "pos", dict(self.pos))  # a plain dict (an OmegaConf node, too)
        self.validate()

    @property
    def head_dim(self) -> int:
        """d_k = d_v: the width of one head."""
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_options(
        cls, options: Mapping, *, vocab_size: int, pad_id: int, prefix: str = ""
    ) -> TransformerConfig:
        """The config of `options` (its fields but vocab_size and pad_id, which come from the
        data). An unknown key or a bad value is one line that names it as `prefix` + field
        (attnlab-train's model group: "model.n_heads=3 ...")."""
        known = [f.name for f in fields(cls) if f.name not in ("vocab_size", "pad_id")]
        unknown = [k for k in options if k not in known]
        if unknown:
            raise ValueError(
                f"{prefix}{unknown[0]} is not a model option; expected one of: {', '.join(known)}"
            )
        try:
            return cls(**options, vocab_size=vocab_size, pad_id=pad_id)
        except ValueError as err:
            raise ValueError(prefix_fields(str(err), prefix)) from None

    def validate(self) -> None:
        """Raise ValueError with the first problem: one line naming the field and what is
        expected. Each check may assume the ones before it passed."""
        for check in (
            self._choice_problems,
            self._size_problems,
            self._layer_problems,
            self._dropout_problems,
            self._head_problems,
            self._flag_problems,
            self._pad_problems,
        ):
            raise_first(check())

    def _choice_problems(self) -> list[str]:
        return present(
            choice_problem("arch", self.arch, ARCHS),
            choice_problem("norm_position", self.norm_position, NORM_POSITIONS),
            choice_problem("norm_type", self.norm_type, NORM_TYPES),
            choice_problem("pos_encoding", self.pos_encoding, POS_ENCODINGS),
            choice_problem("init", self.init, INITS),
            choice_problem("activation", self.activation, ACTIVATIONS),
            choice_problem("attn_scale", self.attn_scale, ATTN_SCALES),
        )

    def _size_problems(self) -> list[str]:
        return present(
            *(
                integer_problem(name, getattr(self, name), 1)
                for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_decoder_layers")
            ),
            integer_problem("n_encoder_layers", self.n_encoder_layers, 0),
            integer_problem("d_k", self.d_k, 1) if self.d_k is not None else None,
            integer_problem("max_len", self.max_len, 1) if self.max_len is not None else None,
            integer_problem("pad_id", self.pad_id, 0),
        )

    def _layer_problems(self) -> list[str]:
        if self.arch == "encoder_decoder" and self.n_encoder_layers < 1:
            return [
                not_valid(
                    "n_encoder_layers",
                    self.n_encoder_layers,
                    "an integer >= 1 with arch='encoder_decoder'",
                )
            ]
        return []

    def _dropout_problems(self) -> list[str]:
        return present(
            number_problem("dropout", self.dropout, 0.0, 1.0),
            number_problem("attn_dropout", self.attn_dropout, 0.0, 1.0),
        )

    def _head_problems(self) -> list[str]:
        if self.d_k is None and self.d_model % self.n_heads != 0:
            return [
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads} "
                "(with d_k unset, d_k = d_model / n_heads); choose n_heads dividing d_model "
                "or set d_k explicitly"
            ]
        return []

    def _flag_problems(self) -> list[str]:
        flags = (
            "share_embeddings",
            "mask_source_padding",
            "mask_future",
            "activation_checkpointing",
            "skip_padding",
            "qk_norm",
        )
        return [
            not_valid(name, getattr(self, name), "true or false")
            for name in flags
            if not isinstance(getattr(self, name), bool)
        ]

    def _pad_problems(self) -> list[str]:
        if self.pad_id >= self.vocab_size:
            return [not_valid("pad_id", self.pad_id, f"an integer < vocab_size={self.vocab_size}")]
        return []
