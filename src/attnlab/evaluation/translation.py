"""Translating a test set with a trained model and scoring it: BLEU and chrF (sacreBLEU on
detokenized text) and the perplexity of the references."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tqdm import tqdm

from attnlab.data.pairs import pair_collate
from attnlab.evaluation.checkpoints import EvalError
from attnlab.tasks.base import Decoding
from attnlab.training.losses import summed_nll
from attnlab.training.metrics import perplexity as perplexity_of


def split_files(run_dir: Path, split: str, data_overrides: dict) -> tuple[Path, Path]:
    """The source/reference files of `split`, from the run's own data config."""
    from attnlab.evaluation.checkpoints import run_datamodule

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise EvalError(f"{cfg_path} not found: give src_file and ref_file instead of split")
    datamodule = run_datamodule(run_dir, data_overrides)
    if not hasattr(datamodule, "split_files"):
        raise EvalError(f"data {type(datamodule).__name__} has no text splits to translate")
    try:
        return datamodule.split_files(split)
    except (KeyError, ValueError) as err:
        raise EvalError(str(err).strip("'")) from None


def pair_reader(model, tokenizer, hparams: dict):
    """(the checkpoint's task, the collate of pairs for its model): sentence pairs for an
    encoder-decoder, one sequence per pair for a decoder-only model (attnlab.data.pairs)."""
    from attnlab.tasks import task_named

    arch = model.config.arch
    task = task_named(hparams["task"])  # (attnlab.training.compat fills an old one's)
    return task, pair_collate(arch, tokenizer.vocab_size)


def translate(model, task, collate, tokenizer, dataset, decode, batch_size: int, device, bos, eos):
    """Hypotheses in dataset order; batches are formed by source length for speed. `decode`
    holds beam_size (1: greedy), length_penalty, max_len_a and max_len_b; `task` decodes
    (attnlab.tasks) the batches `collate` makes."""
    order = sorted(range(len(dataset)), key=lambda i: dataset.src_lens[i])
    d = Decoding(decode.beam_size, decode.length_penalty, decode.max_len_a, decode.max_len_b)
    hyps: list[str] = [""] * len(dataset)
    progress = tqdm(total=len(order), desc="decoding", unit="sent", file=sys.stderr)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = _to(collate([dataset[i] for i in idx]), device)
        out = task.translate(model, batch, bos, eos, d)
        for i, text in zip(idx, tokenizer.decode_batch(out.tolist()), strict=True):
            hyps[i] = text
        progress.update(len(idx))
    progress.close()
    return hyps


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


@torch.no_grad()
def perplexity(model, task, collate, dataset, device, batch_size: int) -> tuple[float, float]:
    """exp of the mean per-token NLL of the references (teacher forcing, EOS included)."""
    total, count = 0.0, 0
    pad_id = model.config.pad_id
    for start in range(0, len(dataset), batch_size):
        examples = [dataset[i] for i in range(start, min(len(dataset), start + batch_size))]
        inputs, target = task.inputs_and_targets(_to(collate(examples), device))
        logits = model(*inputs)
        nll_sum, n_tokens = summed_nll(logits, target, pad_id)
        total, count = total + nll_sum.item(), count + int(n_tokens)
    nll = total / max(count, 1)
    return perplexity_of(nll), nll


def sacrebleu_scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """sacreBLEU's BLEU (13a), chrF and chrF++ (word 2-grams) of detokenized hypotheses."""
    import sacrebleu

    return {
        "bleu": sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score,
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
        "chrf++": sacrebleu.corpus_chrf(hyps, [refs], word_order=2).score,
    }
