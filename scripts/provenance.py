#!/usr/bin/env python
"""Is each section of docs/REPRODUCTION.md still current? Checked, not asserted: for each section,
one trial of its sweep file is run short (20 steps, one validation, 2 test batches, same seed):
the file and code at the section's commit, and the file and code at HEAD (a file that has since
pinned the recipe its experiment preset then had must give the same run), and the two runs'
metrics are compared.

The commit's code runs from a git worktree (PYTHONPATH and ATTNLAB_CONF_DIR point into it; the
installed packages are this checkout's), both runs from this checkout's folder so that data
paths such as ../shared/data resolve alike. A section is "identical" when every val/, test/ and
train/ metric the two share is equal (throughput and time excepted), else the largest relative
difference is printed with its metric.

    python scripts/provenance.py [--sections 2,6] [--data-root ../shared/data/multi30k] \
        [--out /tmp/provenance] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# section -> (the commit of its runs, its sweep file, the trials run): REPRODUCTION.md's status
# table. 1a and 1b are extrapolation.yaml's ALiBi arms, decoder-only and encoder-decoder; 1e and
# 1f both architectures at their lowest rate; 2 runs Post-LN without warmup at 3e-4 and Pre-LN
# with warmup and qk-layernorm at 1e-2; 2g both arms of the gradient-norm sweep; 2w Post-LN with
# warmup at 1e-2 (the width file at its own d_model 64; the widths share the code). A sweep file
# written after its runs' commit (heads_lr.yaml) is read as first committed for the commit's run.
SECTIONS = {
    "1a": ("fc6d2b8", "extrapolation", (24,)),
    "1b": ("fc6d2b8", "extrapolation", (9,)),
    "1d": ("c34cdac", "alibi_shape", (0,)),
    "1e": ("00001a5", "arch_matched_copy", (0, 3)),
    "1f": ("8d26b7b", "arch_matched_multi30k", (0, 3)),
    "2": ("e340b5b", "lr_sensitivity", (0, 52)),
    "2g": ("519fda4", "grad_norms_init", (0, 1)),
    "2w": ("2405cd9", "lr_width", (3,)),
    "3a": ("2a8a97a", "heads", (0,)),
    "3a-lr": ("2a8a97a", "heads_lr", (0,)),
    "3c": ("a62cc91", "heads_best", (0,)),
    "4": ("27d35e2", "label_smoothing", (0,)),
    "6a": ("daea834", "classic_bugs", (0,)),
    "6b": ("daea834", "attn_scale", (0,)),
}
MULTI30K = {"1f", "3a", "3a-lr", "3c", "4"}  # need data.root
IGNORED = ("tokens_per_sec", "time/", "elapsed")
LABEL = (
    "experiment",
    "model",
    "model.pos_encoding",
    "model.n_heads",
    "model.norm_position",
    "model.qk_norm",
    "scheduler.peak_lr",
    "loss.label_smoothing",
    "model.attn_scale",
    "seed",
)


def trial_overrides(commit: str, sweep: str, index: int) -> list[str]:
    """Trial `index`'s overrides of sweeps/<sweep>.yaml as it stands at `commit` (a git
    revision, HEAD included), without its run dir."""
    from attnlab.sweeps import expand_sweep
    from attnlab.sweeps.spec import override_key

    shown = subprocess.run(
        ["git", "show", f"{commit}:sweeps/{sweep}.yaml"], cwd=REPO, capture_output=True, text=True
    )
    if shown.returncode != 0:  # written after its runs' commit: the file as first committed
        first = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%h", "--", f"sweeps/{sweep}.yaml"],
            cwd=REPO, check=True, capture_output=True, text=True,
        ).stdout.split()[-1]  # fmt: skip
        shown = subprocess.run(
            ["git", "show", f"{first}:sweeps/{sweep}.yaml"],
            cwd=REPO, check=True, capture_output=True, text=True,
        )  # fmt: skip
    text = shown.stdout
    trial = expand_sweep(yaml.safe_load(text))[index]
    return [o for o in trial.overrides if not override_key(o).startswith("hydra.")]


def worktree(commit: str, root: Path) -> Path:
    path = root / f"tree-{commit}"
    if not path.exists():  # a worktree whose folder was deleted is still registered: prune it
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=True, capture_output=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), commit],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
    return path


def run(code: Path, overrides: list[str], run_dir: Path) -> dict:
    """attnlab-train from the code under `code` (a worktree or this checkout) into a fresh
    `run_dir` (an earlier check's is removed first); results.json."""
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(code / "src"),
        "ATTNLAB_CONF_DIR": str(code / "conf"),
        "WANDB_MODE": "disabled",
    }
    argv = [sys.executable, "-c", "from attnlab.cli.train import main; main()", *overrides]
    argv += [f"paths.run_dir={run_dir}", f"hydra.run.dir={run_dir}", "logger=csv"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    results = run_dir / "results.json"
    if done.returncode != 0 or not results.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"exit {done.returncode}: {tail[0]}")
    return json.loads(results.read_text())


def compare(old: dict, new: dict) -> tuple[str, int]:
    """'identical' or the largest relative difference and its metric; the metrics compared."""
    a, b = old["metrics"], new["metrics"]
    keys = [
        k for k in sorted(set(a) & set(b))
        if k.split("/")[0] in ("val", "test", "train") and not any(i in k for i in IGNORED)
    ]  # fmt: skip
    worst, where = 0.0, ""
    for k in keys:
        x, y = a[k], b[k]
        if x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            continue
        rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
        if rel > worst:
            worst, where = rel, f"{k}: {x:.7g} vs {y:.7g}"
    return ("identical" if not where else f"differs, largest {worst:.2g} ({where})"), len(keys)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", help="comma-separated, e.g. 2,6 (default: all)")
    parser.add_argument("--data-root", default="../shared/data/multi30k")
    parser.add_argument("--out", type=Path, default=Path("/tmp/provenance"))
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    chosen = args.sections.split(",") if args.sections else list(SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        print(f"provenance.py: unknown section {unknown[0]!r}; expected one of: "
              + ", ".join(SECTIONS), file=sys.stderr)  # fmt: skip
        return 2
    short = [f"trainer.max_steps={args.steps}", f"trainer.val_check_interval={args.steps}"]
    short += ["trainer.limit_test_batches=2", "trainer.limit_val_batches=4"]
    print(f"| section | commit | run | {args.steps}-step run at the commit and at HEAD |")
    print("| --- | --- | --- | --- |")
    failed = 0
    for section in chosen:
        commit, sweep, indices = SECTIONS[section]
        data = [f"data.root={Path(args.data_root).resolve()}"] if section in MULTI30K else []
        for index in indices:
            overrides = trial_overrides(commit, sweep, index) + short + data
            now = trial_overrides("HEAD", sweep, index) + short + data
            where = f"{section}-{index}"
            try:
                old = run(worktree(commit, args.out), overrides, args.out / f"{where}-{commit}")
                new = run(REPO, now, args.out / f"{where}-HEAD")
                verdict, n = compare(old, new)
                verdict = f"{verdict} ({n} metrics; HEAD {str(new.get('git_commit'))[:7]})"
            except (RuntimeError, subprocess.CalledProcessError) as err:
                verdict, failed = f"not compared: {err}", failed + 1
            label = " ".join(o for o in overrides if o.split("=")[0] in LABEL)
            print(f"| {section} | {commit} | `{sweep}` trial {index} ({label}) | {verdict} |",
                  flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
