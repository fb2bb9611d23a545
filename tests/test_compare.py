"""attnlab-compare on fake run directories that follow docs/architecture.md."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from attnlab.analysis import groups as grouping
from attnlab.analysis import runs as reading
from attnlab.analysis.plots import read_curve, y_scale
from attnlab.cli import compare
from attnlab.runs.dotted import flatten

COMMON = {"model.d_model": 64, "model.n_heads": 4, "model.d_k": None, "scheduler.name": "noam"}
# (pos_encoding, seed) -> (status, val/nll_best, test/exact_match); val/loss_best (smoothed) is
# larger by SMOOTHING and must not be the headline.
SMOOTHING = 0.5
RUNS = {
    ("rope", 1): ("completed", 1.0, 0.90),
    ("rope", 2): ("completed", 1.2, 0.80),
    ("rope", 3): ("failed", None, None),
    ("alibi", 1): ("completed", 2.0, 0.50),
    ("alibi", 2): ("completed", 2.4, 0.70),
    ("alibi", 3): ("diverged", 9.0, None),
}


def write_run(run_dir: Path, pe: str, seed: int, status: str, best, exact) -> None:
    run_dir.mkdir(parents=True)
    metrics = {}
    if best is not None:
        metrics["val/nll_best"] = best
        metrics["val/nll"] = float("nan") if status == "diverged" else best + 0.05
        metrics["val/loss_best"] = best + SMOOTHING
        metrics["val/loss"] = metrics["val/nll"] + SMOOTHING
    if exact is not None:
        metrics["test/exact_match"] = exact
    config = {**COMMON, "model.pos_encoding": pe, "seed": seed, "run_name": f"{pe}-s{seed}"}
    record = {
        "status": status,
        "metrics": metrics,
        "overrides": [f"model.pos_encoding={pe}", f"seed={seed}"],
        "config": config,
        "steps": 40,
        "wall_time_s": 1.0,
        "seed": seed,
        "run_dir": str(run_dir),
        "name": config["run_name"],
        "error": None if status == "completed" else f"{status} at step 30",
    }
    (run_dir / "results.json").write_text(json.dumps(record))
    if status == "failed":
        return  # no metrics.csv: it failed before logging
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["epoch", "step", "train/loss", "val/nll", "val/exact_match"])
        for step in range(0, 40, 10):
            value = 5.0 / (step + 1) + (best or 0)
            if status == "diverged" and step >= 30:
                value = float("nan")
            writer.writerow([0, step, value + 0.1, "", ""])  # sparse rows, as CSVLogger writes
            writer.writerow([0, step, "", value, 0.5])


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for (pe, seed), (status, best, exact) in RUNS.items():
        write_run(root / f"{pe}-s{seed}", pe, seed, status, best, exact)
    broken = root / "broken"
    broken.mkdir()
    (broken / "results.json").write_text('{"status": "completed", "metrics": ')
    return root


@pytest.mark.slow
def test_compare_aggregates_seeds_and_marks_failed_and_diverged_runs(runs_dir, capsys):
    assert compare.main([str(runs_dir), "--all"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "6 runs in 2 groups by model.pos_encoding" in lines[0]  # seed, run_name ignored
    rope = next(ln for ln in lines if ln.startswith("rope "))
    alibi = next(ln for ln in lines if ln.startswith("alibi "))
    assert "2 completed, 1 failed" in rope and "2 completed, 1 diverged" in alibi
    # val/nll_best (unsmoothed, the default headline) over the completed seeds: mean, std, n
    assert "val/nll_best mean" in lines[1] and "val/loss_best" not in lines[1]
    assert rope.split()[5:9] == ["1.1", f"{statistics.stdev([1.0, 1.2]):.4g}", "2", "0.85"]
    assert alibi.split()[5:9] == ["2.2", f"{statistics.stdev([2.0, 2.4]):.4g}", "2", "0.6"]
    assert f"could not read {runs_dir / 'broken' / 'results.json'}: not valid JSON" in out

    with open(runs_dir / "comparison.csv", newline="") as f:
        rows = {r["model.pos_encoding"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"rope", "alibi"}
    assert rows["rope"]["status"] == "2 completed, 1 failed"
    assert rows["alibi"]["status"] == "2 completed, 1 diverged"
    assert math.isclose(float(rows["rope"]["val/nll_best_mean"]), 1.1)
    assert math.isclose(float(rows["alibi"]["val/nll_best_std"]), statistics.stdev([2.0, 2.4]))
    assert rows["alibi"]["val/nll_best_n"] == "2"  # the diverged run's 9.0 is not averaged
    assert math.isclose(float(rows["alibi"]["test/exact_match_mean"]), 0.6)

    md = (runs_dir / "comparison.md").read_text()
    assert "| alibi | 2 completed, 1 diverged | 2.2 |" in md
    assert "| pos_encoding=alibi | 3 | diverged | 9 | alibi-s3 | diverged at step 30 |" in md
    assert "| pos_encoding=rope | 3 | failed |  | rope-s3 | failed at step 30 |" in md
    assert "broken/results.json: not valid JSON" in md
    for png in ("val_nll_curves.png", "val_nll_best_by_group.png"):
        data = (runs_dir / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert f"]({png})" in md


@pytest.mark.slow
def test_metric_option_selects_the_headline(runs_dir, tmp_path, capsys):
    out_dir = tmp_path / "report"
    argv = [str(runs_dir), "--metric", "test/exact_match", "--out", str(out_dir)]
    assert compare.main(argv) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "test/exact_match mean" in header and "val/nll_best" not in header
    assert (out_dir / "test_exact_match_by_group.png").exists()
    assert not (runs_dir / "comparison.md").exists()  # --out wins over the first PATH
    assert compare.main([str(runs_dir), "--metric", "val/bleu"]) == 2
    err = capsys.readouterr().err
    assert "'val/bleu' is in no results.json" in err and "test/exact_match" in err


@pytest.mark.slow
def test_group_by_and_no_results(runs_dir, tmp_path, capsys):
    assert compare.main([str(runs_dir), "--group-by", "model.n_heads"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "warning: --group-by averages runs that differ in model.pos_encoding, not only in the "
        "seed: the groups' spread is not a seed spread"
    )
    assert "6 runs in 1 groups by model.n_heads" in lines[1]
    assert lines[4].split()[:7] == ["4", "4", "completed,", "1", "diverged,", "1", "failed"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert compare.main([str(empty)]) == 2  # bad input: one line, exit 2, as a missing folder
    assert capsys.readouterr().err.count("\n") == 1
    assert compare.main([str(tmp_path / "missing")]) == 2


def test_differing_keys_ignore_seed_and_per_run_names(runs_dir):
    paths = reading.find_results([runs_dir])
    runs = [reading.load_run(p) for p in paths if "broken" not in str(p)]
    assert grouping.differing_keys(runs) == ["model.pos_encoding"]
    groups = grouping.group_runs(runs, ["model.pos_encoding"])
    assert [g.values["model.pos_encoding"] for g in groups] == ["alibi", "rope"]
    assert grouping.aggregate([1.0, float("nan"), 3.0]) == (2.0, math.sqrt(2.0), 2)
    assert grouping.aggregate([]) == (None, None, 0)
    # nested configs are flattened to the same dotted keys
    assert flatten({"model": {"n_heads": 8, "d_k": None}, "seed": 1}) == {
        "model.n_heads": 8,
        "model.d_k": None,
        "seed": 1,
    }


@pytest.mark.slow
def test_trials_without_results_come_from_the_sweep_summary(runs_dir, capsys):
    """A trial that failed before writing results.json (bad config) still shows, as failed."""
    summary = {
        "trials": [
            {
                "name": "007-pos_encoding_learned-seed_1",
                "status": "failed",
                "params": {"model.pos_encoding": "learned", "seed": 1},
                "results": None,
                "error": "bad config",
            }
        ]
    }
    (runs_dir / "summary.json").write_text(json.dumps(summary))
    assert compare.main([str(runs_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "7 runs in 3 groups by model.pos_encoding" in lines[0]
    learned = next(ln for ln in lines if ln.startswith("learned "))
    assert learned.split()[1:4] == ["1", "failed", "0"]


def test_read_curve_skips_sparse_rows(runs_dir):
    steps, values = read_curve(runs_dir / "rope-s1" / "metrics.csv", "val/nll")
    assert steps == [0, 10, 20, 30]
    assert values[0] == pytest.approx(6.0)
    assert read_curve(runs_dir / "rope-s3" / "metrics.csv", "val/nll") == ([], [])


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        ([2.4, 3.1, 350.0, 31000.0], "log"),  # qk_norm's logits against a run without it
        ([0.5, 0.9, 2.8], "linear"),  # an nll curve: one axis reads it
        ([-0.01, 0.02, 50.0], "linear"),  # a std band below zero: no log axis
        ([1.0, float("inf"), 5.0], "linear"),  # a diverged value is not a span
    ],
)
def test_curves_spanning_orders_of_magnitude_get_a_log_axis(values, scale):
    assert y_scale(values) == scale


@pytest.mark.slow
def test_runs_never_validated_still_get_plots_of_their_test_metrics(tmp_path, capsys):
    """A sweep of runs shorter than val_check_interval (before ValidateAtEnd): no val/* metric
    and no validation curve; the report still draws the test metrics per group."""
    root = tmp_path / "short"
    for pe in ("rope", "alibi"):
        for seed in (1, 2):
            run_dir = root / f"{pe}-s{seed}"
            write_run(run_dir, pe, seed, "completed", None, 0.5 + 0.1 * seed)
            record = json.loads((run_dir / "results.json").read_text())
            record["metrics"]["test/nll"] = 1.0 + seed
            (run_dir / "results.json").write_text(json.dumps(record))
            (run_dir / "metrics.csv").write_text("epoch,step,train/loss\n0,1,3.0\n")
    assert compare.main([str(root)]) == 0
    out = capsys.readouterr().out
    assert "test/nll mean" in out.splitlines()[1]  # the headline falls back to a test metric
    for png in ("test_nll_by_group.png", "test_exact_match_by_group.png"):
        assert (root / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


@pytest.mark.slow
def test_extrapolation_is_drawn_against_length_per_group(tmp_path, capsys):
    """results.json's "extrapolation" becomes one line per group (mean ± std over seeds) and a
    table by length; a length the encoding could not represent shows as null."""
    root = tmp_path / "extrap"
    for pe, base in (("rope", 0.9), ("learned", 0.8)):
        for seed in (1, 2, 3):
            run_dir = root / f"{pe}-s{seed}"
            write_run(run_dir, pe, seed, "completed", 1.0, 0.9)
            record = json.loads((run_dir / "results.json").read_text())
            record["extrapolation"] = {
                str(n): {"exact_match": base / n + 0.01 * seed, "token_acc": 0.5, "nll": 1.0}
                for n in (8, 16)
            }
            if pe == "learned":
                record["extrapolation"]["32"] = {
                    "exact_match": None, "token_acc": None, "nll": None, "reason": "learned ...",
                }  # fmt: skip
            else:
                record["extrapolation"]["32"] = {"exact_match": 0.0, "token_acc": 0.1, "nll": 3.0}
            (run_dir / "results.json").write_text(json.dumps(record))
    assert compare.main([str(root)]) == 0
    out = capsys.readouterr().out
    # the console's table: the arm's value, mean±std (3 and 1 digits), the keys and n in a note
    tables = out.split("\narm ")  # the group table, then one per length metric
    assert len(tables) == 4 and tables[1].startswith(" " * 5 + "8")
    rope = next(ln for ln in tables[1].splitlines() if ln.startswith("rope "))  # exact match
    mean16 = statistics.fmean([0.9 / 16 + 0.01 * s for s in (1, 2, 3)])
    assert f"{mean16:.3g}±0.01" in rope
    learned = next(ln for ln in tables[1].splitlines() if ln.startswith("learned "))
    assert learned.rstrip().endswith("null")
    assert "arm: pos_encoding; exact_match: mean±std over 3 seeds each" in out
    for metric in ("exact_match", "token_acc", "nll"):
        assert (root / f"extrapolation_{metric}.png").read_bytes()[:4] == b"\x89PNG"
    md = (root / "comparison.md").read_text()
    for metric in ("exact_match", "token_acc", "nll"):  # a table for every length metric
        assert f"| {metric} by length | 8 | 16 | 32 |" in md
    assert "| pos_encoding=rope | 0.5 ± 0 (n=3) | 0.5 ± 0 (n=3) | 0.1 ± 0 (n=3) |" in md
    assert "![extrapolation_exact_match](extrapolation_exact_match.png)" in md


@pytest.mark.slow
def test_attnlab_eval_results_in_a_run_become_eval_metrics(runs_dir, capsys):
    """<run_dir>/eval/greedy.json (attnlab-eval out=<run_dir>/eval/greedy) -> eval/greedy/bleu."""
    for seed, bleu in ((1, 20.0), (2, 22.0)):
        eval_dir = runs_dir / f"rope-s{seed}" / "eval"
        eval_dir.mkdir()
        (eval_dir / "greedy.json").write_text(json.dumps({"bleu": bleu, "chrf": 50.0, "n": 3}))
    assert compare.main([str(runs_dir), "--metric", "eval/greedy/bleu", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "eval/greedy/bleu mean" in lines[1] and "eval/greedy/chrf (mean ± std, n)" in lines[1]
    rope = next(ln for ln in lines if ln.startswith("rope "))
    assert rope.split()[5:8] == ["21", f"{statistics.stdev([20.0, 22.0]):.4g}", "2"]
    argv = [str(runs_dir), "--columns", "eval/*/bleu", "--columns", "test/ex*", "--all"]
    assert compare.main(argv) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "eval/greedy/bleu (mean" in header and "test/exact_match (mean" in header
    assert "chrf" not in header


def test_runs_of_two_sweeps_group_by_what_they_ran(tmp_path):
    """One sweep overrode scheduler.peak_lr, the other left the preset's 2e-3: that run's
    results.json does not record the key, its config.yaml does. They group by the rate they ran,
    and the sweeps' W&B labels (group, tags) do not split them."""

    def run(folder: str, lr: float | None, group: str) -> None:
        run_dir = tmp_path / folder
        run_dir.mkdir(parents=True)
        config = {"model.n_heads": 8, "seed": 1, "group": group, "tags": [group]}
        if lr is not None:
            config["scheduler.peak_lr"] = lr
        record = {"status": "completed", "metrics": {"val/nll_best": 1.0}, "config": config}
        (run_dir / "results.json").write_text(json.dumps(record))
        composed = f"group: {group}\nscheduler:\n  peak_lr: {lr or 0.002}\nmodel:\n  n_heads: 8\n"
        (run_dir / "config.yaml").write_text(composed)

    run("heads/0", None, "heads")
    run("heads_lr/0", 0.001, "heads_lr")
    run("heads_lr/1", 0.004, "heads_lr")
    runs, _ = compare.read_runs([str(tmp_path / "heads"), str(tmp_path / "heads_lr")])
    assert sorted(r.config["scheduler.peak_lr"] for r in runs) == [0.001, 0.002, 0.004]
    assert grouping.differing_keys(runs) == ["scheduler.peak_lr"]


@pytest.mark.slow
def test_a_multiruns_baseline_is_the_first_value_typed(runs_dir, capsys):
    """`-m model.pos_encoding=rope,alibi`: Hydra's multirun.yaml keeps the order typed, and the
    baseline is rope (typed first), not alibi (first in sort order); without it, alibi."""
    assert compare.main([str(runs_dir), "--out", str(runs_dir / "a")]) == 0
    assert "against pos_encoding=alibi:" in capsys.readouterr().out
    task = ["debug=tiny", "model.pos_encoding=rope,alibi", "seed=1,2,3"]
    (runs_dir / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": task}}}))
    assert compare.main([str(runs_dir), "--out", str(runs_dir / "b")]) == 0
    assert "against pos_encoding=rope:" in capsys.readouterr().out
