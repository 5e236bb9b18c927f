"""Compute-equivalent multipliers (docs/columns.md#compute-equivalent-multiplier): the compute at which the
baseline, interpolated between its budget branches, reaches a row's loss, over the row's compute."""

import math

import numpy as np
import pandas as pd

from mbexp.analysis.table import Table, cell_runs, losses_at

RESAMPLES = 2000  # paired bootstrap draws of the seeds
LEVEL = 0.95
WITHIN, ABOVE, BELOW = "", "above", "below"  # where the baseline's needed compute lies against its budgets


def needed_log_compute(log_c, losses, target: float) -> tuple[float, str]:
    """The log compute at which the baseline, its loss linear in log compute between budgets (`log_c` ascending),
    reaches `target`, and WITHIN, or ABOVE / BELOW its budgets (extrapolated along the end segment); NaN where the
    segment used does not fall."""
    log_c, losses = np.asarray(log_c, dtype=float), np.asarray(losses, dtype=float)
    for i in range(len(log_c) - 1):
        a, b = losses[i], losses[i + 1]
        if a != b and min(a, b) <= target <= max(a, b):
            return log_c[i] + (target - a) / (b - a) * (log_c[i + 1] - log_c[i]), WITHIN
    if target < losses[-1]:
        i, side = len(log_c) - 2, ABOVE
    elif target > losses[0]:
        i, side = 0, BELOW
    else:
        return math.nan, WITHIN
    slope = (losses[i + 1] - losses[i]) / (log_c[i + 1] - log_c[i])
    if not slope < 0:
        return math.nan, side
    return log_c[i] + (target - losses[i]) / slope, side


def multiplier(compute, base_losses, loss: float, variant_compute: float) -> tuple[float, str]:
    """C_baseline_needed / C_variant: the baseline's compute (its budgets `compute`, mean losses `base_losses`) to
    reach the variant's `loss`, over the variant's compute; and where that lies (needed_log_compute)."""
    order = np.argsort(compute)
    log_needed, side = needed_log_compute(np.log(np.asarray(compute, dtype=float)[order]),
                                          np.asarray(base_losses, dtype=float)[order], loss)
    return math.exp(log_needed - math.log(variant_compute)), side


def bootstrap(compute, base: np.ndarray, variant: np.ndarray, variant_compute: float,
              resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the multiplier over seeds drawn with replacement, paired: row s of `base` (seeds ×
    budgets) and entry s of `variant` are one seed."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(variant), size=(resamples, len(variant)))
    order = np.argsort(compute)
    log_c = np.log(np.asarray(compute, dtype=float)[order])
    needed = _needed_log_computes(log_c, base[draws].mean(axis=1)[:, order], variant[draws].mean(axis=1))
    values = np.array([math.exp(v - math.log(variant_compute)) for v in needed.tolist()])  # libm's exp, as above
    if np.isnan(values).mean() > 1 - LEVEL:  # too many draws where the baseline does not fall
        return math.nan, math.nan
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    return float(low), float(high)


def _needed_log_computes(log_c: np.ndarray, losses: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """needed_log_compute's value for each row of `losses` (budgets in `log_c`'s ascending order) and its
    target, the same arithmetic on every row at once."""
    out = np.full(len(targets), np.nan)
    todo = np.ones(len(targets), bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(len(log_c) - 1):  # the first segment that brackets the target
            a, b = losses[:, i], losses[:, i + 1]
            hit = todo & (a != b) & (np.minimum(a, b) <= targets) & (targets <= np.maximum(a, b))
            out[hit] = log_c[i] + (targets[hit] - a[hit]) / (b[hit] - a[hit]) * (log_c[i + 1] - log_c[i])
            todo &= ~hit
        for i, side in ((len(log_c) - 2, todo & (targets < losses[:, -1])),
                        (0, todo & ~(targets < losses[:, -1]) & (targets > losses[:, 0]))):
            slope = (losses[side, i + 1] - losses[side, i]) / (log_c[i + 1] - log_c[i])
            falls = slope < 0
            rows = np.flatnonzero(side)[falls]
            out[rows] = log_c[i] + (targets[rows] - losses[rows, i]) / slope[falls]
    return out


def bound(compute, variant_compute: float, side: str) -> float:
    """What the budgets show without extrapolating: the largest (ABOVE) or least (BELOW) budget's compute over the
    variant's."""
    return (max(compute) if side == ABOVE else min(compute)) / variant_compute


def row_multiplier(base: pd.DataFrame, compute, variant: pd.Series, variant_compute: float) -> dict:
    """One row's multiplier, interval, side and bound. `base`: the baseline's losses, seeds × budgets (NaN where a
    seed lacks a budget); `variant`: the row's losses by seed. Over the seeds both have at every budget when ≥ 2
    (paired), else over every seed without an interval."""
    seeds = [s for s in variant.index if s in base.index and base.loc[s].notna().all()]
    if len(seeds) >= 2:
        base, variant = base.loc[seeds], variant[seeds]
    point, side = multiplier(compute, base.mean(), variant.mean(), variant_compute)
    low = high = math.nan
    if len(seeds) >= 2:
        low, high = bootstrap(compute, base.to_numpy(), variant.to_numpy(), variant_compute)
    return {"ceq": point, "ceq_low": low, "ceq_high": high, "ceq_extrapolated": side, "ceq_n": len(seeds),
            "ceq_bound": bound(compute, variant_compute, side) if side else math.nan}


def text(row) -> str:
    """The table cell: 0.62× [0.55, 0.70]; extrapolated, what the budgets show and the extrapolation beside it."""
    if pd.isna(row["ceq"]):
        return "—"
    interval = "" if pd.isna(row["ceq_low"]) else f" [{row['ceq_low']:.2f}, {row['ceq_high']:.2f}]"
    shown = f"{row['ceq']:.2f}×{interval}"
    if not row["ceq_extrapolated"]:
        return shown
    sign = ">" if row["ceq_extrapolated"] == ABOVE else "<"
    return f"{sign}{row['ceq_bound']:.2f}× (extrap. {shown})"


def annotate(tables: dict[str, Table]) -> None:
    """Add the multiplier's columns to every table with ≥ 2 train.steps budgets (`add`)."""
    for table in tables.values():
        add(table)


def add(table: Table) -> None:
    """The columns ceq, ceq_low, ceq_high, ceq_extrapolated, ceq_bound and ceq_n (paired seeds) in a table with
    ≥ 2 train.steps budgets: each row at the reference budget against its own baseline's budget branches."""
    if not branched(table):
        return
    found = {}
    for label in table.rows["label"]:
        base = table.baselines.get(label)
        if base is not None and base != label and (m := pair(table, label, base, table.reference)):
            found[label] = m
    frame = pd.DataFrame.from_dict(found, orient="index")
    for key in ("ceq", "ceq_low", "ceq_high", "ceq_extrapolated", "ceq_bound", "ceq_n"):
        default = "" if key == "ceq_extrapolated" else math.nan
        table.rows[key] = table.rows["label"].map(frame[key]).fillna(default) if key in frame else default
    table.rows["ceq_n"] = table.rows["ceq_n"].astype("Int64")


def branched(table: Table) -> bool:
    """Whether the table's columns are ≥ 2 train.steps budgets, the branches a multiplier interpolates between."""
    return table.column == "train.steps" and len(table.columns) >= 2


def pair(table: Table, label: str, base: str, value, seeds=None) -> dict:
    """Row `label` at budget `value` against `base`'s budget branches (row_multiplier), on `seeds` (None: all),
    with ceq_steps, the baseline's steps at the compute it needs; {} where there is nothing to interpolate."""
    if not branched(table):
        return {}
    compute = [_compute(cell_runs(table, base, v)) for v in table.columns]
    losses = pd.DataFrame({v: losses_at(table, base, v) for v in table.columns})
    variant = losses_at(table, label, value)
    if seeds is not None:
        variant = variant[variant.index.isin(seeds)]
        losses = losses[losses.index.isin(seeds)]
    if variant.empty or losses.empty or losses.isna().all().any() or any(math.isnan(c) for c in compute):
        return {}
    variant_compute = _compute(cell_runs(table, label, value))
    out = row_multiplier(losses, compute, variant, variant_compute)
    # the baseline's compute per step is constant across its branches: one budget converts compute to steps
    return out | {"ceq_steps": out["ceq"] * variant_compute * float(table.columns[0]) / compute[0]}


def _compute(runs: pd.DataFrame) -> float:
    """Training compute of a cell's completed runs: FLOPs/token × tokens seen (mean over the runs)."""
    done = runs[runs["status"] == "completed"]
    return float((done["flops_per_token"] * done["tokens_seen"]).mean()) if len(done) else math.nan
