"""Model FLOPs of a training step, GPU peak throughput, and model FLOPs utilisation (MFU).

The formula (docs/benchmark.md): a multiply-add is 2 FLOPs; only real (non-PAD) tokens count,
so padding never raises the figure; a sentence with S source and T target tokens costs, per
forward pass, with d = d_model, a = n_heads * d_k (the attention width), f = d_ff, V the
vocabulary and N, M the encoder and decoder layers:

    encoder, per layer     S * 2 * (4 d a + 2 d f)   projections Q, K, V, O and the FFN
                           + 4 a S^2                 Q K^T and (weights) V, every key visible
    decoder, per layer     T * 2 * (4 d a + 2 d f)   self-attention projections and the FFN
                           + 2 a T (T + 1)           causal self-attention: query t sees t keys
                           + T * 2 * 2 d a           cross-attention Q and O
                           + S * 2 * 2 d a           cross-attention K and V, over the memory
                           + 4 a T S                 cross-attention scores and mix
    output projection      T * 2 d V

A decoder-only model is the decoder without cross-attention over its T tokens. A training step
is 3 forward passes (the backward pass costs two); activation checkpointing's recomputation is
not counted (model FLOPs, not hardware FLOPs). MFU = (FLOPs per step / seconds per step) / the
device's peak for the precision trained in (dense, no sparsity), from GPU_PEAK_TFLOPS.
"""

from __future__ import annotations

import re

from torch import Tensor

from attnlab.data.options import task_for_arch
from attnlab.model.config import TransformerConfig
from attnlab.tasks import task_named

# Dense peak TFLOP/s from NVIDIA's datasheets: (bf16 / fp16 tensor cores, fp32 without TF32).
# Matched against torch.cuda.get_device_name() in this order, as whole words (the first key
# found wins; "A10" is not "A100" nor "A10G", which is not in the table).
GPU_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100 NVL": {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},  # SXM (HBM3)
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "L4": {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}
PRECISION_DTYPE = {"bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "32-true": "fp32"}


def gpu_peak_tflops(device_name: str, precision: str) -> float | None:
    """The dense peak of the named GPU for a trainer.precision, or None if not in the table."""
    dtype = PRECISION_DTYPE.get(precision)
    for key, peaks in GPU_PEAK_TFLOPS.items():
        if re.search(rf"\b{re.escape(key)}\b", device_name):
            return peaks.get(dtype) if dtype else None
    return None


def _lengths(tokens: Tensor, pad_id: int) -> list[int]:
    return tokens.ne(pad_id).sum(dim=1).tolist()


def forward_flops(cfg: TransformerConfig, batch: dict, pad_id: int) -> float:
    """Model FLOPs of one forward pass over `batch` (see the module docstring)."""
    d, a, f = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.d_ff
    per_token = 2 * (4 * d * a + 2 * d * f)
    *source, target = task_named(task_for_arch(cfg.arch)).inputs(batch)  # the model's inputs
    targets = _lengths(target, pad_id)
    sources = _lengths(source[0], pad_id) if source else [0] * len(targets)
    total = 0.0
    for s, t in zip(sources, targets, strict=True):
        encoder = s * per_token + 4 * a * s * s
        decoder = t * per_token + 2 * a * t * (t + 1)
        if cfg.arch == "encoder_decoder":
            decoder += t * 4 * d * a + s * 4 * d * a + 4 * a * t * s
        total += cfg.n_encoder_layers * encoder * (cfg.arch == "encoder_decoder")
        total += cfg.n_decoder_layers * decoder + t * 2 * d * cfg.vocab_size
    return total


def training_flops(cfg: TransformerConfig, batch: dict, pad_id: int) -> float:
    """Model FLOPs of one training step: forward and backward, 3 forward passes."""
    return 3.0 * forward_flops(cfg, batch, pad_id)
