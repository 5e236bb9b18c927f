"""A transfer claim (statistic: transfer, mbexp.claims.statistics.Transfer): does the LR a study's scan chooses at the
base width (the claim's baseline) serve every width? Per value of the study's other row keys (e.g. per FFN), each
width's chosen grid value against the base width's, in grid steps (docs/claims.md, "LR transfer")."""

import math

import pandas as pd

from mbexp.analysis import stats
from mbexp.claims.claim import Claim
from mbexp.claims.provenance import History, standing
from mbexp.claims.result import Comparison, Result
from mbexp.claims.rules import past_epochs
from mbexp.claims.vocabulary import (
    AGREES,
    CONTRADICTS,
    DISAGREES,
    EQUIVALENT,
    EXPLORATORY,
    LR_EDGE,
    NOT_AS_DECLARED,
    NOT_TESTED,
    OPEN,
    RUNS_MISSING,
    SUPPORTS,
)
from mbexp.study.protocol import choices_of, row_of, tally
from mbexp.study.spec import Study, parse_study

WITHIN = 1  # grid steps: a width's choice this close to the base width's counts as the same LR
DRIFTS = "drifts"  # a comparison's mark beyond WITHIN (within it: equivalent)
WIDTH = "model"  # the row key whose values are the widths


def tested(claim: Claim, history: History | None = None, scan: pd.DataFrame | None = None) -> Result:
    """The claim read on its study's scan at select_at: one comparison per (width, other row values), Δ the signed
    grid steps from the base width's choice; the verdict by `verdict`, "not tested as declared" when a compared
    row's scan is incomplete or chose an end of the grid (the optimum may lie beyond: extend the grid), or its runs
    pass max_epochs."""
    study = parse_study(claim.study, claim.protocol, f"claim {claim.id}")
    if scan is None or not len(scan):
        return Result(claim, [], NOT_TESTED, EXPLORATORY, {}, [f"no finished runs of {study.scan_experiment}"])
    runs = [r for r in scan.to_dict("records") if isinstance(r.get("identity"), dict)]
    choices, _ = choices_of(study, tally(study, runs, study.select_at))
    base_width = claim.pairs[0][1]  # parse: every pair's baseline is the claim's one baseline
    groups = [v for v in study.row_values() if str(v[_width(study)]) == base_width]  # one per other row values
    compared = {(_at(study, group, width), group) for group in groups for width, _ in claim.pairs}
    read_rows = [v for v in study.row_values() if v in {row for pair in compared for row in pair}]
    comparisons, unmet, tags, texts = [], [], [], []
    for group in groups:
        for width, _ in claim.pairs:
            row = _at(study, group, width)
            if row in choices and group in choices:
                comparisons.append(_compare(study, choices[row], choices[group], _name(study, row),
                                            _name(study, group)))
    for c in comparisons:
        c.outcome = outcome(claim.hypothesis, c, comparisons)
    if missing := [_name(study, v) for v in read_rows if v not in choices]:
        tags.append(RUNS_MISSING)
        unmet.append(f"scan incomplete for {', '.join(missing)}")
    if lost := [v for v in read_rows if v in choices and math.isinf(choices[v].losses[choices[v].value])]:
        unmet.append("every LR of the grid diverged for " + ", ".join(_name(study, v) for v in lost))
    if edges := [v for v in read_rows if v in choices and choices[v].edge]:
        tags.append(LR_EDGE)
        unmet.append("chosen LR at an end of the grid for " + ", ".join(
            f"{_name(study, v)} ({choices[v].edge})" for v in edges) + ": the optimum may lie beyond; extend the grid")
    vertices = ", ".join(f"{_name(study, v)} {_vertex(study, choices[v])}" for v in read_rows if v in choices)
    texts.append(f"{study.tuned} chosen per row on the scan's mean validation loss at {study.select_at} steps; Δ: "
                 f"grid steps from the base width's choice" + (f"; vertex per row: {vertices}" if vertices else ""))
    read = scan[scan["identity"].map(lambda i: isinstance(i, dict) and _row(study, i) in read_rows)
                & scan["seed"].isin(study.scan_seeds) & (scan["steps"] == study.select_at)]
    if past := past_epochs(claim, read["epochs"].max()):
        tags.append(past[0])
        unmet.append(past[1])
    stand, declared, n_read = standing(claim, read, texts, history)
    present = {_name(study, v): sorted(study.scan_seeds) for v in read_rows if v in choices}
    found = NOT_AS_DECLARED if unmet else verdict(comparisons)
    return Result(claim, comparisons, found, stand, present, texts + unmet, tags, unmet, [], n_read, declared)


def _width(study: Study) -> int:
    return list(study.rows).index(WIDTH)


def _at(study: Study, group: tuple, width: str) -> tuple:
    """The row of `group` (row values) at another width."""
    values = list(group)
    values[_width(study)] = next(v for v in study.rows[WIDTH] if str(v) == width)
    return tuple(values)


def _row(study: Study, identity: dict) -> tuple:
    """A run's study row as the study declares its values (row_of gives them as text)."""
    text = row_of(study, identity)
    return next((v for v in study.row_values() if tuple(map(str, v)) == text), text)


def _name(study: Study, values: tuple) -> str:
    """A row as a comparison names it: the other row values, then the width (`relu-width96`)."""
    i = _width(study)
    return "-".join(str(v) for v in (*values[:i], *values[i + 1:], values[i]))


def _compare(study: Study, mine, base, row: str, baseline: str) -> Comparison:
    """One width against the base width: Δ the signed grid steps (< 0: the width chose a smaller value)."""
    steps = study.grid.index(mine.value) - study.grid.index(base.value)
    interval = stats.Interval(float(steps))
    c = Comparison(row, baseline, interval, interval, pd.Series(dtype=float), len(study.scan_seeds))
    c.mark = EQUIVALENT if abs(steps) <= WITHIN else DRIFTS
    return c


def outcome(hypothesis: str, c: Comparison, comparisons: list[Comparison]) -> str:
    """equivalent: supports within WITHIN steps, else contradicts. worse (the LR does not transfer): a width
    beyond supports; a width within is open when another width of its group (the same baseline row) drifts,
    and contradicts when none does."""
    within = abs(c.interval.delta) <= WITHIN
    if hypothesis == EQUIVALENT:
        return SUPPORTS if within else CONTRADICTS
    if not within:
        return SUPPORTS
    group = [o for o in comparisons if o.baseline == c.baseline]
    return OPEN if any(abs(o.interval.delta) > WITHIN for o in group) else CONTRADICTS


def verdict(comparisons: list[Comparison]) -> str:
    """agrees unless a comparison contradicts: every width within (equivalent), or a drift in every group (worse)."""
    if not comparisons:
        return NOT_TESTED
    return DISAGREES if any(c.outcome == CONTRADICTS for c in comparisons) else AGREES


def _vertex(study: Study, choice) -> str:
    """The parabola's vertex through the chosen value and its neighbours (lr_scan.vertex), for the reader."""
    from mbexp.analysis.lr_scan import vertex  # matplotlib: only where a transfer claim is read

    top = vertex(study.grid, choice.losses, choice.value)
    return "—" if math.isnan(top) else f"{top:.3g}"
