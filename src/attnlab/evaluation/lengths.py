"""attnlab-eval on synthetic-task and language-model checkpoints: metrics per length.

The run's own data config (config.yaml) rebuilds its DataModule; every length of `eval.lengths`
(default: the run's data.eval_lengths) is scored one at a time by
attnlab.training.extrapolation.evaluate_lengths, the code that fills results.json's
"extrapolation" at the end of training, so the two agree on the same weights.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from attnlab.evaluation.checkpoints import EvalError, device_of, run_datamodule
from attnlab.runs.record import write_atomic


def is_length_task(run_dir: Path) -> bool:
    """True when the run trained on a synthetic task or a language model (no translation)."""
    from omegaconf import OmegaConf

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        return False
    target = str(OmegaConf.select(OmegaConf.load(cfg_path), "data._target_", default=""))
    return target.startswith(("attnlab.data.synthetic.", "attnlab.data.language_model."))


def default_lengths(datamodule) -> list[int]:
    """The lengths to score when eval.lengths is not given: the run's data.eval_lengths, else
    the lengths it trained on (a synthetic task's data.train_len, every length from its
    shortest to its longest; a language model's block size)."""
    if getattr(datamodule, "eval_lengths", None):
        return list(datamodule.eval_lengths)
    if getattr(datamodule, "train_len", None):
        low, high = datamodule.train_len
        return list(range(int(low), int(high) + 1))
    block = getattr(datamodule, "block_size", None)
    return [int(block)] if block else []


def checkpoint_name(paths) -> str:
    """What was evaluated, for the output's name: the checkpoint's file name without .ckpt
    (last, best-step=600, step=1800), or avg<N> over the steps averaged (avg5-step1700-1800)."""
    from attnlab.runs.checkpoints import step_of

    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        return paths[0].name.removesuffix(".ckpt")
    steps = sorted(s for s in (step_of(p) for p in paths) if s is not None)
    span = f"-step{steps[0]}-{steps[-1]}" if len(steps) == len(paths) else ""
    return f"avg{len(paths)}{span}"


def evaluate_checkpoint_lengths(model, hparams: dict, run_dir: Path, cfg, started: float) -> dict:
    """Score the loaded (averaged) model at each length; write and return <out>.json."""
    from attnlab.training.extrapolation import evaluate_lengths, metric_names
    from attnlab.training.module import TransformerModule

    datamodule = run_datamodule(run_dir, cfg.data)
    if not hasattr(datamodule, "positions_needed"):
        raise EvalError(
            "eval.lengths is for synthetic tasks and language models; "
            f"{cfg.ckpt[0]} was trained on {type(datamodule).__name__} (translation: leave "
            "eval.lengths out)"
        )
    lengths = list(cfg.eval.lengths or default_lengths(datamodule))
    if not lengths:
        raise EvalError(
            "eval.lengths=[...] is required: the run has no data.eval_lengths and no training "
            "length to default to; e.g. eval.lengths=[8,16,32]"
        )
    module = TransformerModule(**hparams)
    module.model = model
    module.to(device_of(cfg.device))
    results = evaluate_lengths(module, datamodule, lengths, cfg.eval.n_examples, progress=True)
    out = Path(cfg.out) if cfg.out else run_dir / "eval" / f"lengths-{checkpoint_name(cfg.ckpt)}"
    record = {
        "extrapolation": results,
        "metrics": list(metric_names(datamodule)),
        "lengths": lengths,
        "n_examples": cfg.eval.n_examples if hasattr(datamodule, "length_batches") else None,
        "checkpoints": [str(Path(p).absolute()) for p in cfg.ckpt],  # links as named
        "averaged": len(cfg.ckpt) > 1,
        "json": str(out.with_name(out.name + ".json")),
        "wall_time_s": round(time.perf_counter() - started, 2),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(record["json"], json.dumps(record, indent=2) + "\n")
    return record
