"""Run statuses and attnlab-train's exit codes: the one place they are defined.

results.json's `status` is one of STATUSES; a sweep trial can also end `not_started` (the sweep
was stopped first) or `config_error` (refused by the preflight, nothing written). Kept free of
heavy imports: attnlab-sweep and attnlab-compare read it without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum


class Status(str, Enum):
    """Every status a run or a sweep trial can have. A member equals its string ("completed")
    and prints as it; what is stored (results.json, W&B) is the plain string (`.value`: W&B would
    record an Enum by its name). str + Enum rather than StrEnum: Python 3.10 is supported."""

    RUNNING = "running"
    COMPLETED = "completed"
    DEBUG = "debug"  # a trainer.fast_dev_run run (a few batches of each split, no checkpoints)
    FAILED = "failed"
    DIVERGED = "diverged"
    PRUNED = "pruned"  # stopped early: a search's pruner, or a study's stall rule (stage 1)
    INTERRUPTED = "interrupted"
    CONFIG_ERROR = "config_error"  # refused by the preflight, nothing written
    NOT_STARTED = "not_started"  # a sweep trial the sweep was stopped before
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


S = Status
# What results.json can say, in the order reports list them.
STATUSES = (S.RUNNING, S.COMPLETED, S.DEBUG, S.FAILED, S.DIVERGED, S.PRUNED, S.INTERRUPTED)
# A run that ended (results.json no longer changes).
FINAL_STATUSES = (S.COMPLETED, S.DEBUG, S.FAILED, S.DIVERGED, S.PRUNED, S.INTERRUPTED)
# Order in tables and counts: success first, then how runs went wrong, then the unfinished.
REPORT_ORDER = (
    S.COMPLETED,
    S.DEBUG,
    S.PRUNED,
    S.DIVERGED,
    S.FAILED,
    S.INTERRUPTED,
    S.CONFIG_ERROR,
    S.RUNNING,
    S.NOT_STARTED,
    S.UNKNOWN,
)

# attnlab-train's exit code for each final status of a run (the worst run of a multirun wins).
EXIT_CODES = {
    S.COMPLETED: 0,
    S.DEBUG: 0,
    S.PRUNED: 0,  # the search stopped it on purpose: the run did what it was asked
    S.FAILED: 1,
    S.CONFIG_ERROR: 2,
    S.DIVERGED: 3,
    S.INTERRUPTED: 4,
}
EXIT_OK = EXIT_CODES[S.COMPLETED]
# A study's stall rule for its stage-1 trials (tune.stop_stalled: N, set by attnlab-sweep): the run
# stops "pruned" at its N-th validation if val/nll is above its loss at initialization
# (attnlab.training.stall_stop).
STALL_ENV = "ATTNLAB_STOP_STALLED"
# A study's stage, set by attnlab-sweep for each of its trials: W&B's job type of the run ("tune"
# for stage 1, "seeds" for stage 2), so that a W&B view tells the stages apart; through the
# environment, not the config, so that a stage-1 run stays the same run as the stage-2 seed it may
# serve as.
JOB_TYPE_ENV = "ATTNLAB_WANDB_JOB_TYPE"
EXIT_BAD_CONFIG = EXIT_CODES[S.CONFIG_ERROR]
EXIT_DIVERGED = EXIT_CODES[S.DIVERGED]


def exit_code(statuses: Sequence[str]) -> int:
    """The exit code of a command whose runs ended with `statuses`: the worst one (0 if none)."""
    return max((EXIT_CODES.get(s, EXIT_CODES[S.FAILED]) for s in statuses), default=EXIT_OK)


def status_from_exit_code(code: int | None, interrupted: bool = False) -> str:
    """The status a run's exit code stands for, when its results.json does not say."""
    if interrupted:
        return S.INTERRUPTED
    by_code = {c: s for s, c in reversed(EXIT_CODES.items())}  # 0: completed
    return by_code.get(code, S.FAILED)


def sort_statuses(statuses: Sequence[str]) -> list[str]:
    """The distinct statuses in REPORT_ORDER (unknown ones last, as first seen)."""
    order = list(REPORT_ORDER)
    distinct = list(dict.fromkeys(statuses))
    return sorted(distinct, key=lambda s: order.index(s) if s in order else len(order))


def status_counts(statuses: Sequence[str]) -> str:
    """['completed', 'failed', 'completed'] -> '2 completed, 1 failed'."""
    return ", ".join(f"{statuses.count(s)} {s}" for s in sort_statuses(statuses))
