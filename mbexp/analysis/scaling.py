"""Size ladders (docs/table.md, "Ladders"): per variant and budget a saturating power law L(C) = E + A·C^-α of
the final loss against training compute across sizes, on a floor E shared by the budget's variants; the compute
multiplier against the baseline with a bootstrap over seeds; where two curves cross; and the largest size
predicted from the smaller ones."""

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, NullFormatter
from scipy.optimize import OptimizeWarning, curve_fit

from mbexp.analysis.render import fmt
from mbexp.analysis.table import Table, setting
from mbexp.io import atomic_write, write_text

SIZE_KEYS = ("model.name", "model.d_model", "model.n_layers", "model.n_heads")  # what a rung of a ladder changes
BUDGET_KEY = "train.steps"
MIN_POINTS = 3  # per variant: two curve parameters each and the shared floor leave a residual from 3 points
ALPHA_BOUNDS = (1e-6, 2.0)  # α in (0, 2]
E_STARTS = (0.0, 0.5, 0.9)  # the fit starts with E at these fractions of the least loss and keeps the best
RESAMPLES = 200  # bootstrap refits
LEVEL = 0.95
RNG_SEED = 0  # a fixed bootstrap: the same runs give the same bytes
AT_BOUND = 1e-7  # a fitted parameter this close to a bound (relative to max(1, |bound|)) is set to the bound


@dataclass(frozen=True)
class Curve:
    """L(C) = E + A·C^-α, with A kept as log A (C^α overflows nothing in log space)."""

    E: float
    log_A: float
    alpha: float

    @property
    def A(self) -> float:
        return math.exp(self.log_A)

    def loss(self, compute):
        return self.E + np.exp(self.log_A - self.alpha * np.log(compute))

    def compute(self, loss: float) -> float:
        """The compute at which the curve reaches `loss`; inf when `loss` is at or below the floor E."""
        if loss <= self.E:
            return math.inf
        log_c = (self.log_A - math.log(loss - self.E)) / self.alpha
        return math.exp(log_c) if log_c < 700 else math.inf  # e^700 is finite; a flat curve needs "infinite" C


def multiplier(base: Curve, curve: Curve, compute: float) -> float:
    """m = C_base(L(C)) / C: how many times C the baseline needs to reach the loss `curve` has at C (> 1: the
    variant is ahead); inf when that loss is at or below the baseline's floor."""
    return base.compute(float(curve.loss(compute))) / compute


def crossover(base: Curve, curve: Curve, low: float, high: float) -> tuple[float, str]:
    """Where two curves on one floor E cross, solved in closed form (A_v·C^-α_v = A_b·C^-α_b):
    (C, "within") inside [low, high], (C, "beyond") above high, (nan, "none") when they do not cross at C ≥ low."""
    if curve.alpha == base.alpha:
        return math.nan, "none"
    log_c = (curve.log_A - base.log_A) / (curve.alpha - base.alpha)
    if log_c < math.log(low):
        return math.nan, "none"
    return math.exp(min(log_c, 700.0)), "within" if log_c <= math.log(high) else "beyond"  # 700: e^700 is finite


def fit(points: pd.DataFrame, start: np.ndarray | None = None) -> tuple[dict[str, Curve], np.ndarray]:
    """One curve per variant on a shared floor E, least squares on the points' mean losses (columns variant,
    compute, loss); bounded α in (0, 2], E in [0, least loss). Fitted in x = log C − mean(log C) so the
    amplitudes stay O(1). Returns the curves and the parameter vector (a start for the bootstrap's refits)."""
    names = list(dict.fromkeys(points["variant"]))
    which = points["variant"].map(names.index).to_numpy()
    log_c = np.log(points["compute"].to_numpy(float))
    centre = log_c.mean()
    x, y, k = log_c - centre, points["loss"].to_numpy(float), len(names)

    def model(_, e, *ab):
        a, alpha = np.asarray(ab[:k]), np.asarray(ab[k:])
        return e + np.exp(a[which] - alpha[which] * x)

    low = [0.0] + [-np.inf] * k + [ALPHA_BOUNDS[0]] * k
    high = [y.min() * (1 - 1e-9)] + [np.inf] * k + [ALPHA_BOUNDS[1]] * k
    starts = [start] if start is not None else [_start(x, y, which, k, f * y.min()) for f in E_STARTS]
    best, best_sse = None, math.inf
    for p0 in starts:
        try:
            with warnings.catch_warnings():  # no covariance when points = parameters: only the fit is used
                warnings.simplefilter("ignore", OptimizeWarning)
                params, _ = curve_fit(model, np.arange(len(y)), y, p0=np.clip(p0, low, np.nextafter(high, 0)),
                                      bounds=(low, high), max_nfev=2000)
        except RuntimeError:  # no convergence from this start
            continue
        sse = float(np.sum((model(None, *params) - y) ** 2))
        if sse < best_sse:
            best, best_sse = params, sse
    if best is None:
        raise RuntimeError("the power-law fit did not converge")
    best = _polish(best, x, y, which, k, (np.asarray(low), np.asarray(high)))
    e, a, alpha = best[0], best[1:k + 1], best[k + 1:]
    return {n: Curve(float(e), float(a[i] + alpha[i] * centre), float(alpha[i])) for i, n in enumerate(names)}, best


def _polish(params: np.ndarray, x, y, which, k: int, bounds: tuple) -> np.ndarray:
    """The trust-region answer refined by Newton steps in extended precision, a parameter at a bound held there: the
    optimum then depends neither on the BLAS's rounding nor on the solver's stopping point (docs/table.md)."""
    low, high = (np.asarray(b, dtype=np.longdouble) for b in bounds)
    p, x, y = params.astype(np.longdouble), x.astype(np.longdouble), y.astype(np.longdouble)
    fixed = np.zeros(len(p), bool)
    for bound in (low, high):
        near = np.isfinite(bound) & (np.abs(p - bound) <= AT_BOUND * np.maximum(1, np.abs(bound)))
        p[near], fixed[near] = bound[near], True
    damping = 0.0  # Levenberg–Marquardt's, where the Hessian is not positive definite or a step fits worse
    for _ in range(POLISH_STEPS):
        grad, hess = _derivatives(p, x, y, which, k)
        free = np.ix_(~fixed, ~fixed)
        scale = np.diag(hess[free]).max()
        step = np.zeros_like(p)
        solved = _cholesky_solve(hess[free] + damping * scale * np.eye(len(free[0])), grad[~fixed])
        if solved is None or damping > 1e6:
            if damping > 1e6:  # no way down: keep the trust-region answer
                return params
            damping = max(damping * 10, 1e-12)
            continue
        step[~fixed] = solved
        new = np.clip(p - step, low, high)
        if damping and _sse(new, x, y, which, k) > _sse(p, x, y, which, k):
            damping *= 10
            continue
        out = ~fixed & ((p - step < low) | (p - step > high))
        p, fixed, damped = new, fixed | out, damping
        damping = damping / 10 if damping > 1e-12 else 0.0
        if not damped and not out.any() and np.all(np.abs(step) <= 1e-16 * np.maximum(1, np.abs(p))):
            release = fixed & (((p == low) & (grad < 0)) | ((p == high) & (grad > 0)))  # pulled inside: free it
            if not release.any():
                return p.astype(float)
            fixed &= ~release
    return params


POLISH_STEPS = 200


def _model_parts(p, x, which, k):
    g = np.exp(p[1 + which] - p[1 + k + which] * x)
    return p[0] + g, g


def _sse(p, x, y, which, k):
    return np.sum((y - _model_parts(p, x, which, k)[0]) ** 2)


def _derivatives(p, x, y, which, k) -> tuple[np.ndarray, np.ndarray]:
    """The gradient and Hessian of ½·SSE in the parameters (E, log A_1..k, α_1..k)."""
    m, g = _model_parts(p, x, which, k)
    r = y - m
    jac = np.zeros((len(x), len(p)), dtype=p.dtype)  # ∂m/∂p
    rows = np.arange(len(x))
    jac[:, 0] = 1
    jac[rows, 1 + which] = g
    jac[rows, 1 + k + which] = -x * g
    hess = jac.T @ jac
    rg = r * g  # minus Σ r_j ∇²m_j: the model's curvature in (log A_w, α_w)
    for w in range(k):
        a, b, mine = 1 + w, 1 + k + w, which == w
        hess[a, a] -= np.sum(rg[mine])
        hess[a, b] += np.sum(rg[mine] * x[mine])
        hess[b, b] -= np.sum(rg[mine] * x[mine] ** 2)
        hess[b, a] = hess[a, b]
    return -(jac.T @ r), hess


def _cholesky_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """a⁻¹ b by a Cholesky factorisation written out (no LAPACK: its rounding varies by CPU); None unless a is
    positive definite."""
    n = len(b)
    low = np.zeros_like(a)
    for i in range(n):
        for j in range(i + 1):
            s = a[i, j] - np.sum(low[i, :j] * low[j, :j])
            if i == j:
                if not s > 0:
                    return None
                low[i, i] = np.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    z = np.zeros_like(b)
    for i in range(n):
        z[i] = (b[i] - np.sum(low[i, :i] * z[:i])) / low[i, i]
    out = np.zeros_like(b)
    for i in reversed(range(n)):
        out[i] = (z[i] - np.sum(low[i + 1:, i] * out[i + 1:])) / low[i, i]
    return out


def _start(x, y, which, k, e) -> np.ndarray:
    """Per variant, the line through log(L − e) against x: its intercept and minus its slope."""
    a, alpha = np.zeros(k), np.full(k, 0.3)
    for i in range(k):
        xi, zi = x[which == i], np.log(y[which == i] - e)
        if np.ptp(xi) > 0:
            slope, a[i] = np.polyfit(xi, zi, 1)
            alpha[i] = min(max(-slope, 0.01), ALPHA_BOUNDS[1] * 0.9)
        else:
            a[i] = zi.mean()
    return np.concatenate([[e], a, alpha])


def too_few(points: pd.DataFrame) -> str | None:
    """Why these points cannot be fitted (a variant with fewer than MIN_POINTS distinct computes), or None."""
    counts = points.groupby("variant", sort=False)["compute"].nunique()
    short = counts[counts < MIN_POINTS]
    if short.empty:
        return None
    named = ", ".join(f"{v} has {n}" for v, n in short.items())
    return f"too few points to fit L(C) = E + A·C^-α: {named} ({MIN_POINTS} sizes per curve needed)"


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


def is_ladder(table: Table) -> bool:
    """Whether the experiment's runs differ in size (a model.* size key)."""
    return any(len({json.dumps(i.get(k)) for i in table.runs["identity"]}) > 1 for k in SIZE_KEYS)


def ladder_points(table: Table) -> tuple[pd.DataFrame, str]:
    """The table's completed runs (at their chosen tuned value) as ladder points, and the baseline variant.
    A variant is a row with its size removed: the runs grouped by identity less SIZE_KEYS, the budget and the
    tuned key; its name is the summary's row less the preset's tag (-ladder96)."""
    runs = table.runs[table.runs["chosen"] & (table.runs["status"] == "completed")].copy()
    drop = {*SIZE_KEYS, BUDGET_KEY, table.tuned}
    ident = list(table.runs["identity"])
    runs["_variant"] = [json.dumps({k: v for k, v in i.items() if k not in drop}, sort_keys=True)
                        for i in runs["identity"]]
    runs["_size"] = [tuple(json.dumps(i.get(k)) for k in SIZE_KEYS) for i in runs["identity"]]
    names = _variant_names(runs)
    varying = [k for k in SIZE_KEYS if len({json.dumps(i.get(k)) for i in ident}) > 1]
    records = []
    for (variant, _, steps), group in runs.groupby(["_variant", "_size", "steps"], sort=False):
        first = group["identity"].iloc[0]
        losses = group.set_index("seed")[table.report].astype(float).sort_index()
        records.append({
            "variant": names[variant],
            "size": first["model.name"] if "model.name" in varying else
            ", ".join(f"{k.rsplit('.', 1)[-1]}={setting(first.get(k))}" for k in varying),
            "params_non_embedding": group["params_non_embedding"].iloc[0], "steps": int(steps),
            "compute": float((group["flops_per_token"] * group["tokens_seen"]).mean()),
            "losses": losses, "loss": losses.mean(), "std": losses.std(ddof=1), "n": len(losses),
        })
    of_label = dict(zip(runs["label"], runs["_variant"]))
    order = list(dict.fromkeys(names[of_label[label]] for label in table.rows["label"] if label in of_label))
    points = pd.DataFrame(records, columns=["variant", "size", "params_non_embedding", "steps", "compute", "losses",
                                            "loss", "std", "n"])
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


def analyse(table: Table, resamples: int = RESAMPLES) -> Ladder | None:
    """The ladder's curves (per budget, docs/table.md), multipliers with their bootstrap intervals, crossovers and
    held-out check; None when the experiment is not a ladder."""
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
    rows = []
    for b, idx in groups.items():
        rows += _fit_budget(points, idx, baseline, b, resamples)
    ladder.curves = pd.DataFrame(rows)
    _held_out(ladder, groups)
    _round(ladder)
    return ladder


NATS = ("loss", "std", "fitted", "residual", "predicted", "prediction_error", "E", "rms", "noise")
NAT_DECIMALS = 4  # losses and their differences, in nats
SIGNIFICANT = 3  # every other fitted or bootstrapped number
SHOWN = f".{SIGNIFICANT}g"  # as the markdown shows them


def significant(value: float, digits: int = SIGNIFICANT) -> float:
    """`value` rounded to `digits` significant digits (NaN and ±inf unchanged)."""
    return float(f"{value:.{digits - 1}e}") if math.isfinite(value) else value


def _round(ladder: Ladder) -> None:
    """Every number the fit writes at the precision docs/table.md states: far coarser than what a 1e-9 change of
    the inputs moves, so each CPU writes the same bytes; the held-out curves too (the figure draws them)."""
    for frame in (ladder.points, ladder.curves):
        for column in frame.columns:
            if column in NATS:
                frame[column] = frame[column].astype(float).round(NAT_DECIMALS)
            elif column in (*RESULTS[2:5], "alpha", "A", "crossover", "trend_ratio", "trend_low", "trend_high"):
                frame[column] = [significant(float(v)) for v in frame[column]]
    ladder.held_out_curves = {key: Curve(round(c.E, NAT_DECIMALS), math.log(significant(c.A)),
                                         significant(c.alpha)) for key, c in ladder.held_out_curves.items()}


def _budget_text(budget) -> str:
    return "pooled over budgets" if budget == "all" else f"{budget} steps"


def _fit_budget(points: pd.DataFrame, idx: pd.Index, baseline: str, budget, resamples: int) -> list[dict]:
    """Fit one budget's curves; write the points' fitted loss, multiplier and interval; its curves' rows."""
    group = points.loc[idx]
    curves, params = fit(group)
    points.loc[idx, "fitted"] = [float(curves[v].loss(c)) for v, c in zip(group["variant"], group["compute"])]
    points.loc[idx, "residual"] = points.loc[idx, "loss"] - points.loc[idx, "fitted"]
    base = curves.get(baseline)
    draws = np.full((1, len(idx)), math.nan)
    if base is not None:
        points.loc[idx, "multiplier"] = [multiplier(base, curves[v], c)
                                         for v, c in zip(group["variant"], group["compute"])]
        draws = _bootstrap(group, baseline, params, resamples)
        points.loc[idx, "multiplier_low"], points.loc[idx, "multiplier_high"] = _interval(draws)
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
            extra = {"crossover": cross, "crossover_where": where, **_trend(group, mine, draws)}
        rows.append({"variant": name, "budget": budget, "alpha": curve.alpha, "E": curve.E, "A": curve.A,
                     "rms": float(np.sqrt(np.mean(mine["residual"] ** 2))), "noise": _noise(group),
                     "points": len(mine), **extra})
    return rows


def _bootstrap(points: pd.DataFrame, baseline: str, params: np.ndarray, resamples: int) -> np.ndarray:
    """Each point's multiplier (a column) over refits (rows) to resampled means: a point with n seeds gets the
    mean of n seed deviations drawn with replacement from the pool of every point's deviations from its own mean
    (each scaled by sqrt(n_i / (n_i - 1)), so the pool's variance is the seed variance), added to its mean. The
    pool lends a 3-seed point the noise estimate of the whole ladder, where its own 3 seeds would make the
    interval about twice too narrow (t with 2 degrees of freedom against the normal)."""
    rng = np.random.default_rng(RNG_SEED)
    draws = np.full((resamples, len(points)), math.nan)
    losses = [s.to_numpy() for s in points["losses"]]
    pool = seed_deviations(points)
    for b in range(resamples if len(pool) else 0):  # one seed everywhere: no noise estimate, no interval
        means = resampled_means(losses, pool, rng)
        try:
            curves, _ = fit(points.assign(loss=means), start=params)
        except RuntimeError:
            continue
        base = curves[baseline]
        draws[b] = [multiplier(base, curves[v], c) for v, c in zip(points["variant"], points["compute"])]
    return draws


def resampled_means(losses: list, pool: np.ndarray, rng: np.random.Generator) -> list[float]:
    """One bootstrap draw of each point's mean: its mean plus the mean of n deviations drawn from the pool."""
    return [s.mean() + rng.choice(pool, len(s)).mean() for s in losses]


def seed_deviations(points: pd.DataFrame) -> np.ndarray:
    """Every run's loss minus its point's mean, scaled by sqrt(n / (n - 1)) so their variance is the seed
    variance (points with one seed have none)."""
    losses = [s.to_numpy() for s in points["losses"] if len(s) > 1]
    return np.concatenate([(s - s.mean()) * math.sqrt(len(s) / (len(s) - 1)) for s in losses] or [[]])


def _noise(points: pd.DataFrame) -> float:
    """The standard error of a point's mean from the pooled seed spread (NaN without a point of 2 seeds)."""
    pool = seed_deviations(points)
    return float(np.sqrt(np.mean(pool**2) / points["n"].mean())) if len(pool) else math.nan


def _interval(draws: np.ndarray) -> tuple:
    """The LEVEL percentile interval of each column (NaN where no refit converged)."""
    tail = (1 - LEVEL) / 2 * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN, as it should be
        return tuple(np.nanpercentile(draws, [tail, 100 - tail], axis=0))


def _trend(group: pd.DataFrame, mine: pd.DataFrame, draws: np.ndarray) -> dict:
    """How a variant's multiplier moves from its smallest to its largest size, at its largest budget: the ratio
    m(largest) / m(smallest) with its bootstrap interval (the same refits; draws' columns follow `group`'s rows),
    read by `trend`."""
    top = mine[mine["steps"] == mine["steps"].max()]
    first, last = top["params_non_embedding"].idxmin(), top["params_non_embedding"].idxmax()
    if first == last:
        return {"trend": "one size"}
    cols = [group.index.get_loc(first), group.index.get_loc(last)]
    low, high = _interval(draws[:, [cols[1]]] / draws[:, [cols[0]]])
    m = group["multiplier"]
    ends = [(m[i], group.at[i, "multiplier_low"], group.at[i, "multiplier_high"]) for i in (first, last)]
    ratio = (m[last] / m[first], low[0], high[0])
    return {"trend": trend(*ends, ratio), "trend_ratio": ratio[0], "trend_low": low[0], "trend_high": high[0],
            "trend_from": group.at[first, "size"], "trend_to": group.at[last, "size"]}


def trend(first: tuple, last: tuple, ratio: tuple) -> str:
    """The multiplier's move along the ladder, from (m, low, high) at the smallest and at the largest size and
    (ratio, low, high) of m(largest) / m(smallest): crosses 1 (both ends resolved, on either side of 1), rises or
    falls (the ratio's interval excludes 1), or not resolved."""
    if first[2] < 1 < last[1]:
        return "crosses 1 upward"
    if first[1] > 1 > last[2]:
        return "crosses 1 downward"
    return "rises" if ratio[1] > 1 else "falls" if ratio[2] < 1 else "not resolved"


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


# --- text -----------------------------------------------------------------------------------------------------


LEGEND = ("α, E, A: the fitted L(C) = E + A·C^-α (bounded α in (0, 2], E in [0, least mean loss); at bound: the "
          "data did not pin it). RMS resid.: root mean square of mean loss − fitted loss over the curve's points, "
          "in nats, and its ratio to a point's seed noise (the pooled seed s.d. over √n; ≫ 1: the curve does not "
          "fit). Multiplier m = C_base(L_v(C)) / C, with C_base the baseline curve solved for the loss and L_v "
          "the variant's fitted loss at its own compute C (> 1: the baseline needs m times the compute to match; ∞: "
          "below the baseline's floor); its interval: a bootstrap over seeds drawing from the budget's pooled seed "
          "deviations. m along the ladder: m(largest size) / m(smallest size) on the curve, with its interval from "
          "the same refits; rises / falls when that interval excludes 1, crosses 1 when both ends' intervals are "
          "resolved on either side of 1. Crossover: the compute where the variant's and the baseline's curves "
          "cross, within or beyond the budget's compute range (none: at no compute the ladder reaches or above). "
          "Held-out error: the prediction minus the runs' mean (docs/table.md, \"Ladders\").")


def to_markdown(ladder: Ladder) -> str:
    """The fit in markdown: the curves, the multipliers per ladder point, the held-out check, a legend."""
    if ladder.message:
        return f"**{ladder.experiment}**: {ladder.message}.\n"
    points, curves, base = ladder.points, ladder.curves, ladder.baseline
    fitted = points[points["fitted"].notna()]
    sizes = f"{fitted['size'].nunique()} sizes"
    shape = f"one curve per variant and budget (train.steps) across {sizes}, C growing with size" \
        if (curves["budget"] != "all").all() else f"one curve per variant over every point ({sizes}, own budgets)"
    lines = [f"**{ladder.experiment}** — L(C) = E + A·C^-α, {shape}; fitted to the mean final {ladder.split} log-ppl "
             f"over seeds at {len(fitted)} points, the floor E shared by the variants of a budget; C = FLOPs/token × "
             f"tokens seen; baseline `{base}`.", "",
             "| variant | steps | α | E (shared) | A | RMS resid. | points | crossover vs baseline "
             "| m along the ladder |",
             "|:---|---:|---:|---:|---:|---:|---:|:---|:---|"]
    for _, c in curves.iterrows():
        where = c["crossover_where"]
        cross = f"{c['crossover']:.3g} FLOPs ({where} the data)" if where in ("within", "beyond") else where
        least = fitted.loc[fitted["budget"] == c["budget"], "loss"].min()
        lines.append(f"| {c['variant']} | {c['budget']} | {c['alpha']:.3f}{_bound(c['alpha'], ALPHA_BOUNDS)} | "
                     f"{c['E']:.3f}{_bound(c['E'], (0.0, least))} | {c['A']:.4g} | {_rms_cell(c)} | "
                     f"{c['points']} | {cross} | {_trend_cell(c)} |")
    lines += [f"\nLeft out: {line}." for line in ladder.skipped]
    others = [v for v in dict.fromkeys(curves["variant"]) if v != base]
    if others:
        how = f"{LEVEL:.0%} bootstrap interval over seeds, {ladder.resamples} refits" if fitted["n"].max() > 1 \
            else "no interval: one seed per point"
        lines += ["", f"Compute multiplier vs `{base}` ({how}):", "",
                  "| size | non-emb. params | steps | " + " | ".join(others) + " |",
                  "|:---|---:|---:|" + "---:|" * len(others)]
        for (size, steps), group in fitted.groupby(["size", "steps"], sort=False):
            cells = []
            for v in others:
                hit = group[group["variant"] == v]
                cells.append("—" if hit.empty else multiplier_cell(hit.iloc[0]))
            params = fmt(group["params_non_embedding"].iloc[0], ",.0f")
            lines.append(f"| {size} | {params} | {steps} | " + " | ".join(cells) + " |")
    lines += ["", *_held_out_lines(ladder), "", LEGEND]
    return "\n".join(lines) + "\n"


def _trend_cell(curve: pd.Series) -> str:
    if "trend_ratio" not in curve or pd.isna(curve["trend_ratio"]):
        return curve["trend"]
    return f"{curve['trend']}: {curve['trend_from']} → {curve['trend_to']} ×{fmt(curve['trend_ratio'], SHOWN)} " \
           f"[{fmt(curve['trend_low'], SHOWN)}, {fmt(curve['trend_high'], SHOWN)}]"


def _rms_cell(curve: pd.Series) -> str:
    """The residual, and how many times a point's seed noise it is (a curve that fits: about 1)."""
    ratio = "" if pd.isna(curve["noise"]) else f" ({curve['rms'] / curve['noise']:.1f}× noise)"
    return f"{curve['rms']:.4f}{ratio}"


def _bound(value: float, bounds: tuple[float, float]) -> str:
    """A mark for a fitted value at its bound: the data did not pin it down."""
    return " (at bound)" if any(math.isclose(value, b, rel_tol=1e-6, abs_tol=1e-9) for b in bounds) else ""


def multiplier_cell(point: pd.Series) -> str:
    """`1.78 [0.923, 5.02]`: a point's multiplier and its bootstrap interval (none with one seed)."""
    if pd.isna(point["multiplier_low"]):
        return fmt(point["multiplier"], SHOWN)
    return f"{fmt(point['multiplier'], SHOWN)} [{fmt(point['multiplier_low'], SHOWN)}, " \
           f"{fmt(point['multiplier_high'], SHOWN)}]"


def _held_out_lines(ladder: Ladder) -> list[str]:
    size = ladder.held_out_size
    if ladder.held_out_message:
        return [f"Held-out check: {ladder.held_out_message}."]
    out = ladder.points[ladder.points["held_out"].astype(bool) & ladder.points["fitted"].notna()]
    lines = [f"Held-out check: every curve refit without {size}, then predicted at {size}:", "",
             "| variant | steps | compute | runs' mean (n) | predicted | error |", "|:---|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['variant']} | {p['steps']} | {p['compute']:.3g} | {p['loss']:.3f} ({p['n']}) | "
              f"{fmt(p['predicted'], '.3f')} | {fmt(p['prediction_error'], '+.3f')} |" for _, p in out.iterrows()]
    ranks = ranking(ladder)
    if ranks:
        predicted, measured = ranks
        steps = out["steps"].max()
        verdict = "right" if predicted == measured else "wrong"
        lines += ["", f"Ranking at {size}, {steps} steps, predicted {verdict}: predicted {' < '.join(predicted)}; "
                      f"measured {' < '.join(measured)}."]
    return lines


def to_csv(ladder: Ladder) -> str:
    """Every point with its fit, multiplier and held-out prediction, and its curve's parameters."""
    points = ladder.points.drop(columns="losses").merge(ladder.curves, on=["variant", "budget"], how="left")
    points.insert(0, "experiment", ladder.experiment)
    points.insert(2, "baseline", points["variant"] == ladder.baseline)
    return points.to_csv(index=False, float_format="%.6g", lineterminator="\n")


# --- figure -------------------------------------------------------------------------------------------------------


def plot(ladder: Ladder) -> Figure:
    """Loss against compute on log-log axes, one colour per variant: per-seed points, each budget's fitted curve
    (solid; fainter for the smaller budgets), the curves refit without the largest size (dashed) and that size's
    means ringed."""
    fig = Figure(figsize=(9, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = ladder.points
    colours = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(points["variant"]))}
    for _, p in points.iterrows():
        ax.plot([p["compute"]] * p["n"], p["losses"], marker="o", markersize=3, linestyle="none", alpha=0.5,
                color=colours[p["variant"]])
    out = points[points["held_out"].astype(bool)]
    for variant, group in out.groupby("variant", sort=False):
        ax.plot(group["compute"], group["loss"], marker="o", markersize=11, fillstyle="none", linestyle="none",
                color=colours[variant])
    budgets_ = list(dict.fromkeys(ladder.curves["budget"]))
    for _, c in ladder.curves.iterrows():
        key = (c["variant"], c["budget"])
        mine = points[(points["variant"] == c["variant"]) & (points["budget"] == c["budget"])]
        grid = np.geomspace(mine["compute"].min() / 1.2, mine["compute"].max() * 1.2, 100)
        fade = 1.0 if c["budget"] == budgets_[-1] else 0.45
        where = "" if c["budget"] == "all" else f", {c['budget']} steps"
        ax.plot(grid, _curve(c).loss(grid), color=colours[c["variant"]], alpha=fade,
                label=f"{c['variant']}{where} (α={c['alpha']:.3f})")
        if key in ladder.held_out_curves:
            ax.plot(grid, ladder.held_out_curves[key].loss(grid), color=colours[c["variant"]], alpha=fade,
                    linestyle="--", linewidth=1)
    for variant in [v for v in colours if v not in set(ladder.curves["variant"])]:  # in order: stable bytes
        ax.plot([], [], marker="o", markersize=3, linestyle="none", color=colours[variant],
                label=f"{variant} (too few sizes to fit)")
    ax.plot([], [], color="0.4", linestyle="--", linewidth=1, label=f"refit without {ladder.held_out_size}")
    ax.plot([], [], marker="o", markersize=11, fillstyle="none", linestyle="none", color="0.4",
            label=f"held out: {ladder.held_out_size} (mean)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    for ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):  # a loss spans < 1 decade
        ticks(FormatStrFormatter("%.1f"))
    ax.set(xlabel="training compute C (FLOPs)", ylabel=f"final {ladder.split} log-ppl (per seed)",
           title=f"{ladder.experiment}: L(C) = E + A·C^-α (E shared within a budget)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig


def _curve(row: pd.Series) -> Curve:
    return Curve(row["E"], math.log(row["A"]), row["alpha"])


# --- files ----------------------------------------------------------------------------------------------------------


def write(results_dir, table: Table) -> list[Path]:
    """For a ladder: tables/<exp>_fit.md (and .csv) and figures/<exp>_ladder.png; nothing otherwise. Too few points
    to fit: the .md holds one line saying so, and nothing else is written."""
    ladder = analyse(table)
    if ladder is None:
        return []
    tables_dir, figures_dir = Path(results_dir, "tables"), Path(results_dir, "figures")
    paths = [tables_dir / f"{ladder.experiment}_fit.md"]
    write_text(paths[0], to_markdown(ladder))
    if ladder.message:
        return paths
    paths.append(tables_dir / f"{ladder.experiment}_fit.csv")
    write_text(paths[-1], to_csv(ladder))
    paths.append(figures_dir / f"{ladder.experiment}_ladder.png")
    fig = plot(ladder)
    atomic_write(paths[-1], lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}))
    return paths
