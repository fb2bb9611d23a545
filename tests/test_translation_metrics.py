"""chrF is sacreBLEU's chrF: the training callback's metric and attnlab-eval equal
`sacrebleu.corpus_chrf` on the same hypotheses (torchmetrics' default CHRFScore does not)."""

from __future__ import annotations

import random

import pytest
import sacrebleu
from torchmetrics.text import CHRFScore

from attnlab.training.translation_quality import SacreCHRF

REFS = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest ein Buch, während sie auf den Bus wartet.",
    "Kinder laufen am Strand entlang.",
    "Ein alter Mann sitzt auf einer Bank im Park.",
    "Die Musiker spielen auf der Straße.",
]


def _hypotheses() -> list[str]:
    rng = random.Random(0)
    hyps = []
    for ref in REFS:
        words = ref.split()
        rng.shuffle(words)
        hyps.append(" ".join(words[: rng.randint(1, len(words))] + ["und"]))
    hyps[2] = ""  # an empty hypothesis counts too
    return hyps


@pytest.mark.parametrize("word_order", [0, 2])
def test_sacre_chrf_equals_sacrebleu_over_several_batches(word_order):
    hyps = _hypotheses()
    metric = SacreCHRF(word_order=word_order)
    metric.update(hyps[:4], [[r] for r in REFS[:4]])
    metric.update(hyps[4:], [[r] for r in REFS[4:]])
    expected = sacrebleu.corpus_chrf(hyps, [REFS], word_order=word_order).score
    assert float(metric.compute()) * 100 == pytest.approx(expected, abs=1e-9)


def test_torchmetrics_default_chrf_is_not_sacrebleu_chrf():
    """Why SacreCHRF exists: torchmetrics' default is chrF++ and matches neither."""
    hyps = _hypotheses()
    ours = CHRFScore()(hyps, [[r] for r in REFS]).item() * 100
    for word_order in (0, 2):
        assert abs(ours - sacrebleu.corpus_chrf(hyps, [REFS], word_order=word_order).score) > 0.1


def test_perplexity_has_one_rule_and_one_home():
    """exp(nll) capped at exp(50), for tensors and numbers, in attnlab.training.metrics only:
    train/perplexity used to be uncapped while val/, per-length and attnlab-eval's were."""
    import math
    import re
    from pathlib import Path

    import torch

    from attnlab.training.metrics import MAX_NLL, perplexity

    assert perplexity(1.0) == math.e and perplexity(80.0) == math.exp(MAX_NLL)
    assert torch.equal(perplexity(torch.tensor([1.0, 80.0])), torch.exp(torch.tensor([1.0, 50.0])))
    src = Path(__file__).resolve().parents[1] / "src" / "attnlab"
    elsewhere = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if p.name != "metrics.py" and re.search(r"(torch|math)\.exp\([^)]*nll", p.read_text())
    ]
    assert elsewhere == []
