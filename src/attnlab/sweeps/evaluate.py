"""A study's `evaluate` block: attnlab-eval on each completed stage-2 trial (issue 63).

    evaluate:
      last: 5              # average the trial's newest 5 checkpoints (0 or absent: last.ckpt)
      beam_size: 4
      length_penalty: 0.6
      split: test          # test | val
      name: test-avg5      # optional; the scores are then eval/<name>/<score>

Its scores land in <trial>/eval/<name>.json, where attnlab-compare reads them as
eval/<name>/bleu, chrf, chrf++, nll, perplexity; the study's primary metric may be one of them
(the translation protocol of the report's sections 3 and 4: averaged checkpoints, beam 4,
length penalty 0.6). An evaluation already written is not run again, so a study rerun after a
kill evaluates only what is missing.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.analysis.runs import EVAL_SCORES
from attnlab.runs.status import Status
from attnlab.sweeps.spec import SweepError

KEYS = ("last", "beam_size", "length_penalty", "split", "batch_size", "name")
SPLITS = ("test", "val")


@dataclass(frozen=True)
class Evaluate:
    last: int = 0
    beam_size: int = 4
    length_penalty: float = 0.6
    split: str = "test"
    batch_size: int = 64
    name: str = ""

    @property
    def label(self) -> str:
        """The evaluation's name: `name`, else e.g. test-avg5-beam4_lp0.6."""
        if self.name:
            return self.name
        ckpt = f"avg{self.last}" if self.last else "last"
        return f"{self.split}-{ckpt}-beam{self.beam_size}_lp{self.length_penalty:g}"

    def metrics(self) -> list[str]:
        return [f"eval/{self.label}/{score}" for score in EVAL_SCORES]

    def argv(self, run_dir: Path) -> list[str]:
        """attnlab-eval's arguments for one trial folder."""
        ckpt = run_dir / "checkpoints"
        args = [f"ckpt={ckpt if self.last else ckpt / 'last.ckpt'}"]
        args += [f"last={self.last}"] if self.last else []
        return args + [
            f"split={self.split}",
            f"decode.beam_size={self.beam_size}",
            f"decode.length_penalty={self.length_penalty}",
            f"batch_size={self.batch_size}",
            f"out={run_dir / 'eval' / self.label}",
        ]


def load_evaluate(block: Any, source: str) -> Evaluate | None:
    """The `evaluate` block of a study file (None when absent); SweepError naming the key."""
    if block is None:
        return None
    where = f"{source}: evaluate"
    if not isinstance(block, dict):
        raise SweepError(f"{where} must be a mapping of {', '.join(KEYS)}")
    for k in block:
        if k not in KEYS:
            raise SweepError(f"{where}.{k} is not a key of evaluate; expected: {', '.join(KEYS)}")
    whole = {"last": 0, "beam_size": 1, "batch_size": 1}
    for k, low in whole.items():
        v = block.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise SweepError(f"{where}.{k}={v!r} must be a whole number >= {low}")
    lp = block.get("length_penalty", 0.6)
    if not isinstance(lp, (int, float)) or isinstance(lp, bool) or lp < 0:
        raise SweepError(f"{where}.length_penalty={lp!r} must be a number >= 0")
    split = block.get("split", "test")
    if split not in SPLITS:
        raise SweepError(f"{where}.split={split!r}; expected one of: {', '.join(SPLITS)}")
    name = block.get("name", "")
    if not isinstance(name, str) or "/" in name:
        raise SweepError(f"{where}.name={name!r} must be a file name (no '/')")
    args = {k: block[k] for k in ("last", "beam_size", "batch_size") if k in block}
    return Evaluate(length_penalty=float(lp), split=split, name=name, **args)


def check_primary(metric: str, evaluate: Evaluate | None, source: str) -> None:
    """An eval/... primary metric must be one the study's `evaluate` block writes; with an
    evaluate block, a test/... primary (the run's own test, not the evaluation) is refused."""
    if evaluate is not None and metric.startswith("test/"):
        raise SweepError(
            f"{source}: primary.metric={metric} is the run's own test, not the evaluate "
            f"block's scores; name one of: {', '.join(evaluate.metrics())}"
        )
    if not metric.startswith("eval/"):
        return
    if evaluate is None:
        raise SweepError(
            f"{source}: primary.metric={metric} is attnlab-eval's, but the study has no "
            "evaluate block to run it (e.g. evaluate: {last: 5, beam_size: 4})"
        )
    if metric not in evaluate.metrics():
        raise SweepError(
            f"{source}: primary.metric={metric} is not a score the evaluate block writes; "
            f"expected one of: {', '.join(evaluate.metrics())}"
        )


def evaluate_trials(
    evaluate: Evaluate,
    results: Sequence,
    metric: str,
    parallel: int,
    call: Callable | None = None,
    groups: Sequence[str] = (),
    share: float | None = None,
) -> list[str]:
    """attnlab-eval on every completed trial of `results` whose evaluation is not written yet,
    `parallel` at a time (`call(argv, log file, env) -> exit code`; default: its own process);
    each result's metric then read from its evaluation. Each evaluation holds one of the sweep's
    GPU slots `groups` while it runs, as the trials did (CUDA_VISIBLE_DEVICES, and `share` of
    the GPU's memory: attnlab.sweeps.runner.trial_env); without them, the environment's devices.
    The trials whose evaluation failed (their log: <trial>/eval/<name>.log), as lines to print."""
    from attnlab.sweeps.runner import trial_env

    call = call or _process
    todo = [r for r in results if r.status == Status.COMPLETED and not _json(evaluate, r).is_file()]
    slots: queue.Queue = queue.Queue()
    for gpus in groups:
        slots.put(gpus)

    def one(result) -> str | None:
        log = result.trial.run_dir / "eval" / f"{evaluate.label}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        gpus = slots.get() if groups else None
        try:
            code = call(evaluate.argv(result.trial.run_dir), log, trial_env(gpus, share))
        finally:
            if groups:
                slots.put(gpus)
        return None if code == 0 else f"{result.trial.label}: attnlab-eval exit {code} ({log})"

    workers = min(parallel, len(groups)) if groups else parallel
    if workers <= 1:  # here (attnlab-eval's own signal handling needs the main thread)
        failed = [line for line in map(one, todo) if line]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            failed = [line for line in pool.map(one, todo) if line]
    score = metric.rsplit("/", 1)[-1]
    for r in results:
        if not metric.startswith(f"eval/{evaluate.label}/") or r.trial.run_dir is None:
            continue
        if _json(evaluate, r).is_file():
            value = json.loads(_json(evaluate, r).read_text()).get(score)
            r.metric = float(value) if isinstance(value, (int, float)) else None
    return failed


def _process(argv: list[str], log: Path, env: dict[str, str]) -> int:
    """attnlab-eval in a process of its own, in `env`, its output in `log`."""
    cmd = [sys.executable, "-m", "attnlab.cli.eval", *argv]
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        if "CUDA_VISIBLE_DEVICES" in env:
            fh.write(f"# CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}\n")
        fh.flush()
        return subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)


def _json(evaluate: Evaluate, result) -> Path:
    return result.trial.run_dir / "eval" / f"{evaluate.label}.json"
