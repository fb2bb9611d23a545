"""Deterministic run identity: same run, same directory and W&B id; different run, different."""

import json

import pytest

from attnlab.runs.identity import (
    config_drift,
    defining_overrides,
    run_dir_name,
    run_hash,
    wandb_run_id,
)
from attnlab.runs.record import run_name
from attnlab.sweeps.runner import TrialResult, finish
from attnlab.sweeps.spec import Trial


def test_same_run_same_name_whatever_the_order_and_the_plumbing():
    a = ["model.n_heads=2", "seed=3", "logger=csv", "paths.root=/x", "resume=auto"]
    b = ["seed=3", "model.n_heads=2", "trainer.enable_progress_bar=false", "group=g"]
    assert run_dir_name("exp", a, 3) == run_dir_name("exp", b, 3)
    assert defining_overrides(a) == ["model.n_heads=2", "seed=3"]


def test_what_defines_a_run_changes_the_hash():
    base = run_hash("exp", ["model.n_heads=2"], 1)
    assert run_hash("exp", ["model.n_heads=4"], 1) != base
    assert run_hash("exp", ["model.n_heads=2"], 2) != base  # seed
    assert run_hash("other", ["model.n_heads=2"], 1) != base  # experiment name
    assert run_hash("exp", ["model.n_heads=2", "trainer.max_steps=10"], 1) != base


def test_readable_names_and_fresh_directories():
    name = run_dir_name("exp", ["model.pos_encoding=rope", "model.n_heads=8"], 1)
    assert name.startswith("h_8-pe_rope-") and "=" not in name
    assert run_dir_name("exp", [], 1).startswith("default-")
    fresh = run_dir_name("exp", [], 1, fresh=True)
    assert fresh.startswith(run_dir_name("exp", [], 1) + "-") and fresh != run_dir_name(
        "exp", [], 1
    )


def test_paths_stay_out_of_names_but_not_out_of_the_hash():
    with_path = ["data.root=/data/multi30k", "experiment=multi30k", "data.src_file=~/x.en"]
    name = run_dir_name("exp", with_path, 1)
    assert name.startswith("experiment_multi30k-") and "data" not in name.split("-")[0]
    assert run_dir_name("exp", ["data.root=/elsewhere", *with_path[1:]], 1) != name
    assert run_name(["data.root=/data/multi30k", "optim.lr=.5"], default="d") == "lr=.5"


def test_wandb_id_follows_the_run_directory(tmp_path):
    assert wandb_run_id(tmp_path / "a") == wandb_run_id(tmp_path / "a")
    assert wandb_run_id(tmp_path / "a") != wandb_run_id(tmp_path / "b")


def test_config_drift_names_defining_keys_only():
    stored = {
        "model": {"dropout": 0.1, "n_heads": 8},
        "optim": {"betas": [0.9, 0.98]},
        "paths": {"run_dir": "/a"},
        "logger": {"wandb": {"project": "x"}},
        "checkpoint": {"keep_last": 5},
    }
    same = {**stored, "paths": {"run_dir": "/b"}, "logger": {}, "checkpoint": {"keep_last": 2}}
    assert config_drift(stored, same) == []  # where it writes, how it logs: not the run
    edited = {**stored, "model": {"dropout": 0.3}, "optim": {"betas": [0.9, 0.999]}, "seed": 2}
    assert config_drift(stored, edited) == [
        "model.dropout: 0.1 -> 0.3",
        "model.n_heads: 8 -> <absent>",
        "optim.betas: [0.9, 0.98] -> [0.9, 0.999]",
        "seed: <absent> -> 2",
    ]


def test_a_trial_refused_with_exit_2_is_not_credited_with_an_older_results_json(tmp_path):
    run_dir = tmp_path / "000-seed_1"
    run_dir.mkdir()
    old = {"status": "completed", "metrics": {"val/loss": 0.5}}
    (run_dir / "results.json").write_text(json.dumps(old))
    line = "attnlab-train: error: ... was trained with a different config"
    (run_dir / "trial.log").write_text(line + "\n")
    trial = Trial(index=0, params={"seed": 1}, overrides=[], command=["x"], name="seed_1",
                  run_dir=run_dir)  # fmt: skip
    refused, rerun = TrialResult(trial), TrialResult(trial)
    finish(refused, 2, interrupted=False, metric_name="val/loss")
    assert (refused.status, refused.metric) == ("failed", None)
    assert refused.error == f"bad config: {line}"
    finish(rerun, 0, interrupted=False, metric_name="val/loss")  # "already completed": exit 0
    assert (rerun.status, rerun.metric) == ("completed", 0.5)


def test_an_option_added_since_the_run_was_made_is_no_change_at_its_default():
    """model.qk_norm and optim._target_ came with issue 22; older run directories lack them."""
    stored = {"model": {"n_heads": 8}, "optim": {"lr": 1e-3}}
    current = {"model": {"n_heads": 8, "qk_norm": False}, "optim": {"_target_": "x", "lr": 1e-3}}
    defaults = {"model.qk_norm": False, "optim._target_": "x"}

    def at_default(key, value):
        return key in defaults and defaults[key] == value

    assert config_drift(stored, current, at_default) == []
    turned_on = {**current, "model": {"n_heads": 8, "qk_norm": True}}
    assert config_drift(stored, turned_on, at_default) == ["model.qk_norm: <absent> -> True"]
    assert len(config_drift(stored, current)) == 2  # without the rule: both are changes


@pytest.mark.slow
def test_the_run_refuses_a_stored_config_only_where_it_differs(compose, tmp_path):
    import yaml

    from attnlab.config.plain import plain_config
    from attnlab.pipeline.train import refuse_changed_config
    from attnlab.runs.identity import RunConfigChanged

    here = [f"paths.run_dir={tmp_path}"]
    stored = plain_config(compose(here))
    del stored["model"]["qk_norm"]  # as written before it existed
    del stored["model"]["pos"]  # (a mapping, default {}: an encoding's options, issue 64)
    # the optimizer and the schedule as written before they were classes named by `_target_`
    stored["optim"] = {**stored["optim"], "name": "adam"}
    del stored["optim"]["_target_"]
    stored["scheduler"] = {**stored["scheduler"], "name": "cosine", "scale": 1.0,
                           "_target_": "attnlab.training.schedules.build_schedule"}  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(stored))
    same = compose(here)
    refuse_changed_config(tmp_path, same, plain_config(same))  # defaults: the same run
    changed = compose([*here, "model.qk_norm=true"])
    with pytest.raises(RunConfigChanged, match=r"model.qk_norm: <absent> -> True"):
        refuse_changed_config(tmp_path, changed, plain_config(changed))
    changed = compose([*here, "model.pos_encoding=t5_bias", "model.pos.num_buckets=16"])
    with pytest.raises(RunConfigChanged, match=r"model.pos.num_buckets: <absent> -> 16"):
        refuse_changed_config(tmp_path, changed, plain_config(changed))
    changed = compose([*here, "optim=adamw"])
    with pytest.raises(RunConfigChanged, match=r"optim._target_: 'torch.optim.Adam' -> 'torch.o"):
        refuse_changed_config(tmp_path, changed, plain_config(changed))


def test_a_status_is_stored_as_a_plain_string(tmp_path):
    """W&B records an Enum by its name ("COMPLETED"): the record keeps plain strings."""
    from attnlab.runs.record import RunRecord
    from attnlab.runs.status import Status

    record = RunRecord(tmp_path, name="x", seed=1, overrides=[], config={})
    data = record.write(Status.COMPLETED)
    assert type(data["status"]) is str and data["status"] == "completed"
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "completed"
    assert f"{Status.FAILED}" == str(Status.FAILED) == "failed"
