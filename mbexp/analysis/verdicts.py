"""What a claim's test yields: each comparison of its family, the claim's result, and the rules that read the marks
as outcomes and the outcomes as a verdict (docs/claims.md#marks-outcomes-and-the-verdict)."""

import math
from dataclasses import dataclass, field

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.provenance import History, problem
from mbexp.declarations import (
    AGREES,
    BETTER,
    CONFIRMATORY,
    CONTRADICTS,
    DISAGREES,
    EQUIVALENT,
    EXPLORATORY,
    NOT_RESOLVED,
    NOT_TESTED,
    OPEN,
    SUPPORTS,
    UNRESOLVED,
    UNTESTED,
    WORSE,
    Claim,
)

# the README's qualifier tags that claims and ladder claims share
RUNS_MISSING, NOT_OWN_LR = "runs missing", "LR not tuned per row"
LR_EDGE, SLOW_STARTS = "LR at grid edge", "slow starts"


@dataclass
class Comparison:
    """One member of a claim's family, tested."""

    row: str
    baseline: str | None
    interval: stats.Interval
    interval90: stats.Interval
    deltas: pd.Series  # per-seed Δ (paired) by seed
    n: int
    p_holm: float = math.nan
    tost_holm: float = math.nan
    beyond_holm: float = math.nan  # two-sided test of H0 |Δ| ≤ margin (stats.beyond_margin)
    mark: str = UNRESOLVED
    outcome: str = UNTESTED
    seeds_needed: float = math.nan
    slow: dict = field(default_factory=dict)  # label -> slow-start seeds
    p_permutation: float = math.nan  # a trend's permutation p, raw and Holm-adjusted (p_holm: the larger of both)
    p_permutation_holm: float = math.nan
    per_size: dict = field(default_factory=dict)  # a ladder claim's: size -> mean paired Δ over the seeds read
    p_holm_study: float = math.nan  # Holm over every comparison of the claim's study (study_family), and its mark
    mark_study: str = ""


@dataclass
class Result:
    claim: Claim
    comparisons: list  # on the planned seeds: they decide the verdict
    verdict: str
    standing: str  # confirmatory: every run read was launched under the claim's current digest
    present: dict  # label -> seeds present
    qualifiers: list
    tags: list = field(default_factory=list)  # the qualifiers in a word or two each, for the README's headline
    unmet: list = field(default_factory=list)  # the declared conditions the runs do not meet, in words
    added: list = field(default_factory=list)  # the same comparisons on every seed present, when beyond the plan
    runs_read: int = 0
    runs_declared: int = 0  # of runs_read, those launched under the claim by the provenance rule
    regime: str = ""  # the n-gram baselines and scale of the runs read (analysis.regime), for the reader
    pooled: object = None  # a replication's reading pooled with the claim it repeats (analysis.replication.Pooled)


def outcome(claim: Claim, c: Comparison) -> str:
    """What one comparison's mark says about the hypothesis (an ordering pair reads as `better`): a difference
    contradicts a better/worse hypothesis only when resolved beyond the margin the other way; a sensitivity claim of
    better/worse needs the sensitivity resolved beyond its margin, and is contradicted within it."""
    if math.isnan(c.interval.p) or math.isnan(c.interval.low):
        return UNTESTED
    if claim.hypothesis == EQUIVALENT:
        return SUPPORTS if c.mark == EQUIVALENT else CONTRADICTS if c.beyond_holm < stats.ALPHA else OPEN
    want = WORSE if claim.hypothesis == WORSE else BETTER
    if claim.statistic == "sensitivity":
        if c.beyond_holm < stats.ALPHA:
            return SUPPORTS if (WORSE if c.interval.delta > 0 else BETTER) == want else CONTRADICTS
        return CONTRADICTS if c.mark == EQUIVALENT else OPEN
    if c.mark == want:
        return SUPPORTS
    # against it only when resolved beyond the margin the other way; inside the margin it reads equivalent
    return CONTRADICTS if c.mark in (BETTER, WORSE) and c.beyond_holm < stats.ALPHA else OPEN


def study_family(results: list) -> None:
    """Holm over every comparison of one declared study, all its claims and budgets: each comparison's study-wide
    p (differences) and mark (TOST for the delta statistic too), shown beside its claim's own family."""
    by_study: dict = {}
    for r in results:
        if r.claim.study:
            by_study.setdefault(r.claim.study, []).extend((r.claim, c) for c in r.comparisons)
    for members in by_study.values():
        p = stats.holm([c.interval.p for _, c in members])
        tost = stats.holm([stats.tost(c.interval, claim.margin) if claim.statistic == "delta" else math.nan
                           for claim, c in members])
        for (_, c), p_study, t_study in zip(members, p, tost):
            c.p_holm_study = p_study
            c.mark_study = c.mark if math.isnan(p_study) else stats.mark(c.interval.delta, p_study, t_study)


def verdict(comparisons: list[Comparison]) -> str:
    """agrees: every comparison supports; disagrees: any contradicts; not tested: none could be tested."""
    outcomes = [c.outcome for c in comparisons]
    if not outcomes or all(o == UNTESTED for o in outcomes):
        return NOT_TESTED
    if CONTRADICTS in outcomes:
        return DISAGREES
    return AGREES if all(o == SUPPORTS for o in outcomes) else NOT_RESOLVED


def seed_range(seeds) -> str:
    """[0, 1, 2, 4] -> '0–2, 4'."""
    seeds, parts = sorted(seeds), []
    for s in seeds:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" if b > a + 1 else f"{a}, {b}" for a, b in parts) or "none"


def lr_edges(table, labels) -> dict:
    """label -> "low"/"high" for the rows among `labels` whose LR, chosen by their study's scan, is an end of its
    grid (the table's `lr_edge`, studies.annotate): the optimum may lie beyond it."""
    edge = dict(zip(table.rows["label"], table.rows["lr_edge"])) if "lr_edge" in table.rows else {}
    return {label: edge[label] for label in labels if isinstance(edge.get(label), str) and edge[label]}


def edge_text(edges: dict, name) -> str:
    """The qualifier for `lr_edges`, each row shown by `name(label)`."""
    rows = ", ".join(f"{name(label)} ({e})" for label, e in edges.items())
    return f"best LR at an end of the scan's grid for {rows}: the optimum may lie beyond it"


def short(label: str, labels) -> str:
    """A label without the dash-separated words every label of its family shares at the start and the end."""
    words = [str(lab).split("-") for lab in labels]
    head = 0
    while all(len(w) > head + 1 for w in words) and len({w[head] for w in words}) == 1:
        head += 1
    tail = 0
    while all(len(w) > head + tail + 1 for w in words) and len({w[-1 - tail] for w in words}) == 1:
        tail += 1
    mine = label.split("-")
    return "-".join(mine[head:len(mine) - tail]) if len(words) > 1 else label


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


def standing(claim: Claim, read: pd.DataFrame, texts: list[str], history: History | None = None,
             scan: pd.DataFrame | None = None) -> tuple[str, int, int]:
    """(standing, runs launched under the declaration, runs read): confirmatory when every run read, the scan's
    runs of the rows read included, was by the provenance rule (analysis.provenance); else exploratory, with a line
    added to `texts` saying how many were not and why."""
    if scan is not None and len(read):
        read = pd.concat([read, scan[scan["label"].isin(set(read["label"]))]])
    declared = history.declared(claim) if history is not None and history.top is not None else None
    problems = [problem(run, claim, history, declared) for run in read.to_dict("records")]
    launched = sum(p is None for p in problems)
    if len(read) and launched == len(read):
        return CONFIRMATORY, launched, len(read)
    reasons = sorted({p for p in problems if p}, key=lambda p: -problems.count(p))
    why = f" ({'; '.join(reasons[:2])}{'; ...' if len(reasons) > 2 else ''})" if reasons else ""
    texts.append(f"exploratory: {len(read) - launched} of {len(read)} runs read were not launched under this "
                 f"declaration{why}")
    return EXPLORATORY, launched, len(read)
