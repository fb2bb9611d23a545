"""attnlab-train answers --help, shell completion and config errors without loading torch,
Lightning or W&B (they take seconds to import): what a command imports, not how long it takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "lightning", "pytorch_lightning", "wandb")


def _train_command(
    *argv: str, env: dict | None = None, timeout: float = 120
) -> tuple[int, str, set[str]]:
    """Run attnlab-train's entry point with `argv` in a fresh interpreter: its exit code, its
    output and the modules it imported (full names: a package's parents are among them)."""
    code = (
        "import sys\n"
        f"sys.argv = ['attnlab-train', *{list(argv)!r}]\n"
        "from attnlab.cli.train import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"  # a package's parents are in it too
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env
    )
    lines = proc.stdout.splitlines()
    modules = set(lines[-1].split()[1:]) if lines and lines[-1].startswith("MODULES") else set()
    return proc.returncode, proc.stdout + proc.stderr, modules


def test_help_imports_no_torch_lightning_or_wandb():
    code, out, modules = _train_command("--help")
    assert code == 0 and "model.pos_encoding" in out  # the composed config was shown
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_head=3", "model.n_head is not a key of model"),
        ("model.pos_encoding=foo", "model.pos_encoding='foo' is not valid"),
        ("model.d_model=30", "model.d_model=30 is not divisible by"),
    ],
)
def test_config_errors_import_no_torch(override, message):
    code, out, modules = _train_command(override)
    assert code == 2 and message in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_shell_completion_imports_no_torch():
    import os

    env = {**os.environ, "COMP_LINE": "attnlab-train model.pos_"}
    code, out, modules = _train_command("--shell-completion", "query=bash", env=env)
    assert code == 0 and "model.pos_encoding=" in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_an_offline_wandb_run_starts_and_says_how_to_upload(tmp_path):
    import os

    env = {**os.environ, "WANDB_MODE": "offline"}
    args = ("debug=tiny", "trainer.max_steps=1", "logger=wandb", f"paths.root={tmp_path}")
    code, out, modules = _train_command(*args, "trainer.limit_test_batches=1", env=env, timeout=300)
    assert code == 0, out[-2000:]
    assert "W&B is offline" in out and "wandb sync" in out and "wandb" in modules


PROBE = '''
import gc

import lightning as L


class Probe(L.Callback):
    """Prints the cyclic collector's state when training starts."""

    def on_train_start(self, trainer, pl_module):
        full = gc.get_stats()[2]["collections"]
        print("PROBE", gc.isenabled(), gc.get_freeze_count(), full, flush=True)
'''


def _probe(tmp_path, *argv: str, flags: tuple[str, ...] = ()) -> list[tuple[bool, int, int]]:
    """(collector on, frozen objects, full collections so far) at each run's training start."""
    import os

    (tmp_path / "gc_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "WANDB_MODE": "disabled"}
    args = (*flags, "debug=tiny", "trainer.max_steps=1", "trainer.limit_test_batches=1", *argv)
    args += ("+callbacks.probe._target_=gc_probe.Probe", f"paths.root={tmp_path / 'runs'}")
    code, out, _ = _train_command(*args, env=env, timeout=300)
    assert code == 0, out[-2000:]
    rows = [line.split()[1:] for line in out.splitlines() if line.startswith("PROBE")]
    return [(on == "True", int(frozen), int(full)) for on, frozen, full in rows]


def test_a_single_run_starts_without_full_collections_then_trains_with_the_collector_on(tmp_path):
    """Start-up ran about 7 full collections (0.7 s of 3.2 s to the first step) over objects that
    live as long as the process; attnlab-train pauses the collector until training, then
    freezes what exists and turns it on (attnlab.runs.startup)."""
    [(on, frozen, full)] = _probe(tmp_path, "logger=wandb")
    assert on  # training runs with the collector on
    assert full == 0  # no full collection while starting
    assert frozen > 100_000  # torch's and Lightning's objects, out of later collections


def test_a_multirun_does_not_pause_the_collector(tmp_path):
    """The preflight of a multirun composes every job's config: with the collector paused, that
    garbage would be frozen for good."""
    rows = _probe(tmp_path, "seed=1,2", f"paths.multirun_root={tmp_path / 'multi'}", flags=("-m",))
    assert len(rows) == 2
    assert all(on and frozen == 0 for on, frozen, _ in rows), rows


def test_the_collector_comes_back_on_whether_or_not_the_run_trained():
    """A command that ends before training (--help, a config error, a completed run) turns the
    collector on again without freezing anything; one that trains freezes, then turns it on."""
    import gc

    from attnlab.runs.startup import collector_paused, resume_collector

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    with collector_paused(pause=False):
        resume_collector()  # nothing was paused: nothing is frozen
        assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    try:
        with collector_paused():
            resume_collector()
            assert gc.isenabled() and gc.get_freeze_count() > frozen
            resume_collector()  # a second run in the same process: the default collector
        assert gc.isenabled()
    finally:
        gc.unfreeze()
