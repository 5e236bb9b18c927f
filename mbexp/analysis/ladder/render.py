"""A ladder's fit as markdown, CSV and a figure (docs/ladder-fits.md). Over 300 lines: the three renderings
of one Ladder, and the README's and results page's ladder lines, share its column names and formats."""

import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, NullFormatter

from mbexp.analysis.files import FIT, found
from mbexp.analysis.ladder.powerlaw import ALPHA_BOUNDS, Curve
from mbexp.analysis.ladder.scaling import LEVEL, SHOWN, Ladder, ranking
from mbexp.analysis.render import fmt
from mbexp.claims.parse import no_trend_read
from mbexp.claims.result import short
from mbexp.claims.vocabulary import UNRESOLVED
from mbexp.study.spec import load_studies

LEGEND = ("α, E, A: the fitted L(C) = E + A·C^-α (bounded α in (0, 2], E in [0, least mean loss); at bound: the "
          "data did not pin it). RMS resid.: root mean square of mean loss − fitted loss over the curve's points, "
          "in nats. Lack of fit: F = (Σ n·resid² / (points − parameters)) / (pooled within-point seed variance), "
          "p its upper tail on (points − parameters, Σ(n − 1)) df; per curve its own 2 parameters (the shared E "
          "counted in the budget's line), per budget every curve with the shared E (p < 0.05: the form does not fit "
          "the points to within the seed noise). Multiplier m = C_base(L_v(C)) / C, with C_base the baseline "
          "curve solved for the loss and L_v the variant's fitted loss at its own compute C (> 1: the baseline "
          "needs m times the compute to match; ∞: below the baseline's floor); its interval: a bootstrap over "
          "seeds, each point's mean redrawn from its own seeds (mean + s/√n × a t draw on n − 1 df). m along the "
          "ladder: m(largest size) / m(smallest size) on the curve, with its interval from the same refits; rises "
          "/ falls when that interval excludes 1, crosses 1 when both ends' intervals are resolved on either side "
          "of 1. Panel: that trend refit with shared floors, separate floors, E = 0 and each size left out; rises "
          "/ falls only when every form agrees, else form-dependent. Fit-free: the paired Δ vs the baseline per "
          "size, its slope over ln N, p Holm-adjusted over the budget's variants (docs/ladders.md#the-fit-free-trend). "
          "Crossover: the compute where the variant's and the baseline's curves cross, within or beyond the budget's "
          "compute range (none: at no compute the ladder reaches or above). Held-out error: the prediction minus the "
          "runs' mean (docs/ladder-fits.md#prediction-check).")


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
             "| variant | steps | α | E (shared) | A | RMS resid. | lack of fit | points | crossover vs baseline "
             "| m along the ladder | panel | fit-free |",
             "|:---|---:|---:|---:|---:|---:|---:|---:|:---|:---|:---|:---|"]
    for _, c in curves.iterrows():
        where = c["crossover_where"]
        cross = f"{c['crossover']:.3g} FLOPs ({where} the data)" if where in ("within", "beyond") else where
        least = fitted.loc[fitted["budget"] == c["budget"], "loss"].min()
        lines.append(f"| {c['variant']} | {c['budget']} | {c['alpha']:.3f}{_bound(c['alpha'], ALPHA_BOUNDS)} | "
                     f"{c['E']:.3f}{_bound(c['E'], (0.0, least))} | {c['A']:.4g} | {c['rms']:.4f} | "
                     f"{_lof_cell(c, 'lof_')} | {c['points']} | {cross} | {_trend_cell(c)} | "
                     f"{_text(c, 'panel')} | {_fit_free_cell(c)} |")
    for budget, c in curves.groupby("budget", sort=False):
        lines.append(f"\nLack of fit of the {_steps(budget)} fit (every curve, shared E): "
                     f"{_lof_cell(c.iloc[0], 'fit_lof_')}.")
    lines += [f"\nLeft out: {line}." for line in ladder.skipped]
    lines += _panel_lines(ladder)
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


def _lof_cell(row: pd.Series, prefix: str) -> str:
    """`F 4.94 (5, 24 df), p 0.003`; — without seed spread or residual df."""
    if f"{prefix}F" not in row or pd.isna(row[f"{prefix}F"]):
        return "—"
    return f"F {fmt(row[prefix + 'F'], SHOWN)} ({int(row[prefix + 'df1'])}, {int(row[prefix + 'df2'])} df), " \
           f"p {fmt(row[prefix + 'p'], SHOWN)}"


def _text(row: pd.Series, key: str) -> str:
    return row[key] if key in row and isinstance(row[key], str) else "—"


def _fit_free_cell(row: pd.Series) -> str:
    if "fit_free" not in row or not isinstance(row["fit_free"], str):
        return "—"
    return f"deficit {row['fit_free']} (slope {fmt(row['fit_free_slope'], '+.3f')}/e-fold, " \
           f"p {fmt(row['fit_free_p'], SHOWN)})"


def _steps(budget) -> str:
    return "pooled" if budget == "all" else f"{budget}-step"


def _panel_lines(ladder: Ladder) -> list[str]:
    """The robustness panel: per variant and budget, m along the ladder under each form of the fit."""
    if ladder.panel is None or ladder.panel.empty:
        return []
    lines = ["", "Robustness panel: m along the ladder (largest / smallest size left) under each form of the fit:",
             "", "| variant | steps | form | m along the ladder |", "|:---|---:|:---|:---|"]
    for _, r in ladder.panel.iterrows():
        lines.append(f"| {r['variant']} | {r['budget']} | {r['form']} | {r['trend']}: ×{fmt(r['ratio'], SHOWN)} "
                     f"[{fmt(r['low'], SHOWN)}, {fmt(r['high'], SHOWN)}] |")
    return lines


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
    points = ladder.points.drop(columns=["losses", "label"]).merge(ladder.curves, on=["variant", "budget"], how="left")
    points.insert(0, "experiment", ladder.experiment)
    points.insert(2, "baseline", points["variant"] == ladder.baseline)
    return points.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def ladder_trends(results_dir) -> list[dict]:
    """Per ladder (results/tables/<exp>_fit.csv), variant and budget: the compute multiplier vs the baseline at the
    smallest and the largest size and its trend along the ladder, as `make table` computed them. A declared study's
    LR scan, and an LR-transfer claim's experiment, are left out: no trend of theirs is read (`no_trend_read`)."""
    out, skipped = [], no_trend_read(results_dir)
    for experiment, path in found(results_dir, FIT, "csv"):
        if experiment in skipped:
            continue
        fit = pd.read_csv(path)
        if "trend" not in fit:
            continue  # a ladder with too few sizes to fit: its file is one line
        for (variant, steps), rows in fit[~fit["baseline"].astype(bool)].groupby(["variant", "steps"], sort=False):
            first, last = rows.iloc[0], rows.iloc[-1]
            out.append({"experiment": experiment, "variant": variant, "steps": int(steps),
                        "baseline": fit.loc[fit["baseline"].astype(bool), "variant"].iloc[0],
                        "from": f"{first['size']}: {multiplier_cell(first)}",
                        "to": f"{last['size']}: {multiplier_cell(last)}",
                        "trend": str(last["trend"]), "panel": _csv_text(last, "panel"),
                        "fit_free": _csv_text(last, "fit_free"), "fit_free_p": last.get("fit_free_p", math.nan),
                        "crossover": "none" if pd.isna(last["crossover"]) else
                        f"{last['crossover']:.2g} FLOPs ({last['crossover_where']} the data)"})
    return out


def ladder_markdown(trends: list[dict]) -> str:
    lines = ["| ladder | variant vs baseline | steps | multiplier, smallest size | multiplier, largest size | "
             "along the ladder | panel | fit-free Δ over size | crossover |",
             "|:---|:---|---:|---:|---:|:---|:---|:---|:---|"]
    for t in trends:
        lines.append(f"| {t['experiment']} | {t['variant']} vs {t['baseline']} | {t['steps']} | {t['from']} | "
                     f"{t['to']} | {t['trend']} | **{t['panel']}** | {_deficit(t)} | {t['crossover']} |")
    return "\n".join(lines)


def _csv_text(row: pd.Series, key: str) -> str:
    return row[key] if key in row and isinstance(row[key], str) else "—"


def _deficit(t: dict) -> str:
    """`the deficit shrinks with size (p 0.0227)`: the fit-free reading of the paired Δ over size."""
    if t["fit_free"] == "—":
        return "—"
    return f"the deficit {t['fit_free']} with size (p {fmt(t['fit_free_p'], SHOWN)})" \
        if t["fit_free"] != UNRESOLVED else f"not resolved (p {fmt(t['fit_free_p'], SHOWN)})"


LADDERS_INTRO = (
    "The ladder claims side by side: the mean paired Δ (variant − baseline, same seed; < 0: the variant is ahead) at "
    "each size on the planned seeds, and its slope over ln(non-embedding parameters), as the claims read it. One LR: "
    "every rung at the same learning rate; own: each (size, FFN) at the LR its study's scan chose; width64's: every "
    "width at the LR the scan chose at the base width (μP, `transfer_from`), no scan at the other widths "
    "([studies.md](studies.md)). Design: the study's steps by design, scans included ([cost](#declared-studies-"
    "compute)); the SP ladders and the μP ladder differ in their sizes (depth and width against width alone).")


def lr_ladders_markdown(results, results_dir) -> str:
    """The ladder claims (statistic: trend) side by side, one line per claim and variant: the mean paired Δ vs the
    baseline at each size on the planned seeds, the slope of Δ over ln N, its mark and the claim's verdict; at one
    LR for every rung, each (size, FFN) at its own (own_lr), or every size at the base size's (a study's
    transfer_from); with a study's compute by design (steps). Empty without ladder claims."""
    ladders = [r for r in results if r.claim.statistic == "trend"]
    if not ladders:
        return ""
    sizes = list(dict.fromkeys(size for r in ladders for c in r.comparisons for size in c.per_size))
    lines = ["| variant vs baseline | steps | ladder | LR | design (steps) | " + " | ".join(f"Δ {s}" for s in sizes) +
             " | slope of Δ per e-fold of N (95% CI) | p (Holm) | mark | verdict |",
             "|:---|---:|:---|:---|---:|" + "---:|" * len(sizes) + "---:|---:|:---|:---|"]
    key, studies = [], load_studies(results_dir)
    for r in ladders:
        found = {c.row: c for c in r.comparisons}
        steps = dict(r.claim.at).get("train.steps", "largest")
        lr, design = _lr_text(r.claim), _design(studies.get(r.claim.study), results_dir)
        for row, base in r.claim.pairs:
            c = found.get(row)
            cells = [fmt(c.per_size[s], "+.3f") if c and s in c.per_size else "—" for s in sizes]
            slope = f"{fmt(c.interval.delta, '+.3f')} [{fmt(c.interval.low, '+.3f')}, {fmt(c.interval.high, '+.3f')}]" \
                if c else "—"
            order = steps if isinstance(steps, int) else math.inf
            key.append(((row, order, r.claim.own_lr, r.claim.experiment), "| " + " | ".join(
                [f"{row} vs {base}", str(steps), r.claim.experiment, lr, design, *cells, slope,
                 fmt(c.p_holm, SHOWN) if c else "—", c.mark if c else "—", f"{r.verdict} ({r.standing})"]) + " |"))
    return "\n".join(lines + [line for _, line in sorted(key, key=lambda k: k[0])])


def _lr_text(claim) -> str:
    """How a ladder claim's rungs got their LR: one for all, each its own, or the base rung's (transfer_from)."""
    if base := dict(claim.protocol.get("transfer_from") or {}) if claim.study else {}:
        return f"{', '.join(map(str, base.values()))}'s (study `{claim.study}`)"
    return f"own (study `{claim.study}`)" if claim.study else "own (tuned)" if claim.own_lr else "one"


def _design(study, results_dir) -> str:
    """A study's steps by design, its scans included (a reused scan counted where it ran); — without a study."""
    from mbexp.analysis.studies import cost  # the tables' module: only where a ladder claim names a study

    return "—" if study is None else f"{cost(study, results_dir)['design_steps']:,}"


def readme_ladder_lines(trends: list[dict]) -> list[str]:
    """The README's ladder lines at each ladder's largest budget: the multiplier's trend as the robustness panel
    reads it (rises / falls only when every form agrees, else form-dependent), qualified by the fit-free trend. A
    ladder with neither yet (too few sizes with runs) is left to docs/results.md."""
    lines = []
    for t in trends:
        if t["panel"] == t["fit_free"] == "—":
            continue
        if t["steps"] == max(u["steps"] for u in trends if u["experiment"] == t["experiment"]):
            pair = [t["variant"], t["baseline"]]
            lines.append(f"| {short(pair[0], pair)} over {short(pair[1], pair)} | {t['experiment']}, "
                         f"train.steps={t['steps']} | **{t['panel']}** | fit-free: {_deficit(t)} |")
    return lines


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
        grid = _steady(np.geomspace(mine["compute"].min() / 1.2, mine["compute"].max() * 1.2, 100))
        fade = 1.0 if c["budget"] == budgets_[-1] else 0.45
        where = "" if c["budget"] == "all" else f", {c['budget']} steps"
        ax.plot(grid, _steady(_curve(c).loss(grid)), color=colours[c["variant"]], alpha=fade,
                label=f"{c['variant']}{where} (α={c['alpha']:.3f})")
        if key in ladder.held_out_curves:
            ax.plot(grid, _steady(ladder.held_out_curves[key].loss(grid)), color=colours[c["variant"]], alpha=fade,
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


def _steady(values: np.ndarray) -> np.ndarray:
    """Values at 9 significant digits: numpy's exp and log differ in the last bit between CPUs, which moves pixels."""
    return np.array([float(f"{v:.9g}") for v in values])


def _curve(row: pd.Series) -> Curve:
    return Curve(row["E"], math.log(row["A"]), row["alpha"])
