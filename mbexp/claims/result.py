"""What a claim's test yields: each comparison of its family and the claim's Result; and how they name seeds and
rows in text."""

import math
from dataclasses import dataclass, field

import pandas as pd

from mbexp.analysis import stats
from mbexp.claims.claim import Claim
from mbexp.claims.vocabulary import UNRESOLVED, UNTESTED


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
    ceq: dict = field(default_factory=dict)  # the baseline's compute to match the row (analysis.equivalent.pair)


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


def seed_range(seeds) -> str:
    """[0, 1, 2, 4] -> '0–2, 4'."""
    seeds, parts = sorted(seeds), []
    for s in seeds:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" if b > a + 1 else f"{a}, {b}" for a, b in parts) or "none"


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
