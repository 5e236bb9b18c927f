"""The table's statistics with hand-known numbers: Holm, TOST, marks, the t-intervals, choices, sensitivity."""

import gc
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from mbexp.analysis import stats


def seeds(*values: float, start: int = 0) -> pd.Series:
    return pd.Series(values, index=range(start, start + len(values)), dtype=float)


def t2_cdf(t: float) -> float:
    """The t distribution with 2 degrees of freedom has a closed-form CDF."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


def test_holm_by_hand():
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005, math.nan])
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> kept monotone: 0.06
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adjusted[4])
    outer = gc.get_freeze_count()
    gc.unfreeze()  # from nothing frozen (a harness, as make mutants-full's, may have frozen its own); refrozen below
    try:
        assert stats.holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
        assert gc.get_freeze_count() == 0 and gc.isenabled()  # what it froze for statsmodels' collect is thawed
        gc.freeze()  # another caller's frozen objects stay frozen
        assert stats.holm([0.6, 0.9]) == pytest.approx([1.0, 1.0]) and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        if outer:
            gc.freeze()


def test_holm_on_the_ffn_reference_p_values():
    """The seven raw p's of the committed FFN table: only Swish stays below 0.05 (GLU's 0.0086 becomes 0.051)."""
    raw = [0.126867, 0.005079, 0.008563, 0.067091, 0.249418, 0.105275, 0.123155]
    adjusted = stats.holm(raw)
    assert adjusted[1] == pytest.approx(7 * 0.005079) and adjusted[2] == pytest.approx(6 * 0.008563)
    assert adjusted[3] == pytest.approx(5 * 0.067091)
    assert adjusted[[0, 4, 5, 6]] == pytest.approx([4 * 0.105275] * 4)
    assert (np.asarray(adjusted) < 0.05).tolist() == [False, True, False, False, False, False, False]


def test_paired_and_welch_intervals_match_scipy():
    base, other = seeds(5.0, 5.3, 4.9, 5.1), seeds(4.8, 5.15, 4.75, 4.85)
    ci = scipy_stats.ttest_rel(other, base).confidence_interval(0.95)
    pair = stats.compare(other, base)
    assert pair.method == "paired" and (pair.low, pair.high) == pytest.approx((ci.low, ci.high))
    assert pair.p == pytest.approx(scipy_stats.ttest_rel(other, base).pvalue)
    apart = seeds(4.6, 4.7, 4.9, 4.65, start=10)  # no shared seeds
    w = stats.compare(apart, base)
    test = scipy_stats.ttest_ind(apart, base, equal_var=False)
    assert w.method == "welch" and (w.low, w.high) == pytest.approx(tuple(test.confidence_interval(0.95)))
    assert w.p == pytest.approx(test.pvalue)
    one_shared = stats.compare(seeds(4.6, 4.8, start=3), base)  # one shared seed: Welch over all
    assert one_shared.method == "welch"
    alone = stats.compare(seeds(4.6), base)
    assert alone.method == "none" and math.isnan(alone.delta) and math.isnan(alone.low)  # no Δ without an interval


def test_tost_by_hand():
    """Paired differences 0.01, 0.00, 0.02: mean 0.01, sd 0.01, se 0.01/√3, 2 degrees of freedom."""
    iv = stats.compare(seeds(5.01, 5.00, 5.02), seeds(5.0, 5.0, 5.0))
    assert (iv.delta, iv.se, iv.df) == pytest.approx((0.01, 0.01 / math.sqrt(3), 2))
    # margin 0.02: the upper test's t = (0.01 − 0.02)/se = −√3 decides, p = F₂(−√3) = 0.113 -> not equivalent
    assert stats.tost(iv, 0.02) == pytest.approx(t2_cdf(-math.sqrt(3)))
    assert stats.tost(iv, 0.02) == pytest.approx(0.1127, abs=1e-4)
    # margin 0.05: t = −0.04/se = −4√3, p = F₂(−4√3) = 0.0101 -> equivalent at 0.05
    assert stats.tost(iv, 0.05) == pytest.approx(t2_cdf(-4 * math.sqrt(3)))
    assert stats.mark(iv.delta, 1.0, stats.tost(iv, 0.05)) == "equivalent"
    assert stats.mark(iv.delta, 1.0, stats.tost(iv, 0.02)) == "not resolved"
    assert math.isnan(stats.tost(stats.Interval(0.01), 0.02))


def test_marks():
    assert stats.mark(-0.1, 0.01, 1.0) == "better"
    assert stats.mark(+0.1, 0.049, 1.0) == "worse"
    assert stats.mark(+0.1, 0.05, 0.01) == "equivalent"  # not significant, but inside the margin
    assert stats.mark(+0.1, 0.3, 0.2) == "not resolved"
    assert stats.mark(math.nan, math.nan, math.nan) == "not resolved"  # no interval: nothing resolved


def test_choose_lowest_mean_first_on_ties():
    assert stats.choose({1e-3: 5.2, 3e-3: 5.1, 1e-2: math.inf}) == 3e-3
    assert stats.choose({1e-3: 5.1, 3e-3: 5.1}) == 1e-3
    assert stats.choose({1e-3: math.inf, 3e-3: math.nan}) is None


def test_sensitivity_by_hand():
    """Smallest warm-up minus the one best on validation, on the reported split, paired over seeds."""
    val = {0: seeds(5.6, 5.7), 100: seeds(5.1, 5.2), 500: seeds(5.3, 5.3)}
    report = {0: seeds(5.5, 5.7), 100: seeds(5.1, 5.2), 500: seeds(4.0, 4.0)}  # 500 is test-best, 100 val-best
    s = stats.sensitivity(val, report)
    # differences 0.4, 0.5: mean 0.45, se 0.05, t(0.975, 1 df) = 12.706
    assert s.delta == pytest.approx(0.45)
    assert (s.low, s.high) == pytest.approx((0.45 - 12.706 * 0.05, 0.45 + 12.706 * 0.05), abs=1e-3)
    same = stats.sensitivity({0: seeds(5.0, 5.1), 100: seeds(5.2, 5.3)}, {0: seeds(5.0, 5.1), 100: seeds(5.2, 5.3)})
    assert (same.delta, same.low, same.high) == (0.0, 0.0, 0.0)  # the smallest is the best
    diverged = stats.sensitivity({0: seeds(), 100: seeds(5.0, 5.1)}, {0: seeds(), 100: seeds(5.0, 5.1)})
    assert math.isinf(diverged.delta)
    assert math.isnan(stats.sensitivity({0: seeds(5.0)}, {0: seeds(5.0)}).delta)  # one setting


def test_identical_differences_give_p_0_unless_they_are_0():
    assert stats.compare(seeds(1.5, 2.5), seeds(1.0, 2.0)).p == 0.0  # Δ 0.5 on every seed: no spread
    assert stats.compare(seeds(1.0, 2.0), seeds(1.0, 2.0)).p == 1.0


def test_welch_tost_allows_unequal_variances():
    """Without shared seeds TOST is Welch's: statsmodels' ttost_ind with usevar="unequal", not the pooled test."""
    from statsmodels.stats.weightstats import ttost_ind

    a, b = seeds(5.0, 5.1, 4.9, 5.3, 4.7), seeds(5.0, 5.05, start=10)
    iv = stats.compare(a, b)
    unequal = ttost_ind(a.to_numpy(), b.to_numpy(), -0.2, 0.2, usevar="unequal")[0]
    pooled = ttost_ind(a.to_numpy(), b.to_numpy(), -0.2, 0.2, usevar="pooled")[0]
    assert iv.method == "welch" and stats.tost(iv, 0.2) == pytest.approx(unequal) and abs(unequal - pooled) > 0.01


def test_marks_are_strict_at_alpha_for_both_tests():
    assert stats.mark(0.1, 0.3, 0.05) == "not resolved" and stats.mark(0.1, 0.05, 1.0) == "not resolved"


def test_a_zero_sd_resolves_any_nonzero_effect_with_two_seeds():
    assert stats.seeds_needed(0.1, 0.0) == 2.0 and math.isinf(stats.seeds_needed(0.0, 0.1))


def test_power_is_two_sided_and_seeds_needed_searches_2_to_max_seeds():
    """With no effect either tail rejects half the time alpha allows; far out in a tail (where scipy gives NaN) the
    power is 1. seeds_needed counts from 2 and up to MAX_SEEDS inclusive, at the alpha it is given."""
    assert stats.power(5, 0.0, 1.0) == pytest.approx(stats.ALPHA, abs=1e-12)
    assert stats.power(2, 100.0, 0.001) == 1.0 and type(stats.power(10, 0.05, 0.05)) is float
    assert (stats.power(np.arange(700, 1001), 1.3664483492953259, 1.0) == 1.0).all()  # scipy: NaN at some n
    assert stats.seeds_needed(30.0, 1.0) == 2.0 and stats.seeds_needed(5.0, 1.0) == 3.0
    assert stats.seeds_needed(1.0, 1.0) == 10.0 and stats.seeds_needed(0.05, 0.05, alpha=0.01) == 16.0
    assert stats.MAX_SEEDS == 1000 and stats.power(1000, 0.0887, 1.0) >= stats.POWER
    assert stats.seeds_needed(0.0887, 1.0) == 1000.0
    assert stats.power(1001, 0.08867, 1.0) >= stats.POWER and math.isinf(stats.seeds_needed(0.08867, 1.0))


def test_a_zero_spread_tost_is_decided_by_the_size_of_the_difference_not_its_sign():
    """Δ exactly ±0.25 on every seed (se 0): equivalent within a margin of 0.5, not within 0.125, either sign."""
    worse, better = stats.compare(seeds(1.25, 2.25), seeds(1.0, 2.0)), stats.compare(seeds(1.0, 2.0), seeds(1.25, 2.25))
    assert (worse.delta, worse.se, better.delta, better.se) == (0.25, 0.0, -0.25, 0.0)
    assert [stats.tost(iv, 0.5) for iv in (worse, better)] == [0.0, 0.0]
    assert [stats.tost(iv, 0.125) for iv in (worse, better)] == [1.0, 1.0]


def test_sensitivity_is_infinite_when_no_run_at_the_smallest_setting_reports_a_loss():
    # every run without warm-up diverged: no reported loss there at all, while the best setting has two seeds
    finished = pd.Series([5.0, 5.1], index=[0, 1])
    val = {0: pd.Series(dtype=float), 200: finished}
    assert stats.sensitivity(val, {200: finished}).delta == math.inf
    assert stats.sensitivity_sides(val, {200: finished})[0].empty


def test_sensitivity_is_unknown_when_the_best_setting_reported_no_loss_and_honours_its_level():
    """Best on validation (100) but no reported loss there (its test evaluation missing): NaN, not a comparison
    against nothing; and the interval is the one at the level asked for."""
    val = {0: seeds(5.6, 5.7, 5.5), 100: seeds(5.1, 5.2, 5.0)}
    unknown = stats.sensitivity(val, {0: seeds(5.5, 5.7, 5.6)})
    assert math.isnan(unknown.delta) and stats.sensitivity_sides(val, {0: seeds(5.5)})[1].empty
    report = {0: seeds(5.5, 5.7, 5.6), 100: seeds(5.1, 5.2, 5.3)}  # differences 0.4, 0.5, 0.3: se 0.0577
    at90 = stats.sensitivity(val, report, level=0.90)
    assert at90.delta == pytest.approx(0.4)
    assert at90.high - at90.delta == pytest.approx(2.919986 * 0.1 / math.sqrt(3))  # t(0.95, 2 df)


def test_beyond_margin_at_zero_spread_and_inside_the_margin():
    """p of H0 |Δ| ≤ margin: with no spread, 0 only strictly beyond the margin, else 1; inside it, capped at 1."""
    flat = [stats.Interval(delta=d, se=0.0, df=2.0) for d in (0.05, -0.05, 0.02, 0.01)]
    assert [stats.beyond_margin(iv, 0.02) for iv in flat] == [0.0, 0.0, 1.0, 1.0]
    inside = stats.Interval(delta=0.0, se=0.01, df=3.0)  # twice the one-sided p exceeds 1 here
    assert stats.beyond_margin(inside, 0.02) == 1.0
    near = stats.Interval(delta=0.03, se=0.01, df=3.0)
    assert stats.beyond_margin(near, 0.02) == pytest.approx(2 * scipy_stats.t.sf(1.0, 3.0))


def test_a_zero_spread_interval_keeps_its_df_and_samples_as_floats():
    welch = stats.welch(pd.Series([1, 1, 1]), pd.Series([2, 2]))  # integer losses: the samples are floats
    assert welch.df == math.inf and welch.se == 0.0 and (welch.low, welch.high) == (-1.0, -1.0)
    assert [s.dtype for s in welch.samples] == [np.float64, np.float64]
    paired = stats.paired(pd.Series([1, 2, 3]), pd.Series([0, 1, 2]))
    assert paired.df == 2 and paired.p == 0.0 and paired.samples[0].dtype == np.float64
    assert paired.samples[0].tolist() == [1.0, 1.0, 1.0]
    one = stats.paired(pd.Series([1.0], index=[0]), pd.Series([2.0, 3.0], index=[0, 1]))
    assert math.isnan(one.delta) and one.method != "paired"


def test_compare_passes_its_level_to_welch():
    a, b = pd.Series([5.0, 5.2, 4.9], index=[0, 1, 2]), pd.Series([5.3, 5.6], index=[3, 4])  # no shared seed
    wide, narrow = stats.compare(a, b), stats.compare(a, b, level=0.5)
    assert wide.method == narrow.method == "welch"
    assert narrow.high - narrow.low < wide.high - wide.low
    half = stats.welch(a, b, 0.5)
    assert (narrow.low, narrow.high) == pytest.approx((half.low, half.high))


def test_a_zero_spread_welch_tost_is_0_strictly_inside_the_margin_and_1_at_it():
    inside = stats.welch(pd.Series([1.25, 1.25, 1.25]), pd.Series([1.0, 1.0]))
    at = stats.welch(pd.Series([1.5, 1.5, 1.5]), pd.Series([1.0, 1.0]))
    assert (inside.se, at.se, at.delta) == (0.0, 0.0, 0.5)
    assert stats.tost(inside, 0.5) == 0.0 and stats.tost(at, 0.5) == 1.0


def test_a_slow_start_is_flagged_from_three_other_seeds():
    assert stats.slow_starts(pd.Series([5.0, 5.1, 4.9, 7.0])) == [3]  # median 5.0, robust SD 0.148 from the others
