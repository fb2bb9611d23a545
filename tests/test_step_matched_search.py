"""scripts/step_matched_search.py: the steps each candidate gets, the CSV of its rows, its errors,
and that the GPU runs' overrides compose with experiment=multi30k_cpu."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from script_utils import load_script

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = ROOT / "scripts" / "step_matched_search.py"


@pytest.fixture(scope="module")
def search():
    return load_script("step_matched_search")


def _jobs(search, tmp_path, times, **kw) -> dict:
    (tmp_path / "t.json").write_text(json.dumps(times))
    args = Namespace(steptime=tmp_path / "t.json", names=kw.get("names", []), base_steps=1835,
                     seeds=kw.get("seeds", [1]), out=tmp_path / "jobs.json",
                     steps=kw.get("steps", []))  # fmt: skip
    search.jobs(args)
    return {j["name"]: j for j in json.loads((tmp_path / "jobs.json").read_text())}


def test_steps_scale_with_the_step_time_and_a_real_runs_steps_win(search, tmp_path):
    times = {"base": 0.30, "ff256": 0.25, "v6000": 0.36}
    jobs = _jobs(search, tmp_path, times, names=["base", "ff256", "v6000", "lr7e-3"], seeds=[1, 2])
    assert jobs["base_s1"]["steps"] == 1836  # a multiple of 4: the 4th validation is the last step
    assert jobs["ff256_s1"]["steps"] == 2200  # 1835 x 0.30 / 0.25 = 2202
    assert jobs["v6000_s2"]["steps"] == 1528  # 1835 x 0.30 / 0.36 = 1529
    assert jobs["lr7e-3_s1"]["steps"] == 1836  # same shape as base: its steps, no timing needed
    assert jobs["ff256_s2"]["overrides"] == ["model.d_ff=256"]
    jobs = _jobs(search, tmp_path, times, names=["ff256"], steps=["ff256=1847"])
    assert jobs["ff256_s1"]["steps"] == 1848


def test_seeds_are_the_outer_loop_so_a_deadline_cuts_whole_seeds(search, tmp_path):
    jobs = _jobs(search, tmp_path, {"base": 0.3, "ff256": 0.25}, names=["base", "ff256"],
                 seeds=[1, 2])  # fmt: skip
    assert list(jobs) == ["base_s1", "ff256_s1", "base_s2", "ff256_s2"]


def test_rows_become_compare_csv_and_failed_runs_are_left_out(search, tmp_path, capsys):
    metrics = {"test/bleu": 33.1, "test/chrf": 58.0, "test/nll": 1.9, "val/bleu": 34.2,
               "val/chrf": 59.0, "val/nll": 1.95}  # fmt: skip
    rows = [
        {"job": {"name": "ff256_s2", "seed": 2, "steps": 2376}, "rc": 0, "wall": 240.0,
         "results": {"status": "completed", "metrics": metrics}},
        {"job": {"name": "d256l2_s1", "seed": 1, "steps": 1088}, "rc": 1, "wall": 3.0, "tail": "x"},
        {"job": {"name": "drop0.1-3560_s1", "seed": 1, "steps": 3560}, "rc": 0, "wall": 350.0,
         "results": {"status": "completed", "metrics": metrics}},
    ]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    search.to_csv(Namespace(rows=[tmp_path / "rows.jsonl"]))
    got = [(r["recipe"], r["seed"], r["steps"], r["test/bleu"])
           for r in csv.DictReader(io.StringIO(capsys.readouterr().out))]  # fmt: skip
    # the failed run is left out; a step count in the job's name is the steps column, not the recipe
    assert got == [("ff256", "2", "2376", "33.1"), ("drop0.1", "1", "3560", "33.1")]


def test_an_unknown_candidate_is_a_one_line_error_naming_the_choices():
    p = subprocess.run([sys.executable, str(SCRIPT), "steptime", "ff512"], capture_output=True,
                       text=True)  # fmt: skip
    assert p.returncode == 2
    assert "unknown candidate 'ff512'; choose from base, drop0, e4d2" in p.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    "steps, message",
    [("ff256", "--steps 'ff256': expected NAME=N"), ("ff256=-3", "--steps 'ff256=-3': expected"),
     ("ff512=1900", "unknown candidate 'ff512'; choose from base")],
)  # fmt: skip
def test_bad_steps_are_a_one_line_error(steps, message):
    p = subprocess.run([sys.executable, str(SCRIPT), "jobs", "t.json", "--base-steps", "1835",
                        "--steps", steps], capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 2
    assert message in p.stderr.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["base", "ff256v3000", "drop0.1_e4d4"])
def test_the_gpu_runs_overrides_compose_with_the_preset(search, name, monkeypatch, tmp_path):
    from attnlab.config.compose import compose_config
    from attnlab.config.location import conf_dir
    from attnlab.pipeline.preflight import check

    data = tmp_path / "multi30k"  # the preflight reads only that the six files are there
    data.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (data / f"{split}.en").write_text("a man rides a horse\n")
        (data / f"{split}.de").write_text("ein mann reitet ein pferd\n")
    monkeypatch.setenv("DATA", str(data))
    monkeypatch.setenv("ACCEL", "cpu")
    job = {"name": name, "seed": 1, "steps": 2000, "overrides": search.CANDIDATES[name]}
    overrides = search._command(job, tmp_path)[3:]  # after python -m attnlab.cli.train
    check(conf_dir(), overrides)
    cfg = compose_config(conf_dir(), overrides)
    assert "time_horizon" not in cfg.callbacks
    steps = (cfg.trainer.max_steps, cfg.scheduler.max_steps, cfg.trainer.val_check_interval)
    assert steps == (2000, 2000, 500)
    assert cfg.callbacks.translation_quality.val_subset == 2000
