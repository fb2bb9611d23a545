"""What a command-line override says about a run: the one home of the two lists.

NON_DEFINING overrides do not change what a run computes (where it writes, how it logs and
resumes): they stay out of the run's hash (attnlab.runs.identity) and out of the config drift
check. The readable run name (attnlab.runs.record.run_name) leaves those out and also
NAME_ONLY_OMITS: trainer, callbacks and the experiment's name do change a run (the hash covers
them), but a name shows the ablation, and `trainer.max_steps=600` in every run's name says
nothing about it.
"""

from __future__ import annotations

import re

_OVERRIDE = re.compile(r"^(?:~|\+{1,2})?([A-Za-z_][\w.@/-]*)(=|$)")

NON_DEFINING = (
    "resume",
    "paths.",
    "logger",
    "hydra.",
    "group",
    "tags",
    "run_name",
    "checkpoint.",
    "trainer.enable_progress_bar",
)
NAME_ONLY_OMITS = ("trainer", "callbacks", "name")


def override_key(token: str) -> str | None:
    """`+model.n_heads=8` -> `model.n_heads`; None when the token is not a Hydra override (a
    sweep command's `${program}`, a `--flag`)."""
    match = _OVERRIDE.match(token.strip())
    if not match or (match.group(2) == "" and not token.startswith("~")):
        return None
    return match.group(1)


def is_defining(key: str) -> bool:
    """Does the dotted config key `key` change what a run computes (not in NON_DEFINING)?"""
    return not any(key == p.rstrip(".") or key.startswith(p) for p in NON_DEFINING)


def in_name(key: str) -> bool:
    """Does the override of `key` belong in the readable run name: defining, and not of
    NAME_ONLY_OMITS (a group choice such as hydra/launcher counts by its first part)?"""
    first = key.split(".")[0].split("/")[0]
    return is_defining(key) and first not in NAME_ONLY_OMITS and first != "hydra"
