"""The metrics a run of a config reports (results.json's "metrics" and its record numbers), read
from the plain config without building the run, so that a sweep's, search's or study's metric
that no trial will report is refused before anything trains (a misspelled `val/nlll` used to
end every trial as no_metric).

The names follow attnlab.training.module (val/ and test/: loss, nll, perplexity, token_acc, and
exact_match where the task greedy-decodes; val/loss_best, val/nll_best, val/exact_match_best),
attnlab.training.translation_quality (val/ and test/ bleu and chrf, val/bleu_best),
attnlab.training.extrapolation (length/<L>/<metric> for each of data.eval_lengths) and
attnlab.runs.record (nll_init, peak_lr).
"""

from __future__ import annotations

import difflib
from typing import Any

SPLIT_METRICS = ("loss", "nll", "perplexity", "token_acc")
RECORD = ("nll_init", "peak_lr")
TRANSLATION = "attnlab.training.translation_quality.TranslationQuality"


def reported_metrics(plain: dict[str, Any]) -> list[str] | None:
    """Every metric name a run of `plain` (a plain config: attnlab.config.plain) reports, with
    length/<L>/* as one pattern per length; None where a component of one's own may log more
    (a LightningModule of one's own, module._target_, or a callback from outside attnlab and
    Lightning): then nothing is refused."""
    callbacks = plain.get("callbacks") or {}
    targets = [n.get("_target_", "") for n in callbacks.values() if isinstance(n, dict)]
    own_module = bool((plain.get("module") or {}).get("_target_"))
    known = ("attnlab.", "lightning.")  # callbacks whose metrics are listed here (or none)
    if own_module or any(t and not str(t).startswith(known) for t in targets):
        return None
    exact = _exact_match(plain)
    names = [f"{split}/{m}" for split in ("val", "test") for m in SPLIT_METRICS]
    names += [f"{split}/exact_match" for split in ("val", "test")] if exact else []
    names += ["val/loss_best", "val/nll_best"] + (["val/exact_match_best"] if exact else [])
    if any(isinstance(n, dict) and n.get("_target_") == TRANSLATION for n in callbacks.values()):
        names += ["val/bleu", "val/chrf", "val/bleu_best", "test/bleu", "test/chrf"]
    names += [f"length/{n}/*" for n in (plain.get("data") or {}).get("eval_lengths") or []]
    return names + list(RECORD)


def _exact_match(plain: dict[str, Any]) -> bool:
    """attnlab.pipeline.build.exact_match_enabled, from the data class (not an instance)."""
    if plain.get("exact_match") is not None:
        return bool(plain["exact_match"])
    from hydra.utils import get_object

    try:
        cls = get_object(str((plain.get("data") or {}).get("_target_")))
    except Exception:  # the preflight names a bad _target_; here it only reports nothing
        return False
    return getattr(cls, "exact_match", False) is True


def metric_problem(name: str, names: list[str], where: str) -> str | None:
    """None when a run reports `name` (or `name` is one of `extra`); else one line naming
    `where`, the closest name and the choices."""
    if name in names or any(
        n.endswith("/*") and name.startswith(n[:-1]) and name != n[:-1] for n in names
    ):
        return None
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"{where}={name}: no trial reports this metric{hint}; its runs report: {', '.join(names)}"
    )
