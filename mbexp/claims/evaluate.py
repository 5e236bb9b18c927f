"""Every declared claim's Result against the tables (docs/claims.md): each tested by its statistic
(mbexp.claims.statistics), its standing by the provenance rule, the comparisons of one study Holm-adjusted together
beside each claim's own family, and a replication read pooled with the claim it repeats (analysis.replication)."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.replication import pool_all
from mbexp.analysis.table import Table
from mbexp.claims import family, ladder, rules, transfer
from mbexp.claims.claim import Claim
from mbexp.claims.file import claims_path
from mbexp.claims.parse import load_claims, scan_experiment
from mbexp.claims.provenance import History
from mbexp.claims.result import Result
from mbexp.claims.statistics import STATISTICS
from mbexp.claims.vocabulary import NOT_AS_DECLARED


def evaluate(claims: list[Claim], tables: dict[str, Table], history: History | None = None) -> list[Result]:
    """Each claim's result; its standing by the provenance rule against `history` (None: no git history, so
    exploratory)."""
    results = [evaluate_claim(claim, tables.get(claim.experiment), history, scan_runs(claim, tables))
               for claim in claims]
    study_family(results)
    pool_all(results, tables, sides)
    return results


def sides(claim: Claim, table: Table, pair: tuple, seeds) -> tuple[pd.Series, pd.Series]:
    """The per-seed values of one comparison of a claim, at the column the claim reads, on `seeds`."""
    statistic = STATISTICS[claim.statistic]
    return statistic.sides(table, pair, family.at_value(statistic, claim, table), seeds)


def evaluate_file(results_dir, tables: dict[str, Table]) -> list[Result]:
    """The verdicts of <results_dir>/claims.yaml; none when nothing is there (a results folder without claims)."""
    path = claims_path(results_dir)
    return evaluate(load_claims(path), tables, History(path)) if path else []


def evaluate_claim(claim: Claim, table: Table | None, history: History | None = None,
                   scan: pd.DataFrame | None = None) -> Result:
    """The claim tested by its statistic on the planned seeds, its conditions checked, its standing read: a family of
    paired comparisons, a ladder's trend over model size, or its study's scan choices across width."""
    statistic = STATISTICS[claim.statistic]
    if statistic.ladder:
        return ladder.tested(claim, table, history, scan)
    if statistic.transfer:
        return transfer.tested(claim, history, scan)
    return family.tested(statistic, claim, table, history, scan)


def scan_runs(claim: Claim, tables: dict[str, Table]) -> pd.DataFrame | None:
    """The runs of the scan that chose a study claim's LRs, when its own study ran it (a study reusing another's
    scan reads runs launched under that study's claims)."""
    scan = scan_experiment(claim)
    return tables[scan].runs if scan in tables else None


def study_family(results: list) -> None:
    """Holm over every comparison of one declared study, all its claims and budgets: each comparison's study-wide
    p (differences) and mark (TOST too where the statistic reads it), shown beside its claim's own family."""
    by_study: dict = {}
    for r in results:
        if r.claim.study:
            by_study.setdefault(r.claim.study, []).extend((r.claim, c) for c in r.comparisons)
    for members in by_study.values():
        p = stats.holm([c.interval.p for _, c in members])
        tost = stats.holm([stats.tost(c.interval, claim.margin) if STATISTICS[claim.statistic].study_tost
                           else math.nan for claim, c in members])
        for (_, c), p_study, t_study in zip(members, p, tost):
            c.p_holm_study = p_study
            c.mark_study = c.mark if math.isnan(p_study) else stats.mark(c.interval.delta, p_study, t_study)
        if members and members[0][0].protocol.get("family") == "study":
            read_study_family(members, [r for r in results if r.claim.study == members[0][0].study])


def read_study_family(members: list, results: list) -> None:
    """A study declared with `family: study`: its verdicts read the study-wide Holm (p, TOST and beyond-margin
    alike) instead of each claim's own family."""
    far = stats.holm([stats.beyond_margin(c.interval, claim.margin) for claim, c in members])
    tost = stats.holm([stats.tost(c.interval, claim.margin) for claim, c in members])
    for (claim, c), f, t in zip(members, far, tost):
        if math.isnan(c.p_holm_study):
            continue
        c.p_holm, c.mark, c.beyond_holm = c.p_holm_study, c.mark_study, f
        if STATISTICS[claim.statistic].ladder:  # a trend is resolved by its permutation p too
            c.p_holm = max(c.p_holm_study, c.p_permutation_holm)
            c.mark = stats.mark(c.interval.delta, c.p_holm, math.nan)
        c.tost_holm = t if STATISTICS[claim.statistic].study_tost else c.tost_holm
        c.outcome = rules.outcome(claim, c)
    for r in results:
        r.verdict = NOT_AS_DECLARED if r.unmet else rules.verdict(r.comparisons)
        r.qualifiers.append(f"Holm over study {r.claim.study}'s {len(members)} comparisons (family: study)")
