#!/usr/bin/env python
"""Is each section of docs/REPRODUCTION.md still current? Checked, not asserted: for each section,
one trial of its sweep file is run short (20 steps, one validation, 2 test batches, same seed):
the file and code at the section's commit, and the file and code at HEAD (a file that has since
pinned the recipe its experiment preset then had must give the same run), and the two runs'
metrics are compared.

The commit's code runs from a git worktree (PYTHONPATH and ATTNLAB_CONF_DIR point into it; the
installed packages are this checkout's), both runs from this checkout's folder so that data
paths such as ../shared/data resolve alike. A section is "identical" when every metric the two
share is equal (throughput and time excepted), else the largest relative difference is printed
with its metric. Compared: the val/, test/ and train/ metrics, the per-length metrics
(results.json's "extrapolation", as length/<L>/<name>: sections 1a-1e rest on them) and, for the
translation sections whose claims rest on attnlab-eval (3a, 3c, 4), an attnlab-eval of the short
run's last checkpoint with beam 4, length penalty 0.6, on the first 64 test sentences (eval/*).
Each row says how many of each family it compared. Every commit that a section's CSVs
(docs/results/) name is checked, not only the section's main one: a further commit runs the
section's first trial with the file and code at that commit.

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
# section -> its CSVs in docs/results/ (every commit their git_commit column names is checked)
CSVS = {
    "1a": ("extrapolation_decoder_only",),
    "1b": ("extrapolation_encoder_decoder",),
    "1d": ("alibi_shape",),
    "1e": ("arch_matched_copy", "arch_matched_copy_best"),
    "1f": ("arch_matched_multi30k", "arch_matched_multi30k_best"),
    "2": ("lr_sensitivity",),
    "2g": ("grad_norms_init",),
    "2w": ("lr_width",),
    "3a": ("heads_avg5",),
    "3a-lr": ("heads_lr", "heads_rate"),
    "3c": ("heads_best",),
    "4": ("label_smoothing", "decoding", "averaging", "heads"),
    "6a": ("classic_bugs",),
    "6b": ("attn_scale_dk16", "attn_scale_dk64", "attn_scale_dk128"),
}
MULTI30K = {"1f", "3a", "3a-lr", "3c", "4"}  # need data.root
EVALUATED = {"3a", "3c", "4"}  # claims on attnlab-eval's BLEU files
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


def code_env(code: Path) -> dict:
    """The environment that runs attnlab from the code under `code`, W&B off."""
    env = {**os.environ, "PYTHONPATH": str(code / "src"), "ATTNLAB_CONF_DIR": str(code / "conf")}
    return env | {"WANDB_MODE": "disabled"}


def run(code: Path, overrides: list[str], run_dir: Path) -> dict:
    """attnlab-train from the code under `code` (a worktree or this checkout) into a fresh
    `run_dir` (an earlier check's is removed first); results.json."""
    shutil.rmtree(run_dir, ignore_errors=True)
    env = code_env(code)
    argv = [sys.executable, "-c", "from attnlab.cli.train import main; main()", *overrides]
    argv += [f"paths.run_dir={run_dir}", f"hydra.run.dir={run_dir}", "logger=csv"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    results = run_dir / "results.json"
    if done.returncode != 0 or not results.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"exit {done.returncode}: {tail[0]}")
    return json.loads(results.read_text())


FAMILIES = ("val", "test", "train", "length", "eval")


def metrics_of(results: dict) -> dict:
    """A run's comparable metrics: results.json's metrics, its per-length metrics as
    length/<L>/<name>, and an evaluation's scores (`eval`, added by evaluate()) as eval/<name>."""
    out = dict(results.get("metrics") or {})
    for length, scores in (results.get("extrapolation") or {}).items():
        for name, value in (scores or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"length/{length}/{name}"] = value
    for name, value in (results.get("eval") or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[f"eval/{name}"] = value
    return out


def families(keys: list[str]) -> str:
    """'val 4, test 6, length 12': how many metrics of each family were compared."""
    counts = {f: sum(k.split("/")[0] == f for k in keys) for f in FAMILIES}
    return ", ".join(f"{f} {n}" for f, n in counts.items() if n)


def commits_named(section: str) -> list[str]:
    """The commits (7 characters) the section's CSVs name, in order of first appearance."""
    import csv

    found: dict[str, None] = {}
    for name in CSVS.get(section, ()):
        with open(REPO / "docs" / "results" / f"{name}.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row.get("git_commit"):
                    found.setdefault(row["git_commit"][:7], None)
    return list(found)


def evaluate(code: Path, run_dir: Path, sample: tuple[Path, Path]) -> dict:
    """attnlab-eval (from the code under `code`) of the run's last checkpoint, beam 4, length
    penalty 0.6, on the sampled sentences; its scores."""
    env = code_env(code)
    out = run_dir / "eval" / "provenance"
    argv = [sys.executable, "-c", "from attnlab.cli.eval import main; main()"]
    argv += [f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}", f"src_file={sample[0]}"]
    argv += [f"ref_file={sample[1]}", "decode.beam_size=4", "decode.length_penalty=0.6"]
    argv += [f"out={out}", "device=cpu"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    written = out.with_name(out.name + ".json")
    if done.returncode != 0 or not written.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"attnlab-eval exit {done.returncode}: {tail[0]}")
    scores = json.loads(written.read_text())
    return {k: scores[k] for k in ("bleu", "chrf", "chrf++", "nll", "perplexity") if k in scores}


def test_sample(data_root: Path, out: Path, lines: int = 64) -> tuple[Path, Path]:
    """The first `lines` sentences of Multi30K's test split as plain files under `out`."""
    import gzip

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for lang in ("en", "de"):
        with gzip.open(data_root / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            text = [next(f) for _ in range(lines)]
        path = out / f"test{lines}.{lang}"
        path.write_text("".join(text), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def compare(old: dict, new: dict) -> tuple[str, int, str]:
    """'identical' or the largest relative difference and its metric; the number of metrics
    compared; their families ('val 4, test 6, length 12')."""
    a, b = metrics_of(old), metrics_of(new)
    keys = [
        k for k in sorted(set(a) & set(b))
        if k.split("/")[0] in FAMILIES and not any(i in k for i in IGNORED)
    ]  # fmt: skip
    worst, where = 0.0, ""
    for k in keys:
        x, y = a[k], b[k]
        if x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            continue
        rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
        if rel > worst:
            worst, where = rel, f"{k}: {x:.7g} vs {y:.7g}"
    verdict = "identical" if not where else f"differs, largest {worst:.2g} ({where})"
    return verdict, len(keys), families(keys)


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
    print(f"| section | commit | run | {args.steps}-step run at the commit and at HEAD | "
          "metrics compared |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    failed = 0
    for section in chosen:
        main_commit, sweep, indices = SECTIONS[section]
        root = Path(args.data_root).resolve()
        data = [f"data.root={root}"] if section in MULTI30K else []
        sample = test_sample(root, args.out) if section in EVALUATED else None
        named = [c for c in commits_named(section) if not main_commit.startswith(c)]
        checks = [(main_commit, i) for i in indices] + [(c, indices[0]) for c in named]
        for commit, index in checks:
            where = f"{section}-{index}"
            label, families_ = "", ""
            try:
                overrides = trial_overrides(commit, sweep, index) + short + data
                now = trial_overrides("HEAD", sweep, index) + short + data
                label = " ".join(o for o in overrides if o.split("=")[0] in LABEL)
                then_code = worktree(commit, args.out)
                old = run(then_code, overrides, args.out / f"{where}-{commit}")
                new = run(REPO, now, args.out / f"{where}-HEAD")
                if sample is not None:
                    old["eval"] = evaluate(then_code, args.out / f"{where}-{commit}", sample)
                    new["eval"] = evaluate(REPO, args.out / f"{where}-HEAD", sample)
                verdict, n, families_ = compare(old, new)
                verdict = f"{verdict} ({n} metrics; HEAD {str(new.get('git_commit'))[:7]})"
            except (RuntimeError, subprocess.CalledProcessError) as err:
                verdict, failed = f"not compared: {err}", failed + 1
            print(f"| {section} | {commit} | `{sweep}` trial {index} ({label}) | {verdict} | "
                  f"{families_} |", flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
