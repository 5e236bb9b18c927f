"""A ladder's fit-free reading (docs/ladders.md#the-fit-free-trend): the paired Δ (variant − baseline, same seed) at
each size, and its trend over log(non-embedding parameters) by a per-seed slope t-test and a within-seed permutation
test."""

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from mbexp.analysis.stats import ALPHA, LEVEL, Interval, holm, seed_deltas
from mbexp.claims.vocabulary import UNRESOLVED

EXACT_LIMIT = 200_000  # permutations enumerated exactly up to this many, else drawn
DRAWS = 20_000
RNG_SEED = 0


@dataclass(frozen=True)
class Trend:
    """Δ per size (mean over seeds, by non-embedding parameters) and the slope of Δ against ln N: the mean of the
    per-seed least-squares slopes, its t-interval and p over seeds, and the within-seed permutation p."""

    deltas: dict  # N -> mean paired Δ at that size
    seeds: tuple  # the seeds present at every size
    slopes: tuple  # per seed, the slope of Δ on ln N (nats per e-fold of N)
    slope: float
    low: float
    high: float
    p: float  # one-sample t-test on the per-seed slopes, two-sided
    p_permutation: float  # two-sided, Δ permuted across sizes within each seed
    reading: str  # "shrinks" / "grows" (the deficit, Δ > 0 meaning the variant is behind) or "not resolved"

    @property
    def interval(self) -> Interval:
        """The slope as an Interval (method "trend"), as claims read a comparison."""
        return Interval(self.slope, self.low, self.high, p=self.p, df=len(self.seeds) - 1, method="trend")

    @property
    def per_seed(self) -> pd.Series:
        return pd.Series(self.slopes, index=list(self.seeds[:len(self.slopes)]), dtype=float)


def paired_deltas(losses: dict, base: dict) -> dict:
    """N -> per-seed Δ = losses[N] − base[N] over the seeds both have (Series by seed)."""
    return {n: seed_deltas(losses[n], base[n]) for n in sorted(losses)}


def _slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of y (seeds × sizes) against x."""
    xc = x - x.mean()
    return (y - y.mean(axis=1, keepdims=True)) @ xc / np.sum(xc**2)


def trend(deltas: dict, level: float = LEVEL, alpha: float = ALPHA) -> Trend:
    """The trend of paired Δ over ln N from {N: per-seed Δ}; NaN p-values with fewer than 3 sizes or 2 seeds."""
    sizes = sorted(deltas)
    seeds = sorted(set.intersection(*(set(deltas[n].index) for n in sizes))) if sizes else []
    means = {n: float(deltas[n].mean()) for n in sizes}
    if len(sizes) < 3 or len(seeds) < 2:
        return Trend(means, tuple(seeds), (), math.nan, math.nan, math.nan, math.nan, math.nan, UNRESOLVED)
    x = np.log(np.asarray(sizes, float))
    y = np.array([[deltas[n][s] for n in sizes] for s in seeds], float)
    per_seed = _slopes(x, y)
    slope, se, df = per_seed.mean(), per_seed.std(ddof=1) / math.sqrt(len(seeds)), len(seeds) - 1
    if se > 0:
        half = sps.t.ppf((1 + level) / 2, df) * se
        p = float(2 * sps.t.sf(abs(slope) / se, df))
    else:
        half, p = 0.0, float(slope == 0)
    p_perm = _permutation_p(x, y, slope)
    return Trend(means, tuple(seeds), tuple(float(s) for s in per_seed), float(slope), float(slope - half),
                 float(slope + half), p, p_perm, reading(slope, p < alpha and p_perm < alpha))


def reading(slope: float, resolved: bool) -> str:
    """How a trend of Δ over size reads: "shrinks" / "grows" by its slope's sign when resolved."""
    return ("shrinks" if slope < 0 else "grows") if resolved else UNRESOLVED


def holm_p(trends: list[Trend]) -> list[float]:
    """Per trend, the larger of its slope t-test p and its permutation p, each Holm-adjusted over `trends` (a ladder
    claim's rows, or a fit table's variants at one budget): the trend is resolved where this is below α."""
    ps, qs = holm([t.p for t in trends]), holm([t.p_permutation for t in trends])
    return [max(float(p), float(q)) for p, q in zip(ps, qs)]


def _permutation_p(x: np.ndarray, y: np.ndarray, observed: float) -> float:
    """P(|mean slope| ≥ |observed|) when each seed's Δ are shuffled across sizes: exact when the permutations
    number at most EXACT_LIMIT, else DRAWS seeded draws (the observed order counted once)."""
    seeds, k = y.shape
    orders = np.array(list(itertools.permutations(range(k))))
    per_seed = np.stack([_slopes(x, row[orders][None, :, :].reshape(-1, k)) for row in y])  # seeds × k!
    tol = 1e-12 * max(1.0, abs(observed))
    if len(orders) ** seeds <= EXACT_LIMIT:
        total = np.zeros(1)
        for row in per_seed:  # every combination of one permutation per seed
            total = (total[:, None] + row[None, :]).ravel()
        return float(np.mean(np.abs(total / seeds) >= abs(observed) - tol))
    rng = np.random.default_rng(RNG_SEED)
    picks = rng.integers(0, len(orders), size=(DRAWS, seeds))
    means = per_seed[np.arange(seeds), picks].mean(axis=1)
    return float((1 + np.sum(np.abs(means) >= abs(observed) - tol)) / (DRAWS + 1))


def ladder_deltas(points: pd.DataFrame, variant: str, baseline: str, steps) -> dict:
    """From a ladder's points (scaling.ladder_points): {N: per-seed Δ} of `variant` against `baseline` at the
    budget `steps`, paired by seed at each size both have."""
    at = points[points["steps"] == steps]
    mine = {r["size"]: r for _, r in at[at["variant"] == variant].iterrows()}
    base = {r["size"]: r for _, r in at[at["variant"] == baseline].iterrows()}
    shared = [s for s in mine if s in base]
    return paired_deltas({mine[s]["params_non_embedding"]: mine[s]["losses"] for s in shared},
                         {mine[s]["params_non_embedding"]: base[s]["losses"] for s in shared})
