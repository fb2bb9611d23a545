"""Translating a test set with a trained model and scoring it: BLEU and chrF (sacreBLEU on
detokenized text) and the perplexity of the references."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attnlab.data.text import collate_seq2seq
from attnlab.evaluation.checkpoints import EvalError
from attnlab.model.decoding import beam_search, greedy_decode, max_output_lengths
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


def translate(model, tokenizer, dataset, decode, batch_size: int, device, bos_id, eos_id):
    """Hypotheses in dataset order; batches are formed by source length for speed. `decode`
    holds beam_size (1: greedy), length_penalty, max_len_a and max_len_b."""
    order = sorted(range(len(dataset)), key=lambda i: dataset.src_lens[i])
    hyps: list[str] = [""] * len(dataset)
    progress = tqdm(total=len(order), desc="decoding", unit="sent", file=sys.stderr)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        src = collate_seq2seq([dataset[i] for i in idx])["src"].to(device)
        out = _decode_batch(model, src, decode, bos_id, eos_id)
        for i, text in zip(idx, tokenizer.decode_batch(out.tolist()), strict=True):
            hyps[i] = text
        progress.update(len(idx))
    progress.close()
    return hyps


def _decode_batch(model, src, d, bos_id: int, eos_id: int):
    if d.beam_size == 1:
        limits = max_output_lengths(src, model.config.pad_id, d.max_len_a, d.max_len_b)
        return greedy_decode(model, src, bos_id, eos_id, limits)
    return beam_search(
        model, src, bos_id, eos_id, d.beam_size, d.length_penalty, d.max_len_a, d.max_len_b
    )


@torch.no_grad()
def perplexity(model, dataset, device, batch_size: int) -> tuple[float, float]:
    """exp of the mean per-token NLL of the references (teacher forcing, EOS included)."""
    total, count = 0.0, 0
    for start in range(0, len(dataset), batch_size):
        batch = collate_seq2seq(
            [dataset[i] for i in range(start, min(len(dataset), start + batch_size))]
        )
        logits = model(batch["src"].to(device), batch["tgt_in"].to(device))
        target = batch["tgt_out"].to(device)
        total += F.cross_entropy(
            logits.flatten(0, 1).float(),
            target.flatten(),
            ignore_index=model.config.pad_id,
            reduction="sum",
        ).item()
        count += int(target.ne(model.config.pad_id).sum())
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
