"""The trials of a shipped sweep file as the tests compose them: a grid's every point, a
search's preflight points (per arm, the combinations of each searched key's checked values:
attnlab.sweeps.search.Search.check_trials)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.sweeps import expand_sweep
from attnlab.sweeps.spec import Trial, load_sweep


def is_search(path: Path) -> bool:
    return load_sweep(path)["method"] != "grid"


def sweep_trials(path: Path) -> list[Trial]:
    if not is_search(path):
        return expand_sweep(path)
    pytest.importorskip("optuna", reason="a searched sweep file needs the [optuna] extra")
    from attnlab.sweeps.search import Search

    config = {"name": path.stem, **load_sweep(path)}
    return Search(config, Path("out"), "sqlite://", cap=1).check_trials()
