"""A study's stall rule inside a stage-1 trial's run: a run whose validation nll is still above
its loss at initialization at its N-th validation stops there, with status "pruned" (stopped
early on purpose, as a search's pruner stops one), and says when in results.json's
"stopped_early". Such a point cannot win its arm's choice (attnlab.sweeps.tuning.score gives a
point with a seed that did not complete no score), so the rest of its budget is spent on nothing.

attnlab-sweep turns it on for a study's stage-1 trials with `tune.stop_stalled: N`, through the
environment (STALL_ENV), so that a trial's config, and so its identity, is that of the same run
without the rule (stage 2 may reuse a stage-1 run). A diverged run needs no rule: its non-finite
loss ends it as "diverged" (attnlab.training.gradients).
"""

from __future__ import annotations

import math
import os

import lightning as L

from attnlab.runs.status import STALL_ENV  # N: the validation (from 1) the rule is applied at
from attnlab.training.hooks import SkipEmptyHooks
from attnlab.training.pruning import at_budget

METRIC = "val/nll"


class StallStop(SkipEmptyHooks, L.Callback):
    """At the `after`-th validation (not the sanity check, not the run's last), stop the run when
    val/nll is above the module's `nll_init` (the training nll of its first batch). Rank 0
    decides; every rank stops. The validation count is kept in checkpoints."""

    def __init__(self, after: int) -> None:
        if after < 1:
            raise ValueError(f"{STALL_ENV}={after}: expected a validation count >= 1")
        self.after = after
        self.validations = 0
        self.stopped: dict | None = None  # where and why it stopped

    @property
    def pruned(self) -> bool:  # read by attnlab.pipeline.train: the run ends "pruned"
        return self.stopped is not None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.validations += 1
        if self.validations != self.after or at_budget(trainer):
            return
        found = self._stalled(trainer, pl_module) if trainer.is_global_zero else None
        if trainer.world_size > 1:
            found = trainer.strategy.broadcast(found)
        if found is not None:
            self.stopped = found
            trainer.should_stop = True

    def _stalled(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict | None:
        value, init = trainer.callback_metrics.get(METRIC), getattr(pl_module, "nll_init", None)
        if value is None or init is None:
            return None
        value, init = float(value), float(init)
        if not (math.isfinite(value) and value > init):
            return None
        return {
            "rule": f"{METRIC} above the loss at initialization at validation {self.after}",
            "validation": self.after,
            "step": int(trainer.global_step),
            METRIC: value,
            "nll_init": init,
        }

    def state_dict(self) -> dict:
        return {"validations": self.validations, "stopped": self.stopped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.validations = int(state_dict.get("validations", 0))
        self.stopped = state_dict.get("stopped")

    def results_record(self) -> dict:
        """results.json's "stopped_early", when the rule stopped the run."""
        return {"stopped_early": self.stopped} if self.stopped else {}


def stall_stop(env=None) -> list[L.Callback]:
    """[StallStop(N)] when attnlab-sweep set STALL_ENV=N for this run, else []."""
    text = (os.environ if env is None else env).get(STALL_ENV, "").strip()
    return [StallStop(int(text))] if text else []
