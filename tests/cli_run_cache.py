"""attnlab-train commands that several tests read, each started once per pytest session.

A fresh Python that imports torch and Lightning takes seconds before it does anything, so one tiny
run whose folder and output many tests check costs one start, not one per test. `shared` starts
a command the first time a test asks for it, on whichever xdist worker that is; the other tests,
on any worker, wait for it and read what it left (its folder is theirs to read, not to write).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

# Runs attnlab-train's entry point once per argv in a fresh interpreter, as the console script
# does; after each command, SEP + its exit code and a newline on both streams, so that each
# command's output is told apart; at the end, the modules the interpreter imported (full names:
# a package's parents are among them). A list of argvs runs them one after the other in this one
# process, each as a separate command line; "sleep" waits for the clock's second to change (an
# unnamed multirun's dated folder is named to the second).
SEP = "\x1eEXIT "
DRIVER = f"""
import json, sys, time
from attnlab.cli import train

for argv in json.loads(sys.argv[1]):
    if argv == "sleep":
        start = int(time.time())
        while int(time.time()) == start:
            time.sleep(0.05)
        continue
    sys.argv = ["attnlab-train", *argv]
    train._EXIT_STATUSES.clear()  # each command's exit code is its own, not an earlier one's
    try:
        train.main()
        code = 0
    except SystemExit as e:
        code = e.code
    for stream in (sys.stdout, sys.stderr):
        print({SEP!r} + json.dumps(code), file=stream, flush=True)  # (also after a partial line)
print("MODULES", " ".join(sorted(sys.modules)))
"""


def _chunks(text: str) -> tuple[list[tuple[str, object]], str]:
    """([(a command's output, its exit code)], what was printed after the last command)."""
    parts = re.split(f"{SEP}(.*)\n", text)  # output, code, output, code, ..., the rest
    return [(parts[i], json.loads(parts[i + 1])) for i in range(0, len(parts) - 1, 2)], parts[-1]


def train_commands(
    *argvs: list[str] | str, env: dict | None = None, cwd: Path | None = None, timeout: float = 300
) -> dict:
    """Run the command lines `argvs` (lists of arguments, or "sleep") through attnlab-train's
    entry point in one fresh interpreter. {"runs": each command's {"code", "stdout", "stderr"}
    (code None where it never ended: the interpreter crashed or ran past `timeout`),
    "modules": what the interpreter imported, "returncode": the interpreter's exit code, "out":
    all that it printed (on exit too), the markers and the module list left out, "exit_out":
    what it printed after its last command}."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, json.dumps(list(argvs))],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as err:  # what it printed so far, and why it stopped
        text = [t.decode(errors="replace") if isinstance(t, bytes) else t or "" for t in
                (err.stdout, err.stderr)]  # fmt: skip
        proc = subprocess.CompletedProcess(err.cmd, None, text[0], text[1] + f"\n{err}\n")
    outs, out_tail = _chunks(proc.stdout)
    errs, err_tail = _chunks(proc.stderr)
    modules = []
    if out_tail.rstrip("\n").rpartition("\n")[2].startswith("MODULES "):
        out_tail, _, listed = out_tail.rstrip("\n").rpartition("\n")
        modules = listed.split()[1:]
    runs = [
        {"code": code, "stdout": out, "stderr": err}
        for (out, code), (err, _) in zip(outs, errs, strict=False)
    ]
    texts = [text for run in runs for text in (run["stdout"], run["stderr"])]
    commands = sum(argv != "sleep" for argv in argvs)  # those that never ended: code None
    runs += [{"code": None, "stdout": "", "stderr": ""}] * (commands - len(runs))
    return {
        "runs": runs,
        "modules": modules,
        "returncode": proc.returncode,
        "out": "".join([*texts, out_tail, err_tail]),
        "exit_out": out_tail + err_tail,
    }


def shared(tmp_path_factory, key: str, start: Callable[[Path], dict]) -> tuple[Path, dict]:
    """(folder, result) of `start(folder)`, called once per pytest session for `key` in a new
    folder of the session's temporary folder; its result (JSON) is kept beside it for the other
    tests, on any xdist worker, that ask for the same key."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    folder, done = root / f"shared-{key}", root / f"shared-{key}.json"
    with FileLock(str(root / f"shared-{key}.lock")):
        if not done.exists():
            folder.mkdir()
            result = start(folder)
            done.with_suffix(".tmp").write_text(json.dumps(result))
            done.with_suffix(".tmp").replace(done)
    return folder, json.loads(done.read_text())


PROBE = '''
import gc

import lightning as L


class Probe(L.Callback):
    """Prints the cyclic collector's state when training starts."""

    def on_train_start(self, trainer, pl_module):
        full = gc.get_stats()[2]["collections"]
        print("PROBE", gc.isenabled(), gc.get_freeze_count(), full, flush=True)
'''
PROBE_OVERRIDE = "+callbacks.probe._target_=gc_probe.Probe"


def with_probe(folder: Path, env: dict) -> dict:
    """`env` with gc_probe.Probe (PROBE) importable: PROBE_OVERRIDE adds it to a run."""
    (folder / "gc_probe.py").write_text(PROBE)
    return {**env, "PYTHONPATH": str(folder)}


def probe_rows(stdout: str) -> list[tuple[bool, int, int]]:
    """(collector on, frozen objects, full collections so far) at each run's training start."""
    rows = [line.split()[1:] for line in stdout.splitlines() if line.startswith("PROBE")]
    return [(on == "True", int(frozen), int(full)) for on, frozen, full in rows]


def parallel_text_run(folder: Path) -> list[str]:
    """The command line of a tiny run on data=parallel_text read from gzip files in
    folder/parallel (write_parallel_text writes them), its runs under folder/parallel/out."""
    data = folder / "parallel"
    src, tgt = data / "train.en.gz", data / "train.de.gz"
    return [
        "data=parallel_text",
        f"data.train_src={src}",
        f"data.train_tgt={tgt}",
        f"data.val_src={src}",
        f"data.val_tgt={tgt}",
        "data.vocab_size=40",
        "model.d_model=16",
        "model.n_heads=2",
        "model.d_ff=32",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "trainer.max_steps=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "logger=csv",
        f"paths.root={data / 'out'}",
    ]


def write_parallel_text(folder: Path) -> None:
    """The sentence pairs of parallel_text_run (60 lines, gzip)."""
    (folder / "parallel").mkdir()
    for name, text in (
        ("train.en.gz", "a b c\nd e f\ng h i\n"),
        ("train.de.gz", "x y z\nu v w\nr s t\n"),
    ):
        (folder / "parallel" / name).write_bytes(gzip.compress((text * 20).encode()))


def single_runs(tmp_path_factory) -> tuple[Path, dict]:
    """Two single runs, one after the other in one fresh interpreter, ATTNLAB_CACHE in the folder:
    first a tiny run (6 steps, a model summary, W&B offline, Python's warnings shown, the
    collector probe), `name=quiet` under the folder; then parallel_text_run (csv logger)."""

    def start(folder: Path) -> dict:
        env = with_probe(folder, {**os.environ, "WANDB_MODE": "offline"})
        env["PYTHONWARNINGS"] = "default"
        env["ATTNLAB_CACHE"] = str(folder / "cache")
        argv = ["debug=tiny", "trainer.max_steps=6", "trainer.enable_model_summary=true"]
        argv += ["logger=wandb", f"paths.root={folder}", "name=quiet", PROBE_OVERRIDE]
        write_parallel_text(folder)
        return train_commands(argv, parallel_text_run(folder), env=env, cwd=folder)

    return shared(tmp_path_factory, "single-runs", start)


def multiruns(tmp_path_factory) -> tuple[Path, dict]:
    """Three tiny multiruns in one fresh interpreter, each its own command line: `name=mr` with
    seed=1,2, W&B offline and the collector probe, under multirun/; then two unnamed ones
    (seed=1, then seed=2, no logger, a second apart) under dated/."""

    def start(folder: Path) -> dict:
        env = with_probe(folder, {**os.environ, "WANDB_MODE": "offline"})
        env["WANDB_DIR"] = str(folder)
        env.pop("ATTNLAB_MULTIRUN_STAMP", None)
        named = ["-m", "seed=1,2", "debug=tiny", "logger=wandb", "callbacks=none", "name=mr"]
        named += [f"paths.multirun_root={folder / 'multirun'}", PROBE_OVERRIDE]
        unnamed = ["debug=tiny", "logger=none", "callbacks=none"]
        unnamed += [f"paths.multirun_root={folder / 'dated'}"]
        return train_commands(
            named,
            "sleep",
            ["-m", "seed=1", *unnamed],
            "sleep",
            ["-m", "seed=2", *unnamed],
            env=env,
            cwd=folder,
        )

    return shared(tmp_path_factory, "multiruns", start)


LIGHT = {
    "help": ["--help"],
    "completion": ["--shell-completion", "query=bash"],  # of COMP_LINE
    "model.n_head=3": ["model.n_head=3"],
    "model.pos_encoding=foo": ["model.pos_encoding=foo"],
    "model.d_model=30": ["model.d_model=30"],
    "cfg_resolve": ["--cfg", "job", "--resolve", "seed=3"],
}


def light_commands(tmp_path_factory) -> tuple[Path, dict]:
    """Commands that end before anything trains (LIGHT: --help, shell completion, config
    errors, --cfg job) in one fresh interpreter in an empty folder, W&B off, COMP_LINE
    "attnlab-train model.pos_" for the completion: the result's "runs" by LIGHT's keys."""

    def start(folder: Path) -> dict:
        env = {**os.environ, "WANDB_MODE": "disabled", "COMP_LINE": "attnlab-train model.pos_"}
        result = train_commands(*LIGHT.values(), env=env, cwd=folder, timeout=120)
        result["runs"] = dict(zip(LIGHT, result["runs"], strict=True))
        return result

    return shared(tmp_path_factory, "light", start)
