"""Run statuses and attnlab-train's exit codes: the one place they are defined.

results.json's `status` is one of STATUSES; a sweep trial can also end `not_started` (the sweep
was stopped first) or `config_error` (refused by the preflight, nothing written). Kept free of
heavy imports: attnlab-sweep and attnlab-compare read it without torch.
"""

from __future__ import annotations

from collections.abc import Sequence

# What results.json can say, in the order reports list them.
# "debug": a trainer.fast_dev_run run (a few batches of each split, no checkpoints).
STATUSES = ("running", "completed", "debug", "failed", "diverged", "interrupted")
# A run that ended (results.json no longer changes).
FINAL_STATUSES = ("completed", "debug", "failed", "diverged", "interrupted")
# Order in tables and counts: success first, then how runs went wrong, then the unfinished.
REPORT_ORDER = (
    "completed",
    "debug",
    "diverged",
    "failed",
    "interrupted",
    "config_error",
    "running",
    "not_started",
    "unknown",
)

# attnlab-train's exit code for each final status of a run (the worst run of a multirun wins).
EXIT_CODES = {
    "completed": 0,
    "debug": 0,
    "failed": 1,
    "config_error": 2,
    "diverged": 3,
    "interrupted": 4,
}
EXIT_OK = EXIT_CODES["completed"]
EXIT_BAD_CONFIG = EXIT_CODES["config_error"]
EXIT_DIVERGED = EXIT_CODES["diverged"]


def exit_code(statuses: Sequence[str]) -> int:
    """The exit code of a command whose runs ended with `statuses`: the worst one (0 if none)."""
    return max((EXIT_CODES.get(s, EXIT_CODES["failed"]) for s in statuses), default=EXIT_OK)


def status_from_exit_code(code: int | None, interrupted: bool = False) -> str:
    """The status a run's exit code stands for, when its results.json does not say."""
    if interrupted:
        return "interrupted"
    by_code = {c: s for s, c in reversed(EXIT_CODES.items())}  # 0: completed
    return by_code.get(code, "failed")


def sort_statuses(statuses: Sequence[str]) -> list[str]:
    """The distinct statuses in REPORT_ORDER (unknown ones last, as first seen)."""
    order = list(REPORT_ORDER)
    distinct = list(dict.fromkeys(statuses))
    return sorted(distinct, key=lambda s: order.index(s) if s in order else len(order))


def status_counts(statuses: Sequence[str]) -> str:
    """['completed', 'failed', 'completed'] -> '2 completed, 1 failed'."""
    return ", ".join(f"{statuses.count(s)} {s}" for s in sort_statuses(statuses))
