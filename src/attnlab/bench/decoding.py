"""Section `decoding`: sentences per second of greedy decoding and beam search (beam 4, length
penalty 0.6, Sec. 6.1), with the KV cache and without (recomputing the whole prefix at every
step), on sentences of the configured data. The model is the configured one with its initial
weights unless --ckpt names a trained checkpoint: an untrained model rarely emits EOS, so every
sentence runs to its length limit (a * source length + b), which is the cost measured.
Decoder-only models: greedy continuation of prompts (no beam search)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.bench.context import Context
from attnlab.bench.timing import interleave, time_block
from attnlab.model.decoding import (
    beam_continue,
    beam_search,
    generate,
    greedy_decode,
    max_output_lengths,
)
from attnlab.tasks import task_named

MAX_LEN_A, MAX_LEN_B = 1.0, 10  # the length limit a * source length + b


def _sources(ctx: Context, n: int) -> torch.Tensor:
    """The first `n` source rows of the batches (prompts for decoder-only), right-padded to
    one width."""
    key, pad = task_named(ctx.task).source_key, ctx.special_ids["pad"]
    width = max(b[key].size(1) for b in ctx.batches)
    padded = [F.pad(b[key], (0, width - b[key].size(1)), value=pad) for b in ctx.batches]
    rows = torch.cat(padded)[:n]
    return rows[:, : int(rows.ne(pad).sum(dim=1).max())]


def _seq2seq_runs(ctx: Context, model, src: torch.Tensor, batch: int) -> dict:
    ids, pad = ctx.special_ids, ctx.special_ids["pad"]
    chunks = src.split(batch)

    def greedy(cache: bool):
        for s in chunks:
            limits = max_output_lengths(s, pad, MAX_LEN_A, MAX_LEN_B)
            greedy_decode(model, s, ids["bos"], ids["eos"], limits, use_cache=cache)

    def beam(cache: bool):
        for s in chunks:
            beam_search(model, s, ids["bos"], ids["eos"], 4, 0.6, MAX_LEN_A, MAX_LEN_B, cache)

    return {"greedy": greedy, "beam4": beam}


def _lm_runs(ctx: Context, model, tokens: torch.Tensor, batch: int) -> dict:
    """Decoder-only: the first half of each row as its prompt (one width: no padding inside)."""
    ids = ctx.special_ids
    prompts = tokens[:, : max(1, tokens.size(1) // 2)].split(batch)

    def greedy(cache: bool):
        for p in prompts:
            generate(model, p, max_new_tokens=p.size(1) + MAX_LEN_B, use_cache=cache)

    def beam(cache: bool):  # beam_continue always caches (no uncached timing)
        for p in prompts:
            limit = int(MAX_LEN_A * p.size(1) + MAX_LEN_B)
            beam_continue(model, p, ids["bos"], ids["eos"], 4, 0.6, limit)

    return {"greedy": greedy, "beam4": beam}


def run_decoding(ctx: Context, ckpt: str | None = None, n: int | None = None) -> dict:
    """{"greedy": {"cached": stats, "uncached": stats, "speedup"}, "beam4": {...}} with
    sentences_per_s in each stats (a decoder-only model's beam4: cached only)."""
    model = _model(ctx, ckpt).eval()
    src = _sources(ctx, n or (8 if ctx.quick else 64))
    batch = min(len(src), 32)
    encoder_decoder = model.config.arch == "encoder_decoder"  # the decoding functions differ
    runs = (_seq2seq_runs if encoder_decoder else _lm_runs)(ctx, model, src, batch)
    uncached = set(runs) if encoder_decoder else {"greedy"}  # beam_continue always caches
    out: dict = {
        "sentences": len(src),
        "batch_size": batch,
        "weights": ckpt or "initial",
        "max_len": f"{MAX_LEN_A} * source length + {MAX_LEN_B}",
    }
    for name, run in runs.items():
        variants = {"cached": True} | ({"uncached": False} if name in uncached else {})
        with torch.inference_mode():
            run(True)  # warm-up
            timing = interleave(
                {
                    key: lambda run=run, c=c: time_block(lambda: run(c), ctx.device)
                    for key, c in variants.items()
                },
                ctx.repeats,
            )
        for stats in timing.values():
            stats["sentences_per_s"] = len(src) / stats["median_s"]
        out[name] = timing
        if "uncached" in timing:
            out[name]["speedup"] = timing["uncached"]["median_s"] / timing["cached"]["median_s"]
    return out


def _model(ctx: Context, ckpt: str | None):
    if ckpt is None:
        return ctx.new_model()
    from attnlab.evaluation.checkpoints import load_model

    model, _, _ = load_model([ckpt])
    return model.to(ctx.device)
