"""The table's figures: validation curves, the tuned key, the column axis, and the forest plot of Δ.

Intervals are drawn only where the table has one (n ≥ 2 seeds); an n = 1 row is a bare point labelled n = 1."""

import math
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.ticker import EngFormatter

from mbexp.analysis import stats
from mbexp.analysis.collect import load_curves
from mbexp.analysis.table import SENSITIVITY_AXES, Table, losses_at, setting, short

LOG_X = ("optim.lr",)  # keys whose figure axis is logarithmic
NAMES = {"optim.warmup_steps": "warmup"}  # a column axis's figure name, when not its short name
PANELS = 8  # more rows than this: the curves become small multiples, one panel per row
INTERVALS = "thin bar: 95% t-interval, thick: 90% (TOST's); per comparison, not Holm-adjusted"


def figures(table: Table) -> dict[str, Figure]:
    """Name -> figure; no figure for an axis with a single value, no forest plot without a comparison."""
    out = {"curves": plot_curves(table)}
    if table.tuned:
        out[f"{short(table.tuned)}_tuned"] = plot_tuned(table)
    if len(table.columns) > 1:
        out[NAMES.get(table.column, short(table.column))] = plot_column(table)
    if len(table.rows) > 1:
        out["forest"] = plot_forest(table)
    return out


def save(fig: Figure, path: Path) -> None:
    """PNG without the version stamp, so the same runs give the same bytes: drawn once, its layout computed in
    that draw, and encoded as savefig encodes it (savefig draws a layout-only pass first: the same pixels)."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    imsave(path, canvas.buffer_rgba(), format="png", metadata={"Software": None}, dpi=fig.dpi)


def _reference_runs(table: Table) -> pd.DataFrame:
    runs = table.runs
    return runs[runs["_col"] == table.reference] if table.column else runs


def plot_curves(table: Table) -> Figure:
    """Validation log-ppl against tokens per variant, at its chosen value and the reference column: mean ± std.
    Beyond PANELS rows, one small panel per row with the baseline in grey behind it."""
    at = _reference_runs(table)
    done = at[at["chosen"] & (at["status"] == "completed")]
    curves = load_curves(done["path"]).merge(done[["path", "label"]], left_on="run_dir", right_on="path")
    bands = {label: curves[curves["label"] == label].groupby("tokens")["val_loss"].agg(["mean", "std"])
             for label in table.rows["label"]}
    where = f" ({table.column}={setting(table.reference)})" if table.column else ""
    ylabel = "validation log-ppl (mean ± std over seeds)"
    if len(bands) <= PANELS:
        fig, ax = _figure()
        for i, (label, band) in enumerate(bands.items()):
            _band(ax, band, label, _style(i))
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.set(xlabel="tokens", ylabel=ylabel, title=table.experiment + where)
        return _legend(fig, ax)
    cols = 4
    rows = math.ceil(len(bands) / cols)
    fig = Figure(figsize=(12, 2.2 * rows + 0.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    base = bands.get(table.baseline, pd.DataFrame())
    for ax, (label, band) in zip(axes, bands.items()):
        if not base.empty and label != table.baseline:
            ax.plot(base.index, base["mean"], color="0.6", linewidth=1)
        _band(ax, band, label, {"color": "C0", "linestyle": "-"})
        ax.set_title(label, fontsize="small")
        ax.xaxis.set_major_formatter(EngFormatter())
    for ax in axes[len(bands):]:
        ax.set_axis_off()
    fig.suptitle(f"{table.experiment}{where}: {ylabel}; grey: baseline {table.baseline}", fontsize="medium")
    fig.supxlabel("tokens", fontsize="small")
    return fig


def _band(ax, band: pd.DataFrame, label: str, style: dict) -> None:
    if band.empty:
        return
    ax.plot(band.index, band["mean"], label=label, **style)
    spread = band["std"].fillna(0)
    ax.fill_between(band.index, band["mean"] - spread, band["mean"] + spread, color=style["color"], alpha=0.2,
                    linewidth=0)


def plot_tuned(table: Table) -> Figure:
    """Final validation log-ppl against the tuned key per variant, seed std as error bars, the choice circled."""
    at = _reference_runs(table)
    done = at[at["status"] == "completed"]
    fig, ax = _figure()
    for i, label in enumerate(table.rows["label"]):
        runs = done[done["label"] == label]
        points = runs.groupby("_tv")["final_val_loss"].agg(["mean", "std"])
        if points.empty:
            continue
        _points(ax, points, label, _style(i))
        chosen = runs.loc[runs["chosen"], "_tv"].unique()
        if len(chosen):
            ax.plot(chosen, points.loc[chosen, "mean"], marker="o", markersize=13, fillstyle="none", linestyle="none",
                    color=_style(i)["color"])
    if table.tuned in LOG_X:
        ax.set_xscale("log")
    ax.set(xlabel=f"{table.tuned} (circled: chosen on validation)", ylabel="final validation log-ppl (± std, n ≥ 2)",
           title=table.experiment)
    return _legend(fig, ax)


def plot_column(table: Table) -> Figure:
    """The column axis: Δ vs the baseline per budget for train.steps; otherwise final log-ppl per value (mean ± std,
    n ≥ 2), and for warm-up a second panel with each row's sensitivity and its 95% interval."""
    if table.column == "train.steps":
        return plot_budget(table)
    done = table.runs[table.runs["chosen"] & (table.runs["status"] == "completed")]
    sensitivity = table.column in SENSITIVITY_AXES and "sensitivity" in table.rows
    extra = 1.0 + 0.4 * len(table.rows) if sensitivity else 0
    fig = Figure(figsize=(8, 4.5 + extra), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, height_ratios=[4.5, extra]) if sensitivity else [fig.add_subplot()]
    ax = axes[0]
    for i, label in enumerate(table.rows["label"]):
        points = done[done["label"] == label].groupby("_col")[table.report].agg(["mean", "std"])
        _points(ax, points, label, _style(i))
    if table.column in LOG_X:
        ax.set_xscale("log")
    ax.set(xlabel=table.column, ylabel=f"final {table.split} log-ppl (mean ± std, n ≥ 2)", title=table.experiment)
    _legend(fig, ax)
    if sensitivity:
        _sensitivity(axes[1], table)
    return fig


def _sensitivity(ax, table: Table) -> None:
    """Each row's warm-up sensitivity with its 95% interval, the zero line and the ±margin band."""
    rows = table.rows.iloc[::-1]
    m = table.margin
    ax.axvspan(-m, m, color="0.85", linewidth=0, label=f"±{m:g} (equivalence margin)")
    ax.axvline(0, color="0.3", linewidth=1)
    for y, (_, row) in enumerate(rows.iterrows()):
        if pd.isna(row["sensitivity_low"]):
            ax.plot(row["sensitivity"], y, "o", color="C0", fillstyle="none")
            continue
        ax.errorbar(row["sensitivity"], y, xerr=[[row["sensitivity"] - row["sensitivity_low"]],
                                                  [row["sensitivity_high"] - row["sensitivity"]]],
                    fmt="o", color="C0", capsize=3)
    ax.set_yticks(list(range(len(rows))), list(rows["label"]))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set(xlabel=f"warm-up sensitivity: {table.split} log-ppl at the smallest warm-up minus at the best "
                  "(95% t-interval over seeds)")
    ax.legend(loc="best", fontsize="small", frameon=False)


def baseline_name(table: Table) -> str:
    """The baseline as a figure names it: its row, or in a ladder its variant at each row's own size."""
    if len(set(table.baselines.values()) - {None}) > 1:
        return "the baseline at the same size"
    return table.baseline


def plot_budget(table: Table) -> Figure:
    """Δ vs the baseline at each budget, per row, with its 95% interval (paired by seed); no lines between
    budgets, whose runs are separate."""
    budgets = table.columns
    own = table.baselines or dict.fromkeys(table.rows["label"], table.baseline)
    rows = [label for label in table.rows["label"] if own.get(label) not in (label, None)]
    fig, ax = _figure()
    width = 0.8 / max(len(rows), 1)
    for i, label in enumerate(rows):
        for j, value in enumerate(budgets):
            iv = stats.compare(losses_at(table, label, value), losses_at(table, own[label], value))
            x = j - 0.4 + width * (i + 0.5)
            if math.isnan(iv.low):
                ax.plot(x, iv.delta, "o", color=_style(i)["color"], fillstyle="none")
            else:
                ax.errorbar(x, iv.delta, yerr=[[iv.delta - iv.low], [iv.high - iv.delta]], fmt="o", capsize=2,
                            color=_style(i)["color"], label=label if j == 0 else None)
    m = table.margin
    ax.axhspan(-m, m, color="0.85", linewidth=0, label=f"±{m:g} (equivalence margin)")
    ax.axhline(0, color="0.3", linewidth=1)
    ax.set_xticks(range(len(budgets)), [f"{setting(v)} steps" for v in budgets])
    ax.set(ylabel=f"Δ {table.split} log-ppl vs {baseline_name(table)}\n(95% t-interval per comparison; < 0: better)",
           title=f"{table.experiment}: Δ vs the baseline per budget")
    return _legend(fig, ax)


def _points(ax, points: pd.DataFrame, label: str, style: dict) -> None:
    """Means joined by a line, with a ± std error bar only where a std exists (n ≥ 2)."""
    if points.empty:
        return
    ax.plot(points.index, points["mean"], marker="o", label=label, **style)
    spread = points["std"].dropna()
    if len(spread):
        ax.errorbar(spread.index, points.loc[spread.index, "mean"], yerr=spread, fmt="none", capsize=3,
                    color=style["color"])


def plot_forest(table: Table) -> Figure:
    """Each row's Δ vs the baseline: 95% and 90% intervals, the per-seed Δ as dots, the zero line and the ±margin
    band; a row without an interval (n = 1) is a hollow point labelled so."""
    rows = table.rows[~table.rows["baseline"]].iloc[::-1]
    means = dict(zip(table.rows["label"], table.rows["final_mean"]))
    own = table.baselines or dict.fromkeys(table.rows["label"], table.baseline)
    fig = Figure(figsize=(9, 1.4 + 0.4 * max(len(rows), 2)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    m = table.margin
    ax.axvspan(-m, m, color="0.85", linewidth=0, label=f"±{m:g} (equivalence margin)")
    ax.axvline(0, color="0.3", linewidth=1)
    names, dots = [], False
    for y, (_, row) in enumerate(rows.iterrows()):
        if pd.isna(row["ci_low"]):  # no Δ without an interval: the difference of the means, drawn hollow
            ax.plot(row["final_mean"] - means.get(own.get(row["label"]), math.nan), y, "o", color="C0",
                    fillstyle="none")
            names.append(f"{row['label']} (n = {int(row['n'])}: no interval)")
            continue
        ax.errorbar(row["delta"], y, xerr=[[row["delta"] - row["ci_low"]], [row["ci_high"] - row["delta"]]],
                    fmt="o", color="C0", capsize=3, linewidth=1)
        ax.plot([row["ci90_low"], row["ci90_high"]], [y, y], color="C0", linewidth=3.5)
        seeds = table.seed_deltas.get(row["label"], pd.Series(dtype=float))
        ax.plot(seeds.to_numpy(), [y + 0.22] * len(seeds), ".", color="0.45", markersize=4,
                label=None if dots else "per-seed Δ (paired)")
        dots = dots or len(seeds) > 0
        names.append(f"{row['label']} ({row['mark']})")
    ax.set_yticks(list(range(len(rows))), names)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    comparisons = int(rows["p"].notna().sum())
    marks = f"marks: Holm over {comparisons} comparisons" if comparisons else "no comparison has an interval"
    ax.set(xlabel=f"Δ {table.split} log-ppl vs {baseline_name(table)} (< 0: better)\n"
                  + INTERVALS.replace("; ", ";\n"),
           title=f"{table.experiment} ({marks})")
    ax.legend(loc="best", fontsize="small", frameon=False)
    return fig


def _figure() -> tuple[Figure, object]:
    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _style(i: int) -> dict:
    """The same colour and line style for a variant in every figure."""
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", ":")[i // 10 % 3]}


def _legend(fig: Figure, ax) -> Figure:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    return fig
