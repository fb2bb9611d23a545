"""Values of the trainer and the run that type-check but cannot be meant: a negative clipping
threshold, zero threads, ... (one line naming the key, like every check of
attnlab.config.validate, which calls `check_values`). The optimizer's and the schedule's
arguments are their own classes' to check (attnlab.training.optimizer, .schedules)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnlab.validation import integer_problem, number_problem, raise_first


def check_values(cfg: DictConfig) -> None:
    problems = [
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
