"""A learning-rate sweep as attnlab-compare shows it: its tables (each arm's curve, the per-arm
summary, the arms at their own best rate) with their headings, for the console and comparison.md.
The computations are attnlab.analysis.lr_sweep's."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.analysis import lr_sweep
from attnlab.analysis.tables import text_table


@dataclass
class LRStudy:
    """A learning-rate sweep (attnlab.analysis.lr_sweep) as attnlab-compare shows it."""

    x_key: str
    arm_keys: list[str]
    metric: str
    arms: list
    best_groups: list
    baseline: object
    statistics: list[list[str]]
    select_seeds: list | None
    cap: float | None

    def tables(self) -> dict[str, list[list[str]]]:
        return {
            "lr curve": lr_sweep.curve_table(self.arms, self.x_key, [*self.arm_keys, self.x_key]),
            "lr summary": lr_sweep.summary_table(
                self.arms, [*self.arm_keys, self.x_key], self.x_key, self.metric, self.select_seeds
            ),
            "lr best": self.statistics,
        }

    def headings(self) -> dict[str, str]:
        cap = f"--cap {self.cap:g}" if self.cap is not None else "each run's loss at initialization"
        where = (
            "each arm's best rate chosen on seeds "
            + ",".join(map(str, self.select_seeds))
            + ", the arms compared on the other seeds"
            if self.select_seeds
            else "warning: each arm's best rate was chosen on the same seeds it is compared "
            "on, which flatters every arm (--select-seeds 1,2,3 chooses on those, compares on "
            "the others)"
        )
        return {
            "lr curve": f"{self.metric} by {self.x_key} (mean ± std over seeds; a run that "
            f"diverged or failed counts at the cap: {cap})",
            "lr summary": f"per arm: the best {self.x_key}, {self.metric} there, and the LR "
            "sensitivity (Wortsman et al., 2023: mean excess over the best across the grid, "
            "capped; 95% percentile bootstrap over seeds)",
            "lr best": f"the arms at their own best {self.x_key} ({where})",
        }

    def text(self) -> str:
        parts = [
            f"learning-rate sweep: {self.metric} against {self.x_key}, arms by "
            + (", ".join(self.arm_keys) or "nothing else")
        ]
        headings = self.headings()
        for key, rows in self.tables().items():
            parts += ["", headings[key] + ":", text_table(rows)]
        return "\n".join(parts)
