"""The sweep planner's answer (attnlab-compare --plan): the seeds per arm a sweep needs, and
the compute that costs. The power calculation is attnlab.analysis.stats.seeds_needed."""

from __future__ import annotations

from attnlab.analysis import stats


def plan_text(groups, metric: str | None, delta: float) -> str:
    """The planner's answer: seeds per arm for `delta` at 80% power, with alpha divided by the
    comparisons the report will correct for (Holm, every arm against a baseline), at the pilot's
    spread and at its upper 80% bound; runs and compute."""
    if metric is None:
        raise ValueError("--plan needs --metric (no metric in these runs)")
    samples = [[r.metrics[metric] for r in g.completed() if metric in r.metrics] for g in groups]
    arms = len(groups)
    comparisons = max(arms - 1, 1)
    plan = stats.seeds_needed(samples, delta, comparisons=comparisons)
    done = sum(len(s) for s in samples)
    times = [r.wall_time_s for g in groups for r in g.completed() if r.wall_time_s]
    per_run = sum(times) / len(times) if times else None
    lines = [
        f"planner: {metric} from a pilot of {arms} arms, {done} completed runs "
        f"(at least {plan.pilot_n} per arm), pooled std {plan.pooled_std:.4g} "
        f"({plan.pooled_df} degrees of freedom)",
        f"to detect a difference of {delta:g} with 80% power (two-sided Welch) in each of "
        f"{comparisons} comparison{'s' * (comparisons != 1)} against a baseline, Holm-corrected "
        f"(alpha {stats.ALPHA:g} / {comparisons} = {plan.alpha:.3g} for the smallest p):",
        f"  at the pilot's spread: {plan.seeds_per_arm} seeds per arm (power {plan.power:.2f}); "
        + _compute(plan.seeds_per_arm * arms, done, per_run),
    ]
    if plan.std_upper is not None:
        lines.append(
            f"  at the upper 80% bound of that spread (std {plan.std_upper:.4g}): "
            f"{plan.seeds_per_arm_upper} seeds per arm; "
            + _compute(plan.seeds_per_arm_upper * arms, done, per_run)
        )
    if plan.seeds_per_arm <= plan.pilot_n:
        lines.append("the pilot already has enough seeds per arm")
    return "\n".join(lines)


def _compute(runs: int, done: int, per_run: float | None) -> str:
    more = f"{runs} runs ({max(runs - done, 0)} more than the pilot)"
    if per_run is None:
        return more + "; no run time recorded in the pilot"
    return (
        f"{more} x {per_run / 60:.1f} min per run (the pilot's mean) = "
        f"{per_run * runs / 3600:.2f} h of run time"
    )
