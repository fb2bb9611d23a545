"""Time to quality: the WallClock callback's time/elapsed_s (summed over a run's attempts) and
attnlab-bench --quality's curve from a run's metrics.csv."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest

from attnlab.bench.quality import TIME, quality_rows
from attnlab.cli import bench
from attnlab.training.callbacks import WallClock


def test_wall_clock_logs_after_each_validation_and_goes_on_after_a_resume(monkeypatch):
    clock = iter([1000.0, 1030.0, 1045.0])
    monkeypatch.setattr("attnlab.training.callbacks.time.monotonic", lambda: next(clock))
    logged = []
    module = SimpleNamespace(log=lambda name, value, **kw: logged.append((name, value)))
    resumed = WallClock()
    resumed.load_state_dict({"elapsed_s": 600.0})  # the first attempt trained 10 minutes
    resumed.on_train_start(None, module)  # t = 1000
    resumed.on_validation_epoch_end(SimpleNamespace(sanity_checking=True), module)  # not logged
    resumed.on_validation_epoch_end(SimpleNamespace(sanity_checking=False), module)  # t = 1030
    assert logged == [(TIME, 630.0)]
    assert resumed.state_dict() == {"elapsed_s": 645.0}  # t = 1045


def _metrics(path, rows):
    keys = ["step", "train/loss", TIME, "val/nll", "val/bleu", "val/chrf"]
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def test_the_curve_merges_a_validations_rows_and_skips_training_rows(tmp_path):
    _metrics(tmp_path, [
        {"step": 100, "train/loss": 3.0},
        {"step": 250, TIME: 120.0, "val/nll": 2.5},
        {"step": 250, "val/bleu": 20.1, "val/chrf": 45.0},
        {"step": 500, TIME: 250.0, "val/nll": 2.1},
    ])  # fmt: skip
    rows = quality_rows(tmp_path)
    assert rows == [
        {"step": 250, TIME: 120.0, "val/nll": 2.5, "val/bleu": 20.1, "val/chrf": 45.0},
        {"step": 500, TIME: 250.0, "val/nll": 2.1},
    ]


def test_bench_quality_prints_plots_and_refuses_a_run_without_wall_time(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _metrics(run, [{"step": 250, TIME: 60.0, "val/bleu": 20.0}])
    with pytest.raises(SystemExit) as done:
        bench.main(["--quality", str(run), "--json", str(tmp_path / "q.json")])
    assert done.value.code == 0
    assert "1.00     250" in capsys.readouterr().out
    assert (tmp_path / "quality.png").exists()
    assert json.loads((tmp_path / "q.json").read_text())["run"][0]["val/bleu"] == 20.0
    old = tmp_path / "old"
    old.mkdir()
    _metrics(old, [{"step": 250, "val/bleu": 20.0}])
    with pytest.raises(SystemExit) as done:
        bench.main(["--quality", str(old)])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no time/elapsed_s column" in err[0]
