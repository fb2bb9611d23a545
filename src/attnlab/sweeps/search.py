"""A `bayes` or `random` sweep file searched offline by Optuna (attnlab-sweep, no W&B server).

The sweep's Optuna study lives in a database: by default <out>/optuna.db (SQLite), or `--storage
URL` for one that several machines share (PostgreSQL, or Optuna's journal file on a shared
filesystem). attnlab-sweep runs `--parallel` workers (threads), each pinned to its GPU group like a
grid's trials; a worker asks the study for a trial, runs the file's command for it as its own
process (its run directory <out>/<NNN>-<name>, as a grid trial's), and tells the study how it
ended. The run reports the sweep's metric at every validation and the study's pruner (the file's
`early_terminate: hyperband`, attnlab.sweeps.search_space) may stop it: status "pruned".

`run_cap` (or --count) is the number of trials per study; started again with the same --out (or
on another machine with the same --storage), the command continues the study. With `arms: [keys]`
each combination of those keys' values is a study of its own (the per-arm tuning of a fair
ablation), all in one storage; workers fill the arm furthest behind.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.runs.optuna_link import TrialLink
from attnlab.sweeps import search_space
from attnlab.sweeps import study as studies_
from attnlab.sweeps.runner import (
    STOP_GRACE_S,
    TrialResult,
    _signal_group,
    finish,
    launch,
    trial_env,
    warning_lines,
)
from attnlab.sweeps.spec import Trial, make_trial, swept_keys, trial_name

POLL_S = 0.2


@dataclass
class Search:
    """A searched sweep as attnlab-sweep runs it."""

    config: dict  # the loaded sweep file, `name` set
    out: Path
    storage: str
    cap: int  # trials per study
    extra_overrides: Sequence[str] = ()
    seed: int = 0
    memory_share: float | None = None
    arms: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.arms = search_space.arms(self.config)
        self.pruning = search_space.pruning(self.config)
        self.metric = self.config["metric"]["name"]
        self.arm_keys = search_space.arm_keys(self.config)
        self.keys = [k for k in swept_keys(self.config) if k not in self.arm_keys]
        self.warned: set[str] = set()  # trial warnings already on the console (all workers)

    @property
    def name(self) -> str:
        return str(self.config["name"])

    def study_name(self, arm: dict) -> str:
        return f"{self.name}/{trial_name(arm, self.arm_keys)}" if arm else self.name

    def study_names(self) -> list[str]:
        return [self.study_name(arm) for arm in self.arms]

    def searched(self, arm: dict) -> dict:
        return search_space.distributions(self.config, arm)[0]

    def trial(self, arm: dict, values: dict, number: int, label: str | None = None) -> Trial:
        """The trial's argv and run directory (<out>/[<arm>-]<NNN>-<name>)."""
        if label is None:
            shown = {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in values.items()}
            name = trial_name(shown, self.keys) if self.keys else "trial"
            label = f"{trial_name(arm, self.arm_keys) + '-' if arm else ''}{number:03d}-{name}"
        return make_trial(
            self.config,
            values,
            number,
            self.name,
            [*self.arm_keys, *self.keys],
            self.extra_overrides,
            self.out,
            label=label,
        )

    def link(self, study_name: str, number: int) -> TrialLink:
        pruner = None
        if self.pruning is not None:
            pruner = {
                "min_resource": self.pruning.min_resource,
                "reduction_factor": self.pruning.reduction_factor,
                "last_step": self.pruning.last_step,
            }
        return TrialLink(self.storage, study_name, number, self.metric, pruner)

    def check_trials(self) -> list[Trial]:
        """Trials for the preflight that cover the space (search_space.check_points): per arm,
        every combination of the checked values, or, past CHECKED_COMBINATIONS, each value in
        turn with the others at their first. Each labelled with its searched values."""
        trials = []
        for arm in self.arms:
            searched, fixed = search_space.distributions(self.config, arm)
            for params in search_space.check_points(searched):
                values = search_space.run_values(self.config, params, fixed)
                shown = ", ".join(f"{k}={values[k]}" for k in searched)
                label = ", ".join(f"{k}={v}" for k, v in arm.items()) + (
                    f" with {shown}" if arm and shown else shown
                )
                trials.append(self.trial(arm, values, len(trials), label=label or "the search"))
        return trials


DEFAULT_DB = "optuna.db"


def default_storage(out: Path) -> str:
    return f"sqlite:///{out.resolve() / DEFAULT_DB}"


def open_search(search: Search) -> None:
    """Create (or load) the search's studies before anything else is written; a storage that
    cannot be opened (a bad URL, a database driver not installed, a server out of reach) or a
    study of another search space is a SweepError."""
    from attnlab.sweeps.spec import SweepError

    made = not search.out.exists()
    search.out.mkdir(parents=True, exist_ok=True)
    try:
        studies_.open_studies(search.config, search.storage, search.study_names(), search.seed)
    except Exception as err:  # SQLAlchemy's and Optuna's errors have no common base
        if made and not any(search.out.iterdir()):  # a refused storage leaves no folder behind
            search.out.rmdir()
        if isinstance(err, SweepError):
            raise
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, ImportError):  # Optuna's "Please install appropriate one."
            first = f"{missing_driver(search.storage)} is not installed"
        raise SweepError(f"--storage: cannot open the study there: {first}") from None


def missing_driver(url: str) -> str:
    """The database driver a storage URL needs, as the package to install."""
    scheme = url.split("://", 1)[0]
    if scheme.startswith("postgresql"):
        driver = scheme.partition("+")[2] or "psycopg2"
        if driver == "psycopg":
            return "its driver psycopg (pip install 'attnlab[postgres]')"
        return (
            f"its driver {driver} (or use postgresql+psycopg:// with pip install "
            "'attnlab[postgres]')"
        )
    return f"the database driver for {scheme}://"


def run_search(
    search: Search, slots: Sequence[str | None], log: Callable[[str], None] = print
) -> list[TrialResult]:
    """Run one worker per slot (a GPU group, or None) until every study has its cap; Ctrl-C
    stops the running trials (each is enqueued again, to resume) and returns. The results of
    the trials this command ran. The studies exist already (open_search); each worker opens
    them again with a sampler of its own."""
    stop_event, hurry, lock = threading.Event(), threading.Event(), threading.Lock()
    results: list[TrialResult] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=_worker,
            args=(search, gpus, (stop_event, hurry), lock, results, errors, log),
            daemon=True,
        )
        for gpus in slots
    ]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        try:
            time.sleep(POLL_S)
        except KeyboardInterrupt:  # the first stops the workers, a second hurries them
            if stop_event.is_set():
                hurry.set()
            else:
                log(f"interrupted: stopping the running trials of {len(threads)} worker(s)")
                stop_event.set()
    if errors:
        raise errors[0]
    return results


def _worker(search, gpus, events, lock, results, errors, log) -> None:
    stop_event = events[0]
    try:
        names = search.study_names()
        opened = studies_.open_studies(search.config, search.storage, names, search.seed)
        while not stop_event.is_set():
            with lock:  # one ask at a time in this process (other processes: next_trial's check)
                for study in opened:
                    studies_.reclaim_stale(study, log)
                picked = studies_.next_trial(
                    opened, search.arms, search.cap, search.config, search.searched
                )
            if picked is None:
                return
            results.append(_run_one(search, *picked, gpus, events, log))
    except BaseException as err:  # reported by run_search in the main thread
        errors.append(err)
        stop_event.set()


def _run_one(search: Search, study, arm: dict, trial, gpus, events, log) -> TrialResult:
    """Run one Optuna trial's process to its end (or until the stop event), renewing its lease;
    tell the study how it ended."""
    hurry = events[1]
    fixed = search_space.distributions(search.config, arm)[1]
    values = search_space.run_values(search.config, trial.params, fixed)
    label = trial.user_attrs.get(studies_.ATTR_RUN_DIR)
    spec = search.trial(arm, values, trial.number, label)
    for key, value in (  # the lease before the owner: whoever reads the owner finds a lease
        (studies_.ATTR_LEASE, time.time() + studies_.LEASE_S),
        (studies_.ATTR_RUN_DIR, spec.run_dir.name),
        (studies_.ATTR_VALUES, values),
        (studies_.ATTR_OWNER, studies_.owner()),
    ):
        trial.set_user_attr(key, value)
    result = TrialResult(spec, gpus=gpus)
    env = {
        **trial_env(gpus, search.memory_share),
        **search.link(study.study_name, trial.number).environment(),
    }
    t0 = time.monotonic()
    try:
        proc, logfile = launch(spec, env, gpus)
    except OSError as err:
        result.status, result.error = "failed", f"could not start {spec.command[0]!r}: {err}"
        studies_.settle(study, trial, result.status, None, interrupted=False)
        return result
    retried = " (resumes its run)" if label else ""
    log(f"started   {study.study_name} trial {trial.number}: {spec.run_dir.name}{retried}")
    interrupted = False
    try:
        studies_.renew(trial, child=proc.pid)
        interrupted = _wait(proc, trial, events)
    finally:  # whatever went wrong here, no run is left behind
        if proc.poll() is None:
            _stop(proc, hurry)
            interrupted = True
        logfile.close()
    result.wall_time_s = time.monotonic() - t0
    finish(result, proc.returncode, interrupted, search.metric)
    state = studies_.settle(study, trial, result.status, result.metric, interrupted)
    metric = "" if result.metric is None else f" {search.metric}={result.metric:.4g}"
    note = studies_.STATE_NOTES.get(state, "")
    log(
        f"{result.status:<9} {study.study_name} trial {trial.number}: {spec.run_dir.name}{metric} "
        f"({result.wall_time_s:.1f} s; Optuna: {state.lower()}{note})"
    )
    for line in warning_lines(result, search.warned):
        log(line)
    return result


def _wait(proc, trial, events) -> bool:
    """Wait for the run to end, renewing the trial's lease; True when stopped by the stop event
    (Ctrl-C), or when another worker took the trial back (then this run must not go on)."""
    stop_event, hurry = events
    renewed = time.monotonic()
    while proc.poll() is None:
        if stop_event.is_set():
            _stop(proc, hurry)
            return True
        if time.monotonic() - renewed > studies_.HEARTBEAT_S:
            if not studies_.renew(trial):
                _stop(proc, hurry)
                return True
            renewed = time.monotonic()
        time.sleep(POLL_S)
    return False


def _stop(proc, hurry: threading.Event) -> None:
    """SIGINT the run's process group (Lightning saves and stops), then SIGKILL after
    STOP_GRACE_S or at a second Ctrl-C (runner.stop, from a worker thread)."""
    _signal_group(proc, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    while proc.poll() is None and time.monotonic() < deadline and not hurry.is_set():
        time.sleep(POLL_S)
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
