"""Claim verdict rules (docs/claims.md#marks-outcomes-and-the-verdict), each on a family built so that only the rule
decides."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest
from test_claims import BASE_LOSS, BIG, A, B, result
from test_table import BASE, write_run

from mbexp.analysis import stats
from mbexp.claims.rules import verdict

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


def comparison(delta: float, p: float, spread: float = 0.004):
    """A paired comparison over six seeds with Δ `delta`, p `p` and the seeds' spread `spread`."""
    from mbexp.claims.result import Comparison

    samples = (delta + spread * pd.Series([-1.0, 1.0, -0.5, 0.5, -0.2, 0.2]),)
    iv = stats.Interval(delta, delta - 0.01, delta + 0.01, se=spread, df=5, p=p, method="paired", samples=samples)
    return Comparison("r", "b", iv, iv, None, 6, p_holm=p, mark="better" if p < 0.05 else "not resolved")


def claimed(study: str, *cs, statistic: str = "delta", family: str | None = None) -> SimpleNamespace:
    """A result of a claim of `study` (none: "") with comparisons `cs`, as study_family reads it."""
    claim = SimpleNamespace(study=study, margin=0.02, statistic=statistic, hypothesis="better",
                            protocol={"family": family} if family else {})
    return SimpleNamespace(claim=claim, comparisons=list(cs), verdict="agrees", unmet=[], qualifiers=[])


def test_a_studys_comparisons_share_one_holm_family_beside_each_claims_own():
    from mbexp.claims.evaluate import study_family

    # Δ -0.05, far outside ±0.02: no TOST
    a, b = claimed("s", comparison(-0.05, 0.01), comparison(-0.05, 0.02)), claimed("s", comparison(-0.05, 0.03))
    alone = claimed("", comparison(-0.05, 0.04))
    study_family([a, alone, b])
    # Holm over the study's three p (0.01, 0.02, 0.03): 0.03, 0.04, 0.04 in that order
    assert [c.p_holm_study for c in (*a.comparisons, *b.comparisons)] == pytest.approx([0.03, 0.04, 0.04])
    assert [c.mark_study for c in (*a.comparisons, *b.comparisons)] == ["better"] * 3
    assert alone.comparisons[0].p_holm_study != alone.comparisons[0].p_holm_study  # no study: NaN
    wide = claimed("t", *(comparison(-0.05, 0.02) for _ in range(3)))
    study_family([wide])
    assert {c.mark_study for c in wide.comparisons} == {"not resolved"}  # 0.06 after Holm over three


def test_a_study_declaring_family_study_reads_its_verdicts_on_the_study_wide_holm():
    """Three claims each resolved on their own (p 0.02, one comparison each): Holm over the study's three p gives
    0.06, so a study declaring `family: study` reads all three not resolved; the default family leaves them."""
    from mbexp.claims.evaluate import study_family
    from mbexp.claims.result import Comparison

    def claimed(family: str | None) -> SimpleNamespace:
        samples = (-0.05 + 0.004 * pd.Series([-1.0, 1.0, -0.5, 0.5, -0.2, 0.2]),)
        iv = stats.Interval(-0.05, -0.06, -0.04, se=0.004, df=5, p=0.02, method="paired", samples=samples)
        c = Comparison("r", "b", iv, iv, None, 6, p_holm=0.02, mark="better", outcome="supports")
        claim = SimpleNamespace(study="s", margin=0.02, statistic="delta", hypothesis="better",
                                protocol={"family": family} if family else {})
        return SimpleNamespace(claim=claim, comparisons=[c], verdict="agrees", unmet=[], qualifiers=[])

    own = [claimed(None) for _ in range(3)]
    study_family(own)
    assert [r.verdict for r in own] == ["agrees"] * 3 and own[0].comparisons[0].p_holm == 0.02
    wide = [claimed("study") for _ in range(3)]
    study_family(wide)
    assert [r.verdict for r in wide] == ["not resolved"] * 3
    assert wide[0].comparisons[0].p_holm == pytest.approx(0.06) and "family: study" in wide[0].qualifiers[0]
    # a difference reads its TOST on the study-wide Holm too (far outside ±0.02 here: 1 after Holm)
    tost = stats.holm([stats.tost(r.comparisons[0].interval, 0.02) for r in wide])
    assert [r.comparisons[0].tost_holm for r in wide] == pytest.approx(tost) and tost[0] > 0.5


def test_a_better_claim_is_contradicted_only_beyond_the_margin_and_inside_it_reads_equivalent():
    from mbexp.claims.result import Comparison
    from mbexp.claims.rules import outcome

    better = SimpleNamespace(hypothesis="better", statistic="delta", margin=0.02)

    def compared(delta, p_holm, tost_holm, beyond_holm) -> Comparison:
        iv = stats.Interval(delta, delta - 0.007, delta + 0.007, se=0.003, df=5, p=p_holm, method="paired")
        c = Comparison("r", "b", iv, iv, None, 6, p_holm=p_holm, tost_holm=tost_holm, beyond_holm=beyond_holm)
        c.mark = stats.mark(delta, p_holm, tost_holm)
        return c

    inside = compared(+0.0087, 0.01, 0.001, 1.0)  # resolved worse than 0, but inside ±0.02: SwiGLU at 780 steps
    assert inside.mark == "equivalent" and outcome(better, inside) == "open"
    short = compared(+0.02, 0.001, 0.5, 0.9)  # resolved worse, not equivalent, not beyond the margin
    assert short.mark == "worse" and outcome(better, short) == "open"
    beyond = compared(+0.14, 0.0001, 1.0, 0.0001)  # GLU: resolved worse beyond the margin
    assert beyond.mark == "worse" and outcome(better, beyond) == "contradicts"
    gain = compared(-0.027, 0.009, 0.4, 0.3)
    assert gain.mark == "better" and outcome(better, gain) == "supports"


def test_qualifier_texts_name_each_edge_row_and_what_an_edge_bounds():
    from mbexp.claims.rules import edge_text
    from mbexp.claims.statistics import STATISTICS

    text = edge_text({"a-relu": "low", "a-geglu": "high"}, lambda label: label.removeprefix("a-"))
    assert text == "best LR at an end of the scan's grid for relu (low), geglu (high): the optimum may lie beyond it"
    diff = STATISTICS["sensitivity_diff"]
    assert diff.bound(1) == STATISTICS["sensitivity"].bound(1) == "its sensitivity is a lower bound"
    assert diff.bound(2) == "each sensitivity is a lower bound, so their difference is bounded neither way"


def test_a_trend_in_a_study_wide_family_is_resolved_by_its_permutation_p_too():
    """family: study on two trend claims: the one with no p keeps its own reading (and its unmet condition decides
    its verdict); the other takes the larger of its study-wide p and its permutation p, and its mark from that."""
    from mbexp.claims.evaluate import study_family
    from mbexp.claims.result import Comparison
    from mbexp.claims.vocabulary import NOT_AS_DECLARED, OPEN, UNRESOLVED

    def claimed(iv: stats.Interval, unmet: list, permutation: float = 0.2) -> SimpleNamespace:
        c = Comparison("r", "b", iv, iv, None, 6, p_holm=0.5, mark="kept", outcome="kept",
                       p_permutation_holm=permutation)
        claim = SimpleNamespace(study="s", margin=0.02, statistic="trend", hypothesis="better",
                                protocol={"family": "study"})
        return SimpleNamespace(claim=claim, comparisons=[c], verdict="agrees", unmet=unmet, qualifiers=[])

    none = claimed(stats.Interval(math.nan), ["scan incomplete"])
    iv = stats.Interval(-0.1, -0.15, -0.05, se=0.02, df=5, p=0.001, method="paired", samples=((-0.1,) * 6,))
    trend, sure = claimed(iv, []), claimed(iv, [], permutation=0.001)
    study_family([none, trend, sure])
    kept, read = none.comparisons[0], trend.comparisons[0]
    assert (kept.p_holm, kept.mark, kept.outcome) == (0.5, "kept", "kept") and none.verdict == NOT_AS_DECLARED
    assert read.p_holm_study == pytest.approx(0.002) and read.p_holm == 0.2  # the permutation p decides
    assert read.mark == UNRESOLVED and read.outcome == OPEN and math.isnan(read.tost_holm)
    assert trend.verdict == "not resolved" and "family: study" in trend.qualifiers[0]
    # both permutation p below 0.05 too: resolved, the slope's sign giving the mark
    assert sure.comparisons[0].p_holm == pytest.approx(0.002) and sure.comparisons[0].mark == "better"


def test_each_study_is_its_own_family_and_its_marks_read_tost_only_where_the_statistic_does():
    from mbexp.claims.evaluate import study_family
    from mbexp.claims.result import Comparison

    # two studies in one call: each is its own Holm family (three p of 0.02 would give 0.06 pooled)
    s, t = claimed("s", comparison(-0.05, 0.02)), claimed("t", *(comparison(-0.05, 0.02),) * 2)
    study_family([s, t])
    assert s.comparisons[0].p_holm_study == pytest.approx(0.02) and t.comparisons[0].p_holm_study == pytest.approx(0.04)
    # a zero difference inside the margin: equivalent where the statistic reads TOST (delta), not for sensitivity
    same = comparison(0.0, 1.0, spread=0.001)
    sens = claimed("u", comparison(0.0, 1.0, spread=0.001), statistic="sensitivity")
    study_family([claimed("u", same), sens])
    assert same.mark_study.startswith("equiv") and sens.comparisons[0].mark_study == "not resolved"
    # no interval: the comparison keeps its own mark
    untested = Comparison("r", "b", stats.Interval(math.nan), stats.Interval(math.nan), None, 0, mark="no interval")
    study_family([claimed("v", untested)])
    assert untested.mark_study == "no interval"
    # a study of one claim declaring family: study reads it (its own family then has the same one p)
    one = claimed("w", comparison(-0.05, 0.02), family="study")
    study_family([one])
    assert one.comparisons[0].p_holm == pytest.approx(0.02) and one.verdict == "agrees"


def test_one_comparisons_outcome_at_each_rules_boundary():
    """outcome() on comparisons built so one rule decides: an untested side, p at exactly α (not below it), and a
    sensitivity's direction and equivalence."""
    from mbexp.claims.rules import outcome

    def read(hypothesis, delta, mark, beyond, statistic="delta", p=0.01):
        c = comparison(delta, p)
        c.mark, c.beyond_holm = mark, beyond
        return outcome(SimpleNamespace(hypothesis=hypothesis, statistic=statistic), c)

    assert read("better", -0.1, "better", 0.01, p=math.nan) == "untested"  # no p, though an interval
    assert read("equivalent", 0.05, "worse", stats.ALPHA) == "open"  # beyond the margin needs p below α
    assert read("equivalent", 0.05, "worse", 0.01) == "contradicts"
    assert read("better", 0.05, "worse", stats.ALPHA) == "open"
    assert read("better", 0.05, "worse", 0.01) == "contradicts"
    sens = dict(statistic="sensitivity")
    assert read("better", -0.05, "better", stats.ALPHA, **sens) == "open"
    assert read("better", -0.05, "better", 0.01, **sens) == "supports"
    assert read("better", 0.05, "worse", 0.01, **sens) == "contradicts"  # resolved beyond it, the other way
    assert read("worse", 0.05, "worse", 0.01, **sens) == "supports"
    assert read("better", 0.0, "equivalent", 0.9, **sens) == "contradicts"  # within the margin


def test_the_epochs_condition_names_its_tag_and_counts_epochs_in_words():
    from mbexp.claims.rules import past_epochs

    two = SimpleNamespace(max_epochs=2)
    assert past_epochs(two, math.nan) == ("epochs unknown", "epochs not recorded (declared at most 2)")
    assert past_epochs(two, 2.5) == ("> 2 epochs", "past 2 epochs (2.50 epochs)")
    assert past_epochs(SimpleNamespace(max_epochs=1), 1.5) == ("> 1 epoch", "past 1 epoch (1.50 epochs)")
