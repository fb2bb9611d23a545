"""attnlab-compare --wandb-view: the sweep's W&B workspace built from its description for every
sweep file (filters, grouping, panels, the run table), with no server; offline it refuses in one
line and makes nothing. Saving to a server needs the internet and is not tested here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("wandb_workspaces", reason="--wandb-view needs the [wandb-view] extra")

import wandb_workspaces.reports.v2 as wr  # noqa: E402

from attnlab.sweeps.spec import load_sweep, swept_keys  # noqa: E402
from attnlab.sweeps.wandb_view import STEP, build_view, config_path, describe  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))


def _view(path: Path, diag=()):
    config = {"name": path.stem, **load_sweep(path)}
    desc = describe(config, diag=diag)
    return config, desc, build_view(desc, "team", config.get("project") or "attnlab")


def _panels(workspace) -> list:
    return [p for s in workspace.sections for p in s.panels]


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_sweep_files_view_filters_its_group_and_groups_by_its_arms(path):
    config, desc, workspace = _view(path)
    if desc.tune is not None:  # a study: test_a_studys_view_has_each_stage_as_its_own_groups
        assert workspace.runset_settings.filters == f"Metric(\"Group\") == '{desc.group}'"
        return
    arms = [k for k in swept_keys(config) if k not in ("seed", "scheduler.peak_lr")]
    assert list(desc.arm_keys) == arms
    runset = workspace.runset_settings
    assert runset.filters == f"Metric(\"Group\") == '{desc.group}'"  # its runs, and only they
    grouped = [k.name for k in runset.groupby]
    lr = ["scheduler.peak_lr.value"] if desc.lr_key else []
    assert grouped == [config_path(k) for k in arms] + lr  # never the seed: seeds are pooled
    assert f"summary:{desc.metric}" in runset.pinned_columns
    assert all(f"config:{k}.value" in runset.pinned_columns for k in arms)
    line, bar = workspace.sections[0].panels
    assert isinstance(line, wr.LinePlot) and line.y == [desc.metric] and line.x == STEP
    assert (line.groupby_aggfunc, line.groupby_rangefunc) == ("mean", "stddev")
    assert isinstance(bar, wr.BarPlot) and bar.metrics == [desc.metric]
    assert bar.groupby_rangefunc == "stddev"  # the error bars: the spread over seeds
    scatter = [p for p in _panels(workspace) if isinstance(p, wr.ScatterPlot)]
    assert len(scatter) == (1 if desc.lr_key else 0)
    workspace._to_model()  # serializes without a server


def test_the_group_is_the_one_the_runs_were_logged_in():
    """norm_warmup's command sets group=norm_warmup itself; the others get their name."""
    _, desc, _ = _view(REPO / "sweeps" / "norm_warmup.yaml")
    assert desc.group == "norm_warmup" and desc.metric == "val/nll_best"
    config = {"name": "x", **load_sweep(REPO / "sweeps" / "norm_warmup.yaml")}
    config["command"] = [*config["command"], "group=my_group"]
    assert describe(config).group == "my_group"


def test_an_lr_sweep_gets_the_metric_against_the_rate_on_a_log_axis_per_arm():
    config, desc, workspace = _view(REPO / "sweeps" / "lr_sensitivity.yaml")
    assert desc.lr_key == "scheduler.peak_lr"
    assert "scheduler.peak_lr" not in desc.arm_keys
    [scatter] = [p for p in _panels(workspace) if isinstance(p, wr.ScatterPlot)]
    assert scatter.log_x is True
    assert scatter.x.name == "peak_lr" and scatter.y.name == "val/nll"  # both from the summary
    model = json.dumps(workspace._to_model().model_dump(by_alias=True), default=str)
    assert '"summary:peak_lr"' in model and '"xAxisLogScale": true' in model
    sort = workspace.runset_settings.order[0]
    assert sort.item.name == "val/nll" and sort.ascending  # lower is better first


def test_diag_panels_appear_only_where_the_runs_logged_them():
    _, _, without = _view(REPO / "sweeps" / "heads.yaml")
    assert not any(s.name.startswith("diag/") for s in without.sections)
    _, desc, with_diag = _view(
        REPO / "sweeps" / "heads.yaml", diag=["diag/log_z", "diag/grad_norm"]
    )
    [section] = [s for s in with_diag.sections if s.name.startswith("diag/")]
    assert [p.y for p in section.panels] == [["diag/grad_norm"], ["diag/log_z"]]


def test_the_serialized_view_holds_the_filter_grouping_and_panels():
    _, desc, workspace = _view(REPO / "sweeps" / "norm_warmup.yaml", diag=["diag/grad_norm"])
    model = json.dumps(workspace._to_model().model_dump(by_alias=True), default=str)
    for needle in ('"group"', "norm_warmup", "model.norm_position.value",
                   "scheduler.warmup_steps.value", '"Run History Line Plot"', '"Bar Chart"',
                   '"diag/grad_norm"', '"stddev"'):  # fmt: skip
        assert needle in model, needle


def test_offline_it_is_one_line_exit_2_and_nothing_is_made(tmp_path, capsys, monkeypatch):
    from attnlab.cli import compare

    sweep = tmp_path / "sweep"
    run = sweep / "000-n_heads_1-seed_1"
    run.mkdir(parents=True)
    (sweep / "sweep.yaml").write_text((REPO / "sweeps" / "heads.yaml").read_text())
    results = {"status": "completed", "metrics": {"val/bleu_best": 20.0},
               "config": {"model.n_heads": 1, "seed": 1}, "seed": 1}  # fmt: skip
    (run / "results.json").write_text(json.dumps(results))
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "report"
    assert compare.main([str(sweep), "--wandb-view", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "WANDB_MODE=offline; no view was made" in err[0], err
    assert not out.exists()
    (sweep / "sweep.yaml").unlink()
    assert compare.main([str(sweep), "--wandb-view", "--out", str(out)]) == 2
    assert "needs a sweep's folder" in capsys.readouterr().err
    assert yaml.safe_load((REPO / "sweeps" / "heads.yaml").read_text())["project"]


STUDIES = [p for p in SWEEPS if "tune" in (yaml.safe_load(p.read_text()) or {})]


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_a_studys_view_has_each_stage_as_its_own_groups(path):
    """A study's runs are grouped by W&B job type (tune: stage 1, seeds: stage 2), arm and tuned
    value: a section per stage, stage 1 on its tuning metric, stage 2 on the primary metric."""
    config, desc, workspace = _view(path)
    spec = yaml.safe_load(path.read_text())
    assert desc.tune.key == spec["tune"]["key"] and desc.metric == spec["primary"]["metric"]
    arms = [k for k in spec["parameters"] if k != "seed"]
    grouped = [k.name for k in workspace.runset_settings.groupby]
    assert grouped == ["JobType", *(config_path(k) for k in arms), config_path(desc.tune.key)]
    assert "run:jobType" in workspace.runset_settings.pinned_columns
    one, two = workspace.sections[:2]
    assert one.name.startswith("stage 1's view (job type tune)") and one.panels[0].y == [
        spec["tune"]["metric"]
    ]
    assert two.name.startswith("stage 2's view (job type seeds)")
    assert two.panels[0].metrics == [spec["primary"]["metric"]]
    model = json.dumps(workspace._to_model().model_dump(by_alias=True), default=str)
    assert '"jobType"' in model


def test_a_studys_stage_reaches_wandb_as_the_runs_job_type(tmp_path, monkeypatch):
    """attnlab-sweep sets ATTNLAB_WANDB_JOB_TYPE per stage; the run's W&B logger passes it as
    wandb.init's job_type (and none without it)."""
    from attnlab.runs import lightning_loggers, loggers

    seen = []

    class Recorder:
        def __init__(self, previous, **kwargs):
            seen.append(kwargs)

    monkeypatch.setattr(lightning_loggers, "ReplayingWandbLogger", Recorder)
    run = loggers.RunForLoggers(tmp_path, "run", "g", [], [])
    monkeypatch.setenv("ATTNLAB_WANDB_JOB_TYPE", "tune")
    loggers._wandb_logger(run, "attnlab", None, True, False)
    monkeypatch.delenv("ATTNLAB_WANDB_JOB_TYPE")
    loggers._wandb_logger(run, "attnlab", None, True, False)
    assert [k["job_type"] for k in seen] == ["tune", None]
