"""Pruning inside a searched trial's run: each validation reports the sweep's metric to the trial's
Optuna study, and the study's pruner may stop the run, which then ends with status "pruned".

optuna-integration's PyTorchLightningPruningCallback is not used: it reports the epoch as the
step (every validation of an epoch but the first would be ignored, and attnlab validates every N
steps), and it raises TrialPruned inside a hook, which the run would record as failed. Here the
step is the validation's index from 0, as W&B's hyperband counts a metric's logged values.
"""

from __future__ import annotations

import math
import os
import sys

import lightning as L

from attnlab.runs.optuna_link import TakenBack, TrialLink, TrialReporter
from attnlab.runs.status import EXIT_CODES, Status
from attnlab.training.hooks import SkipEmptyHooks


class SweepPruning(SkipEmptyHooks, L.Callback):
    """Report `link.metric` after every validation (not the sanity check) and stop the run when
    the pruner says so (until the pruner's last step, if it has one, and never at the run's last
    validation). Rank 0 asks; every rank stops. The validation count is kept in checkpoints, so
    a resumed run goes on counting."""

    def __init__(self, link: TrialLink) -> None:
        self.link = link
        self.validations = 0
        self.pruned_at: int | None = None  # the validation (from 0) at which it was pruned
        self.reporter = TrialReporter(link)

    @property
    def pruned(self) -> bool:
        return self.pruned_at is not None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        step = self.validations
        self.validations += 1
        prune = False
        # The last validation (the budget reached) is reported, never pruned: the run is done,
        # and a finished run completes (tested, its value told to the study).
        last = at_budget(trainer)
        if trainer.is_global_zero:
            metric = trainer.callback_metrics.get(self.link.metric)
            prune = self._report(metric, step, last)
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune)
        if prune:
            self.pruned_at = step
            trainer.should_stop = True

    def _report(self, value, step: int, last: bool) -> bool:
        if value is None:
            return False
        value = float(value)
        if not math.isfinite(value):
            return False  # a diverged run ends as "diverged"; Optuna refuses NaN values
        try:
            return self.reporter.report(value, step, final=last)
        except TakenBack as taken:
            # The sweep took this trial back (its worker was gone) and enqueued it again: a new
            # run of it may already use this run directory. Leave at once, writing nothing.
            print(f"{taken}; this run stops without writing", file=sys.stderr, flush=True)
            os._exit(EXIT_CODES[Status.INTERRUPTED])

    def state_dict(self) -> dict:
        return {"validations": self.validations}

    def load_state_dict(self, state_dict: dict) -> None:
        self.validations = int(state_dict.get("validations", 0))

    def results_record(self) -> dict:
        """results.json's "search": the study, the trial and where it was pruned."""
        record = {
            "study": self.link.study,
            "trial": self.link.trial,
            "validations": self.validations,
        }
        if self.pruned:
            record["pruned_at_validation"] = self.pruned_at
        return {"search": record}


def at_budget(trainer: L.Trainer) -> bool:
    """Whether the run has reached its step budget (trainer.max_steps, where one is set): its
    validation now is its last, so an early stop would stop nothing."""
    return bool(trainer.max_steps and trainer.max_steps > 0) and (
        trainer.global_step >= trainer.max_steps
    )


def sweep_pruning() -> list[L.Callback]:
    """[SweepPruning] when attnlab-sweep started this run as a searched trial, else []."""
    link = TrialLink.from_environment()
    return [SweepPruning(link)] if link is not None else []
