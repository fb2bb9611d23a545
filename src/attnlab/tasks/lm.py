"""Language modelling (a decoder-only model): batches {tokens, targets}, targets the tokens
shifted by one. With `prompt_len` (B,) in the batch (the synthetic tasks: prompt, separator,
answer), the whole-sequence answer is the greedy continuation of tokens[:prompt_len]."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.model.decoding import generate
from attnlab.tasks.base import Task


class LanguageModeling(Task):
    name = "lm"
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


TASK = LanguageModeling()
