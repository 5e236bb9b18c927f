"""Decision accuracy along a ladder (docs/ladders.md#decision-accuracy; DataDecide, 2025): per rung, the share of
variant pairs ranked in the order the largest rung ranks them, with a bootstrap interval over seeds."""

import math
from itertools import combinations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mbexp.analysis.table import Table

RESAMPLES = 2000
LEVEL = 0.95


def agreement(losses: np.ndarray, reference: np.ndarray) -> tuple[int, int]:
    """(pairs ranked alike, pairs): pairs (i, j) of variants whose loss difference has the same sign in `losses`
    as in `reference` (a tie matches only a tie)."""
    pairs = list(combinations(range(len(losses)), 2))
    same = sum(np.sign(losses[i] - losses[j]) == np.sign(reference[i] - reference[j]) for i, j in pairs)
    return int(same), len(pairs)


def accuracies(means: np.ndarray) -> np.ndarray:
    """Per rung (rows of `means`, rungs × variants, smallest first), the share of pairs ranked as the last rung."""
    found = [agreement(row, means[-1]) for row in means]
    return np.array([same / pairs if pairs else math.nan for same, pairs in found])


def bootstrap(cube: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per rung over seeds drawn with replacement (`cube`: seeds × rungs × variants), the
    largest rung's order redrawn with them."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, cube.shape[0], size=(resamples, cube.shape[0]))
    values = np.array([accuracies(cube[d].mean(axis=0)) for d in draws])
    tail = (1 - LEVEL) / 2 * 100
    return np.percentile(values, tail, axis=0), np.percentile(values, 100 - tail, axis=0)


def frame(points: pd.DataFrame) -> pd.DataFrame:
    """Per budget and rung below the largest, the decision accuracy against the largest rung: `points` are a
    ladder's (scaling.ladder_points), over the variants present at every rung of the budget. The interval is over the
    seeds every point of the budget has (none below 2)."""
    rows = []
    for steps, group in points.groupby("steps", sort=True):
        sizes = group.groupby("size")["params_non_embedding"].first().sort_values()
        variants = [v for v in dict.fromkeys(group["variant"]) if set(group.loc[group["variant"] == v, "size"])
                    >= set(sizes.index)]
        if len(sizes) < 2 or len(variants) < 2:
            continue
        cell = {(p.size, p.variant): p.losses for p in group.itertuples() if p.variant in variants}
        means = np.array([[cell[(s, v)].mean() for v in variants] for s in sizes.index])
        seeds = sorted(set.intersection(*(set(cell[k].index) for k in cell)))
        low = high = np.full(len(sizes), math.nan)
        if len(seeds) >= 2:
            cube = np.array([[[cell[(s, v)][seed] for v in variants] for s in sizes.index] for seed in seeds])
            low, high = bootstrap(cube)
        for i, (size, params) in enumerate(sizes.items()):
            if i == len(sizes) - 1:
                break
            same, n = agreement(means[i], means[-1])
            rows.append({"steps": int(steps), "size": size, "params_non_embedding": params,
                         "reference": sizes.index[-1],
                         "pairs_same": same, "pairs": n, "accuracy": same / n, "low": low[i], "high": high[i],
                         "seeds": len(seeds), "variants": " ".join(variants)})
    return pd.DataFrame(rows, columns=["steps", "size", "params_non_embedding", "reference", "pairs_same", "pairs",
                                       "accuracy", "low", "high", "seeds", "variants"])


def to_markdown(experiment: str, decisions: pd.DataFrame) -> str:
    """The table with its caption and legend."""
    lines = [f"**{experiment}: decision accuracy** — per rung, the share of variant pairs ranked in the same order as "
             "at the largest rung (DataDecide, 2025), by mean final loss.", "",
             f"| steps | rung | non-emb. params | reference | pairs alike | accuracy ({LEVEL:.0%} CI) | seeds |",
             "|---:|:---|---:|:---|---:|---:|---:|"]
    for r in decisions.itertuples():
        ci = "" if pd.isna(r.low) else f" [{r.low:.2f}, {r.high:.2f}]"
        lines.append(f"| {r.steps} | {r.size} | {r.params_non_embedding:,.0f} | {r.reference} | {r.pairs_same} of "
                     f"{r.pairs} | {r.accuracy:.2f}{ci} | {r.seeds} |")
    variants = decisions["variants"].iloc[0] if len(decisions) else ""
    lines += ["", f"Variants: {variants}. Interval: {LEVEL:.0%} percentile bootstrap over the seeds every point of "
              "the budget has, the largest rung's order redrawn with them; with 3 variants, 3 pairs: an accuracy of "
              "1/3 or 0 says the small rung would have picked differently."]
    return "\n".join(lines) + "\n"


def to_csv(decisions: pd.DataFrame) -> str:
    return decisions.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def plot(experiment: str, decisions: pd.DataFrame) -> Figure:
    """Accuracy against non-embedding parameters, one line per budget (nudged apart), the interval as error bars."""
    fig = Figure(figsize=(6, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    groups = list(decisions.groupby("steps"))
    for i, (steps, group) in enumerate(groups):
        err = np.array([group["accuracy"] - group["low"], group["high"] - group["accuracy"]])
        x = group["params_non_embedding"] * 1.04 ** (i - (len(groups) - 1) / 2)
        ax.errorbar(x, group["accuracy"], yerr=None if np.isnan(err).all() else err, marker="o", capsize=3,
                    label=f"{steps} steps")
    ax.axhline(0.5, color="grey", lw=0.8, ls=":", label="chance")
    ax.set(xscale="log", ylim=(-0.05, 1.05), xlabel="non-embedding parameters",
           ylabel=f"pairs ranked as the largest rung ({LEVEL:.0%} CI)",
           title=f"{experiment}: decision accuracy against {decisions['reference'].iloc[0]}")
    ax.legend(fontsize="small", frameon=False)
    return fig


def decisions_of(table: Table) -> pd.DataFrame | None:
    """The decision-accuracy frame of a ladder's table; None when it is no ladder or has no two rungs to compare."""
    from mbexp.analysis.ladder.scaling import is_ladder, ladder_points

    if not is_ladder(table):
        return None
    found = frame(ladder_points(table)[0])
    return found if len(found) else None
