"""Section `harness`: what attnlab-train adds to a step, and how long it takes to start.

- The full attnlab-train step (the LightningModule, its logging, the loggers, callbacks and
  progress bar the config sets up, the data path) against a plain PyTorch loop over the same
  model, batches, optimizer, schedule and clipping: seconds per step in the steady state (after
  warm-up steps, no validation in the window), the blocks interleaved, and the overhead in %.
- Launch to first step: `attnlab-train <overrides>` started as a new process, until the end of
  its first training step (a callback added with +callbacks.bench_first_step prints the time);
  `attnlab-train --help` likewise.
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import lightning as L
import torch

from attnlab.bench.context import Context
from attnlab.bench.timing import interleave, median_interval, summarize, synchronize
from attnlab.config.plain import plain_config
from attnlab.runs.status import Status
from attnlab.training.losses import label_smoothed_nll

MARKER = "attnlab-bench: first step at"


class FirstStepMarker(L.Callback):
    """Prints MARKER and the wall clock (time.time()) when the first training step ends."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == 1:
            print(f"{MARKER} {time.time():.6f}", flush=True)


class _StepClock(L.Callback):
    """The wall clock at the end of the warm-up and of the last step (queued GPU work done)."""

    def __init__(self, warmup: int, total: int) -> None:
        self.marks, self.at = [], (warmup, total)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step in self.at:
            synchronize(pl_module.device)
            self.marks.append(time.perf_counter())

    def per_step(self) -> float:
        return (self.marks[1] - self.marks[0]) / (self.at[1] - self.at[0])


def _config(ctx: Context, steps: int, run_dir: Path):
    cfg = ctx.cfg.copy()
    cfg.trainer.max_steps = steps
    # No validation inside the timed window: an interval longer than the run alone would be
    # scaled down to ~5 validations (training/short_runs.py), so validation is switched off.
    cfg.trainer.val_check_interval = steps + 1
    cfg.trainer.limit_val_batches = 0
    cfg.trainer.check_val_every_n_epoch = None
    cfg.trainer.num_sanity_val_steps = 0
    cfg.trainer.enable_model_summary = False
    cfg.paths.run_dir = str(run_dir)
    return cfg


def _lightning_block(ctx: Context, block: int) -> float:
    """Seconds per step of attnlab-train's fit (its own builders), after the warm-up steps."""
    from attnlab.pipeline.build import attach, build
    from attnlab.runs.wandb import finish_wandb

    total = ctx.warmup + ctx.steps
    run_dir = ctx.work_dir / f"harness-{block}"
    cfg = plain_config(_config(ctx, total, run_dir))
    clock = _StepClock(ctx.warmup, total)
    # attnlab-train's own lines (W&B offline, the validation interval) and the progress bar
    # belong to its runs, not to the bench's tables
    with open(os.devnull, "w") as sink, redirect_stdout(sink), redirect_stderr(sink):
        built = attach(build(cfg, run_dir), cfg, run_dir, "bench")  # as attnlab-train's run
        built.trainer.callbacks.append(clock)
        built.trainer.fit(built.module, datamodule=built.datamodule)  # progress bar unseen
        finish_wandb(built.loggers, {"status": Status.COMPLETED.value})
    return clock.per_step()


def harness_device(ctx: Context) -> torch.device:
    """The device attnlab-train trains on for this config (trainer.accelerator)."""
    accelerator = str(ctx.cfg.trainer.accelerator)
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _plain_block(ctx: Context) -> float:
    """Seconds per step of a plain loop: the same module's model, optimizer and schedule
    (configure_optimizers), clipping and precision, over the same data loader."""
    from attnlab.pipeline.build import build

    cfg = plain_config(_config(ctx, ctx.warmup + ctx.steps, ctx.work_dir / "plain"))
    built = build(cfg, ctx.work_dir / "plain")  # seeded as attnlab-train's run
    datamodule = built.datamodule
    datamodule.setup("fit")
    device = harness_device(ctx)
    module = built.module.to(device)
    model, clip = module.model.train(), cfg["trainer"]["gradient_clip_val"]
    optimizers = module.configure_optimizers()
    optimizer, scheduler = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    step, marks = 0, []
    for batch in datamodule.train_dataloader():
        batch = {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v)}
        with ctx.autocast(device):
            logits, targets = module.loss_logits_and_targets(batch)
        loss = label_smoothed_nll(logits, targets, cfg["loss"]["label_smoothing"], module.pad_id)[0]
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step in (ctx.warmup, ctx.warmup + ctx.steps):
            synchronize(device)
            marks.append(time.perf_counter())
        if step == ctx.warmup + ctx.steps:
            break
    return (marks[1] - marks[0]) / ctx.steps


def _train_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "attnlab.cli.train", *args]


def first_step_seconds(ctx: Context) -> float:
    """Launch of `attnlab-train <overrides>` (a new process) to the end of its first step."""
    root = ctx.work_dir / "first-step"
    args = [
        *ctx.overrides,
        "+callbacks.bench_first_step._target_=attnlab.bench.harness.FirstStepMarker",
        "trainer.max_steps=1",
        "trainer.limit_test_batches=1",
        "resume=never",
        f"paths.root={root}",
    ]
    start = time.time()
    proc = subprocess.run(
        _train_command(*args), capture_output=True, text=True, cwd=root.parent, env=os.environ
    )
    found = re.search(re.escape(MARKER) + r" ([0-9.]+)", proc.stdout)  # after a \r progress bar
    if found:
        return float(found.group(1)) - start
    raise RuntimeError(f"attnlab-train did not reach its first step: {proc.stderr[-2000:]}")


def help_seconds() -> float:
    start = time.perf_counter()
    subprocess.run(_train_command("--help"), capture_output=True, check=True)
    return time.perf_counter() - start


class MachineLoaded(RuntimeError):
    """The machine was busy with other work: an overhead measured now is not evidence."""


def load_problem(when: str) -> str | None:
    """Why the machine is too loaded to time the harness (the 1-minute load average above the
    number of cores), or None."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return None
    return (
        f"the machine is loaded {when} (1-minute load {load:.2f} on {cores} cores): a harness "
        "overhead measured now would not be evidence; rerun it when nothing else runs"
    )


def paired_overhead(train_s: list[float], plain_s: list[float]) -> dict:
    """The overhead of attnlab-train's step over the plain loop's, in %, from rounds in which
    the two ran one after the other: the median of the per-round overheads and its
    distribution-free 95% interval (timing.median_interval; null where the rounds are too few)."""
    rounds = [100.0 * (a / p - 1) for a, p in zip(train_s, plain_s, strict=True)]
    interval = median_interval(rounds)
    return {
        "overhead_pct": statistics.median(rounds),
        "overhead_ci95_pct": list(interval) if interval else None,
        "overhead_rounds_pct": rounds,
    }


def run_harness(ctx: Context) -> dict:
    """{"attnlab_train": stats, "plain_loop": stats, "overhead_pct" (the median of the paired
    rounds' overheads), "overhead_ci95_pct", "load", "first_step_s", "help_s"}. MachineLoaded
    where the load average is above the core count before or after the timing (not --quick,
    whose figures are a smoke test, never evidence)."""
    problem = None if ctx.quick else load_problem("before the timing")
    if problem:
        raise MachineLoaded(problem)
    for name in ("lightning.pytorch", "lightning.fabric"):  # no banner per timing block
        logging.getLogger(name).setLevel(logging.WARNING)
    blocks = {"attnlab_train": 0}

    def lightning() -> float:
        blocks["attnlab_train"] += 1
        return _lightning_block(ctx, blocks["attnlab_train"])

    timing = interleave(
        {"attnlab_train": lightning, "plain_loop": lambda: _plain_block(ctx)}, ctx.repeats
    )
    overhead = paired_overhead(
        timing["attnlab_train"]["samples_s"], timing["plain_loop"]["samples_s"]
    )
    load = os.getloadavg()[0]
    problem = None if ctx.quick else load_problem("during the timing")
    if problem:
        raise MachineLoaded(problem)
    launches = 1 if ctx.quick else 3
    first = [first_step_seconds(ctx) for _ in range(launches)]
    helps = [help_seconds() for _ in range(launches)]
    return {
        **timing,
        **overhead,
        "load": load,
        "first_step_s": summarize(first)["median_s"],
        "help_s": summarize(helps)["median_s"],
        "steps_per_repeat": ctx.steps,
    }
