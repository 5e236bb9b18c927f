"""The results table (DESIGN.md §7): run summaries reduced to one row per variant, per experiment."""

import json
import logging
import math
import re
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from mbexp.ffn import FFNS, HIDDEN_RULES
from mbexp.io import write_text
from mbexp.model import PLACEMENTS
from mbexp.norms import NORMS

log = logging.getLogger(__name__)

AXES = {"norm": tuple(NORMS), "placement": PLACEMENTS, "ffn": FFNS, "hidden": HIDDEN_RULES}  # row order
SHAZEER = {"ffn": "relu", "norm": "layer", "placement": "pre"}  # the default baseline, hidden=matched breaks ties
STATUSES = ("running", "interrupted", "failed", "diverged", "completed")  # a later one wins for a repeated seed
FINISHED = ("completed", "diverged")
NOISE = "≈"
STRINGS = ("status", "experiment", "variant", "row", "row_id")
NUMBERS = ("params", "d_ff", "early_val_loss", "final_val_loss", "final_val_bpb", "tokens_per_s", "step")  # or null
RUN_COLUMNS = ("path", *STRINGS, "seed", *AXES, "warmup_steps", *NUMBERS)
DELTA = ["delta", "ci_low", "ci_high", "ci_method"]
LEGEND = (
    "Δ: final log-ppl minus the baseline row `{base}` (negative is better) at warm-up {ref}, with a 95% t-interval "
    "(paired by seed when ≥2 seeds are shared, Welch otherwise); " + NOISE + ": the interval contains 0, "
    "within seed noise. log-ppl: validation loss in nats/token, mean ± sample std (n completed seeds). "
    "wu=N: mean final log-ppl with N warm-up steps (div.: every run diverged). "
    "diverged: k of n finished runs over all warm-ups."
)
SENSITIVITY = " warm-up sens.: final log-ppl at the smallest warm-up minus the best one (∞: it diverged)."

TEX = {  # LaTeX for the special characters a table cell may hold
    **{c: "\\" + c for c in "&%$#_{}"},
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "≈": r"$\approx$",
    "Δ": r"$\Delta$",
    "∞": r"$\infty$",
    "—": "--",
}
TEX_SPECIAL = re.compile("|".join(map(re.escape, TEX)))


class SummaryError(ValueError):
    """A summary.json that is not a valid run summary."""


def collect_runs(results_dir, strict: bool = False) -> pd.DataFrame:
    """One row per run from `results_dir/runs/**/summary.json`; bad files are logged and skipped, or raise if strict."""
    rows = []
    for path in sorted(Path(results_dir, "runs").rglob("summary.json")):
        try:
            rows.append(read_summary(path))
        except SummaryError as err:
            if strict:
                raise
            log.warning("skipping %s", err)
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    runs[list(NUMBERS)] = runs[list(NUMBERS)].apply(pd.to_numeric).astype(float)
    return _dedupe(runs)


def read_summary(path: Path) -> dict:
    """The flat record of one summary.json; raises SummaryError naming the path when it is malformed."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SummaryError(f"{path}: unreadable JSON ({err})") from None
    problem = _problem(summary)
    if problem:
        raise SummaryError(f"{path}: {problem}")
    axes = summary["axes"]
    return {
        "path": str(path.parent),
        **{key: summary[key] for key in (*STRINGS, "seed", *NUMBERS)},
        **{axis: axes.get(axis) for axis in AXES},
        "warmup_steps": axes["warmup_steps"],
    }


def _problem(summary) -> str | None:
    """What makes `summary` unusable, or None."""
    if not isinstance(summary, dict):
        return "not a JSON object"
    missing = [key for key in (*STRINGS, "seed", "axes", *NUMBERS) if key not in summary]
    if missing:
        return f"missing keys {missing}"
    wrong = [key for key in STRINGS if not isinstance(summary[key], str)]
    wrong += [key for key in NUMBERS if summary[key] is not None and not _is_number(summary[key])]
    wrong += [] if _is_int(summary["seed"]) else ["seed"]
    wrong += [] if isinstance(summary["axes"], dict) and _is_int(summary["axes"].get("warmup_steps")) else ["axes"]
    if wrong:
        return f"wrong types for {wrong}"
    if summary["status"] not in STATUSES:
        return f"unknown status {summary['status']!r}"
    if summary["status"] == "completed" and summary["final_val_loss"] is None:
        return "completed without final_val_loss"
    return None


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dedupe(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per (experiment, row_id, warm-up, seed): the best status, then the most steps, then the last path."""
    rank = runs["status"].map(STATUSES.index)
    order = runs.assign(_rank=rank, _step=runs["step"].fillna(-1)).sort_values(["_rank", "_step", "path"])
    kept = order.drop_duplicates(["experiment", "row_id", "warmup_steps", "seed"], keep="last")
    return kept.drop(columns=["_rank", "_step"]).sort_values("path").reset_index(drop=True)


def build_tables(results_dir, baselines: dict | None = None, strict: bool = False) -> dict[str, pd.DataFrame]:
    """Numeric tables per experiment, straight from the run files."""
    return tables_for(collect_runs(results_dir, strict), baselines)


def tables_for(runs: pd.DataFrame, baselines: dict | None = None) -> dict[str, pd.DataFrame]:
    """Numeric tables per experiment with finished runs; `baselines` maps an experiment to its baseline row."""
    baselines = baselines or {}
    finished = runs[runs["status"].isin(FINISHED)]
    unknown = sorted(set(baselines) - set(finished["experiment"]))
    if unknown:
        raise ValueError(f"--baseline names experiments without finished runs: {', '.join(unknown)}")
    return {exp: summarize(group, baselines.get(exp)) for exp, group in finished.groupby("experiment")}


def summarize(runs: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One experiment's runs reduced to one row per variant (row_id), in registry order, with Δ vs the baseline."""
    runs = runs[runs["status"].isin(FINISHED)]
    warmups = sorted(int(w) for w in runs["warmup_steps"].unique())
    rows = sorted((_row_stats(group, warmups) for _, group in runs.groupby("row_id")), key=_order)
    table = pd.DataFrame(rows).astype({"params": "Int64", "d_ff": "Int64"})
    clash = table["row"].duplicated(keep=False)
    table.insert(0, "label", table["row"].where(~clash, table["row"] + "-" + table["row_id"].str[:6]))
    base = pick_baseline(table, baseline)
    done = runs[(runs["status"] == "completed") & (runs["warmup_steps"] == warmups[-1])]
    finals = {rid: group.set_index("seed")["final_val_loss"] for rid, group in done.groupby("row_id")}
    empty = pd.Series(dtype=float)
    base_finals = finals.get(table.at[base, "row_id"], empty)
    deltas = [delta_interval(finals.get(rid, empty), base_finals) for rid in table["row_id"]]
    table[DELTA] = pd.DataFrame(deltas, index=table.index, columns=DELTA)
    table.loc[base, DELTA] = [math.nan, math.nan, math.nan, "baseline"]
    table["within_noise"] = (table["ci_low"] <= 0) & (table["ci_high"] >= 0)
    table["baseline"] = table.index == base
    table["reference_warmup"] = warmups[-1]
    return table


def _row_stats(runs: pd.DataFrame, warmups: list[int]) -> dict:
    """Statistics of one variant's finished runs: final log-ppl at the reference (longest) warm-up, and per warm-up."""
    first = runs.iloc[0]
    done = runs[runs["status"] == "completed"]
    ref = done[done["warmup_steps"] == warmups[-1]]
    by_warmup = {w: _final_at(runs[runs["warmup_steps"] == w]) for w in warmups}
    return {
        "experiment": first["experiment"],
        "row": first["row"],
        "row_id": first["row_id"],
        **{axis: first[axis] for axis in AXES},
        "params": first["params"],
        "d_ff": first["d_ff"],
        "early_log_ppl": ref["early_val_loss"].mean(),
        "final_mean": ref["final_val_loss"].mean(),
        "final_std": ref["final_val_loss"].std(ddof=1),
        "n": len(ref),
        "final_bpb": ref["final_val_bpb"].mean(),
        **{f"final_wu{w}": value for w, value in by_warmup.items()},
        "warmup_sensitivity": warmup_sensitivity(by_warmup),
        "diverged": int((runs["status"] == "diverged").sum()),
        "finished": len(runs),
        "tokens_per_s": done["tokens_per_s"].mean(),
    }


def _final_at(runs: pd.DataFrame) -> float:
    """Mean final log-ppl of the completed runs; inf when every run diverged, NaN when there are none."""
    if runs.empty:
        return math.nan
    finals = runs.loc[runs["status"] == "completed", "final_val_loss"]
    return finals.mean() if len(finals) else math.inf


def warmup_sensitivity(by_warmup: dict[int, float]) -> float:
    """Final log-ppl at the smallest warm-up minus the best over warm-ups (inf if it diverged, NaN if <2 settings)."""
    present = {w: v for w, v in sorted(by_warmup.items()) if not math.isnan(v)}
    if len(present) < 2:
        return math.nan
    first = next(iter(present.values()))
    return math.inf if math.isinf(first) else first - min(present.values())


def _order(row: dict) -> tuple:
    """Sort key: each axis in registry order (unknown values last, by name), then label and row_id."""
    ranks = []
    for axis, names in AXES.items():
        value = row[axis]
        ranks.append((names.index(value), "") if value in names else (len(names), str(value)))
    return (*ranks, row["row"], row["row_id"])


def pick_baseline(table: pd.DataFrame, choice: str | None = None) -> int:
    """Index of the baseline row: `choice` (a label, row or row_id), else the row closest to Shazeer's ReLU FFN."""
    if choice is not None:
        hits = table.index[(table["label"] == choice) | (table["row_id"] == choice)].tolist()
        hits = hits or table.index[table["row"] == choice].tolist()
        if len(hits) != 1:
            exp = table["experiment"].iloc[0]
            raise ValueError(f"baseline {choice!r} is not one row of {exp}; rows: {', '.join(table['label'])}")
        return hits[0]
    matches = sum(table[axis] == value for axis, value in SHAZEER.items())
    scores = list(zip(matches, table["hidden"] == "matched"))
    return scores.index(max(scores))


def delta_interval(a: pd.Series, b: pd.Series, level: float = 0.95) -> tuple[float, float, float, str]:
    """mean(a) − mean(b) for finals indexed by seed, with a t-interval: paired if ≥2 seeds are shared, else Welch."""
    shared = a.index.intersection(b.index)
    if len(shared) >= 2:
        diff = a[shared] - b[shared]
        return (*_t_interval(diff.mean(), diff.var(ddof=1) / len(diff), len(diff) - 1, level), "paired")
    delta = a.mean() - b.mean()
    if min(len(a), len(b)) < 2:
        return delta, math.nan, math.nan, "none"
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else math.inf
    return (*_t_interval(delta, va + vb, df, level), "welch")


def _t_interval(mean: float, var_of_mean: float, df: float, level: float) -> tuple[float, float, float]:
    """(mean, low, high) of a two-sided t-interval."""
    half = stats.t.ppf((1 + level) / 2, df) * math.sqrt(var_of_mean) if var_of_mean > 0 else 0.0
    return mean, mean - half, mean + half


def display(table: pd.DataFrame) -> pd.DataFrame:
    """The table as formatted strings, with the markdown/LaTeX column names."""
    warmups = [c for c in table.columns if c.startswith("final_wu")]
    ref = f"final_wu{table['reference_warmup'].iloc[0]}"
    columns = {
        "variant": table["label"],
        "params": table["params"].map(lambda p: _fmt(p, ",.0f")),
        "d_ff": table["d_ff"].map(lambda d: _fmt(d, ".0f")),
        "early log-ppl": table["early_log_ppl"].map(lambda x: _fmt(x, ".3f")),
        "final log-ppl": [_final(row, row[ref]) for _, row in table.iterrows()],
        "Δ vs baseline (95% CI)": [_delta(row) for _, row in table.iterrows()],
        **{f"wu={c[8:]}": table[c].map(lambda x: _fmt(x, ".3f", inf="div.")) for c in warmups},
    }
    if len(warmups) > 1:
        columns["warm-up sens."] = table["warmup_sensitivity"].map(lambda x: _fmt(x, ".3f", inf="∞"))
    columns["diverged"] = [f"{k}/{n}" for k, n in zip(table["diverged"], table["finished"])]
    columns["tokens/s"] = table["tokens_per_s"].map(lambda x: _fmt(x, ",.0f"))
    return pd.DataFrame(columns)


def _fmt(x: float, spec: str, inf: str = "∞") -> str:
    return "—" if pd.isna(x) else inf if math.isinf(x) else format(x, spec)


def _final(row: pd.Series, at_ref: float) -> str:
    if row["n"] == 0:
        return _fmt(at_ref, ".3f", inf="div.")
    spread = "" if pd.isna(row["final_std"]) else f" ± {row['final_std']:.4f}"
    return f"{row['final_mean']:.3f}{spread} ({int(row['n'])})"


def _delta(row: pd.Series) -> str:
    if row["baseline"]:
        return "baseline"
    if pd.isna(row["delta"]) or pd.isna(row["ci_low"]):
        return _fmt(row["delta"], "+.4f")
    noise = f" {NOISE}" if row["within_noise"] else ""
    return f"{row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]{noise}"


def to_markdown(table: pd.DataFrame) -> str:
    """The table in GitHub markdown, with a legend line under it."""
    shown = display(table)
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "|".join([":---"] + ["---:"] * (shown.shape[1] - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in shown.itertuples(index=False)]
    legend = LEGEND.format(base=table.loc[table["baseline"], "label"].iloc[0], ref=table["reference_warmup"].iloc[0])
    legend += SENSITIVITY if "warm-up sens." in shown.columns else ""
    return "\n".join([*lines, "", legend]) + "\n"


def to_latex(table: pd.DataFrame) -> str:
    """The table as a booktabs tabular."""
    shown = display(table)
    lines = [r"\begin{tabular}{l" + "r" * (shown.shape[1] - 1) + "}", r"\toprule", _tex_row(shown.columns), r"\midrule"]
    lines += [_tex_row(cells) for cells in shown.itertuples(index=False)]
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"


def _tex_row(cells) -> str:
    return " & ".join(TEX_SPECIAL.sub(lambda m: TEX[m.group()], cell) for cell in cells) + r" \\"


def load_curves(run_dirs) -> pd.DataFrame:
    """Eval records (run_dir, step, val_loss, val_bpb) from each run's metrics.jsonl; the last one per step wins."""
    records = []
    for run_dir in run_dirs:
        path = Path(run_dir, "metrics.jsonl")
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by an interrupted run
            if isinstance(record, dict) and "val_loss" in record:
                records.append({"run_dir": str(run_dir), **{k: record.get(k) for k in ("step", "val_loss", "val_bpb")}})
    curves = pd.DataFrame(records, columns=["run_dir", "step", "val_loss", "val_bpb"])
    return curves.drop_duplicates(["run_dir", "step"], keep="last").reset_index(drop=True)


def plot_curves(table: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Validation log-ppl against step per variant at the reference warm-up: mean over seeds, min–max band."""
    ref = table["reference_warmup"].iloc[0]
    done = runs[(runs["status"] == "completed") & (runs["warmup_steps"] == ref)]
    curves = load_curves(done["path"]).merge(done[["path", "row_id"]], left_on="run_dir", right_on="path")
    fig, ax = _figure()
    for i, row in enumerate(table.itertuples()):
        band = curves[curves["row_id"] == row.row_id].groupby("step")["val_loss"].agg(["mean", "min", "max"])
        if not band.empty:
            ax.plot(band.index, band["mean"], label=row.label, **_style(i))
            ax.fill_between(band.index, band["min"], band["max"], color=_style(i)["color"], alpha=0.2, linewidth=0)
    ax.set(xlabel="step", ylabel="validation log-ppl", title=f"{table['experiment'].iloc[0]} (warm-up {ref})")
    return _legend(fig, ax)


def plot_warmup(table: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Final log-ppl against warm-up steps per variant: mean over completed seeds, ±1 sample std."""
    done = runs[runs["status"] == "completed"]
    fig, ax = _figure()
    for i, row in enumerate(table.itertuples()):
        point = done[done["row_id"] == row.row_id].groupby("warmup_steps")["final_val_loss"].agg(["mean", "std"])
        if not point.empty:
            yerr = point["std"].fillna(0)
            ax.errorbar(point.index, point["mean"], yerr=yerr, marker="o", capsize=3, label=row.label, **_style(i))
    ax.set(xlabel="warm-up steps", ylabel="final log-ppl", title=table["experiment"].iloc[0])
    return _legend(fig, ax)


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


def write_outputs(results_dir, tables: dict[str, pd.DataFrame], runs: pd.DataFrame) -> dict[str, list[Path]]:
    """Write tables/<exp>.{md,csv,tex} and figures/<exp>_{curves,warmup}.png; returns the paths per experiment."""
    tables_dir, figures_dir = Path(results_dir, "tables"), Path(results_dir, "figures")
    tables_dir.mkdir(parents=True, exist_ok=True)
    figures_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for exp, table in tables.items():
        texts = {
            "md": to_markdown(table),
            "csv": table.to_csv(index=False, float_format="%.6f", lineterminator="\n"),
            "tex": to_latex(table),
        }
        paths = [tables_dir / f"{exp}.{ext}" for ext in texts]
        for path, text in zip(paths, texts.values()):
            write_text(path, text)
        exp_runs = runs[runs["experiment"] == exp]
        for kind, plot in (("curves", plot_curves), ("warmup", plot_warmup)):
            paths.append(figures_dir / f"{exp}_{kind}.png")
            plot(table, exp_runs).savefig(paths[-1], metadata={"Software": None})
        written[exp] = paths
    return written
