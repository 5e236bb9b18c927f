"""Size ladders (docs/table.md, "Ladders"): per variant a saturating power law L(C) = E + A·C^-α of the final
loss against training compute, on one shared floor E; the compute multiplier against the baseline with a
bootstrap over seeds; where two curves cross; and the largest size predicted from the smaller ones."""

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, NullFormatter
from scipy.optimize import curve_fit

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
        return math.exp((self.log_A - math.log(loss - self.E)) / self.alpha)


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
    return math.exp(log_c), "within" if log_c <= math.log(high) else "beyond"


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
            params, _ = curve_fit(model, np.arange(len(y)), y, p0=np.clip(p0, low, np.nextafter(high, 0)),
                                  bounds=(low, high), max_nfev=2000)
        except RuntimeError:  # no convergence from this start
            continue
        sse = float(np.sum((model(None, *params) - y) ** 2))
        if sse < best_sse:
            best, best_sse = params, sse
    if best is None:
        raise RuntimeError("the power-law fit did not converge")
    e, a, alpha = best[0], best[1:k + 1], best[k + 1:]
    return {n: Curve(float(e), float(a[i] + alpha[i] * centre), float(alpha[i])) for i, n in enumerate(names)}, best


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
    return f"too few points to fit L(C) = E + A·C^-α: {named} (sizes × budgets; {MIN_POINTS} per variant needed)"


@dataclass
class Ladder:
    """A ladder's fit. `points`: one row per (variant, size, budget) with its per-seed losses and, once fitted,
    the fitted loss, multiplier and interval, and the held-out prediction; `curves`: one row per variant."""

    experiment: str
    split: str
    baseline: str  # the baseline variant
    points: pd.DataFrame
    curves: pd.DataFrame | None = None
    message: str = ""  # why there is no fit
    held_out_size: str = ""
    held_out_message: str = ""  # why there is no held-out check
    held_out_curves: dict | None = None  # the curves refit without the largest size
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
    points = points.sort_values(["_order", "params_non_embedding", "steps"]).drop(columns="_order")
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


def analyse(table: Table, resamples: int = RESAMPLES) -> Ladder | None:
    """The ladder's fit, multipliers with their bootstrap intervals, crossovers and held-out check; None when the
    experiment is not a ladder."""
    if not is_ladder(table):
        return None
    points, baseline = ladder_points(table)
    ladder = Ladder(table.experiment, table.split, baseline, points, resamples=resamples)
    ladder.message = too_few(points) or ("" if baseline else f"the baseline {table.baseline} has no completed run")
    if ladder.message:
        return ladder
    curves, params = fit(points)
    points["fitted"] = [float(curves[v].loss(c)) for v, c in zip(points["variant"], points["compute"])]
    points["residual"] = points["loss"] - points["fitted"]
    base = curves[baseline]
    points["multiplier"] = [multiplier(base, curves[v], c) for v, c in zip(points["variant"], points["compute"])]
    draws = _bootstrap(points, baseline, params, resamples)
    points["multiplier_low"], points["multiplier_high"] = _interval(draws)
    points.loc[points["variant"] == baseline, ["multiplier", "multiplier_low", "multiplier_high"]] = math.nan
    c_low, c_high = points["compute"].min(), points["compute"].max()
    rows = []
    for name, curve in curves.items():
        mine = points[points["variant"] == name]
        cross, where = crossover(base, curve, c_low, c_high) if name != baseline else (math.nan, "baseline")
        rows.append({"variant": name, "alpha": curve.alpha, "E": curve.E, "A": curve.A,
                     "rms": float(np.sqrt(np.mean(mine["residual"] ** 2))), "points": len(mine),
                     "crossover": cross, "crossover_where": where,
                     **(_trend(points, mine, draws) if name != baseline else {"trend": "baseline"})})
    ladder.curves = pd.DataFrame(rows)
    _held_out(ladder)
    return ladder


def _bootstrap(points: pd.DataFrame, baseline: str, params: np.ndarray, resamples: int) -> np.ndarray:
    """Each point's multiplier (a column) over refits (rows) to seed-resampled means: seeds drawn with
    replacement within each point, the draw's deviation from the mean scaled by sqrt(n / (n - 1)) so that its
    variance is s²/n, not the plain bootstrap's (n - 1)/n of it (a one-seed point does not vary)."""
    rng = np.random.default_rng(RNG_SEED)
    draws = np.full((resamples, len(points)), math.nan)
    losses = [s.to_numpy() for s in points["losses"]]
    inflate = [math.sqrt(len(s) / (len(s) - 1)) if len(s) > 1 else 0.0 for s in losses]
    for b in range(resamples if max(map(len, losses)) > 1 else 0):  # one seed everywhere: nothing to resample
        means = [s.mean() + k * (rng.choice(s, len(s)).mean() - s.mean()) for s, k in zip(losses, inflate)]
        try:
            curves, _ = fit(points.assign(loss=means), start=params)
        except RuntimeError:
            continue
        base = curves[baseline]
        draws[b] = [multiplier(base, curves[v], c) for v, c in zip(points["variant"], points["compute"])]
    return draws


def _interval(draws: np.ndarray) -> tuple:
    """The LEVEL percentile interval of each column (NaN where no refit converged)."""
    tail = (1 - LEVEL) / 2 * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN, as it should be
        return tuple(np.nanpercentile(draws, [tail, 100 - tail], axis=0))


def _trend(points: pd.DataFrame, mine: pd.DataFrame, draws: np.ndarray) -> dict:
    """How a variant's multiplier moves from its smallest to its largest size, at its largest budget: the ratio
    m(largest) / m(smallest) with its bootstrap interval (the same refits), read by `trend`."""
    top = mine[mine["steps"] == mine["steps"].max()]
    first, last = top.index[0], top.index[-1]  # points are sorted by size
    if first == last:
        return {"trend": "one size"}
    low, high = _interval(draws[:, [last]] / draws[:, [first]])
    m = points["multiplier"]
    ends = [(m[i], points.at[i, "multiplier_low"], points.at[i, "multiplier_high"]) for i in (first, last)]
    ratio = (m[last] / m[first], low[0], high[0])
    return {"trend": trend(*ends, ratio), "trend_ratio": ratio[0], "trend_low": low[0],
            "trend_high": high[0], "trend_from": points.at[first, "size"], "trend_to": points.at[last, "size"]}


def trend(first: tuple, last: tuple, ratio: tuple) -> str:
    """The multiplier's move along the ladder, from (m, low, high) at the smallest and at the largest size and
    (ratio, low, high) of m(largest) / m(smallest): crosses 1 (both ends resolved, on either side of 1), rises or
    falls (the ratio's interval excludes 1), or not resolved."""
    if first[2] < 1 < last[1]:
        return "crosses 1 upward"
    if first[1] > 1 > last[2]:
        return "crosses 1 downward"
    return "rises" if ratio[1] > 1 else "falls" if ratio[2] < 1 else "not resolved"


def _held_out(ladder: Ladder) -> None:
    """Refit without the largest size; the prediction at its points and its error against the runs' mean."""
    points = ladder.points
    largest = points.loc[points["params_non_embedding"].idxmax(), "size"]
    ladder.held_out_size = largest
    kept = points[points["size"] != largest]
    points["held_out"] = points["size"] == largest
    points["predicted"] = points["prediction_error"] = math.nan
    if kept["size"].nunique() < 2 or too_few(kept):
        ladder.held_out_message = f"too few points without {largest} to refit (" \
                                  f"{MIN_POINTS} per variant needed, from at least 2 sizes)"
        return
    curves, _ = fit(kept)
    ladder.held_out_curves = curves
    out = points["held_out"] & points["variant"].isin(list(curves))
    points.loc[out, "predicted"] = [float(curves[v].loss(c)) for v, c in
                                    zip(points.loc[out, "variant"], points.loc[out, "compute"])]
    points.loc[out, "prediction_error"] = points.loc[out, "predicted"] - points.loc[out, "loss"]


def ranking(ladder: Ladder) -> tuple[list[str], list[str]] | None:
    """(predicted, measured) order of the variants, best first, at the held-out size's largest budget."""
    at = ladder.points[ladder.points["held_out"] & ladder.points["predicted"].notna()]
    at = at[at["steps"] == at["steps"].max()] if len(at) else at
    if len(at) < 2:
        return None
    return list(at.sort_values("predicted")["variant"]), list(at.sort_values("loss")["variant"])


# --- text -----------------------------------------------------------------------------------------------------


def _num(x, spec: str) -> str:
    return "—" if x is None or pd.isna(x) else "∞" if math.isinf(x) else format(x, spec)


LEGEND = ("α, E, A: the fitted L(C) = E + A·C^-α (bounded α in (0, 2], E in [0, least mean loss); at bound: the "
          "data did not pin it). RMS resid.: root mean square of mean loss − fitted loss over the variant's points, "
          "in nats. Multiplier m = C_base(L_v(C)) / C, with C_base the baseline curve solved for the loss and L_v "
          "the variant's fitted loss at its own compute C (> 1: the baseline needs m times the compute to match; ∞: "
          "below the baseline's floor). m along the ladder: m(largest size) / m(smallest size) at the largest "
          "budget with its interval from the same refits; rises / falls when that interval excludes 1, crosses 1 "
          "when both ends' intervals are resolved on either side of 1. Crossover: the compute where the variant's "
          "and the baseline's curves cross, within or beyond the data's compute range (none: at no compute the "
          "ladder reaches or above). Held-out error: the prediction minus the runs' mean (docs/table.md, "
          "\"Ladders\").")


def to_markdown(ladder: Ladder) -> str:
    """The fit in markdown: the curves, the multipliers per ladder point, the held-out check, a legend."""
    if ladder.message:
        return f"**{ladder.experiment}**: {ladder.message}.\n"
    points, curves, base = ladder.points, ladder.curves, ladder.baseline
    n = f"{len(points)} points ({points['size'].nunique()} sizes × {points['steps'].nunique()} budgets)"
    lines = [f"**{ladder.experiment}** — L(C) = E + A·C^-α per variant, fitted to the mean final {ladder.split} "
             f"log-ppl over seeds at {n}, one floor E shared by every variant; C = FLOPs/token × tokens seen; "
             f"baseline `{base}`.", "",
             "| variant | α | E (shared) | A | RMS resid. | points | crossover vs baseline | m along the ladder |",
             "|:---|---:|---:|---:|---:|---:|:---|:---|"]
    for _, c in curves.iterrows():
        where = c["crossover_where"]
        cross = f"{c['crossover']:.3g} FLOPs ({where} the data)" if where in ("within", "beyond") else where
        lines.append(f"| {c['variant']} | {c['alpha']:.3f}{_bound(c['alpha'], ALPHA_BOUNDS)} | "
                     f"{c['E']:.3f}{_bound(c['E'], (0.0, points['loss'].min()))} | {c['A']:.4g} | {c['rms']:.4f} | "
                     f"{c['points']} | {cross} | {_trend_cell(c)} |")
    others = [v for v in curves["variant"] if v != base]
    if others:
        how = f"{LEVEL:.0%} bootstrap interval over seeds, {ladder.resamples} refits" if points["n"].max() > 1 \
            else "no interval: one seed per point"
        lines += ["", f"Compute multiplier vs `{base}` ({how}):", "",
                  "| size | non-emb. params | steps | " + " | ".join(others) + " |",
                  "|:---|---:|---:|" + "---:|" * len(others)]
        for (size, steps), group in points.groupby(["size", "steps"], sort=False):
            cells = []
            for v in others:
                hit = group[group["variant"] == v]
                cells.append("—" if hit.empty else _multiplier_cell(hit.iloc[0]))
            params = _num(group["params_non_embedding"].iloc[0], ",.0f")
            lines.append(f"| {size} | {params} | {steps} | " + " | ".join(cells) + " |")
    lines += ["", *_held_out_lines(ladder), "", LEGEND]
    return "\n".join(lines) + "\n"


def _trend_cell(curve: pd.Series) -> str:
    if "trend_ratio" not in curve or pd.isna(curve["trend_ratio"]):
        return curve["trend"]
    return f"{curve['trend']}: {curve['trend_from']} → {curve['trend_to']} ×{curve['trend_ratio']:.2f} " \
           f"[{_num(curve['trend_low'], '.2f')}, {_num(curve['trend_high'], '.2f')}]"


def _bound(value: float, bounds: tuple[float, float]) -> str:
    """A mark for a fitted value at its bound: the data did not pin it down."""
    return " (at bound)" if any(math.isclose(value, b, rel_tol=1e-6, abs_tol=1e-9) for b in bounds) else ""


def _multiplier_cell(point: pd.Series) -> str:
    if pd.isna(point["multiplier_low"]):
        return _num(point["multiplier"], ".2f")
    return f"{_num(point['multiplier'], '.2f')} [{_num(point['multiplier_low'], '.2f')}, " \
           f"{_num(point['multiplier_high'], '.2f')}]"


def _held_out_lines(ladder: Ladder) -> list[str]:
    size = ladder.held_out_size
    if ladder.held_out_message:
        return [f"Held-out check: {ladder.held_out_message}."]
    out = ladder.points[ladder.points["held_out"]]
    lines = [f"Held-out check: every curve refit without {size}, then predicted at {size}:", "",
             "| variant | steps | compute | runs' mean (n) | predicted | error |", "|:---|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['variant']} | {p['steps']} | {p['compute']:.3g} | {p['loss']:.3f} ({p['n']}) | "
              f"{_num(p['predicted'], '.3f')} | {_num(p['prediction_error'], '+.3f')} |" for _, p in out.iterrows()]
    ranks = ranking(ladder)
    if ranks:
        predicted, measured = ranks
        steps = out["steps"].max()
        verdict = "right" if predicted == measured else "wrong"
        lines += ["", f"Ranking at {size}, {steps} steps, predicted {verdict}: predicted {' < '.join(predicted)}; "
                      f"measured {' < '.join(measured)}."]
    return lines


def to_csv(ladder: Ladder) -> str:
    """Every point with its fit, multiplier and held-out prediction, and its variant's curve."""
    points = ladder.points.drop(columns="losses").merge(ladder.curves, on="variant", how="left")
    points.insert(0, "experiment", ladder.experiment)
    points.insert(2, "baseline", points["variant"] == ladder.baseline)
    return points.to_csv(index=False, float_format="%.6g", lineterminator="\n")


# --- figure -------------------------------------------------------------------------------------------------------


def plot(ladder: Ladder) -> Figure:
    """Loss against compute on log-log axes: per-seed points, the fitted curves (solid), the curves refit without
    the largest size (dashed) and that size's points ringed."""
    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = ladder.points
    grid = np.geomspace(points["compute"].min() / 1.2, points["compute"].max() * 1.2, 200)
    held = ladder.held_out_curves or {}
    for i, (name, curve) in enumerate(_curves(ladder).items()):
        colour = f"C{i % 10}"
        mine = points[points["variant"] == name]
        seeds = [(c, loss) for c, s in zip(mine["compute"], mine["losses"]) for loss in s]
        ax.plot(*zip(*seeds), marker="o", markersize=3, linestyle="none", alpha=0.5, color=colour)
        ax.plot(grid, curve.loss(grid), color=colour, label=f"{name} (α={curve.alpha:.3f})")
        if name in held:
            ax.plot(grid, held[name].loss(grid), color=colour, linestyle="--", linewidth=1)
        out = mine[mine["held_out"]]
        ax.plot(out["compute"], out["loss"], marker="o", markersize=11, fillstyle="none", linestyle="none",
                color=colour)
    ax.plot([], [], color="0.4", linestyle="--", linewidth=1, label=f"refit without {ladder.held_out_size}")
    ax.plot([], [], marker="o", markersize=11, fillstyle="none", linestyle="none", color="0.4",
            label=f"held out: {ladder.held_out_size} (mean)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    for ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):  # a loss spans < 1 decade
        ticks(FormatStrFormatter("%.1f"))
    ax.set(xlabel="training compute C (FLOPs)", ylabel=f"final {ladder.split} log-ppl (per seed)",
           title=f"{ladder.experiment}: L(C) = E + A·C^-α, E = {ladder.curves['E'].iloc[0]:.3f} shared")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig


def _curves(ladder: Ladder) -> dict[str, Curve]:
    return {c["variant"]: Curve(c["E"], math.log(c["A"]), c["alpha"]) for _, c in ladder.curves.iterrows()}


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
