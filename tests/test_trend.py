"""The ladder's fit-free reading (docs/ladders.md#the-fit-free-trend): paired Δ per size, slope t-test, permutation
test; and the multiplier's formulas and bootstrap width, against hand calculations."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from mbexp.analysis.ladder import powerlaw, scaling, trend
from mbexp.analysis.ladder.powerlaw import Curve


def test_slope_and_both_tests_by_hand():
    # ln N = 0, 1, 2; seed 0's Δ falls 0.1 per e-fold, seed 1's 0.2: mean slope −0.15, s.e. 0.05, t = 3 on 1 df
    sizes = [1.0, math.e, math.e**2]
    deltas = {n: pd.Series({0: a, 1: b}) for n, a, b in zip(sizes, (0.3, 0.2, 0.1), (0.5, 0.3, 0.1))}
    t = trend.trend(deltas)
    assert t.slopes == pytest.approx((-0.1, -0.2)) and t.slope == pytest.approx(-0.15)
    assert t.p == pytest.approx(0.204833, abs=1e-6)  # 2·P(T₁ > 3) = 1 − 2·atan(3)/π
    half = 12.706205 * 0.05  # t₀.₉₇₅ on 1 df times the s.e.
    assert (t.low, t.high) == pytest.approx((-0.15 - half, -0.15 + half), abs=1e-6)
    # 6 orders per seed, 36 pairs; |mean slope| ≥ 0.15 only for (−0.1, −0.2) and (+0.1, +0.2)
    assert t.p_permutation == pytest.approx(2 / 36)
    assert t.reading == "not resolved" and t.deltas[1.0] == pytest.approx(0.4)


def test_the_committed_ladder_geglu_deficit_shrinks():
    """GEGLU − ReLU at 600 steps on ladder_cpu, the numbers an independent audit computed
    (docs/ladders.md#the-fit-free-trend)."""
    from test_scaling import committed_ladder

    points, base = scaling.ladder_points(committed_ladder())
    t = trend.trend(trend.ladder_deltas(points, "layer-pre-geglu-matched", base, 600))
    assert [round(d, 3) for d in t.deltas.values()] == [0.321, 0.192, -0.017, -0.083]
    assert round(t.p, 3) == 0.023 and round(t.p_permutation, 4) == 0.0004 and t.reading == "shrinks"


def test_too_few_sizes_or_seeds_resolve_nothing():
    two = {1.0: pd.Series({0: 0.1, 1: 0.2}), 2.0: pd.Series({0: 0.0, 1: 0.1})}
    assert math.isnan(trend.trend(two).p) and trend.trend(two).reading == "not resolved"


def test_multiplier_and_its_trend_with_unequal_exponents():
    # shared floor: m = (A_b/A_v)^(1/α_b) · C^(α_v/α_b − 1) = 0.5^5 · (1e12)^0.5 = 31250
    base, gated = Curve(3.0, math.log(100), 0.2), Curve(3.0, math.log(200), 0.3)
    assert powerlaw.multiplier(base, gated, 1e12) == pytest.approx(31250, rel=1e-9)
    # r = (C_large / C_small)^(α_v/α_b − 1) = 100^0.5
    assert powerlaw.multiplier(base, gated, 1e14) / powerlaw.multiplier(base, gated, 1e12) == pytest.approx(10)
    # where they cross: C× = (A_v/A_b)^(1/(α_v − α_b)) = 2^10
    assert powerlaw.crossover(base, gated, 1.0, 1e4) == (pytest.approx(1024), "within")


def test_a_bootstrap_mean_spreads_like_a_t_interval_of_its_own_seeds():
    """A point of 3 seeds (s = 1) is redrawn as its mean + s/√3 × t on 2 df: its 80% percentile range is
    5 ± 1.886/√3 = 5 ± 1.089 and its 95% one 5 ± 4.303/√3 = 5 ± 2.484 (a normal draw: ± 0.740 and ± 1.132)."""
    rng = np.random.default_rng(0)
    losses = [pd.Series([4.0, 5.0, 6.0]), pd.Series([7.0])]
    draws = np.array([scaling.resampled_means(losses, rng) for _ in range(20000)])
    for level, half in ((0.80, 1.089), (0.95, 2.484)):
        tail = (1 - level) / 2
        assert scipy_stats.t.ppf(1 - tail, 2) / math.sqrt(3) == pytest.approx(half, abs=1e-3)
        assert np.percentile(draws[:, 0], [100 * tail, 100 * (1 - tail)]) == pytest.approx([5 - half, 5 + half],
                                                                                           abs=0.04 * half)
    assert (draws[:, 1] == 7.0).all()  # one seed: no spread of its own, the mean stays


def test_a_ladder_claim_missing_a_size_is_not_tested_as_declared():
    """A trend read on a ladder one pair lacks a size of (its runs not all landed) is no verdict."""
    from test_scaling import committed_ladder

    from mbexp.claims.ladder import tested as ladder_trend
    from mbexp.claims.parse import load_claims_text
    from mbexp.claims.vocabulary import NOT_AS_DECLARED

    text = """claims:
  - id: t
    claim: the deficit shrinks
    paper: none
    experiment: ladder_cpu
    at: {train.steps: 600}
    statistic: trend
    baseline: layer-pre-relu-matched
    rows: [layer-pre-geglu-matched, layer-pre-swiglu-matched]
    hypothesis: better
    seeds: [0, 1, 2]
"""
    claim, = load_claims_text(text)
    ladder = committed_ladder()
    assert not any("sizes missing" in u for u in ladder_trend(claim, ladder).unmet)
    ladder.runs = ladder.runs[ladder.runs["label"] != "layer-pre-geglu-matched-ladder160"]
    result = ladder_trend(claim, ladder)
    assert result.unmet == ["planned sizes missing for layer-pre-geglu-matched: ladder160"]
    assert result.verdict == NOT_AS_DECLARED


def test_a_trend_claim_says_how_many_seeds_would_resolve_its_slope():
    """Seeds needed for a trend: the per-seed slopes' mean and SD in the paired t-test's power
    (docs/columns.md#statistics), here recomputed with scipy's noncentral t."""
    from test_scaling import committed_ladder

    from mbexp.claims.ladder import tested as ladder_trend
    from mbexp.claims.parse import load_claims_text

    claim, = load_claims_text("""claims:
  - {id: t, claim: shrinks, paper: none, experiment: ladder_cpu, at: {train.steps: 600}, statistic: trend,
     baseline: layer-pre-relu-matched, rows: [layer-pre-swiglu-matched], hypothesis: better, seeds: [0, 1, 2]}
""")
    c, = ladder_trend(claim, committed_ladder()).comparisons
    points, base = scaling.ladder_points(committed_ladder())
    slopes = trend.trend(trend.ladder_deltas(points, "layer-pre-swiglu-matched", base, 600)).slopes
    assert list(c.deltas) == pytest.approx(slopes) and c.interval.delta == pytest.approx(np.mean(slopes))
    d = abs(np.mean(slopes)) / np.std(slopes, ddof=1)

    def power(n):
        t = scipy_stats.t.ppf(0.975, n - 1)
        return scipy_stats.nct.sf(t, n - 1, d * math.sqrt(n)) + scipy_stats.nct.cdf(-t, n - 1, d * math.sqrt(n))

    assert power(3) < 0.8 <= power(4) and c.seeds_needed == 4


def test_the_fit_tables_fit_free_column_is_holm_adjusted_over_the_budgets_variants():
    """GEGLU and SwiGLU vs ReLU on the committed ladder_cpu at 600 steps: each p of the fit-free column is the
    larger of its slope t-test and permutation p, each adjusted by Holm over the two variants (by hand)."""
    from test_scaling import committed_ladder

    ladder = scaling.analyse(committed_ladder(), resamples=20, panel=False)
    points, base = scaling.ladder_points(committed_ladder())
    rows = ladder.curves[(ladder.curves["budget"] == 600) & (ladder.curves["variant"] != base)]
    raw = {v: trend.trend(trend.ladder_deltas(points, v, base, 600)) for v in rows["variant"]}

    def holm_of_two(ps: dict) -> dict:
        (a, pa), (b, pb) = sorted(ps.items(), key=lambda kv: kv[1])
        return {a: min(1, 2 * pa), b: min(1, max(2 * pa, pb))}

    ts = holm_of_two({v: t.p for v, t in raw.items()})
    perms = holm_of_two({v: t.p_permutation for v, t in raw.items()})
    for _, row in rows.iterrows():
        v = row["variant"]
        assert row["fit_free_p"] == pytest.approx(scaling.significant(max(ts[v], perms[v])))
        assert row["fit_free"] == ("shrinks" if max(ts[v], perms[v]) < 0.05 else "not resolved")
    adjusted = rows.set_index("variant")["fit_free_p"].to_dict()  # unadjusted: 0.0227 and 0.0369
    assert adjusted == {"layer-pre-geglu-matched": 0.0453, "layer-pre-swiglu-matched": 0.0453}


def test_a_ladder_claim_reads_its_epochs_as_any_claim_does():
    """Past its max_epochs, or with epochs not recorded, a trend claim is not tested as declared."""
    from test_scaling import committed_ladder

    from mbexp.claims.ladder import tested as ladder_trend
    from mbexp.claims.parse import load_claims_text
    from mbexp.claims.vocabulary import NOT_AS_DECLARED

    text = """claims:
  - {id: t, claim: shrinks, paper: none, experiment: ladder_cpu, at: {train.steps: 600}, statistic: trend,
     baseline: layer-pre-relu-matched, rows: [layer-pre-geglu-matched], hypothesis: better, seeds: [0, 1, 2],
     conditions: {max_epochs: 1}}
"""
    claim, = load_claims_text(text)
    ladder = committed_ladder()
    within = ladder_trend(claim, ladder)
    assert not any("epoch" in u for u in within.unmet), within.unmet  # 600 steps: 0.75 epochs
    ladder.runs["epochs"] = ladder.runs["epochs"] * 2
    past = ladder_trend(claim, ladder)
    assert past.verdict == NOT_AS_DECLARED and past.unmet == ["past 1 epoch (1.51 epochs)"]
    ladder.runs["epochs"] = float("nan")
    unknown = ladder_trend(claim, ladder)
    assert unknown.verdict == NOT_AS_DECLARED and unknown.unmet == ["epochs not recorded (declared at most 1)"]


def test_a_trend_resolves_only_when_both_tests_do():
    # two seeds of three sizes: the slope t-test resolves, the permutation test cannot (2/36 > 0.05 at best)
    sizes = [1.0, math.e, math.e**2]
    deltas = {n: pd.Series({0: a, 1: b}) for n, a, b in zip(sizes, (0.3, 0.2, 0.1), (0.3, 0.199, 0.098))}
    t = trend.trend(deltas)
    assert t.p < 0.05 < t.p_permutation and t.reading == "not resolved"


def test_a_permutation_p_past_the_exact_limit_is_drawn_with_its_seed():
    """5 sizes, 3 seeds: 120³ orders, more than EXACT_LIMIT, so DRAWS seeded draws of one order per seed,
    p = (1 + #|mean slope| ≥ |observed|) / (DRAWS + 1), recomputed here with numpy's polyfit."""
    import itertools

    y = np.random.default_rng(1).normal(size=(3, 5)) * 0.05 - 0.005 * np.arange(5)  # seeds × sizes
    x = np.arange(5.0)  # ln N
    deltas = {math.e ** j: pd.Series(dict(enumerate(y[:, j]))) for j in range(5)}
    t = trend.trend(deltas)
    slopes = np.array([[np.polyfit(x, row[list(o)], 1)[0] for o in itertools.permutations(range(5))] for row in y])
    picks = np.random.default_rng(trend.RNG_SEED).integers(0, 120, size=(trend.DRAWS, 3))
    means = slopes[np.arange(3), picks].mean(axis=1)
    hits = np.sum(np.abs(means) >= abs(t.slope) - 1e-12)
    assert 0.05 < (1 + hits) / (trend.DRAWS + 1) < 0.5  # neither end: every draw counts
    assert t.p_permutation == pytest.approx((1 + hits) / (trend.DRAWS + 1), abs=1e-12)
    assert trend.trend(deltas) == t  # seeded


def unresolved_fields(t) -> tuple:
    """A Trend's fields with each NaN as the text "nan", so that a whole Trend compares with =="""
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in vars(t).values())


def test_a_trend_without_enough_sizes_or_seeds_keeps_its_means_and_seeds_and_nothing_else():
    two = {1.0: pd.Series({0: 0.1, 1: 0.2}), 2.0: pd.Series({0: 0.0, 1: 0.1})}
    nan = "nan"
    assert unresolved_fields(trend.trend(two)) == (
        {1.0: pytest.approx(0.15), 2.0: pytest.approx(0.05)}, (0, 1), (), nan, nan, nan, nan, nan, "not resolved")
    one_seed = {n: pd.Series({0: 0.1 * n}) for n in (1.0, 2.0, 3.0)}
    assert unresolved_fields(trend.trend(one_seed))[1:] == ((0,), (), nan, nan, nan, nan, nan, "not resolved")
    assert unresolved_fields(trend.trend({})) == ({}, (), (), nan, nan, nan, nan, nan, "not resolved")


def test_seeds_with_one_slope_have_no_spread():
    # every seed falls 0.1 per e-fold: the slope is exact (p 0, interval a point); a flat Δ: p 1
    falling = {math.e ** j: pd.Series({0: -0.1 * j, 1: 0.2 - 0.1 * j}) for j in range(3)}
    t = trend.trend(falling)
    assert (t.slope, t.low, t.high) == pytest.approx((-0.1, -0.1, -0.1)) and t.p == 0.0
    flat = trend.trend({math.e ** j: pd.Series({0: 0.2, 1: 0.3}) for j in range(3)})
    assert (flat.slope, flat.low, flat.high, flat.p) == (0.0, 0.0, 0.0, 1.0) and flat.reading == "not resolved"


def test_a_resolved_slope_reads_shrinks_below_zero_and_grows_from_zero_up():
    assert [trend.reading(s, True) for s in (-0.5, -1e-9, 0.0, 0.5, 2.0)] == [
        "shrinks", "shrinks", "grows", "grows", "grows"]
    assert {trend.reading(s, False) for s in (-0.5, 0.0, 0.5)} == {"not resolved"}
