"""Size ladders (docs/ladders.md, docs/ladder-fits.md): the ladder's points, per variant and budget a power law
(analysis/ladder/powerlaw.py) on a floor E shared by the budget's variants, the compute multiplier against the
baseline with a bootstrap over seeds, and the largest size predicted from the smaller ones, as a Ladder; rendered by
analysis/ladder/render.py, written by analysis/outputs.py."""

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mbexp.analysis.ladder.draws import (  # noqa: F401 - LEVEL, resampled_means, trend: re-exported
    LEVEL,
    MIN_POINTS,
    RESAMPLES,
    bootstrap,
    interval,
    resampled_means,
    too_few,
    trend,
    trend_of,
)
from mbexp.analysis.ladder.powerlaw import Curve, crossover, fit, multiplier
from mbexp.analysis.ladder.sizes import PER_RUNG, SIZE_KEYS, is_ladder, variant_and_size  # noqa: F401 - re-exported
from mbexp.analysis.table import Table, setting

BUDGET_KEY = "train.steps"


def budgets(points: pd.DataFrame) -> pd.Series:
    """Each point's curve: its budget (train.steps) when budgets are shared by sizes, so that a curve follows the
    size axis at fixed tokens; "all" (one curve per variant over every point) when each budget belongs to one
    size (tokens grown with size, Chinchilla-style)."""
    per_budget = points.groupby("steps")["size"].nunique().max() > 1
    return points["steps"].astype(object) if per_budget else pd.Series("all", index=points.index, dtype=object)


@dataclass
class Ladder:
    """A ladder's fit. `points`: one row per (variant, size, budget) with its per-seed losses and, once fitted,
    the fitted loss, multiplier and interval, and the held-out prediction; `curves`: one row per (variant,
    budget) curve."""

    experiment: str
    split: str
    baseline: str  # the baseline variant
    points: pd.DataFrame
    curves: pd.DataFrame | None = None
    message: str = ""  # why there is no fit
    skipped: list = field(default_factory=list)  # per budget, the variants left out (too few sizes), one line
    held_out_size: str = ""
    held_out_message: str = ""  # why there is no held-out check
    held_out_curves: dict = field(default_factory=dict)  # (variant, budget) -> the curve refit without the largest
    resamples: int = RESAMPLES
    panel: pd.DataFrame | None = None  # the robustness panel: per variant, budget and form, the multiplier's trend


def ladder_points(table: Table) -> tuple[pd.DataFrame, str]:
    """The table's completed runs (at their chosen tuned value) as ladder points, and the baseline variant.
    A variant is a row with its size removed: the runs grouped by identity less SIZE_KEYS, PER_RUNG, the budget
    and the tuned key; its name is the summary's row less the preset's tag (-ladder96)."""
    runs = table.runs[table.runs["chosen"] & (table.runs["status"] == "completed")].copy()
    drop = {*SIZE_KEYS, *PER_RUNG, BUDGET_KEY, table.tuned}
    ident = list(table.runs["identity"])
    runs["_variant"], runs["_size"] = zip(*(variant_and_size(i, drop) for i in runs["identity"])) if len(runs) \
        else ([], [])
    names = _variant_names(runs)
    varying = [k for k in SIZE_KEYS if len({json.dumps(i.get(k)) for i in ident}) > 1]
    records = []
    for (variant, _, steps), group in runs.groupby(["_variant", "_size", "steps"], sort=False):
        first = group["identity"].iloc[0]
        losses = group.set_index("seed")[table.report].astype(float).sort_index()
        records.append({
            "variant": names[variant], "label": group["label"].iloc[0],
            "size": first["model.name"] if "model.name" in varying else
            ", ".join(f"{k.rsplit('.', 1)[-1]}={setting(first.get(k))}" for k in varying),
            "params_non_embedding": group["params_non_embedding"].iloc[0], "steps": int(steps),
            "compute": float((group["flops_per_token"] * group["tokens_seen"]).mean()),
            "losses": losses, "loss": losses.mean(), "std": losses.std(ddof=1), "n": len(losses),
        })
    of_label = dict(zip(runs["label"], runs["_variant"]))
    order = list(dict.fromkeys(names[of_label[label]] for label in table.rows["label"] if label in of_label))
    points = pd.DataFrame(records, columns=["variant", "label", "size", "params_non_embedding", "steps", "compute",
                                            "losses", "loss", "std", "n"])
    points["_order"] = points["variant"].map(order.index)
    points = points.sort_values(["_order", "steps", "params_non_embedding"]).drop(columns="_order")
    base = runs.loc[runs["label"] == table.baseline, "_variant"]
    return points.reset_index(drop=True), names[base.iloc[0]] if len(base) else ""


def _variant_names(runs: pd.DataFrame) -> dict[str, str]:
    """Variant key -> the row less its preset tag, plus key=value where two variants would share a name."""
    named = {}
    for key, group in runs.groupby("_variant", sort=False):
        first = group.iloc[0]
        named[key] = first["row"].removesuffix(f"-{first['identity'].get('model.name')}")
    names = {}
    for key, name in named.items():
        same = [json.loads(k) for k, n in named.items() if n == name]
        own = json.loads(key)
        differ = sorted(k for k in own if len({json.dumps(s.get(k)) for s in same}) > 1)
        names[key] = f"{name} ({', '.join(f'{k}={setting(own[k])}' for k in differ)})" if differ else name
    return names


RESULTS = ("fitted", "residual", "multiplier", "multiplier_low", "multiplier_high", "held_out", "predicted",
           "prediction_error")


def analyse(table: Table, resamples: int = RESAMPLES, panel: bool = True) -> Ladder | None:
    """The ladder's curves (per budget, docs/ladder-fits.md#the-fit), multipliers with their bootstrap intervals,
    lack-of-fit tests, the robustness panel (unless `panel` is False), crossovers and held-out check; None when the
    experiment is not a ladder."""
    if not is_ladder(table):
        return None
    points, baseline = ladder_points(table)
    ladder = Ladder(table.experiment, table.split, baseline, points, resamples=resamples)
    if not baseline:
        ladder.message = f"no fit: the baseline {table.baseline} has no completed run"
        return ladder
    points["budget"] = budgets(points)
    groups, reasons = {}, []
    for b, g in points.groupby("budget", sort=True):  # a variant with too few sizes at a budget is left out there
        if reason := too_few(g):
            reasons.append(f"{_budget_text(b)}: {reason}")
        counts = g.groupby("variant")["compute"].transform("nunique")
        if (counts >= MIN_POINTS).any():
            groups[b] = g.index[(counts >= MIN_POINTS).to_numpy()]
    if not groups:
        ladder.message = "; ".join(reasons)
        return ladder
    ladder.skipped = reasons
    points[list(RESULTS)] = math.nan
    rows, panels = [], []
    for b, idx in groups.items():
        rows += _fit_budget(points, idx, baseline, b, resamples, panels if panel else None)
    ladder.curves = pd.DataFrame(rows)
    ladder.panel = pd.concat(panels, ignore_index=True) if panels else None
    _held_out(ladder, groups)
    _round(ladder)
    return ladder


NATS = ("loss", "std", "fitted", "residual", "predicted", "prediction_error", "E", "rms", "noise")
NAT_DECIMALS = 4  # losses and their differences, in nats
SIGNIFICANT = 3  # every other fitted or bootstrapped number
SHOWN = f".{SIGNIFICANT}g"
SIGNIFICANT_COLUMNS = ("alpha", "A", "crossover", "trend_ratio", "trend_low", "trend_high", "lof_F", "lof_p",
                       "fit_lof_F", "fit_lof_p", "fit_free_slope", "fit_free_p")  # as the markdown shows them


def significant(value: float, digits: int = SIGNIFICANT) -> float:
    """`value` rounded to `digits` significant digits (NaN and ±inf unchanged)."""
    return float(f"{value:.{digits - 1}e}") if math.isfinite(value) else value


def _round(ladder: Ladder) -> None:
    """Every number the fit writes at the precision docs/ladder-fits.md#precision states: far coarser than what a
    1e-9 change of the inputs moves, so each CPU writes the same bytes; the held-out curves too (the figure draws
    them)."""
    for frame in (ladder.points, ladder.curves):
        for column in frame.columns:
            if column in NATS:
                frame[column] = frame[column].astype(float).round(NAT_DECIMALS)
            elif column in (*RESULTS[2:5], *SIGNIFICANT_COLUMNS):
                frame[column] = [significant(float(v)) for v in frame[column]]
    if ladder.panel is not None:
        for column in ("ratio", "low", "high"):
            ladder.panel[column] = [significant(float(v)) for v in ladder.panel[column]]
    ladder.held_out_curves = {key: Curve(round(c.E, NAT_DECIMALS), math.log(significant(c.A)),
                                         significant(c.alpha)) for key, c in ladder.held_out_curves.items()}


def _budget_text(budget) -> str:
    return "pooled over budgets" if budget == "all" else f"{budget} steps"


def _fit_budget(points: pd.DataFrame, idx: pd.Index, baseline: str, budget, resamples: int,
                panels: list | None = None) -> list[dict]:
    """Fit one budget's curves; write the points' fitted loss, multiplier and interval; its curves' rows (with the
    lack-of-fit test, and the robustness panel's verdict, its rows appended to `panels`)."""
    from mbexp.analysis.ladder import checks

    group = points.loc[idx]
    curves, params = fit(group)
    points.loc[idx, "fitted"] = [float(curves[v].loss(c)) for v, c in zip(group["variant"], group["compute"])]
    points.loc[idx, "residual"] = points.loc[idx, "loss"] - points.loc[idx, "fitted"]
    base = curves.get(baseline)
    draws = np.full((1, len(idx)), math.nan)
    if base is not None:
        points.loc[idx, "multiplier"] = [multiplier(base, curves[v], c)
                                         for v, c in zip(group["variant"], group["compute"])]
        draws = bootstrap(group, baseline, params, resamples)
        points.loc[idx, "multiplier_low"], points.loc[idx, "multiplier_high"] = interval(draws)
        own = idx[(group["variant"] == baseline).to_numpy()]
        points.loc[own, ["multiplier", "multiplier_low", "multiplier_high"]] = math.nan
    group = points.loc[idx]
    rows = []
    for name, curve in curves.items():
        mine = group[group["variant"] == name]
        if name == baseline:
            extra = {"crossover": math.nan, "crossover_where": "baseline", "trend": "baseline"}
        elif base is None:
            extra = {"crossover": math.nan, "crossover_where": "no baseline", "trend": "no baseline"}
        else:
            cross, where = crossover(base, curve, group["compute"].min(), group["compute"].max())
            extra = {"crossover": cross, "crossover_where": where, **trend_of(group, mine, draws)}
        own, whole = checks.lack_of_fit(mine, 2), checks.lack_of_fit(group, 2 * len(curves) + 1)
        rows.append({"variant": name, "budget": budget, "alpha": curve.alpha, "E": curve.E, "A": curve.A,
                     "rms": float(np.sqrt(np.mean(mine["residual"] ** 2))), "noise": _noise(group),
                     "points": len(mine), **{f"lof_{k}": v for k, v in own.items()},
                     **{f"fit_lof_{k}": v for k, v in whole.items()}, **extra})
    if base is not None:
        checks.read_trends(points, group, rows, baseline, budget, resamples, panels, draws)
    return rows


def seed_deviations(points: pd.DataFrame) -> np.ndarray:
    """Every run's loss minus its point's mean, scaled by sqrt(n / (n - 1)) so their variance is the seed
    variance (points with one seed have none)."""
    losses = [s.to_numpy() for s in points["losses"] if len(s) > 1]
    return np.concatenate([(s - s.mean()) * math.sqrt(len(s) / (len(s) - 1)) for s in losses] or [[]])


def _noise(points: pd.DataFrame) -> float:
    """The standard error of a point's mean from the pooled seed spread (NaN without a point of 2 seeds)."""
    pool = seed_deviations(points)
    return float(np.sqrt(np.mean(pool**2) / points["n"].mean())) if len(pool) else math.nan


def _held_out(ladder: Ladder, groups: dict) -> None:
    """Refit each budget's curves without the largest size; the prediction at its points and its error against
    the runs' mean."""
    points = ladder.points
    largest = points.loc[points["params_non_embedding"].idxmax(), "size"]
    ladder.held_out_size = largest
    points["held_out"] = points["size"] == largest
    for budget, idx in groups.items():
        kept = points.loc[idx][points.loc[idx, "size"] != largest]
        kept = kept[kept.groupby("variant")["compute"].transform("nunique") >= MIN_POINTS]
        if kept.empty:
            continue
        curves, _ = fit(kept)
        ladder.held_out_curves |= {(v, budget): c for v, c in curves.items()}
        out = idx[(points.loc[idx, "held_out"] & points.loc[idx, "variant"].isin(list(curves))).to_numpy()]
        points.loc[out, "predicted"] = [float(curves[v].loss(c)) for v, c in
                                        zip(points.loc[out, "variant"], points.loc[out, "compute"])]
        points.loc[out, "prediction_error"] = points.loc[out, "predicted"] - points.loc[out, "loss"]
    if not ladder.held_out_curves:
        ladder.held_out_message = f"too few points without {largest} to refit ({MIN_POINTS} sizes per curve " \
                                  "needed)"


def ranking(ladder: Ladder) -> tuple[list[str], list[str]] | None:
    """(predicted, measured) order of the variants, best first, at the held-out size's largest budget."""
    at = ladder.points[ladder.points["held_out"].astype(bool) & ladder.points["predicted"].notna()]
    at = at[at["steps"] == at["steps"].max()] if len(at) else at
    if len(at) < 2:
        return None
    return list(at.sort_values("predicted")["variant"]), list(at.sort_values("loss")["variant"])
