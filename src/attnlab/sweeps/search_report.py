"""What a searched sweep found, from its studies: every trial as a sweep summary row, and the
search's own views (search.md: each study's best trial and its config, each parameter's importance
from Optuna, the optimization-history and intermediate-value plots). attnlab-sweep writes them when
its workers stop; attnlab-compare writes them again beside its tables (from <out>/search.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from attnlab.sweeps import study as studies_
from attnlab.sweeps.runner import TrialResult, _metric, read_results
from attnlab.sweeps.search import Search

SEARCH_FILE = "search.json"


def write_search_file(search: Search) -> None:
    """<out>/search.json: where the studies are (for attnlab-compare and a later rerun)."""
    search.out.mkdir(parents=True, exist_ok=True)
    record = {
        "storage": search.storage,
        "studies": search.study_names(),
        "metric": search.metric,
        "goal": search.config["metric"].get("goal", "minimize"),
        "cap_per_study": search.cap,
    }
    (search.out / SEARCH_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _load(storage: str, names):
    import optuna

    from attnlab.runs.optuna_link import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened = open_storage(storage)
    return [optuna.load_study(study_name=n, storage=opened) for n in names]


def study_results(search: Search) -> list[TrialResult]:
    """Every counted trial of every study (any worker's, any earlier command's), in study and
    trial order, with its run's status and metric."""
    rows = []
    for arm, study in zip(search.arms, _load(search.storage, search.study_names()), strict=True):
        trials = study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in trials}
        for t in studies_.counted(trials):
            values = t.user_attrs.get(studies_.ATTR_VALUES)
            status = t.user_attrs.get(studies_.ATTR_STATUS)
            retry_of = by_number.get(t.user_attrs.get(studies_.ATTR_RETRY_OF))
            if values is None and retry_of is not None:  # enqueued again, not yet restarted
                values = retry_of.user_attrs.get(studies_.ATTR_VALUES)
                status = retry_of.user_attrs.get(studies_.ATTR_STATUS) or "interrupted"
            if values is None:  # asked, never started (its worker died first)
                continue
            spec = search.trial(arm, values, t.number, t.user_attrs.get(studies_.ATTR_RUN_DIR))
            result = TrialResult(spec)
            results = read_results(spec.run_dir)
            result.status = status or (
                "running" if t.state.name == "RUNNING" else t.state.name.lower()
            )
            result.metric = _metric(results, search.metric)
            result.wall_time_s = (results or {}).get("wall_time_s")
            result.error = (results or {}).get("error")
            rows.append(result)
    return rows


def _best(study):
    completed = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not completed:
        return None
    reverse = study.direction.name == "MAXIMIZE"
    return sorted(completed, key=lambda t: t.value, reverse=reverse)[0]


def _importances(study) -> str:
    import optuna

    try:
        found = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ImportError) as err:  # too few trials, one parameter
        return f"not computed: {str(err).splitlines()[0]}"
    return ", ".join(f"{k} {v:.2f}" for k, v in found.items()) or "not computed: no parameter"


def _plots(study, out: Path, slug: str) -> list[str]:
    """The optimization history and the intermediate values (Optuna's matplotlib plots)."""
    import warnings

    import matplotlib
    from optuna.exceptions import ExperimentalWarning

    warnings.filterwarnings("ignore", category=ExperimentalWarning)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as oplt

    written = []
    for kind, plot in (
        ("history", oplt.plot_optimization_history),
        ("intermediate", oplt.plot_intermediate_values),
    ):
        try:
            ax = plot(study)
        except (ValueError, RuntimeError):
            continue
        path = out / f"search_{slug}_{kind}.png"
        ax.figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(ax.figure)
        written.append(path.name)
    return written


def write_search_views(folder: Path, record: dict, out: Path | None = None) -> list[str]:
    """search.md (and plots) for the studies of a search.json `record`, into `out` (default:
    the sweep's folder); the console lines: each study's counts and best trial."""
    out = out or folder
    out.mkdir(parents=True, exist_ok=True)
    md, console = ["# Search: " + ", ".join(record["studies"]), ""], []
    for study in _load(record["storage"], record["studies"]):
        trials = studies_.counted(study.get_trials(deepcopy=False))
        states = {}
        for t in trials:
            states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        best = _best(study)
        slug = study.study_name.replace("/", "__")
        md += [f"## {study.study_name}", "", f"Trials: {len(trials)} ({counts}).", ""]
        if best is None:
            md += ["No trial completed.", ""]
            console.append(f"{study.study_name}: {len(trials)} trials ({counts}); none completed")
            continue
        values = best.user_attrs.get(studies_.ATTR_VALUES, best.params)
        shown = " ".join(f"{k}={v}" for k, v in values.items())
        line = (
            f"{study.study_name}: {len(trials)} trials ({counts}); best trial {best.number} "
            f"{record['metric']}={best.value:.4g}: {shown}"
        )
        console.append(line)
        md += [
            f"Best: trial {best.number}, {record['metric']} = {_fmt(best.value)}, run "
            f"`{best.user_attrs.get(studies_.ATTR_RUN_DIR)}`.",
            "",
            "Its config: `" + shown + "`",
            "",
            f"Parameter importance (Optuna): {_importances(study)}.",
            "",
        ]
        md += [f"![{p}]({p})" for p in _plots(study, out, slug)] + [""]
    (out / "search.md").write_text("\n".join(md))
    return console


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def search_views(paths, out: Path) -> list[Path]:
    """attnlab-compare's part: for each PATH that is a searched sweep's folder (its
    search.json), its views printed and written into `out` as search.md (and plots)."""
    found = [Path(p) / SEARCH_FILE for p in paths if (Path(p) / SEARCH_FILE).is_file()]
    if not found:
        return []
    print()
    for path in found:
        for line in write_search_views(path.parent, json.loads(path.read_text()), out):
            print(line)
    return [out / "search.md"]
