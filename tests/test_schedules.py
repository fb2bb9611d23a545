"""The learning-rate schedules against their formulas, and their use through LambdaLR."""

import math

import pytest
import torch

from attnlab.training.schedules import (
    Cosine,
    Noam,
    constant,
    cosine,
    inverse_sqrt,
    lr_lambda,
    noam,
    schedule_from_config,
)
from build_utils import dry_build

SCHEDULES = ("Noam", "InverseSqrt", "Cosine", "Constant")  # the classes of conf/scheduler


def build_schedule(cls: str, d_model: int = 64, max_steps: int | None = None, **keys):
    """The schedule class `cls` as a config names it, completed with the run's d_model and
    horizon as the harness does (schedule_from_config)."""
    spec = {"_target_": f"attnlab.training.schedules.{cls}", **keys}
    return schedule_from_config(spec, d_model, max_steps)


def test_noam_peak_of_the_base_model_is_7e_4():
    # Sec. 5.3 with d_model=512, warmup_steps=4000: the peak at step 4000 is (512*4000)^-0.5.
    peak = noam(4000, d_model=512, warmup_steps=4000)
    assert peak == pytest.approx(6.988e-4, rel=1e-3)
    assert noam(3999, 512, 4000) < peak and noam(4001, 512, 4000) < peak


@pytest.mark.parametrize("step", [1, 10, 399, 400, 401, 1000, 10_000])
def test_noam_formula(step):
    d_model, warmup, scale = 128, 400, 2.0
    expected = scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert noam(step, d_model, warmup, scale) == pytest.approx(expected)
    # warmup: linear in the step; after: inverse square root
    if step <= warmup:
        assert noam(step, d_model, warmup, scale) == pytest.approx(
            scale * d_model**-0.5 * step * warmup**-1.5
        )


def test_noam_without_warmup_decays_from_the_first_step():
    assert noam(1, 512, 0) == pytest.approx(512**-0.5)
    assert noam(100, 512, 0) == pytest.approx(512**-0.5 * 100**-0.5)


def test_inverse_sqrt_warms_up_linearly_then_decays():
    peak, warmup = 1e-3, 100
    assert inverse_sqrt(1, peak, warmup) == pytest.approx(peak / 100)
    assert inverse_sqrt(50, peak, warmup) == pytest.approx(peak / 2)
    assert inverse_sqrt(100, peak, warmup) == pytest.approx(peak)
    assert inverse_sqrt(400, peak, warmup) == pytest.approx(peak * 0.5)
    # warmup_steps=0: the peak at step 1, then peak * step^-0.5
    assert inverse_sqrt(1, peak, 0) == pytest.approx(peak)
    assert inverse_sqrt(16, peak, 0) == pytest.approx(peak / 4)


def test_cosine_warmup_half_way_and_end():
    peak, warmup, max_steps, min_lr = 1e-3, 10, 110, 1e-5
    assert cosine(5, peak, warmup, max_steps, min_lr) == pytest.approx(peak / 2)
    assert cosine(10, peak, warmup, max_steps, min_lr) == pytest.approx(peak)
    assert cosine(60, peak, warmup, max_steps, min_lr) == pytest.approx((peak + min_lr) / 2)
    assert cosine(110, peak, warmup, max_steps, min_lr) == pytest.approx(min_lr)
    assert cosine(500, peak, warmup, max_steps, min_lr) == pytest.approx(min_lr)
    # no warmup: the peak at step 0 of the decay
    assert cosine(1, peak, 0, 100) == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi / 100)))


def test_constant_with_and_without_warmup():
    assert constant(1, 1e-3, 0) == 1e-3
    assert constant(1000, 1e-3, 0) == 1e-3
    assert constant(5, 1e-3, 10) == pytest.approx(5e-4)
    assert constant(20, 1e-3, 10) == 1e-3


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_accepts_warmup_zero(name):
    schedule = build_schedule(name, peak_lr=1e-3, warmup_steps=0, max_steps=100)
    values = [schedule(s) for s in (1, 2, 50, 100)]
    assert all(math.isfinite(v) and v > 0 for v in values[:-1])
    assert values[0] >= values[1]  # no warmup: the first step is the largest (or equal)


def test_lambda_lr_applies_the_schedule_every_optimizer_step():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([param], lr=1.0)
    schedule = build_schedule("Noam", peak_lr=None, d_model=64, warmup_steps=5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(schedule))
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr of this optimizer step
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([noam(s, 64, 5) for s in range(1, 9)])


@pytest.mark.parametrize(
    ("name", "keys", "message"),
    [
        ("Noam", {"warmup_steps": -1}, r"^scheduler.warmup_steps=-1 is not valid; expected an i"),
        ("Noam", {"scale": 0}, r"^scheduler.scale=0 is not valid; expected a number > 0$"),
        ("Cosine", {"peak_lr": 1e-3, "warmup_steps": 0}, r"^scheduler=cosine needs a positive"),
        ("Cosine", {"peak_lr": None, "warmup_steps": 0, "max_steps": 9}, r"peak_lr=null .*Cos"),
        ("Constant", {"peak_lr": -1.0}, r"^scheduler.peak_lr=-1.0 is not valid; expected a n"),
        ("InverseSqrt", {"warmup_steps": 1.5}, r"^scheduler.warmup_steps=1.5 is not valid"),
        ("Cosine", {"min_lr": -1, "max_steps": 9}, r"^scheduler.min_lr=-1 is not valid"),
    ],
)
def test_each_schedule_checks_its_own_arguments_naming_the_key(name, keys, message):
    with pytest.raises(ValueError, match=message):
        build_schedule(name, **keys)


class Halving:
    """A schedule of one's own: peak_lr halved every `every` steps, no warmup."""

    def __init__(self, peak_lr: float, every: int, d_model: int | None = None):
        self.peak_lr, self.every, self.d_model = peak_lr, every, d_model

    def __call__(self, step: int) -> float:
        return self.peak_lr * 0.5 ** ((step - 1) // self.every)


def test_a_schedule_of_ones_own_is_a_class_named_by_target_and_gets_the_facts_it_declares():
    schedule = schedule_from_config(
        {"_target_": f"{__name__}.Halving", "peak_lr": 1.0, "every": 10}, 96, 1000
    )
    assert (schedule(1), schedule(11), schedule(21)) == (1.0, 0.5, 0.25)
    assert schedule.d_model == 96  # declared and left null: completed with the run's d_model


def test_the_completed_facts_are_the_runs_where_the_config_leaves_them_null():
    assert build_schedule("Noam", d_model=128, warmup_steps=10) == Noam(
        d_model=128, warmup_steps=10
    )
    given = build_schedule("Cosine", max_steps=100, peak_lr=1e-3, warmup_steps=0)
    assert given == Cosine(peak_lr=1e-3, warmup_steps=0, max_steps=100)
    kept = schedule_from_config(
        {"_target_": "attnlab.training.schedules.Cosine", "max_steps": 50, "warmup_steps": 0},
        64,
        100,
    )
    assert kept.max_steps == 50  # scheduler.max_steps set: not the trainer's horizon


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("warmup", [0, 100, 400])
def test_peak_lr_is_the_peak_of_every_schedule_whatever_the_warmup(name, warmup):
    """scheduler.peak_lr holds the peak fixed across warmups, noam's included (whose own peak,
    (d_model * warmup)^-0.5, moves with the warmup)."""
    schedule = build_schedule(name, warmup_steps=warmup, max_steps=2000, peak_lr=2e-3)
    values = [schedule(s) for s in range(1, 2001)]
    assert max(values) == pytest.approx(2e-3)
    assert values.index(max(values)) + 1 == max(warmup, 1)  # reached when the warmup ends


@pytest.mark.slow
def test_noam_without_warmup_and_without_a_peak_is_refused_with_the_spike_named(compose):

    cfg = compose(["scheduler=noam", "scheduler.warmup_steps=0", "model=transformer_base"])
    with pytest.raises(ValueError, match=r"scheduler.warmup_steps=0 .*63x.*scheduler.peak_lr"):
        dry_build(cfg)
    dry_build(compose(["scheduler=noam", "scheduler.warmup_steps=0", "scheduler.peak_lr=7e-4"]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "peak"),
    [
        (["scheduler=noam", "scheduler.warmup_steps=100"], (64 * 100) ** -0.5),  # its formula
        (["scheduler=noam", "scheduler.warmup_steps=100", "scheduler.peak_lr=0.5"], 0.5),
        (["scheduler=cosine", "scheduler.peak_lr=2e-3"], 2e-3),
        (["scheduler=inverse_sqrt", "scheduler.warmup_steps=100", "scheduler.peak_lr=2e-3"], 2e-3),
        (["scheduler=constant"], 3e-3),  # the group's default peak
    ],
)
def test_the_module_trains_at_the_one_peak_the_config_names(compose, tmp_path, overrides, peak):
    """scheduler.peak_lr is read by every schedule (noam's formula only where it is null), and
    the peak the module reports (results.json, W&B) is the one its optimizer really reaches."""
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.build import build

    cfg = plain_config(compose([*overrides, "trainer.max_steps=400", f"paths.run_dir={tmp_path}"]))
    module = build(cfg, tmp_path).module
    assert module.peak_lr() == pytest.approx(peak)
    scheduler = module.configure_optimizers()["lr_scheduler"]["scheduler"]
    seen = []
    for _ in range(300):
        seen.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()  # no gradients: changes nothing, keeps torch's order
        scheduler.step()
    assert max(seen) == pytest.approx(peak)


def test_a_learning_rate_given_as_optim_lr_is_refused_in_one_line(compose):
    """The peak's second home is gone: optim.lr is not silently ignored (noam used to train at
    its own peak with optim.lr=0.5, and a run folder named lr_0.5)."""
    with pytest.raises(Exception, match="optim"):
        compose(["scheduler=noam", "optim.lr=0.5"])


@pytest.mark.parametrize(
    ("choice", "warmup"), [(None, 100), ("noam", 4000), ("inverse_sqrt", 4000), ("constant", 0)]
)
def test_each_schedule_warms_up_as_its_file_says(compose, choice, warmup):
    """scheduler=noam runs the paper's 4000 warmup steps (before, train.yaml's 100 for the
    default run applied to every schedule); the default run's cosine keeps its 100."""
    cfg = compose([f"scheduler={choice}"] if choice else [])
    assert cfg.scheduler.warmup_steps == warmup
