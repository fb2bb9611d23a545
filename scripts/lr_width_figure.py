#!/usr/bin/env python
"""Section 2 across width (Wortsman et al.'s Figure 1 at CPU scale): each arm's LR sensitivity
and basin width against d_model, from the runs of sweeps/lr_width*.yaml.

Reads a runs.csv (attnlab-compare over the width folders writes one; docs/results/lr_width.csv)
whose rows carry model.d_model and the arm keys (model.norm_position, scheduler.warmup_steps,
model.qk_norm) and scheduler.peak_lr, and computes per width and arm, with attnlab's own LR
report (attnlab.analysis.lr_sensitivity): the sensitivity per seed on the whole grid and on the
grid up to --upto (default 3e-2, the range below the first stall in section 2), as the mean with a
95% t interval, and the basin (rates within --tol of the arm's best). Prints one table, draws
one figure (sensitivity on both ranges, and the basin, against d_model, an arm a line), and says
where an arm's grid did not reach its divergence (a lower bound).

    attnlab-compare outputs/sweeps/lr_width/d* --metric val/nll --out /tmp/lr_width  # runs.csv
    python scripts/lr_width_figure.py /tmp/lr_width/runs.csv \
        --plot docs/img/reproduction/lr_width.png
    # the contrasts sweeps/lr_width_seeds.yaml and lr_width_dk.yaml name, on 1e-3..1e-1:
    python scripts/lr_width_figure.py /tmp/lws_all.csv --range 1e-3:1e-1 --heads8 /tmp/dk/runs.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnlab.analysis import lr_sensitivity as ls
from attnlab.analysis import lr_sweep
from attnlab.analysis.groups import group_label, group_runs, short_names
from attnlab.analysis.run_table import read_runs_csv
from attnlab.analysis.tables import fmt_number, text_table

ARM_KEYS = ["model.norm_position", "scheduler.warmup_steps", "model.qk_norm"]
RATE, WIDTH, METRIC = "scheduler.peak_lr", "model.d_model", "val/nll"


def part_name(upto: float, low: float = 0.0) -> str:
    """The second range's name: "up to 0.03", or "0.001 to 0.1" where it has a low end."""
    return f"up to {upto:g}" if low == 0 else f"{low:g} to {upto:g}"


def readings(runs, upto: float, tol: float, low: float = 0.0) -> dict:
    """{(arm label, width): (grid Reading, range Reading, reaches divergence)}; the range is the
    grid's rates from `low` to `upto`."""
    keys = [*ARM_KEYS, RATE]
    found = {}
    for width in sorted({r.config.get(WIDTH) for r in runs}):
        mine = [r for r in runs if r.config.get(WIDTH) == width]
        arms = lr_sweep.arms(group_runs(mine, keys), keys, RATE, METRIC, None)
        upto_range = ls.Range(low, upto, f"rates {part_name(upto, low)}")
        best = ls.best_of_all(arms, False)
        best_part = ls.best_of_all(arms, False, upto_range)
        names = short_names(ARM_KEYS)
        for arm in arms:
            label = group_label(type("G", (), {"values": arm.values})(), names)
            found[label, width] = (
                ls.read(arm, False, tol, best),
                ls.read(arm, False, tol, best_part, upto_range),
                ls.reaches_divergence(arm),
            )
    return found


def _cell(reading, attr: str = "sensitivity_summary") -> str:
    if reading is None:
        return ""
    s = getattr(reading, attr)
    ci = f" [{fmt_number(s.ci[0])}, {fmt_number(s.ci[1])}]" if s.ci else ""
    return f"{fmt_number(s.mean)}{ci} (n={s.n})"


def table(found: dict, part: str) -> list[list[str]]:
    rows = [["arm", "d_model", "sensitivity, grid", f"sensitivity, {part}",
             "basin rates (grid, mean curve)", "flag"]]  # fmt: skip
    for (label, width), (grid, part, diverges) in sorted(found.items()):
        basin = f"{grid.mean_basin} ({grid.mean_basin_decades:.2g} decades)" if grid else ""
        flag = "" if diverges else ls.LOWER_BOUND
        rows.append([label, str(width), _cell(grid), _cell(part), basin, flag])
    return rows


def contrast_test(groups: list[list[float]], signs: list[int]):
    """sum(sign * mean) over independent groups as a stats.Difference: its 95% interval and
    two-sided p on the Welch-Satterthwaite df, the df and se, and the smallest contrast these
    seeds detect (80% power, alpha 0.05); None where a group has fewer than 2 values."""
    import math
    import statistics

    from scipy import stats as sp

    from attnlab.analysis import stats

    if any(len(g) < 2 for g in groups):
        return None
    value = sum(s * statistics.fmean(g) for g, s in zip(groups, signs, strict=True))
    parts = [statistics.variance(g) / len(g) for g in groups]
    se = math.sqrt(sum(parts))
    if se == 0:
        return stats.Difference(value, (value, value), float("nan"), None, "contrast")
    df = sum(parts) ** 2 / sum(p**2 / (len(g) - 1) for p, g in zip(parts, groups, strict=True))
    half = float(sp.t.ppf(0.975, df)) * se
    p = float(2 * sp.t.sf(abs(value) / se, df))
    mdd = stats.detectable_difference(se, df)
    return stats.Difference(value, (value - half, value + half), p, mdd, "contrast", se=se, df=df)


def contrast(groups: list[list[float]], signs: list[int]) -> tuple[float, tuple, float] | None:
    """contrast_test's (value, 95% interval, two-sided p)."""
    d = contrast_test(groups, signs)
    return None if d is None else (d.diff, d.ci, d.p)


def named_contrast(found: dict, arm: str, reference: str) -> list[list[str]]:
    """The contrast sweeps/lr_width_seeds.yaml names before its runs: the change from the
    narrowest width to the widest of (arm - reference)'s sensitivity on the range (the
    Readings' second), over the four cells' seed means; value, 95% interval, df, p and MDD."""
    widths = sorted({w for _, w in found})
    if len(widths) < 2:
        return [["the named contrast: a cell has no reading on the range"]]
    cells = [found.get((a, w)) for w in (widths[-1], widths[0]) for a in (arm, reference)]
    return contrast_rows(f"({arm} - {reference}) at {widths[-1]} minus at {widths[0]}", cells)


def heads_contrasts(found: dict, found8: dict, arm: str, reference: str) -> list[list[list[str]]]:
    """sweeps/lr_width_dk.yaml's named contrast: at the widest width, (arm - reference)'s
    sensitivity gap with the main table's heads (d_k = d_model / 4) minus the gap with `found8`'s
    8 heads (d_k = d_model / 8); then, exploratory, the width contrast with the widest cell taken
    from `found8` (d_k 8 -> 16 instead of 8 -> 32). Two tables (each a header and its row, or one
    line saying why it has none)."""
    widths = sorted({w for _, w in found})
    wide = max(w for _, w in found8)
    if wide not in widths or len(widths) < 2:
        return [[[f"the heads contrast: d_model {wide} is not in the main table"]]]
    h4 = [found.get((a, wide)) for a in (arm, reference)]
    h8 = [found8.get((a, wide)) for a in (arm, reference)]
    narrow = [found.get((a, widths[0])) for a in (arm, reference)]
    return [
        contrast_rows(f"(arm - reference) at {wide}: 4 heads minus 8 heads", [*h4, *h8]),
        contrast_rows(
            f"exploratory: (arm - reference) at {wide} with 8 heads minus at {widths[0]} with 4",
            [*h8, *narrow],
        ),  # fmt: skip
    ]


def contrast_rows(title: str, cells: list) -> list[list[str]]:
    """cells: the four Readings (a, b, c, d) of the contrast (a - b) - (c - d), their range's
    per-seed sensitivities; a header and one row: value, 95% interval, df, p and MDD."""
    from attnlab.analysis import stats

    if not all(c and c[1] for c in cells):
        return [[f"{title}: a cell has no reading on the range"]]
    groups = [list(c[1].sensitivity.values()) for c in cells]
    d = contrast_test(groups, [1, -1, -1, 1])
    if d is None:
        return [[f"{title}: a cell has fewer than 2 seeds"]]
    head = ["contrast", "seeds per cell", "value [95% CI]", "df", "p", "MDD (80%, alpha 0.05)"]
    return [head, [
        title,
        "/".join(str(len(g)) for g in groups),
        f"{d.diff:.3g} [{d.ci[0]:.3g}, {d.ci[1]:.3g}]",
        "" if d.df is None else f"{d.df:.1f}",
        stats.fmt_p(d.p),
        "" if d.mdd is None else f"{d.mdd:.2g}",
    ]]  # fmt: skip


def gaps(found: dict, reference: str, part: str) -> list[list[str]]:
    """Each arm's sensitivity minus the reference arm's, per width, and how that gap changes
    from the narrowest width to the widest (the interaction), with 95% intervals."""
    widths = sorted({w for _, w in found})
    rows = [["arm - " + reference, "range", *[f"gap at d_model {w}" for w in widths],
             f"gap change {widths[0]} -> {widths[-1]}", "p"]]  # fmt: skip
    for arm in sorted({a for a, _ in found} - {reference}):
        for index, name in ((0, "grid"), (1, part)):
            cells, per_width = [], {}
            for w in widths:
                mine, ref = found.get((arm, w)), found.get((reference, w))
                if not (mine and ref and mine[index] and ref[index]):
                    cells.append("")
                    continue
                a, r = list(mine[index].sensitivity.values()), list(ref[index].sensitivity.values())
                per_width[w] = (a, r)
                c = contrast([a, r], [1, -1])
                cells.append("" if c is None else f"{c[0]:.3g} [{c[1][0]:.3g}, {c[1][1]:.3g}]")
            change = None
            if widths[0] in per_width and widths[-1] in per_width and len(widths) > 1:
                (a0, r0), (a1, r1) = per_width[widths[0]], per_width[widths[-1]]
                change = contrast([a1, r1, a0, r0], [1, -1, -1, 1])
            shown = (
                ""
                if change is None
                else f"{change[0]:.3g} [{change[1][0]:.3g}, {change[1][1]:.3g}]"
            )
            p = "" if change is None else f"{change[2]:.2g}"
            rows.append([arm, name, *cells, shown, p])
    return rows


def changes(found: dict, part: str) -> list[list[str]]:
    """Each arm's own sensitivity change from the narrowest width to the widest, per seed:
    difference, 95% interval, p (Welch's, or the exact test where one side has no spread),
    Holm's p across the arms of each range, and the smallest change the seeds could detect
    (MDD, 80% power) at Holm's alpha for that family (0.05 / arms), as the report's verdicts."""
    from attnlab.analysis import stats

    widths = sorted({w for _, w in found})
    rows = [["arm", "range", f"change {widths[0]} -> {widths[-1]} [95% CI]", "p", "p (Holm)",
             "MDD"]]  # fmt: skip
    for index, name in ((0, "grid"), (1, part)):
        tested = []
        for arm in sorted({a for a, _ in found}):
            first, last = found.get((arm, widths[0])), found.get((arm, widths[-1]))
            if len(widths) < 2 or not (first and last and first[index] and last[index]):
                continue
            a = list(last[index].sensitivity.values())
            b = list(first[index].sensitivity.values())
            tested.append((arm, stats.welch(a, b)))  # exact where one side has no spread
        family = stats.with_holm([d for _, d in tested])
        for (arm, _), d in zip(tested, family, strict=True):
            ci = f"{d.diff:.3g} [{d.ci[0]:.3g}, {d.ci[1]:.3g}]"
            mdd = "" if d.mdd is None else f"{d.mdd:.2g}"
            rows.append([arm, name, ci, stats.fmt_p(d.p), stats.fmt_p(d.p_holm), mdd])
    return rows


def plot(found: dict, part: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = sorted({label for label, _ in found})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    panels = (
        ("grid", 0, "LR sensitivity, whole grid"),
        ("part", 1, f"LR sensitivity, rates {part}"),
        ("basin", 0, "basin: rates within tol of the arm's best"),
    )
    for ax, (kind, index, title) in zip(axes, panels, strict=True):
        for i, arm in enumerate(arms):
            widths = sorted(w for a, w in found if a == arm)
            xs, ys, lo, hi, open_ = [], [], [], [], []
            for w in widths:
                grid, part, diverges = found[arm, w]
                reading = (grid, part)[index]
                if reading is None:
                    continue
                if kind == "basin":
                    s = reading.basin_summary
                else:
                    s = reading.sensitivity_summary
                xs.append(w)
                ys.append(s.mean)
                ci = s.ci or (s.mean, s.mean)
                if kind == "basin":  # counts of 2-3 seeds: the seeds themselves, no t interval
                    ci = (s.mean, s.mean)
                    seeds = list(reading.basin.values())
                    ax.scatter([w] * len(seeds), seeds, color=f"C{i}", s=12, alpha=0.5)
                lo.append(s.mean - ci[0])
                hi.append(ci[1] - s.mean)
                open_.append(not diverges)
            if not xs:
                continue
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="-o", color=f"C{i}", capsize=3, label=arm)
            bounds = [(x, y) for x, y, o in zip(xs, ys, open_, strict=True) if o]
            if bounds:  # the grid did not reach the arm's divergence: a lower bound
                ax.scatter(*zip(*bounds, strict=True), marker="^", s=70, facecolors="none",
                           edgecolors=f"C{i}", zorder=4)  # fmt: skip
        ax.set_xscale("log", base=2)
        widths_all = sorted({w for _, w in found})
        ax.set_xticks(widths_all, [str(w) for w in widths_all])
        ax.minorticks_off()
        ax.set_xlabel("d_model (depth 6+6, 4 heads, d_ff 4 d_model)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"{METRIC} excess (mean over seeds, 95% t interval)")
    axes[2].set_ylabel("rates (mean over seeds; dots: seeds)")
    axes[0].legend(fontsize=7)
    fig.suptitle("LR sensitivity against width (open triangle: a lower bound, the grid does not "
                 "reach that arm's divergence)", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"-> {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_csv", type=Path)
    parser.add_argument("--upto", type=float, default=3e-2)
    parser.add_argument(
        "--range", dest="rates", metavar="LO:HI",
        help="the second range as LO:HI instead of up to --upto, and the contrast "
        "sweeps/lr_width_seeds.yaml names on it (e.g. 1e-3:1e-1)",
    )  # fmt: skip
    parser.add_argument(
        "--heads8", type=Path, metavar="RUNS_CSV",
        help="with --range: the runs of sweeps/lr_width_dk.yaml (the widest width with 8 heads); "
        "prints the contrast that file names",
    )  # fmt: skip
    parser.add_argument("--tol", type=float, default=ls.DEFAULT_TOL)
    parser.add_argument("--plot", type=Path)
    parser.add_argument(
        "--max-rate", type=float,
        help="only rates up to this one: one grid for every width (widths run from different "
        "grids compare only on the rates they share)",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        runs = read_runs_csv(args.runs_csv)
        runs8 = read_runs_csv(args.heads8) if args.heads8 else None
    except (OSError, ValueError) as err:
        print(f"lr_width_figure.py: error: {err}", file=sys.stderr)
        return 2
    if not runs or any(WIDTH not in r.config for r in runs):
        print(f"lr_width_figure.py: error: {args.runs_csv} has no {WIDTH} column; compare the "
              "width folders together (attnlab-compare outputs/sweeps/lr_width/d*)",
              file=sys.stderr)  # fmt: skip
        return 2
    if runs8 is not None and not args.rates:
        print("lr_width_figure.py: error: --heads8 needs --range LO:HI (its contrast's rates)",
              file=sys.stderr)  # fmt: skip
        return 2
    if runs8 is not None and (not runs8 or any(WIDTH not in r.config for r in runs8)):
        print(f"lr_width_figure.py: error: --heads8 {args.heads8}: no runs with a {WIDTH} "
              "column (scripts/lr_width_csv.py --width N adds it)", file=sys.stderr)  # fmt: skip
        return 2
    if args.max_rate is not None:
        runs = [r for r in runs if float(r.config.get(RATE, 0)) <= args.max_rate * (1 + 1e-9)]
        runs8 = runs8 and [r for r in runs8 if float(r.config[RATE]) <= args.max_rate * (1 + 1e-9)]
    low, upto = 0.0, args.upto
    if args.rates:
        try:
            rates = ls.parse_range(args.rates)
        except ValueError as err:
            print(f"lr_width_figure.py: error: {str(err).replace('--lr-range', '--range')}",
                  file=sys.stderr)  # fmt: skip
            return 2
        low, upto = rates.lo, rates.hi
    part = part_name(upto, low)
    found = readings(runs, upto, args.tol, low)
    print(text_table(table(found, part)))
    print("\neach arm's own change with width (per seed):")
    print(text_table(changes(found, part)))
    reference = "norm_position=pre, warmup_steps=300, qk_norm=true"  # Wortsman et al.'s flat arm
    if any(a == reference for a, _ in found):
        print(f"\neach arm's sensitivity minus {reference}'s (per seed, Welch intervals):")
        print(text_table(gaps(found, reference, part)))
        if args.rates:
            arm = "norm_position=pre, warmup_steps=300, qk_norm=false"
            print(f"\nthe contrast sweeps/lr_width_seeds.yaml names ({part}, Welch-Satterthwaite):")
            print(text_table(named_contrast(found, arm, reference)))
            if args.heads8:
                found8 = readings(runs8, upto, args.tol, low)
                print(f"\nthe contrast sweeps/lr_width_dk.yaml names ({part}, Welch):")
                for rows in heads_contrasts(found, found8, arm, reference):
                    print(text_table(rows))
    if args.plot:
        plot(found, part, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
