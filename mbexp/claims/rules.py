"""The rules from one word of the vocabulary to the next (docs/claims.md#marks-outcomes-and-the-verdict): a
comparison's mark -> its outcome for the hypothesis, the outcomes -> the claim's verdict; and the declared conditions
and grid edges that qualify a verdict."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.claims.claim import Claim
from mbexp.claims.result import Comparison
from mbexp.claims.statistics import STATISTICS
from mbexp.claims.vocabulary import (
    AGREES,
    BETTER,
    CONTRADICTS,
    DISAGREES,
    EQUIVALENT,
    NOT_RESOLVED,
    NOT_TESTED,
    OPEN,
    SUPPORTS,
    UNTESTED,
    WORSE,
)


def outcome(claim: Claim, c: Comparison) -> str:
    """What one comparison's mark says about the hypothesis (an ordering pair reads as `better`): a difference
    contradicts a better/worse hypothesis only when resolved beyond the margin the other way; for a statistic read
    `beyond_margin` (a sensitivity) better/worse needs the difference resolved beyond its margin, and is
    contradicted within it."""
    if math.isnan(c.interval.p) or math.isnan(c.interval.low):
        return UNTESTED
    if claim.hypothesis == EQUIVALENT:
        return SUPPORTS if c.mark == EQUIVALENT else CONTRADICTS if c.beyond_holm < stats.ALPHA else OPEN
    want = WORSE if claim.hypothesis == WORSE else BETTER
    if STATISTICS[claim.statistic].beyond_margin:
        if c.beyond_holm < stats.ALPHA:
            return SUPPORTS if (WORSE if c.interval.delta > 0 else BETTER) == want else CONTRADICTS
        return CONTRADICTS if c.mark == EQUIVALENT else OPEN
    if c.mark == want:
        return SUPPORTS
    # against it only when resolved beyond the margin the other way; inside the margin it reads equivalent
    return CONTRADICTS if c.mark in (BETTER, WORSE) and c.beyond_holm < stats.ALPHA else OPEN


def verdict(comparisons: list[Comparison]) -> str:
    """agrees: every comparison supports; disagrees: any contradicts; not tested: none could be tested."""
    outcomes = [c.outcome for c in comparisons]
    if not outcomes or all(o == UNTESTED for o in outcomes):
        return NOT_TESTED
    if CONTRADICTS in outcomes:
        return DISAGREES
    return AGREES if all(o == SUPPORTS for o in outcomes) else NOT_RESOLVED


def lr_edges(table, labels) -> dict:
    """label -> "low"/"high" for the rows among `labels` whose LR, chosen by their study's scan, is an end of its
    grid (the table's `lr_edge`, studies.annotate): the optimum may lie beyond it."""
    edge = dict(zip(table.rows["label"], table.rows["lr_edge"])) if "lr_edge" in table.rows else {}
    return {label: edge[label] for label in labels if isinstance(edge.get(label), str) and edge[label]}


def edge_text(edges: dict, name) -> str:
    """The qualifier for `lr_edges`, each row shown by `name(label)`."""
    rows = ", ".join(f"{name(label)} ({e})" for label, e in edges.items())
    return f"best LR at an end of the scan's grid for {rows}: the optimum may lie beyond it"


def past_epochs(claim: Claim, epochs: float) -> tuple[str, str] | None:
    """(tag, text) when the runs a claim reads see their corpus more often than it declares (`max_epochs`), or
    do not record how often; None when the condition holds or is not declared."""
    if claim.max_epochs is None:
        return None
    if pd.isna(epochs):
        return "epochs unknown", f"epochs not recorded (declared at most {claim.max_epochs:g})"
    plural = "s" if claim.max_epochs != 1 else ""
    return None if epochs <= claim.max_epochs else (
        f"> {claim.max_epochs:g} epoch{plural}", f"past {claim.max_epochs:g} epoch{plural} ({epochs:.2f} epochs)")
