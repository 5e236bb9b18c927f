"""A declared study's scan (docs/studies.md, "The scan's table and figure"): mean validation log-ppl against the
tuned key (the learning rate unless the study declares another) per row (e.g. size and FFN) at the selection
budget, the chosen value marked; tables/<study>_lr_scan.md and .csv, figures/<study>_lr_scan.png."""

import math

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mbexp.analysis.ladder.scaling import significant
from mbexp.analysis.render import setting
from mbexp.analysis.studies import cooldown_fraction, per_run_steps
from mbexp.schedule import cooldown_start
from mbexp.study.protocol import best_of, scan_losses
from mbexp.study.spec import LR, Study

COLUMNS = ("steps", "n", "val_loss", "chosen", "edge", "vertex", "gap", "noise")  # after the row keys and value
Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def value_column(study: Study) -> str:
    """The frame's column of the tuned key's values: `lr` for the LR, else the key."""
    return "lr" if study.tune == LR else study.tune


def logged(grid) -> bool:
    """Whether a grid is read on a log scale (its vertex, its figure's axis): every value positive."""
    return all(v > 0 for v in grid)


def seed_sd(found: dict) -> float:
    """The scan's seed SD: the pooled sample SD of the validation losses across scan seeds over every (row, LR)
    with at least two finite ones (NaN with one scan seed: the noise of a choice is then unknown)."""
    cells = [[v for v in losses if math.isfinite(v)] for losses in found.values()]
    cells = [c for c in cells if len(c) >= 2]
    dof = sum(len(c) - 1 for c in cells)
    if not dof:
        return math.nan
    return math.sqrt(sum(sum((v - sum(c) / len(c)) ** 2 for v in c) for c in cells) / dof)


def choice_noise(means: dict, n_seeds: int, sd: float) -> tuple[float, float]:
    """(gap, noise) of a row's choice: the second-best grid LR's mean validation loss minus the best's, and the 95%
    half-width of the difference of two means of `n_seeds` seeds at the scan's seed SD: a gap below the noise is a
    choice within noise (NaN: fewer than two finite LRs, or the SD unknown)."""
    finite = sorted(v for v in means.values() if math.isfinite(v))
    gap = finite[1] - finite[0] if len(finite) >= 2 else math.nan
    return gap, Z95 * sd * math.sqrt(2 / n_seeds) if n_seeds and math.isfinite(sd) else math.nan


def scan_frame(study: Study, results_dir) -> pd.DataFrame:
    """One line per (row, grid value): the scan seeds finished, their mean final validation loss at select_at (inf:
    one diverged; NaN: none finished), and for a row whose scan is complete, whether this value is its choice."""
    found, lines, col = scan_losses(study, results_dir), [], value_column(study)
    sd = seed_sd(found)
    for values in study.scan_row_values():
        row = tuple(str(v) for v in values)
        runs = {v: found.get((row, v), []) for v in study.grid}
        means = {v: sum(r) / len(r) if r else math.nan for v, r in runs.items()}
        complete = all(len(r) >= len(study.scan_seeds) for r in runs.values())
        # every value diverged: no choice (the study command refuses to go on)
        choice = best_of(study.grid, means) if complete and min(means.values()) < math.inf else None
        gap, noise = choice_noise(means, len(study.scan_seeds), sd) if choice else (math.nan, math.nan)
        for v in study.grid:
            chosen = choice is not None and v == choice.value
            lines.append({**dict(zip(study.rows, map(str, values))), col: v, "steps": study.select_at,
                          "n": len(runs[v]), "val_loss": means[v], "chosen": chosen,
                          "edge": choice.edge if chosen else "",
                          "vertex": vertex(study.grid, means, v) if chosen else math.nan,
                          "gap": gap if chosen else math.nan, "noise": noise if chosen else math.nan})
    return pd.DataFrame(lines, columns=[*study.rows, col, *COLUMNS])


def vertex(grid, means: dict, chosen: float) -> float:
    """The value at the vertex of the parabola in log10(value) (a grid with a value <= 0: in the value) through the
    chosen value and its two grid neighbours (3 significant digits): where between grid points the optimum lies.
    NaN at an end of the grid or beside a diverged or missing neighbour."""
    grid, x = sorted(grid), (math.log10 if logged(grid) else float)
    i = grid.index(chosen)
    if not 0 < i < len(grid) - 1:
        return math.nan
    (x0, x1, x2), (y0, y1, y2) = (x(v) for v in grid[i - 1:i + 2]), (means[v] for v in grid[i - 1:i + 2])
    if not all(math.isfinite(y) for y in (y0, y1, y2)):
        return math.nan
    below, above = (x1 - x0) * (y1 - y2), (x1 - x2) * (y1 - y0)
    if below == above:  # three equal losses: no curvature
        return math.nan
    top = x1 - 0.5 * ((x1 - x0) * below - (x1 - x2) * above) / (below - above)
    return significant(10 ** top if logged(grid) else top)


def halving(study: Study, results_dir) -> tuple[dict, int]:
    """Successive halving over the LR grid, read from the full scan's runs: every LR trains to the smallest budget
    and is judged after that budget's cool-down (never on constant-LR losses); the better half (rounded up, ties:
    the smaller LR) continues to the next budget, up to select_at, where the best is picked. A WSD branch equals a
    standalone run bit for bit, so these are the losses a halving scan would see. Returns {row (values as text):
    (picked LR, steps it trains)} for each row whose scan is complete, and the steps the full scan trains per row."""
    rungs = sorted(b for b in study.budgets if b <= study.select_at)
    losses = {b: scan_losses(study, results_dir, b) for b in rungs}
    fraction = cooldown_fraction(study)
    cooldowns = [b - cooldown_start(b, fraction) for b in rungs]
    out = {}
    for values in study.scan_row_values():
        row = tuple(str(v) for v in values)
        means = {}
        for b in rungs:
            runs = {lr: losses[b].get((row, lr), []) for lr in study.grid}
            if any(len(r) < len(study.scan_seeds) for r in runs.values()):
                break
            means[b] = {lr: sum(r) / len(r) for lr, r in runs.items()}
        else:
            alive, steps = list(study.grid), 0
            for i, b in enumerate(rungs[:-1]):
                keep = sorted(alive, key=lambda lr, b=b: (means[b][lr], lr))[:math.ceil(len(alive) / 2)]
                steps += (len(alive) - len(keep)) * (b + sum(cooldowns[:i]))  # stopped after this rung
                alive = sorted(keep)
            steps += len(alive) * (rungs[-1] + sum(cooldowns[:-1]))
            pick = best_of(alive, {lr: means[rungs[-1]][lr] for lr in alive}).value
            out[row] = (pick, steps * len(study.scan_seeds))
    return out, per_run_steps(study) * len(study.grid) * len(study.scan_seeds)


def to_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def _cell(line: pd.Series) -> str:
    if line["n"] == 0:
        return "—"
    text = "diverged" if math.isinf(line["val_loss"]) else f"{line['val_loss']:.3f}"
    return f"**{text}**" if line["chosen"] else text


def _sd_text(frame: pd.DataFrame) -> str:
    noise = frame["noise"].dropna()
    return "one scan seed: unknown" if noise.empty else "noise " + ", ".join(sorted({f"{v:.4f}" for v in noise}))


def _gap_cell(chosen: pd.DataFrame) -> str:
    """A row's gap and its noise, `within noise` when the gap is the smaller."""
    if chosen.empty or pd.isna(chosen["gap"].iloc[0]):
        return "—"
    gap, noise = chosen["gap"].iloc[0], chosen["noise"].iloc[0]
    if pd.isna(noise):
        return f"{gap:.4f} (one seed)"
    return f"{gap:.4f} ({noise:.4f}){', within noise' if gap < noise else ''}"


def to_markdown(study: Study, frame: pd.DataFrame, halved: tuple[dict, int] = ({}, 0)) -> str:
    """The scan as a grid (one line per row, one column per LR, the chosen cell bold, and successive halving's pick
    when `halved` (halving()) has the row) and, for rows of two keys, the chosen LR of each pair: how the optimum
    moves along the first key, per value of the second."""
    (keys, grid), (picks, full) = (list(study.rows), list(study.grid)), halved
    word, col = study.tuned, value_column(study)
    finished, total = int(frame["n"].sum()), len(frame) * len(study.scan_seeds)
    lines = [f"**{study.name}** — {word} scan: mean final validation log-ppl at {study.select_at} steps over scan "
             f"seed(s) {', '.join(map(str, study.scan_seeds))} (runs in `{study.scan_experiment}`); bold: the {word} "
             f"chosen (lowest; ties: the smaller); edge: the best {word} is an end of the grid, so the optimum may lie "
             f"beyond it; vertex: the {word} at the vertex of the parabola in {'log ' if logged(grid) else ''}{word} "
             f"through the chosen {word} and its two neighbours, where between grid points the optimum lies "
             f"(exploratory); gap: the second-best {word}'s mean "
             f"minus the chosen one's, against the 95% noise of a difference of two {len(study.scan_seeds)}-seed "
             f"means at the scan's pooled seed SD ({_sd_text(frame)}): `within noise` when the gap is smaller, "
             f"so the choice could be another {word} on other seeds. {finished} of {total} scan runs finished.", "",
             "| " + " | ".join([*keys, *(f"{col}={setting(v)}" for v in grid), "chosen", "edge", "halving",
                               "vertex", "gap (noise)"]) + " |",
             "|" + "|".join([":---"] * len(keys) + ["---:"] * (len(grid) + 1) + [":---", "---:", "---:", ":---"])
             + "|"]
    same = []
    for values, group in frame.groupby(keys, sort=False):
        chosen = group[group["chosen"]]
        pick = setting(chosen[col].iloc[0]) if len(chosen) else "—"
        edge = chosen["edge"].iloc[0] if len(chosen) else "scan unfinished"
        values = values if isinstance(values, tuple) else (values,)
        found = picks.get(values)
        if found and len(chosen):
            same.append(found[0] == chosen[col].iloc[0])
        top = chosen["vertex"].iloc[0] if len(chosen) else math.nan
        lines.append("| " + " | ".join([*values, *(_cell(line) for _, line in group.iterrows()), pick,
                                        edge or "—", setting(found[0]) if found else "—",
                                        "—" if pd.isna(top) else f"{top:.2g}", _gap_cell(chosen)]) + " |")
    if same:
        spent, full = sum(steps for _, steps in picks.values()), full * len(picks)
        lines += ["", f"Successive halving (the column `halving`: every {word} judged after the smallest budget's "
                  f"cool-down, the better half continuing to the next budget, read from these runs) picks the "
                  f"same {word} as the full scan in **{sum(same)} of {len(same)} rows**, for {spent:,} scan steps "
                  f"against {full:,} ({spent / full:.2f} of the full scan)."]
    if len(keys) == 2 and frame["chosen"].any():
        first, second = keys
        for column, title in ((col, f"The chosen {word}"), ("vertex", "The vertex (an optimum between grid points)")):
            by_pair = frame[frame["chosen"]].pivot(index=first, columns=second, values=column).reindex(
                index=list(dict.fromkeys(frame[first])), columns=list(dict.fromkeys(frame[second])))
            lines += ["", f"{title} by {first} and {second}:", "",
                      "| " + " | ".join([first, *by_pair.columns]) + " |",
                      "|" + "|".join([":---"] + ["---:"] * len(by_pair.columns)) + "|"]
            shown = setting if column == col else "{:.2g}".format
            lines += ["| " + " | ".join([str(index), *("—" if pd.isna(v) else shown(v) for v in row)]) + " |"
                      for index, row in by_pair.iterrows()]
    return "\n".join(lines) + "\n"


def plot(study: Study, frame: pd.DataFrame) -> Figure:
    """Validation log-ppl against the tuned key (a log axis for a positive grid), one line per row; with two row
    keys, one panel per value of the second and one line per value of the first. The chosen value is ringed; a
    diverged point is left out."""
    keys, col = list(study.rows), value_column(study)
    panels = list(dict.fromkeys(frame[keys[-1]])) if len(keys) == 2 else [None]
    fig = Figure(figsize=(min(4.0 * len(panels), 16), 4.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        shown = frame if panel is None else frame[frame[keys[-1]] == panel]
        for i, (name, line) in enumerate(shown.groupby(keys[0], sort=False)):
            ok = line[line["val_loss"].map(math.isfinite)]
            ax.plot(ok[col], ok["val_loss"], marker="o", markersize=3, color=f"C{i % 10}", label=str(name))
            best = ok[ok["chosen"]]
            ax.plot(best[col], best["val_loss"], marker="o", markersize=10, markerfacecolor="none",
                    linestyle="none", color=f"C{i % 10}")
        grid = sorted(set(shown[col]))  # the grid's own values as ticks: minor log ticks would overlap them
        ax.set_xscale("log" if logged(grid) else "linear")
        ax.set_xticks(grid, [f"{v:g}" for v in grid])
        ax.minorticks_off()
        ax.set(xlabel="learning rate" if study.tune == LR else study.tune,
               title=f"{keys[-1]}={panel}" if panel is not None else study.name)
        ax.legend(fontsize=7, title=keys[0], title_fontsize=7)
    axes[0].set_ylabel(f"validation log-ppl at {study.select_at} steps (ring: chosen)")
    return fig
