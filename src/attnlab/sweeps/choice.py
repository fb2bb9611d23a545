"""A study's stage-1 outcome per arm: the Choice record, and <out>/choice.json and choice.md,
written before stage 2 starts and read back when a study is resumed after its choice."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Choice:
    """One arm's stage-1 outcome (what choice.json holds for it)."""

    arm: dict
    key: str
    metric: str
    goal: str
    points: list[dict] = field(default_factory=list)  # value, score, per-seed values, statuses
    chosen: Any = None
    margin_below: float | None = None  # the chosen point's score gap to its lower neighbour
    margin_above: float | None = None
    at_edge: bool = False  # still at the edge of every point run (after any extension)
    extended: int = 0
    refined: bool = False


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def write_choice(out: Path, tune, choices: Sequence[Choice], stopped: Sequence[dict] = ()) -> Path:
    """<out>/choice.json and choice.md: each arm's points, scores and chosen value, and the
    stage-1 trials the stall rule stopped (which, and when)."""
    out.mkdir(parents=True, exist_ok=True)
    record = {"tune": asdict(tune), "arms": [asdict(c) for c in choices]}
    record["stopped_early"] = list(stopped)
    path = out / "choice.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=list) + "\n")
    tmp.replace(path)
    (out / "choice.md").write_text(choice_markdown(tune, choices, stopped))
    return path


def choice_markdown(tune, choices: Sequence[Choice], stopped: Sequence[dict] = ()) -> str:
    seeds = ", ".join(map(str, tune.seeds))
    lines = [
        f"# Stage 1: {tune.key} chosen per arm on {tune.metric} ({tune.goal}, mean over "
        f"tuning seed{'s' * (len(tune.seeds) > 1)} {seeds})",
        "",
    ]
    for c in choices:
        arm = ", ".join(f"{k}={v}" for k, v in c.arm.items())
        lines += [f"## {arm}", "", f"| {tune.key} | {tune.metric} | per seed | status |"]
        lines.append("|---|---|---|---|")
        for p in c.points:
            mark = " **chosen**" if p["value"] == c.chosen else ""
            s = "-" if p["score"] is None else f"{p['score']:.4g}"
            per = ", ".join("-" if v is None else f"{v:.4g}" for v in p["values"])
            value = f"{p['value']:.4g}" if _is_number(p["value"]) else str(p["value"])
            lines.append(f"| {value}{mark} | {s} | {per} | {', '.join(p['statuses'])} |")
        notes = []
        for name, gap in (("lower", c.margin_below), ("higher", c.margin_above)):
            shown = "-" if gap is None else f"{gap:.4g}"
            notes.append(f"margin to the {name} neighbour: {shown}")
        if c.at_edge:
            notes.append(f"AT THE EDGE after {c.extended} extension(s): the best may lie beyond")
        lines += ["", "; ".join(notes), ""]
    if tune.stop_stalled:
        lines += [f"## Stopped early (tune.stop_stalled: {tune.stop_stalled})", ""]
        lines += [f"- {s['trial']}: at step {s['step']} (validation {s['validation']}), "
                  f"val/nll {s['val/nll']:.4g} above its loss at initialization "
                  f"{s['nll_init']:.4g}" for s in stopped] or ["- none"]  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def read_choice(out: Path, arms: Sequence[dict]) -> list[Choice] | None:
    """The choices of <out>/choice.json in the order of `arms`; None when there is none (or it
    does not hold every arm, or an arm in it has no chosen value, as an older attnlab wrote
    when an arm had no completed point: then stage 1 decides again)."""
    try:
        record = json.loads((out / "choice.json").read_text())
        held = [Choice(**c) for c in record["arms"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    by_arm = {json.dumps(c.arm, sort_keys=True): c for c in held}
    found = [by_arm.get(json.dumps(dict(a), sort_keys=True)) for a in arms]
    return None if any(c is None or c.chosen is None for c in found) else found
