"""Replications by rule (mbexp/analysis/replication.py): a claim that replicates another is read pooled with it,
over both claims' planned seeds, corrected for two looks, the first claim's verdict beside it."""

import math

import pandas as pd
import pytest
from tiny import REPO

from mbexp.analysis import readme, replication, stats
from mbexp.analysis.ladder.trend import trend
from mbexp.claims import ClaimsError
from mbexp.claims.parse import load_claims_text
from mbexp.claims.result import Result

ENTRY = ("  - {{id: {id}, claim: x, paper: p, experiment: {exp}, hypothesis: better, baseline: base, rows: [{rows}], "
         "seeds: [{seeds}]{more}}}\n")


def claims(first: dict | None = None, rep: dict | None = None):
    first = {"id": "first", "exp": "e1", "rows": "a", "seeds": "0, 1, 2", "more": ""} | (first or {})
    rep = {"id": "rep", "exp": "e2", "rows": "a", "seeds": "3, 4, 5", "more": ", replicates: first"} | (rep or {})
    return load_claims_text("claims:\n" + ENTRY.format(**first) + ENTRY.format(**rep))


@pytest.mark.parametrize(("change", "says"), [
    ({"more": ", replicates: nobody"}, "names no claim of the file"),
    ({"exp": "e1"}, "is on the same experiment"),
    ({"seeds": "2, 3, 4"}, "plans seeds the first claim planned"),
    ({"rows": "a, b"}, "differs from it in pairs"),
])
def test_a_replication_must_repeat_an_existing_first_claim_on_new_seeds(change, says):
    with pytest.raises(ClaimsError, match=says):
        claims(rep=change)


def test_a_replication_of_a_replication_is_refused():
    text = "claims:\n" + "".join(ENTRY.format(id=i, exp=i, rows="a", seeds=s, more=m) for i, s, m in [
        ("first", "0", ""), ("second", "1", ", replicates: first"), ("third", "2", ", replicates: second")])
    with pytest.raises(ClaimsError, match="third: replicates 'second', which names a replication"):
        load_claims_text(text)


def test_replicates_enters_the_digest_only_when_set():
    plain = load_claims_text("claims:\n" + ENTRY.format(id="rep", exp="e2", rows="a", seeds="3, 4, 5", more=""))
    assert claims()[1].digest != plain[0].digest  # declaring what it replicates changes the declaration
    assert claims()[0].digest == claims(rep={"more": ""})[0].digest  # the first claim keeps its digest


def sides_of(values: dict):
    """A sides function for _pooled_deltas: per claim id, (a, b) per-seed series."""
    return lambda claim, table, pair, seeds: values[claim.id]


def test_pooled_deltas_read_both_claims_seeds_at_the_two_look_level():
    first, rep = claims()
    a1, b1 = pd.Series([5.0, 5.1, 4.9], index=[0, 1, 2]), pd.Series([5.1, 5.15, 5.05], index=[0, 1, 2])
    a2, b2 = pd.Series([4.8, 5.0, 5.2], index=[3, 4, 5]), pd.Series([4.95, 5.02, 5.28], index=[3, 4, 5])
    out, = replication._pooled_deltas(rep, first, None, None, sides_of({"first": (a1, b1), "rep": (a2, b2)}))
    expected = stats.compare(pd.concat([a1, a2]), pd.concat([b1, b2]), level=0.975)
    assert out.n == 6 and (out.interval.delta, out.interval.low, out.interval.high) == pytest.approx(
        (expected.delta, expected.low, expected.high))
    assert out.p_holm == pytest.approx(min(1.0, 2 * expected.p))  # one comparison: Holm is the identity
    assert expected.high - expected.low > stats.compare(pd.concat([a1, a2]), pd.concat([b1, b2])).high - \
        stats.compare(pd.concat([a1, a2]), pd.concat([b1, b2])).low


def test_pooled_trends_pool_each_sizes_seeds_and_double_both_ps(monkeypatch):
    first, rep = claims()
    sizes = (1e4, 2e4, 4e4)
    own = {  # per claim: {N: per-seed Δ}, the deficit falling with size
        "first": {n: pd.Series([0.3 - 0.05 * i + 0.01 * s for s in range(3)], index=[0, 1, 2])
                  for i, n in enumerate(sizes)},
        "rep": {n: pd.Series([0.28 - 0.06 * i - 0.01 * s for s in range(3)], index=[3, 4, 5])
                for i, n in enumerate(sizes)}}
    monkeypatch.setattr(replication, "_ladder", lambda claim, table, row, base: own[claim.id])
    out, = replication._pooled_trends(rep, first, None, None)
    expected = trend({n: pd.concat([own["first"][n], own["rep"][n]]) for n in sizes}, level=0.975)
    assert out.n == 6 and out.interval.delta == pytest.approx(expected.slope)
    assert (out.interval.low, out.interval.high) == pytest.approx((expected.low, expected.high))
    assert out.p_holm == pytest.approx(min(1.0, 2 * max(expected.p, expected.p_permutation)))
    assert out.mark == "better" and out.outcome == "supports"


def result(claim, verdict="not resolved", unmet=(), standing="confirmatory") -> Result:
    return Result(claim, [], verdict, standing, {}, [], unmet=list(unmet))


def test_an_unmet_condition_of_either_claim_holds_for_the_pooled_reading():
    first, rep = claims()
    values = {"first": (pd.Series([5.0, 5.1, 4.9]), pd.Series([5.2, 5.3, 5.1])),
              "rep": (pd.Series([5.0, 5.1, 4.9], index=[3, 4, 5]), pd.Series([5.2, 5.3, 5.1], index=[3, 4, 5]))}
    ok = replication.pool(result(rep), result(first), "t", "t", sides_of(values))
    assert ok.verdict == "agrees" and ok.standing == "confirmatory"
    unmet = replication.pool(result(rep), result(first, unmet=["runs missing"]), "t", "t", sides_of(values))
    assert unmet.verdict == "not tested as declared" and unmet.texts == ["first: runs missing"]
    assert replication.pool(result(rep), result(first, standing="exploratory"), "t", "t",
                            sides_of(values)).standing == "exploratory"


def test_the_readme_shows_a_replication_once_pooled_with_the_first_verdict_beside():
    first, rep = claims()
    values = {"first": (pd.Series([5.0, 5.1, 4.9]), pd.Series([5.2, 5.3, 5.1])),
              "rep": (pd.Series([5.0, 5.1, 4.9], index=[3, 4, 5]), pd.Series([5.2, 5.3, 5.1], index=[3, 4, 5]))}
    results = [result(first), result(rep, verdict="agrees")]
    results[1].pooled = replication.pool(results[1], results[0], "t", "t", sides_of(values))
    block = readme.readme_block(results)
    rows = [line for line in block.splitlines() if line.startswith("| x |")]
    assert len(rows) == 1  # the first claim's own row is folded into its replication's
    assert "e1 + e2" in rows[0] and "**agrees**, pooled over seeds 0–5 (Bonferroni ×2)" in rows[0]
    assert "first study alone: not resolved" in rows[0]
    assert not math.isnan(results[1].pooled.comparisons[0].p_holm)


def test_each_committed_claims_digest_is_the_one_its_committed_verdict_shows():
    # the digest covers what a replication replicates, under that name: results/tables/claims.csv pins each
    from mbexp.claims.parse import load_claims

    shown = pd.read_csv(REPO / "results" / "tables" / "claims.csv", dtype=str).groupby("claim")["digest"].unique()
    found = {c.id: c for c in load_claims(REPO / "results" / "claims.yaml")}
    assert sorted(shown.index) == sorted(found) and any(c.replicates for c in found.values())
    for claim_id, digests in shown.items():
        assert list(digests) == [found[claim_id].digest], claim_id
