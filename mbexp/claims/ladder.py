"""A ladder claim (statistic: trend, mbexp.claims.statistics.Trend): the fit-free trend of a gated FFN's paired Δ
over model size, read like any other claim (planned seeds, declared conditions, standing from the runs' recorded
digests)."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.ladder.scaling import ladder_points
from mbexp.analysis.ladder.trend import holm_p, ladder_deltas, trend
from mbexp.analysis.table import Table, cell_runs, slow_start_seeds
from mbexp.claims.claim import Claim
from mbexp.claims.provenance import History, standing
from mbexp.claims.result import Comparison, Result, seed_range, short
from mbexp.claims.rules import edge_text, lr_edges, outcome, past_epochs, verdict
from mbexp.claims.vocabulary import (
    EXPLORATORY,
    LR_EDGE,
    NOT_AS_DECLARED,
    NOT_OWN_LR,
    NOT_TESTED,
    RUNS_MISSING,
    SLOW_STARTS,
)


def tested(claim: Claim, table: Table | None, history: History | None = None,
           scan: pd.DataFrame | None = None) -> Result:
    """A ladder claim (statistic: trend): per (variant, baseline) pair, the fit-free trend of the paired Δ over
    ln(non-embedding parameters) at the claim's budget (analysis/ladder/trend.py; default the largest), on the
    planned seeds; resolved when the Holm-adjusted slope t-test and permutation p are both below α; `better`: Δ
    falls."""
    if table is None:
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"no finished runs of {claim.experiment}"])

    def family(seeds) -> tuple[list[Comparison], int]:
        trends, steps, sizes = claim_trends(table, claim.pairs, claim.at, seeds)
        out = [Comparison(r, b, t.interval, t90.interval, t.per_seed, len(t.seeds),
                          per_size={sizes[n]: d for n, d in t.deltas.items()})
               for (r, b), (t, t90) in zip(claim.pairs, trends)]
        got = [t for t, _ in trends]
        for c, t, p, q in zip(out, got, holm_p(got), stats.holm([t.p_permutation for t in got])):
            c.p_holm, c.p_permutation, c.p_permutation_holm = p, t.p_permutation, float(q)
            c.mark = stats.mark(c.interval.delta, c.p_holm, math.nan)
            c.outcome = outcome(claim, c)
            c.seeds_needed = stats.seeds_needed(c.interval.delta, c.deltas.std(ddof=1))  # of the per-seed slopes
        return out, steps

    planned = set(claim.seeds)
    try:
        (comparisons, steps), (everyone, _) = family(planned), family(None)
    except ValueError as err:  # variants the ladder lacks
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [str(err)])
    # every size of the claim's variants at the budget read: its row's label and slow-start seeds
    cells = {key: cell for key, cell in slow_starts(table, steps).items() if any(key[0] in p for p in claim.pairs)}
    for c in (*comparisons, *everyone):
        c.slow = {label: s for (v, _), (label, s) in cells.items() if v in (c.row, c.baseline) and s}
    present = {c.row: sorted(c.deltas.index) for c in everyone}
    texts = [f"fit-free: paired Δ vs the baseline per size at {steps} steps, its slope over ln N"]
    unmet = [f"planned seeds missing for {c.row}: {seed_range(planned - set(c.deltas.index))}"
             for c in comparisons if planned - set(c.deltas.index)]
    # a size the study declares (or the ladder has) but a pair lacks: the trend would read a shorter ladder
    sizes = (claim.protocol.get("rows") or {}).get("model") or list(dict.fromkeys(
        s for c in everyone for s in c.per_size))
    for c in everyone:
        if missing := [s for s in sizes if s not in c.per_size]:
            unmet.append(f"planned sizes missing for {c.row}: {', '.join(missing)}")
    tags = [RUNS_MISSING] if unmet else []
    own = table.rows["lr_own"].all() if "lr_own" in table.rows else table.tuned == "optim.lr"
    if claim.own_lr and not own:
        unmet.append("not at their own tuned LR: a size or FFN not at the LR its scan chose, or at one LR")
        tags.append(NOT_OWN_LR)
    read = table.runs[table.runs["seed"].isin(planned) & (table.runs["steps"] == steps)]
    if past := past_epochs(claim, read["epochs"].max()):
        tags.append(past[0])
        unmet.append(past[1])
    stand, declared, n_read = standing(claim, read, texts, history, scan)
    read_labels = [label for label, _ in cells.values()]
    if edges := lr_edges(table, read_labels):
        tags.append(LR_EDGE)
        texts.append(edge_text(edges, lambda label: short(label, read_labels)))
    if slow := {label: s for c in comparisons for label, s in c.slow.items()}:
        tags.append(SLOW_STARTS)
        texts.append("slow start (shown, not dropped): " + "; ".join(
            f"{short(label, read_labels)} seed {seed_range(s)}" for label, s in slow.items()))
    extra = set().union(*present.values()) - planned
    return Result(claim, comparisons, NOT_AS_DECLARED if unmet else verdict(comparisons), stand, present,
                  texts + unmet, tags, unmet, everyone if extra else [], n_read, declared)


def slow_starts(table: Table, steps: int) -> dict:
    """(variant, size) -> (the table row's label, its slow-start seeds) at `steps` (table.slow_start_seeds)."""
    points, _ = ladder_points(table)
    return {(p.variant, p.size): (p.label, slow_start_seeds(cell_runs(table, p.label, steps)))
            for p in points[points["steps"] == steps].itertuples()}


def claim_trends(table, pairs, at: tuple, seeds=None) -> tuple[list, int, dict]:
    """Per (variant, baseline) pair of a ladder claim, its Trend at the 95% and the 90% level on `seeds` (None: all),
    at the claim's train.steps (default the largest budget); that budget; and each size's name by its non-embedding
    parameters. ValueError names unknown variants."""
    points, _ = ladder_points(table)
    unknown = sorted({v for pair in pairs for v in pair} - set(points["variant"]))
    if unknown:
        raise ValueError(f"variants not in {table.experiment}: {', '.join(unknown)}")
    steps = dict(at).get("train.steps", points["steps"].max())
    out = []
    for row, base in pairs:
        deltas = {n: d[d.index.isin(seeds)] if seeds else d for n, d in ladder_deltas(points, row, base, steps).items()}
        out.append((trend(deltas), trend(deltas, level=stats.LEVEL90)))
    return out, steps, dict(zip(points["params_non_embedding"], points["size"]))
