"""Values that type-check but cannot be meant: betas outside [0, 1), a
negative eps, weight decay or clipping threshold, ... (one line naming the key, like every
check of attnlab.config.validate, which calls `check_values`)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnlab.config.plain import to_plain
from attnlab.validation import integer_problem, number_problem, raise_first


def check_values(cfg: DictConfig) -> None:
    optim, scheduler = to_plain(cfg.optim), to_plain(cfg.scheduler)
    betas = list(optim.get("betas") or [])
    problems = [
        number_problem("optim.eps", optim["eps"], 0.0),
        number_problem("optim.weight_decay", optim["weight_decay"], 0.0),
        *(number_problem(f"optim.betas[{i}]", b, 0.0, 1.0) for i, b in enumerate(betas)),
        None if len(betas) == 2 else f"optim.betas={betas!r} is not valid; expected 2 numbers",
        number_problem("scheduler.scale", scheduler["scale"], 0.0, low_open=True),
        number_problem("scheduler.min_lr", scheduler["min_lr"], 0.0),
        _optional(integer_problem, "scheduler.max_steps", scheduler.get("max_steps"), 1),
        _optional(
            number_problem, "trainer.gradient_clip_val", cfg.trainer.get("gradient_clip_val"), 0.0
        ),  # fmt: skip
        _optional(integer_problem, "torch_threads", cfg.get("torch_threads"), 1),
        integer_problem(
            "trainer.accumulate_grad_batches", cfg.trainer.get("accumulate_grad_batches", 1), 1
        ),  # fmt: skip
    ]
    raise_first(problems)


def _optional(problem, key: str, value, minimum) -> str | None:
    """No problem when `value` is None (null: the default), else `problem`'s verdict."""
    return None if value is None else problem(key, value, minimum)
