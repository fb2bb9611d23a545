"""The LightningModule: one TransformerModule for every task (attnlab.tasks: sentence pairs for an
encoder-decoder, one token stream for a decoder-only model), which it asks how a batch becomes
the model's inputs and targets and how whole-sequence answers are predicted.

It trains with label-smoothed cross-entropy (Sec. 5.4) and the optimizer its `optim` partial
names (the paper's Adam, beta1=0.9, beta2=0.98, eps=1e-9, by default: conf/optim/) under a
learning-rate schedule stepped every optimizer step (Sec. 5.3), and logs

    train/  loss, nll, perplexity, token_acc, lr, tokens_per_sec (z_loss when loss.z_loss > 0)
            (every trainer.log_every_n_steps steps, and the last; tokens_per_sec over the steps
            since the previous value, validation excluded)
    val/ test/  loss, nll, perplexity, token_acc, exact_match                 (every evaluation)
    val/loss_best, val/nll_best, val/exact_match_best
    diag/   grad_norm and grad_norm/<layer> (each encoder and decoder layer's own, before
            clipping, with the train/ metrics: step 0's is at initialization); attn_logit_max,
            attn_logit_max/<attention module>, log_z (every validation, on a fixed probe batch:
            attnlab.training.diagnostics)

`loss` is the smoothed cross-entropy, `nll` the plain one, perplexity = exp(nll); neither includes
the z-loss, which the training objective adds (loss.z_loss). Select and compare on `nll`
(unsmoothed): a label-smoothing ablation ranked on `loss` is biased.
exact_match is from greedy decoding (not teacher forcing), compared up to and including EOS;
`exact_match=False` skips it (translation is measured by BLEU, training/translation_quality.py).
Under DDP the train/ metrics are over the global batch (all ranks); see `loss_normalize`.
"""

from __future__ import annotations

import functools
import time

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MaxMetric, MeanMetric, MinMetric

from attnlab.model import Transformer, TransformerConfig
from attnlab.problems import raise_first
from attnlab.tasks import task_named
from attnlab.tasks.base import Task
from attnlab.training.arguments import check_arguments
from attnlab.training.compat import as_today
from attnlab.training.diagnostics import layer_grad_norms, layer_parameters, probe
from attnlab.training.gradients import GradientGuard, unfused_problem
from attnlab.training.hooks import SkipEmptyHooks
from attnlab.training.losses import fused_output_nll, label_smoothed_nll, logits_for_loss, z_loss
from attnlab.training.master_weights import has_low_precision_weights, master_weights_optimizer
from attnlab.training.metrics import exact_match, perplexity, token_accuracy
from attnlab.training.optimizer import optimizer_from_config
from attnlab.training.schedules import lr_lambda, peak_of, schedule_from_config
from attnlab.training.specs import as_spec

_EVAL_METRICS = ("loss", "nll", "token_acc", "exact_match")


class TransformerModule(SkipEmptyHooks, L.LightningModule):
    """Training, evaluation and logging of a Transformer on the batches of `task`.

    model: the built Transformer, or its TransformerConfig fields (dict); optim, scheduler:
    partials of their classes, or their configs (`_target_` and arguments:
    attnlab.training.optimizer, .schedules); task: the data module's Task (attnlab.tasks), or
    its name ("seq2seq", "lm"; a checkpoint made before it was an argument has none:
    attnlab.training.compat); max_steps: the run's length (the cosine schedule's default horizon);
    exact_match: greedy-decode every evaluation batch for val/ and test/exact_match. The
    hyper-parameters keep the plain forms (training/specs.py), so checkpoints reload with
    `load_from_checkpoint` alone, under weights_only. compile: torch.compile the model's
    forward (training and teacher-forced evaluation; greedy decoding stays eager), checkpoints
    unchanged; True, or torch.compile's mode (training.options.COMPILE_MODES).
    divergence_check: how a non-finite gradient is found (training/gradients.py).

    loss_normalize: DDP averages the ranks' gradients. With "tokens" each rank's loss is the
    mean over its own target tokens, so the average equals the global token mean only when
    every rank holds as many tokens; with "tokens_global" (fairseq-style) each rank divides
    its summed token losses by the global token count N (one all_reduce) and multiplies by the
    world size W, so the averaged gradient is exactly that of the global batch's token mean,
    the same as one process would compute. With one process the two are the same.
    """

    def __init__(
        self,
        model: Transformer | dict,
        optim: functools.partial | dict,
        scheduler: functools.partial | dict,
        label_smoothing: float = 0.1,
        z_loss: float = 0.0,
        fused_output: bool = False,
        bos_id: int = 2,
        eos_id: int = 3,
        max_steps: int | None = None,
        loss_normalize: str = "tokens_global",
        exact_match: bool = True,
        compile: bool | str = False,
        task: Task | str | None = None,
        divergence_check: str = "every_step",
    ) -> None:
        super().__init__()
        check_arguments(
            optim, label_smoothing, z_loss, loss_normalize, fused_output, divergence_check, compile
        )
        if isinstance(model, Transformer):
            self.model, self.config = model, model.config
        else:  # a checkpoint's plain hyper-parameters, perhaps an older version's
            saved = as_today(dict(model=model, optim=optim, scheduler=scheduler, task=task), True)
            optim, scheduler, task = saved["optim"], saved["scheduler"], saved["task"]
            self.model = model_from_hparams(model)
            self.config = self.model.config
        if task is None:
            raise ValueError("TransformerModule needs a task; expected one of the data's tasks")
        self.task = task if isinstance(task, Task) else task_named(task)
        problem = self.task.arch_problem(self.config.arch)
        if problem:
            raise ValueError(problem)
        # What the checkpoint keeps: plain values that make the same module again (the built
        # model, task and partials by their configs); the full config is logged by train.py.
        self.save_hyperparameters(ignore=["model", "task"], logger=False)
        self.hparams.update(
            model=self.config.to_dict(),
            optim=as_spec(optim, "optim"),
            scheduler=as_spec(scheduler, "scheduler"),
            task=self.task.name,
        )
        try:  # the schedule checks its own arguments when built, with this run's d_model
            self.schedule()
        except TypeError as err:  # a key the schedule's class does not take
            target = as_spec(scheduler, "scheduler").get("_target_")
            raise ValueError(f"scheduler ({target}) is not valid: {err}") from None
        if compile:  # in place: self.model's parameters and state_dict keys stay as they are
            self.model.compile(mode=None if compile is True else compile)
        self.pad_id, self.bos_id, self.eos_id = self.config.pad_id, bos_id, eos_id
        self._add_metrics()
        self._add_step_state()

    def _add_step_state(self) -> None:
        """What the training step keeps between calls."""
        self.diverged = False
        self.diverged_step: int | None = None
        self._log_now = True  # is this a step whose train/ metrics go to the loggers?
        self._window_tokens: list[Tensor] = []  # target tokens of the steps since the last log
        self._window_start, self._paused = time.perf_counter(), 0.0  # its start, time in val
        self._validation_start = 0.0
        self._guard = GradientGuard(self.hparams.divergence_check)
        self._param_list: list[nn.Parameter] | None = None
        self._layer_list: list | None = None
        self._probe: dict | None = None  # the first validation batch: the diagnostics' input
        # The unsmoothed nll of the first training batch before any update (kept in
        # checkpoints): the loss at initialization, where an LR sensitivity caps a diverged run.
        self.nll_init: Tensor | None = None

    def _add_metrics(self) -> None:
        """The val/ and test/ means, and the best validation values (kept in checkpoints, so a
        resumed run keeps the best seen before)."""
        self.metrics = nn.ModuleDict(
            {
                split: nn.ModuleDict({name: MeanMetric() for name in _EVAL_METRICS})
                for split in ("val", "test")
            }
        )
        self.val_loss_best = MinMetric()
        self.val_nll_best = MinMetric()
        self.val_exact_match_best = MaxMetric()
        for best in (self.val_loss_best, self.val_nll_best, self.val_exact_match_best):
            best.persistent(True)

    # --- what the task defines ------------------------------------------------------------
    def forward(self, *inputs: Tensor) -> Tensor:
        return self.model(*inputs)

    def inputs_and_targets(self, batch: dict) -> tuple[tuple[Tensor, ...], Tensor]:
        """The model's inputs for teacher forcing, and the targets (B, T) (the task's)."""
        return self.task.inputs_and_targets(batch)

    def logits_and_targets(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits (B, T, V) and their targets (B, T)."""
        inputs, targets = self.inputs_and_targets(batch)
        return self.model(*inputs), targets

    def loss_logits_and_targets(self, batch: dict) -> tuple[Tensor, Tensor]:
        """What the loss and token accuracy need: the logits (N, V) at the N non-PAD targets
        and those targets (N,), or, compiled, every position (losses.logits_for_loss)."""
        inputs, targets = self.inputs_and_targets(batch)
        return logits_for_loss(self.model, inputs, targets, self.pad_id, self.hparams.compile)

    def predict_sequences(self, batch: dict) -> tuple[Tensor, Tensor] | None:
        """Greedy predictions (B, L) and references (B, T), both ending in EOS; None if the
        batch has no notion of a whole-sequence answer (the task's)."""
        return self.task.predict(self.model, batch, self.bos_id, self.eos_id, self.pad_id)

    # --- training -------------------------------------------------------------------------
    # The train/ metrics are computed and logged only on the steps Lightning writes to the
    # loggers (trainer.log_every_n_steps, and the last), values stay on the device in between;
    # the harness's one host sync of a step is the divergence guard's (training/gradients.py).
    def on_train_start(self) -> None:
        self._window_start = time.perf_counter()
        self._window_tokens, self._paused = [], 0.0
        if self.diverged:  # resumed from a checkpoint saved after a deferred divergence
            self.trainer.should_stop = True

    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        trainer = self.trainer
        last = 0 < trainer.max_steps <= trainer.global_step + 1
        # Lightning's own rule for the steps it writes to the loggers (a private attribute:
        # where a Lightning release lacks it, every step computes its metrics, as before).
        connector = getattr(trainer, "_logger_connector", None)
        self._log_now = getattr(connector, "should_update_logs", True) or last

    def _objective(self, batch: dict) -> tuple[Tensor, ...]:
        """(loss, nll, n_tokens, logits, targets, correct) of a training batch: correct None
        (token accuracy counts it from the logits when it is logged), or, with
        loss.fused_output, the output projection runs inside the loss
        (losses.fused_output_nll): no logits (None), and the loss counts the correct ones."""
        inputs, targets = self.inputs_and_targets(batch)
        fused, eps = self.hparams.get("fused_output", False), self.hparams.label_smoothing
        out, targets = logits_for_loss(
            self.model, inputs, targets, self.pad_id, self.hparams.compile, not fused
        )
        if fused:
            weight = self.model.generator.weight
            loss, nll, n_tokens, correct = fused_output_nll(out, weight, targets, eps, self.pad_id)
            return loss, nll, n_tokens, None, targets, correct
        return *label_smoothed_nll(out, targets, eps, self.pad_id), out, targets, None

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss, nll, n_tokens, logits, targets, correct = self._objective(batch)
        if self.nll_init is None and self.trainer.global_step == 0:
            self.nll_init = nll.detach()  # no host sync: read when the run ends
        self._window_tokens.append(n_tokens)
        if self._log_now:
            if correct is None:
                correct = token_accuracy(logits.detach(), targets, self.pad_id)[0]
            self._log_train_metrics(loss.detach(), nll, n_tokens, correct, targets)
        if self.hparams.z_loss:
            penalty, _ = z_loss(logits, targets, self.pad_id)
            if self._log_now:
                self.log("train/z_loss", penalty.detach() * self.hparams.z_loss, on_step=True)
            loss = loss + self.hparams.z_loss * penalty
        if self._grad_scaler() is not None and not torch.isfinite(loss):
            self._diverge()  # 16-mixed: inf gradients are the scaler's business, the loss ours
        world = self.trainer.world_size
        if world > 1 and self.hparams.loss_normalize == "tokens_global":
            g_tokens = self.trainer.strategy.reduce(n_tokens.float(), reduce_op="sum")
            loss = loss * (n_tokens * world / g_tokens.clamp(min=1))  # DDP's mean: sum / N
        return loss

    def _log_train_metrics(self, loss, nll, n_tokens, correct, targets) -> None:
        """train/ loss, nll, perplexity, token_acc and lr over the global batch (all DDP ranks
        sum their counts: one all_reduce, on logging steps only)."""
        sums = torch.stack([x.float() for x in (loss * n_tokens, nll * n_tokens, n_tokens)])
        sums = torch.cat([sums, torch.stack([correct, n_tokens]).float()])
        if self.trainer.world_size > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        loss_sum, nll_sum, g_tokens, g_correct, g_total = sums.unbind()
        g_n, bs = g_tokens.clamp(min=1), targets.size(0)  # rows, or tokens when (N,)
        # not prog_bar=True: Lightning would convert it to a float after every step (a host
        # sync on a GPU); the bar reads it when it draws (training/progress.py)
        self.log("train/loss", loss_sum / g_n, on_step=True, batch_size=bs)
        self.log("train/nll", nll_sum / g_n, on_step=True, batch_size=bs)
        self.log("train/perplexity", perplexity(nll_sum / g_n), on_step=True, batch_size=bs)
        self.log("train/token_acc", g_correct / g_total.clamp(min=1), on_step=True, batch_size=bs)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], on_step=True, batch_size=bs)

    def _grad_scaler(self):
        """16-mixed's GradScaler, or None."""
        return getattr(self.trainer.precision_plugin, "scaler", None)

    def _diverge(self, step: int | None = None) -> None:
        """A non-finite loss or gradient (at `step`, default this one): stop; status
        "diverged"."""
        if not self.diverged:  # the first divergence's step (trainer.min_steps may go on)
            self.diverged_step = int(self.trainer.global_step) if step is None else step
        self.diverged = True
        self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer) -> None:
        """The gradient norm before clipping (training/gradients.py): logged, reused by the
        clipping below, and the divergence guard's (module.divergence_check)."""
        scaled = self._grad_scaler() is not None
        step = int(self.trainer.global_step)
        if self._guard.inspect(self._params(), optimizer, step, scaled):
            self._diverge()
            return
        if self._log_now and self._guard.norm is not None:
            self.log("diag/grad_norm", self._guard.norm, on_step=True)
            self._layer_list = self._layer_list or layer_parameters(self.model)  # listed once
            for name, value in layer_grad_norms(self._layer_list).items():
                self.log(f"diag/grad_norm/{name}", value, on_step=True)

    def _check_deferred_divergence(self) -> None:
        """module.divergence_check=logging_steps: end the run at the first step whose gradient
        norm was non-finite (its update was skipped on the device), if there was one."""
        step = None if self.diverged else self._guard.diverged_at()
        if step is not None:
            self._diverge(step)

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """trainer.gradient_clip_val by norm, with the norm on_before_optimizer_step computed
        (the same clipping as torch.nn.utils.clip_grad_norm_, one norm per step instead of two)."""
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            if self._guard.clip(self._params(), gradient_clip_val):
                return
        if gradient_clip_val and gradient_clip_algorithm == "value":  # the model's own grads
            return torch.nn.utils.clip_grad_value_(self._params(), gradient_clip_val)
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _params(self) -> list[nn.Parameter]:
        """The model's parameters, listed once (walking the module tree cost 0.1 ms a call)."""
        if self._param_list is None:
            self._param_list = list(self.model.parameters())
        return self._param_list

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """train/tokens_per_sec: target tokens (global batch) over the wall time since the last
        logged value, validation excluded; logged with the other train/ metrics."""
        if not self._log_now:
            return
        self._check_deferred_divergence()  # a step that reads values back anyway
        if not self._window_tokens:
            return
        tokens = torch.stack(self._window_tokens).sum().float()
        if self.trainer.world_size > 1:
            tokens = self.trainer.strategy.reduce(tokens, reduce_op="sum")
        now = time.perf_counter()
        elapsed = now - self._window_start - self._paused
        self.log("train/tokens_per_sec", float(tokens) / max(elapsed, 1e-9), on_step=True)
        self._window_start, self._window_tokens, self._paused = now, [], 0.0

    def on_validation_start(self) -> None:
        self._validation_start = time.perf_counter()
        self._check_deferred_divergence()

    def on_train_end(self) -> None:
        self._check_deferred_divergence()

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self._paused += time.perf_counter() - self._validation_start

    # --- evaluation -----------------------------------------------------------------------
    def _eval_step(self, split: str, batch: dict) -> None:
        logits, targets = self.loss_logits_and_targets(batch)
        loss, nll, n_tokens = label_smoothed_nll(
            logits, targets, self.hparams.label_smoothing, self.pad_id
        )
        correct, total = token_accuracy(logits, targets, self.pad_id)
        m = self.metrics[split]
        m["loss"].update(loss, weight=n_tokens)
        m["nll"].update(nll, weight=n_tokens)
        m["token_acc"].update(correct / total.clamp(min=1), weight=total)
        predicted = self.predict_sequences(batch) if self.hparams.exact_match else None
        if predicted is not None:
            pred, ref = predicted
            m["exact_match"].update(exact_match(pred, ref, self.eos_id, self.pad_id).float())

    def _eval_epoch_end(self, split: str) -> dict[str, float]:
        values = {}
        for name, metric in self.metrics[split].items():
            if metric.update_count > 0:
                values[name] = metric.compute()
            metric.reset()
        if "nll" in values:
            values["perplexity"] = perplexity(values["nll"])
        # compute() already reduced over DDP ranks; sync_dist only states that (same values).
        for name, value in values.items():
            self.log(
                f"{split}/{name}", value, prog_bar=name in ("loss", "exact_match"), sync_dist=True
            )
        return values

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        if batch_idx == 0 and self._probe is None:  # the same batch at every validation
            self._probe = {k: v.clone() if isinstance(v, Tensor) else v for k, v in batch.items()}
        self._eval_step("val", batch)

    def _log_diagnostics(self) -> None:
        """diag/ attn_logit_max (per attention module and overall) and log_z on the probe
        batch (attnlab.training.diagnostics). Under DDP, rank zero's probe is the one logged."""
        if self._probe is None:
            return
        inputs, targets = self.inputs_and_targets(self._probe)
        values = probe(self.model, lambda: self.model(*inputs), targets, self.pad_id)
        for name, value in values.items():
            self.log(f"diag/{name}", value, rank_zero_only=True)

    def on_validation_epoch_end(self) -> None:
        values = self._eval_epoch_end("val")
        if self.trainer.sanity_checking or "loss" not in values:
            return
        self._log_diagnostics()
        self.val_loss_best.update(values["loss"])
        self.log("val/loss_best", self.val_loss_best.compute(), sync_dist=True)
        self.val_nll_best.update(values["nll"])
        self.log("val/nll_best", self.val_nll_best.compute(), sync_dist=True)
        if "exact_match" in values:
            self.val_exact_match_best.update(values["exact_match"])
            self.log("val/exact_match_best", self.val_exact_match_best.compute(), sync_dist=True)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.nll_init is not None:
            checkpoint["attnlab_nll_init"] = float(self.nll_init)
        self._check_deferred_divergence()  # a checkpoint of skipped updates says so
        if self.diverged:
            checkpoint["attnlab_diverged_step"] = self.diverged_step

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "attnlab_nll_init" in checkpoint:
            self.nll_init = torch.tensor(checkpoint["attnlab_nll_init"])
        if "attnlab_diverged_step" in checkpoint:
            self.diverged, self.diverged_step = True, checkpoint["attnlab_diverged_step"]

    # --- optimization ---------------------------------------------------------------------
    def schedule(self):
        """The learning-rate schedule, step (from 1) -> lr, of cfg.scheduler."""
        h = self.hparams
        return schedule_from_config(h.scheduler, self.config.d_model, h.max_steps)

    def peak_lr(self) -> float:
        """The largest learning rate the schedule takes (scheduler.peak_lr, or noam's own)."""
        return peak_of(self.schedule(), int(self.hparams.scheduler.get("warmup_steps", 0)))

    def configure_optimizers(self):
        """cfg.optim and cfg.scheduler instantiated (partials of their `_target_`, completed
        here): the optimizer class of optim._target_ with lr=1.0 and a LambdaLR whose factor is
        the scheduled lr; weight decay on matrices and embeddings only
        (attnlab.training.optimizer); over float32 master weights where the model's are bf16
        (trainer.precision=bf16-true: attnlab.training.master_weights)."""
        o = self.hparams.optim
        scaled = self._trainer is not None and self._grad_scaler() is not None
        if has_low_precision_weights(self.model):  # bf16-true: float32 master weights
            optimizer = master_weights_optimizer(self.model, o)
        else:
            optimizer = optimizer_from_config(self.model, o, grad_scaler=scaled)
        raise_first([unfused_problem(optimizer, self.hparams.divergence_check)])
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(self.schedule()))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


def model_from_hparams(model: dict) -> Transformer:
    """The Transformer a checkpoint's hyper_parameters["model"] describe (TransformerConfig's
    fields, as `to_dict` wrote them): the one place a saved config becomes a model."""
    return Transformer(TransformerConfig(**model))
