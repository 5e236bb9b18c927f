"""A ladder fit's checks (docs/ladder-fits.md#lack-of-fit, #robustness-panel): the lack-of-fit F test of a curve's
residuals against the pooled seed variance, and the robustness panel, the multiplier's trend under other forms of the
fit."""

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from mbexp.analysis.ladder import draws as ladder_draws  # `draws` names the bootstrap's draws here
from mbexp.analysis.ladder.batch import refit_curves
from mbexp.analysis.ladder.powerlaw import fit, multiplier
from mbexp.claims.vocabulary import UNRESOLVED

FORMS = ("shared floor", "separate floors", "E = 0")  # then one "without <size>" per size
AGREE = (ladder_draws.RISES, ladder_draws.FALLS)  # the verdicts a panel can agree on
DIRECTION = {ladder_draws.CROSSES_UP: ladder_draws.RISES, ladder_draws.CROSSES_DOWN: ladder_draws.FALLS}


def lack_of_fit(points: pd.DataFrame, parameters: int) -> dict:
    """F = (Σ n_i·r_i² / (k − p)) / s²: the residual mean square of the k points' means (r_i: mean − fitted, each
    weighted by its n_i seeds so it estimates σ² when the form is right) over the pooled within-point seed variance
    s² (Σ(n_i − 1) df); p its upper tail on (k − p, Σ(n_i − 1)) df. NaN where either df is 0."""
    losses = [s.to_numpy(float) for s in points["losses"]]
    df1, df2 = len(points) - parameters, sum(len(s) - 1 for s in losses)
    if df1 < 1 or df2 < 1:
        return {"F": math.nan, "df1": df1, "df2": df2, "p": math.nan}
    within = sum(float(np.sum((s - s.mean()) ** 2)) for s in losses) / df2
    residual = float(np.sum(points["n"].to_numpy(float) * points["residual"].to_numpy(float) ** 2)) / df1
    f = residual / within if within > 0 else math.inf
    return {"F": f, "df1": df1, "df2": df2, "p": float(scipy_stats.f.sf(f, df1, df2))}


def separate_floors(points: pd.DataFrame, start=None) -> tuple[dict, dict]:
    """One curve per variant, each on its own floor E (each variant fitted alone); `start`: per variant."""
    curves, params = {}, {}
    for name, group in points.groupby("variant", sort=False):
        got, params[name] = fit(group, start=None if start is None else start[name])
        curves[name] = got[name]
    return curves, params


def zero_floor(points: pd.DataFrame, start=None) -> tuple[dict, np.ndarray]:
    return fit(points, start=start, zero_floor=True)


def shared_floor(points: pd.DataFrame, start=None) -> tuple[dict, np.ndarray]:
    return fit(points, start=start)


def _refit_separate(points: pd.DataFrame, losses: np.ndarray, start: dict) -> list[dict | None]:
    """`separate_floors` for each row of `losses` from `start`; None where a variant's refit fails."""
    out = [{} for _ in losses]
    for name in points["variant"].unique():
        mine = (points["variant"] == name).to_numpy()
        for row, curves in zip(out, refit_curves(points[mine], losses[:, mine], start[name])):
            row[name] = None if curves is None else curves[name]
    return [None if None in row.values() else row for row in out]


REFITS = {  # each form's bootstrap refits: curves (or None) for each row of losses, from the fit to the means
    shared_floor: refit_curves,
    zero_floor: lambda p, losses, start: refit_curves(p, losses, start, zero_floor=True),
    separate_floors: _refit_separate,
}


def form_trends(points: pd.DataFrame, baseline: str, fitter, resamples: int, draws=None) -> dict[str, tuple]:
    """Per variant, its multiplier trend along the ladder under `fitter`: (verdict, ratio, low, high); the
    bootstrap's refits start from the fit to the means (`draws`: that bootstrap, where the caller has it)."""
    curves, params = fitter(points)
    base = curves[baseline]
    points = points.assign(multiplier=[multiplier(base, curves[v], c)
                                       for v, c in zip(points["variant"], points["compute"])])
    if draws is None:
        draws = ladder_draws.bootstrap(points, baseline, params, resamples, REFITS[fitter])
    points["multiplier_low"], points["multiplier_high"] = ladder_draws.interval(draws)
    out = {}
    for name in points["variant"].unique():
        if name != baseline:
            got = ladder_draws.trend_of(points, points[points["variant"] == name], draws)
            out[name] = (got["trend"], got.get("trend_ratio", math.nan), got.get("trend_low", math.nan),
                         got.get("trend_high", math.nan))
    return out


def panel(points: pd.DataFrame, baseline: str, resamples: int, shared=None) -> pd.DataFrame:
    """The trend of every variant's multiplier under each form (one budget's points; the shared floor first): rows
    variant, form, trend, ratio, low, high. A form that cannot be fitted (too few sizes left) is left out.
    `shared`: the shared-floor fit's bootstrap draws, where the fit already drew them (the same seeded draws)."""
    forms = dict(zip(FORMS, (shared_floor, separate_floors, zero_floor)))
    sizes = list(points.sort_values("params_non_embedding")["size"].unique())
    rows = []
    for form, fitter in [*forms.items(), *((f"without {s}", s) for s in sizes)]:
        mine = points
        if isinstance(fitter, str):
            mine, fitter = points[points["size"] != fitter], shared_floor
            if ladder_draws.too_few(mine):
                continue
        try:
            trends = form_trends(mine, baseline, fitter, resamples, shared if form == FORMS[0] else None)
        except RuntimeError:
            continue
        rows += [{"variant": v, "form": form, "trend": t, "ratio": r, "low": lo, "high": hi}
                 for v, (t, r, lo, hi) in trends.items()]
    return pd.DataFrame(rows, columns=["variant", "form", "trend", "ratio", "low", "high"])


def verdict(trends: list[str]) -> str:
    """The panel's reading of one curve: "rises" ("falls") only when every form's trend rises (falls), a crossing
    of 1 counting as its direction; "not resolved" when none resolves; otherwise "form-dependent"."""
    ways = [DIRECTION.get(t, t) for t in trends]
    if ways and ways[0] in AGREE and all(w == ways[0] for w in ways):
        return ways[0]
    return UNRESOLVED if trends and all(t == UNRESOLVED for t in trends) else "form-dependent"


def read_trends(points: pd.DataFrame, group: pd.DataFrame, rows: list[dict], baseline: str, budget, resamples: int,
                panels: list | None, draws=None) -> None:
    """To each curve's row of one budget: its fit-free reading (ladder/trend.py: the paired Δ's slope over ln N,
    both p Holm-adjusted over the budget's variants, as a ladder claim reads them) and, with `panels` (a list the
    budget's panel rows are appended to), the panel's verdict (`draws`: the shared-floor fit's bootstrap)."""
    from mbexp.analysis.ladder.trend import holm_p, ladder_deltas, reading, trend
    from mbexp.analysis.stats import ALPHA

    found = panel(group, baseline, resamples, draws) if panels is not None else None
    if found is not None:
        panels.append(found.assign(budget=budget))
    variants = [row for row in rows if row["variant"] != baseline]
    if budget != "all" and variants:
        got = [trend(ladder_deltas(points, row["variant"], baseline, budget)) for row in variants]
        for row, t, p in zip(variants, got, holm_p(got)):
            row |= {"fit_free": reading(t.slope, p < ALPHA), "fit_free_slope": t.slope, "fit_free_p": p}
    for row in variants:
        if found is not None and (found["variant"] == row["variant"]).any():
            row["panel"] = verdict(list(found.loc[found["variant"] == row["variant"], "trend"]))
