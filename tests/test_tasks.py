"""Tasks (attnlab.tasks): each says how its batches become the model's inputs and targets and
how whole answers are predicted; the module, its old names and checkpoints all ask it."""

from __future__ import annotations

import re

import pytest
import torch

from attnlab.model import Transformer, TransformerConfig
from attnlab.tasks import NAMES, task_named
from attnlab.training.module import TransformerModule

OPTIM = {"_target_": "torch.optim.Adam", "betas": [0.9, 0.98], "eps": 1e-9}
SCHEDULE = {"_target_": "attnlab.training.schedules.Constant", "peak_lr": 1e-3}


def test_the_tasks_are_the_modules_of_the_package_and_a_typo_lists_them():
    assert NAMES == ("lm", "seq2seq")
    assert task_named("lm").name == "lm" and task_named("seq2seq").name == "seq2seq"
    with pytest.raises(ValueError, match=r"^data task 'mt' is not valid; expected one of: lm, s"):
        task_named("mt")


def _module(cls, arch: str, **kwargs):
    cfg = TransformerConfig(vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                            n_decoder_layers=1, arch=arch)  # fmt: skip
    return cls(model=cfg.to_dict(), optim=OPTIM, scheduler=SCHEDULE, **kwargs)


@pytest.mark.parametrize(
    ("task", "arch", "batch", "inputs", "targets"),
    [
        ("seq2seq", "encoder_decoder", {"src": 1, "tgt_in": 2, "tgt_out": 3}, (1, 2), 3),
        ("lm", "decoder_only", {"tokens": 4, "targets": 5}, (4,), 5),
    ],
)
def test_the_module_takes_inputs_and_targets_from_its_task(task, arch, batch, inputs, targets):
    batch = {k: torch.full((2, 3), v) for k, v in batch.items()}
    module = _module(TransformerModule, arch, task=task)
    got_inputs, got_targets = module.inputs_and_targets(batch)
    assert [int(x[0, 0]) for x in got_inputs] == list(inputs) and int(got_targets[0, 0]) == targets
    assert module.hparams.task == task  # in the checkpoint's hyper-parameters


@pytest.mark.parametrize(("task", "arch"), [("lm", "encoder_decoder"), ("seq2seq", "decoder_only")])
def test_a_task_refuses_a_model_that_cannot_read_its_batches(task, arch):
    """The rule lives with the task (a data module of one's own included), in one line."""
    other = "decoder_only" if arch == "encoder_decoder" else "encoder_decoder"
    message = (
        f"model.arch='{arch}' cannot read data task '{task}' batches; expected model.arch='{other}'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        _module(TransformerModule, arch, task=task)


def test_the_language_model_task_predicts_the_continuation_of_each_prompt():
    """Exact match for a decoder-only model: greedy continuation of tokens[:prompt_len],
    compared with the targets from the separator on, per prompt length."""
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_decoder_layers=1, arch="decoder_only"
    )
    model = Transformer(config).eval()
    tokens = torch.tensor([[5, 6, 7, 8, 9, 0], [5, 6, 7, 8, 9, 10]])
    targets = torch.tensor([[6, 7, 8, 9, 3, 0], [6, 7, 8, 9, 10, 3]])
    batch = {"tokens": tokens, "targets": targets, "prompt_len": torch.tensor([2, 3])}
    preds, refs = task_named("lm").predict(model, batch, bos_id=2, eos_id=3, pad_id=0)
    assert refs.tolist() == [[7, 8, 9, 3, 0, 0], [8, 9, 10, 3, 0, 0]]
    assert preds.shape == refs.shape
    assert task_named("lm").predict(model, {"tokens": tokens, "targets": targets}, 2, 3, 0) is None
