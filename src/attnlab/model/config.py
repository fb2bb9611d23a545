"""TransformerConfig: every architectural choice, and every ablation axis, is one field here."""

from __future__ import annotations

from dataclasses import asdict, dataclass

ARCHS = ("encoder_decoder", "decoder_only")
NORM_POSITIONS = ("pre", "post")
NORM_TYPES = ("layernorm", "rmsnorm")
POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")
INITS = ("xavier", "depth_scaled")
ACTIVATIONS = ("relu", "gelu")


@dataclass
class TransformerConfig:
    """Hyper-parameters of the Transformer. Defaults are the paper's base model (Table 3).

    d_k=None means d_model / n_heads (the paper); an explicit d_k decouples the per-head width
    from d_model, as in Table 3 rows (A) and (B). `max_len` bounds learned positions (and the
    precomputed sinusoidal / RoPE tables, which grow on demand); None means "no bound", legal for
    every encoding except "learned".
    """

    vocab_size: int = 37000
    arch: str = "encoder_decoder"
    d_model: int = 512
    n_heads: int = 8
    d_k: int | None = None
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm_position: str = "post"
    norm_type: str = "layernorm"
    pos_encoding: str = "sinusoidal"
    max_len: int | None = 1024
    share_embeddings: bool = True
    init: str = "xavier"
    activation: str = "relu"
    pad_id: int = 0

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        """d_k = d_v: the width of one head."""
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> None:
        """Raise ValueError naming the offending field(s) and what is expected."""
        for name, choices in (
            ("arch", ARCHS),
            ("norm_position", NORM_POSITIONS),
            ("norm_type", NORM_TYPES),
            ("pos_encoding", POS_ENCODINGS),
            ("init", INITS),
            ("activation", ACTIVATIONS),
        ):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(
                    f"{name}={value!r} is not valid; expected one of: {', '.join(choices)}"
                )
        for name in ("vocab_size", "d_model", "n_heads", "d_ff"):
            _check_int(name, getattr(self, name), minimum=1)
        _check_int("n_decoder_layers", self.n_decoder_layers, minimum=1)
        _check_int("n_encoder_layers", self.n_encoder_layers, minimum=0)
        if self.arch == "encoder_decoder" and self.n_encoder_layers < 1:
            raise ValueError(
                f"n_encoder_layers={self.n_encoder_layers} with arch='encoder_decoder': "
                "an encoder-decoder needs n_encoder_layers >= 1"
            )
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0.0 <= value < 1.0)
            ):
                raise ValueError(f"{name}={value!r} is not valid; expected a number in [0, 1)")
        if self.d_k is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads} "
                    "(with d_k unset, d_k = d_model / n_heads); choose n_heads dividing d_model "
                    "or set d_k explicitly"
                )
        else:
            _check_int("d_k", self.d_k, minimum=1)
        if self.pos_encoding == "rope" and self.head_dim % 2 != 0:
            raise ValueError(
                f"pos_encoding='rope' needs an even head width, but d_k={self.head_dim} "
                f"(d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k})"
            )
        if self.max_len is not None:
            _check_int("max_len", self.max_len, minimum=1)
        elif self.pos_encoding == "learned":
            raise ValueError(
                "pos_encoding='learned' needs max_len (the number of learned positions), "
                "but max_len=None"
            )
        if self.pos_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"pos_encoding='sinusoidal' needs an even d_model (sin/cos pairs), "
                f"but d_model={self.d_model}"
            )
        if not isinstance(self.share_embeddings, bool):
            raise ValueError(
                f"share_embeddings={self.share_embeddings!r} is not valid; expected true or false"
            )
        _check_int("pad_id", self.pad_id, minimum=0)
        if self.pad_id >= self.vocab_size:
            raise ValueError(
                f"pad_id={self.pad_id} must be smaller than vocab_size={self.vocab_size}"
            )


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is not valid; expected an integer >= {minimum}")
