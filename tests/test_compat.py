"""Runs saved by earlier versions still load, through one function (attnlab.training.compat):
a checkpoint whose optimizer and schedule are named by `name`, whose peak is optim.lr and
which has no task trains, evaluates and schedules exactly as today's."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from attnlab.evaluation.checkpoints import load_model
from attnlab.model import TransformerConfig
from attnlab.training.compat import as_today
from attnlab.training.module import TransformerModule
from attnlab.training.optimizer import optimizer_from_config
from attnlab.training.schedules import schedule_from_config

OLD_KEYS = {"peak_lr": 2e-3, "warmup_steps": 10, "scale": 1.0, "min_lr": 0.0, "max_steps": None}
TODAY_OPTIM = {"_target_": "torch.optim.AdamW", "betas": [0.9, 0.98], "eps": 1e-9,
               "weight_decay": 0.1}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("noam", "Noam"),
        ("inverse_sqrt", "InverseSqrt"),
        ("cosine", "Cosine"),
        ("constant", "Constant"),
    ],
)
def test_a_schedule_named_by_name_with_every_schedules_keys_is_todays_class(name, cls):
    old = {"_target_": "attnlab.training.schedules.build_schedule", "name": name, **OLD_KEYS}
    got = schedule_from_config(as_today({"scheduler": old})["scheduler"], 64, 100)
    spec = {"_target_": f"attnlab.training.schedules.{cls}", "peak_lr": 2e-3, "warmup_steps": 10}
    want = schedule_from_config(spec, 64, 100)
    assert [got(s) for s in range(1, 101)] == [want(s) for s in range(1, 101)]


def test_the_peak_kept_in_optim_lr_moves_to_the_schedule_but_noam_keeps_its_own():
    old_optim = {"name": "adam", "lr": 2e-3}
    cosine = {"name": "cosine", "warmup_steps": 10, "max_steps": 100, "peak_lr": None}
    today = as_today({"optim": old_optim, "scheduler": cosine})
    assert "lr" not in today["optim"] and today["optim"]["_target_"] == "torch.optim.Adam"
    schedule = schedule_from_config(today["scheduler"], 64, 100)
    assert max(schedule(s) for s in range(1, 101)) == pytest.approx(2e-3)
    noam = {"name": "noam", "warmup_steps": 10, "peak_lr": None, "scale": 1.0}
    schedule = schedule_from_config(
        as_today({"optim": old_optim, "scheduler": noam})["scheduler"], 64, 100
    )
    assert schedule(10) == pytest.approx((64 * 10) ** -0.5)  # noam ignored optim.lr


def test_an_optimizer_named_by_name_is_the_same_torch_optimizer():
    old = {"_target_": "attnlab.training.optimizer.build_optimizer", "name": "adamw", "lr": 1e-3,
           "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.1}  # fmt: skip
    model = torch.nn.Linear(3, 3)
    built = optimizer_from_config(model, as_today({"optim": old})["optim"])
    today = optimizer_from_config(model, TODAY_OPTIM)
    assert type(built) is torch.optim.AdamW and built.defaults == today.defaults


@pytest.mark.parametrize(
    ("saved", "message"),
    [
        (
            {"optim": {"name": "sgd"}},
            r"^optim.name='sgd' is not valid; expected one of: adam, adamw$",
        ),
        (
            {"scheduler": {"name": "nope"}},
            r"^scheduler.name='nope' is not valid; expected one of: noam,",
        ),
    ],
)
def test_a_bad_old_name_is_one_line_naming_its_key(saved, message):
    with pytest.raises(ValueError, match=message):
        as_today(saved)


def test_todays_config_is_returned_as_it_is_and_a_stored_config_gains_no_task():
    today = {"optim": TODAY_OPTIM, "scheduler": {"_target_": "x.Y", "peak_lr": 1.0}, "model": {}}
    assert as_today(today) == today
    assert as_today(today, checkpoint=True)["task"] == "seq2seq"  # the default architecture's


@pytest.mark.parametrize(("arch", "task"), [("encoder_decoder", "seq2seq"), ("decoder_only", "lm")])
def test_an_old_checkpoint_file_loads_trains_and_evaluates_as_todays(tmp_path, arch, task):
    """A checkpoint written in the old form (no task; optimizer and schedule by name; the peak
    in optim.lr) reloads with load_from_checkpoint under weights_only, and attnlab-eval's
    loader reads it: same weights, today's task, schedule and optimizer."""
    config = TransformerConfig(vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                               n_decoder_layers=1, arch=arch)  # fmt: skip
    old_hparams = {
        "model": config.to_dict(),
        "optim": {"name": "adam", "lr": 3e-3, "betas": [0.9, 0.98], "eps": 1e-9},
        "scheduler": {
            "name": "inverse_sqrt",
            "warmup_steps": 4,
            "peak_lr": None,
            "scale": 1.0,
            "min_lr": 0.0,
            "max_steps": None,
        },  # fmt: skip
        "max_steps": 20,
    }
    L.seed_everything(0)
    reference = TransformerModule(**old_hparams)
    path = tmp_path / "checkpoints" / "old.ckpt"
    path.parent.mkdir()
    torch.save(
        {"state_dict": reference.state_dict(), "global_step": 7, "epoch": 0,
         "hyper_parameters": old_hparams, "pytorch-lightning_version": L.__version__},
        path,
    )  # fmt: skip
    loaded = TransformerModule.load_from_checkpoint(path, weights_only=True)
    assert loaded.task.name == task and loaded.hparams.task == task
    assert loaded.peak_lr() == pytest.approx(3e-3)
    assert type(loaded.configure_optimizers()["optimizer"]) is torch.optim.Adam
    for a, b in zip(loaded.state_dict().values(), reference.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    model, hparams, _ = load_model([str(path)])
    assert hparams["task"] == task and hparams["optim"]["_target_"] == "torch.optim.Adam"
    torch.testing.assert_close(model.state_dict(), reference.model.state_dict())
