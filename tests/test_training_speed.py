"""The training step's bookkeeping: train/ metrics on the logging steps only (none lost), the
logged tokens per second against a controlled clock, clipping that reuses the
gradient norm."""

from __future__ import annotations

import csv
import traceback
import types

import lightning as L
import pytest
import torch

from attnlab.pipeline.train import train


class FakeClock(L.Callback):
    """Added to a run with +callbacks.clock._target_=test_training_speed.FakeClock, with the
    module's clock replaced by FakeClock.now: every training step takes exactly STEP seconds
    and every validation batch VALIDATION seconds, so the tokens per second a window should
    log is known exactly (a wall clock made this test fail on a loaded machine)."""

    STEP, VALIDATION = 0.5, 100.0
    now = 0.0
    tokens: list[int] = []

    def __init__(self) -> None:
        FakeClock.now, FakeClock.tokens = 1000.0, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        FakeClock.now += self.STEP
        FakeClock.tokens.append(int(batch["tgt_out"].ne(0).sum()))

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking:
            FakeClock.now += self.VALIDATION


def _rows(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _train(compose, tmp_path, *overrides: str):
    run_dir = tmp_path / "run"
    ovs = ["debug=tiny", "logger=none", "callbacks=none", f"paths.run_dir={run_dir}", *overrides]
    return train(compose(ovs), ovs), run_dir


@pytest.fixture(scope="module")
def clocked_run(tmp_path_factory):
    """(results, run directory, the target tokens of each step) of a 42-step run logging every
    10th step and validating every 15th, on FakeClock's clock."""
    from attnlab.config.compose import compose_config
    from attnlab.training import module
    from conftest import CONF_DIR

    run_dir = tmp_path_factory.mktemp("clocked") / "run"
    ovs = ["debug=tiny", "logger=none", "callbacks=none", f"paths.run_dir={run_dir}",
           "trainer.max_steps=42", "trainer.log_every_n_steps=10",
           "trainer.val_check_interval=15",
           "+callbacks.clock._target_=test_training_speed.FakeClock"]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module.time, "perf_counter", lambda: FakeClock.now)
        results = train(compose_config(CONF_DIR, ovs), ovs)
    return results, run_dir, list(FakeClock.tokens)


@pytest.mark.slow
def test_logged_tokens_per_sec_is_the_tokens_over_the_training_time(clocked_run):
    """Every logged value is the target tokens since the previous one over the time they took,
    validation excluded: with a clock where each step takes 0.5 s and validation 100 s per
    batch, a window of n steps logs exactly its tokens / (0.5 n)."""
    results, run_dir, step_tokens = clocked_run
    assert results["status"] == "completed"
    logged = [float(r["train/tokens_per_sec"]) for r in _rows(run_dir) if r["train/tokens_per_sec"]]
    logged.append(results["metrics"]["train/tokens_per_sec"])  # the last step: results.json
    windows = [(1, 10), (11, 20), (21, 30), (31, 40), (41, 42)]  # every 10th step and the last
    assert len(logged) == len(windows)
    for value, (first, last) in zip(logged, windows, strict=True):
        tokens = sum(step_tokens[first - 1 : last])
        assert value == pytest.approx(tokens / (FakeClock.STEP * (last - first + 1)), rel=1e-6)


@pytest.mark.slow
def test_train_metrics_are_logged_every_n_steps_and_at_the_last(clocked_run):
    """metrics.csv gets the train/ metrics every log_every_n_steps steps, results.json those
    of the last step (clocked_run: every 10th of 42 steps)."""
    results, run_dir, _ = clocked_run
    names = ("train/loss", "train/nll", "train/perplexity", "train/token_acc", "train/lr")
    names += ("train/tokens_per_sec", "diag/grad_norm", "diag/grad_norm/decoder.layers.0")
    train_rows = [r for r in _rows(run_dir) if r["train/loss"]]
    assert [int(r["step"]) for r in train_rows] == [9, 19, 29, 39]  # steps 10, 20, 30, 40
    for row in train_rows:
        assert all(row[n] for n in names), row
        assert float(row["train/perplexity"]) == pytest.approx(
            torch.exp(torch.tensor(float(row["train/nll"]))).item(), rel=1e-4
        )
    assert all(n in results["metrics"] for n in names)
    assert results["metrics"]["train/loss"] != float(train_rows[-1]["train/loss"])  # step 42's


READS = ("item", "tolist", "__float__", "__int__", "__bool__")  # what copies a value to the host


class HostReads(L.Callback):
    """Counts, per training step (from on_train_batch_start to the next step or validation,
    so Lightning's bookkeeping after the step's hooks is inside), the tensor values the harness
    reads back to the host, which on a GPU each wait for the queued work: not the data
    pipeline's (CPU tensors), nor the eager model's own (whether a batch has pads, which
    positions are real: model/stacks.py; a compiled model decides none of them)."""

    steps: list[tuple[bool, list[str]]] = []
    current: list[str] | None = None

    def __init__(self) -> None:
        HostReads.steps, HostReads.current = [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        HostReads.current = []
        HostReads.steps.append((True, HostReads.current))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        HostReads.steps[-1] = (pl_module._log_now, HostReads.current)  # set after this hook

    def on_validation_start(self, trainer, pl_module) -> None:
        if HostReads.current is not None:
            HostReads.steps[-1] = (True, HostReads.current)  # a validated step: not counted
        HostReads.current = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        HostReads.steps[-1] = (True, HostReads.current)  # the bar draws at an epoch's end


def _counting(name: str, read):
    def counted(self, *args, **kwargs):
        if HostReads.current is not None:
            files = [f.filename for f in traceback.extract_stack(limit=25)]
            skipped = ("/utils/data/", "/attnlab/data/", "/attnlab/model/")
            if not any(part in f for f in files for part in skipped):
                caller = next(f for f in reversed(traceback.extract_stack(limit=25)[:-1]))
                HostReads.current.append(f"{name} {caller.filename.split('/')[-1]}:{caller.name}")
        return read(self, *args, **kwargs)

    return counted


def _quiet_step_reads(compose, tmp_path, monkeypatch, *overrides: str):
    """(results, the values each step that logs nothing read back to the host) of a 30-step
    run logging and validating every 10th step, with the tensor reads counted (HostReads)."""
    from attnlab.training.progress import ThrottledProgressBar

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, _counting(name, getattr(torch.Tensor, name)))
    # the bar draws (and reads train/loss) at an epoch's end only, not every 0.5 s
    monkeypatch.setattr(ThrottledProgressBar, "_due", lambda self, stage, i, total: False)
    results, _ = _train(
        compose,
        tmp_path,
        "trainer.max_steps=30",
        "trainer.log_every_n_steps=10",
        "trainer.val_check_interval=10",
        *overrides,
        "+callbacks.reads._target_=test_training_speed.HostReads",
    )
    HostReads.current = None
    return results, [reads for logging, reads in HostReads.steps[1:-1] if not logging]


@pytest.mark.slow
def test_a_step_that_logs_nothing_reads_one_value_back(compose, tmp_path, monkeypatch):
    """Between logging steps a training step reads back one value, the finiteness check of the
    gradient norm (whose host sync clipping relies on): no metric converted for the progress
    bar, nothing logged. Before, Lightning converted train/loss (a prog_bar metric) after every
    step, logged or not."""
    results, quiet = _quiet_step_reads(
        compose, tmp_path, monkeypatch, "trainer.enable_progress_bar=true"
    )
    assert results["status"] == "completed"
    assert len(quiet) >= 10
    for reads in quiet:
        assert reads == ["__bool__ gradients.py:inspect"], reads


def _tiny_module():
    """A TransformerModule of 1+1 layers of d_model 16 on 11 tokens, outside a Trainer."""
    from attnlab.training.module import TransformerModule

    model = dict(vocab_size=11, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1)
    model["n_decoder_layers"] = 1
    optim = {"_target_": "torch.optim.Adam", "betas": [0.9, 0.98], "eps": 1e-9}
    schedule = {"_target_": "attnlab.training.schedules.Constant", "peak_lr": 1e-3}
    module = TransformerModule(model, optim, schedule, task="seq2seq")
    module._trainer = types.SimpleNamespace(precision_plugin=None, global_step=0)
    module._log_now = False
    return module


def test_clipping_reuses_the_gradient_norm_and_equals_clip_grad_norm():
    module = _tiny_module()
    src, tgt = torch.randint(4, 11, (3, 5)), torch.randint(4, 11, (3, 6))
    module(src, tgt).square().sum().backward()
    params = [torch.nn.Parameter(p.detach().clone()) for p in module.parameters()]
    for copy, p in zip(params, module.parameters(), strict=True):
        copy.grad = p.grad.clone()
    true_norm = torch.nn.utils.clip_grad_norm_(params, 0.5)  # the reference clipping
    assert true_norm > 0.5  # so clipping changes the gradients
    module.on_before_optimizer_step(None)
    assert module._guard.norm.item() == pytest.approx(true_norm.item(), rel=1e-6)
    module.configure_gradient_clipping(None, 0.5, "norm")
    for p, clipped in zip(module.parameters(), params, strict=True):
        torch.testing.assert_close(p.grad, clipped.grad)


@pytest.mark.parametrize("chunk_rows", [None, 7])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_the_one_pass_loss_equals_torch_cross_entropy(monkeypatch, label_smoothing, chunk_rows):
    """loss and nll from one log-softmax equal F.cross_entropy's (smoothed and plain), values
    and gradients, pads ignored (no gradient), in one chunk of rows or in chunks of 7 (five and
    a remainder of 1); bf16 logits get a bf16 gradient within bf16 rounding of the fp32 one."""
    from attnlab.training import losses

    if chunk_rows:
        monkeypatch.setattr(losses, "CHUNK_ELEMENTS", chunk_rows * 50)
    torch.manual_seed(0)
    logits = torch.randn(4, 9, 50, requires_grad=True)
    targets = torch.randint(1, 50, (4, 9))
    targets[0, 5:] = 0
    loss, nll, n = losses.label_smoothed_nll(logits, targets, label_smoothing, 0)
    flat = (logits.reshape(-1, 50), targets.reshape(-1))
    ce = torch.nn.functional.cross_entropy
    ref = ce(*flat, ignore_index=0, label_smoothing=label_smoothing, reduction="sum") / 32
    ref_nll = ce(*flat, ignore_index=0, reduction="sum") / 32
    assert n == 32 and loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    total, count = losses.summed_nll(logits, targets, 0)  # evaluation's: the same nll, summed
    assert count == 32 and total.item() == pytest.approx(ref_nll.item() * 32, rel=1e-6)
    (grad,) = torch.autograd.grad(loss, logits)
    (ref_grad,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(grad, ref_grad)
    assert grad[0, 5:].abs().max() == 0  # pads get no gradient

    half = logits.detach().bfloat16().requires_grad_()
    (grad16,) = torch.autograd.grad(
        losses.label_smoothed_nll(half, targets, label_smoothing, 0)[0], half
    )
    assert grad16.dtype == torch.bfloat16
    torch.testing.assert_close(grad16.float(), grad, atol=2e-3, rtol=2e-2)


def test_the_loss_keeps_no_vocabulary_sized_float32_copy_for_backward():
    """What the loss saves for backward is the logits themselves plus O(rows), not an fp32
    (rows, V) log-probability tensor (3.5 GB on the base model at 25k tokens)."""
    from attnlab.training.losses import label_smoothed_nll

    logits = torch.randn(64, 1000, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(1, 1000, (64,))
    saved = {}

    def pack(t):
        saved[(t.data_ptr(), t.dtype, t.shape)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        label_smoothed_nll(logits, targets, 0.1, 0)[0].backward()
    logits_bytes = logits.numel() * logits.element_size()
    assert sum(saved.values()) <= logits_bytes + 64 * 64, saved


@pytest.mark.slow
def test_with_the_deferred_divergence_check_a_quiet_step_reads_nothing_back(
    compose, tmp_path, monkeypatch
):
    """module.divergence_check=logging_steps: between logging steps a training step reads no
    value back to the host (the finiteness flag goes to the fused optimizer instead)."""
    results, quiet = _quiet_step_reads(
        compose, tmp_path, monkeypatch, "module.divergence_check=logging_steps"
    )
    assert results["status"] == "completed"
    assert len(quiet) >= 10
    assert all(reads == [] for reads in quiet), quiet


def _nan_at_step(monkeypatch, bad_step: int) -> None:
    """The training loss (and so every gradient) NaN at global step `bad_step` only."""
    from attnlab.training.module import TransformerModule

    objective = TransformerModule._objective

    def poisoned(self, batch):
        loss, *rest = objective(self, batch)
        if self.trainer.global_step == bad_step:
            loss = loss * float("nan")
        return loss, *rest

    monkeypatch.setattr(TransformerModule, "_objective", poisoned)


@pytest.mark.slow
def test_both_divergence_checks_stop_at_the_same_step_with_the_same_weights(
    compose, tmp_path, monkeypatch
):
    """A NaN loss at step 5: every_step stops in that step; logging_steps skips its update on
    the device and stops at the next logging step (7: every 4th step). Both record step 5 as
    the divergence and end with the weights of step 4, so their final validations are equal."""
    _nan_at_step(monkeypatch, 5)
    runs = {}
    for check in ("every_step", "logging_steps"):
        run_dir = tmp_path / check
        ovs = ["debug=tiny", "logger=none", f"paths.run_dir={run_dir}", "trainer.max_steps=12",
               "trainer.log_every_n_steps=4", "trainer.val_check_interval=12",
               f"module.divergence_check={check}"]  # fmt: skip
        runs[check] = train(compose(ovs), ovs)
    every, deferred = runs["every_step"], runs["logging_steps"]
    assert every["status"] == deferred["status"] == "diverged"
    assert every["diverged_step"] == deferred["diverged_step"] == 5
    assert every["steps"] <= 6 and deferred["steps"] == 8  # steps 0-7 ran
    for key in ("val/loss", "val/nll", "val/token_acc"):  # the final validation's
        assert deferred["metrics"][key] == pytest.approx(every["metrics"][key], rel=1e-6), key


@pytest.mark.slow
def test_without_a_divergence_both_checks_train_the_same_run(compose, tmp_path):
    """The fused optimizer given found_inf = 0 every step makes the same updates."""
    runs = {}
    for check in ("every_step", "logging_steps"):
        ovs = ["debug=tiny", "logger=none", f"paths.run_dir={tmp_path / check}",
               "trainer.max_steps=8", "trainer.val_check_interval=8",
               f"module.divergence_check={check}"]  # fmt: skip
        runs[check] = train(compose(ovs), ovs)
    assert runs["every_step"]["status"] == runs["logging_steps"]["status"] == "completed"
    for key in ("train/loss", "val/loss", "test/loss", "test/token_acc"):
        assert runs["logging_steps"]["metrics"][key] == runs["every_step"]["metrics"][key], key


def test_value_clipping_clips_the_models_own_gradients():
    """trainer.gradient_clip_algorithm=value clips the model's gradients (under bf16-true the
    optimizer's parameters are float32 copies without gradients yet, so Lightning's own value
    clipping of the optimizer's parameters would clip nothing)."""
    module = _tiny_module()
    module(torch.randint(4, 11, (3, 5)), torch.randint(4, 11, (3, 6))).square().sum().backward()
    assert max(float(p.grad.abs().max()) for p in module.parameters()) > 0.01
    module.configure_gradient_clipping(None, 0.01, "value")
    assert max(float(p.grad.abs().max()) for p in module.parameters()) <= 0.01


def test_the_deferred_check_refuses_an_optimizer_torch_runs_unfused():
    from attnlab.training.gradients import unfused_problem

    param = [torch.nn.Parameter(torch.zeros(2))]
    assert unfused_problem(torch.optim.Adam(param, fused=True), "logging_steps") is None
    assert unfused_problem(torch.optim.Adam(param, foreach=False), "every_step") is None
    message = unfused_problem(torch.optim.Adam(param, foreach=False), "logging_steps")
    assert message.startswith("module.divergence_check=logging_steps needs a fused optimizer")


@pytest.mark.slow
def test_a_checkpoint_saved_after_a_deferred_divergence_records_it(compose, tmp_path, monkeypatch):
    """NaN at step 5, logging every 4th step, a checkpoint after step 6 (before the next
    logging step): the checkpoint reads the flag, so the run stops there as diverged at 5, the
    checkpoint says so, and a run resumed from it ends diverged at once."""
    _nan_at_step(monkeypatch, 5)
    run_dir = tmp_path / "run"
    ovs = ["debug=tiny", "logger=none", f"paths.run_dir={run_dir}", "trainer.max_steps=12",
           "trainer.log_every_n_steps=4", "trainer.val_check_interval=12",
           "checkpoint.every_n_steps=6", "module.divergence_check=logging_steps"]  # fmt: skip
    first = train(compose(ovs), ovs)
    assert first["status"] == "diverged" and first["diverged_step"] == 5
    assert first["steps"] == 6
    ckpt = torch.load(run_dir / "checkpoints" / "step=6.ckpt", weights_only=True)
    assert ckpt["attnlab_diverged_step"] == 5
    again = [*ovs, f"resume='{run_dir / 'checkpoints' / 'step=6.ckpt'}'"]
    resumed = train(compose(again), again)
    assert resumed["status"] == "diverged" and resumed["diverged_step"] == 5
    assert resumed["steps"] == 6
