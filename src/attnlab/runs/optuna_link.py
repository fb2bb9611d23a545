"""The link between a searched sweep's study (attnlab.sweeps.search) and one of its trials' runs.

attnlab-sweep starts each trial's attnlab-train with these environment variables (not overrides:
they would change the run's identity, and a resumed trial is a new Optuna trial of the same run).
The run reports its metric at every validation to that trial and asks the study's pruner whether
to stop (attnlab.training.pruning). Optuna is imported only where a study is opened.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

STORAGE_ENV = "ATTNLAB_OPTUNA_STORAGE"
STUDY_ENV = "ATTNLAB_OPTUNA_STUDY"
TRIAL_ENV = "ATTNLAB_OPTUNA_TRIAL"  # the trial's number in its study
METRIC_ENV = "ATTNLAB_OPTUNA_METRIC"
PRUNER_ENV = "ATTNLAB_OPTUNA_PRUNER"  # JSON: min_resource, reduction_factor, last_step
LINK_ENVS = (STORAGE_ENV, STUDY_ENV, TRIAL_ENV, METRIC_ENV, PRUNER_ENV)
# A trial enqueued again after its worker died carries the number of the attempt it retries
# (attnlab.sweeps.study); that failed attempt is then no competitor of the pruner's.
ATTR_RETRY_OF = "attnlab:retry_of"
# The validation at which the pruner stopped the run, written before the run stops: a crash in
# between leaves the decision with the trial, and its retry stops at once (TrialReporter).
ATTR_PRUNED_AT = "attnlab:pruned_at"


@dataclass(frozen=True)
class TrialLink:
    storage: str
    study: str
    trial: int
    metric: str
    pruner: dict | None

    def environment(self) -> dict[str, str]:
        return {
            STORAGE_ENV: self.storage,
            STUDY_ENV: self.study,
            TRIAL_ENV: str(self.trial),
            METRIC_ENV: self.metric,
            PRUNER_ENV: json.dumps(self.pruner) if self.pruner else "",
        }

    @classmethod
    def from_environment(cls, env=None) -> TrialLink | None:
        """The link attnlab-sweep gave this process, or None (not a searched trial)."""
        env = os.environ if env is None else env
        if not env.get(STORAGE_ENV):
            return None
        missing = [name for name in LINK_ENVS[:-1] if not env.get(name)]
        if missing:
            raise ValueError(f"{STORAGE_ENV} is set but {', '.join(missing)} is not")
        pruner = env.get(PRUNER_ENV)
        return cls(
            storage=env[STORAGE_ENV],
            study=env[STUDY_ENV],
            trial=int(env[TRIAL_ENV]),
            metric=env[METRIC_ENV],
            pruner=json.loads(pruner) if pruner else None,
        )


def is_journal(url: str) -> bool:
    """A journal file (`journal:PATH`, or a path ending .log/.jsonl), else an SQLAlchemy URL."""
    return url.startswith("journal:") or url.endswith((".log", ".jsonl"))


def open_storage(url: str):
    """Optuna's storage for `url`: an RDB (sqlite:///..., postgresql://...; SQLite waits up to
    60 s for a lock, as several workers write it) or a journal file on a shared filesystem
    (Optuna's JournalFileBackend, for clusters without a database server)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if is_journal(url):
        return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def make_pruner(spec: dict | None):
    """Successive halving from the link's pruner spec (attnlab.sweeps.search_space.Pruning),
    blind to retried attempts; NopPruner without one."""
    import optuna

    if not spec:
        return optuna.pruners.NopPruner()
    halving = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=int(spec["min_resource"]), reduction_factor=int(spec["reduction_factor"])
    )
    return _WithoutRetriedAttempts(halving)


class _WithoutRetriedAttempts:
    """A pruner that judges a trial as `pruner` would in the study without the failed attempts
    that were enqueued again. A retry carries its attempt's rungs (attnlab.sweeps.study.
    carry_progress); left in, the attempt would count them a second time among the competitors
    and a crash would change which trials are pruned."""

    def __init__(self, pruner) -> None:
        self.pruner = pruner

    def prune(self, study, trial) -> bool:
        return self.pruner.prune(_StudyWithoutRetried(study), trial)


class _StudyWithoutRetried:
    """The study as the pruner reads it: get_trials without the retried failed attempts; every
    other attribute the study's own."""

    def __init__(self, study) -> None:
        self._study = study

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "_study":  # copy and pickle: not delegated
            raise AttributeError(name)
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states=None) -> list:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        everyone = trials if states is None else self._study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get(ATTR_RETRY_OF) for t in everyone} - {None}
        return [t for t in trials if not (t.number in retried and t.state.name == "FAIL")]


def open_trial(link: TrialLink):
    """The running Optuna trial of the link, for report() and should_prune() from this process
    (the sweep's worker alone ends it with tell())."""
    import optuna

    study = optuna.load_study(
        study_name=link.study,
        storage=open_storage(link.storage),
        sampler=optuna.samplers.RandomSampler(),
        pruner=make_pruner(link.pruner),
    )
    frozen = [t for t in study.get_trials(deepcopy=False) if t.number == link.trial]
    if not frozen:
        raise ValueError(f"{STUDY_ENV}={link.study}: no trial number {link.trial}")
    # Trial(study, trial_id) attaches to an existing trial; the id is private (test_private_apis)
    return optuna.trial.Trial(study, frozen[0]._trial_id)


class TrialReporter:
    """What a searched run does at each validation, without Lightning (attnlab.training.pruning
    wraps it): report the metric to the link's trial and ask whether to stop. Nothing is pruned
    after the pruner's last step, nor until a trial of the study has completed (every search has
    at least one trial run to its end, the reference the others are judged against), nor at the
    run's last validation (`final`: the run is done, and a finished run completes). A retry of
    an attempt the pruner had stopped (the crash fell between the decision and the run's end)
    stops at its first validation without reporting it. A trial the sweep took back (its worker
    was gone; a new run of it may use this run directory) raises TakenBack."""

    def __init__(self, link: TrialLink) -> None:
        self.link = link
        self._trial = None
        self._decided = False  # the pruner stopped this trial (or the attempt it retries)
        self._study_completed = False  # a trial of the study has completed (asked until so)

    def report(self, value: float, step: int, final: bool = False) -> bool:
        """Report `value` at validation `step` (from 0); True: the pruner stops the run (or had
        stopped the attempt this trial retries)."""
        from optuna.exceptions import UpdateFinishedTrialError

        if self._trial is None:
            self._trial = open_trial(self.link)
            self._decided = ATTR_PRUNED_AT in self._trial.user_attrs
        if self._decided:
            return True
        try:
            return self._report(value, step, final)
        except UpdateFinishedTrialError:
            raise TakenBack(f"{self.link.study} trial {self.link.trial} was taken back") from None

    def _report(self, value: float, step: int, final: bool) -> bool:
        from optuna.trial import TrialState

        self._trial.report(value, step)
        last = (self.link.pruner or {}).get("last_step")
        if final or (last is not None and step > last):
            return False
        if not self._study_completed:
            study = self._trial.study
            self._study_completed = bool(
                study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            )
        if self._study_completed and self._trial.should_prune():
            self._trial.set_user_attr(ATTR_PRUNED_AT, step)  # before the run stops
            self._decided = True
            return True
        return False


class TakenBack(RuntimeError):
    """The sweep ended this run's trial and enqueued it again."""
