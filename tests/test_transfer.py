"""A transfer claim (statistic: transfer, mbexp.claims.transfer) read on synthetic scan runs: each width's chosen LR
against the base width's, in grid steps, per FFN; its verdict for both hypotheses, and what it refuses."""

import math

import pytest
from test_table import write_run

from mbexp.analysis import readme, report
from mbexp.analysis.table import build_tables
from mbexp.claims import ClaimsError
from mbexp.claims.evaluate import evaluate
from mbexp.claims.parse import load_claims, load_claims_text
from mbexp.claims.vocabulary import AGREES, CONTRADICTS, DISAGREES, NOT_AS_DECLARED, OPEN, SUPPORTS

GRID = [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2, 3.2e-2]
WIDTHS, FFNS = ("width64", "width96", "width128"), ("relu", "geglu")
STUDY = """\
studies:
  tr:
    experiment: quick
    rows: {model: [width64, width96, width128], ffn: [relu, geglu]}
    lr_grid: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2, 3.2e-2]
    scan_seeds: [0, 1]
    seeds: [2, 3]
    budgets: [300, 600]
    select_at: 600
"""
CLAIMS = STUDY + """\
claims:
  - {id: same, claim: c, paper: p, experiment: quick, study: tr, statistic: transfer, hypothesis: equivalent,
     baseline: width64, rows: [width96, width128], seeds: [2, 3]}
  - {id: drift, claim: c, paper: p, experiment: quick, study: tr, statistic: transfer, hypothesis: worse,
     baseline: width64, rows: [width96, width128], seeds: [2, 3]}
"""


def read(tmp_path, optimum: dict, skip=()) -> dict:
    """Verdicts of both claims on scan runs whose loss is least at grid index optimum[(width, ffn)] (default 3)."""
    for width in WIDTHS:
        for ffn in FFNS:
            best = optimum.get((width, ffn), 3)
            for i, lr in enumerate(GRID):
                for seed in (0, 1):
                    if (width, ffn, i, seed) not in skip:
                        write_run(tmp_path, f"layer-pre-{ffn}-matched", seed=seed, lr=lr, steps=600,
                                  experiment="quick_scan", final=5.0 + 0.01 * (i - best) ** 2 + 0.001 * seed,
                                  extra={"model.name": width}, epochs=0.5)
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    claims = load_claims(tmp_path / "claims.yaml")
    return {r.claim.id: r for r in evaluate(claims, build_tables(tmp_path))}


def steps(result) -> dict:
    return {c.row: c.interval.delta for c in result.comparisons}


def test_every_width_within_one_step_agrees_with_transfer_and_disagrees_with_drift(tmp_path):
    got = read(tmp_path, {("width96", "relu"): 4, ("width128", "relu"): 2, ("width128", "geglu"): 4})
    assert steps(got["same"]) == {"relu-width96": 1, "relu-width128": -1, "geglu-width96": 0,
                                  "geglu-width128": 1}
    assert {c.baseline for c in got["same"].comparisons} == {"relu-width64", "geglu-width64"}
    assert got["same"].verdict == AGREES and got["drift"].verdict == DISAGREES
    assert all(c.outcome == CONTRADICTS for c in got["drift"].comparisons)
    assert any("vertex per row" in q for q in got["same"].qualifiers)


def test_two_steps_away_is_a_drift_in_its_group_only(tmp_path):
    """relu's width128 chose two steps below width64's: transfer fails; the drift holds for relu, not geglu."""
    got = read(tmp_path, {("width128", "relu"): 1, ("width128", "geglu"): 4})
    assert steps(got["same"])["relu-width128"] == -2
    assert got["same"].verdict == DISAGREES
    outcomes = {c.row: c.outcome for c in got["drift"].comparisons}
    assert outcomes == {"relu-width96": OPEN, "relu-width128": SUPPORTS, "geglu-width96": CONTRADICTS,
                        "geglu-width128": CONTRADICTS}
    assert got["drift"].verdict == DISAGREES
    both = read(tmp_path / "both", {("width128", "relu"): 1, ("width128", "geglu"): 1})
    assert both["drift"].verdict == AGREES and both["same"].verdict == DISAGREES


@pytest.mark.parametrize("optimum, skip, unmet", [
    ({("width96", "geglu"): 0}, (), "chosen LR at an end of the grid for geglu-width96 (low)"),
    ({}, {("width128", "relu", 2, 1)}, "scan incomplete for relu-width128"),
])
def test_an_edge_or_an_incomplete_scan_is_not_tested_as_declared(tmp_path, optimum, skip, unmet):
    got = read(tmp_path, optimum, skip)
    for result in got.values():
        assert result.verdict == NOT_AS_DECLARED and any(u.startswith(unmet) for u in result.unmet)


def test_the_runs_read_are_the_scan_runs_at_the_selection_budget(tmp_path):
    got = read(tmp_path, {})["same"]
    assert got.runs_read == len(WIDTHS) * len(FFNS) * len(GRID) * 2 and got.runs_declared == 0
    assert all(math.isnan(c.p_holm) for c in got.comparisons)


@pytest.mark.parametrize("change, message", [
    ("hypothesis: better", "statistic transfer tests the hypotheses equivalent, worse, got 'better'"),
    ("rows: [width96, width256]", r"rows and baseline must be the study's model values \(width64, width96, width128\), "
                                  r"got \['width256'\]"),
    ("rows: [width64]", "a transfer claim names its base width as baseline and the other widths as rows"),
])
def test_a_transfer_claim_refuses_what_it_cannot_read(change, message):
    key = change.partition(":")[0]
    entry = {"hypothesis": "hypothesis: equivalent", "rows": "rows: [width96, width128]"}
    text = CLAIMS.split("  - {id: drift")[0].replace(entry[key], change)
    with pytest.raises(ClaimsError, match=f": {message}$"):  # the whole reason, after the claim's place
        load_claims_text(text)


READS = r"a transfer claim reads a study whose rows include model \(the widths\), each scanned \(no transfer_from\)"


@pytest.mark.parametrize("old, new, message", [
    ("model: [width64, width96, width128], ", "", READS),
    ("select_at: 600", "select_at: 600\n    transfer_from: {model: width64}", READS),
    ("select_at: 600", "select_at: 600\n    family: study",
     r"a transfer claim has no p to correct: its study reads each claim's own family \(no family: study\)"),
])
def test_a_transfer_claim_needs_a_study_that_scans_every_width_on_its_own_family(old, new, message):
    text = CLAIMS.split("  - {id: drift")[0].replace(old, new)
    with pytest.raises(ClaimsError, match=f": {message}$"):
        load_claims_text(text)


def test_a_transfer_claim_reaches_claims_csv_the_results_page_and_the_readme(tmp_path):
    got = read(tmp_path, {("width128", "relu"): 1})
    results = list(got.values())
    csv = report.claims_csv(results)
    assert "same,," not in csv and "relu-width128,relu-width64" in csv and ",-2.0" in csv
    section = "\n".join(report.claim_section(got["same"]))
    assert "every width's chosen LR within one grid step of `width64`'s" in section and "| relu-width128 |" in section
    block = readme.readme_block(results)
    assert "quick_scan, chosen LR per width at train.steps=600" in block and "relu-width128 ✗" in block


def test_the_results_page_shows_each_widths_chosen_lr_and_its_steps_from_the_base_width(tmp_path):
    """The transfer section reads the scan's table as `make table` writes it: per FFN and width the chosen LR and
    its signed grid steps from width64's; a width whose scan is unfinished shows none."""
    from mbexp.analysis.outputs import write_scans
    from mbexp.analysis.transfer_page import transfer_markdown

    got = read(tmp_path, {("width128", "relu"): 1, ("width96", "geglu"): 4}, skip={("width128", "geglu", 0, 1)})
    write_scans(tmp_path)
    lines = transfer_markdown(list(got.values()), tmp_path).splitlines()
    assert lines[0] == "| ffn | width | `tr` (SP): chosen LR (grid steps from width64) |"
    assert lines[2:] == ["| relu | width64 | 0.008 (+0) |", "| relu | width96 | 0.008 (+0) |",
                         "| relu | width128 | 0.002 (-2) |", "| geglu | width64 | 0.008 (+0) |",
                         "| geglu | width96 | 0.016 (+1) |", "| geglu | width128 | — |"]
    assert transfer_markdown([], tmp_path) == ""
