"""The ladder's fit-free reading (docs/table.md, "Ladders"): paired Δ per size, slope t-test, permutation test;
and the multiplier's formulas and bootstrap width, against hand calculations."""

import math

import numpy as np
import pandas as pd
import pytest

from mbexp.analysis import powerlaw, scaling, trend
from mbexp.analysis.powerlaw import Curve


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
    """GEGLU − ReLU at 600 steps on ladder_cpu, the numbers an independent audit computed (docs/table.md)."""
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


def test_a_bootstrap_mean_spreads_like_a_mean_of_n_seeds():
    """A point of 3 seeds gets the mean of 3 pooled deviations: s.d. 1/√3 for a unit pool (one draw: √3 wider)."""
    rng = np.random.default_rng(0)
    pool = rng.standard_normal(400)
    pool = (pool - pool.mean()) / pool.std()
    losses = [pd.Series([5.0, 5.0, 5.0])]
    draws = [scaling.resampled_means(losses, pool, rng)[0] for _ in range(4000)]
    assert np.std(draws) == pytest.approx(1 / math.sqrt(3), rel=0.05)
