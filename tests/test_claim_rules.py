"""Claim verdict rules (docs/table.md, "Claims"), each on a family built so that only the rule decides."""

from types import SimpleNamespace

import pytest
from test_claims import BASE_LOSS, BIG, A, B, result
from test_table import BASE, write_run

from mbexp.analysis import stats
from mbexp.analysis.claims import verdict

NOISY = [5.10, 5.20, 4.85, 5.15]  # Δ vs BASE_LOSS: +0.10, −0.10, −0.05, +0.05, interval wide around 0
BETTER = [4.80, 5.12, 4.74, 4.88]  # Δ −0.20, −0.18, −0.16, −0.22: resolved better


def write(results, rows: dict, seeds=range(4)) -> None:
    for seed in seeds:
        write_run(results, BASE, seed=seed, final=BASE_LOSS[seed], test=BASE_LOSS[seed], **BIG)
        for row, values in rows.items():
            write_run(results, row, seed=seed, final=values[seed], test=values[seed], **BIG)


def test_agrees_needs_every_comparison_to_support(tmp_path):
    """One comparison supports (resolved better), the other is open (not resolved): the verdict is not resolved."""
    write(tmp_path, {A: BETTER, B: NOISY})
    r = result(tmp_path, rows=[A, B], seeds=[0, 1, 2, 3])
    assert [c.outcome for c in r.comparisons] == ["supports", "open"]
    assert r.verdict == "not resolved"
    assert result(tmp_path, rows=[A], seeds=[0, 1, 2, 3]).verdict == "agrees"  # the supporting one alone


def test_the_planned_seed_verdict_reads_only_the_planned_seeds(tmp_path):
    """Planned seeds 0–3 resolve A better; an extra seed 4 where A is far worse leaves all seeds unresolved."""
    write(tmp_path, {A: BETTER})
    write_run(tmp_path, BASE, seed=4, final=5.0, test=5.0, **BIG)
    write_run(tmp_path, A, seed=4, final=5.9, test=5.9, **BIG)
    r = result(tmp_path, rows=[A], seeds=[0, 1, 2, 3])
    assert r.verdict == "agrees"  # decided by the planned seeds alone
    assert verdict(r.added) == "not resolved"  # Δ −0.20, −0.18, −0.16, −0.22, +0.90 over all five seeds, apart


def test_an_equivalence_familys_beyond_margin_p_is_holm_adjusted(tmp_path):
    write(tmp_path, {A: BETTER, B: NOISY})
    r = result(tmp_path, rows=[A, B], seeds=[0, 1, 2, 3], hypothesis="equivalent")
    raw = [stats.beyond_margin(c.interval, 0.02) for c in r.comparisons]
    assert [c.beyond_holm for c in r.comparisons] == pytest.approx(list(stats.holm(raw)))
    assert r.comparisons[0].beyond_holm == pytest.approx(2 * raw[0]) and raw[0] < 0.025  # A: Δ −0.19, m = 2


def test_a_claim_is_not_tested_only_when_none_of_its_comparisons_could_be():
    """An untested comparison beside tested ones leaves the verdict to the tested ones."""
    def of(*outcomes):
        return verdict([SimpleNamespace(outcome=o) for o in outcomes])

    assert of("untested", "untested") == "not tested" and of() == "not tested"
    assert of("untested", "contradicts") == "disagrees"
    assert of("untested", "supports") == "not resolved"  # every comparison must support to agree
    assert of("supports", "supports") == "agrees"
