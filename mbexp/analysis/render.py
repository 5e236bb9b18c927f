"""A table as text: markdown (with caption and legend), CSV (every number) and a LaTeX booktabs tabular."""

import math
import re

import pandas as pd

from mbexp.analysis import equivalent, stats
from mbexp.analysis.table import SENSITIVITY_AXES, Table, setting, short
from mbexp.claims.vocabulary import BASELINE, BETTER, EQUIVALENT, UNRESOLVED, WORSE
from mbexp.run.summary import FLOPS_FORMULA, N_MATMUL

CI = f"{stats.LEVEL:.0%}"  # an interval's coverage as its headers and captions say it
MARK_TEXT = {BETTER: BETTER, WORSE: WORSE, EQUIVALENT: "equiv. ±{m}", UNRESOLVED: UNRESOLVED, BASELINE: BASELINE}
TEX = {  # LaTeX for the special characters a table cell may hold
    **{c: "\\" + c for c in "&%$#_{}"},
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "∞": r"$\infty$",
    "—": "--",
    "†": r"$^\dagger$",
}
TEX_SPECIAL = re.compile("|".join(map(re.escape, TEX)))


def fmt(x, spec: str, inf: str = "∞") -> str:
    return "—" if x is None or pd.isna(x) else inf if math.isinf(x) else format(x, spec)


def tokens(x) -> str:
    """76800 -> 76.8k, 614400 -> 614.4k, 2.4e6 -> 2.40M."""
    if pd.isna(x):
        return "—"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def _same(series: pd.Series):
    """The one value of `series` (rows without it, such as all-diverged ones, ignored), or None when rows differ."""
    values = series.dropna().unique()
    return values[0] if len(values) == 1 else None


def display(table: Table) -> pd.DataFrame:
    """The table as formatted strings, with the markdown/LaTeX column names."""
    rows = table.rows
    cols = {"variant": rows["label"]}
    if "lr_chosen" in rows:  # a declared study's row at the LR its scan chose (mbexp.analysis.studies)
        cols["lr (scan)"] = [f"{setting(v)}{' edge' if e else ''}" if pd.notna(v) else "—"
                             for v, e in zip(rows["lr_chosen"], rows["lr_edge"])]
    if table.tuned:
        cols[f"{short(table.tuned)} (tried)"] = [f"{setting(v)} ({int(n)})" if pd.notna(v) else f"— ({int(n)})"
                                                 for v, n in zip(rows["tuned"], rows["tried"])]
    cols |= {
        "params": rows["params"].map(lambda p: fmt(p, ",.0f")),
        "non-emb. params": rows["params_non_embedding"].map(lambda p: fmt(p, ",.0f")),
        "d_ff": rows["d_ff"].map(lambda d: fmt(d, ".0f")),
        "FLOPs/token": rows["flops_per_token"].map(lambda f: fmt(f, ",.0f")),
        _early_header(rows): rows["early_log_ppl"].map(lambda x: fmt(x, ".3f")),
        f"final {table.split} log-ppl": [_final(row) for _, row in rows.iterrows()],
        f"Δ vs baseline ({CI} CI)": [_delta(row) for _, row in rows.iterrows()],
        "p (Holm)": [fmt(p, ".3f") if not b else "" for p, b in zip(rows["p_holm"], rows["baseline"])],
        "mark": rows["mark"].map(lambda m: MARK_TEXT[m].format(m=f"{table.margin:g}")),
    }
    for value in table.columns:
        name = f"{short(table.column)}={setting(value)}"
        cols[name] = [_cell(x, n) for x, n in zip(rows[name], rows[f"{name} n"])]
    if "ceq" in rows:
        cols[f"compute-eq. ({CI} CI)"] = [equivalent.text(row) for _, row in rows.iterrows()]
    if "sensitivity" in rows:
        cols[f"warm-up sens. ({CI} CI)"] = [_sensitivity(row) for _, row in rows.iterrows()]
    if rows["slow_start"].astype(bool).any():
        cols["slow start (seeds)"] = [s or "—" for s in rows["slow_start"]]
    if _same(rows["steps"]) is None:
        cols["steps"] = rows["steps"].map(lambda s: fmt(s, ".0f"))
    if _same(rows["tokens_seen"]) is None:
        cols["tokens"] = rows["tokens_seen"].map(tokens)
    cols["epochs"] = [fmt(e, ".2f") + ("†" if e > 1 else "") for e in rows["epochs"]]
    cols["gen. gap"] = rows["generalization_gap"].map(lambda g: fmt(g, "+.3f"))
    cols["diverged"] = [f"{k}/{n}" for k, n in zip(rows["diverged"], rows["finished"])]
    cols["tokens/s"] = rows["tokens_per_s"].map(lambda x: fmt(x, ",.0f"))
    return pd.DataFrame(cols)


def _early_header(rows: pd.DataFrame) -> str:
    step, toks = _same(rows["early_step"]), _same(rows["early_tokens"])
    return "early log-ppl" if step is None or toks is None else f"early log-ppl (step {step:.0f}, {tokens(toks)} tok)"


def _final(row: pd.Series) -> str:
    if row["n"] == 0:
        return fmt(row["final_mean"], ".3f", inf="div.")
    spread = "" if pd.isna(row["final_std"]) else f" ± {row['final_std']:.4f}"
    return f"{row['final_mean']:.3f}{spread} ({int(row['n'])})"


def _delta(row: pd.Series) -> str:
    if row["baseline"]:
        return "baseline"
    if pd.isna(row["delta"]) or pd.isna(row["ci_low"]):
        return fmt(row["delta"], "+.4f")
    return f"{row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"


def _cell(mean: float, n: int) -> str:
    return "div." if math.isinf(mean) else f"{fmt(mean, '.3f')} ({n})" if n else "—"


def _sensitivity(row: pd.Series) -> str:
    if pd.isna(row["sensitivity_low"]):
        return fmt(row["sensitivity"], "+.3f")
    return f"{row['sensitivity']:+.3f} [{row['sensitivity_low']:+.3f}, {row['sensitivity_high']:+.3f}]"


def caption(table: Table) -> str:
    """What was measured: the experiment, its budget, the split reported, where Δ is computed."""
    rows = table.rows
    steps, toks = _same(rows["steps"]), _same(rows["tokens_seen"])
    budget = f"{steps:,.0f} steps, {toks:,.0f} tokens per run" if steps is not None and toks is not None else \
        "budget per row in the steps/tokens columns"
    why = "the largest budget" if table.column == "train.steps" else "the most common value; ties: the largest"
    where = f"; Δ and marks at {table.column}={setting(table.reference)} ({why})" if table.column else ""
    split = "test split" if table.split == "test" else "validation split (these runs have no test split)"
    regime = f" {table.regime}" if table.regime else ""
    return f"**{table.experiment}** — {budget}{where}; final log-ppl on the {split}.{regime}"


def legend(table: Table) -> str:
    """The rules the table was made by, one sentence each (docs/columns.md defines them in full)."""
    m, split = f"{table.margin:g}", table.split
    parts = [
        f"log-ppl: {split} loss in nats/token, mean ± sample std (n completed seeds).",
        f"Δ: final log-ppl minus {_baseline_text(table)} (negative is better), with a {CI} t-interval, "
        "paired by seed when ≥2 seeds are shared (same seed = same data order, and same-shaped models share their "
        "initialisation, so pairing removes that noise), Welch otherwise; the CSV has both.",
        f"p (Holm): two-sided t-test p of Δ = 0, Holm–Bonferroni adjusted over {_family(table)}.",
        f"mark: equiv. ±{m} when two one-sided tests (Holm-adjusted p < {stats.ALPHA:g}) put Δ within ±{m} nats, "
        f"read first; else better / worse when the adjusted p < {stats.ALPHA:g}; not resolved otherwise — an "
        "interval that contains 0 is not agreement.",
    ]
    if table.tuned:
        parts.append(f"{short(table.tuned)} (tried): the {table.tuned} value with the lowest mean validation loss "
                     f"over seeds, of the values tried; every {split} number is at that choice (chosen on "
                     f"validation, reported on {split}).")
    if table.column:
        parts.append(f"{short(table.column)}=v: mean final {split} log-ppl (n) at {table.column}=v"
                     + (", each at its own validation-chosen value" if table.tuned else "")
                     + " (div.: every run diverged).")
    if "ceq" in table.rows:
        parts.append("compute-eq.: the compute at which the baseline, its mean loss linear in log compute between "
                     "its budgets, reaches the row's mean loss, over the row's compute (>1: the row saves compute), "
                     f"with a {CI} paired bootstrap interval over seeds; >b× (extrap. …): beyond the baseline's "
                     "largest budget (b), so only the bound is measured and the number is an extrapolation.")
    if table.column in SENSITIVITY_AXES and len(table.columns) > 1:
        parts.append("warm-up sens.: final log-ppl at the smallest warm-up minus at the warm-up best on validation, "
                     f"with a {CI} interval over seeds (∞: it diverged).")
    if table.rows["slow_start"].astype(bool).any():
        parts.append(f"slow start: seeds whose early validation loss is more than {stats.SLOW_K:g} robust SDs "
                     f"({stats.MAD_SCALE:g} × MAD) above the median of the row's other seeds (at least "
                     f"{stats.SLOW_MIN_OTHERS}); shown, never dropped.")
    if split == "validation" and table.tuned:
        parts.append("Selection and report share the validation split: the chosen rows are biased low.")
    parts += [
        f"FLOPs/token: training FLOPs per token as `make bench` counts them for MFU ({FLOPS_FORMULA}; "
        f"{N_MATMUL}).",
        "epochs: tokens seen / training-split tokens; † past one epoch, where repeated data changes what an "
        "ablation measures. gen. gap: final train minus validation loss.",
        "diverged: k of n finished runs over all settings. tokens/s: median over the run's log intervals; in-run "
        "throughput depends on what else ran on the machine — `make bench` measures clean cost. —: not recorded.",
    ]
    return " ".join(parts)


def _per_size(table: Table) -> bool:
    return len(set(table.baselines.values()) - {None}) > 1


def _baseline_text(table: Table) -> str:
    if not _per_size(table):
        return f"the baseline row `{table.baseline}`"
    size = table.runs.loc[table.runs["label"] == table.baseline, "identity"].iloc[0].get("model.name")
    variant = table.baseline.removesuffix(f"-{size}")
    return f"the baseline variant `{variant}` at the row's own size (CSV: baseline_row; a size without it: no Δ)"


def _family(table: Table) -> str:
    if not _per_size(table):
        return "the table's comparisons"
    n = int(table.rows["p"].notna().sum())
    return f"the table's {n} comparisons (every non-baseline row against the baseline at its size, one family)"


def to_markdown(table: Table) -> str:
    """The table in GitHub markdown: caption, table, legend."""
    shown = display(table)
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "|".join([":---"] + ["---:"] * (shown.shape[1] - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in shown.itertuples(index=False)]
    notes = ["", *table.notes] if table.notes else []
    return "\n".join([caption(table), "", *lines, "", legend(table), *notes]) + "\n"


def to_csv(table: Table) -> str:
    return table.rows.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def to_latex(table: Table) -> str:
    """The table as a booktabs tabular, its caption and legend as comments above it."""
    shown = display(table)
    lines = [f"% {caption(table).replace('**', '')}", f"% {legend(table)}"]
    lines += [r"\begin{tabular}{l" + "r" * (shown.shape[1] - 1) + "}", r"\toprule", _tex_row(shown.columns)]
    lines += [r"\midrule"]
    lines += [_tex_row(cells) for cells in shown.itertuples(index=False)]
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"


def _tex_row(cells) -> str:
    return " & ".join(TEX_SPECIAL.sub(lambda m: TEX[m.group()], cell) for cell in cells) + r" \\"
