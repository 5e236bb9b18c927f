"""Claims as data (results/claims.yaml) and their computed verdicts: one Holm family per claim (docs/table.md)."""

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.table import SENSITIVITY_AXES, Table, cell_runs, losses_at, setting, slow_start_seeds

HYPOTHESES = ("better", "worse", "equivalent", "ordering")
STATISTICS = ("delta", "sensitivity", "trend")
VERDICTS = ("agrees", "disagrees", "not resolved", "not tested")
OUTCOME = {"better": {"better": "supports", "worse": "contradicts"},
           "worse": {"worse": "supports", "better": "contradicts"}}
KEYS = {"id", "claim", "paper", "paper_numbers", "experiment", "at", "baseline", "rows", "pairs", "hypothesis",
        "statistic", "margin", "seeds", "conditions", "note"}
CONDITIONS = {"own_lr", "max_epochs"}


@dataclass(frozen=True)
class Claim:
    """One pre-declared claim: what a paper says, where we test it, and how (see results/claims.yaml)."""

    id: str
    claim: str
    paper: str
    paper_numbers: str
    experiment: str
    hypothesis: str
    pairs: tuple  # (row, baseline) per comparison: the claim's Holm family; baseline None for a sensitivity
    seeds: tuple  # the seeds planned before the runs
    at: tuple = ()  # ((column key, value),) or () when the experiment has no column axis
    statistic: str = "delta"
    margin: float = 0.02
    own_lr: bool = False  # the claim needs every row at its own tuned learning rate
    max_epochs: float | None = 1.0  # the claim needs runs within this many epochs of the training split
    note: str = ""


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
    beyond_holm: float = math.nan
    mark: str = "not resolved"
    outcome: str = "untested"  # supports / contradicts / open / untested
    seeds_needed: float = math.nan
    slow: dict = field(default_factory=dict)  # label -> slow-start seeds


@dataclass
class Result:
    claim: Claim
    comparisons: list
    verdict: str
    planned_verdict: str
    present: dict  # label -> seeds present
    qualifiers: list
    tags: list = field(default_factory=list)  # the qualifiers in a word or two each, for the README's headline


class ClaimsError(ValueError):
    pass


def load_claims(path) -> list[Claim]:
    """The claims of a YAML file; ClaimsError names the file and the claim on a bad entry."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ClaimsError(f"claims file {path}: {err}") from None
    entries = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ClaimsError(f"claims file {path}: expected a mapping with a non-empty list `claims`")
    claims = [parse_claim(entry, data.get("margin", 0.02), f"{path} claim {i}") for i, entry in enumerate(entries)]
    ids = [c.id for c in claims]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ClaimsError(f"claims file {path}: repeated ids {', '.join(repeated)}")
    return claims


def parse_claim(entry, default_margin: float, where: str) -> Claim:
    """One claims-file entry as a Claim."""
    if not isinstance(entry, dict):
        raise ClaimsError(f"{where}: expected a mapping")
    where = f"{where} ({entry.get('id', '?')})"
    unknown = sorted(set(entry) - KEYS)
    missing = [k for k in ("id", "claim", "paper", "experiment", "hypothesis", "seeds") if k not in entry]
    if unknown or missing:
        raise ClaimsError(f"{where}: unknown keys {unknown} / missing keys {missing}")
    hypothesis, statistic = entry["hypothesis"], entry.get("statistic", "delta")
    if hypothesis not in HYPOTHESES or statistic not in STATISTICS:
        raise ClaimsError(f"{where}: hypothesis must be one of {', '.join(HYPOTHESES)} and statistic one of "
                          f"{', '.join(STATISTICS)}")
    rows = [str(r) for r in entry.get("rows", [])]
    if "pairs" in entry:
        pairs = tuple((str(a), str(b)) for a, b in entry["pairs"])
    elif hypothesis == "ordering":
        if len(rows) < 2:
            raise ClaimsError(f"{where}: an ordering needs at least 2 rows, best first")
        pairs = tuple(zip(rows[:-1], rows[1:]))
    elif statistic == "sensitivity":
        pairs = tuple((r, None) for r in rows)
    else:
        if "baseline" not in entry:
            raise ClaimsError(f"{where}: rows need a baseline (or give pairs)")
        pairs = tuple((r, str(entry["baseline"])) for r in rows)
    if not pairs:
        raise ClaimsError(f"{where}: no comparisons (rows or pairs)")
    conditions = entry.get("conditions") or {}
    if set(conditions) - CONDITIONS:
        raise ClaimsError(f"{where}: unknown conditions {sorted(set(conditions) - CONDITIONS)}")
    at = entry.get("at") or {}
    seeds = entry["seeds"]
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds) or not isinstance(at, dict):
        raise ClaimsError(f"{where}: seeds must be a list of integers and `at` a mapping")
    return Claim(
        id=str(entry["id"]), claim=str(entry["claim"]), paper=str(entry["paper"]),
        paper_numbers=str(entry.get("paper_numbers", "")), experiment=str(entry["experiment"]),
        hypothesis=hypothesis, pairs=pairs, seeds=tuple(sorted(seeds)), at=tuple(at.items()), statistic=statistic,
        margin=float(entry.get("margin", default_margin)), own_lr=bool(conditions.get("own_lr", False)),
        max_epochs=conditions.get("max_epochs", 1.0), note=str(entry.get("note", "")))


def evaluate(claims: list[Claim], tables: dict[str, Table]) -> list[Result]:
    return [evaluate_claim(claim, tables.get(claim.experiment)) for claim in claims]


def evaluate_file(path, tables: dict[str, Table]) -> list[Result]:
    """The verdicts of a claims file; none when the file does not exist (a results folder without claims)."""
    return evaluate(load_claims(path), tables) if Path(path).exists() else []


def evaluate_claim(claim: Claim, table: Table | None) -> Result:
    """The claim's family tested on all present seeds, and again on the planned seeds alone, with its qualifiers."""
    if claim.statistic == "trend":
        return ladder_trend(claim, table)
    labels = sorted({label for pair in claim.pairs for label in pair if label})
    if table is None:
        return Result(claim, [], "not tested", "not tested", {}, [f"no finished runs of {claim.experiment}"])
    unknown = [label for label in labels if label not in set(table.rows["label"])]
    value = _at_value(claim, table)
    if unknown or value is _MISSING:
        why = f"rows not in {claim.experiment}: {', '.join(unknown)}" if unknown else \
            f"{claim.experiment} has no column {_at_text(claim) or 'of warm-up settings'}"
        return Result(claim, [], "not tested", "not tested", {}, [why])
    comparisons = family(claim, table, value)
    planned = family(claim, table, value, seeds=set(claim.seeds))
    cells = {label: _cells(claim, table, label, value) for label in labels}
    present = {label: sorted(set(runs.loc[runs["status"] == "completed", "seed"])) for label, runs in cells.items()}
    texts, tags = qualifiers(claim, table, cells, present, comparisons)
    return Result(claim, comparisons, verdict(comparisons), verdict(planned), present, texts, tags)


def ladder_trend(claim: Claim, table: Table | None) -> Result:
    """A ladder claim (statistic: trend): Holm over its pairs' fit-free trends (analysis/trend.py), both p < α."""
    from mbexp.analysis.trend import claim_trends
    def tested(seeds) -> list[Comparison]:
        trends = claim_trends(table, claim.pairs, claim.at, seeds)[0] if table is not None else []
        out = [Comparison(r, b, t.interval, t90.interval, t.per_seed, len(t.seeds)) for (r, b), (t, t90) in
               zip(claim.pairs, trends)]
        for c, p, q in zip(out, stats.holm([t.p for t, _ in trends]), stats.holm([t.p_permutation for t, _ in trends])):
            c.p_holm, c.mark = max(p, q), stats.mark(c.interval.delta, max(p, q), math.nan)
            c.outcome = outcome(claim.hypothesis, c)
        return out

    try:
        return Result(claim, (got := tested(None)), verdict(got), verdict(tested(set(claim.seeds))), {c.row: sorted(
            c.deltas.index) for c in got}, ["fit-free: paired Δ vs the baseline at each size, its slope over ln N"])
    except ValueError as err:  # variants the ladder lacks
        return Result(claim, [], "not tested", "not tested", {}, [str(err)])


_MISSING = object()


def _at_value(claim: Claim, table: Table):
    """The column value the claim is read at; None when the table has no column axis or the claim spans it."""
    if claim.statistic == "sensitivity":
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
    if claim.statistic == "sensitivity":
        return table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    return cell_runs(table, label, value)


def _sides(claim: Claim, table: Table, pair: tuple, value, seeds) -> tuple[pd.Series, pd.Series]:
    """Per-seed losses (a, b) whose difference the comparison tests."""
    def keep(series: pd.Series) -> pd.Series:
        return series[series.index.isin(seeds)] if seeds is not None else series

    row, base = pair
    if claim.statistic == "delta":
        return keep(losses_at(table, row, value)), keep(losses_at(table, base, value))
    # sensitivity: reported loss at the smallest warm-up minus at the one best on validation (stats.sensitivity)
    runs = _cells(claim, table, row, None)
    done = runs[runs["status"] == "completed"]
    settings = sorted(runs["_col"].unique())
    val = {v: keep(done[done["_col"] == v].set_index("seed")["final_val_loss"]) for v in settings}
    best = stats.choose({v: s.mean() if len(s) else math.inf for v, s in val.items()})
    report = {v: keep(done[done["_col"] == v].set_index("seed")[table.report].astype(float)) for v in settings}
    return report[settings[0]], report[best] if best is not None else pd.Series(dtype=float)


def family(claim: Claim, table: Table, value, seeds=None) -> list[Comparison]:
    """Each comparison of the claim with Holm over the claim's family only, its mark and what it says."""
    out = []
    for pair in claim.pairs:
        a, b = _sides(claim, table, pair, value, seeds)
        interval = stats.compare(a, b)
        deltas = stats.seed_deltas(a, b)
        out.append(Comparison(pair[0], pair[1], interval, stats.compare(a, b, level=0.90), deltas,
                              len(deltas) if interval.method == "paired" else min(len(a), len(b))))
    equivalence = claim.hypothesis == "equivalent"
    p_holm = stats.holm([c.interval.p for c in out])
    tost = stats.holm([stats.tost(c.interval, claim.margin) if equivalence else math.nan for c in out])
    far = stats.holm([stats.beyond(c.interval, claim.margin) if equivalence else math.nan for c in out])
    for c, p, t, f in zip(out, p_holm, tost, far):
        c.p_holm, c.tost_holm, c.beyond_holm = p, t, f
        # an equivalence claim reads its equivalence test first: a difference resolved nonzero but inside the margin
        # is still equivalent within it
        c.mark = "equivalent" if t < stats.ALPHA else stats.mark(c.interval.delta, p, math.nan)
        c.outcome = outcome(claim.hypothesis, c)
        if c.outcome == "untested":
            c.mark = "not tested"  # no interval: fewer than 2 seeds
        effect = claim.margin if equivalence else c.interval.delta
        c.seeds_needed = stats.seeds_needed(effect, c.deltas.std(ddof=1)) if c.interval.method == "paired" \
            else math.nan
    return out


def outcome(hypothesis: str, c: Comparison) -> str:
    """What one comparison's mark says about the hypothesis (an ordering pair reads as `better`)."""
    if math.isnan(c.interval.p) or math.isnan(c.interval.low):
        return "untested"
    if hypothesis == "equivalent":
        return "supports" if c.mark == "equivalent" else "contradicts" if c.beyond_holm < stats.ALPHA else "open"
    return OUTCOME["better" if hypothesis == "ordering" else hypothesis].get(c.mark, "open")


def verdict(comparisons: list[Comparison]) -> str:
    """agrees: every comparison supports; disagrees: any contradicts; not tested: none could be tested."""
    outcomes = [c.outcome for c in comparisons]
    if not outcomes or all(o == "untested" for o in outcomes):
        return "not tested"
    if "contradicts" in outcomes:
        return "disagrees"
    return "agrees" if all(o == "supports" for o in outcomes) else "not resolved"


def seed_range(seeds) -> str:
    """[0, 1, 2, 4] -> '0–2, 4'."""
    seeds, parts = sorted(seeds), []
    for s in seeds:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" if b > a + 1 else f"{a}, {b}" for a, b in parts) or "none"


def qualifiers(claim: Claim, table: Table, cells: dict, present: dict, comparisons: list) -> tuple[list, list]:
    """What qualifies the verdict (seeds beyond or short of the plan, epochs, LR, split, slow starts, divergence):
    each in full, and as a short tag."""
    out, tags = [], []

    def add(tag: str, text: str) -> None:
        tags.append(tag)
        out.append(text)

    planned = set(claim.seeds)
    extra = sorted(set().union(*present.values()) - planned)
    if extra:
        add("seeds added after the plan",
            f"seeds {seed_range(extra)} added after the plan (planned {seed_range(planned)})")
    missing = {label: sorted(planned - set(seeds)) for label, seeds in present.items() if planned - set(seeds)}
    if missing:
        add("runs missing", "runs missing: " + "; ".join(f"{short(label, cells)} seed {seed_range(s)}"
                                                for label, s in missing.items()))
    runs = pd.concat(cells.values())
    done = runs[runs["status"] == "completed"]
    if claim.max_epochs is not None:
        epochs = done["epochs"].max()
        if pd.isna(epochs):
            add("epochs unknown", "epochs not recorded")
        elif epochs > claim.max_epochs:
            plural = "s" if claim.max_epochs != 1 else ""
            add(f"> {claim.max_epochs:g} epoch{plural}",
                f"past {claim.max_epochs:g} epoch{plural} ({epochs:.2f} epochs)")
    if claim.own_lr:
        tuned = table.tuned == "optim.lr"
        shared = [label for label in cells
                  if not tuned or table.runs.loc[table.runs["label"] == label, "_tv"].nunique() < 2]
        if shared:
            lrs = sorted({float(i.get("optim.lr")) for i in done["identity"] if i.get("optim.lr") is not None})
            at = f" (one lr: {', '.join(setting(v) for v in lrs)})" if lrs else ""
            add("LR not tuned per row", f"not at their own tuned LR: {len(shared)} of {len(cells)} rows{at}")
    if table.split == "validation":
        add("validation split", "validation split (runs without a test split)")
    slow = {label: slow_start_seeds(r) for label, r in cells.items() if claim.statistic == "delta"}
    if any(slow.values()):
        add("slow starts", "slow start (shown, not dropped): " + "; ".join(
            f"{short(label, cells)} seed {seed_range(s)}" for label, s in slow.items() if s))
    for c in comparisons:
        c.slow = {label: slow.get(label, []) for label in (c.row, c.baseline) if label}
    diverged = int((runs["status"] == "diverged").sum())
    if diverged:
        add("diverged runs", f"{diverged} diverged run{'s' if diverged > 1 else ''}")
    return out, tags


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
