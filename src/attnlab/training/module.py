"""LightningModules: encoder-decoder (Seq2SeqModule) and decoder-only (LanguageModelModule).

Both train with label-smoothed cross-entropy (Sec. 5.4) and Adam with beta1=0.9, beta2=0.98,
eps=1e-9 under a learning-rate schedule stepped every optimizer step (Sec. 5.3), and log

    train/  loss, nll, perplexity, token_acc, lr, grad_norm, tokens_per_sec   (every step)
    val/ test/  loss, nll, perplexity, token_acc, exact_match                 (every evaluation)
    val/loss_best, val/nll_best, val/exact_match_best

`loss` is the smoothed objective, `nll` the plain cross-entropy, perplexity = exp(nll). Select and
compare on `nll` (unsmoothed): a label-smoothing ablation ranked on `loss` is biased.
exact_match is from greedy decoding (not teacher forcing), compared up to and including EOS;
`exact_match=False` skips it (translation is measured by BLEU, training/translation_quality.py).
Under DDP the train/ metrics are over the global batch (all ranks); see `loss_normalize`.
"""

from __future__ import annotations

import time

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MaxMetric, MeanMetric, MinMetric

from attnlab.model import Transformer, TransformerConfig
from attnlab.training.losses import LOSS_NORMALIZATIONS, label_smoothed_nll
from attnlab.training.metrics import exact_match, token_accuracy
from attnlab.training.schedules import lr_lambda, schedule_from_config

_EVAL_METRICS = ("loss", "nll", "token_acc", "exact_match")


class TransformerModule(L.LightningModule):
    """Shared training logic; subclasses say how a batch becomes logits / targets / predictions.

    model: TransformerConfig fields (dict); optim: {name, lr, betas, eps, weight_decay};
    scheduler: {name, warmup_steps, scale, min_lr, max_steps, peak_lr}; max_steps: the run's length
    (the cosine schedule's default horizon); exact_match: greedy-decode every evaluation
    batch for val/ and test/exact_match. Plain dicts, so checkpoints reload with
    `load_from_checkpoint` alone.

    loss_normalize: DDP averages the ranks' gradients. With "tokens" each rank's loss is the
    mean over its own target tokens, so the average equals the global token mean only when
    every rank holds as many tokens; with "tokens_global" (fairseq-style) each rank divides
    its summed token losses by the global token count N (one all_reduce) and multiplies by the
    world size W, so the averaged gradient is exactly that of the global batch's token mean,
    the same as one process would compute. With one process the two are the same.
    """

    def __init__(
        self,
        model: dict,
        optim: dict,
        scheduler: dict,
        label_smoothing: float = 0.1,
        bos_id: int = 2,
        eos_id: int = 3,
        max_steps: int | None = None,
        loss_normalize: str = "tokens_global",
        exact_match: bool = True,
    ) -> None:
        super().__init__()
        if loss_normalize not in LOSS_NORMALIZATIONS:
            raise ValueError(
                f"loss.normalize={loss_normalize!r} is not valid; "
                f"expected one of: {', '.join(LOSS_NORMALIZATIONS)}"
            )
        self.save_hyperparameters(logger=False)  # the full config is logged by train.py
        self.config = TransformerConfig(**model)
        self.model = Transformer(self.config)
        self.pad_id, self.bos_id, self.eos_id = self.config.pad_id, bos_id, eos_id
        self.metrics = nn.ModuleDict(
            {
                split: nn.ModuleDict({name: MeanMetric() for name in _EVAL_METRICS})
                for split in ("val", "test")
            }
        )
        # Best values persist in checkpoints, so a resumed run keeps the best seen before.
        self.val_loss_best = MinMetric()
        self.val_nll_best = MinMetric()
        self.val_exact_match_best = MaxMetric()
        for best in (self.val_loss_best, self.val_nll_best, self.val_exact_match_best):
            best.persistent(True)
        self.diverged = False
        self.diverged_step: int | None = None
        self._n_tokens = 0  # non-PAD targets of the current training batch
        self._last_step_time: float | None = None

    # --- what subclasses define -----------------------------------------------------------
    def logits_and_targets(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits (B, T, V) and their targets (B, T)."""
        raise NotImplementedError

    def predict_sequences(self, batch: dict) -> tuple[Tensor, Tensor] | None:
        """Greedy predictions (B, L) and references (B, T), both ending in EOS; None if the
        batch has no notion of a whole-sequence answer."""
        raise NotImplementedError

    # --- training -------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor | None:
        logits, targets = self.logits_and_targets(batch)
        loss, nll, n_tokens = label_smoothed_nll(
            logits, targets, self.hparams.label_smoothing, self.pad_id
        )
        correct, total = token_accuracy(logits.detach(), targets, self.pad_id)
        # Sums over the global batch: all DDP ranks take part, so they agree on divergence.
        stats = (loss.detach() * n_tokens, nll * n_tokens, n_tokens, correct, total)
        sums = torch.stack([x.float() for x in stats])
        world = self.trainer.world_size
        if world > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        loss_sum, nll_sum, g_tokens, g_correct, g_total = sums.unbind()
        if not torch.isfinite(loss_sum):
            self._diverge()
            return None  # skip this update; the run ends with status "diverged"
        g_n = g_tokens.clamp(min=1)
        if world > 1 and self.hparams.loss_normalize == "tokens_global":
            loss = loss * (n_tokens * world / g_n)  # DDP's mean over ranks: sum / N
        bs = targets.size(0)
        self.log("train/loss", loss_sum / g_n, on_step=True, prog_bar=True, batch_size=bs)
        self.log("train/nll", nll_sum / g_n, on_step=True, batch_size=bs)
        self.log("train/perplexity", torch.exp(nll_sum / g_n), on_step=True, batch_size=bs)
        self.log("train/token_acc", g_correct / g_total.clamp(min=1), on_step=True, batch_size=bs)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], on_step=True, batch_size=bs)
        self._n_tokens = int(g_tokens)  # tokens_per_sec counts the global batch
        return loss

    def _diverge(self) -> None:
        """A non-finite loss or gradient: stop within this step; status "diverged"."""
        self.diverged = True
        self.diverged_step = int(self.trainer.global_step)
        self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer) -> None:
        """Log the gradient norm before clipping (Lightning clips after this hook). A
        non-finite norm drops the gradients (Adam skips parameters without one) and stops."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
            if not torch.isfinite(norm):
                for p in self.parameters():
                    p.grad = None
                self._diverge()
                return
            self.log("train/grad_norm", norm, on_step=True)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """Target tokens per second, over the wall time from the previous step's end."""
        now = time.perf_counter()
        if self._last_step_time is not None and self._n_tokens:
            self.log("train/tokens_per_sec", self._n_tokens / (now - self._last_step_time))
        self._last_step_time = now

    # --- evaluation -----------------------------------------------------------------------
    def _eval_step(self, split: str, batch: dict) -> None:
        logits, targets = self.logits_and_targets(batch)
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
            values["perplexity"] = torch.exp(values["nll"].clamp(max=50.0))
        # compute() already reduced over DDP ranks; sync_dist only states that (same values).
        for name, value in values.items():
            self.log(
                f"{split}/{name}", value, prog_bar=name in ("loss", "exact_match"), sync_dist=True
            )
        return values

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        values = self._eval_epoch_end("val")
        if self.trainer.sanity_checking or "loss" not in values:
            return
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

    # --- optimization ---------------------------------------------------------------------
    def configure_optimizers(self):
        """Adam (or AdamW) with lr=1.0 and a LambdaLR whose factor is the scheduled lr."""
        o, s = self.hparams.optim, self.hparams.scheduler
        optimizer_cls = torch.optim.AdamW if o["name"] == "adamw" else torch.optim.Adam
        optimizer = optimizer_cls(
            self.parameters(),
            lr=1.0,
            betas=tuple(o["betas"]),
            eps=o["eps"],
            weight_decay=o["weight_decay"],
        )
        schedule = schedule_from_config(o, s, self.config.d_model, self.hparams.max_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(schedule))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


class Seq2SeqModule(TransformerModule):
    """Encoder-decoder on batches {src, tgt_in, tgt_out}."""

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.model(src, tgt_in)

    def logits_and_targets(self, batch: dict) -> tuple[Tensor, Tensor]:
        return self.model(batch["src"], batch["tgt_in"]), batch["tgt_out"]

    def predict_sequences(self, batch: dict) -> tuple[Tensor, Tensor]:
        from attnlab.model.decoding import greedy_decode

        tgt_out = batch["tgt_out"]
        # One step beyond the target: greedy_decode forces EOS at its limit, and the model
        # should emit EOS by itself to match.
        max_len = tgt_out.size(1) + 1
        pred = greedy_decode(self.model, batch["src"], self.bos_id, self.eos_id, max_len)
        return pred, tgt_out


class LanguageModelModule(TransformerModule):
    """Decoder-only on batches {tokens, targets}. With `prompt_len` (B,) in the batch (the
    synthetic tasks), exact_match greedily continues tokens[:prompt_len] and compares the
    continuation with the targets from there on."""

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)

    def logits_and_targets(self, batch: dict) -> tuple[Tensor, Tensor]:
        return self.model(batch["tokens"]), batch["targets"]

    def predict_sequences(self, batch: dict) -> tuple[Tensor, Tensor] | None:
        from attnlab.model.decoding import generate

        if "prompt_len" not in batch:
            return None
        tokens, targets, prompt_len = batch["tokens"], batch["targets"], batch["prompt_len"]
        preds = torch.full_like(targets, self.pad_id)
        refs = torch.full_like(targets, self.pad_id)
        for p in prompt_len.unique().tolist():  # prompts of one length form one batch
            rows = (prompt_len == p).nonzero(as_tuple=True)[0]
            ref = targets[rows, p - 1 :]  # tokens[p - 1] (the separator) predicts the answer
            n_new = int((ref != self.pad_id).sum(dim=1).max())
            out = generate(self.model, tokens[rows, :p], max_new_tokens=n_new, eos_id=self.eos_id)
            new = out[:, p:]  # at most n_new <= width - p + 1 tokens
            preds[rows, : new.size(1)] = new
            refs[rows, : ref.size(1)] = ref
        return preds, refs


def module_for(task: str) -> type[TransformerModule]:
    """The LightningModule class for a data module's `task` ("seq2seq" or "lm")."""
    modules = {"seq2seq": Seq2SeqModule, "lm": LanguageModelModule}
    if task not in modules:
        raise ValueError(f"data task {task!r} is not valid; expected one of: seq2seq, lm")
    return modules[task]
