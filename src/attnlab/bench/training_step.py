"""Sections `vs_torch_nn` (attnlab's training step against torch.nn.Transformer's, eager and
compiled; with the FLOP rate and, on a GPU, MFU) and `memory` (activation checkpointing).

A training step is what a plain loop does: zero the gradients, forward (under the configured
precision's autocast; under bf16-true the model in bf16 and the optimizer over float32 master
weights, attnlab.training.master_weights), label-smoothed loss, backward, optimizer step, with
the same optimizer (attnlab.training.optimizer: fused Adam where torch has it) for both
contenders. Both compute
the logits at the real targets only, as attnlab-train does (eager; a compiled model computes
every position, as in attnlab-train), so that the ratio is the models' own: attnlab's layers
then skip the pads (model.skip_padding), torch.nn's compute every position."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from attnlab.bench.context import Context
from attnlab.bench.flops import gpu_peak_tflops, training_flops
from attnlab.bench.memory import peak_bytes
from attnlab.bench.timing import interleave, ratio, time_block
from attnlab.bench.torch_nn import TorchNNTransformer, unsupported
from attnlab.config.plain import to_plain
from attnlab.tasks import task_named
from attnlab.training.losses import fused_output_nll, label_smoothed_nll, logits_for_loss
from attnlab.training.master_weights import master_weights_optimizer
from attnlab.training.optimizer import optimizer_from_config


class Stepper:
    """Training steps of one model on the context's batches."""

    def __init__(self, ctx: Context, model: nn.Module, compiled: bool = False):
        self.ctx, self.model = ctx, model.train()
        self.compiled = compiled  # a compiled model's loss takes every position
        optim = to_plain(ctx.cfg.optim)
        if ctx.precision == "bf16-true":  # as attnlab-train: bf16 weights, float32 masters
            model.to(torch.bfloat16)
            self.optimizer = master_weights_optimizer(model, optim)
        else:
            self.optimizer = optimizer_from_config(model, optim)
        for group in self.optimizer.param_groups:
            group["lr"] = 1e-4  # small and constant: the timing does not depend on it

    def step(self, batch: dict) -> None:
        ctx = self.ctx
        self.optimizer.zero_grad(set_to_none=True)
        inputs, targets = task_named(ctx.task).inputs_and_targets(batch)
        pad = ctx.special_ids["pad"]
        fused = bool(ctx.cfg.loss.get("fused_output", False))  # as TransformerModule._objective
        with ctx.autocast():  # as attnlab-train's TransformerModule.loss_logits_and_targets
            out, targets = logits_for_loss(
                self.model, inputs, targets, pad, self.compiled, project=not fused
            )
            if fused:  # the projection inside the loss, under the autocast as in a run
                loss = fused_output_nll(out, self.model.generator.weight, targets, 0.1, pad)[0]
        if not fused:
            loss = label_smoothed_nll(out, targets, 0.1, pad)[0]
        loss.backward()
        self.optimizer.step()

    def block(self, steps: int) -> Callable[[], float]:
        """A timing block: `steps` steps over the cycled batches; returns seconds per step."""
        batches = self.ctx.step_batches(steps)

        def run() -> float:
            return time_block(lambda: [self.step(b) for b in batches], self.ctx.device) / steps

        return run

    def warm_up(self) -> None:
        """Every batch shape once (compiles them all, when compiled), then the warm-up steps."""
        for batch in self.ctx.batches:
            self.step(batch)
        for batch in self.ctx.step_batches(self.ctx.warmup):
            self.step(batch)


def _per_step(ctx: Context) -> tuple[float, float]:
    """Mean target tokens and model FLOPs per step over the cycled batches."""
    batches = ctx.batches
    tokens = sum(ctx.target_tokens(b) for b in batches) / len(batches)
    pad = ctx.special_ids["pad"]
    flops = sum(training_flops(ctx.model_config, b, pad) for b in batches) / len(batches)
    return tokens, flops


def _compare(ctx: Context, models: dict[str, nn.Module], compiled: bool) -> dict:
    """Each contender's timing, tokens/s, TFLOP/s and the peak memory of one step."""
    steppers = {name: Stepper(ctx, model, compiled) for name, model in models.items()}
    for stepper in steppers.values():
        stepper.warm_up()
    timing = interleave({n: s.block(ctx.steps) for n, s in steppers.items()}, ctx.repeats)
    tokens, flops = _per_step(ctx)
    batch = _largest(ctx)
    for name, stats in timing.items():
        stats["tokens_per_s"] = tokens / stats["median_s"]
        stats["tflops"] = flops / stats["median_s"] / 1e12
        stats["peak_memory_bytes"] = peak_bytes(lambda s=steppers[name]: s.step(batch), ctx.device)
    return timing


def _largest(ctx: Context) -> dict:
    return max(ctx.batches, key=lambda b: sum(t.numel() for t in b.values()))


def _eager(model: nn.Module) -> nn.Module:
    return model


def _compiled(model: nn.Module, mode: str = "default") -> nn.Module:
    """torch.compile in place (the state dict keeps its keys) with model.compile_mode's mode
    (reduce-overhead: CUDA graphs), the same for both contenders."""
    model.compile(mode=mode)
    return model


def run_vs_torch_nn(ctx: Context, compile_mode: str) -> dict:
    """{size: {"eager": {...}, "compiled": {...}}} with each contender's median seconds per
    step, spread, tokens/s and TFLOP/s, their parameter counts and the ratio torch_nn / attnlab
    (above 1: attnlab is faster)."""
    reason = unsupported(ctx.model_config)
    if reason:
        return {"skipped": reason}
    tokens, flops = _per_step(ctx)
    result: dict = {
        "parameters": {
            "attnlab": ctx.new_model().num_parameters(),
            "torch_nn": TorchNNTransformer(ctx.model_config).num_parameters(),
        },
        "tokens_per_step": tokens,
        "flops_per_step": flops,
        "padding": ctx.padding_fraction(),  # what attnlab's skipped pads can save
        "skip_padding": ctx.model_config.skip_padding,
        "compile_mode": ctx.cfg.model.get("compile_mode", "default"),
    }
    modes = {"off": ["eager"], "on": ["compiled"], "both": ["eager", "compiled"]}[compile_mode]
    compile_as = ctx.cfg.model.get("compile_mode", "default")
    for mode in modes:
        wrap = functools.partial(_compiled, mode=compile_as) if mode == "compiled" else _eager
        models = {
            "attnlab": wrap(ctx.new_model()),
            "torch_nn": wrap(TorchNNTransformer(ctx.model_config).to(ctx.device)),
        }
        try:
            timing = _compare(ctx, models, compiled=mode == "compiled")
        except Exception as err:  # torch.compile needs a working compiler toolchain
            if mode != "compiled":
                raise
            result[mode] = {"skipped": f"torch.compile failed: {type(err).__name__}: {err}"[:300]}
            continue
        result[mode] = {**timing, "ratio": ratio(timing["torch_nn"], timing["attnlab"])}
    return {ctx.size_name(): result}


def mfu(ctx: Context, vs_torch_nn: dict) -> dict:
    """Model FLOPs utilisation of attnlab's step in its faster mode (eager or compiled) over
    the device's peak for the training precision, with the step's peak memory; on a CPU, or a
    GPU not in the table, the achieved TFLOP/s only."""
    size = vs_torch_nn.get(ctx.size_name(), {})
    measured = {
        m: size[m]["attnlab"] for m in ("eager", "compiled") if "attnlab" in size.get(m, {})
    }
    if not measured:
        return {"skipped": "needs the vs_torch_nn section's attnlab timing"}
    mode = min(measured, key=lambda m: measured[m]["median_s"])
    stats = measured[mode]
    out = {
        "mode": mode,
        "precision": ctx.precision,
        "achieved_tflops": stats["tflops"],
        "tokens_per_s": stats["tokens_per_s"],
        "peak_memory_bytes": stats["peak_memory_bytes"],
    }
    if ctx.device.type != "cuda":
        return {**out, "device": "cpu", "mfu": None, "reason": "MFU is reported on a GPU"}
    name = torch.cuda.get_device_name(ctx.device)
    peak = gpu_peak_tflops(name, ctx.precision)
    return {
        **out,
        "device": name,
        "peak_tflops": peak,
        "mfu": stats["tflops"] / peak if peak else None,
    }


def run_memory(ctx: Context) -> dict:
    """Peak memory of one training step (after a warm-up, so the optimizer state exists) with
    activation checkpointing off and on, the saving, and what the recomputation costs in time."""
    steppers = {
        "off": Stepper(ctx, ctx.new_model(activation_checkpointing=False)),
        "on": Stepper(ctx, ctx.new_model(activation_checkpointing=True)),
    }
    batch = _largest(ctx)
    result: dict = {"batch_shapes": {k: list(v.shape) for k, v in batch.items()}}
    for name, stepper in steppers.items():
        stepper.warm_up()
        result[name] = {"peak_bytes": peak_bytes(lambda s=stepper: s.step(batch), ctx.device)}
    timing = interleave({n: s.block(ctx.steps) for n, s in steppers.items()}, ctx.repeats)
    for name in steppers:
        result[name].update(timing[name])
    off, on = result["off"]["peak_bytes"], result["on"]["peak_bytes"]
    result["saving_pct"] = 100.0 * (off - on) / off if off else 0.0
    result["time_cost_pct"] = 100.0 * (ratio(timing["on"], timing["off"]) - 1)
    return {"activation_checkpointing": result}
