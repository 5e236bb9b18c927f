"""Replications by rule (docs/studies.md): a claim that declares `replicates: ID` is read pooled with the claim it
repeats, over both studies' planned seeds, every p doubled for the two looks (Bonferroni ×2) and its interval
widened to match; the first study's own verdict stands beside it, the replication's alone is never shown."""

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.ladder.scaling import ladder_points
from mbexp.analysis.ladder.trend import ladder_deltas, trend
from mbexp.analysis.table import Table
from mbexp.claims.claim import Claim
from mbexp.claims.family import compared
from mbexp.claims.result import Comparison, Result
from mbexp.claims.rules import outcome, verdict
from mbexp.claims.vocabulary import (
    CONFIRMATORY,
    EQUIVALENT,
    EXPLORATORY,
    NOT_AS_DECLARED,
    NOT_TESTED,
)

LOOKS = 2  # a replication is the second look at one question
CORRECTION = f"Bonferroni ×{LOOKS}"
LEVEL = 1 - stats.ALPHA / LOOKS  # the pooled interval's coverage: the two looks' share of α each
LEVEL90 = 1 - 2 * stats.ALPHA / LOOKS  # the TOST interval beside it


@dataclass
class Pooled:
    """A replication read with the claim it repeats: each comparison over both studies' planned seeds."""

    comparisons: list
    verdict: str
    standing: str  # confirmatory only when both claims are
    seeds: tuple  # the planned seeds pooled (both claims')
    first: Result  # the replicated claim's own result, shown beside
    texts: list  # why it could not be read, when it could not


# (claim, table, (row, baseline), planned seeds) -> the per-seed values (a, b) whose difference a comparison tests
Sides = Callable[[Claim, Table, tuple, set], tuple[pd.Series, pd.Series]]


def pool_all(results: list[Result], tables: dict[str, Table], sides: Sides) -> None:
    """Sets `pooled` on every result whose claim replicates another (parse_claims checked that it exists)."""
    by_id = {r.claim.id: r for r in results}
    for r in results:
        if r.claim.replicates:
            first = by_id[r.claim.replicates]
            r.pooled = pool(r, first, tables.get(r.claim.experiment), tables.get(first.claim.experiment), sides)


def pool(rep: Result, first: Result, table: Table | None, first_table: Table | None, sides: Sides) -> Pooled:
    """The replication `rep` and the claim it repeats read as one: their planned seeds pooled, Holm over the claim's
    comparisons after the two-look correction."""
    claim, seeds = rep.claim, tuple(sorted({*rep.claim.seeds, *first.claim.seeds}))
    standing = CONFIRMATORY if rep.standing == first.standing == CONFIRMATORY else EXPLORATORY
    if table is None or first_table is None:
        return Pooled([], NOT_TESTED, standing, seeds, first, ["no finished runs of one of the two studies"])
    if shared := set(claim.seeds) & set(first.claim.seeds):
        return Pooled([], NOT_TESTED, standing, seeds, first, [f"seeds planned by both: {sorted(shared)}"])
    comparisons = _pooled_trends(claim, first.claim, table, first_table) if claim.statistic == "trend" else \
        _pooled_deltas(claim, first.claim, table, first_table, sides)
    # a condition either claim declared and its runs do not meet holds for the pooled reading too
    unmet = [f"{r.claim.id}: {text}" for r in (first, rep) for text in r.unmet]
    return Pooled(comparisons, NOT_AS_DECLARED if unmet else verdict(comparisons), standing, seeds, first, unmet)


def _pooled_deltas(claim: Claim, first: Claim, table: Table, first_table: Table, sides: Sides) -> list[Comparison]:
    """Per (row, baseline), the per-seed values of both studies side by side, compared as one sample."""
    sided = []
    for pair in claim.pairs:
        both = [sides(c, t, pair, set(c.seeds)) for c, t in ((first, first_table), (claim, table))]
        sided.append((pair, *(pd.concat([s[i] for s in both]) for i in (0, 1))))
    return compared(claim, sided, LEVEL, LEVEL90, LOOKS)


def _pooled_trends(claim: Claim, first: Claim, table: Table, first_table: Table) -> list[Comparison]:
    """Per (variant, baseline), the per-size paired Δ of both ladders' planned seeds pooled at each size both have,
    its trend over ln N; resolved when both the t-test and the permutation p, doubled then Holm-adjusted, are < α."""
    out = []
    for row, base in claim.pairs:
        parts = [_ladder(c, t, row, base) for c, t in ((first, first_table), (claim, table))]
        sizes = sorted(set(parts[0]) & set(parts[1]))
        deltas = {n: pd.concat([parts[0][n], parts[1][n]]) for n in sizes}
        t, t90 = trend(deltas, level=LEVEL), trend(deltas, level=LEVEL90)
        c = Comparison(row, base, t.interval, t90.interval, t.per_seed, len(t.seeds), per_size=t.deltas)
        c.p_permutation = t.p_permutation
        out.append(c)
    p = stats.holm([c.interval.p for c in out], LOOKS)
    q = stats.holm([c.p_permutation for c in out], LOOKS)
    for c, p_c, q_c in zip(out, p, q):
        c.p_holm, c.p_permutation_holm = max(float(p_c), float(q_c)), float(q_c)
        c.mark = stats.mark(c.interval.delta, c.p_holm, float("nan"))
        c.outcome = outcome(claim, c)
    return out


def _ladder(claim: Claim, table: Table, row: str, base: str) -> dict:
    """{N: per-seed Δ} of `row` against `base` on the claim's planned seeds at its budget (default the largest)."""
    points, _ = ladder_points(table)
    steps = dict(claim.at).get("train.steps", points["steps"].max())
    return {n: d[d.index.isin(claim.seeds)] for n, d in ladder_deltas(points, row, base, steps).items()}


def mark_text(c: Comparison) -> str:
    """A pooled comparison's mark as the tables write it."""
    return "equiv." if c.mark == EQUIVALENT else c.mark


CSV_COLUMNS = ["replicates", "looks_correction", "first_verdict", "pooled_verdict", "pooled_standing",
               "pooled_seeds", "pooled_n", "pooled_delta", "pooled_ci_low", "pooled_ci_high", "pooled_p_holm",
               "pooled_mark"]


def csv_fields(result: Result, i: int) -> dict:
    """claims.csv's replication columns for the result's i-th comparison (empty for a claim that replicates none)."""
    pooled = result.pooled
    if pooled is None:
        return {}
    out = {"replicates": result.claim.replicates, "looks_correction": CORRECTION,
           "first_verdict": pooled.first.verdict, "pooled_verdict": pooled.verdict,
           "pooled_standing": pooled.standing, "pooled_seeds": " ".join(map(str, pooled.seeds))}
    if i < len(pooled.comparisons):
        c = pooled.comparisons[i]
        out |= {"pooled_n": c.n, "pooled_delta": c.interval.delta, "pooled_ci_low": c.interval.low,
                "pooled_ci_high": c.interval.high, "pooled_p_holm": c.p_holm, "pooled_mark": c.mark}
    return out


def section(result: Result, name: Callable[[Comparison], str], fmt: Callable) -> list[str]:
    """docs/results.md's lines for a replication: the pooled reading (the one verdict shown for the question) and
    the first study's own verdict beside it."""
    pooled = result.pooled
    if pooled is None:
        return []
    first = pooled.first
    lines = [f"Pooled with `{first.claim.id}` (this claim replicates it): seeds {' '.join(map(str, pooled.seeds))}, "
             f"{CORRECTION} for the two looks ({LEVEL:.1%} intervals, p doubled, then Holm over the family): "
             f"**{pooled.verdict}** ({pooled.standing}); the first study alone: **{first.verdict}** "
             f"({first.standing}). This claim's own verdict above is never shown alone.", ""]
    lines += [f"- {t}" for t in pooled.texts]
    if pooled.comparisons:
        lines += [f"| comparison | n | Δ ({LEVEL:.1%} CI) | p (×{LOOKS}, Holm) | mark | says |",
                  "|:---|---:|---:|---:|:---|:---|"]
        lines += [f"| {name(c)} | {c.n} | {fmt(c.interval.delta, '+.4f')} [{fmt(c.interval.low, '+.4f')}, "
                  f"{fmt(c.interval.high, '+.4f')}] | {fmt(c.p_holm, '.2g')} | {mark_text(c)} | {c.outcome} |"
                  for c in pooled.comparisons]
    return lines + [""]
