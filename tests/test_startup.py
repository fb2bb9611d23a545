"""attnlab-train answers --help, shell completion and config errors without loading torch,
Lightning or W&B (they take seconds to import): what a command imports, not how long it takes.
A single run pauses Python's cyclic collector while it starts; a multirun does not. The commands
run in fresh interpreters that other tests read too (tests/cli_run_cache.py)."""

from __future__ import annotations

import pytest

from cli_run_cache import light_commands, multiruns, probe_rows, single_runs

HEAVY = ("torch", "lightning", "pytorch_lightning", "wandb")


def _light(tmp_path_factory, key: str) -> tuple[int, str, set[str]]:
    """The exit code and output of cli_run_cache.LIGHT[key], and the modules its interpreter
    imported: these commands share one fresh interpreter, so a heavy module that any of them
    imported is in every one's set."""
    _, ran = light_commands(tmp_path_factory)
    run = ran["runs"][key]
    return run["code"], run["stdout"] + run["stderr"], set(ran["modules"])


@pytest.mark.slow
def test_help_imports_no_torch_lightning_or_wandb(tmp_path_factory):
    code, out, modules = _light(tmp_path_factory, "help")
    assert code == 0 and "model.pos_encoding" in out  # the composed config was shown
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_head=3", "model.n_head is not a key of model"),
        ("model.pos_encoding=foo", "model.pos_encoding='foo' is not valid"),
        ("model.d_model=30", "model.d_model=30 is not divisible by"),
    ],
)
def test_config_errors_import_no_torch(tmp_path_factory, override, message):
    code, out, modules = _light(tmp_path_factory, override)
    assert code == 2 and message in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_shell_completion_imports_no_torch(tmp_path_factory):
    """`attnlab-train --shell-completion query=bash` with COMP_LINE="attnlab-train model.pos_"."""
    code, out, modules = _light(tmp_path_factory, "completion")
    assert code == 0 and "model.pos_encoding=" in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.slow
def test_an_offline_wandb_run_starts_and_says_how_to_upload(tmp_path_factory):
    """A tiny run with logger=wandb and WANDB_MODE=offline (cli_run_cache.single_runs, the
    first command line of a fresh interpreter)."""
    _, ran = single_runs(tmp_path_factory)
    run = ran["runs"][0]
    out = run["stdout"] + run["stderr"]
    assert run["code"] == 0, ran["out"][-2000:]
    assert "W&B is offline" in out and "wandb sync" in out and "wandb" in ran["modules"]


@pytest.mark.slow
def test_a_single_run_starts_without_full_collections_then_trains_with_the_collector_on(
    tmp_path_factory,
):
    """Start-up ran about 7 full collections (0.7 s of 3.2 s to the first step) over objects that
    live as long as the process; attnlab-train pauses the collector until training, then
    freezes what exists and turns it on (attnlab.runs.startup). Read at training start by
    cli_run_cache.PROBE in a tiny single run with W&B offline, a fresh interpreter's first
    command line (cli_run_cache.single_runs)."""
    _, ran = single_runs(tmp_path_factory)
    run = ran["runs"][0]
    assert run["code"] == 0, ran["out"][-2000:]
    [(on, frozen, full)] = probe_rows(run["stdout"])
    assert on  # training runs with the collector on
    assert full == 0  # no full collection while starting
    assert frozen > 100_000  # torch's and Lightning's objects, out of later collections


@pytest.mark.slow
def test_a_multirun_does_not_pause_the_collector(tmp_path_factory):
    """The preflight of a multirun composes every job's config: with the collector paused, that
    garbage would be frozen for good. (cli_run_cache.multiruns: its first command line, a fresh
    interpreter's first multirun, seed=1,2 with cli_run_cache.PROBE.)"""
    _, ran = multiruns(tmp_path_factory)
    run = ran["runs"][0]
    assert run["code"] == 0, ran["out"][-2000:]
    rows = probe_rows(run["stdout"])
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
