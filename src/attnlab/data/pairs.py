"""A sentence pair as batches for either architecture: the one home of the two pair formats.

The pair's task is independent of the model's architecture (docs/architecture.md). An
encoder-decoder reads the pair as it is (task "seq2seq"):
    src = x + [EOS], tgt_in = [BOS] + y, tgt_out = y + [EOS]
A decoder-only model reads it as one sequence, the source as a prompt (task "lm"):
    [BOS] x [SEP] y [EOS]
with the loss only on y + [EOS] (targets elsewhere are PAD) and `prompt_len` = |x| + 2 marking
where generation starts (attnlab.tasks.lm). SEP is one id outside the tokenizer's vocabulary
(the data module's `sep_id`), so the model's vocabulary is one larger.
The synthetic algorithms (attnlab.data.synthetic) and the translation data (.translation) both
build their batches here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import chain

import torch

from attnlab.data.options import task_for_arch
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID


def padded(
    rows: Sequence[Sequence[int]] | Sequence[torch.Tensor], pad_id: int = PAD_ID, multiple: int = 1
) -> torch.Tensor:
    """(B, L) long tensor of `rows` (lists of ids or 1-D tensors), right-padded with `pad_id`; L
    is the longest row rounded up to a multiple of `multiple`."""
    lens = torch.tensor([len(r) for r in rows], dtype=torch.long)
    longest = max(lens.tolist(), default=0)
    out = torch.full((len(rows), -(-longest // multiple) * multiple), pad_id, dtype=torch.long)
    if rows and isinstance(rows[0], torch.Tensor):
        flat = torch.cat(list(rows))
    else:
        flat = torch.tensor(list(chain.from_iterable(rows)), dtype=torch.long)
    return out.masked_scatter_(torch.arange(out.shape[1]) < lens[:, None], flat)  # row-major


def seq2seq_pairs(
    xs: Sequence[Sequence[int]], ys: Sequence[Sequence[int]], multiple: int = 1
) -> dict:
    """src = x + [EOS] (B, S); tgt_in = [BOS] + y, tgt_out = y + [EOS] (B, T); PAD-padded, S and
    T rounded up to a multiple of `multiple`."""
    return {
        "src": padded([[*x, EOS_ID] for x in xs], multiple=multiple),
        "tgt_in": padded([[BOS_ID, *y] for y in ys], multiple=multiple),
        "tgt_out": padded([[*y, EOS_ID] for y in ys], multiple=multiple),
    }


def lm_pairs(
    xs: Sequence[Sequence[int]], ys: Sequence[Sequence[int]], sep_id: int, multiple: int = 1
) -> dict:
    """[BOS] x [SEP] y [EOS] as tokens (B, T) and targets (B, T) shifted by one, the targets PAD
    over the prompt; prompt_len (B,) = |x| + 2; T rounded up to a multiple of `multiple`."""
    tokens, targets, prompt_len = [], [], []
    for x, y in zip(xs, ys, strict=True):
        prompt, answer = [BOS_ID, *x, sep_id], [*y, EOS_ID]
        tokens.append(prompt + answer[:-1])
        targets.append([PAD_ID] * (len(prompt) - 1) + answer)
        prompt_len.append(len(prompt))
    return {
        "tokens": padded(tokens, multiple=multiple),
        "targets": padded(targets, multiple=multiple),
        "prompt_len": torch.tensor(prompt_len),
    }


def collate_pairs(examples: Sequence[dict], sep_id: int | None = None, multiple: int = 1) -> dict:
    """Examples {src: x + [EOS], tgt: y, src_text, tgt_text} (attnlab.data.text's
    ParallelTextDataset) as one batch: seq2seq pairs, or with `sep_id` one decoder-only sequence
    each, lengths rounded up to a multiple of `multiple`; the raw texts kept (BLEU's
    references)."""
    xs = [e["src"][:-1] for e in examples]  # without the EOS the dataset ends sources with
    ys = [e["tgt"] for e in examples]
    if sep_id is None:
        batch = seq2seq_pairs(xs, ys, multiple)
    else:
        batch = lm_pairs(xs, ys, sep_id, multiple)
    batch["src_text"] = [e["src_text"] for e in examples]
    batch["tgt_text"] = [e["tgt_text"] for e in examples]
    return batch


def pair_collate(arch: str, sep_id: int, multiple: int = 1) -> Callable[[Sequence[dict]], dict]:
    """The collate of sentence pairs for a model.arch=`arch` (sep_id: the decoder-only format's
    separator), lengths rounded up to a multiple of `multiple`."""
    sep = sep_id if task_for_arch(arch) == "lm" else None
    return partial(collate_pairs, sep_id=sep, multiple=multiple)
