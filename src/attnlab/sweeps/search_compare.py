"""attnlab-compare on a search (a folder with search.json): the search read as a search.

A search's trials differ in the values it drew, not only in the seed, so no arm statistics are
computed: averaging them as seeds would compare rates with rates. What it shows instead, per arm
(the file's `arms:`, one Optuna study each):
- every trial against each searched parameter (search_<metric>.png), a pruned one drawn at the
  last validation it reached (hollow), a completed one at its final value (filled);
- the best trials with their configs (the top --top, by the metric; pruned ones rank after every
  completed one), and every trial in search_trials.csv;
- with --rerun-best K --seeds N, one sweep file per arm and rank under <out>/rerun_best/ that
  reruns that config over N seeds, and the commands that run them and compare them, so a search
  ends in a comparison with intervals.
Optuna's own views (search.md: history, intermediate values, importance) are written beside.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from attnlab.runs.status import Status
from attnlab.sweeps import study as studies_
from attnlab.sweeps.search_report import SEARCH_FILE, open_search, status_of

_LOG = ("log_uniform", "log_uniform_values", "q_log_uniform", "q_log_uniform_values")


@dataclass
class SearchTrial:
    """One counted trial: its arm (study), number, status, metric value (final, or the last
    intermediate value of a pruned one), validations reported and parameter values."""

    arm: str
    number: int
    status: str
    value: float | None
    validations: int
    values: dict = field(default_factory=dict)
    run_dir: str | None = None

    @property
    def completed(self) -> bool:
        return self.status == Status.COMPLETED and self.value is not None


@dataclass
class SearchRead:
    folder: Path
    spec: dict
    metric: str
    goal_max: bool
    trials: list[SearchTrial]

    @property
    def searched(self) -> list[str]:
        """The parameters drawn (not the arms, not constants, not the seed)."""
        arms = set(self.spec.get("arms") or [])
        params = self.spec.get("parameters") or {}
        return [k for k, p in params.items() if k not in arms and k != "seed" and "value" not in p]

    @property
    def arms(self) -> list[str]:
        return list(dict.fromkeys(t.arm for t in self.trials))

    def ranked(self, arm: str) -> list[SearchTrial]:
        """The arm's trials, completed first by the metric, then pruned by their last value."""

        def key(t: SearchTrial):
            value = t.value if t.value is not None and math.isfinite(t.value) else math.inf
            return (not t.completed, -value if self.goal_max else value)

        return sorted((t for t in self.trials if t.arm == arm), key=key)


def is_search(path: str | Path) -> bool:
    return (Path(path) / SEARCH_FILE).is_file()


def read_search(folder: Path) -> SearchRead:
    """The search in `folder`: its sweep file (sweep.yaml) and every counted trial of its
    studies. ValueError (one line) when the folder's search cannot be read."""
    try:
        record, studies = open_search(folder)
        spec = yaml.safe_load((folder / "sweep.yaml").read_text())
    except Exception as err:  # a moved database, no Optuna, a server out of reach
        raise ValueError(
            f"{folder}: its search cannot be read: {str(err).splitlines()[0]}"
        ) from None
    trials = []
    for name, study in zip(record["studies"], studies, strict=True):
        every = study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in every}
        for t in studies_.counted(every):
            steps = t.intermediate_values
            value = t.value if t.state.name == "COMPLETE" else None
            if value is None and steps:
                value = steps[max(steps)]  # where a pruned (or stopped) trial last stood
            trials.append(
                SearchTrial(
                    arm=name.split("/", 1)[-1],
                    number=t.number,
                    status=status_of(t, by_number),
                    value=value,
                    validations=len(steps),
                    values=dict(t.user_attrs.get(studies_.ATTR_VALUES) or t.params),
                    run_dir=t.user_attrs.get(studies_.ATTR_RUN_DIR),
                )
            )
    goal_max = record.get("goal", "minimize") == "maximize"
    return SearchRead(folder, spec, record["metric"], goal_max, trials)


def top_table(search: SearchRead, k: int) -> list[list[str]]:
    """Header + the best k trials of each arm: rank, trial, status, metric, validations
    reached, the searched values."""
    header = ["arm", "rank", "trial", "status", search.metric, "validations", *search.searched]
    rows = [header]
    for arm in search.arms:
        for rank, t in enumerate(search.ranked(arm)[:k], start=1):
            value = "" if t.value is None else f"{t.value:.4g}"
            shown = [_fmt(t.values.get(p)) for p in search.searched]
            rows.append(
                [arm, str(rank), str(t.number), t.status, value, str(t.validations), *shown]
            )
    return rows


def write_trials_csv(search: SearchRead, path: Path) -> None:
    keys = list(dict.fromkeys(k for t in search.trials for k in t.values))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arm", "trial", "status", search.metric, "validations", *keys, "run_dir"])
        for t in search.trials:
            w.writerow([t.arm, t.number, t.status, t.value, t.validations,
                        *[t.values.get(k) for k in keys], t.run_dir])  # fmt: skip


def plot(search: SearchRead, path: Path) -> bool:
    """One panel per searched parameter: every trial's metric against the value drawn, a colour
    per arm, completed filled, pruned hollow at its last validation. False with nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = search.searched
    drawn = [t for t in search.trials if t.value is not None and math.isfinite(t.value)]
    if not params or not drawn:
        return False
    cols = min(3, len(params))
    rows = math.ceil(len(params) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    specs = search.spec.get("parameters") or {}
    for ax, param in zip(axes.flat, params, strict=False):
        for i, arm in enumerate(search.arms):
            mine = [t for t in drawn if t.arm == arm and param in t.values]
            for done, style in ((True, {"color": f"C{i}"}), (False, {"facecolors": "none"})):
                chosen = [t for t in mine if t.completed == done]
                xs, ys = [_x(t.values[param]) for t in chosen], [t.value for t in chosen]
                label = f"{arm} ({'completed' if done else 'pruned: last validation'})"
                ax.scatter(xs, ys, s=28, edgecolors=f"C{i}", label=label, **style)
        if (specs.get(param) or {}).get("distribution") in _LOG:
            ax.set_xscale("log")
        ax.set_xlabel(param)
        ax.set_ylabel(f"{search.metric} (validation)")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(params) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"search {search.spec.get('name', '')}: every trial against each searched "
                 "parameter", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _x(value):
    return str(value) if isinstance(value, str | bool) else value


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def rerun_files(search: SearchRead, k: int, seeds: int, out: Path) -> list[Path]:
    """<out>/<name>_rerun_<arm>_<rank>.yaml for the best k completed trials of each arm: a grid
    over seeds 1..seeds with the trial's values fixed (`value:`), the search's metric, and its
    command with the overrides the search's own command line added (search_extras): every
    rerun trial is the best trial's config but for the seed. The files written."""
    out.mkdir(parents=True, exist_ok=True)
    name = search.spec.get("name", "search")
    written = []
    for arm in search.arms:
        best = [t for t in search.ranked(arm) if t.completed][:k]
        for rank, t in enumerate(best, start=1):
            params = {key: {"value": v} for key, v in t.values.items() if key != "seed"}
            params["seed"] = {"values": list(range(1, seeds + 1))}
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}_rerun_{arm}_{rank}")
            command = [c for c in search.spec.get("command", []) if "hydra.run.dir" not in c]
            spec = {
                "name": stem,
                "project": search.spec.get("project", "attnlab"),
                "program": search.spec.get("program", "attnlab-train"),
                "method": "grid",
                "metric": search.spec.get("metric"),
                "parameters": params,
                "command": with_extras(command, search_extras(search, t)),
            }
            head = (f"# {name}'s trial {t.number} ({arm}, rank {rank}: {search.metric} = "
                    f"{t.value:.4g} on seed 1), rerun over seeds 1-{seeds}\n")  # fmt: skip
            path = out / f"{stem}.yaml"
            path.write_text(head + yaml.safe_dump(spec, sort_keys=False))
            written.append(path)
    return written


# Overrides that place or name a trial, not what it learns: not carried into a rerun.
_PLACING = ("seed", "group", "tags", "name", "run_name")


def search_extras(search: SearchRead, trial: SearchTrial) -> list[str]:
    """The overrides the search's command line added to its trials (e.g. trainer.max_steps=120
    logger=none): those the trial recorded in its results.json that neither its sweep file's
    command nor its drawn values set."""
    import json

    from attnlab.sweeps.spec import make_trial, override_key

    if not trial.run_dir:
        return []
    try:
        recorded = json.loads((search.folder / trial.run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return []
    params = {**trial.values, "seed": 1}
    own = make_trial(search.spec, params, 0, search.spec.get("name", "search"), list(params))
    from_file = {override_key(o) for o in own.overrides}
    return [
        o
        for o in recorded.get("overrides") or []
        if (key := override_key(o)) is not None
        and key not in from_file
        and key.lstrip("+~") not in _PLACING
        and not key.startswith("hydra.")
    ]


def with_extras(command: list[str], extras: list[str]) -> list[str]:
    """The command with `extras` before its ${args...} macro (so a rerun's own command line
    still wins), else at its end."""
    for i, token in enumerate(command):
        if token.startswith("${args"):
            return [*command[:i], *extras, *command[i:]]
    return [*command, *extras]
