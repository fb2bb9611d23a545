"""Length extrapolation: a model scored one length at a time, beyond the lengths it trained on.

Synthetic tasks (copy, reverse, sort): for each length L of `data.eval_lengths`, fixed examples
whose inputs are all exactly L symbols long (`SyntheticDataModule.length_batches`) give
- free-running (greedy decoding: the model reads its own outputs) `greedy_exact_match`, the whole
  answer up to and including EOS, and `greedy_token_acc`, the answer's tokens right at their
  position;
- teacher-forced (the model reads the reference prefix) `teacher_forced_token_acc` and `nll`,
  unsmoothed. A teacher-forced accuracy can be high where the free-running one is near 0: one
  wrong token derails everything generated after it, but never the next teacher-forced guess.
Language models: for each context length L, the test text in non-overlapping blocks of L tokens
(`LMTextDataModule.context_batches`) gives nll, perplexity and teacher_forced_token_acc (next
token), every token predicted once (Press et al., 2022, "nonoverlapping" evaluation).

A length the model cannot represent (learned positions: more positions than model.max_len) has
null metrics and a `reason`, not a crash. `LengthExtrapolation` runs this at the end of training
(after the test, on the tested weights) into results.json's "extrapolation"; attnlab-eval runs
`evaluate_lengths` on any checkpoint.
"""

from __future__ import annotations

import lightning as L
import torch

from attnlab.training.hooks import SkipEmptyHooks
from attnlab.training.losses import summed_nll
from attnlab.training.metrics import (
    exact_match,
    greedy_token_accuracy,
    perplexity,
    token_accuracy,
)

SEQ_METRICS = ("greedy_exact_match", "greedy_token_acc", "teacher_forced_token_acc", "nll")
LM_METRICS = ("perplexity", "nll", "teacher_forced_token_acc")


def metric_names(datamodule) -> tuple[str, ...]:
    """The per-length metrics of this data: whole answers for synthetic tasks, else perplexity."""
    return SEQ_METRICS if hasattr(datamodule, "length_batches") else LM_METRICS


def unrepresentable(model_config, datamodule, length: int) -> str | None:
    """Why the model cannot read inputs of `length` (its positional encoding's limit: learned
    positions, model.max_len), or None when it can."""
    from attnlab.model.positions import encoding_class

    needed = datamodule.positions_needed(length)
    limit = encoding_class(model_config.pos_encoding).limit(model_config)
    if limit is not None and needed > limit:
        return (
            f"{model_config.pos_encoding} positions: length {length} needs {needed} positions, "
            f"model.max_len={limit}"
        )
    return None


@torch.no_grad()
def evaluate_lengths(
    module, datamodule, lengths, n_examples: int, progress: bool = False
) -> dict[str, dict]:
    """{"<length>": {metric: value, ...}} for each length, in the given order; `module` is a
    TransformerModule (its model, logits_and_targets, predict_sequences) and `datamodule` a
    synthetic or language-model DataModule. n_examples: per length (synthetic tasks).
    progress: a progress bar over the lengths on stderr (attnlab-eval; off where not a TTY)."""
    from tqdm import tqdm

    was_training = module.training
    module.eval()
    names = metric_names(datamodule)
    out = {}
    bar = tqdm(lengths, desc="lengths", unit="length", disable=None if progress else True)
    try:
        for length in bar:
            bar.set_postfix_str(f"length {length}")
            reason = unrepresentable(module.model.config, datamodule, length)
            if reason:
                out[str(length)] = {**dict.fromkeys(names), "reason": reason}
                continue
            if hasattr(datamodule, "length_batches"):
                batches = datamodule.length_batches(length, n_examples)
            else:
                batches = datamodule.context_batches(length)
            out[str(length)] = _score(module, batches, names)
    finally:
        bar.close()
        module.train(was_training)
    return out


def _score(module, batches, names) -> dict[str, float | None]:
    """Token-weighted nll and token accuracies, sequence-averaged exact match, over the batches."""
    nll_sum = correct = tokens = matches = sequences = greedy_correct = greedy_tokens = 0.0
    for batch in batches:
        batch = {k: v.to(module.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        logits, targets = module.logits_and_targets(batch)
        nll_sum += summed_nll(logits, targets, module.pad_id)[0].item()
        c, n = token_accuracy(logits, targets, module.pad_id)
        correct, tokens = correct + c.item(), tokens + n.item()
        if "greedy_exact_match" in names:
            pred, ref = module.predict_sequences(batch)
            matches += exact_match(pred, ref, module.eos_id, module.pad_id).sum().item()
            sequences += targets.size(0)
            c, n = greedy_token_accuracy(pred, ref, module.eos_id, module.pad_id)
            greedy_correct, greedy_tokens = greedy_correct + c.item(), greedy_tokens + n.item()
    nll = nll_sum / max(tokens, 1)
    values = {"nll": nll, "teacher_forced_token_acc": correct / max(tokens, 1)}
    values["perplexity"] = perplexity(nll)
    values["greedy_exact_match"] = matches / max(sequences, 1)
    values["greedy_token_acc"] = greedy_correct / max(greedy_tokens, 1)
    return {name: values[name] for name in names}


class LengthExtrapolation(SkipEmptyHooks, L.Callback):
    """After the test (on the weights tested: the best checkpoint), score every length of
    `trainer.datamodule.eval_lengths` (nothing when the data has none); the result goes to
    results.json as "extrapolation" (`results_record`) and to W&B as a table and a line plot
    per metric. n_examples: per length, for synthetic tasks (null: the data's val_size)."""

    def __init__(self, n_examples: int | None = None) -> None:
        self.n_examples = n_examples
        self.results: dict[str, dict] | None = None

    def on_test_end(self, trainer, pl_module) -> None:
        datamodule = trainer.datamodule
        lengths = list(getattr(datamodule, "eval_lengths", None) or [])
        if not lengths or not trainer.is_global_zero:
            return
        sizes = getattr(datamodule, "sizes", {})
        n = self.n_examples or sizes.get("val", 512)
        self.results = evaluate_lengths(pl_module, datamodule, lengths, n)
        log_to_wandb(trainer.loggers, self.results, metric_names(datamodule))

    def results_record(self) -> dict:
        """The entries this callback adds to results.json."""
        return {"extrapolation": self.results} if self.results is not None else {}


def table_rows(results: dict[str, dict], names) -> list[list]:
    """[length, metric values...] per length, lengths ascending."""
    return [[int(k), *(v.get(m) for m in names)] for k, v in sorted(results.items(), key=_len)]


def _len(item) -> int:
    return int(item[0])


def log_to_wandb(loggers, results: dict[str, dict], names) -> None:
    """A table (length x metrics) and one line plot per metric against length, for every W&B
    logger among `loggers`."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if not isinstance(logger, WandbLogger):
            continue
        import wandb

        columns = ["length", *names]
        table = wandb.Table(columns=columns, data=table_rows(results, names))
        plots = {
            f"extrapolation/{m}_vs_length": wandb.plot.line(
                table, "length", m, title=f"{m} against length"
            )
            for m in names
        }
        logger.experiment.log({"extrapolation/table": table, **plots})
