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
