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
    """Successive halving from the link's pruner spec (attnlab.sweeps.search_space.Pruning);
    NopPruner without one."""
    import optuna

    if not spec:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=int(spec["min_resource"]), reduction_factor=int(spec["reduction_factor"])
    )


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
