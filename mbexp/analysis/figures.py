"""The table's figures: validation curves, the tuned key, the column axis, and the forest plot of Δ."""

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mbexp.analysis.collect import load_curves
from mbexp.analysis.table import Table, setting, short

LOG_X = ("optim.lr",)  # keys whose figure axis is logarithmic
NAMES = {"optim.warmup_steps": "warmup"}  # a column axis's figure name, when not its short name


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
    """PNG without the version stamp, so the same runs give the same bytes."""
    fig.savefig(path, format="png", metadata={"Software": None})


def _reference_runs(table: Table) -> pd.DataFrame:
    runs = table.runs
    return runs[runs["_col"] == table.reference] if table.column else runs


def plot_curves(table: Table) -> Figure:
    """Validation log-ppl against tokens per variant, at its chosen value and the reference column: mean ± std."""
    at = _reference_runs(table)
    done = at[at["chosen"] & (at["status"] == "completed")]
    curves = load_curves(done["path"]).merge(done[["path", "label"]], left_on="run_dir", right_on="path")
    fig, ax = _figure()
    for i, label in enumerate(table.rows["label"]):
        band = curves[curves["label"] == label].groupby("tokens")["val_loss"].agg(["mean", "std"])
        if not band.empty:
            ax.plot(band.index, band["mean"], label=label, **_style(i))
            spread = band["std"].fillna(0)
            ax.fill_between(band.index, band["mean"] - spread, band["mean"] + spread, color=_style(i)["color"],
                            alpha=0.2, linewidth=0)
    where = f" ({table.column}={setting(table.reference)})" if table.column else ""
    ax.set(xlabel="tokens", ylabel="validation log-ppl (mean ± std over seeds)", title=table.experiment + where)
    return _legend(fig, ax)


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
        ax.errorbar(points.index, points["mean"], yerr=points["std"].fillna(0), marker="o", capsize=3, label=label,
                    **_style(i))
        chosen = runs.loc[runs["chosen"], "_tv"].unique()
        if len(chosen):
            ax.plot(chosen, points.loc[chosen, "mean"], marker="o", markersize=13, fillstyle="none", linestyle="none",
                    color=_style(i)["color"])
    if table.tuned in LOG_X:
        ax.set_xscale("log")
    ax.set(xlabel=f"{table.tuned} (circled: chosen on validation)", ylabel="final validation log-ppl",
           title=table.experiment)
    return _legend(fig, ax)


def plot_column(table: Table) -> Figure:
    """Final reported log-ppl against the column axis per variant, each at its chosen value: mean ± std."""
    done = table.runs[table.runs["chosen"] & (table.runs["status"] == "completed")]
    fig, ax = _figure()
    for i, label in enumerate(table.rows["label"]):
        points = done[done["label"] == label].groupby("_col")[table.report].agg(["mean", "std"])
        if not points.empty:
            ax.errorbar(points.index, points["mean"], yerr=points["std"].fillna(0), marker="o", capsize=3,
                        label=label, **_style(i))
    if table.column in LOG_X:
        ax.set_xscale("log")
    ax.set(xlabel=table.column, ylabel=f"final {table.split} log-ppl", title=table.experiment)
    return _legend(fig, ax)


def plot_forest(table: Table) -> Figure:
    """Each row's Δ vs the baseline with its 95% interval, the zero line and the ±margin band."""
    rows = table.rows[~table.rows["baseline"]].iloc[::-1]
    fig = Figure(figsize=(8, 0.5 + 0.4 * max(len(rows), 2)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    m = table.margin
    ax.axvspan(-m, m, color="0.85", linewidth=0, label=f"±{m:g} (equivalence margin)")
    ax.axvline(0, color="0.3", linewidth=1)
    y = range(len(rows))
    low, high = (rows["delta"] - rows["ci_low"]).fillna(0), (rows["ci_high"] - rows["delta"]).fillna(0)
    ax.errorbar(rows["delta"], y, xerr=[low, high], fmt="o", color="C0", capsize=3)
    ax.set_yticks(list(y), [f"{lab} ({mark})" for lab, mark in zip(rows["label"], rows["mark"])])
    ax.set(xlabel=f"Δ {table.split} log-ppl vs {table.baseline}, 95% CI (< 0: better)",
           title=table.experiment)
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
