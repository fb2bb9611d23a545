"""attnlab-compare's command line (attnlab.cli.compare runs it)."""

from __future__ import annotations

import argparse

from attnlab import programs

PROG = programs.COMPARE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Compare runs (every results.json below each PATH), seeds aggregated.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="run, sweep or multirun directories")
    p.add_argument(
        "--metric",
        help="headline metric (default: the sweep file's metric, else val/nll_best, val/nll, "
        "val/loss_best, val/loss, then test metrics)",
    )
    p.add_argument("--curve-metric", default="val/nll", help="metric of the curve plot")
    p.add_argument(
        "--group-by", action="append", metavar="KEY", help="group by this config key (repeatable)"
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also ignore config keys matching this glob (repeatable), e.g. 'data.*'",
    )
    p.add_argument(
        "--columns",
        action="append",
        metavar="PATTERN",
        help="only the test/* and eval/* metrics matching this glob (repeatable), "
        "e.g. 'eval/*/bleu'",
    )
    _add_statistics_arguments(p)
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the statistics and per-length tables as markdown, each under a "
        "'<!-- table: KEY -->' line (what docs/REPRODUCTION.md embeds); writes nothing",
    )
    _add_lr_arguments(p)
    p.add_argument(
        "--all",
        action="store_true",
        help="print every metric's table on the console (by default the headline's only; the "
        "files always hold all)",
    )
    p.add_argument(
        "--out",
        help="output directory (default: the sweep's folder: the PATHs' common folder, above "
        "any trial's)",
    )
    _add_search_arguments(p)
    _add_wandb_view_arguments(p)
    return p


def _add_search_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a search's folder (attnlab.sweeps.search_compare)."""
    p.add_argument(
        "--top", type=int, default=5, help="a search: the best trials shown per arm (default 5)"
    )
    p.add_argument(
        "--rerun-best",
        type=int,
        metavar="K",
        help="a search: write a sweep file per arm for each of its best K completed configs, "
        "rerun over --seeds seeds, and print the commands that run and compare them",
    )
    p.add_argument(
        "--seeds", type=int, default=5, help="--rerun-best: seeds per config (default 5)"
    )


def _add_statistics_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the statistics (attnlab.analysis.stats) and the planner."""
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the group the others are tested against (repeatable for several keys), e.g. "
        "model.n_heads=8 or n_heads=8 (default: the sweep file's `baseline:`, else the first "
        "value of each swept parameter, else the first group)",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="paired t-test over seeds (arms that share seeds and data order) instead of Welch's",
    )
    p.add_argument(
        "--equivalence",
        type=float,
        metavar="DELTA",
        help="also test each arm's equivalence to the baseline within +-DELTA (two one-sided "
        "tests on the same t-test, the 90%% interval, Holm across the arms): 'equivalent "
        "within +-DELTA' is claimed only where it passes",
    )
    p.add_argument(
        "--plan",
        type=float,
        metavar="DELTA",
        help="print the seeds per arm needed to detect a difference DELTA in --metric with 80%% "
        "power from these runs' spread, and its compute; writes nothing",
    )


def _add_lr_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a learning-rate sweep (attnlab.analysis.lr_sweep)."""
    p.add_argument(
        "--x",
        "--lr-key",
        dest="x",
        metavar="KEY",
        help="a numeric swept key to read as a learning-rate sweep's axis (default: "
        "scheduler.peak_lr when it is swept): per arm the metric against KEY, the best value, "
        "the LR sensitivity, and the arms compared at their own best",
    )
    p.add_argument(
        "--cap",
        type=float,
        help="learning-rate sweep: the value a run that diverged or failed counts as, and beyond "
        "which a value is capped (default for an nll: each run's loss at initialization)",
    )
    p.add_argument(
        "--lr-range",
        metavar="LO:HI",
        help="learning-rate sweep: the second range of the sensitivity and the tests, e.g. "
        "1e-4:3e-2 (default: the grid's rates below the lowest at which any arm stalls)",
    )
    p.add_argument(
        "--tol",
        type=float,
        default=0.1,
        help="learning-rate sweep: a rate is in an arm's basin when its metric is within TOL of "
        "the arm's best (default 0.1, in the metric's units)",
    )
    p.add_argument(
        "--select-seeds",
        metavar="SEEDS",
        help="learning-rate sweep: choose each arm's best rate on these seeds (e.g. 1,2,3) and "
        "compare the arms there on the other seeds",
    )


def _add_wandb_view_arguments(p: argparse.ArgumentParser) -> None:
    """The sweep's W&B workspace (attnlab.sweeps.wandb_view)."""
    p.add_argument(
        "--wandb-view",
        action="store_true",
        help="also save the sweep's comparison as a W&B workspace (its runs filtered and grouped "
        "by the swept keys, the metric per arm, a bar chart, the LR curve, diag/ panels, the run "
        "table) and print its URL; needs W&B online and an API key",
    )
    p.add_argument(
        "--entity", help="--wandb-view: W&B entity (default: the sweep file's, else yours)"
    )
    p.add_argument(
        "--project", help="--wandb-view: W&B project (default: the sweep file's `project`)"
    )
