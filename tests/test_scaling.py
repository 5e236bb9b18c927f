"""Size ladders (docs/ladders.md, docs/ladder-fits.md): the fit, multiplier, crossover and held-out check on
summaries drawn from known curves, and a real tiny ladder end to end."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny import REPO, make_table_here, mbexp_train, overrides, summaries

from mbexp.analysis import outputs, table
from mbexp.analysis.collect import collect_runs
from mbexp.analysis.ladder import batch, draws, powerlaw, render, scaling
from mbexp.analysis.ladder.powerlaw import Curve

SIZES = {"ladder64": 1e6, "ladder96": 2e6, "ladder128": 4e6, "ladder160": 8e6}  # name -> FLOPs per token
TOKENS_PER_STEP = 2048
E = 3.0
NOISE = 0.004  # nats: seed-to-seed spread of a final loss, about what the CPU ladders show
SHORT = {200: 0.3}  # the floor of a shorter budget lies higher: fewer tokens (nats added at that budget)


def curve(alpha: float, loss_at_1e12: float) -> Curve:
    """The curve on the shared floor E through `loss_at_1e12` at C = 1e12 FLOPs."""
    return Curve(E, math.log(loss_at_1e12 - E) + alpha * math.log(1e12), alpha)


def write_ladder(results: Path, curves: dict[str, Curve], *, sizes=SIZES, steps=(200, 600), seeds=3,
                 experiment: str = "synth", noise: float = NOISE, lr=lambda ffn, size: 3e-3) -> None:
    """Summaries of a ladder whose final test losses are the curves' values plus Gaussian seed noise; `steps`: the
    budgets of every size, or a dict of each size's own; `lr`: each (FFN, size)'s learning rate."""
    rng = np.random.default_rng(1)
    for ffn, law in curves.items():
        for i, (name, flops) in enumerate(sizes.items()):
            for budget in steps[name] if isinstance(steps, dict) else steps:
                identity = {"ffn.name": ffn, "norm.name": "layer", "placement.name": "pre", "hidden.name": "matched",
                            "model.name": name, "model.d_model": 64 + 32 * i, "optim.lr": lr(ffn, name),
                            "train.steps": budget}
                for seed in range(seeds):
                    loss = float(law.loss(flops * budget * TOKENS_PER_STEP)) + SHORT.get(budget, 0.0)
                    loss += rng.normal(0, noise)
                    run = results / "runs" / experiment / f"{ffn}-{name}-{budget}" / f"seed={seed}"
                    run.mkdir(parents=True)
                    (run / "summary.json").write_text(json.dumps({
                        "status": "completed", "experiment": experiment, "variant": f"{ffn}-{name}-{budget}",
                        "row": f"layer-pre-{ffn}-matched-{name}", "row_id": f"{ffn}{name}", "seed": seed,
                        "axes": {"norm": "layer", "placement": "pre", "ffn": ffn, "hidden": "matched",
                                 "warmup_steps": 30},
                        "identity": identity, "steps": budget, "step": budget, "params": 10**6,
                        "params_non_embedding": int(flops / 6), "d_ff": 256, "flops_per_token": flops,
                        "tokens_seen": budget * TOKENS_PER_STEP, "early_val_loss": 6.0, "final_val_loss": loss,
                        "final_val_bpb": loss / 3, "final_test_loss": loss, "tokens_per_s": 1000.0}))


def fitted(results: Path, experiment: str = "synth", **kwargs) -> scaling.Ladder:
    """The ladder's fit; without the robustness panel (its 7 refit forms) unless panel=True."""
    return scaling.analyse(table.build_tables(results)[experiment], **{"panel": False, **kwargs})


def by_variant(ladder: scaling.Ladder, budget: int = 600) -> dict[str, pd.Series]:
    """The curves at one budget, by variant."""
    return {c["variant"]: c for _, c in ladder.curves.iterrows() if c["budget"] == budget}


def test_fit_recovers_alpha_and_the_shared_floor(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.30, 4.3), "swiglu": curve(0.36, 4.2)})
    ladder = fitted(tmp_path)
    assert ladder.baseline == "layer-pre-relu-matched"
    assert list(zip(ladder.curves["variant"], ladder.curves["budget"])) == [
        ("layer-pre-relu-matched", 200), ("layer-pre-swiglu-matched", 200),
        ("layer-pre-relu-matched", 600), ("layer-pre-swiglu-matched", 600)]  # one curve per variant and budget
    # 4 sizes per curve over 8x in compute, 3 seeds of 0.004 nats: α within 0.04, E within 0.1 nats
    # (eight noise draws tried: at most 0.034 and 0.079 off)
    for budget in (200, 600):
        curves = by_variant(ladder, budget)
        assert curves["layer-pre-relu-matched"]["alpha"] == pytest.approx(0.30, abs=0.04)
        assert curves["layer-pre-swiglu-matched"]["alpha"] == pytest.approx(0.36, abs=0.04)
        assert curves["layer-pre-relu-matched"]["E"] == curves["layer-pre-swiglu-matched"]["E"]
        assert curves["layer-pre-relu-matched"]["E"] == pytest.approx(E + SHORT.get(budget, 0), abs=0.1)
        assert all(c["rms"] < 2 * NOISE for c in curves.values())  # the residual is the noise of a mean, no more
        # the pooled seed s.d. has 16 degrees of freedom here: ±18% is one s.d. of it, 0.4 two and a bit
        assert all(c["noise"] == pytest.approx(NOISE / math.sqrt(3), rel=0.4) for c in curves.values())
        assert all(c["lof_p"] > 0.01 for c in curves.values())  # the right form: no lack of fit
    assert re.search(r"\| 0\.\d{4} \| F [\d.]+ \(2, 8 df\), p [\d.]+ \| 4 \| ", render.to_markdown(ladder))


def test_known_multiplier_lies_in_its_interval(tmp_path):
    base, better = curve(0.3, 4.3), curve(0.3, 4.2)  # same α: m = (A_b / A_v)^(1/α) at every compute
    known = (base.A / better.A) ** (1 / 0.3)
    assert powerlaw.multiplier(base, better, 1e12) == pytest.approx(known)
    write_ladder(tmp_path, {"relu": base, "swiglu": better})
    points = fitted(tmp_path).points
    swiglu = points[points["variant"] == "layer-pre-swiglu-matched"]
    assert len(swiglu) == 8 and known == pytest.approx(1.31, abs=0.01)
    # a 95% interval per point: 7 of 8 here (eight noise draws tried: 61 of 64 points)
    assert ((swiglu["multiplier_low"] <= known) & (known <= swiglu["multiplier_high"])).sum() >= 7
    assert (swiglu["multiplier_low"] > 1).all()  # the interval excludes "no gain"
    assert points.loc[points["variant"] == "layer-pre-relu-matched", "multiplier"].isna().all()
    curves = by_variant(fitted(tmp_path))
    swiglu = curves["layer-pre-swiglu-matched"]  # a constant m: its ratio's interval holds 1
    assert swiglu["trend"] == "not resolved" and swiglu["trend_low"] < 1 < swiglu["trend_high"]


def test_one_seed_per_point_gives_no_interval(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.3, 4.2)}, seeds=1)
    ladder = fitted(tmp_path, resamples=20)
    assert ladder.points["multiplier"].notna().sum() == 8 and ladder.points["multiplier_low"].isna().all()
    md = render.to_markdown(ladder)
    assert "(no interval: one seed per point)" in md
    assert re.search(r"^\| ladder64 \| 166,666 \| 200 \| 1\.\d\d \|$", md, re.M)  # a multiplier, no interval
    assert by_variant(ladder)["layer-pre-swiglu-matched"]["trend"] == "not resolved"


def test_bootstrap_is_byte_stable(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.3, 4.2)})
    ladder = fitted(tmp_path, resamples=40)
    assert render.to_csv(ladder) == render.to_csv(fitted(tmp_path, resamples=40))


def committed_ladder(jitter: float = 0.0, seed: int = 0) -> table.Table:
    """The committed ladder_cpu runs' table, every loss times (1 + jitter·N(0, 1))."""
    runs = collect_runs(REPO / "results")
    runs = runs[runs["experiment"] == "ladder_cpu"].copy()
    rng = np.random.default_rng(seed)
    for column in ("final_test_loss", "final_val_loss"):
        runs[column] *= 1 + jitter * rng.standard_normal(len(runs))
    return table.tables_for(runs)["ladder_cpu"]


def test_the_fit_files_survive_a_1e9_change_of_every_loss():
    """What a CPU's BLAS or SIMD rounding could move (far less than 1e-9) leaves the fit files' bytes alone: the
    optimum is polished in extended precision and written at the stated precision (docs/ladder-fits.md#precision).
    The committed ladder has a floor at its bound and a flat valley, what made two CPUs disagree before."""
    texts = []
    for jitter in (0.0, 1e-9):
        ladder = scaling.analyse(committed_ladder(jitter, seed=1), resamples=20)
        texts.append(render.to_csv(ladder) + render.to_markdown(ladder))
    assert texts[0] == texts[1]
    assert ",0,12.5," in texts[0]  # E at its bound is written as the bound
    # the new columns are in what is compared: lack of fit, the panel and the fit-free reading
    assert "F 4.94 (5, 24 df), p 0.003" in texts[0] and "| without ladder128 |" in texts[0]
    assert "form-dependent" in texts[0] and "deficit shrinks" in texts[0]


def test_why_per_budget_quotes_the_committed_ladder():
    """docs/ladder-fits.md#the-fit, "Why per budget": one curve per variant through both budgets of the committed
    ladder_cpu misses its points far more than the per-budget fits do and than the points' seed spread; the quoted
    ranges are computed here (2 decimals)."""
    ladder = scaling.analyse(committed_ladder(), resamples=20, panel=False)
    points, rms = ladder.points, ladder.curves["rms"]
    pooled = []
    for variant, group in points.groupby("variant", sort=False):
        curves, _ = powerlaw.fit(group)
        pooled.append(float(np.sqrt(np.mean((group["loss"] - curves[variant].loss(group["compute"])) ** 2))))

    def span(values) -> str:
        return f"{min(values):.2f}–{max(values):.2f}"

    quoted = (f"leaves RMS residuals of {span(pooled)} nats, where the per-budget fits leave "
              f"{span(rms)} and the points' seed s.d. is {span(points['std'])}")
    doc = " ".join((REPO / "docs" / "ladder-fits.md").read_text(encoding="utf-8").split())
    assert quoted in doc
    relu = points[points["variant"] == ladder.baseline].set_index(["size", "steps"])
    for size, steps, before in (("ladder64", 600, "ReLU at "), ("ladder96", 200, "and at ")):
        at = relu.loc[(size, steps)]
        compute = f"{at['compute']:.1e}".replace("e+", "e")
        assert f"{before}`{size}` × {steps} steps (C = {compute}) {'reaches ' * (steps == 600)}{at['loss']:.2f}" in doc
    assert min(pooled) > 2 * max(rms)  # the reason the doc gives: per budget fits, pooled does not


def test_the_fit_does_not_depend_on_where_the_solver_stops(tmp_path):
    """Two starts a little apart (as two BLAS builds leave the trust-region solver) give bit-identical curves."""
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)})
    points, _ = scaling.ladder_points(table.build_tables(tmp_path)["synth"])
    points = points[points["steps"] == 600]
    curves, params = powerlaw.fit(points)
    again, _ = powerlaw.fit(points, start=params * (1 + 1e-6 * np.arange(len(params))))
    assert curves == again


# a bootstrap draw of the μP ladder's 200-step points (relu, geglu, swiglu): its refit puts both gated curves' α at
# the bound, which leaves E and their A nearly interchangeable (the Hessian's condition number is about 1e8)
FLAT = {"relu": ((1932735283200, 5.228952573345392), (3442684723200, 5.188657481955099),
                 (5315022028800, 5.204318088598307), (10146860236800, 5.162408971890036)),
        "geglu": ((1933679001600, 5.495799007132889), (3442684723200, 5.369486043615775),
                  (5313134592000, 5.489089711245708), (10146860236800, 5.476566531533772)),
        "swiglu": ((1933679001600, 5.3146970161666625), (3442684723200, 5.530416900693995),
                   (5313134592000, 5.44118175249893), (10146860236800, 5.65636832158836))}
FLAT_START = np.array([5.07556373, -2.09505735, -1.02844749, -1.18734224, 0.351318402, 1e-6, 1e-6])


def flat_points() -> pd.DataFrame:
    """FLAT as the fit's points (columns variant, compute, loss)."""
    return pd.DataFrame([(v, c, loss) for v, pts in FLAT.items() for c, loss in pts],
                        columns=["variant", "compute", "loss"])


def test_an_ill_conditioned_refit_settles_where_any_start_would():
    """The Newton steps settle at their rounding floor (about 1e-14 here, not 1e-16), so two trust-region answers a
    little apart, as two CPUs leave them, end at the same optimum instead of each keeping its own."""
    points = flat_points()
    curves, params = powerlaw.fit(points, start=FLAT_START)
    again, other = powerlaw.fit(points, start=FLAT_START * (1 + 1e-6 * np.arange(len(FLAT_START))))
    assert params[5:] == pytest.approx([1e-6, 1e-6], rel=1e-12)  # both gated curves at the bound
    assert other == pytest.approx(params, rel=1e-12, abs=1e-12)
    for name in ("geglu", "swiglu"):
        assert powerlaw.multiplier(again["relu"], again[name], 4e12) == pytest.approx(
            powerlaw.multiplier(curves["relu"], curves[name], 4e12), rel=1e-10)


def test_a_refits_short_run_reaches_the_full_runs_optimum(monkeypatch):
    """A bootstrap refit runs the trust region for at most EARLY_EVALUATIONS before the Newton steps; it ends where the
    full run (the early budget raised to the full one) ends, on a well-posed draw and on the ill-conditioned one."""
    rng = np.random.default_rng(0)
    well = pd.DataFrame([(v, c, curve(a, l).loss(c) + rng.normal(0, NOISE)) for v, a, l in
                         (("relu", 0.3, 4.3), ("swiglu", 0.36, 4.2)) for c in (2e12, 4e12, 8e12, 1.6e13)],
                        columns=["variant", "compute", "loss"])
    flat = flat_points()
    evaluations, solver = [], powerlaw.least_squares

    def counted(*args, **kwargs):
        got = solver(*args, **kwargs)
        evaluations.append(got.nfev)
        return got

    monkeypatch.setattr(powerlaw, "least_squares", counted)
    for points, start in ((well, powerlaw.fit(well)[1] * 1.01), (flat, FLAT_START)):
        evaluations.clear()
        _, short = powerlaw.fit(points, start=start)
        assert evaluations == [min(evaluations[0], powerlaw.EARLY_EVALUATIONS)]  # one short run, nothing after it
        with monkeypatch.context() as full:
            full.setattr(powerlaw, "EARLY_EVALUATIONS", powerlaw.MAX_EVALUATIONS)
            _, long = powerlaw.fit(points, start=start)
        assert short == pytest.approx(long, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("budget", [200, 600])
@pytest.mark.parametrize("zero_floor", [False, True])
def test_the_refits_at_once_end_where_each_refit_alone_ends(budget, zero_floor, monkeypatch):
    """The bootstrap's refits, polished from the fit to the means all at once, reach each draw's own fit to
    1e-12 (the committed ladder: its 200-step floor at the bound E = 0, its 600-step floor inside), and no draw
    is left to the one-draw fit."""
    points, _ = scaling.ladder_points(committed_ladder())
    points = points[scaling.budgets(points) == budget]
    _, params = powerlaw.fit(points, zero_floor=zero_floor)
    rng, losses = np.random.default_rng(0), [s.to_numpy() for s in points["losses"]]
    means = np.array([draws.resampled_means(losses, rng) for _ in range(12)])
    alone = [powerlaw.fit(points.assign(loss=row), params, zero_floor=zero_floor)[1] for row in means]
    monkeypatch.setattr(batch, "fit", None)  # a row left to the one-draw fit fails here
    together = batch.refits(points, means, params, zero_floor=zero_floor)
    assert len(together) == len(means)
    for (curves, got), want in zip(together, alone):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert list(curves) == list(dict.fromkeys(points["variant"]))
    assert (params[0] == 0.0) == (budget == 200) or zero_floor
    if not zero_floor:
        assert 0 < sum(got[0] == 0 for _, got in together) < len(means)  # a floor at its bound, and one freed


def test_a_refit_that_does_not_settle_at_once_is_fitted_alone(monkeypatch):
    """A draw whose steps from the start do not settle (here: no steps at all) gets the one-draw fit, and a draw
    no power law fits (a loss at 0) is None."""
    points = flat_points()
    means = np.array([points["loss"].to_numpy(), np.r_[0.0, points["loss"].to_numpy()[1:]]])
    monkeypatch.setattr(batch, "ROW_STEPS", 0)
    got = batch.refits(points, means, FLAT_START)
    assert got[1] is None
    assert got[0][1] == pytest.approx(powerlaw.fit(points, start=FLAT_START)[1], rel=1e-12, abs=1e-12)


def test_the_written_out_solve_rounds_as_numpy_does():
    """The polish's Cholesky solve sums in np.sum's order (so the committed fits keep their bytes) and solves."""
    rng = np.random.default_rng(0)
    for n in (*range(20), 130):
        terms = rng.standard_normal(n).astype(np.longdouble) * np.longdouble("1.000000000000000001")
        assert powerlaw._sum(terms.tolist(), np.longdouble(0)) == np.sum(terms), n
    for n in (1, 5, 12):
        m = rng.standard_normal((n + 3, n)).astype(np.longdouble)
        a, b = m.T @ m, rng.standard_normal(n).astype(np.longdouble)
        solved = powerlaw._cholesky_solve(a, b)
        assert solved.dtype == np.longdouble and np.allclose(a @ solved, b, rtol=0, atol=1e-14)
        a[0, 0] = -1.0  # not positive definite
        assert powerlaw._cholesky_solve(a, b) is None


def test_a_refit_from_a_floor_at_its_bound_is_the_refit_from_inside():
    """The committed ladder's 200-step floor is at its bound E = 0: bootstrap refits from there hold E at 0 first and
    free it where the gradient says so; a refit from E = 0.05 (the trust region alone) reaches the same optimum."""
    points, _ = scaling.ladder_points(committed_ladder())
    points = points[scaling.budgets(points) == 200]
    _, params = powerlaw.fit(points)
    assert params[0] == 0.0
    rng, losses, freed = np.random.default_rng(0), [s.to_numpy() for s in points["losses"]], 0
    for _ in range(12):
        draw = points.assign(loss=draws.resampled_means(losses, rng))
        held, p_held = powerlaw.fit(draw, start=params)
        inside, p_inside = powerlaw.fit(draw, start=np.r_[0.05, params[1:]])
        assert p_held == pytest.approx(p_inside, rel=1e-12, abs=1e-12)
        freed += p_held[0] > 0
    assert 0 < freed < 12  # both cases met: E kept at 0, and E freed


def test_planted_crossover_is_found_and_parallel_curves_have_none(tmp_path):
    # GEGLU starts worse and falls faster: the curves cross at C = 4e12, inside the ladder's 4e11 .. 1e13
    base, steeper = curve(0.3, 4.3), Curve(E, 0.0, 0.4)
    cross = math.exp((steeper.log_A - base.log_A) / (0.4 - 0.3))
    steeper = Curve(E, steeper.log_A + 0.1 * math.log(4e12 / cross), 0.4)  # moved to cross at 4e12
    assert float(steeper.loss(4e12)) == pytest.approx(float(base.loss(4e12)))
    write_ladder(tmp_path, {"relu": base, "geglu": steeper, "swiglu": curve(0.3, 4.2)})
    curves = by_variant(fitted(tmp_path))
    geglu = curves["layer-pre-geglu-matched"]
    assert geglu["crossover_where"] == "within" and geglu["crossover"] == pytest.approx(4e12, rel=0.5)
    assert curves["layer-pre-swiglu-matched"]["crossover_where"] in ("none", "beyond")  # parallel up to the noise
    assert geglu["trend"] == "crosses 1 upward" and geglu["trend_low"] > 1  # behind at ladder64, ahead at ladder160
    assert powerlaw.crossover(base, curve(0.3, 4.2), 4e11, 1e13) == (pytest.approx(math.nan, nan_ok=True), "none")
    assert powerlaw.crossover(base, Curve(E, steeper.log_A, 0.4), 4e11, 1e12)[1] == "beyond"
    assert powerlaw.crossover(base, Curve(E, steeper.log_A - 5, 0.4), 4e11, 1e13)[1] == "none"  # crossed before


def test_held_out_largest_size_is_predicted_and_ranked(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.33, 4.2), "geglu": curve(0.3, 4.25)})
    ladder = fitted(tmp_path)
    assert ladder.held_out_size == "ladder160"
    out = ladder.points[ladder.points["held_out"]]
    assert len(out) == 6 and set(out["size"]) == {"ladder160"}
    assert (out["prediction_error"].abs() < 0.03).all()  # 0.004-nats noise, extrapolated 2x in compute
    assert scaling.ranking(ladder) == (["layer-pre-swiglu-matched", "layer-pre-geglu-matched",
                                        "layer-pre-relu-matched"],) * 2
    md = render.to_markdown(ladder)
    assert "Ranking at ladder160, 600 steps, predicted right" in md


def test_too_few_sizes_say_so_in_one_line(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.3, 4.2)},
                 sizes={"ladder64": 1e6, "ladder96": 2e6}, steps=(600,))
    ladder = fitted(tmp_path)
    assert ladder.curves is None
    md = render.to_markdown(ladder)
    assert md.count("\n") == 1 and "too few points to fit" in md and "layer-pre-relu-matched has 2" in md
    assert [p.name for p in outputs.write_ladder(tmp_path, table.build_tables(tmp_path)["synth"])] == ["synth_fit.md"]


def test_a_variant_with_too_few_sizes_is_left_out_in_one_line(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3)})
    write_ladder(tmp_path, {"swiglu": curve(0.3, 4.2)}, sizes={"ladder64": 1e6, "ladder96": 2e6})  # a partial sweep
    ladder = fitted(tmp_path)
    assert list(ladder.curves["variant"]) == ["layer-pre-relu-matched"] * 2
    assert ladder.skipped == [f"{b} steps: too few points to fit L(C) = E + A·C^-α: layer-pre-swiglu-matched has 2 "
                              "(3 sizes per curve needed)" for b in (200, 600)]
    assert ladder.points.loc[ladder.points["variant"] == "layer-pre-swiglu-matched", "fitted"].isna().all()
    assert "Left out: 600 steps: too few points" in render.to_markdown(ladder)


def test_sizes_with_budgets_of_their_own_make_one_curve_per_variant(tmp_path):
    own = {"ladder64": (300,), "ladder96": (500,), "ladder128": (700,), "ladder160": (900,)}  # tokens grow with size
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)}, steps=own)
    ladder = fitted(tmp_path, resamples=20)
    assert list(ladder.curves["budget"]) == ["all", "all"] and list(ladder.curves["points"]) == [4, 4]
    assert by_variant(ladder, "all")["layer-pre-swiglu-matched"]["alpha"] == pytest.approx(0.36, abs=0.04)
    assert "one curve per variant over every point (4 sizes, own budgets)" in render.to_markdown(ladder)


def test_each_rung_at_its_own_lr_is_still_one_variant_per_ffn(tmp_path):
    """A declared ladder study runs every (size, FFN) at the LR its scan chose: the LR differs from rung to rung
    and between FFNs, yet each FFN is one variant and each rung is compared with ReLU at its own size."""
    lrs = {"relu": [1e-2, 1e-2, 3e-3, 3e-3], "swiglu": [3e-3, 3e-3, 3e-3, 1e-3]}
    write_ladder(tmp_path, {"relu": curve(0.30, 4.3), "swiglu": curve(0.36, 4.2)},
                 lr=lambda ffn, size: lrs[ffn][list(SIZES).index(size)])
    tables = table.build_tables(tmp_path)
    built = tables["synth"]
    assert built.baselines["layer-pre-swiglu-matched-ladder160"] == "layer-pre-relu-matched-ladder160"
    ladder = scaling.analyse(built, panel=False)
    assert ladder.baseline == "layer-pre-relu-matched"
    assert sorted(set(ladder.points["variant"])) == ["layer-pre-relu-matched", "layer-pre-swiglu-matched"]
    assert list(ladder.points.groupby("variant")["size"].nunique()) == [4, 4]


def test_a_budget_sweep_of_one_size_is_no_ladder(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3)}, sizes={"ladder64": 1e6}, steps=(200, 600, 1000))
    assert fitted(tmp_path) is None
    assert outputs.write_ladder(tmp_path, table.build_tables(tmp_path)["synth"]) == []


def test_trend_reads_the_ratio_and_both_ends():
    behind, ahead, level = (0.8, 0.7, 0.9), (1.3, 1.1, 1.5), (1.0, 0.9, 1.1)
    assert scaling.trend(behind, ahead, (1.6, 1.3, 2.0)) == "crosses 1 upward"
    assert scaling.trend(ahead, behind, (0.6, 0.5, 0.8)) == "crosses 1 downward"
    assert scaling.trend(level, ahead, (1.3, 1.1, 1.6)) == "rises"  # the start's interval holds 1: no crossing
    assert scaling.trend(ahead, level, (0.8, 0.7, 0.95)) == "falls"
    assert scaling.trend(level, level, (1.0, 0.8, 1.2)) == "not resolved"


def test_curve_inverse_and_the_floor():
    law = curve(0.3, 4.3)
    assert law.compute(float(law.loss(3e12))) == pytest.approx(3e12)
    assert law.compute(E) == math.inf and powerlaw.multiplier(law, Curve(E - 0.5, law.log_A, 0.3), 1e15) == math.inf


# --- a real tiny ladder ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_tiny_ladder_end_to_end(tmp_path, cache):
    """2 FFNs x 3 widths x 2 seeds of real training, then make table: fit table, CSV and figure."""
    proc = mbexp_train(["-m", *overrides(tmp_path, cache), "name=tiny_ladder", "ffn=relu,swiglu",
                        "model.d_model=16,32,48", "model.n_layers=1", "model.n_heads=2", "train.steps=20",
                        "seed=0,1"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = tmp_path / "results"
    assert len(summaries(results)) == 12
    done = make_table_here(results, "--no-wandb", "--resamples", "20")
    assert done.returncode == 0, done.stderr
    md = (results / "tables" / "tiny_ladder_fit.md").read_text()
    assert "95% bootstrap interval over seeds, 20 refits" in md
    assert md in done.stdout
    assert "| layer-pre-relu-matched | 20 | " in md and "| d_model=48 |" in md
    assert "Held-out check: too few points without d_model=48 to refit" in md  # 3 sizes: 2 left, 3 needed
    fit = pd.read_csv(results / "tables" / "tiny_ladder_fit.csv")
    assert len(fit) == 6 and set(fit["size"]) == {"d_model=16", "d_model=32", "d_model=48"}
    assert ((fit["alpha"] > 0) & (fit["alpha"] <= 2)).all() and (fit["E"] < fit["loss"].min()).all()
    assert (fit["fitted"].between(fit["loss"].min() - 1, fit["loss"].max() + 1)).all()
    swiglu = fit[fit["variant"] == "layer-pre-swiglu-matched"]
    assert (swiglu["multiplier"] > 0).all() and (swiglu["multiplier_low"] <= swiglu["multiplier_high"]).all()
    assert fit["held_out"].sum() == 2 and fit["prediction_error"].isna().all()
    png = results / "figures" / "tiny_ladder_ladder.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
