"""A ladder's bootstrap: each point's mean redrawn from its own seeds, the refits' multiplier intervals, and how the
multiplier moves along the ladder (docs/ladder-fits.md#m-along-the-ladder); shared by the fit (scaling) and its
checks."""

import math
import warnings

import numpy as np
import pandas as pd

from mbexp.analysis.ladder.batch import refit_curves
from mbexp.analysis.ladder.powerlaw import multiplier
from mbexp.analysis.stats import LEVEL
from mbexp.claims.vocabulary import UNRESOLVED

MIN_POINTS = 3  # per variant: two curve parameters each and the shared floor leave a residual from 3 points
RESAMPLES = 200  # bootstrap refits
RNG_SEED = 0  # a fixed bootstrap: the same runs give the same bytes


def too_few(points: pd.DataFrame) -> str | None:
    """Why these points cannot be fitted (a variant with fewer than MIN_POINTS distinct computes), or None."""
    counts = points.groupby("variant", sort=False)["compute"].nunique()
    short = counts[counts < MIN_POINTS]
    if short.empty:
        return None
    named = ", ".join(f"{v} has {n}" for v, n in short.items())
    return f"too few points to fit L(C) = E + A·C^-α: {named} ({MIN_POINTS} sizes per curve needed)"


def bootstrap(points: pd.DataFrame, baseline: str, params, resamples: int, refit=None) -> np.ndarray:
    """Each point's multiplier (a column) over refits (rows) to resampled means (`resampled_means`: each point from
    its own seeds). `refit(points, losses, start)` gives the curves of each row of `losses` (default: the
    shared-floor fit from `params`); a draw whose refit fails (None) stays NaN."""
    refit = refit or refit_curves
    rng = np.random.default_rng(RNG_SEED)
    draws = np.full((resamples, len(points)), math.nan)
    losses = [s.to_numpy() for s in points["losses"]]
    if not any(len(s) > 1 for s in losses):  # one seed everywhere: no noise estimate, no interval
        return draws
    means = np.array([resampled_means(losses, rng) for _ in range(resamples)]).reshape(resamples, len(points))
    for b, curves in enumerate(refit(points, means, params)):
        if curves is not None:
            base = curves[baseline]
            draws[b] = [multiplier(base, curves[v], c) for v, c in zip(points["variant"], points["compute"])]
    return draws


def resampled_means(losses: list, rng: np.random.Generator) -> list[float]:
    """One bootstrap draw of each point's mean from its own seeds: the mean plus s/√n times a Student t draw with
    n − 1 df (z / √(χ²/(n−1)) from n normals: a mean whose s.d. is estimated from its n seeds); one seed: the mean."""
    out = []
    for s in losses:
        n = len(s)
        if n < 2:
            out.append(float(s.mean()))
            continue
        z = rng.standard_normal(n)
        t = z[0] / math.sqrt(float(np.sum(z[1:] ** 2)) / (n - 1))
        out.append(float(s.mean() + s.std(ddof=1) / math.sqrt(n) * t))
    return out


def interval(draws: np.ndarray) -> tuple:
    """The LEVEL percentile interval of each column (NaN where no refit converged)."""
    tail = (1 - LEVEL) / 2 * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN, as it should be
        return tuple(np.nanpercentile(draws, [tail, 100 - tail], axis=0))


def trend_of(group: pd.DataFrame, mine: pd.DataFrame, draws: np.ndarray) -> dict:
    """How a variant's multiplier moves from its smallest to its largest size, at its largest budget: the ratio
    m(largest) / m(smallest) with its bootstrap interval (the same refits; draws' columns follow `group`'s rows),
    read by `trend`."""
    top = mine[mine["steps"] == mine["steps"].max()]
    first, last = top["params_non_embedding"].idxmin(), top["params_non_embedding"].idxmax()
    if first == last:
        return {"trend": "one size"}
    cols = [group.index.get_loc(first), group.index.get_loc(last)]
    m = group["multiplier"]
    with np.errstate(invalid="ignore", divide="ignore"):  # ∞ / ∞ (both below the floor): NaN, left out
        low, high = interval(draws[:, [cols[1]]] / draws[:, [cols[0]]])
        ratio = (m[last] / m[first], low[0], high[0])
    ends = [(m[i], group.at[i, "multiplier_low"], group.at[i, "multiplier_high"]) for i in (first, last)]
    return {"trend": trend(*ends, ratio), "trend_ratio": ratio[0], "trend_low": low[0], "trend_high": high[0],
            "trend_from": group.at[first, "size"], "trend_to": group.at[last, "size"]}


RISES, FALLS, CROSSES_UP, CROSSES_DOWN = "rises", "falls", "crosses 1 upward", "crosses 1 downward"


def trend(first: tuple, last: tuple, ratio: tuple) -> str:
    """The multiplier's move along the ladder, from (m, low, high) at the smallest and at the largest size and
    (ratio, low, high) of m(largest) / m(smallest): crosses 1 (both ends resolved, on either side of 1), rises or
    falls (the ratio's interval excludes 1), or not resolved."""
    if first[2] < 1 < last[1]:
        return CROSSES_UP
    if first[1] > 1 > last[2]:
        return CROSSES_DOWN
    return RISES if ratio[1] > 1 else FALLS if ratio[2] < 1 else UNRESOLVED
