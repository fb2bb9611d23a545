"""What a run shorter than its settings assume should not do silently.

- A validation interval longer than the run gives one point per curve (and the final
  validation): the interval is scaled down to about five points, said in one line. A run
  too short for that (under 2 x POINTS steps) keeps its one validation, at its end.
- A warmup as long as the run or longer never reaches the peak learning rate: one warning line.
"""

from __future__ import annotations

POINTS = 5  # validation points per curve when the interval is scaled down


def validation_interval(val_check_interval, max_steps, accumulate=1) -> tuple[object, str | None]:
    """(the interval to use, the line that says why it changed, or None). Only an integer
    interval (training batches) longer than the run's batches (max_steps x accumulation) is
    changed, to about POINTS validations over the run; a run of fewer than 2 x POINTS batches
    is validated once, at its end (the final validation)."""
    if not isinstance(val_check_interval, int) or isinstance(val_check_interval, bool):
        return val_check_interval, None
    if not isinstance(max_steps, int) or max_steps <= 0:
        return val_check_interval, None
    batches = max_steps * (accumulate if isinstance(accumulate, int) and accumulate > 0 else 1)
    if val_check_interval <= batches or batches < 2 * POINTS:
        return val_check_interval, None
    scaled = batches // POINTS
    return scaled, (
        f"trainer.val_check_interval={val_check_interval} is longer than the run "
        f"(trainer.max_steps={max_steps}): validating every {scaled} steps instead"
    )


def warmup_warning(scheduler, max_steps) -> str | None:
    """One line when the warmup does not end before the run does."""
    warmup = scheduler.get("warmup_steps") or 0
    if not isinstance(max_steps, int) or max_steps <= 0 or warmup < max_steps:
        return None
    return (
        f"warning: scheduler.warmup_steps={warmup} >= trainer.max_steps={max_steps}: the "
        "learning rate never reaches its peak in this run"
    )
