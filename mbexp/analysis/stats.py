"""The table's statistics as pure functions over per-seed losses (pandas Series indexed by seed)."""

import gc
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import DescrStatsW, ttost_ind

from mbexp.claims.vocabulary import BETTER, EQUIVALENT, UNRESOLVED, WORSE

LEVEL = 0.95  # every interval's coverage
ALPHA = 0.05  # every test's level: 1 - LEVEL
LEVEL90 = 0.90  # the interval beside it: TOST at ALPHA finds equivalence when this one lies within ±m


@dataclass(frozen=True)
class Interval:
    """mean(a) − mean(b) with a two-sided t-interval, its standard error, degrees of freedom and p (H0: Δ = 0)."""

    delta: float
    low: float = math.nan
    high: float = math.nan
    se: float = math.nan
    df: float = math.nan
    p: float = math.nan
    method: str = "none"  # "paired", "welch", or "none": too few seeds for an interval
    samples: tuple = ()  # what it was computed from: (paired differences,) or (a, b) for Welch


def paired(a: pd.Series, b: pd.Series, level: float = LEVEL) -> Interval:
    """The paired t-interval over the seeds a and b share (no interval below 2 shared seeds)."""
    shared = a.index.intersection(b.index)
    if len(shared) < 2:
        return Interval(math.nan)
    diff = (a[shared] - b[shared]).to_numpy(float)
    return _interval(diff.mean(), diff.var(ddof=1) / len(diff), len(diff) - 1, level, "paired", (diff,))


def welch(a: pd.Series, b: pd.Series, level: float = LEVEL) -> Interval:
    """Welch's t-interval (unequal variances) over all seeds of a and b (no interval if either has < 2)."""
    if min(len(a), len(b)) < 2:  # one seed on a side: no interval, and no Δ without one
        return Interval(math.nan)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else math.inf
    return _interval(a.mean() - b.mean(), va + vb, df, level, "welch", (a.to_numpy(float), b.to_numpy(float)))


def compare(a: pd.Series, b: pd.Series, level: float = LEVEL) -> Interval:
    """Paired when ≥2 seeds are shared (same seed: same data order, same init for same-shaped models), else Welch."""
    both = paired(a, b, level)
    return both if both.method == "paired" else welch(a, b, level)


def _interval(delta: float, var_of_mean: float, df: float, level: float, method: str, samples: tuple) -> Interval:
    se = math.sqrt(var_of_mean)
    if se == 0:  # identical differences: no spread, the point is the interval
        return Interval(delta, delta, delta, 0.0, df, 1.0 if delta == 0 else 0.0, method, samples)
    half = stats.t.ppf((1 + level) / 2, df) * se
    p = 2 * stats.t.sf(abs(delta) / se, df)
    return Interval(delta, delta - half, delta + half, se, df, float(p), method, samples)


def holm(pvalues, looks: int = 1) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (statsmodels' multipletests); NaN entries are not comparisons, stay NaN.
    `looks`: each p first multiplied by it, at most 1 (Bonferroni over repeated looks at one question)."""
    p = np.minimum(1.0, looks * np.asarray(list(pvalues), float))
    out = np.full(p.shape, math.nan)
    keep = ~np.isnan(p)
    if keep.any():
        ours = gc.get_freeze_count() == 0  # objects another caller froze stay frozen
        if ours:
            gc.freeze()  # its Holm branch runs gc.collect(): with the live objects frozen, that scans only new ones
        try:
            out[keep] = multipletests(p[keep], method="holm")[1]
        finally:
            if ours:
                gc.unfreeze()
    return out


def tost(interval: Interval, margin: float) -> float:
    """p of two one-sided t-tests that |Δ| < margin (statsmodels: the paired differences' ttost_mean, or Welch's
    ttost_ind); NaN without an interval."""
    if math.isnan(interval.se):
        return math.nan
    if interval.se == 0:
        return 0.0 if abs(interval.delta) < margin else 1.0
    if interval.method == "paired":
        return float(DescrStatsW(interval.samples[0]).ttost_mean(-margin, margin)[0])
    a, b = interval.samples
    return float(ttost_ind(a, b, -margin, margin, usevar="unequal")[0])


def mark(delta: float, p_adjusted: float, tost_adjusted: float, alpha: float = ALPHA) -> str:
    """equivalent when the adjusted TOST p < alpha (Δ inside ±margin, even if resolved from 0), else better / worse
    when the Holm-adjusted p < alpha: the one mark of a comparison, in a table and in a claim alike."""
    if tost_adjusted < alpha:
        return EQUIVALENT
    if p_adjusted < alpha:
        return BETTER if delta < 0 else WORSE
    return UNRESOLVED


def choose(val_means: dict) -> object:
    """The setting with the lowest mean validation loss (ties: the first); None when nothing finished finite."""
    finite = {k: v for k, v in val_means.items() if not (math.isnan(v) or math.isinf(v))}
    return min(finite, key=finite.get) if finite else None


def best_setting(val: dict) -> object:
    """The setting whose per-seed validation losses have the lowest mean (one with none counts as diverged)."""
    return choose({k: v.mean() if len(v) else math.inf for k, v in val.items()})


def sensitivity_sides(val: dict, report: dict) -> tuple[pd.Series, pd.Series]:
    """(reported loss at the smallest setting, at the one best on validation) by seed; empty where none finished."""
    best, empty = best_setting(val), pd.Series(dtype=float)
    return report.get(min(val), empty), (report.get(best, empty) if best is not None else empty)


def sensitivity(val: dict, report: dict, level: float = LEVEL) -> Interval:
    """Reported loss at the smallest setting minus at the setting best on validation, with its interval over
    seeds; `val` and `report` map each setting to per-seed losses (empty: every run there diverged -> inf)."""
    if len(val) < 2:
        return Interval(math.nan)
    first, best = sensitivity_sides(val, report)
    if not len(first):
        return Interval(math.inf)
    return compare(first, best, level) if len(best) else Interval(math.nan)


POWER = 0.8
SLOW_K = 5.0  # a run starts slowly when its early loss is this many robust SDs above its row's other seeds
MAD_SCALE = 1.4826  # a normal sample's SD over its median absolute deviation: MAD_SCALE x MAD is a robust SD
SLOW_MIN_OTHERS = 3  # below this many other seeds a median and MAD say nothing: no flag
MAX_SEEDS = 1000  # seeds needed beyond this read as "more than 1000"


def seed_deltas(a: pd.Series, b: pd.Series) -> pd.Series:
    """a − b per seed both have (the paired differences an interval is made of), by seed."""
    shared = a.index.intersection(b.index).sort_values()
    return (a[shared] - b[shared]).astype(float)


def power(n, effect: float, sd: float, alpha: float = ALPHA):
    """Power of the two-sided one-sample (paired) t-test at level alpha with n seeds (an int or an array), when the
    true mean difference is `effect` and the per-seed SD is `sd` (statsmodels' TTestPower, tail by tail: scipy's
    noncentral t gives NaN far out in a tail, where the far tail is 0 and the near one 1)."""
    es, test = abs(effect) / sd, TTestPower()
    near = test.power(effect_size=es, nobs=n, alpha=alpha / 2, alternative="larger")
    far = test.power(effect_size=es, nobs=n, alpha=alpha / 2, alternative="smaller")
    out = np.minimum(np.nan_to_num(near, nan=1.0) + np.nan_to_num(far, nan=0.0), 1.0)
    return float(out) if np.ndim(out) == 0 else out


def seeds_needed(effect: float, sd: float, target: float = POWER, alpha: float = ALPHA) -> float:
    """The least n ≥ 2 at which `power` reaches `target`; inf beyond MAX_SEEDS (a cap, not a measurement) or for a
    zero effect; NaN when the SD is unknown (fewer than 2 seeds). A zero SD resolves any nonzero effect with 2 seeds."""
    if math.isnan(sd) or math.isnan(effect):
        return math.nan
    if effect == 0:
        return math.inf
    if sd == 0:
        return 2.0
    n = np.arange(2, MAX_SEEDS + 1)
    reached = np.flatnonzero(power(n, effect, sd, alpha) >= target)
    return float(n[reached[0]]) if len(reached) else math.inf


def slow_starts(early: pd.Series, k: float = SLOW_K) -> list:
    """Seeds whose early loss is more than k robust SDs above the median of the row's *other* seeds, the robust SD
    being MAD_SCALE × their median absolute deviation; no flag with fewer than SLOW_MIN_OTHERS other seeds."""
    early = early.dropna()
    flagged = []
    for seed, value in early.items():
        others = early.drop(seed)
        if len(others) < SLOW_MIN_OTHERS:
            continue
        centre = others.median()
        spread = MAD_SCALE * (others - centre).abs().median()
        if value - centre > k * spread:
            flagged.append(seed)
    return sorted(flagged)


def beyond_margin(interval: Interval, margin: float) -> float:
    """Two-sided p of H0 |Δ| ≤ margin (small: Δ resolved larger than the margin, against equivalence): twice the
    one-sided p on the side of the estimate, at most 1; below 0.05 exactly when the 95% interval lies wholly beyond
    ±margin. NaN without an interval."""
    d, se, df = interval.delta, interval.se, interval.df
    if math.isnan(se):
        return math.nan
    if se == 0:
        return 0.0 if abs(d) > margin else 1.0
    return float(min(1.0, 2 * stats.t.sf((abs(d) - margin) / se, df)))
