"""Statistics a reviewer asks of an ablation table: intervals, tests, power, and the wording.

Per group: mean, sample std, n and the 95% confidence interval of the mean (Student's t).
Against a baseline group: the difference of means with its 95% interval and the p value of
Welch's t-test (unequal variances; or the paired t-test on per-seed differences when the arms
share seeds and data order and the user asks for it), Holm's step-down correction across the
arms of one table, and the minimum detectable difference: the smallest true difference that
this n and this spread would find with 80% power (noncentral t) at the alpha the verdict uses:
two-sided 0.05 for one comparison, 0.05 / m across a table of m tested arms (Holm's strictest
step, the family's Bonferroni bound; the planner uses the same alpha). The
verdict's wording is decided here, never by the writer of a report: "higher (p=0.01)",
"lower (p=0.03)", or "no difference detected; this n would miss differences under 1.9".

The sweep planner inverts the power calculation: the seeds per arm needed to detect a
difference `delta` with 80% power, from a pilot's spread. Distributions come from scipy.stats;
only Holm's ordering of p values is written here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class Summary:
    """One group's metric: mean, sample std (None when n < 2), n and the 95% interval of the
    mean (None when n < 2)."""

    mean: float | None
    std: float | None
    n: int
    ci: tuple[float, float] | None


@dataclass(frozen=True)
class Difference:
    """An arm against the baseline: diff = mean(arm) - mean(baseline), its 95% interval, the
    test's p, Holm's adjusted p (filled in across a table), the minimum detectable difference
    at 80% power at `alpha` (0.05 alone; 0.05 / m once Holm has been applied across m arms),
    the test used ("welch" or "paired"), and the test's standard error and df (None where
    no t-test ran)."""

    diff: float
    ci: tuple[float, float]
    p: float
    mdd: float | None
    test: str
    p_holm: float | None = None
    se: float | None = None
    df: float | None = None
    alpha: float = ALPHA

    def verdict(self, higher_is_better: bool | None = None) -> str:
        """'higher (p=0.01)', 'lower (p=0.03)' on Holm's p when given, else the raw p; or 'no
        difference detected; this n would miss differences under X'."""
        p = self.p if self.p_holm is None else self.p_holm
        if math.isnan(p):  # no spread in either group: no test, the seeds speak for themselves
            if self.diff == 0:
                return "no difference detected (no spread between seeds)"
            side = "higher" if self.diff > 0 else "lower"
            return f"{side} in every seed (no spread between seeds: no test)"
        if p < ALPHA:
            shown = fmt_p(p)
            shown = shown if shown.startswith("<") else f"={shown}"
            return f"{'higher' if self.diff > 0 else 'lower'} (p{shown})"
        if self.test.startswith("exact"):  # one arm without spread: an exact test's floor
            floor = self.test.split(": ", 1)[1].rstrip(")")
            return (
                "no difference detected; one arm has no spread, and an exact test at this n "
                f"cannot go below p={floor}"
            )
        if self.mdd is None:  # constant groups: nothing to detect a difference against
            return "no difference detected (no spread between seeds)"
        return f"no difference detected; this n would miss differences under {self.mdd:.3g}"


def fmt_p(p: float | None) -> str:
    """p with two significant digits, '<0.001' below that; '' where there is no test."""
    if p is None or math.isnan(p):
        return ""
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Mean, sample std, n and the t interval of the mean over the finite values."""
    from scipy import stats

    x = _finite(values)
    n = len(x)
    if n == 0:
        return Summary(None, None, 0, None)
    mean = math.fsum(x) / n
    if n < 2:
        return Summary(mean, None, 1, None)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n))
    return Summary(mean, std, n, (mean - half, mean + half))


def _power(delta: float, se: float, df: float, alpha: float = ALPHA) -> float:
    """Two-sided power of a t-test with standard error `se` and `df` degrees of freedom
    against a true difference `delta` (noncentral t with noncentrality delta / se)."""
    from scipy import stats

    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(delta) / se
    upper = stats.nct.sf(crit, df, nc)
    lower = stats.nct.cdf(-crit, df, nc)  # the wrong-sign tail: NaN where it underflows
    return float(upper + (0.0 if math.isnan(lower) else lower))


def detectable_difference(
    se: float, df: float, power: float = POWER, alpha: float = ALPHA
) -> float | None:
    """The smallest difference a two-sided t-test at `alpha` with this standard error and df
    detects with `power` (None where it is undefined: no spread or no degrees of freedom)."""
    from scipy import optimize

    if not (se > 0 and df > 0 and math.isfinite(se)):
        return None
    hi = se
    while _power(hi, se, df, alpha) < power:
        hi *= 2
    return float(
        optimize.brentq(lambda d: _power(d, se, df, alpha) - power, 0.0, hi, xtol=se * 1e-6)
    )


def welch(arm: Sequence[float], base: Sequence[float], confidence: float = 0.95) -> Difference:
    """Welch's t-test of arm against base; the interval uses Welch-Satterthwaite's df."""
    from scipy import stats

    a, b = _finite(arm), _finite(base)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least 2 values per group")
    va, vb = statistics.variance(a), statistics.variance(b)
    se2 = va / len(a) + vb / len(b)
    diff = math.fsum(a) / len(a) - math.fsum(b) / len(b)
    if se2 == 0:  # two constant groups: no spread to test against, so no p (NaN)
        return Difference(diff, (diff, diff), math.nan, None, "welch")
    if va == 0 or vb == 0:  # one constant group: Welch's would be a one-sample t-test
        return exact(a, b, confidence)
    se = math.sqrt(se2)
    df = se2**2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    p = float(2 * stats.t.sf(abs(diff) / se, df))  # = scipy's ttest_ind(equal_var=False)
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    mdd = detectable_difference(se, df)
    return Difference(diff, (diff - half, diff + half), p, mdd, "welch", se=se, df=df)


def smallest_p(n_arm: int, n_base: int) -> float:
    """The smallest two-sided p an exact permutation test of n_arm against n_base values can
    give: 2 / C(n_arm + n_base, n_arm) (3 against 3: 0.1)."""
    return min(1.0, 2 / math.comb(n_arm + n_base, n_arm))


def exact(arm: Sequence[float], base: Sequence[float], confidence: float = 0.95) -> Difference:
    """The exact permutation test of the difference of means (scipy.stats.permutation_test over
    every relabelling of the pooled values), for groups where one has no spread: a t-test would
    then read the other group's spread alone. The interval is Welch's (the constant group adds
    no variance); the test is "exact (smallest p at this n: X)"."""
    import numpy as np
    from scipy import stats

    a, b = np.array(_finite(arm)), np.array(_finite(base))
    diff = float(a.mean() - b.mean())
    result = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent",
        vectorized=True,
        n_resamples=math.inf,
        alternative="two-sided",
    )
    va, vb = a.var(ddof=1), b.var(ddof=1)
    se = math.sqrt(va / len(a) + vb / len(b))
    df = len(a) - 1 if va > 0 else len(b) - 1  # the varying group's
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    floor = smallest_p(len(a), len(b))
    test = f"exact (smallest p at this n: {floor:.2g})"
    return Difference(diff, (diff - half, diff + half), float(result.pvalue), None, test)


def paired(arm: dict, base: dict, confidence: float = 0.95) -> Difference:
    """Paired t-test on the per-seed differences arm[seed] - base[seed] (seed -> value); the
    seeds of the two must be the same."""
    from scipy import stats

    if set(arm) != set(base):
        raise ValueError(
            f"a paired test needs the same seeds in both groups: {sorted(arm, key=str)} "
            f"against {sorted(base, key=str)}"
        )
    d = _finite([arm[s] - base[s] for s in sorted(arm, key=str)])
    if len(d) < 2:
        raise ValueError("a paired test needs at least 2 seeds")
    diff = math.fsum(d) / len(d)
    sd = math.sqrt(statistics.variance(d))
    if sd == 0:  # every seed moved by the same amount: no spread to test against, no p (NaN)
        return Difference(diff, (diff, diff), math.nan, None, "paired")
    se, df = sd / math.sqrt(len(d)), len(d) - 1
    p = float(2 * stats.t.sf(abs(diff) / se, df))  # = scipy's ttest_rel
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    mdd = detectable_difference(se, df)
    return Difference(diff, (diff - half, diff + half), p, mdd, "paired", se=se, df=df)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (same order as given): the k-th smallest of m is
    multiplied by m - k + 1, made monotone, capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (len(p_values) - rank) * p_values[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def with_holm(differences: Sequence[Difference | None]) -> list[Difference | None]:
    """The same differences with p_holm filled in across all of them (None entries kept), and
    each t-test's minimum detectable difference recomputed at alpha / m, m the number tested:
    the alpha a verdict on Holm's p can rely on for every arm of the family."""
    tested = [d for d in differences if d is not None and not math.isnan(d.p)]
    adjusted = iter(holm([d.p for d in tested]))
    alpha = ALPHA / max(1, len(tested))
    out = []
    for d in differences:
        if d is None or math.isnan(d.p):  # untested (no spread): not counted in Holm's m
            out.append(d)
            continue
        mdd = d.mdd if d.se is None else detectable_difference(d.se, d.df, POWER, alpha)
        out.append(replace(d, p_holm=next(adjusted), mdd=mdd, alpha=alpha))
    return out


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests (TOST; Schuirmann 1987) of |mean(arm) - mean(baseline)| < margin on
    the t-test of `Difference` d (Welch's or the paired one, the same se and df): p is the
    larger of the two one-sided p values, the 90% interval is the one whose inclusion in
    (-margin, margin) is the same decision at alpha 0.05; p_holm is Holm's across the arms."""

    diff: float
    ci90: tuple[float, float]
    p: float
    margin: float
    test: str
    p_holm: float | None = None

    def verdict(self) -> str:
        """'equivalent within +-M (p=0.01)', or 'not shown equivalent within +-M: the 90%
        interval [a, b] reaches beyond it' (on Holm's p when given)."""
        p = self.p if self.p_holm is None else self.p_holm
        if p < ALPHA:
            shown = fmt_p(p)
            shown = shown if shown.startswith("<") else f"={shown}"
            return f"equivalent within +-{self.margin:g} (p{shown})"
        lo, hi = self.ci90
        return (
            f"not shown equivalent within +-{self.margin:g}: the 90% interval "
            f"[{lo:.3g}, {hi:.3g}] reaches beyond it"
        )


def tost(d: Difference, margin: float) -> Equivalence | None:
    """The equivalence test of a t-test's difference within +-margin (margin > 0): p = max(
    P(T > (diff + margin) / se), P(T < (diff - margin) / se)), T ~ t(df). None where no
    t-test exists (a group without spread: then no interval supports equivalence)."""
    from scipy import stats

    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0, not {margin}")
    if d.se is None or d.df is None:
        return None
    lower = float(stats.t.sf((d.diff + margin) / d.se, d.df))  # H0: diff <= -margin
    upper = float(stats.t.cdf((d.diff - margin) / d.se, d.df))  # H0: diff >= +margin
    half = float(stats.t.ppf(1 - ALPHA, d.df)) * d.se
    return Equivalence(d.diff, (d.diff - half, d.diff + half), max(lower, upper), margin, d.test)


def tost_with_holm(tests: Sequence[Equivalence | None]) -> list[Equivalence | None]:
    """The same equivalence tests with Holm's adjusted p filled in across them."""
    tested = [e for e in tests if e is not None]
    adjusted = iter(holm([e.p for e in tested]))
    return [None if e is None else replace(e, p_holm=next(adjusted)) for e in tests]


@dataclass(frozen=True)
class Plan:
    """Seeds per arm to detect `delta` with `power` at two-sided `alpha` (Holm's first step:
    ALPHA / comparisons), from a pilot's pooled std and from the upper 80% confidence bound
    of that std (a pilot of few seeds underestimates the spread as often as not)."""

    delta: float
    pooled_std: float
    pilot_n: int
    seeds_per_arm: int
    power: float
    comparisons: int = 1
    alpha: float = ALPHA
    pooled_df: int = 0
    std_upper: float | None = None
    seeds_per_arm_upper: int | None = None


def _seeds_for(delta: float, std: float, alpha: float, power: float, max_n: int) -> int:
    if std == 0:
        return 2
    n = 2
    while n < max_n and _power(delta, std * math.sqrt(2 / n), 2 * n - 2, alpha) < power:
        n += 1
    return n


def std_upper_bound(std: float, df: int, confidence: float = 0.8) -> float | None:
    """The one-sided upper `confidence` bound of a standard deviation estimated with `df`
    degrees of freedom: std * sqrt(df / chi2.ppf(1 - confidence, df))."""
    from scipy import stats

    if df < 1 or std == 0:
        return None
    return float(std * math.sqrt(df / stats.chi2.ppf(1 - confidence, df)))


def seeds_needed(
    groups: Sequence[Sequence[float]],
    delta: float,
    power: float = POWER,
    max_n: int = 10_000,
    comparisons: int = 1,
) -> Plan:
    """The smallest n per arm at which a two-sided Welch test between two arms with the pilot's
    pooled std (the root of the mean within-group variance) detects `delta` with `power`,
    equal n per arm (df = 2n - 2), at alpha = ALPHA / comparisons: the threshold Holm's
    correction applies to the smallest p of `comparisons` arms tested against a baseline (the
    planner must count the comparisons the report will correct for). Also the n at the upper
    80% bound of the pooled std."""
    if not delta > 0:
        raise ValueError(f"--plan {delta} is not valid; expected a difference > 0")
    samples = [_finite(g) for g in groups]
    samples = [s for s in samples if len(s) >= 2]
    if not samples:
        raise ValueError("the pilot needs at least one group with 2 or more completed runs")
    comparisons = max(int(comparisons), 1)
    alpha = ALPHA / comparisons
    pooled = math.sqrt(math.fsum(statistics.variance(s) for s in samples) / len(samples))
    df = sum(len(s) - 1 for s in samples)
    pilot_n = min(len(s) for s in samples)
    n = _seeds_for(delta, pooled, alpha, power, max_n)
    achieved = 1.0 if pooled == 0 else _power(delta, pooled * math.sqrt(2 / n), 2 * n - 2, alpha)
    upper = std_upper_bound(pooled, df)
    n_upper = _seeds_for(delta, upper, alpha, power, max_n) if upper is not None else None
    return Plan(delta, pooled, pilot_n, n, achieved, comparisons, alpha, df, upper, n_upper)
