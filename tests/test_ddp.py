"""Multi-process training on CPU: `trainer=ddp trainer.accelerator=cpu trainer.devices=2` (gloo).

One single-process run (in this process) and a local sweep of two 2-process DDP trials
(loss.normalize = tokens_global and tokens) run once for the session, at the same time, on
the same global batches (variable lengths, so the ranks hold different numbers of target tokens).
The tests then compare their metrics.csv files step by step.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import forked
from attnlab.config.resolvers import world_size
from attnlab.pipeline.preflight import preflight
from build_utils import dry_build
from cli_run_cache import shared

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"

STEPS = 30
RUN = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.dropout=0",
    "model.attn_dropout=0",
    "data.batch_size=16",  # global: 8 examples per rank under DDP
    "data.train_len=[1,8]",
    "data.eval_len=[1,8]",
    "data.val_size=32",
    "data.test_size=32",
    "scheduler.warmup_steps=5",
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=15",
    "trainer.log_every_n_steps=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "logger=csv",
    "callbacks=none",
    "seed=3",
]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def _start_runs(tmp: Path) -> dict:
    """The single-process run in this process (attnlab.pipeline.train, in tmp/1) while
    attnlab-sweep's process runs the DDP trials (in tmp/sweep): what the tests read, as JSON."""
    from attnlab.config.compose import compose_config
    from attnlab.pipeline.train import train

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("WANDB_MODE", "disabled")
        sweep_file = tmp / "ddp_sweep.yaml"
        sweep_file.write_text(
            yaml.safe_dump(
                {
                    "name": "ddp",
                    "program": "attnlab-train",
                    "method": "grid",
                    "metric": {"name": "val/loss", "goal": "minimize"},
                    "parameters": {"loss.normalize": {"values": ["tokens_global", "tokens"]}},
                    "command": ["${program}", "${args_no_hyphens}"],
                }
            )
        )
        out = tmp / "sweep"
        # the sweep's own process (forked: tests/forked.py) starts the trials
        cmd = [sys.executable, "-m", "attnlab.cli.sweep", str(sweep_file), *RUN, *DDP]
        sweep = forked.popen([*cmd, "--out", str(out)], env=dict(os.environ), cwd=tmp)
        single = [*RUN, "trainer=cpu", f"paths.run_dir={tmp / '1'}"]
        try:
            record = train(compose_config(CONF_DIR, single), single)  # meanwhile, here
            code = sweep.wait(timeout=600)
        finally:
            sweep.kill()  # nothing if it has ended
        (tmp / "sweep.log").write_text(sweep.output("stdout") + sweep.output("stderr"))
    trials = [d for d in out.iterdir() if d.is_dir()] if out.is_dir() else []
    return {
        "single_status": record["status"],
        "code": code,
        "sweep_log": (tmp / "sweep.log").read_text()[-3000:],
        "logs": {d.name: (d / "trial.log").read_text() for d in trials},
        "dirs": {d.name.split("-", 1)[1]: str(d) for d in trials},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"single": run dir, "tokens_global": run dir, "tokens": run dir, "summary": dict,
    "logs": {trial name: trial.log text}}: _start_runs once per pytest session (the tests on
    another xdist worker wait for it and read its folders: cli_run_cache.shared)."""
    tmp, started = shared(tmp_path_factory, "ddp-runs", _start_runs)
    logs = started["logs"]
    assert started["single_status"] == "completed", started
    assert started["code"] == 0, "\n".join(
        [started["sweep_log"], *(t[-3000:] for t in logs.values())]
    )
    dirs = {name: Path(d) for name, d in started["dirs"].items()}
    return {
        "single": tmp / "1",
        "tokens_global": dirs["normalize_tokens_global"],
        "tokens": dirs["normalize_tokens"],
        "summary": json.loads((tmp / "sweep" / "summary.json").read_text()),
        "logs": logs,
    }


def _train_loss(run_dir: Path) -> tuple[list[int], np.ndarray]:
    """(steps, train/loss) from metrics.csv."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(float(r["step"])) for r in rows]
    assert len(set(steps)) == len(steps), "one row per step: only rank zero logs"
    return steps, np.array([float(r["train/loss"]) for r in rows])


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.slow
def test_ddp_sweep_trials_complete_on_two_processes(runs):
    assert [t["status"] for t in runs["summary"]["trials"]] == ["completed", "completed"]
    for log in runs["logs"].values():
        assert "MEMBER: 2/2" in log and "distributed_backend=gloo" in log
    for name in ("tokens_global", "tokens"):
        results = _results(runs[name])
        assert results["status"] == "completed" and results["steps"] == STEPS
        assert "trainer.devices=2" in results["overrides"]  # rank zero's own command line


@pytest.mark.slow
def test_rank_zero_alone_writes_the_run_directory(runs):
    run_dir = runs["tokens_global"]
    files = sorted(p.name for p in run_dir.iterdir())
    assert "results.json" in files and "config.yaml" in files and "metrics.csv" in files
    # The second rank (a Hydra job of its own, hydra.output_subdir=null) writes no config,
    # record or W&B files; metrics.csv has one row per step.
    assert not [f for f in files if f.startswith(".pl_hydra") or f == "wandb"]
    assert "strategy: ddp" in (run_dir / "config.yaml").read_text()
    assert len(_train_loss(run_dir)[0]) == STEPS


@pytest.mark.slow
def test_ddp_loss_curve_equals_one_process_with_the_same_global_batch(runs):
    """loss.normalize=tokens_global: the gradient of the global batch's token mean, exactly
    (up to float reduction order), although the two ranks hold different numbers of tokens."""
    (single_steps, single), (ddp_steps, ddp) = (
        _train_loss(runs["single"]),
        _train_loss(runs["tokens_global"]),
    )
    assert single_steps == ddp_steps == list(range(STEPS))
    rel = np.abs(ddp - single) / single
    print(f"max relative train/loss difference, DDP vs one process: {rel.max():.2e}")
    assert rel.max() < 1e-5
    assert single[-1] < single[0] - 0.5  # it trained
    for key in ("val/loss", "test/loss", "test/token_acc"):
        a, b = (
            _results(runs["single"])["metrics"][key],
            _results(runs["tokens_global"])["metrics"][key],
        )
        assert b == pytest.approx(a, rel=1e-5), key


@pytest.mark.slow
def test_per_rank_token_mean_is_only_close(runs):
    """loss.normalize=tokens averages the ranks' own token means: with unequal token counts
    per rank that is a different (nearby) gradient, so the curves part."""
    (_, single), (_, ddp) = _train_loss(runs["single"]), _train_loss(runs["tokens"])
    assert ddp[0] == pytest.approx(single[0], rel=1e-6)  # same model, same batch
    rel = np.abs(ddp - single) / single
    assert 1e-5 < rel.max() < 0.05


# --- the global batch must divide over the ranks (fast, in-process) ------------------------


@pytest.mark.slow
def test_indivisible_batch_is_a_one_line_error(capsys):
    argv = [*DDP, "data.batch_size=15"]
    with pytest.raises(SystemExit) as exit_info:
        preflight(argv, CONF_DIR)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("attnlab-train: error: data.batch_size=15 is not divisible by the ")
    assert "world size 2" in err


@pytest.mark.slow
def test_world_size_counts_devices_and_nodes(compose):
    assert world_size(compose([*DDP, "trainer.num_nodes=3"]).trainer) == 6
    assert world_size(compose(["trainer=ddp", "trainer.devices=[0,1,2]"]).trainer) == 3
    assert world_size(compose(["trainer=cpu"]).trainer) == 1
    assert world_size(compose(["trainer=ddp", "trainer.devices=auto"]).trainer) is None
    with pytest.raises(ValueError, match=r"data\.batch_size=16 is not divisible .* size 6"):
        dry_build(compose([*DDP, "trainer.num_nodes=3", "data.batch_size=16"]))
    with pytest.raises(ValueError, match=r"trainer\.num_nodes=0 is not valid"):
        dry_build(compose([*DDP, "trainer.num_nodes=0"]))
    dry_build(compose(["trainer=ddp", "trainer.devices=auto", "data.batch_size=15"]))
    dry_build(compose([*DDP, "data.batch_size=16"]))


@pytest.mark.slow
def test_loss_normalize_is_checked_when_composing(compose):
    from attnlab.config.compose import ConfigError
    from attnlab.pipeline.preflight import check

    assert compose(["loss.normalize=tokens"]).loss.normalize == "tokens"
    with pytest.raises(ConfigError, match=r"loss\.normalize='sum' is not valid; expected one of"):
        check(CONF_DIR, ["loss.normalize=sum"])
