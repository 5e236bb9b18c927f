"""The statistics a claim can declare (`statistic:` in the claims file), one class each, by name in STATISTICS.

A statistic says how a claim declares it (rows against a baseline, or each row alone), what it reads (the cells of
one column, or each row's runs at every warm-up setting) and how it tests: `sides`, the per-seed values whose paired
difference each comparison of the family tests. The family, its Holm correction, the qualifiers and the standing are
shared (mbexp.claims.family; a ladder's trend: mbexp.claims.ladder). The claims file is read at every launch, before
torch or pandas load: a statistic imports the analysis inside its methods (docs/contributing.md, "Adding a
statistic").
"""

from typing import ClassVar

from mbexp.claims.vocabulary import EQUIVALENT, HYPOTHESES, WORSE


class Statistic:
    """A claim's statistic; a subclass sets its name and what differs, and writes `sides`."""

    name: ClassVar[str]
    baseline: ClassVar[bool] = True  # each row is compared with a baseline row (False: each row on its own)
    ordering: ClassVar[bool] = False  # it can test an ordering of rows, each against the next
    spans: ClassVar[bool] = False  # it reads a row's runs at every warm-up setting, not the cells of one column
    beyond_margin: ClassVar[bool] = False  # better/worse needs the difference resolved beyond the margin
    study_tost: ClassVar[bool] = False  # the mark over its study's family reads equivalence (TOST) too
    slow_starts: ClassVar[bool] = False  # the verdict names the seeds of its rows that start slowly
    ladder: ClassVar[bool] = False  # tested as a trend over a ladder's model sizes (mbexp.claims.ladder), not in sides
    transfer: ClassVar[bool] = False  # tested on its study's scan choices (mbexp.claims.transfer), not in sides
    hypotheses: ClassVar[tuple] = HYPOTHESES  # the hypotheses it can test

    def problem(self, pairs: tuple, protocol: dict) -> str:
        """Why a claim's comparisons cannot be read on its study's `protocol` ({}: no study), '' when they can."""
        return ""

    def sides(self, table, pair: tuple, value, seeds) -> tuple:
        """Per-seed values (a, b), pandas Series by seed, whose paired difference tests `pair` (row, baseline) in
        `table` at the column `value` (None: no column axis, or one that the statistic spans), on `seeds` (None:
        every seed)."""
        raise NotImplementedError(f"statistic {self.name} defines no sides")

    def bound(self, edges: int) -> str:
        """What it means when the best warm-up is the largest tried for `edges` rows (a statistic that spans)."""
        return "its sensitivity is a lower bound"


class Delta(Statistic):
    """Paired Δ: a row's reported loss minus its baseline's, seed by seed, in one column (the claim's `at`, else the
    table's reference column)."""

    name = "delta"
    ordering = study_tost = slow_starts = True

    def sides(self, table, pair, value, seeds):
        from mbexp.analysis.table import losses_at

        a, b = losses_at(table, pair[0], value), losses_at(table, pair[1], value)
        return (a[a.index.isin(seeds)], b[b.index.isin(seeds)]) if seeds is not None else (a, b)


def warmups(table, label: str, seeds) -> tuple[dict, dict]:
    """(validation, reported) loss per warm-up setting by seed, of a row's completed runs on `seeds`."""
    runs = table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    done = runs[(runs["status"] == "completed") & (runs["seed"].isin(seeds) if seeds is not None else True)]
    cells = {v: done[done["_col"] == v].set_index("seed") for v in sorted(runs["_col"].unique())}
    return ({v: c["final_val_loss"] for v, c in cells.items()},
            {v: c[table.report].astype(float) for v, c in cells.items()})


def warmup_sides(table, label: str, seeds) -> tuple:
    """A row's reported loss at its smallest warm-up and at the one best on validation, by seed."""
    from mbexp.analysis.stats import sensitivity_sides

    return sensitivity_sides(*warmups(table, label, seeds))


class Sensitivity(Statistic):
    """How much a row needs warm-up: its reported loss at the smallest warm-up minus at the warm-up best on
    validation, seed by seed; better or worse only when resolved beyond the margin."""

    name = "sensitivity"
    baseline, spans, beyond_margin = False, True, True

    def sides(self, table, pair, value, seeds):
        return warmup_sides(table, pair[0], seeds)


class SensitivityDiff(Statistic):
    """A row's warm-up sensitivity minus its baseline's, seed by seed: whether it needs warm-up more."""

    name = "sensitivity_diff"
    spans = True

    def sides(self, table, pair, value, seeds):
        from mbexp.analysis.stats import seed_deltas

        row, base = (seed_deltas(*warmup_sides(table, label, seeds)) for label in pair)
        return row, base

    def bound(self, edges: int) -> str:
        return "each sensitivity is a lower bound, so their difference is bounded neither way" if edges > 1 \
            else super().bound(edges)


class Trend(Statistic):
    """A ladder's fit-free trend: the slope of a variant's paired Δ against its baseline over ln(non-embedding
    parameters), seed by seed, at the claim's budget; better: Δ falls with size (mbexp.claims.ladder)."""

    name = "trend"
    ladder = True


class Transfer(Statistic):
    """LR transfer across width: per value of a study's other row keys, each width's LR chosen by the study's scan
    against the base width's (the claim's baseline), in grid steps (mbexp.claims.transfer); equivalent: every
    width within one step; worse: some width beyond it."""

    name = "transfer"
    transfer = True
    hypotheses = (EQUIVALENT, WORSE)

    def problem(self, pairs, protocol):
        widths = [str(w) for w in (protocol.get("rows") or {}).get("model", [])]
        if not widths or protocol.get("transfer_from"):
            return "a transfer claim reads a study whose rows include model (the widths), each scanned (no " \
                "transfer_from)"
        if protocol.get("family") == "study":
            return "a transfer claim has no p to correct: its study reads each claim's own family (no family: study)"
        if len({b for _, b in pairs}) != 1 or any(r == b for r, b in pairs):
            return "a transfer claim names its base width as baseline and the other widths as rows"
        if unknown := sorted({w for pair in pairs for w in pair} - set(widths)):
            return f"rows and baseline must be the study's model values ({', '.join(widths)}), got {unknown}"
        return ""


STATISTICS: dict[str, Statistic] = {s.name: s for s in (Delta(), Sensitivity(), SensitivityDiff(), Trend(), Transfer())}
