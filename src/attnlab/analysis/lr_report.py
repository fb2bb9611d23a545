"""A learning-rate sweep as attnlab-compare shows it: its tables (each arm's curve, the per-arm
summary with its sensitivity and basin on two ranges, the arms' sensitivities tested against
the baseline's, the arms at their own best rate) with their headings, for the console and
comparison.md. The computations are attnlab.analysis.lr_sweep's and lr_sensitivity's."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.analysis import lr_sensitivity as ls
from attnlab.analysis import lr_sweep, stats
from attnlab.analysis.groups import short_names
from attnlab.analysis.tables import console_lines, fit_console, fmt_number, fmt_value, text_table

# A basin (the rates within --tol of the best) read on fewer rates is the best rate alone: the
# summary says so instead of a width, and the arms' basins are not tested.
MIN_BASIN_RATES = 5


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
    tol: float = ls.DEFAULT_TOL
    lr_range: ls.Range | None = None  # --lr-range; None: the stable range
    descriptive: bool = False  # a diag/ metric: its curve only (lr_sweep.is_diagnostic)

    @property
    def goal_max(self) -> bool:
        return lr_sweep.higher_is_better(self.metric)

    @property
    def range(self) -> ls.Range | None:
        """The second range of the figures: --lr-range, else the grid below the first stall."""
        return self.lr_range or ls.stable_range(self.arms)

    def readings(self, where: ls.Range | None) -> list:
        """Each arm's lr_sensitivity.Reading on `where` (None: the whole grid)."""
        best = ls.best_of_all(self.arms, self.goal_max, where)
        return [
            ls.read(a, self.goal_max, self.tol, best, where) if best is not None else None
            for a in self.arms
        ]

    def tables(self) -> dict[str, list[list[str]]]:
        tables = {
            "lr curve": lr_sweep.curve_table(self.arms, self.x_key, [*self.arm_keys, self.x_key])
        }
        if self.descriptive:
            return tables
        tables["lr summary"] = self.summary_table()
        if self.baseline_arm() is not None and len(self.arms) > 1:
            tables["lr sensitivity"] = self.difference_table()
        tables["lr best"] = self.statistics
        return tables

    def summary_table(self) -> list[list[str]]:
        """Header + one row per arm: its best rate and the metric there (95% t interval); the
        sensitivity on the grid and on the range (mean over seeds, 95% t interval); the basin
        of the mean curve (rates within tol of its best, their span in decades; rates within
        tol of every arm's best); seeds; runs that diverged or did not train; the flag."""
        names = short_names([*self.arm_keys, self.x_key])
        short_x = names.get(self.x_key, self.x_key)
        seeds = ",".join(map(str, self.select_seeds or []))
        where = self.range
        header = ["arm", f"best {short_x}" + (f" (chosen on seeds {seeds})" if seeds else "")]
        header += [f"{self.metric} there [95% CI]", "sensitivity, grid [95% CI]"]
        header += [f"sensitivity, {where.label} [95% CI]"] if where else []
        header += ["basin: rates (decades)", "rates near all arms' best", "seeds"]
        header += ["diverged / did not train / runs", "flag"]
        rows = [header]
        grid, part = self.readings(None), self.readings(where) if where else None
        for i, arm in enumerate(self.arms):
            point = arm.best(self.goal_max, self.select_seeds)
            there = stats.summarize(list(point.values.values())) if point else None
            row = [lr_sweep.arm_label(arm, names), fmt_value(point.rate) if point else ""]
            row += [_with_ci(there), _with_ci(grid[i] and grid[i].sensitivity_summary)]
            row += [_with_ci(part[i] and part[i].sensitivity_summary)] if where else []
            r = grid[i]
            if len(arm.points) < MIN_BASIN_RATES:  # a basin of 1 of 3 rates says nothing
                row += [f"needs {MIN_BASIN_RATES} rates ({len(arm.points)} here)", ""]
            else:
                row += [f"{r.mean_basin} ({r.mean_basin_decades:.2g})" if r else ""]
                row += [str(r.basin_of_all) if r else ""]
            row += [str(len(r.sensitivity)) if r else "0"]
            points = arm.points
            bad = sum(len(p.ended_badly) for p in points)
            flat = sum(len(p.did_not_train) for p in points)
            row += [f"{bad} / {flat} / {sum(len(p.runs) for p in points)}"]
            row += ["" if ls.reaches_divergence(arm) else ls.LOWER_BOUND]
            rows.append(row)
        return rows

    def baseline_arm(self):
        values = getattr(self.baseline, "values", None)
        return next((a for a in self.arms if a.values == values), None)

    def difference_table(self) -> list[list[str]]:
        """Header + one row per arm but the baseline: the difference of its seeds' sensitivity
        (grid, range) and basin width (grid) from the baseline's, 95% interval, p and Holm's p
        across the arms (Welch; exact where one side has no spread)."""
        names = short_names(self.arm_keys)
        base = self.arms.index(self.baseline_arm())
        where = self.range
        columns = [("sensitivity, grid", self.readings(None), "sensitivity")]
        if where:
            columns.append((f"sensitivity, {where.label}", self.readings(where), "sensitivity"))
        if min(len(a.points) for a in self.arms) >= MIN_BASIN_RATES:  # else no basin to test
            columns.append(("basin rates, grid", self.readings(None), "basin"))
        header = ["arm"]
        cells = {i: [lr_sweep.arm_label(a, names)] for i, a in enumerate(self.arms) if i != base}
        for title, readings, field in columns:
            header += [f"{title}: diff [95% CI]", "p (Holm)"]
            ref = readings[base]
            diffs = {
                i: ls.difference(getattr(readings[i], field), getattr(ref, field))
                if readings[i] and ref
                else None
                for i in cells
            }
            tested = dict(zip(diffs, stats.with_holm(list(diffs.values())), strict=True))
            for i, d in tested.items():
                cells[i] += _difference_cells(d)
        return [header, *cells.values()]

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
        rng = self.range
        on = f"; on {rng.label} ({rng.why})" if rng else "; no arm stalls, so one range"
        base = short_names(self.arm_keys)
        label = lr_sweep.arm_label(self.baseline_arm(), base) if self.baseline_arm() else ""
        if self.descriptive:
            return {
                "lr curve": f"{self.metric} by {self.x_key} (mean ± std over seeds): a diagnostic, "
                "not a loss, so no best rate, LR sensitivity, cap or comparison at a best rate"
            }
        return {
            "lr curve": f"{self.metric} by {self.x_key} (mean ± std over seeds; a run that "
            f"diverged or failed counts at the cap: {cap}; 'did not train': its best never "
            f"below {self.stall_text()})",
            "lr summary": f"per arm: the best {self.x_key} and {self.metric} there; the LR "
            "sensitivity (Wortsman et al., 2023: mean excess over the best, capped), per seed "
            f"then mean with a 95% t interval, on the whole grid{on}; the basin: rates within "
            f"{self.tol:g} of the arm's best (their span in decades), and of every arm's best "
            "(--tol); an arm that stalls nowhere has figures that are lower bounds",
            "lr sensitivity": f"each arm's per-seed sensitivity and basin width against "
            f"{label}'s: difference, 95% CI, Welch's p (exact where one arm has no spread) "
            "and Holm's across the arms",
            "lr best": f"the arms at their own best {self.x_key} ({where})",
        }

    def stall_text(self) -> str:
        level = next((p.stall_level for a in self.arms for p in a.points), None)
        if level is None:
            return "a stall level (none for a metric to maximize)"
        return (
            f"the stall level {fmt_number(level)}, {1 - lr_sweep.DID_NOT_TRAIN:.2g} x the "
            "runs' median loss at initialization"
        )

    def text(self) -> str:
        import textwrap

        parts = [
            textwrap.fill(
                f"learning-rate sweep: {self.metric} against {self.x_key}, arms by "
                + (", ".join(self.arm_keys) or "nothing else"),
                width=100,
            )
        ]
        from attnlab.analysis import lr_console
        from attnlab.analysis.report import console_statistics

        headings = self.headings()  # the console's tables are narrowed; comparison.md's whole
        for key, rows in self.tables().items():
            note, shown = None, [rows]
            if key == "lr curve":
                rows, note = lr_console.curve(self)
                shown = [rows]
            elif key == "lr summary":
                shown = lr_console.summary(self)
            elif key == "lr sensitivity":
                shown = lr_console.differences(self)
            elif key == "lr best":
                rows, note = console_statistics(rows)
                shown = [rows]
            heading = textwrap.fill(headings[key] + ":", width=100)
            parts += ["", heading]
            for table in shown:
                n_keys = table[0].index("n") if key == "lr best" else len(self.arm_keys)
                table, arms = fit_console(table, n_keys)
                parts += [text_table(table), *([console_lines(arms)] if arms else [])]
            parts += [console_lines(note)] if note else []
        return "\n".join(parts)


def _with_ci(summary: stats.Summary | None) -> str:
    if summary is None or summary.mean is None:
        return ""
    ci = f" [{fmt_number(summary.ci[0])}, {fmt_number(summary.ci[1])}]" if summary.ci else ""
    return fmt_number(summary.mean) + ci


def _difference_cells(d: stats.Difference | None) -> list[str]:
    if d is None:
        return ["", "too few seeds to test"]
    ci = f"{fmt_number(d.diff)} [{fmt_number(d.ci[0])}, {fmt_number(d.ci[1])}]"
    exact = " exact" if d.test.startswith("exact") else ""
    if stats.fmt_p(d.p) == "":
        return [ci, "no spread: no test"]
    return [ci, f"{stats.fmt_p(d.p)} ({stats.fmt_p(d.p_holm)}){exact}"]
