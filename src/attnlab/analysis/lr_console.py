"""A learning-rate sweep's tables narrowed for the console (under 120 columns for a few arms and
rates): each arm's keys in columns of their own, figures to 3 significant digits, the curve as
means, the summary and the tests split in two. comparison.md keeps the whole tables
(attnlab.analysis.lr_report)."""

from __future__ import annotations

from attnlab.analysis.groups import short_names
from attnlab.analysis.tables import fmt_value
from attnlab.analysis.tables import sig3 as _g3


def _keys(study) -> tuple[list[str], list[list[str]]]:
    """The header of the arms' key columns and each arm's values, in the study's arm order."""
    names = short_names(study.arm_keys)
    header = [names[k] for k in study.arm_keys] or ["arm"]
    values = [[fmt_value(a.values[k]) for k in study.arm_keys] or ["all runs"] for a in study.arms]
    return header, values


def curve(study) -> tuple[list[list[str]], str]:
    """Keys, then the mean at each rate (3 digits), '*' where the arm stalls; the note."""
    header, values = _keys(study)
    rates = sorted({p.rate for a in study.arms for p in a.points})
    rows = [[*header, *[fmt_value(r) for r in rates]]]
    for arm, keys in zip(study.arms, values, strict=True):
        by_rate = {p.rate: p for p in arm.points}
        cells = []
        for rate in rates:
            p = by_rate.get(rate)
            mean = p.mean() if p is not None else None
            cells.append("" if mean is None else f"{mean:.3g}" + ("*" if p.stalled else ""))
        rows.append([*keys, *cells])
    return rows, "* the arm stalls there (diverged, or at the stall level); mean over seeds"


def summary(study) -> list[list[list[str]]]:
    """Two tables: the best rate, the metric there, the runs and the flag; the sensitivities
    and the basin."""
    full = study.summary_table()
    header, values = _keys(study)
    first, second = (
        [[*header, "best rate", f"{study.metric} there", "div / dnt / runs", "flag"]],
        [],
    )
    second.append([*header, *[h.replace(" [95% CI]", "") for h in full[0][3:-5]], "basin"])
    for keys, row in zip(values, full[1:], strict=True):
        flag = "lower bound" if row[-1] else ""
        first.append([*keys, row[1], _g3(row[2]), row[-2], flag])
        second.append([*keys, *[_g3(c) for c in row[3:-5]], row[-5]])
    return [first, second]


def differences(study) -> list[list[list[str]]]:
    """The tests against the baseline arm, in two tables: the sensitivities, the basin."""
    full = study.difference_table()
    header, values = _keys(study)
    base = study.arms.index(study.baseline_arm())
    keys = [v for i, v in enumerate(values) if i != base]
    titles = [
        t.replace("sensitivity, ", "").replace(": diff [95% CI]", " diff [CI]") for t in full[0][1:]
    ]
    tables = [[[*header, *titles[:-2]]], [[*header, *titles[-2:]]]]
    for k, row in zip(keys, full[1:], strict=True):
        tables[0].append([*k, *[_g3(c) if i % 2 == 0 else c for i, c in enumerate(row[1:-2])]])
        tables[1].append([*k, _g3(row[-2]), row[-1]])
    return tables
