"""BLEU and chrF during training: a Lightning callback that beam-decodes and scores with sacreBLEU.

Scores are on detokenized text (the SentencePiece decode of the hypothesis against the raw
reference line), with sacreBLEU's standard 13a tokenization, as the sacreBLEU paper recommends:
these are the numbers comparable across papers. chrF is sacreBLEU's chrF (character 6-grams,
beta 2, no word n-grams; `SacreCHRF`), equal to `sacrebleu.corpus_chrf`; torchmetrics' CHRFScore
defaults to chrF++ (word 2-grams) and averages differently, matching neither.

On validation only about `val_subset` sentences are decoded, every `every_n_val` validations
(beam search is slow): every k-th sentence of the validation loader, which serves sentences
sorted by length, so the subset spans all lengths (the same sentences at every validation); on
test, all of them.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torchmetrics import Metric
from torchmetrics.text import SacreBLEUScore

from attnlab.tasks.base import Decoding
from attnlab.training.hooks import SkipEmptyHooks


class SacreCHRF(Metric):
    """sacreBLEU's corpus chrF (word_order=0) or chrF++ (word_order=2), as a torchmetrics Metric:
    it sums sacreBLEU's own per-sentence statistics (synced over DDP ranks) and scores them with
    sacreBLEU, so the result equals `sacrebleu.corpus_chrf(hyps, [refs], word_order=...)`."""

    full_state_update = False

    def __init__(self, word_order: int = 0) -> None:
        super().__init__()
        from sacrebleu.metrics import CHRF

        self.scorer = CHRF(word_order=word_order)
        n_stats = 3 * (self.scorer.char_order + self.scorer.word_order)
        self.add_state("stats", torch.zeros(n_stats, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, hyps: list[str], refs: list[list[str]]) -> None:
        """refs: one list of references per hypothesis (torchmetrics' layout)."""
        streams = [list(r) for r in zip(*refs, strict=True)]  # sacreBLEU: one list per reference
        sentence_stats = self.scorer._extract_corpus_statistics(hyps, streams)
        total = torch.tensor(sentence_stats, dtype=torch.float64).sum(dim=0)
        self.stats += total.to(self.stats.device)

    def compute(self) -> torch.Tensor:
        """chrF in [0, 1] (sacreBLEU's score / 100, as torchmetrics' text metrics)."""
        stats = [int(round(x)) for x in self.stats.tolist()]
        score = self.scorer._compute_score_from_stats(stats).score
        return torch.tensor(score / 100, dtype=torch.float64)


class TranslationQuality(SkipEmptyHooks, L.Callback):
    def __init__(
        self,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        val_subset: int = 200,
        every_n_val: int = 1,
        n_samples: int = 8,
    ):
        super().__init__()
        self.decode = dict(
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
        )
        self.val_subset = val_subset
        self.every_n_val = max(1, every_n_val)
        self.n_samples = n_samples
        self.bleu = SacreBLEUScore(tokenize="13a")
        self.chrf = SacreCHRF()
        self.bleu_best: float | None = None
        self._n_val = 0
        self._seen = 0  # sentences scored in this epoch
        self._position = 0  # sentences served by the loader in this epoch
        self._stride = 1  # score every _stride-th of them
        self._active = False
        self._samples: list[tuple[str, str, str]] = []

    # --- shared -------------------------------------------------------------------------
    def _start(self, pl_module: L.LightningModule, active: bool, n_sentences: int | None) -> None:
        """Reset for an epoch of `n_sentences` (None: unknown); with a val_subset, score every
        k-th sentence so that about val_subset of them are scored."""
        for metric in (self.bleu, self.chrf):
            metric.to(pl_module.device)
        self.bleu.reset()
        self.chrf.reset()
        self._seen = self._position = 0
        self._stride = 1
        if n_sentences and self.val_subset and active:
            self._stride = max(1, math.ceil(n_sentences / self.val_subset))
        self._samples = []
        self._active = active

    def _score_batch(self, trainer, pl_module, batch: dict, limit: int | None) -> None:
        if not self._active or "tgt_text" not in batch:
            return
        n = len(batch["tgt_text"])
        first, self._position = self._position, self._position + n
        keep = [i for i in range(n) if (first + i) % self._stride == 0]
        if limit is not None:
            keep = keep[: max(0, limit - self._seen)]
        if not keep:
            return
        if len(keep) < n:
            batch = _rows(batch, keep)
        refs, srcs = list(batch["tgt_text"]), list(batch.get("src_text") or [""] * len(keep))
        decode = Decoding(**self.decode)
        out = pl_module.task.translate(
            pl_module.model, batch, pl_module.bos_id, pl_module.eos_id, decode
        )
        hyps = trainer.datamodule.tokenizer.decode_batch(out.tolist())
        self.bleu.update(hyps, [[r] for r in refs])
        self.chrf.update(hyps, [[r] for r in refs])
        self._seen += len(hyps)
        room = self.n_samples - len(self._samples)
        if room > 0:
            self._samples += list(zip(srcs, refs, hyps, strict=True))[:room]

    def _finish(self, trainer, pl_module, split: str) -> None:
        if not self._active or self._seen == 0:
            return
        bleu = float(self.bleu.compute()) * 100  # synced across ranks by torchmetrics
        pl_module.log(f"{split}/bleu", bleu)
        pl_module.log(f"{split}/chrf", float(self.chrf.compute()) * 100)
        if split == "val":
            self.bleu_best = bleu if self.bleu_best is None else max(self.bleu_best, bleu)
            pl_module.log("val/bleu_best", self.bleu_best)
        self._log_samples(trainer, split)

    def _log_samples(self, trainer, split: str) -> None:
        for logger in trainer.loggers:
            if hasattr(logger, "log_table") and self._samples:
                logger.log_table(
                    key=f"{split}/samples",
                    columns=["source", "reference", "hypothesis"],
                    data=[list(s) for s in self._samples],
                    step=trainer.global_step,
                )

    # --- validation ---------------------------------------------------------------------
    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            self._active = False
            return
        self._n_val += 1
        active = (self._n_val - 1) % self.every_n_val == 0
        self._start(pl_module, active, _n_sentences(trainer.val_dataloaders))

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *_) -> None:
        with torch.no_grad():
            self._score_batch(trainer, pl_module, batch, limit=self.val_subset)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._finish(trainer, pl_module, "val")

    # --- test ---------------------------------------------------------------------------
    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._start(pl_module, active=True, n_sentences=None)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *_) -> None:
        with torch.no_grad():
            self._score_batch(trainer, pl_module, batch, limit=None)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._finish(trainer, pl_module, "test")

    # --- resumption ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"n_val": self._n_val, "bleu_best": self.bleu_best}

    def load_state_dict(self, state_dict: dict) -> None:
        self._n_val = state_dict.get("n_val", 0)
        self.bleu_best = state_dict.get("bleu_best")


def _n_sentences(loader) -> int | None:
    """Sentences a (single) evaluation loader serves on this rank, if its batch sampler says."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is None or isinstance(loader, list | tuple):
        return None
    try:
        return sum(len(batch) for batch in batch_sampler)
    except TypeError:
        return None


def _rows(batch: dict, keep: list[int]) -> dict:
    """The examples `keep` of a batch: its tensors' rows and its lists' items."""
    index = torch.tensor(keep)
    return {
        key: value[index.to(value.device)] if torch.is_tensor(value) else [value[i] for i in keep]
        for key, value in batch.items()
    }
