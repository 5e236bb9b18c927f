"""A claim tested as a Holm family of paired comparisons (docs/claims.md#marks-outcomes-and-the-verdict): read on the
planned seeds within the declared conditions, each comparison's per-seed sides from its statistic
(mbexp.claims.statistics), the qualifiers beside the verdict, and its standing."""

import math

import pandas as pd

from mbexp.analysis import equivalent, stats
from mbexp.analysis.table import SENSITIVITY_AXES, Table, cell_runs, setting, slow_start_seeds
from mbexp.claims.claim import Claim
from mbexp.claims.provenance import History, standing
from mbexp.claims.result import Comparison, Result, seed_range, short
from mbexp.claims.rules import edge_text, lr_edges, outcome, past_epochs, verdict
from mbexp.claims.statistics import Statistic, warmups
from mbexp.claims.vocabulary import (
    EQUIVALENT,
    EXPLORATORY,
    LR_EDGE,
    NO_INTERVAL,
    NOT_AS_DECLARED,
    NOT_OWN_LR,
    NOT_TESTED,
    RUNS_MISSING,
    SLOW_STARTS,
    UNTESTED,
)


def tested(statistic: Statistic, claim: Claim, table: Table | None, history: History | None = None,
           scan: pd.DataFrame | None = None) -> Result:
    """The claim's family tested on the planned seeds (and, apart, on every seed present), its conditions checked,
    its standing read from the runs' recorded declarations and provenance."""
    labels = sorted({label for pair in claim.pairs for label in pair if label})
    if table is None:
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"no finished runs of {claim.experiment}"])
    unknown = [label for label in labels if label not in set(table.rows["label"])]
    value = at_value(statistic, claim, table)
    if unknown or value is _MISSING:
        why = f"rows not in {claim.experiment}: {', '.join(unknown)}" if unknown else \
            f"{claim.experiment} has no column {_at_text(claim) or 'of warm-up settings'}"
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [why])
    planned = set(claim.seeds)
    comparisons = family(statistic, claim, table, value, seeds=planned)
    for c in comparisons if not statistic.spans else ():
        c.ceq = equivalent.pair(table, c.row, c.baseline, value, planned) if c.baseline else {}
    cells = {label: _cells(statistic, table, label, value) for label in labels}
    present = {label: sorted(set(runs.loc[runs["status"] == "completed", "seed"])) for label, runs in cells.items()}
    extra = set().union(*present.values()) - planned
    texts, tags, unmet = qualifiers(statistic, claim, table, cells, present, comparisons, value)
    read = pd.concat(_read(statistic, table, label, value) for label in labels)
    read = read[read["seed"].isin(planned)]
    stand, declared, n_read = standing(claim, read, texts, history, scan)
    return Result(claim, comparisons, NOT_AS_DECLARED if unmet else verdict(comparisons), stand, present, texts,
                  tags, unmet, family(statistic, claim, table, value) if extra else [], n_read, declared)


_MISSING = object()


def at_value(statistic: Statistic, claim: Claim, table: Table):
    """The column value the claim is read at; None when the table has no column axis or the claim spans it."""
    if statistic.spans:
        return None if table.column in SENSITIVITY_AXES and len(table.columns) > 1 else _MISSING
    if not claim.at:
        return table.reference if table.column else None
    (key, value), = claim.at
    if key != table.column:
        return _MISSING
    match = [v for v in table.columns if v == value]
    return match[0] if match else _MISSING


def _at_text(claim: Claim) -> str:
    return ", ".join(f"{k}={setting(v)}" for k, v in claim.at)


def _cells(statistic: Statistic, table: Table, label: str, value) -> pd.DataFrame:
    """The runs behind a label in this claim: its cell at the value, or every column for a statistic that spans."""
    if statistic.spans:
        return table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    return cell_runs(table, label, value)


def _read(statistic: Statistic, table: Table, label: str, value) -> pd.DataFrame:
    """Every run the claim reads for a label: its cell at every tuned value tried (the choice reads them all)."""
    runs = table.runs[table.runs["label"] == label]
    return runs[runs["_col"] == value] if not statistic.spans and table.column else runs


def family(statistic: Statistic, claim: Claim, table: Table, value, seeds=None) -> list[Comparison]:
    """Each comparison of the claim with Holm over the claim's family only, its mark and what it says."""
    return compared(claim, [(pair, *statistic.sides(table, pair, value, seeds)) for pair in claim.pairs])


def compared(claim: Claim, sided: list, level: float = stats.LEVEL, level90: float = stats.LEVEL90,
             looks: int = 1) -> list[Comparison]:
    """Per (pair, a, b) of per-seed values, its comparison at `level` (TOST at `level90`); every p multiplied by
    `looks` (a replication's correction for two looks, at most 1), then Holm over the family; marks and outcomes."""
    out = []
    for (row, base), a, b in sided:
        interval = stats.compare(a, b, level=level)
        deltas = stats.seed_deltas(a, b)
        out.append(Comparison(row, base, interval, stats.compare(a, b, level=level90), deltas,
                              len(deltas) if interval.method == "paired" else min(len(a), len(b))))

    p_holm = stats.holm([c.interval.p for c in out], looks)
    tost = stats.holm([stats.tost(c.interval, claim.margin) for c in out], looks)
    far = stats.holm([stats.beyond_margin(c.interval, claim.margin) for c in out], looks)
    for c, p, t, f in zip(out, p_holm, tost, far):
        c.p_holm, c.tost_holm, c.beyond_holm = p, t, f
        # a margin is read first: a difference resolved nonzero but inside the margin is still equivalent within it
        c.mark = stats.mark(c.interval.delta, p, t)
        c.outcome = outcome(claim, c)
        if c.outcome == UNTESTED:
            c.mark = NO_INTERVAL
        effect = claim.margin if claim.hypothesis == EQUIVALENT else c.interval.delta
        c.seeds_needed = stats.seeds_needed(effect, c.deltas.std(ddof=1)) if c.interval.method == "paired" \
            else math.nan
    return out


def qualifiers(statistic: Statistic, claim: Claim, table: Table, cells: dict, present: dict, comparisons: list,
               value=None) -> tuple[list, list, list]:
    """What qualifies the verdict, each in full and as a short tag, and the declared conditions the runs do not
    meet (planned runs missing, epochs, own LR, divergence): any of those makes it *not tested as declared*."""
    out, tags, unmet = [], [], []

    def add(tag: str, text: str, condition: bool = False) -> None:
        tags.append(tag)
        out.append(text)
        if condition:
            unmet.append(text)

    planned = set(claim.seeds)
    extra = sorted(set().union(*present.values()) - planned)
    if extra:
        add("seeds added", f"seeds {seed_range(extra)} added after the plan (planned "
            f"{seed_range(planned)}): shown apart, the verdict reads the planned seeds")
    missing = {label: sorted(planned - set(seeds)) for label, seeds in present.items() if planned - set(seeds)}
    if missing:
        add(RUNS_MISSING, "planned runs missing: " + "; ".join(f"{short(label, cells)} seed {seed_range(s)}"
                                                                 for label, s in missing.items()), True)
    runs = pd.concat(cells.values())
    done = runs[(runs["status"] == "completed") & runs["seed"].isin(planned)]
    if past := past_epochs(claim, done["epochs"].max()):
        add(*past, True)
    if claim.own_lr:
        tuned = table.tuned == "optim.lr"
        own = dict(zip(table.rows["label"], table.rows["lr_own"])) if "lr_own" in table.rows else None
        shared = [label for label in cells if not own.get(label)] if own is not None else \
            [label for label in cells if not tuned or _read(statistic, table, label, value)["_tv"].nunique() < 2]
        if shared:
            lrs = sorted({float(i.get("optim.lr")) for i in done["identity"] if i.get("optim.lr") is not None})
            at = f" (one lr: {', '.join(setting(v) for v in lrs)})" if lrs else ""
            add(NOT_OWN_LR, f"not at their own tuned LR: {len(shared)} of {len(cells)} rows{at}", True)
    diverged = int(((runs["status"] == "diverged") & runs["seed"].isin(planned)).sum())
    if diverged:
        add("diverged runs", f"{diverged} diverged planned run{'s' if diverged > 1 else ''}", True)
    if table.split == "validation":
        add("validation split", "validation split (runs without a test split)")
    if statistic.spans:
        edge = [label for label in cells if _edge(table, label, planned)]
        if edge:
            add("best warm-up at grid edge", f"best warm-up the largest tried for "
                f"{', '.join(short(label, cells) for label in edge)}: {statistic.bound(len(edge))}")
    if edges := lr_edges(table, cells):
        add(LR_EDGE, edge_text(edges, lambda label: short(label, cells)))
    slow = {label: slow_start_seeds(r) for label, r in cells.items() if statistic.slow_starts}
    if any(slow.values()):
        add(SLOW_STARTS, "slow start (shown, not dropped): " + "; ".join(
            f"{short(label, cells)} seed {seed_range(s)}" for label, s in slow.items() if s))
    for c in comparisons:
        c.slow = {label: slow.get(label, []) for label in (c.row, c.baseline) if label}
    return out, tags, unmet


def _edge(table: Table, label: str, seeds) -> bool:
    """Whether the warm-up best on validation is the largest tried: the sensitivity is then a lower bound."""
    val, _ = warmups(table, label, seeds)
    best = stats.best_setting(val)
    return best is not None and len(val) > 1 and best == max(val)
