"""A statistic is one class (mbexp.claims.statistics, docs/contributing.md "Adding a statistic"): a toy one,
registered, declared in a claims file and read by `make table` end to end; and what each registered one declares."""

import statistics

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from test_claims import BIG, A
from test_table import BASE, write_run
from tiny import make_table_here

from mbexp.claims import ClaimsError
from mbexp.claims.parse import load_claims
from mbexp.claims.statistics import STATISTICS, Statistic


class ValDelta(Statistic):
    """Paired Δ of the final validation loss, whichever split the table reports."""

    name = "val_delta"

    def sides(self, table, pair, value, seeds):
        from mbexp.analysis.table import cell_runs

        def val(label: str) -> pd.Series:
            runs = cell_runs(table, label, value)
            done = runs[(runs["status"] == "completed") & (runs["seed"].isin(seeds) if seeds is not None else True)]
            return done.set_index("seed")["final_val_loss"].astype(float)

        return val(pair[0]), val(pair[1])


VAL = {BASE: [5.00, 5.30, 4.90, 5.10], A: [4.90, 5.22, 4.78, 5.02]}  # A: 0.10, 0.08, 0.12, 0.08 lower on validation
TEST = {BASE: [5.00, 5.30, 4.90, 5.10], A: [5.02, 5.27, 4.93, 5.08]}  # the reported split: no resolved difference
CLAIMS = f"""\
claims:
  - {{id: val, claim: GEGLU beats ReLU on validation, paper: test, experiment: quick, statistic: val_delta,
     hypothesis: better, baseline: {BASE}, rows: [{A}], seeds: [0, 1, 2, 3]}}
  - {{id: test, claim: GEGLU beats ReLU, paper: test, experiment: quick, hypothesis: better, baseline: {BASE},
     rows: [{A}], seeds: [0, 1, 2, 3]}}
"""


def test_a_statistic_of_one_class_registered_is_read_end_to_end_by_make_table(tmp_path, monkeypatch):
    for seed in range(4):
        for row in VAL:
            write_run(tmp_path, row, seed=seed, final=VAL[row][seed], test=TEST[row][seed], **BIG)
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    with pytest.raises(ClaimsError, match="statistic one of delta, sensitivity, sensitivity_diff, trend, transfer, got "
                                          "'better' and 'val_delta'"):
        load_claims(tmp_path / "claims.yaml")  # not registered: the claims file names no such statistic

    monkeypatch.setitem(STATISTICS, ValDelta.name, ValDelta())
    done = make_table_here(tmp_path, "--no-wandb")
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(tmp_path / "tables" / "claims.csv").set_index("claim")
    deltas = [a - b for a, b in zip(VAL[A], VAL[BASE])]
    by_hand = scipy_stats.ttest_1samp(deltas, 0)
    val, test = rows.loc["val"], rows.loc["test"]
    assert (val["statistic"], val["row"], val["baseline"], val["n"]) == ("val_delta", A, BASE, 4)
    # claims.csv writes six decimals
    assert val["delta"] == pytest.approx(statistics.mean(deltas)) and val["p_holm"] == pytest.approx(by_hand.pvalue,
                                                                                                      abs=1e-6)
    assert (val["ci_low"], val["ci_high"]) == pytest.approx(tuple(by_hand.confidence_interval(0.95)), abs=1e-6)
    assert (val["mark"], val["outcome"], val["verdict"]) == ("better", "supports", "agrees")
    # the same runs through the built-in paired Δ read the reported (test) split, where GEGLU is no better
    assert test["statistic"] == "delta" and test["delta"] == pytest.approx(0.0, abs=1e-9)
    assert test["verdict"] != "agrees"
    assert "`val`" in (tmp_path / "tables" / "claims.md").read_text()


def test_each_registered_statistic_is_declared_as_its_claims_are_read():
    assert list(STATISTICS) == ["delta", "sensitivity", "sensitivity_diff", "trend", "transfer"]
    assert all(name == s.name for name, s in STATISTICS.items())
    # an ordering needs a statistic that orders; a baseline-free statistic refuses a baseline
    assert [n for n, s in STATISTICS.items() if s.ordering] == ["delta"]
    assert [n for n, s in STATISTICS.items() if not s.baseline] == ["sensitivity"]
    assert [n for n, s in STATISTICS.items() if s.spans] == ["sensitivity", "sensitivity_diff"]
    assert [n for n, s in STATISTICS.items() if s.ladder] == ["trend"]
    assert [n for n, s in STATISTICS.items() if s.transfer] == ["transfer"]
