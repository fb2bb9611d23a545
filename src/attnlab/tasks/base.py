"""The interface every task implements (attnlab.tasks)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn


class Task:
    """How batches of one kind meet the model. Subclasses set the class attributes and
    implement `inputs`, `targets` and `predict`.

    keys: the tensors every batch carries; source_key: the tokens the model reads first (the
    attention maps' key axis); query_key: a second token axis (a decoder's input), or None;
    arch: the model.arch whose inputs these batches are (a data module batches sentence pairs
    in the format of the model's arch: attnlab.data.pairs).
    """

    name: str = ""
    arch: str = ""
    keys: tuple[str, ...] = ()
    source_key: str = ""
    query_key: str | None = None

    def arch_problem(self, arch: str) -> str | None:
        """Unless a model.arch=`arch` can read this task's batches."""
        if arch == self.arch:
            return None
        return (
            f"model.arch={arch!r} cannot read data task {self.name!r} batches; "
            f"expected model.arch={self.arch!r} (or data that batches for {arch})"
        )

    def fit_problem(self, datamodule, config) -> str | None:
        """Unless `datamodule` (whose batches are this task's) can feed a model of `config` (a
        TransformerConfig): the model's arch reads this task's batches (a token stream cannot
        train an encoder-decoder; sentence pairs follow model.arch, attnlab.data.pairs), and
        its positional encoding represents the data's longest sequence (`max_seq_len`, where
        the data states one). The run's builder asks (attnlab.pipeline.build)."""
        if config.arch != self.arch:
            return _arch_hint(datamodule, self.name, config.arch)
        return _positions_problem(getattr(datamodule, "max_seq_len", None), config)

    def inputs(self, batch: dict) -> tuple[Tensor, ...]:
        """The model's teacher-forced inputs: model(*inputs) gives logits (B, T, V)."""
        raise NotImplementedError

    def targets(self, batch: dict) -> Tensor:
        """The targets (B, T) of those logits, PAD where there is none."""
        raise NotImplementedError

    def inputs_and_targets(self, batch: dict) -> tuple[tuple[Tensor, ...], Tensor]:
        return self.inputs(batch), self.targets(batch)

    def predict(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, pad_id: int
    ) -> tuple[Tensor, Tensor] | None:
        """Greedy whole-sequence answers (B, L) and their references (B, T), both ending in EOS
        (exact match compares them); None where the batch has no whole-sequence answer."""
        raise NotImplementedError

    def translate(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, decode: Decoding
    ) -> Tensor:
        """The output sequence of every example of a batch of pairs (B, L), in batch order,
        decoded as `decode` says (beam_size 1: greedy), without BOS, each ending in EOS
        unless cut at its limit (int(max_len_a * S + max_len_b) tokens, S the source's length
        with its EOS); PAD after."""
        raise NotImplementedError


@dataclass(frozen=True)
class Decoding:
    """How translate decodes (Sec. 6.1: beam 4, length penalty 0.6; fairseq's length limit)."""

    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50


# What to train on data of a task instead: {data option: (model option, experiment preset)}.
_FITS = {
    "lm": {
        "lm_text": ("model=lm_small", None),
        "tinyshakespeare": ("model=lm_small", "tinyshakespeare"),
    },
}


def _arch_hint(datamodule, task: str, arch: str) -> str:
    """The line for data of `task` that a model.arch=`arch` cannot read, naming a model (and an
    experiment preset) that can, where the data is a shipped option."""
    name = getattr(datamodule, "option", "") or type(datamodule).__name__
    model, preset = _FITS.get(task, {}).get(name, (None, None))
    other = "decoder_only" if task == "lm" else "encoder_decoder"
    article = "an" if other[0] in "ae" else "a"
    hint = f"; for data={name} use {article} {other} model such as {model}" if model else ""
    hint += f" or experiment={preset}" if preset else ""
    needed = "seq2seq" if arch == "encoder_decoder" else "lm"
    return (
        f"model.arch={arch!r} cannot train on data={name!r} ({task} data): "
        f"{'an' if arch[0] in 'ae' else 'a'} {arch} model needs {needed} data{hint}"
    )


def _positions_problem(needed: int | None, config) -> str | None:
    """Unless the model's positional encoding represents `needed` positions (the one home of the
    rule; attnlab.model.positions: only learned positions have a limit, model.max_len)."""
    from attnlab.model.positions import encoding_class

    limit = encoding_class(config.pos_encoding).limit(config)
    if needed is None or limit is None or limit >= needed:
        return None
    return (
        f"model.max_len={limit} is shorter than the longest sequence of the data ({needed}); "
        f"{config.pos_encoding} positions need model.max_len >= {needed}"
    )
