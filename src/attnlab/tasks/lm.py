"""Language modelling (a decoder-only model): batches {tokens, targets}, targets the tokens
shifted by one. With `prompt_len` (B,) in the batch (pairs as one sequence, attnlab.data.pairs:
[BOS] x [SEP] y [EOS]), the whole-sequence answer is the continuation of tokens[:prompt_len]:
greedy for exact match, decoded as asked for translation."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.model.decoding import beam_continue, generate
from attnlab.tasks.base import Decoding, Task


class LanguageModeling(Task):
    name = "lm"
    arch = "decoder_only"
    keys = ("tokens", "targets")
    source_key = "tokens"
    query_key = None

    def inputs(self, batch: dict) -> tuple[Tensor, ...]:
        return (batch["tokens"],)

    def targets(self, batch: dict) -> Tensor:
        return batch["targets"]

    def predict(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, pad_id: int
    ) -> tuple[Tensor, Tensor] | None:
        if "prompt_len" not in batch:
            return None
        tokens, targets, prompt_len = batch["tokens"], batch["targets"], batch["prompt_len"]
        preds = torch.full_like(targets, pad_id)
        refs = torch.full_like(targets, pad_id)
        for p in prompt_len.unique().tolist():  # prompts of one length form one batch
            rows = (prompt_len == p).nonzero(as_tuple=True)[0]
            ref = targets[rows, p - 1 :]  # tokens[p - 1] (the separator) predicts the answer
            n_new = int((ref != pad_id).sum(dim=1).max())
            out = generate(model, tokens[rows, :p], max_new_tokens=n_new, eos_id=eos_id)
            new = out[:, p:]  # at most n_new <= width - p + 1 tokens
            preds[rows, : new.size(1)] = new
            refs[rows, : ref.size(1)] = ref
        return preds, refs

    def translate(
        self, model: nn.Module, batch: dict, bos_id: int, eos_id: int, decode: Decoding
    ) -> Tensor:
        """Prompts of one length are decoded together (no padding inside a prompt). The limit
        counts as an encoder-decoder's: the source with its EOS is [BOS] x [SEP] less one."""
        tokens, prompt_len, d = batch["tokens"], batch["prompt_len"], decode
        outs: list[tuple[Tensor, Tensor]] = []
        for p in prompt_len.unique().tolist():
            rows = (prompt_len == p).nonzero(as_tuple=True)[0]
            limit = int(d.max_len_a * (p - 1) + d.max_len_b)
            out = beam_continue(
                model, tokens[rows, :p], bos_id, eos_id, d.beam_size, d.length_penalty, limit
            )
            outs.append((rows, out))
        width = max(out.size(1) for _, out in outs)
        result = tokens.new_full((tokens.size(0), width), model.config.pad_id)
        for rows, out in outs:
            result[rows, : out.size(1)] = out
        return result


TASK = LanguageModeling()
