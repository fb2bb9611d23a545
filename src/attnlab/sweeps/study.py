"""A searched sweep's Optuna studies in their storage: opening, counting, recovering the trials of
dead workers, choosing the next trial, recording its end. attnlab.sweeps.search runs the workers.

Each trial keeps what attnlab needs in its user attributes (ATTR_*): its run directory (a retry
of an interrupted trial reuses it, so the run resumes from its newest checkpoint), the values its
run got, the worker that runs it (host:pid), a lease the worker renews while the run lives, and
the run's attnlab status. A worker's trial whose lease ran out, or whose worker on this host is
gone, is marked failed and enqueued again with the same parameters and run directory. A retry
(ATTR_RETRY_OF) replaces the trial it retries in every count; a trial asked beyond the cap by a
racing worker is ended at once (ATTR_OVER_CAP) and counted nowhere.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import time
import zlib
from collections.abc import Sequence

from attnlab.runs.optuna_link import ATTR_PRUNED_AT, ATTR_RETRY_OF, open_storage
from attnlab.runs.status import Status
from attnlab.sweeps.cluster import alive
from attnlab.sweeps.search_space import space_fingerprint
from attnlab.sweeps.spec import SweepError

LEASE_S = 120.0  # a running trial whose worker has not renewed its lease for this long is dead
HEARTBEAT_S = 20.0  # how often a worker renews the lease of the trial it runs
ATTR_RUN_DIR = "attnlab:run_dir"
ATTR_VALUES = "attnlab:values"
ATTR_OWNER = "attnlab:owner"
ATTR_LEASE = "attnlab:lease_until"
ATTR_CHILD = "attnlab:child_pid"
ATTR_STATUS = "attnlab:status"
ATTR_OVER_CAP = "attnlab:over_cap"
ATTR_SPACE = "attnlab:space"
HOST = socket.gethostname()


def owner() -> str:
    return f"{HOST}:{os.getpid()}"


def open_studies(config: dict, storage_url: str, names: Sequence[str], seed: int) -> list:
    """One Study per name (created, or loaded when it exists), with a sampler of its own: TPE
    (constant liar, so parallel workers spread out) for bayes, random for random. Each draw is
    seeded by `seed`, the study and the draw's index in it (DrawSeeded): a rerun, a worker that
    joins later and a search resumed after a crash draw what the uninterrupted search would, and
    no two draws of a study share a seed. SweepError when a study exists with another search
    space."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(storage_url)
    fingerprint = space_fingerprint(config)
    direction = (config.get("metric") or {}).get("goal", "minimize")
    studies = []
    for name in names:
        study = optuna.create_study(
            storage=storage, study_name=name, direction=direction, load_if_exists=True
        )
        stored = study.user_attrs.get(ATTR_SPACE)
        if stored is None:
            study.set_user_attr(ATTR_SPACE, fingerprint)
        elif stored != fingerprint:
            raise SweepError(
                f"study {name!r} in {storage_url} was created from another search space "
                "(parameters, metric, early_terminate or arms differ); use a new --out or --storage"
            )
        study.sampler = DrawSeeded(config["method"], seed, name)
        studies.append(study)
    return studies


def draw_index(trials, number: int) -> int:
    """The index of trial `number`'s draw in its study: the trials before it that drew, that is
    all but the retries (enqueued with their attempt's values, ATTR_RETRY_OF set when they are
    created) and those over the cap. A crash shifts no later draw, and whatever order workers
    ask and take trials back in, no two trials get one index (trial numbers are unique)."""
    return len(
        [
            t
            for t in trials
            if t.number < number
            and t.user_attrs.get(ATTR_RETRY_OF) is None
            and not t.user_attrs.get(ATTR_OVER_CAP)
        ]
    )


class DrawSeeded:
    """An Optuna sampler (TPE for bayes, random for random) made afresh for each trial, seeded by
    (seed, study, the trial's draw_index). Random draws are then the same in every run of the
    search; TPE's depend besides on the values told before, as they should. Every sampler call
    goes to the trial's sampler."""

    def __init__(self, method: str, seed: int, study_name: str) -> None:
        self.method, self.seed, self.study_name = method, seed, study_name
        self.sampler = self._make(0)

    def _make(self, index: int):
        import optuna

        draw_seed = zlib.crc32(f"{self.seed}:{self.study_name}:{index}".encode())
        if self.method == "bayes":
            return optuna.samplers.TPESampler(seed=draw_seed, constant_liar=True)
        return optuna.samplers.RandomSampler(seed=draw_seed)

    def before_trial(self, study, trial) -> None:
        self.sampler = self._make(draw_index(study.get_trials(deepcopy=False), trial.number))
        self.sampler.before_trial(study, trial)

    def __getattr__(self, name: str):  # infer_relative_search_space, sample_*, after_trial...
        if name.startswith("__") or name == "sampler":  # copy and pickle: not delegated
            raise AttributeError(name)
        return getattr(self.sampler, name)


def counted(trials) -> list:
    """The trials that count toward the cap: all but retried ones and those over the cap."""
    retried = {t.user_attrs.get(ATTR_RETRY_OF) for t in trials} - {None}
    return [
        t
        for t in trials
        if not t.user_attrs.get(ATTR_OVER_CAP)
        and not (t.number in retried and t.state.name == "FAIL")
    ]


def stale_reason(trial, now: float) -> str | None:
    """Why a RUNNING trial's worker is gone (None: it lives, or may)."""
    host, _, pid = str(trial.user_attrs.get(ATTR_OWNER, "")).rpartition(":")
    if not pid:  # asked, not yet claimed: give the worker its lease
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        return "never claimed" if now - started > LEASE_S else None
    if host == HOST and int(pid) == os.getpid():
        return None  # this process's own
    if host == HOST and not alive(int(pid)):
        return f"its worker (pid {pid}) is gone"
    lease = trial.user_attrs.get(ATTR_LEASE)
    if lease is None:  # claimed a moment ago: its worker writes the lease next (older runs)
        return None
    if float(lease) < now:
        return f"its worker {host}:{pid} has not renewed its lease for {LEASE_S:.0f} s"
    return None


def reclaim_stale(study, log) -> int:
    """Mark failed the running trials whose worker is gone and enqueue each again (same
    parameters, same run directory, so the run resumes from its checkpoint); the number done.
    A run left behind on this host by its killed worker is stopped first."""
    import optuna

    done = 0
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        why = stale_reason(trial, time.time())
        if why is None:
            continue
        host = str(trial.user_attrs.get(ATTR_OWNER, "")).rpartition(":")[0]
        child = trial.user_attrs.get(ATTR_CHILD)
        if child and host == HOST:
            _stop_group(int(child))
        if retry(study, trial):
            done += 1
            log(f"trial {trial.number} of {study.study_name}: {why}; failed, and enqueued again")
    return done


def _stop_group(pid: int) -> None:
    """SIGINT, then SIGKILL after 15 s, to a process group left running (a killed worker's)."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.2)


def retry(study, trial) -> bool:
    """End the trial as failed and enqueue it again, unless another worker ended it first."""
    import optuna

    try:
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    except (ValueError, RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
        return False  # already ended (by a racing worker)
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get(ATTR_RETRY_OF) == trial.number for t in trials):
        return False  # a racing worker enqueued it (SQLite does not lock the row it read)
    attrs = {ATTR_RETRY_OF: trial.number}
    if trial.user_attrs.get(ATTR_RUN_DIR):
        attrs[ATTR_RUN_DIR] = trial.user_attrs[ATTR_RUN_DIR]
    study.enqueue_trial(trial.params, user_attrs=attrs)
    return True


RUNG_PREFIX = "completed_rung_"  # Optuna's successive halving: the rungs a trial passed


def carry_progress(study, trial) -> None:
    """A retry goes on from where the attempt it retries stopped: that attempt's intermediate
    values are reported again into the new trial (its history), and the rungs of successive
    halving it passed are marked passed (Optuna keeps them as `completed_rung_<k>` system
    attributes), so the pruner judges the resumed run at the next rung only, as it would have
    judged the uncrashed trial, not again at rungs already passed with a later value. An attempt
    the pruner had stopped (ATTR_PRUNED_AT) passes the decision on: its retry stops at once. (The
    failed attempt keeps its rung values; the pruner does not count it among the competitors:
    attnlab.runs.optuna_link.make_pruner.) Not covered: a crash in the moment between the pruner
    writing a rung and the run writing its decision leaves that rung looking passed."""
    retried = trial.user_attrs.get(ATTR_RETRY_OF)
    first = [t for t in study.get_trials(deepcopy=False) if t.number == retried]
    if not first:
        return
    for step, value in sorted(first[0].intermediate_values.items()):
        trial.report(value, step)
    if ATTR_PRUNED_AT in first[0].user_attrs:
        trial.set_user_attr(ATTR_PRUNED_AT, first[0].user_attrs[ATTR_PRUNED_AT])
    for key, value in first[0].system_attrs.items():
        if key.startswith(RUNG_PREFIX):  # the storage call is private (tests/test_private_apis)
            study._storage.set_trial_system_attr(trial._trial_id, key, value)


def reached_target(study, config: dict) -> bool:
    """metric.target reached by a completed trial (W&B then stops the sweep)."""
    target = (config.get("metric") or {}).get("target")
    if target is None:
        return False
    values = [t.value for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not values:
        return False
    maximize = (config.get("metric") or {}).get("goal") == "maximize"
    return max(values) >= target if maximize else min(values) <= target


def next_trial(studies: Sequence, arms: Sequence[dict], cap: int, config: dict, searched):
    """(study, arm, its new running trial) for the next run, or None when every study has its
    cap (or reached the target). An enqueued retry goes first; then the arm furthest behind.
    `searched(arm)`: that arm's distributions."""
    candidates = []
    for study, arm in zip(studies, arms, strict=True):
        trials = study.get_trials(deepcopy=False)
        waiting = any(t.state.name == "WAITING" for t in trials)
        n = len(counted(trials))
        if waiting or (n < cap and not reached_target(study, config)):
            candidates.append((not waiting, n, study, arm))
    for _, _, study, arm in sorted(candidates, key=lambda c: c[:2]):
        trial = study.ask(searched(arm))
        if trial.user_attrs.get(ATTR_RETRY_OF) is not None:
            carry_progress(study, trial)
            return study, arm, trial
        earlier = [t for t in counted(study.get_trials(deepcopy=False)) if t.number < trial.number]
        if len(earlier) < cap:
            return study, arm, trial
        trial.set_user_attr(ATTR_OVER_CAP, True)  # another worker took the last place
        study.tell(trial, state=_state("FAIL"))
    return None


def _state(name: str):
    import optuna

    return optuna.trial.TrialState[name]


def renew(trial, child: int | None = None) -> bool:
    """Renew the worker's lease on its trial (and record its run's pid); False when the trial
    has ended meanwhile (another worker took it back: its run must stop)."""
    import optuna

    try:
        if child is not None:
            trial.set_user_attr(ATTR_CHILD, child)
        trial.set_user_attr(ATTR_LEASE, time.time() + LEASE_S)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


# What the worker's log line adds to the Optuna state it told.
STATE_NOTES = {
    "TAKEN": ": another worker had taken it back",
    "NO_METRIC": ": its results.json has no value of the sweep's metric (check metric.name)",
}


def settle(study, trial, status: str, value: float | None, interrupted: bool) -> str:
    """Tell the study how the trial's run ended; the Optuna state (or TAKEN, NO_METRIC).
    Interrupted before its end: failed and enqueued again (the rerun resumes it); completed:
    its metric (none: failed, NO_METRIC); pruned or diverged: pruned (TPE ranks them below every
    completed trial); anything else failed. TAKEN: another worker ended it first."""
    import optuna

    final = status in (Status.COMPLETED, Status.PRUNED, Status.DIVERGED, Status.FAILED)
    try:
        trial.set_user_attr(ATTR_STATUS, str(status))
        if status == Status.INTERRUPTED or (interrupted and not final):
            frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
            return "FAIL" if retry(study, frozen) else "TAKEN"
        if status == Status.COMPLETED and value is not None and math.isfinite(value):
            study.tell(trial, value)
            return "COMPLETE"
        if status in (Status.PRUNED, Status.DIVERGED):
            study.tell(trial, state=_state("PRUNED"))
            return "PRUNED"
        study.tell(trial, state=_state("FAIL"))
        return "NO_METRIC" if status == Status.COMPLETED else "FAIL"
    except optuna.exceptions.UpdateFinishedTrialError:
        return "TAKEN"
