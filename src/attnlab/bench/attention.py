"""Section `attention`: attention alone, Eq. (1) written out (attnlab's reference path, which
materializes the (T, T) weights) against F.scaled_dot_product_attention with is_causal (the
fused path the model takes), forward and backward, causal self-attention of one sequence of
each length with the model's heads and d_k. Time (median of the repeats) and peak memory
(attnlab.bench.memory) per length. A length whose reference path would not fit in the memory
available is skipped and said so, as is one that runs out of GPU memory."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.bench.context import Context
from attnlab.bench.memory import available_bytes, peak_bytes
from attnlab.bench.timing import interleave, time_block
from attnlab.model.attention import causal_allowed, scaled_dot_product_attention

LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)


def _paths(q, k, v):
    t = q.size(2)

    def reference():
        out, _ = scaled_dot_product_attention(q, k, v, causal_allowed(t, t, q.device))
        out.sum().backward()

    def fused():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    return {"reference": reference, "fused": fused}


def _reference_bytes(heads: int, t: int, element: int) -> int:
    """A generous estimate of the reference path's peak: a handful of (H, T, T) tensors
    (scores, masked scores, weights, their gradients) and the (T, T) mask."""
    return 6 * heads * t * t * element + t * t


def _one_length(ctx: Context, t: int, dtype: torch.dtype, skip_reference: str | None) -> dict:
    cfg = ctx.model_config
    shape = (1, cfg.n_heads, t, cfg.head_dim)
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    q, k, v = (
        torch.randn(shape, device=ctx.device, dtype=dtype, generator=gen).requires_grad_()
        for _ in range(3)
    )
    paths = _paths(q, k, v)
    if skip_reference:
        del paths["reference"]
    result = {name: {"peak_bytes": peak_bytes(run, ctx.device)} for name, run in paths.items()}
    repeats = max(1, min(ctx.repeats, 3)) if t >= 4096 else ctx.repeats
    timing = interleave(
        {name: (lambda run=run: time_block(run, ctx.device)) for name, run in paths.items()},
        repeats,
    )
    for name in paths:
        result[name].update(timing[name])
    if skip_reference:
        result["reference"] = {"skipped": skip_reference}
    else:
        fused, reference = result["fused"]["peak_bytes"], result["reference"]["peak_bytes"]
        result["memory_ratio"] = reference / max(fused, 1)
    return result


def run_attention(ctx: Context, max_len: int | None = None) -> dict:
    """{"lengths": {T: {"reference": {...}, "fused": {...}, "memory_ratio"}}, "skipped": {...}}."""
    dtype = torch.bfloat16 if ctx.device.type == "cuda" else torch.float32
    cfg = ctx.model_config
    limit = max_len or (256 if ctx.quick else LENGTHS[-1])
    out: dict = {
        "heads": cfg.n_heads,
        "d_k": cfg.head_dim,
        "batch": 1,
        "causal": True,
        "dtype": str(dtype).removeprefix("torch."),
        "device": ctx.device.type,
        "pass": "forward+backward",
        "lengths": {},
        "skipped": {},
    }
    for t in (n for n in LENGTHS if n <= limit):
        need = _reference_bytes(cfg.n_heads, t, dtype.itemsize)
        free = available_bytes(ctx.device)
        too_big = None
        if free is not None and need > 0.5 * free:
            too_big = f"needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB available"
        try:
            out["lengths"][str(t)] = _one_length(ctx, t, dtype, too_big)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            out["skipped"][str(t)] = "out of GPU memory"
    return out
