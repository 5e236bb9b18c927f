"""Ladder rules against hand formulas: the multiplier and crossover with unequal exponents, the trend ratio, and
the bootstrap interval's width against the seed noise of a point's mean."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from test_scaling import curve, fitted, write_ladder

from mbexp.analysis import table
from mbexp.analysis.ladder import powerlaw, scaling

C = 1e12


def test_multiplier_and_crossover_with_unequal_exponents_by_hand():
    base, steep = curve(0.3, 4.3), curve(0.4, 4.35)  # steeper but behind at 1e12: it catches up later
    # m = C_b(L_v(C)) / C with C_b(L) = (A_b / (L − E))^(1/α_b) and L_v(C) − E = A_v·C^−α_v
    by_hand = (base.A / (steep.A * C**-0.4)) ** (1 / 0.3) / C
    assert scaling.multiplier(base, steep, C) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand < 1  # behind at 1e12
    # the curves cross where A_v·C^−α_v = A_b·C^−α_b: log C = (log A_v − log A_b) / (α_v − α_b)
    cross = math.exp((steep.log_A - base.log_A) / (0.4 - 0.3))
    assert scaling.crossover(base, steep, 1e11, 1e20) == (pytest.approx(cross, rel=1e-9), "within")
    assert scaling.multiplier(base, steep, cross) == pytest.approx(1.0, rel=1e-9)
    # m(C) ∝ C^(α_v / α_b − 1): ×8 in compute multiplies m by 8^(1/3) = 2
    assert scaling.multiplier(base, steep, 8 * C) / scaling.multiplier(base, steep, C) == pytest.approx(2.0)


def test_trend_ratio_is_m_at_the_largest_over_m_at_the_smallest_size(tmp_path):
    """Sizes 1e6..8e6 FLOPs per token at one budget: 8x in compute, so m(largest) / m(smallest) = 8^(0.4/0.3 − 1)."""
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.4, 4.35)}, steps=(600,), noise=1e-5)
    swiglu = fitted(tmp_path, resamples=20).curves.set_index("variant").loc["layer-pre-swiglu-matched"]
    assert swiglu["trend_ratio"] == pytest.approx(2.0, rel=0.02)
    assert swiglu["trend"] == "crosses 1 upward"  # behind at the smallest size, ahead at the largest


def width_per_noise(results, seeds: int) -> float:
    """The median 95% interval width of the variant's multipliers over the standard error of a point's mean
    (the seed SD of the whole ladder over √n)."""
    write_ladder(results, {"relu": curve(0.3, 4.3), "swiglu": curve(0.3, 4.2)}, steps=(600,), seeds=seeds)
    points, _ = scaling.ladder_points(table.build_tables(results)["synth"])
    sd = math.sqrt(np.mean(scaling.seed_deviations(points) ** 2))
    fit = fitted(results, resamples=100).points
    swiglu = fit[fit["variant"] == "layer-pre-swiglu-matched"]
    return float((swiglu["multiplier_high"] - swiglu["multiplier_low"]).median()) / (sd / math.sqrt(seeds))


def test_multiplier_interval_narrows_as_the_standard_error_of_a_mean(tmp_path):
    """The bootstrap draws a point's mean from its own seeds, not one run: width ∝ t(n − 1)·SD/√n, so the width
    per standard error shrinks from 3 to 12 seeds as t_0.975 on 11 over 2 df, 2.201 / 4.303 = 0.51 (a draw of one
    run per point would make it 2x that; the pooled draw of before gave 1)."""
    expected = scipy_stats.t.ppf(0.975, 11) / scipy_stats.t.ppf(0.975, 2)
    ratio = width_per_noise(tmp_path / "twelve", 12) / width_per_noise(tmp_path / "three", 3)
    assert expected == pytest.approx(0.5115, abs=1e-3)
    assert ratio == pytest.approx(expected, abs=0.15)


def test_a_polish_whose_steps_settle_at_rounding_noise_has_converged():
    """From near an exact three-point fit, Newton's steps shrink to the extended-precision solve's rounding and stop
    halving there, above 1e-16 but below the noise floor: that is convergence, and the polish returns the optimum
    (a stall would return None and leave the trust-region answer, BLAS rounding and all)."""
    points = pd.DataFrame({"variant": "v0", "compute": [1e12, 1595532885292.743, 2545725188050.587],
                           "loss": [26.663778361606877, 24.323457297528293, 22.197936243970663]})
    _, which, x, _ = powerlaw.axes(points)
    y = points["loss"].to_numpy(float)
    bounds = (np.array([0.0, -np.inf, powerlaw.ALPHA_BOUNDS[0]]),
              np.array([y.min() * (1 - 1e-9), np.inf, powerlaw.ALPHA_BOUNDS[1]]))
    p = powerlaw._polish(np.array([1.1651646922535421, 3.142350185066431, 0.20605646798606705]), x, y, which, 1,
                         bounds)
    assert p is not None
    assert powerlaw._model_parts(p, x, which, 1)[0] == pytest.approx(y, rel=1e-12)  # through all three points
