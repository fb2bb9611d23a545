"""attnlab-bench: speed and memory of attnlab's model and harness, in one process.

    attnlab-bench                                         # every section, the default config
    attnlab-bench model=transformer_base data=multi30k --vs-torch-nn --json bench.json
    attnlab-bench --attention --attention-max-len 2048
    attnlab-bench experiment=paper_base trainer=gpu trainer.precision=bf16-mixed   # on a GPU
    python -m attnlab.cli.bench --quick                       # a smoke run (the test suite's)

The model and data shape are the usual Hydra overrides of attnlab-train (conf/train.yaml
composed and built dry the same way: a bad key is one line and exit 2). Sections (all when none
is named): --vs-torch-nn (the training step against torch.nn.Transformer, eager and compiled,
with TFLOP/s and, on a GPU, MFU), --harness (attnlab-train's step against a plain loop in
paired rounds: the median overhead with its 95% interval; on a machine whose load is above its
core count, one line and exit 3 instead of a figure; launch to first step, --help),
--attention (reference against fused attention over lengths), --decoding (greedy and beam 4,
with and without the KV cache), --memory (activation checkpointing). Every
figure is the median of --repeats interleaved repeats after warm-up, with its spread; the
table goes to stdout and, with --json, the figures to a file (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from attnlab import programs

PROG = programs.BENCH
SECTIONS = {
    "vs_torch_nn": "training step against torch.nn.Transformer (and TFLOP/s, MFU on a GPU)",
    "harness": "attnlab-train's step against a plain loop; launch to first step; --help",
    "attention": "reference against fused attention, time and peak memory per length",
    "decoding": "greedy and beam 4 sentences/s, with and without the KV cache",
    "memory": "peak memory of a step with activation checkpointing off and on",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Speed and memory figures of attnlab (see docs/benchmark.md)."
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for attnlab-train")
    for name, what in SECTIONS.items():
        p.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=what)
    p.add_argument("--quick", action="store_true", help="few repeats, short lengths (smoke test)")
    p.add_argument("--json", metavar="PATH", help="write the figures to this JSON file")
    p.add_argument("--repeats", type=int, help="interleaved repeats (default 7, quick 3)")
    p.add_argument("--steps", type=int, help="timed steps per repeat (default 20, quick 3)")
    p.add_argument("--batches", type=int, help="training batches cycled (default 8, quick 2)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument(
        "--compile",
        default="auto",
        choices=("auto", "off", "on", "both"),
        help="torch.compile in vs-torch-nn: eager, compiled or both (auto: both, quick: off)",
    )
    p.add_argument("--attention-max-len", type=int, help="longest attention length (8192)")
    p.add_argument(
        "--quality",
        nargs="+",
        metavar="RUN_DIR",
        help="time to quality instead of speed: each run's validation BLEU, chrF and nll against "
        "its wall time (its metrics.csv), a table each and quality.png (attnlab.bench.quality)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the libraries' warnings and log lines (by default: the tables only)",
    )
    p.add_argument("--ckpt", help="decoding: a trained checkpoint instead of initial weights")
    return p


def machine(ctx) -> dict:
    import torch

    from attnlab.training.environment import cpu_has_native_bf16

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {
        "device": ctx.device.type,
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        # the vector ISA torch's CPU kernels use (e.g. AVX2, AVX512) and native bf16: two 2-core
        # EPYCs named alike ran multi30k_cpu's step at 336 and 162 ms (docs/benchmark.md)
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "precision": ctx.precision,
        "load_average": list(os.getloadavg()),
        "quick": ctx.quick,
    }
    if ctx.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(ctx.device)
    return info


def run_sections(ctx, sections: list[str], args) -> dict:
    """Each chosen section's figures, in SECTIONS order, printed as they come."""
    from attnlab.bench import report

    results: dict = {}
    for name in sections:
        part = _section(ctx, name, args)
        for key, figures in part.items():
            print(report.PRINTERS[key](figures) + "\n", flush=True)
        results.update(part)
    return results


def _section(ctx, name: str, args) -> dict:
    from attnlab.bench import attention, decoding, harness, training_step

    if name == "vs_torch_nn":
        mode = args.compile if args.compile != "auto" else ("off" if ctx.quick else "both")
        section = training_step.run_vs_torch_nn(ctx, mode)
        return {name: section, "mfu": training_step.mfu(ctx, section)}
    if name == "harness":
        return {name: harness.run_harness(ctx)}
    if name == "attention":
        return {name: attention.run_attention(ctx, args.attention_max_len)}
    if name == "decoding":
        return {name: decoding.run_decoding(ctx, args.ckpt)}
    return {name: training_step.run_memory(ctx)}


def _quiet_libraries() -> None:
    """The tables and nothing else: torch's C++ warnings (its profiler's note on memory
    allocated before profiling), torch.compile's graph-break warnings, Python warnings and
    Lightning's and W&B's info lines are
    hidden; errors still show. Set before torch is imported, which reads TORCH_CPP_LOG_LEVEL
    once."""
    import logging
    import warnings

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # torch.compile's graph-break notes (torch.nn.Transformer's reference forward asks `.item()`
    # of its padding mask: 12 lines per compiled size); torch reads TORCH_LOGS at import
    os.environ.setdefault("TORCH_LOGS", "-dynamo")
    os.environ.setdefault("WANDB_SILENT", "true")  # W&B's own terminal lines (git root, sync)
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "wandb"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quality:
        raise SystemExit(_quality(args.quality, args.json))
    if not args.verbose:
        _quiet_libraries()
    sections = [s for s in SECTIONS if getattr(args, s)] or list(SECTIONS)
    from attnlab.config.compose import ConfigError

    try:
        ctx = _context(args)
    except ConfigError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    from attnlab.bench.harness import MachineLoaded

    try:
        results = {"machine": machine(ctx), "config": _config_summary(ctx)}
        results.update(run_sections(ctx, sections, args))
    except MachineLoaded as err:  # no figure rather than one that is not evidence
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(3) from None
    finally:  # the runs, tokenizers and offline W&B files the bench wrote: nothing to keep
        shutil.rmtree(ctx.work_dir, ignore_errors=True)
    results["machine"]["load_average_end"] = list(os.getloadavg())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"{PROG}: figures in {args.json}")


def _quality(run_dirs: list[str], json_path: str | None) -> int:
    """--quality: the curves of the runs, printed, plotted and (with --json) written."""
    from attnlab.bench.quality import quality_plot, quality_rows, quality_text

    try:
        curves = {Path(d).name: quality_rows(Path(d)) for d in run_dirs}
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    for name, rows in curves.items():
        print(quality_text(name, rows))
    folder = Path(json_path).parent if json_path else Path(run_dirs[0])
    print(f"{PROG}: plot {quality_plot(curves, folder / 'quality.png')}")
    if json_path:
        Path(json_path).write_text(json.dumps(curves, indent=2) + "\n")
        print(f"{PROG}: curves in {json_path}")
    return 0


def _context(args):
    import torch

    from attnlab.bench.context import build_context

    ctx = build_context(
        args.overrides, args.device, args.quick, args.repeats, args.steps, args.batches
    )
    if ctx.cfg.get("torch_threads"):
        torch.set_num_threads(int(ctx.cfg.torch_threads))
    return ctx


def _config_summary(ctx) -> dict:
    shapes = [{k: list(v.shape) for k, v in b.items()} for b in ctx.batches]
    return {
        "overrides": ctx.overrides,
        "size": ctx.size_name(),
        "model": ctx.model_config.to_dict(),
        "task": ctx.task,
        "batch_shapes": shapes,
        "target_tokens_per_batch": [ctx.target_tokens(b) for b in ctx.batches],
        "padding": ctx.padding_fraction(),
    }


if __name__ == "__main__":
    main()
