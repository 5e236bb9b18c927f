"""Claims (declared in results/claims.yaml, mbexp.declarations) and their computed verdicts: one Holm family per
claim, read on the planned seeds within the declared conditions, confirmatory or exploratory (docs/claims.md)."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.ladder_claims import ladder_trend
from mbexp.analysis.provenance import History
from mbexp.analysis.replication import pool_all
from mbexp.analysis.table import SENSITIVITY_AXES, Table, cell_runs, losses_at, setting, slow_start_seeds
from mbexp.analysis.verdicts import (
    LR_EDGE,
    NOT_OWN_LR,
    RUNS_MISSING,
    SLOW_STARTS,
    Comparison,
    Result,
    edge_text,
    lr_edges,
    outcome,
    past_epochs,
    seed_range,
    short,
    standing,
    study_family,
    verdict,
)
from mbexp.claims_file import claims_path
from mbexp.declarations import (
    EQUIVALENT,
    EXPLORATORY,
    NO_INTERVAL,
    NOT_AS_DECLARED,
    NOT_TESTED,
    UNTESTED,
    Claim,
    ClaimsError,
    load_claims,
    parse_claim,
    scan_experiment,
)

__all__ = ["Claim", "ClaimsError", "Comparison", "Result", "load_claims", "parse_claim", "evaluate", "evaluate_file",
           "family", "outcome", "verdict", "seed_range"]


def evaluate(claims: list[Claim], tables: dict[str, Table], history: History | None = None) -> list[Result]:
    """Each claim's result; its standing by the provenance rule against `history` (None: no git history, so
    exploratory)."""
    results = [evaluate_claim(claim, tables.get(claim.experiment), history, scan_runs(claim, tables))
               for claim in claims]
    study_family(results)
    pool_all(results, tables, lambda c, t, pair, seeds: _sides(c, t, pair, _at_value(c, t), seeds))
    return results


def evaluate_file(results_dir, tables: dict[str, Table]) -> list[Result]:
    """The verdicts of <results_dir>/claims.yaml; none when nothing is there (a results folder without claims)."""
    path = claims_path(results_dir)
    return evaluate(load_claims(path), tables, History(path)) if path else []


def scan_runs(claim: Claim, tables: dict[str, Table]) -> pd.DataFrame | None:
    """The runs of the scan that chose a study claim's LRs, when its own study ran it (a study reusing another's
    scan reads runs launched under that study's claims)."""
    scan = scan_experiment(claim)
    return tables[scan].runs if scan in tables else None


def evaluate_claim(claim: Claim, table: Table | None, history: History | None = None,
                   scan: pd.DataFrame | None = None) -> Result:
    """The claim's family tested on the planned seeds (and, apart, on every seed present), its conditions checked,
    its standing read from the runs' recorded declarations and provenance."""
    if claim.statistic == "trend":  # a ladder's fit-free trend: its own module
        return ladder_trend(claim, table, history, scan)
    labels = sorted({label for pair in claim.pairs for label in pair if label})
    if table is None:
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"no finished runs of {claim.experiment}"])
    unknown = [label for label in labels if label not in set(table.rows["label"])]
    value = _at_value(claim, table)
    if unknown or value is _MISSING:
        why = f"rows not in {claim.experiment}: {', '.join(unknown)}" if unknown else \
            f"{claim.experiment} has no column {_at_text(claim) or 'of warm-up settings'}"
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [why])
    planned = set(claim.seeds)
    comparisons = family(claim, table, value, seeds=planned)
    cells = {label: _cells(claim, table, label, value) for label in labels}
    present = {label: sorted(set(runs.loc[runs["status"] == "completed", "seed"])) for label, runs in cells.items()}
    extra = set().union(*present.values()) - planned
    texts, tags, unmet = qualifiers(claim, table, cells, present, comparisons, value)
    read = pd.concat(_read(claim, table, label, value) for label in labels)
    read = read[read["seed"].isin(planned)]
    stand, declared, n_read = standing(claim, read, texts, history, scan)
    return Result(claim, comparisons, NOT_AS_DECLARED if unmet else verdict(comparisons), stand, present, texts,
                  tags, unmet, family(claim, table, value) if extra else [], n_read, declared)


_MISSING = object()


def _at_value(claim: Claim, table: Table):
    """The column value the claim is read at; None when the table has no column axis or the claim spans it."""
    if claim.statistic != "delta":
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


def _cells(claim: Claim, table: Table, label: str, value) -> pd.DataFrame:
    """The runs behind a label in this claim: its cell at the value, or every column for a sensitivity."""
    if claim.statistic != "delta":
        return table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    return cell_runs(table, label, value)


def _read(claim: Claim, table: Table, label: str, value) -> pd.DataFrame:
    """Every run the claim reads for a label: its cell at every tuned value tried (the choice reads them all)."""
    runs = table.runs[table.runs["label"] == label]
    return runs[runs["_col"] == value] if claim.statistic == "delta" and table.column else runs


def _warmups(table: Table, label: str, seeds) -> tuple[dict, dict]:
    """(validation, reported) loss per warm-up setting by seed, of a row's completed runs on `seeds`."""
    runs = table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    done = runs[(runs["status"] == "completed") & (runs["seed"].isin(seeds) if seeds is not None else True)]
    cells = {v: done[done["_col"] == v].set_index("seed") for v in sorted(runs["_col"].unique())}
    return ({v: c["final_val_loss"] for v, c in cells.items()},
            {v: c[table.report].astype(float) for v, c in cells.items()})


def _sensitivity(table: Table, label: str, seeds) -> tuple[pd.Series, pd.Series]:
    """Reported loss at the smallest warm-up and at the one best on validation, by seed (stats.sensitivity)."""
    return stats.sensitivity_sides(*_warmups(table, label, seeds))


def _sides(claim: Claim, table: Table, pair: tuple, value, seeds) -> tuple[pd.Series, pd.Series]:
    """Per-seed values (a, b) whose difference the comparison tests."""
    row, base = pair
    if claim.statistic == "sensitivity":
        return _sensitivity(table, row, seeds)
    if claim.statistic == "sensitivity_diff":  # each row's per-seed sensitivity; their difference is paired
        return stats.seed_deltas(*_sensitivity(table, row, seeds)), stats.seed_deltas(*_sensitivity(table, base,
                                                                                                     seeds))
    a, b = losses_at(table, row, value), losses_at(table, base, value)
    return (a[a.index.isin(seeds)], b[b.index.isin(seeds)]) if seeds is not None else (a, b)


def family(claim: Claim, table: Table, value, seeds=None) -> list[Comparison]:
    """Each comparison of the claim with Holm over the claim's family only, its mark and what it says."""
    out = []
    for pair in claim.pairs:
        a, b = _sides(claim, table, pair, value, seeds)
        interval = stats.compare(a, b)
        deltas = stats.seed_deltas(a, b)
        out.append(Comparison(pair[0], pair[1], interval, stats.compare(a, b, level=stats.LEVEL90), deltas,
                              len(deltas) if interval.method == "paired" else min(len(a), len(b))))
    p_holm = stats.holm([c.interval.p for c in out])
    tost = stats.holm([stats.tost(c.interval, claim.margin) for c in out])
    far = stats.holm([stats.beyond_margin(c.interval, claim.margin) for c in out])
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


def qualifiers(claim: Claim, table: Table, cells: dict, present: dict, comparisons: list,
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
            [label for label in cells if not tuned or _read(claim, table, label, value)["_tv"].nunique() < 2]
        if shared:
            lrs = sorted({float(i.get("optim.lr")) for i in done["identity"] if i.get("optim.lr") is not None})
            at = f" (one lr: {', '.join(setting(v) for v in lrs)})" if lrs else ""
            add(NOT_OWN_LR, f"not at their own tuned LR: {len(shared)} of {len(cells)} rows{at}", True)
    diverged = int(((runs["status"] == "diverged") & runs["seed"].isin(planned)).sum())
    if diverged:
        add("diverged runs", f"{diverged} diverged planned run{'s' if diverged > 1 else ''}", True)
    if table.split == "validation":
        add("validation split", "validation split (runs without a test split)")
    if claim.statistic != "delta":
        edge = [label for label in cells if _edge(table, label, planned)]
        if edge:
            bound = "each sensitivity is a lower bound, so their difference is bounded neither way" \
                if claim.statistic == "sensitivity_diff" and len(edge) > 1 else "its sensitivity is a lower bound"
            add("best warm-up at grid edge", f"best warm-up the largest tried for "
                f"{', '.join(short(label, cells) for label in edge)}: {bound}")
    if edges := lr_edges(table, cells):
        add(LR_EDGE, edge_text(edges, lambda label: short(label, cells)))
    slow = {label: slow_start_seeds(r) for label, r in cells.items() if claim.statistic == "delta"}
    if any(slow.values()):
        add(SLOW_STARTS, "slow start (shown, not dropped): " + "; ".join(
            f"{short(label, cells)} seed {seed_range(s)}" for label, s in slow.items() if s))
    for c in comparisons:
        c.slow = {label: slow.get(label, []) for label in (c.row, c.baseline) if label}
    return out, tags, unmet


def _edge(table: Table, label: str, seeds) -> bool:
    """Whether the warm-up best on validation is the largest tried: the sensitivity is then a lower bound."""
    val, _ = _warmups(table, label, seeds)
    best = stats.best_setting(val)
    return best is not None and len(val) > 1 and best == max(val)
