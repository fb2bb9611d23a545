"""Lightning dispatches only the per-step hooks attnlab's callbacks and module implement
(attnlab.training.hooks.SkipEmptyHooks): counted in a real run through the profiler labels
Lightning opens for every hook it calls, with Lightning's own ModelCheckpoint (not ours) as the
control that the count sees empty hooks when they are called."""

from __future__ import annotations

import re
from collections import Counter

import lightning as L
import pytest
from lightning.pytorch.profilers import PassThroughProfiler

from attnlab.pipeline.train import train
from attnlab.training.hooks import PER_STEP_HOOKS, SkipEmptyHooks

LABEL = re.compile(r"^\[(Callback|LightningModule)\](.+?)(\{.*\})?\.(\w+)$")


class Implements(SkipEmptyHooks, L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        pass


class Inherits(Implements):
    pass


def test_empty_hooks_become_none_and_implemented_ones_stay():
    assert Implements.on_train_batch_end is not None
    assert Inherits.on_train_batch_end is Implements.on_train_batch_end
    for name in set(PER_STEP_HOOKS) - {"on_train_batch_end"}:
        assert getattr(Implements, name) is None and getattr(Inherits, name) is None, name
    assert callable(Implements.on_fit_start)  # only per-step hooks are touched
    plain = type("Plain", (L.Callback,), {})
    assert callable(plain.on_before_backward)


@pytest.fixture
def dispatched(monkeypatch) -> Counter:
    """(kind, class name, hook) -> calls, for every hook Lightning calls through its profiler."""
    seen: Counter = Counter()
    profile = PassThroughProfiler.profile

    def counting(self, action_name: str):
        match = LABEL.match(action_name)
        if match:
            seen[match.group(1), match.group(2), match.group(4)] += 1
        return profile(self, action_name)

    monkeypatch.setattr(PassThroughProfiler, "profile", counting)
    return seen


@pytest.mark.slow
def test_a_run_dispatches_only_the_hooks_its_classes_implement(compose, tmp_path, dispatched):
    steps = 6
    ovs = [
        "debug=tiny",
        "logger=none",
        f"paths.run_dir={tmp_path}",
        f"trainer.max_steps={steps}",
        "checkpoint.every_n_steps=3",
        "checkpoint.every_minutes=10",
    ]
    assert train(compose(ovs), ovs)["status"] == "completed"
    per_step = {key: n for key, n in dispatched.items() if key[2] in PER_STEP_HOOKS}
    ours = {k: n for k, n in per_step.items() if k[1] != "ModelCheckpoint"}
    assert ours, "no per-step hook of attnlab's classes was dispatched: the count sees nothing"
    for _kind, name, _hook in ours:
        assert name in (
            "Preemption",
            "RNGState",
            "LoggingStep",
            "StepCheckpoint",
            "ValidateAtEnd",
            "AttentionMaps",
            "ThrottledProgressBar",
            "TransformerModule",
        ), name
    # what attnlab implements is still called at every step ...
    assert ours["Callback", "Preemption", "on_train_batch_end"] == steps
    assert ours["Callback", "StepCheckpoint", "on_train_batch_end"] == 2 * steps  # step, timed
    assert ours["LightningModule", "TransformerModule", "on_train_batch_start"] == steps
    # ... and what it leaves empty is not
    for _kind, name, hook in ours:
        assert hook not in ("on_before_backward", "on_after_backward", "on_before_zero_grad"), (
            name,
            hook,
        )
    # the control: Lightning's own ModelCheckpoint (the best checkpoint) gets its empty hooks
    assert per_step["Callback", "ModelCheckpoint", "on_before_backward"] == steps
