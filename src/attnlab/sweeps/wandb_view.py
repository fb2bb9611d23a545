"""A sweep's comparison as a saved W&B workspace, built as code with wandb-workspaces.

`describe(sweep file)` reads what the view needs from the sweep (its W&B group and project, the
swept keys that name its arms, its metric and goal, a swept learning rate, the `diag/` metrics its
runs logged); `build_view(description)` turns that into wandb-workspaces objects, with no server:

- the runs filtered to the sweep's group and grouped by its arms' keys (seeds pooled), the run
  table with the swept keys and the metric as pinned columns;
- the metric against the training step, mean and standard-deviation band over each arm's seeds;
- a bar chart of the final metric per arm, mean with standard-deviation error bars;
- for a learning-rate sweep, the final metric against the rate on a log axis, one colour per arm;
- the `diag/` instability panels (gradient norm, largest attention logit, log Z), where logged.

attnlab logs its config with flat dotted keys (`model.n_heads`), which W&B stores as
`{"model.n_heads": {"value": ...}}`: the backend path is `model.n_heads.value`, written out in
full (wandb-workspaces would otherwise read the key as nested and put `.value` after `model`).
`save_view` is the only function that talks to W&B.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from attnlab.analysis.lr_sweep import DEFAULT_LR_KEY
from attnlab.runs.overrides import override_key
from attnlab.sweeps.spec import swept_keys

STEP = "trainer/global_step"  # Lightning's WandbLogger logs every metric against it
DIAG_ORDER = ("diag/grad_norm", "diag/attn_logit_max", "diag/log_z")


@dataclass(frozen=True)
class SweepDescription:
    """What a sweep's W&B view is built from."""

    name: str
    group: str  # the W&B group its runs were logged in
    project: str | None
    entity: str | None
    arm_keys: tuple[str, ...]  # the swept keys but the seed (and the learning rate)
    metric: str
    goal: str  # minimize or maximize
    lr_key: str | None = None  # the swept learning rate, for an LR sweep
    diag: tuple[str, ...] = ()  # the diag/ metrics the runs logged
    tune: StudyStages | None = None  # a study's stages (a sweep file with a `tune` block)


@dataclass(frozen=True)
class StudyStages:
    """What a study's view adds: its runs' W&B job types (attnlab.sweeps.staged.JOB_TYPES)
    tell stage 1 (`tune`: each arm at each value of `key`, scored on `metric`) from stage 2
    (`seeds`: each arm at its chosen value, compared on the description's metric)."""

    key: str
    metric: str
    goal: str


def describe(config: Mapping, diag: Sequence[str] = ()) -> SweepDescription:
    """The description of a loaded sweep file (its `name` set); `diag`: the `diag/` metrics its
    runs logged (attnlab-compare reads them from the runs' results)."""
    command = [str(t) for t in config.get("command", [])]
    groups = [t.split("=", 1)[1] for t in command if override_key(t) == "group"]
    swept = [k for k in swept_keys(config) if k != "seed"]
    lr_key = DEFAULT_LR_KEY if DEFAULT_LR_KEY in swept else None
    metric = config.get("metric") or {}
    stages = None
    if isinstance(config.get("tune"), Mapping):  # a study: its primary metric, its stages
        from attnlab.sweeps.tuning import goal_of

        tune, primary = config["tune"], config.get("primary") or {}
        stages = StudyStages(str(tune["key"]), str(tune["metric"]),
                             goal_of(str(tune["metric"]), tune.get("goal")))  # fmt: skip
        name = str(primary.get("metric", "val/nll"))
        metric = {"name": name, "goal": goal_of(name)}
        lr_key = DEFAULT_LR_KEY if stages.key == DEFAULT_LR_KEY else None
    return SweepDescription(
        name=str(config["name"]),
        group=groups[-1] if groups else str(config["name"]),
        project=config.get("project"),
        entity=config.get("entity"),
        arm_keys=tuple(k for k in swept if k != lr_key),
        metric=metric.get("name", "val/nll"),
        goal=metric.get("goal", "minimize"),
        lr_key=lr_key,
        diag=tuple(sorted(set(diag), key=lambda m: (m not in DIAG_ORDER, m))),
        tune=stages,
    )


def config_path(key: str) -> str:
    """The W&B backend path of an attnlab config key (flat dotted: the value at the end)."""
    return f"{key}.value"


def build_view(desc: SweepDescription, entity: str, project: str):
    """The sweep's workspace (a wandb_workspaces Workspace), built without a server."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    keys = [*desc.arm_keys, *([desc.lr_key] if desc.lr_key else [])]
    band = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev"}
    if desc.tune is None:
        sections = _sweep_sections(wr, ws, desc, band)
        groupby = [ws.Config(config_path(k)) for k in keys]
    else:  # a study: each stage its own W&B groups (job type, arm, tuned value)
        keys = [*desc.arm_keys, desc.tune.key]
        sections = _study_sections(wr, ws, desc, band)
        groupby = [ws.Metric("JobType"), *(ws.Config(config_path(k)) for k in keys)]
    if desc.diag:
        panels = [wr.LinePlot(title=m, x=STEP, y=[m], **band) for m in desc.diag]
        sections.append(ws.Section(name="diag/: instability", is_open=True, panels=panels))
    runset = ws.RunsetSettings(
        filters=ws.And(ws.Metric("Group") == desc.group),
        groupby=groupby,
        pinned_columns=[
            *(["run:jobType"] if desc.tune else []),
            *(f"config:{config_path(k)}" for k in keys),
            "config:seed.value",
            f"summary:{desc.metric}",
            "run:state",
        ],
        order=[ws.Ordering(ws.Summary(desc.metric), ascending=desc.goal == "minimize")],
    )
    return ws.Workspace(
        entity=entity,
        project=project,
        name=f"attnlab {'study' if desc.tune else 'sweep'} {desc.name}",
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP),
        runset_settings=runset,
    )


def _sweep_sections(wr, ws, desc: SweepDescription, band: dict) -> list:
    """A sweep's sections: the metric per arm (against the step, and final), and against the
    swept learning rate where there is one."""
    sections = [
        ws.Section(
            name=f"{desc.metric} per arm (mean and std over seeds; {_better(desc.goal)} is better)",
            is_open=True,
            panels=[
                wr.LinePlot(
                    title=f"{desc.metric} against the step", x=STEP, y=[desc.metric], **band
                ),
                wr.BarPlot(
                    title=f"final {desc.metric} per arm",
                    metrics=[desc.metric],
                    orientation="v",
                    **band,
                ),
            ],
        )
    ]
    if desc.lr_key:
        sections.append(
            ws.Section(
                name=f"{desc.metric} against {desc.lr_key}",
                is_open=True,
                panels=[_lr_panel(wr, desc)],
            )
        )
    return sections


def _study_sections(wr, ws, desc: SweepDescription, band: dict) -> list:
    """A study's sections, stage 1's views then stage 2's; the runs are grouped by job type
    (tune: stage 1, seeds: stage 2), arm and tuned value, so every group is one stage's and
    labelled so, but a workspace has one run set: each panel shows both stages' groups. A
    stage-1 run that stage 2 reuses as a seed (the same config and seed at the chosen value) is
    one W&B run, logged in stage 1: its group is stage 1's."""
    tune = desc.tune
    stage_one = [wr.LinePlot(title=f"stage 1: {tune.metric} against the step", x=STEP,
                             y=[tune.metric], **band)]  # fmt: skip
    if desc.lr_key:  # the tuning curve: the stage-1 metric against the rate, log axis
        stage_one.append(wr.ScatterPlot(
            title=f"stage 1: {tune.metric} against the peak learning rate (log axis)",
            x=wr.SummaryMetric("peak_lr"), y=wr.SummaryMetric(tune.metric), log_x=True,
        ))  # fmt: skip
    title = f"stage 2: final {desc.metric} per arm at its chosen {tune.key}"
    stage_two = [wr.BarPlot(title=title, metrics=[desc.metric], orientation="v", **band)]
    names = (
        f"stage 1's view (job type tune): {tune.key} per arm on {tune.metric} "
        f"({_better(tune.goal)} is better)",
        f"stage 2's view (job type seeds): {desc.metric}, the primary metric "
        f"({_better(desc.goal)} is better)",
    )
    return [
        ws.Section(name=name, is_open=True, panels=panels)
        for name, panels in zip(names, (stage_one, stage_two), strict=True)
    ]


def _better(goal: str) -> str:
    return "lower" if goal == "minimize" else "higher"


def _lr_panel(wr, desc: SweepDescription):
    """The final metric against the learning rate, log x; each arm its own colour (grouped
    by the runset's keys). The x axis is the summary's `peak_lr` (the peak the schedule took,
    = scheduler.peak_lr where that is set; runs/wandb.py puts it there): a panel's config
    axis would be read as a nested key (`scheduler.value.peak_lr`), not attnlab's flat one."""
    return wr.ScatterPlot(
        title=f"final {desc.metric} against the peak learning rate (log axis), per arm",
        x=wr.SummaryMetric("peak_lr"),
        y=wr.SummaryMetric(desc.metric),
        log_x=True,
    )


def save_view(workspace) -> str:
    """Save the workspace to W&B (a new view); its URL."""
    workspace.save_as_new_view()
    return workspace.url


def offline_problem() -> str | None:
    """Why no view can be saved from here (None: W&B is on and an API key is set). Reads the
    key where wandb does (WANDB_API_KEY, settings, .netrc) without asking or going online."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "dryrun", "disabled"):
        return f"WANDB_MODE={mode}"
    import wandb

    if not wandb.login(prompt=False, verify=False):
        return "no W&B API key (WANDB_API_KEY, or `wandb login`)"
    return None


def prepare_view(paths, runs, entity: str | None = None, project: str | None = None):
    """The workspace of the sweep in `paths` (its sweep.yaml) and its runs, ready to save;
    ValueError with one line when it cannot be made from here (then nothing is made)."""
    from attnlab.analysis.sweep_file import find_spec

    spec = find_spec(paths)
    if spec is None:
        raise ValueError(
            "--wandb-view needs a sweep's folder (its sweep.yaml, which "
            "attnlab-sweep writes); none was found in the PATHs"
        )
    problem = offline_problem()
    if problem is not None:
        raise ValueError(
            f"--wandb-view: {problem}; no view was made: run the same command "
            "again where W&B is online and logged in (`wandb login`)"
        )
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        raise ValueError(
            "--wandb-view needs wandb-workspaces: pip install 'attnlab[wandb-view]'"
        ) from None
    logged = {m for r in runs for m in r.metrics if m in DIAG_ORDER}
    desc = describe({"name": "sweep", **spec}, diag=sorted(logged))
    project = project or desc.project
    if not project:
        raise ValueError("--wandb-view: the sweep file has no `project`; give --project")
    if not (entity or desc.entity):
        import wandb

        entity = wandb.Api().default_entity
    return build_view(desc, entity or desc.entity, project)
