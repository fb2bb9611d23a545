"""What a sweep's folder says about how to read it: the sweep file as it was run.

attnlab-sweep writes <out>/sweep.yaml (older sweeps: summary.json's "file" names it). From it
attnlab-compare takes its defaults: the headline metric is the file's `metric.name`, and the
baseline is the file's `baseline:` (a mapping KEY: VALUE, the paper's setting where the file
names one) or else the first value of each swept parameter. A Hydra multirun's folder holds
multirun.yaml instead: its swept overrides (`-m model.n_heads=8,1,4`) are read as parameters in
the order typed, so the baseline is the first value typed (8), not the first in sort order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import yaml


def find_spec(paths: Sequence[str | Path]) -> dict | None:
    """The sweep file of the first sweep folder at or above a PATH (two levels up at most:
    a trial folder is one level below its sweep's), or None."""
    for p in map(Path, paths):
        if not p.is_dir():
            continue
        for folder in (p, p.parent, p.parent.parent):
            spec = _spec_in(folder)
            if spec is not None:
                return spec
    return None


def _multirun_spec(path: Path) -> dict | None:
    """A Hydra multirun's multirun.yaml as a sweep file: {"parameters": {key: {"values": [the
    values in the order typed]}}} for each discrete sweep of its command line; None without."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        task = yaml.safe_load(path.read_text())["hydra"]["overrides"]["task"]
        overrides = OverridesParser.create().parse_overrides(list(task))
    except Exception:  # not a multirun's record, or an override Hydra no longer parses
        return None
    params = {
        o.key_or_group: {"values": list(o.sweep_iterator())}
        for o in overrides
        if o.is_sweep_override() and o.is_discrete_sweep()
    }
    return {"parameters": params} if params else None


def _spec_in(folder: Path) -> dict | None:
    if (folder / "multirun.yaml").is_file():
        return _multirun_spec(folder / "multirun.yaml")
    candidates = [folder / "sweep.yaml"]
    summary = folder / "summary.json"
    if summary.is_file():
        try:
            source = json.loads(summary.read_text()).get("file")
        except (OSError, ValueError, AttributeError):
            source = None
        if isinstance(source, str):
            candidates.append(Path(source))
    for path in candidates:
        try:
            spec = yaml.safe_load(path.read_text()) if path.is_file() else None
        except (OSError, yaml.YAMLError):
            spec = None
        if isinstance(spec, dict) and isinstance(spec.get("parameters"), dict):
            return spec
    return None


def spec_metric(spec: dict | None) -> str | None:
    metric = (spec or {}).get("metric")
    return metric.get("name") if isinstance(metric, dict) else None


def spec_primary(spec: dict | None) -> str | None:
    """The metric of the sweep file's `primary:` block (a study's, or a sweep's): the one
    comparison named before the runs, which compare labels confirmatory."""
    primary = (spec or {}).get("primary")
    return primary.get("metric") if isinstance(primary, dict) else None


def spec_baseline(spec: dict | None, keys: Sequence[str]) -> list[str]:
    """KEY=VALUE for each of `keys` that the sweep file sets: its `baseline:` entry, else the
    first of the parameter's values."""
    if not spec:
        return []
    named = spec.get("baseline") if isinstance(spec.get("baseline"), dict) else {}
    params = spec.get("parameters") or {}
    items = []
    for key in keys:
        param = params.get(key) or params.get("+" + key)
        if key in named:
            value = named[key]
        elif isinstance(param, dict) and isinstance(param.get("values"), list) and param["values"]:
            value = param["values"][0]
        else:
            continue
        items.append(f"{key}={yaml.safe_dump(value, default_flow_style=True).strip()}")
    return [i.removesuffix("\n...") for i in items]
