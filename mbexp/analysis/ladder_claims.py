"""Ladder claims (statistic: trend): the fit-free trend of a gated FFN's paired Δ over model size, read like any
other claim (planned seeds, declared conditions, standing from the runs' recorded digests)."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.claims import Comparison, Result, outcome, seed_range, verdict
from mbexp.analysis.table import Table
from mbexp.declarations import CONFIRMATORY, EXPLORATORY, NOT_AS_DECLARED, NOT_TESTED, Claim


def ladder_trend(claim: Claim, table: Table | None) -> Result:
    """A ladder claim (statistic: trend): per (variant, baseline) pair, the fit-free trend of the paired Δ over
    ln(non-embedding parameters) at the claim's budget (analysis/trend.py; default the largest), on the planned
    seeds; resolved when the Holm-adjusted slope t-test and permutation p are both below α; `better`: Δ falls."""
    from mbexp.analysis import trend as fit_free
    from mbexp.analysis.scaling import ladder_points

    if table is None:
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"no finished runs of {claim.experiment}"])
    points, _ = ladder_points(table)
    unknown = sorted({v for pair in claim.pairs for v in pair} - set(points["variant"]))
    if unknown:
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"variants not in {claim.experiment}: "
                                                               f"{', '.join(unknown)}"])
    steps = dict(claim.at).get("train.steps", points["steps"].max())

    def tested(seeds) -> list[Comparison]:
        out, permuted = [], []
        for row, base in claim.pairs:
            deltas = {n: d[d.index.isin(seeds)] if seeds else d
                      for n, d in fit_free.ladder_deltas(points, row, base, steps).items()}
            t, t90 = fit_free.trend(deltas), fit_free.trend(deltas, level=0.90)
            out.append(Comparison(row, base, stats.Interval(t.slope, t.low, t.high, p=t.p, df=len(t.seeds) - 1,
                                                            method="trend"),
                                  stats.Interval(t90.slope, t90.low, t90.high, method="trend"),
                                  pd.Series(t.slopes, index=list(t.seeds[:len(t.slopes)]), dtype=float),
                                  len(t.seeds)))
            permuted.append(t.p_permutation)
        for c, p, q in zip(out, stats.holm([c.interval.p for c in out]), stats.holm(permuted)):
            c.p_holm = max(p, q)
            c.mark = stats.mark(c.interval.delta, c.p_holm, math.nan)
            c.outcome = outcome(claim, c)
        return out

    planned = set(claim.seeds)
    comparisons, everyone = tested(planned), tested(None)
    present = {c.row: sorted(c.deltas.index) for c in everyone}
    texts = [f"fit-free: paired Δ vs the baseline per size at {steps} steps, its slope over ln N"]
    unmet = [f"planned seeds missing for {c.row}: {seed_range(planned - set(c.deltas.index))}"
             for c in comparisons if planned - set(c.deltas.index)]
    own = table.rows["lr_own"].all() if "lr_own" in table.rows else table.tuned == "optim.lr"
    if claim.own_lr and not own:
        unmet.append("not at their own tuned LR: a size or FFN not at the LR its scan chose, or at one LR")
    read = table.runs[table.runs["seed"].isin(planned) & (table.runs["steps"] == steps)]
    if claim.max_epochs is not None and read["epochs"].max() > claim.max_epochs:
        unmet.append(f"past {claim.max_epochs:g} epoch ({read['epochs'].max():.2f} epochs)")
    declared = int(sum(d.get(claim.id) == claim.digest for d in read["declarations"]))
    standing = CONFIRMATORY if len(read) and declared == len(read) else EXPLORATORY
    if standing == EXPLORATORY:
        texts.append(f"exploratory: {len(read) - declared} of {len(read)} runs read were not launched under this "
                     "declaration")
    extra = set().union(*present.values()) - planned
    return Result(claim, comparisons, NOT_AS_DECLARED if unmet else verdict(comparisons), standing, present,
                  texts + unmet, [], unmet, everyone if extra else [], len(read), declared)
