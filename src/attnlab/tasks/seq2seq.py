"""Sequence to sequence (translation, the synthetic tasks on an encoder-decoder): batches of
sentence pairs {src, tgt_in, tgt_out}, tgt_in = BOS + target, tgt_out = target + EOS."""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.model.decoding import beam_search, greedy_decode, max_output_lengths
from attnlab.tasks.base import Decoding, Task


class Seq2Seq(Task):
    name = "seq2seq"
    arch = "encoder_decoder"
    keys = ("src", "tgt_in", "tgt_out")
    source_key = "src"
    query_key = "tgt_in"

    def inputs(self, batch: dict) -> tuple[Tensor, ...]:
        return batch["src"], batch["tgt_in"]

    def targets(self, batch: dict) -> Tensor:
        return batch["tgt_out"]

    def predict(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, pad_id: int
    ) -> tuple[Tensor, Tensor]:
        tgt_out = batch["tgt_out"]
        # One step beyond the target: greedy_decode forces EOS at its limit, and the model
        # should emit EOS by itself to match.
        max_len = tgt_out.size(1) + 1
        return greedy_decode(model, batch["src"], bos_id, eos_id, max_len), tgt_out

    def translate(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, decode: Decoding
    ) -> Tensor:
        src, d = batch["src"], decode
        if d.beam_size == 1:
            limits = max_output_lengths(src, model.config.pad_id, d.max_len_a, d.max_len_b)
            return greedy_decode(model, src, bos_id, eos_id, limits)
        return beam_search(
            model, src, bos_id, eos_id, d.beam_size, d.length_penalty, d.max_len_a, d.max_len_b
        )


TASK = Seq2Seq()
