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
from attnlab.sweeps.search import DEFAULT_DB, Search, default_storage

# The status of a trial whose run did not say one (attnlab's names for Optuna's states).
STATE_STATUS = {
    "RUNNING": "running",
    "WAITING": "not_started",
    "COMPLETE": "completed",
    "PRUNED": "pruned",
    "FAIL": "failed",
}


def status_of(trial, by_number: dict | None = None) -> str:
    """The trial's run's status; an enqueued retry not yet restarted has its original's
    (interrupted, or what its killed worker left: interrupted too)."""
    retry_of = (by_number or {}).get(trial.user_attrs.get(studies_.ATTR_RETRY_OF))
    if trial.state.name == "WAITING" and retry_of is not None:
        return retry_of.user_attrs.get(studies_.ATTR_STATUS) or "interrupted"
    return trial.user_attrs.get(studies_.ATTR_STATUS) or STATE_STATUS.get(
        trial.state.name, "unknown"
    )


SEARCH_FILE = "search.json"


def write_search_file(search: Search) -> None:
    """<out>/search.json: where the studies are (for attnlab-compare and a later rerun)."""
    search.out.mkdir(parents=True, exist_ok=True)
    default = search.storage == default_storage(search.out)
    record = {
        "storage": DEFAULT_DB if default else search.storage,  # the default: beside this file
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
            result.status = status or status_of(t)
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


MIN_FOR_IMPORTANCE = 10  # completed trials; fewer make any importance a coin's toss


def _importances(study) -> str:
    import warnings

    import optuna

    done = sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False))
    if done < MIN_FOR_IMPORTANCE:
        return f"not computed: {done} completed trials (it needs {MIN_FOR_IMPORTANCE})"

    try:
        with warnings.catch_warnings():  # "too few trials": said in the result instead
            warnings.simplefilter("ignore")
            found = optuna.importance.get_param_importances(study)
    except Exception as err:  # too few trials, one parameter, a missing optional package
        return f"not computed: {str(err).splitlines()[0]}"
    return ", ".join(f"{k} {v:.2f}" for k, v in found.items()) or "not computed: no parameter"


def _plots(study, out: Path, slug: str, metric: str = "metric") -> list[str]:
    """The optimization history and the intermediate values (Optuna's matplotlib plots, their
    axes named: the metric, the trial, the validation)."""
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
        ax.set_ylabel(f"{metric} (validation)")
        ax.set_xlabel("trial" if kind == "history" else "validation (the pruner's step)")
        if kind == "intermediate":
            ax.set_title(f"{metric} at each validation, every trial (pruned ones stop early)")
        path = out / f"search_{slug}_{kind}.png"
        ax.figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(ax.figure)
        written.append(path.name)
    return written


def open_search(folder: Path) -> tuple[dict, list]:
    """The search.json of `folder` and its studies, loaded from their storage (the default
    SQLite file is found beside search.json, wherever the folder now is)."""
    record = json.loads((Path(folder) / SEARCH_FILE).read_text())
    storage = record["storage"]
    if storage == DEFAULT_DB:
        storage = default_storage(Path(folder))
    return record, _load(storage, record["studies"])


def write_search_views(folders, out: Path | None = None) -> list[str]:
    """search.md (and plots) for the searches of `folders` (each with a search.json), into
    `out` (default: the first folder); the console lines: each study's counts and best trial,
    or why a folder's search could not be read."""
    out = out or Path(folders[0])
    out.mkdir(parents=True, exist_ok=True)
    md, console = ["# Search", ""], []
    for i, folder in enumerate(map(Path, folders)):
        prefix = f"{i + 1}_" if len(folders) > 1 else ""
        try:
            record, studies = open_search(folder)
        except Exception as err:  # a moved database, no Optuna, a server out of reach
            console.append(f"could not read the search of {folder}: {str(err).splitlines()[0]}")
            continue
        md += [f"Folder `{folder}`, storage `{record['storage']}`.", ""]
        for study in studies:
            lines, section = _study_view(study, record["metric"], out, prefix)
            console.append(lines)
            md += section
    (out / "search.md").write_text("\n".join(md))
    return console


def _study_view(study, metric: str, out: Path, prefix: str) -> tuple[str, list[str]]:
    """One study's console line and search.md section."""
    every = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in every}
    trials = studies_.counted(every)
    statuses = [status_of(t, by_number) for t in trials]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    best = _best(study)
    md = [f"## {study.study_name}", "", f"Trials: {len(trials)} ({counts}).", ""]
    if best is None:
        return f"{study.study_name}: {len(trials)} trials ({counts}); none completed", md + [
            "No trial completed.",
            "",
        ]
    values = best.user_attrs.get(studies_.ATTR_VALUES, best.params)
    shown = " ".join(f"{k}={v}" for k, v in values.items())
    line = (
        f"{study.study_name}: {len(trials)} trials ({counts}); best trial {best.number} "
        f"{metric}={best.value:.4g}: {shown}"
    )
    md += [
        f"Best: trial {best.number}, {metric} = {_fmt(best.value)}, run "
        f"`{best.user_attrs.get(studies_.ATTR_RUN_DIR)}`.",
        "",
        "Its config: `" + shown + "`",
        "",
        f"Parameter importance (Optuna): {_importances(study)}.",
        "",
    ]
    slug = prefix + study.study_name.replace("/", "__")
    md += [f"![{p}]({p})" for p in _plots(study, out, slug, metric)] + [""]
    return line, md


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def search_views(paths, out: Path) -> list[Path]:
    """attnlab-compare's part: the searches among `paths` (folders with a search.json), their
    views printed and written into `out` as search.md (and plots)."""
    found = [Path(p) for p in paths if (Path(p) / SEARCH_FILE).is_file()]
    if not found:
        return []
    print()
    for line in write_search_views(found, out):
        print(line)
    return [out / "search.md"]
