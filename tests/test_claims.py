"""Claims as data on hand-made runs: family Holm, seeds beyond the plan, epochs, orderings, equivalence, power."""

import csv
import io
import math
import re
import statistics

import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats
from test_table import BASE, ROOT, write_run
from tiny import make_table_here, script

from mbexp.analysis import report, stats, table
from mbexp.claims import ClaimsError, family
from mbexp.claims.claim import Claim
from mbexp.claims.evaluate import evaluate
from mbexp.claims.file import parse_yaml
from mbexp.claims.parse import load_claims, load_claims_text, parse_claim
from mbexp.claims.result import Result
from mbexp.claims.statistics import STATISTICS
from mbexp.io import read_yaml

A, B, C = "layer-pre-geglu-matched", "layer-pre-swiglu-matched", "layer-pre-reglu-matched"
BIG = {"train_tokens": 10**7, "epochs": 0.06}  # within one epoch
BASE_LOSS = [5.00, 5.30, 4.90, 5.10]
ROWS = {A: [4.80, 5.12, 4.74, 4.88], B: [4.95, 5.22, 4.86, 5.02], C: [5.10, 5.38, 5.02, 5.17]}


def sweep(results, seeds=range(3), rows=ROWS, **fields):
    for seed in seeds:
        write_run(results, BASE, seed=seed, final=BASE_LOSS[seed], test=BASE_LOSS[seed], **(BIG | fields))
        for row, values in rows.items():
            write_run(results, row, seed=seed, final=values[seed], test=values[seed], **(BIG | fields))


def claim(**entry) -> Claim:
    base = {"id": "c", "claim": "gated beats relu", "paper": "Shazeer 2020", "experiment": "quick",
            "hypothesis": "better", "baseline": BASE, "rows": [A, B], "seeds": [0, 1, 2]}
    return parse_claim({k: v for k, v in (base | entry).items() if v is not None}, 0.02, "test")


def result(results, **entry) -> Result:
    return evaluate([claim(**entry)], table.build_tables(results))[0]


def test_a_two_row_family_gets_holm_over_its_own_two_comparisons(tmp_path):
    sweep(tmp_path)  # the table has three comparisons (A, B, C); the claim's family is {A, B}
    raw = [scipy_stats.ttest_rel(ROWS[row][:3], BASE_LOSS[:3]).pvalue for row in (A, B)]
    low, high = sorted(raw)
    by_hand = {low: 2 * low, high: max(2 * low, high)}  # Holm for m = 2: 2·p(1), then max(that, 1·p(2))
    got = result(tmp_path).comparisons
    assert [c.p_holm for c in got] == pytest.approx([by_hand[p] for p in raw])
    in_table = table.build_tables(tmp_path)["quick"].rows.set_index("label")["p_holm"]
    assert in_table[A] != pytest.approx(got[0].p_holm)  # the table's family of three is not the claim's


def test_family_holm_matches_statsmodels(tmp_path):
    """statsmodels 0.15's multipletests(raw, method="holm") on this family's raw p's (0.0040900, 0.0421585) gives
    (0.0081800, 0.0421585), written down here as it printed them."""
    sweep(tmp_path)
    got = result(tmp_path).comparisons
    assert [c.interval.p for c in got] == pytest.approx([0.0040900, 0.0421585], abs=1e-7)
    assert [c.p_holm for c in got] == pytest.approx([0.0081800, 0.0421585], abs=1e-7)


def test_a_planted_extra_seed_is_reported_as_added_after_the_plan(tmp_path):
    sweep(tmp_path, seeds=range(4))
    r = result(tmp_path)
    assert "seeds 3 added after the plan (planned 0–2): shown apart, the verdict reads the planned seeds" in \
        r.qualifiers
    assert r.present[A] == [0, 1, 2, 3] and [c.n for c in r.comparisons] == [3, 3]  # the verdict's: planned seeds
    assert [c.n for c in r.added] == [4, 4]  # every seed, shown apart
    csv = pd.read_csv(pd.io.common.StringIO(report.claims_csv([r])))
    assert csv["seeds_planned"].tolist() == ["0 1 2"] * 2 and csv["seeds_present"].tolist() == ["0 1 2 3"] * 2
    assert csv["seed_deltas"][0] == "0:-0.2000 1:-0.1800 2:-0.1600" and csv["n_all_seeds"].tolist() == [4, 4]


def test_missing_planned_runs_are_named(tmp_path):
    sweep(tmp_path, seeds=range(2))
    r = result(tmp_path)
    assert r.unmet == ["planned runs missing: geglu seed 2; relu seed 2; swiglu seed 2"]
    assert r.verdict == "not tested as declared" and r.standing == "exploratory"


def test_a_claim_past_one_epoch_says_so(tmp_path):
    sweep(tmp_path, train_tokens=250_000, epochs=2.4576)
    past = result(tmp_path)
    assert "past 1 epoch (2.46 epochs)" in past.unmet and "> 1 epoch" in past.tags
    assert past.verdict == "not tested as declared"
    within = tmp_path / "within"
    sweep(within)
    sweep(within, seeds=[3], train_tokens=250_000, epochs=2.4576)  # a seed beyond the plan is not read for it
    assert not any("epoch" in q for q in result(within).qualifiers)


def test_an_ordering_agrees_on_ordered_data_and_disagrees_when_swapped(tmp_path):
    sweep(tmp_path, seeds=range(4))  # A < B < C in every seed, by 0.10-0.15 (A-B) and 0.15-0.16 (B-C)
    ordered = result(tmp_path, hypothesis="ordering", rows=[A, B, C], seeds=[0, 1, 2, 3])
    assert [c.mark for c in ordered.comparisons] == ["better", "better"] and ordered.verdict == "agrees"
    assert [(c.row, c.baseline) for c in ordered.comparisons] == [(A, B), (B, C)]
    swapped = result(tmp_path, hypothesis="ordering", rows=[B, A, C], seeds=[0, 1, 2, 3])
    assert swapped.comparisons[0].outcome == "contradicts" and swapped.verdict == "disagrees"


def test_verdict_rules_for_better_and_equivalence(tmp_path):
    sweep(tmp_path, seeds=range(4))
    assert result(tmp_path, rows=[A, B], seeds=[0, 1, 2, 3]).verdict == "agrees"
    assert result(tmp_path, rows=[A, C], seeds=[0, 1, 2, 3]).verdict == "disagrees"  # C resolved worse
    assert result(tmp_path, rows=[A], hypothesis="worse", seeds=[0, 1, 2, 3]).verdict == "disagrees"
    far = result(tmp_path, rows=[A], hypothesis="equivalent", seeds=[0, 1, 2, 3])
    assert far.comparisons[0].beyond_holm < 0.05 and far.verdict == "disagrees"  # resolved beyond ±0.02
    loose = result(tmp_path, rows=[C], hypothesis="equivalent", margin=0.5, seeds=[0, 1, 2, 3])
    assert loose.comparisons[0].mark == "equivalent" and loose.verdict == "agrees"


def test_one_seed_is_not_tested_and_unknown_rows_or_experiments_are_said(tmp_path):
    sweep(tmp_path, seeds=[0])
    one = result(tmp_path, seeds=[0])
    assert one.verdict == "not tested" and [c.mark for c in one.comparisons] == ["not tested"] * 2
    assert result(tmp_path, rows=["layer-pre-glu-matched"]).qualifiers == ["rows not in quick: layer-pre-glu-matched"]
    nope = result(tmp_path, experiment="nope")
    assert (nope.verdict, nope.comparisons, nope.qualifiers) == ("not tested", [], ["no finished runs of nope"])
    no_warmups = result(tmp_path, statistic="sensitivity", rows=[A], baseline=None)
    assert no_warmups.verdict == "not tested" and no_warmups.qualifiers == ["quick has no column of warm-up settings"]
    assert result(tmp_path, at={"train.steps": 300}).qualifiers == ["quick has no column train.steps=300"]


def test_sensitivity_claim_reads_each_rows_warmup_sensitivity(tmp_path):
    for seed in range(3):
        for warmup, loss in ((0, 6.7), (25, 6.6), (100, 6.3)):
            write_run(tmp_path, "layer-post-relu-matched", seed=seed, warmup=warmup, final=loss + 0.01 * seed,
                      test=loss + 0.02 * seed, **BIG)
            write_run(tmp_path, BASE, seed=seed, warmup=warmup, final=5.9 - 0.001 * seed, test=5.9, **BIG)
    for warmup in (0, 25, 100):  # another row's extra seed is not one of this claim's rows' seeds
        write_run(tmp_path, BASE, seed=3, warmup=warmup, final=5.9, test=5.9, **BIG)
    post = result(tmp_path, rows=["layer-post-relu-matched"], statistic="sensitivity", hypothesis="worse",
                  baseline=None)
    assert post.comparisons[0].interval.delta == pytest.approx(0.4) and post.verdict == "agrees"
    assert post.present == {"layer-post-relu-matched": [0, 1, 2]} and post.added == []
    row = table.build_tables(tmp_path)["quick"].rows.set_index("label").loc["layer-post-relu-matched"]
    assert row["sensitivity"] == pytest.approx(post.comparisons[0].interval.delta)


def test_seeds_needed_matches_a_hand_power_calculation():
    # d = Δ/SD = 1: the normal approximation n ≈ (z_.975 + z_.80)² / d² + z_.975² / 2 = 7.85 + 1.92 = 9.77 -> 10
    z, zb = scipy_stats.norm.ppf(0.975), scipy_stats.norm.ppf(0.8)
    assert math.ceil((z + zb) ** 2 + z**2 / 2) == 10
    assert stats.seeds_needed(0.05, 0.05) == 10
    # statsmodels 0.15 TTestPower: power(effect_size=1, nobs=10) = 0.8030969; solve_power(power=0.8) = 9.94 -> 10
    assert stats.power(10, 0.05, 0.05) == pytest.approx(0.8030969, abs=1e-6)
    assert stats.power(9, 0.05, 0.05) < 0.8
    assert stats.seeds_needed(0.0, 0.1) == math.inf and math.isnan(stats.seeds_needed(0.1, math.nan))


def test_slow_start_rule():
    early = pd.Series([5.315, 5.256, 5.297, 5.526, 5.289], index=range(5))  # ffn_budgets_cpu SwiGLU, step 250
    assert stats.slow_starts(early) == [3]
    assert stats.slow_starts(early.drop([0, 1])) == []  # two other seeds: no median worth the name, no flag
    assert stats.slow_starts(pd.Series([5.0, 5.0, 5.0, 4.0])) == []  # one-sided: a fast start is not flagged
    # the threshold: others 5.00..5.04 (median 5.02, MAD 0.01, robust SD 0.014826); 6 SDs above flags, 4 does not
    others, sd = [5.00, 5.01, 5.02, 5.03, 5.04], 1.4826 * 0.01
    assert stats.slow_starts(pd.Series([*others, 5.02 + 6 * sd])) == [5]
    assert stats.slow_starts(pd.Series([*others, 5.02 + 4 * sd])) == []


def test_claims_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  - {id: x, claim: y, paper: z, experiment: quick, hypothesis: best, seeds: [0]}\n")
    with pytest.raises(ClaimsError, match="hypothesis must be one of"):
        load_claims(bad)
    sweep(tmp_path)
    done = make_table_here(tmp_path, "--no-wandb")
    assert done.returncode == 2 and not (tmp_path / "tables").exists()
    assert done.stderr.splitlines() == [f"error: claims file {bad}, claim 0 (x): hypothesis must be one of better, "
                                        "worse, equivalent, ordering and statistic one of delta, sensitivity, "
                                        "sensitivity_diff, trend, transfer, got 'best' and 'delta'"]


def test_make_table_writes_the_claims_table(tmp_path):
    sweep(tmp_path)
    (tmp_path / "claims.yaml").write_text(
        "claims:\n  - {id: glu, claim: GLU beats ReLU, paper: Shazeer 2020, experiment: quick, hypothesis: better,\n"
        f"     baseline: {BASE}, rows: [{A}, {B}], seeds: [0, 1, 2]}}\n")
    done = make_table_here(tmp_path, "--no-wandb")
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "tables" / "claims.md").read_text()
    assert "| GLU beats ReLU (`glu`) | Shazeer 2020 | quick |" in md and "**agrees**" in md
    csv = pd.read_csv(tmp_path / "tables" / "claims.csv")
    assert csv["row"].tolist() == [A, B] and csv["verdict"].tolist() == ["agrees"] * 2
    assert csv["delta"].tolist() == pytest.approx([statistics.mean(ROWS[r][:3]) - 5.0666667 for r in (A, B)], abs=1e-6)


def test_splice_replaces_only_between_markers():
    text = f"a\n{report.CLAIMS_BEGIN}\nold\n{report.CLAIMS_END}\nb\n"
    assert report.splice(text, report.CLAIMS_BEGIN, report.CLAIMS_END, "new") == \
        f"a\n{report.CLAIMS_BEGIN}\nnew\n{report.CLAIMS_END}\nb\n"
    with pytest.raises(ValueError, match="markers"):
        report.splice("no markers", report.CLAIMS_BEGIN, report.CLAIMS_END, "x")


def _hand_written(text: str, begin: str, end: str) -> str:
    """`text` without its generated block and without code spans (commands may hold numbers)."""
    start, stop = text.index(begin), text.index(end)
    return re.sub(r"`[^`]*`", "", text[:start] + text[stop:])


def test_no_hand_written_verdict_or_number_in_the_results_texts():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = readme[readme.index("\n## Results\n"):]
    results = results[:results.find("\n## ", 5)] if "\n## " in results[5:] else results
    assert "[docs/results.md](docs/results.md)" in results
    prose = _hand_written(results, report.CLAIMS_BEGIN, report.CLAIMS_END)
    page = _hand_written((ROOT / "docs" / "results.md").read_text(encoding="utf-8"), report.RESULTS_BEGIN,
                         report.RESULTS_END)
    for text in (prose, page):
        assert not re.search(r"\b(agrees|disagrees|not resolved|not tested)\b", text)
    assert not re.search(r"\d", prose)


def _deltas(results, row, deltas, base=5.0, **fields):
    """Runs of `row` whose per-seed Δ against a flat baseline are `deltas` (seed i gets deltas[i])."""
    for seed, d in enumerate(deltas):
        write_run(results, BASE, seed=seed, final=base + 0.01 * seed, test=base + 0.01 * seed, **(BIG | fields))
        write_run(results, row, seed=seed, final=base + 0.01 * seed + d, test=base + 0.01 * seed + d,
                  **(BIG | fields))


def test_the_verdict_reads_the_planned_seeds_and_added_seeds_neither_upgrade_nor_downgrade(tmp_path):
    # A: unresolved on seeds 0-2, resolved better once seeds 3-6 are added; B: the reverse
    _deltas(tmp_path / "up", A, [-0.01, -0.30, -0.05, -0.12, -0.13, -0.11, -0.12])
    _deltas(tmp_path / "down", A, [-0.20, -0.21, -0.19, 0.30, 0.40, -0.10, 0.20])
    up, down = (result(tmp_path / d, rows=[A]) for d in ("up", "down"))
    p_planned = scipy_stats.ttest_rel([-0.01, -0.30, -0.05], [0, 0, 0]).pvalue  # one comparison: Holm = raw
    assert up.comparisons[0].p_holm == pytest.approx(p_planned) and p_planned > 0.05
    assert up.added[0].p_holm < 0.05 and up.added[0].mark == "better" and up.added[0].n == 7
    assert up.verdict == "not resolved"  # seeds 3-6 do not upgrade it
    assert down.comparisons[0].mark == "better" and down.added[0].mark == "not resolved"
    assert down.verdict == "agrees"  # nor downgrade it
    csv = pd.read_csv(pd.io.common.StringIO(report.claims_csv([up])))
    assert csv["verdict"].tolist() == ["not resolved"] and csv["mark_all_seeds"].tolist() == ["better"]
    assert csv["n"].tolist() == [3] and csv["n_all_seeds"].tolist() == [7]


def test_unmet_conditions_read_not_tested_as_declared(tmp_path):
    sweep(tmp_path)  # one learning rate per row: own_lr cannot be met
    own = result(tmp_path, conditions={"own_lr": True})
    assert own.verdict == "not tested as declared" and own.standing == "exploratory"
    assert own.unmet == ["not at their own tuned LR: 3 of 3 rows (one lr: 0.003)"]
    assert result(tmp_path).verdict == "agrees"  # the same runs, no such condition declared
    for lr in (1e-3, 1e-2):  # a second LR for every row: each row now has its own tuned LR
        sweep(tmp_path, lr=lr)
    assert result(tmp_path, conditions={"own_lr": True}).unmet == []
    for lr in (1e-3, 3e-3):  # a tuned table where B tried one LR only: B alone is not at its own
        sweep(tmp_path / "one", lr=lr, rows={A: ROWS[A]} if lr == 1e-3 else ROWS)
    one = result(tmp_path / "one", conditions={"own_lr": True})
    assert one.unmet == ["not at their own tuned LR: 1 of 3 rows (one lr: 0.001, 0.003)"]  # the LRs chosen
    assert one.tags == ["LR not tuned per row"]
    sweep(tmp_path / "none", seeds=[3])  # no planned run finished: no LR to name
    assert result(tmp_path / "none", conditions={"own_lr": True}).unmet[-1] == "not at their own tuned LR: 3 of 3 rows"
    for name, seed in (("unplanned", 3), ("planned", 2)):  # B's run at that seed diverged
        sweep(tmp_path / name, rows={A: ROWS[A], B: ROWS[B][:seed] + [0.0] * (3 - seed)}, seeds=range(seed))
        sweep(tmp_path / name, rows={A: ROWS[A]}, seeds=range(seed, 3))
        write_run(tmp_path / name, B, seed=seed, final=None, status="diverged", **BIG)
    assert result(tmp_path / "unplanned").unmet == []
    diverged = tmp_path / "planned"
    assert result(diverged).unmet == ["planned runs missing: swiglu seed 2", "1 diverged planned run"]
    assert result(diverged).tags == ["runs missing", "diverged runs"]
    sweep(tmp_path / "two", rows={A: ROWS[A], B: ROWS[B][:1]}, seeds=[0])
    sweep(tmp_path / "two", rows={A: ROWS[A]}, seeds=[1, 2])
    for seed in (1, 2):
        write_run(tmp_path / "two", B, seed=seed, final=None, status="diverged", **BIG)
    assert result(tmp_path / "two").unmet == ["planned runs missing: swiglu seed 1, 2", "2 diverged planned runs"]
    assert result(diverged).verdict == "not tested as declared"


POST, PRE = "layer-post-relu-matched", "layer-pre-relu-matched"


def _warmup_runs(results, post, pre, best=100, warmups=(0, 25, 100), seeds=None):
    """Per seed, loss at warm-up 0 minus at `best` is post[seed] / pre[seed]; the other warm-up is worse."""
    for seed in seeds or range(len(post)):
        for row, sens in ((POST, post), (PRE, pre)):
            low = 5.0 + 0.01 * seed
            for warmup in warmups:
                loss = low if warmup == best else low + sens[seed] if warmup == 0 else low + sens[seed] / 2
                write_run(results, row, seed=seed, warmup=warmup, final=loss, test=loss, **BIG)


def test_needs_warmup_more_is_the_difference_of_sensitivities_with_edge_flags(tmp_path):
    post, pre = [0.40, 0.35, 0.45], [0.03, 0.02, 0.04]
    _warmup_runs(tmp_path / "edge", post, pre)
    r = result(tmp_path / "edge", statistic="sensitivity_diff", hypothesis="worse", rows=None, baseline=None,
               pairs=[[POST, PRE]])
    c = r.comparisons[0]
    diff = [a - b for a, b in zip(post, pre)]  # 0.37, 0.33, 0.41: mean 0.37, sd 0.04
    ci = scipy_stats.ttest_1samp(diff, 0).confidence_interval(0.95)
    assert c.interval.delta == pytest.approx(0.37) and (c.interval.low, c.interval.high) == pytest.approx(ci)
    assert c.interval.low == pytest.approx(0.37 - scipy_stats.t.ppf(0.975, 2) * 0.04 / math.sqrt(3))
    assert r.verdict == "agrees" and "best warm-up at grid edge" in r.tags
    assert "best warm-up the largest tried for post, pre: each sensitivity is a lower bound, so their difference " \
           "is bounded neither way" in r.qualifiers
    _warmup_runs(tmp_path / "inside", post, pre, best=25)  # best inside the grid: no flag
    inside = result(tmp_path / "inside", statistic="sensitivity_diff", hypothesis="worse", rows=None,
                    baseline=None, pairs=[[POST, PRE]])
    assert "best warm-up at grid edge" not in inside.tags
    _warmup_runs(tmp_path / "added", [*post, 2.0], [*pre, 0.0])  # a seed beyond the plan: shown apart, not read
    added = result(tmp_path / "added", statistic="sensitivity_diff", hypothesis="worse", rows=None, baseline=None,
                   pairs=[[POST, PRE]]).comparisons[0]
    assert added.n == 3 and added.interval.delta == pytest.approx(0.37)



def test_the_warmup_edge_flag_needs_two_settings_and_reads_only_the_planned_seeds(tmp_path):
    """Two warm-ups with the larger best: an edge. One warm-up: nothing to be at the edge of. Best inside the grid
    on the planned seeds, but at its end once an unplanned seed joins: no edge, as that seed is not read."""
    sens = [0.40, 0.35, 0.45]
    _warmup_runs(tmp_path / "two", sens, sens, warmups=(0, 100))
    assert family._edge(table.build_tables(tmp_path / "two")["quick"], PRE, [0, 1, 2])
    _warmup_runs(tmp_path / "one", sens, sens, warmups=(100,))
    assert not family._edge(table.build_tables(tmp_path / "one")["quick"], PRE, [0, 1, 2])
    _warmup_runs(tmp_path / "added", sens, sens, best=25)
    _warmup_runs(tmp_path / "added", [0, 0, 0, 3.0], [0, 0, 0, 3.0], seeds=[3])  # at 0 and 25: 3.0, 1.5 worse
    added = table.build_tables(tmp_path / "added")["quick"]
    assert not family._edge(added, PRE, [0, 1, 2]) and family._edge(added, PRE, [0, 1, 2, 3])

def test_needs_warmup_requires_the_sensitivity_beyond_its_margin_two_sided(tmp_path):
    _warmup_runs(tmp_path, [0.40, 0.35, 0.45], [0.03, 0.02, 0.04])
    pre = result(tmp_path, statistic="sensitivity", hypothesis="worse", rows=[PRE], baseline=None).comparisons[0]
    # sensitivities 0.03, 0.02, 0.04: mean 0.03, se 0.01/√3; resolved above 0 (p 0.035), not beyond 0.02
    se = 0.01 / math.sqrt(3)
    assert pre.interval.p == pytest.approx(2 * scipy_stats.t.sf(0.03 / se, 2)) and pre.mark == "worse"
    assert pre.beyond_holm == pytest.approx(2 * scipy_stats.t.sf((0.03 - 0.02) / se, 2))  # 0.225: doubled
    assert pre.outcome == "open"  # a resolved but small sensitivity does not say "needs warm-up"
    post = result(tmp_path, statistic="sensitivity", hypothesis="worse", rows=[POST], baseline=None)
    assert post.comparisons[0].outcome == "supports" and post.verdict == "agrees"
    _warmup_runs(tmp_path / "added", [0.40, 0.35, 0.45, 2.0], [0.03, 0.02, 0.04, 0.0])  # seed 3: beyond the plan
    added = result(tmp_path / "added", statistic="sensitivity", hypothesis="worse", rows=[PRE], baseline=None)
    assert added.comparisons[0].n == 3 and added.comparisons[0].interval.delta == pytest.approx(0.03)
    assert added.added[0].n == 4 and added.added[0].interval.delta == pytest.approx(0.0225)  # shown apart: all seeds
    assert added.tags[0] == "seeds added"


def test_beyond_margin_is_below_alpha_exactly_when_the_95_interval_clears_the_margin():
    for deltas in ([0.05, 0.06, 0.07], [0.03, 0.02, 0.04], [-0.05, -0.09, -0.07], [0.021, 0.025, 0.03]):
        iv = stats.compare(pd.Series(deltas), pd.Series([0.0] * 3))
        clears = iv.low > 0.02 or iv.high < -0.02
        assert (stats.beyond_margin(iv, 0.02) < 0.05) == clears, deltas


def worked_example():
    """scripts/worked_example.py, the docs' fixture: a script beside make_report.py, outside the package."""
    return script("worked_example")


def test_the_worked_example_in_docs_is_its_fixture_computed_and_checked_by_hand():
    example = worked_example()

    found = {r.claim.id: r for r in example.results()}
    planned, every = found["geglu-planned"].comparisons[0], found["geglu-planned"].added[0]
    test = scipy_stats.ttest_1samp(example.GEGLU[:3], 0)
    assert planned.interval.delta == pytest.approx(-0.11) and planned.p_holm == pytest.approx(test.pvalue)
    assert (planned.interval.low, planned.interval.high) == pytest.approx(tuple(test.confidence_interval(0.95)))
    assert every.p_holm == pytest.approx(scipy_stats.ttest_1samp(example.GEGLU, 0).pvalue) and every.p_holm < 0.05
    assert [(i, found[i].verdict, found[i].standing) for i in found] == [
        ("geglu-planned", "not resolved", "confirmatory"), ("geglu-edited", "not resolved", "exploratory"),
        ("post-needs-warmup-more", "agrees", "confirmatory"), ("pre-needs-warmup", "not resolved", "confirmatory"),
        ("swiglu-one-lr", "not tested as declared", "exploratory")]
    diff = found["post-needs-warmup-more"].comparisons[0].interval
    sens = [a - b for a, b in zip(*example.SENSITIVITY.values())]
    assert diff.delta == pytest.approx(0.37) and diff.low == pytest.approx(
        scipy_stats.ttest_1samp(sens, 0).confidence_interval(0.95).low)
    assert found["pre-needs-warmup"].comparisons[0].beyond_holm == pytest.approx(
        2 * scipy_stats.t.sf((0.03 - 0.02) / (0.01 / math.sqrt(3)), 2))
    doc = (ROOT / "docs" / "claims-example.md").read_text(encoding="utf-8")
    assert report.splice(doc, example.EXAMPLE_BEGIN, example.EXAMPLE_END, example.example_block()) == doc
    assert "| geglu | 7 | -0.1114 [-0.1774, -0.0455] | 0.006 | better |" in doc  # the added seeds, apart


def test_a_claim_at_the_smaller_budget_says_the_baselines_steps_to_match(tmp_path):
    # the baseline's loss falls 1 nat per ln 4 of steps; A at 100 steps matches it at 200: 2x its compute
    for seed in range(3):
        for steps, loss in [(100, 5.0), (400, 4.0)]:
            write_run(tmp_path, BASE, seed=seed, steps=steps, final=loss, test=loss + 0.01 * seed, **BIG)
            write_run(tmp_path, A, seed=seed, steps=steps, final=loss, test=loss - 0.5 + 0.01 * seed, **BIG)
    r = result(tmp_path, rows=[A], at={"train.steps": 100})
    ceq = r.comparisons[0].ceq
    assert ceq["ceq"] == pytest.approx(2.0) and ceq["ceq_steps"] == pytest.approx(200.0)
    assert ceq["ceq_extrapolated"] == "" and ceq["ceq_n"] == 3
    at_400 = result(tmp_path, rows=[A], at={"train.steps": 400}).comparisons[0].ceq
    assert at_400["ceq_extrapolated"] == "above" and at_400["ceq_steps"] == pytest.approx(800.0)
    assert "2.00× [2.00, 2.00]; 200 steps |" in "\n".join(report.claim_section(r))
    row = next(csv.DictReader(io.StringIO(report.claims_csv([r]))))
    assert float(row["ceq_steps"]) == pytest.approx(200.0) and row["ceq_extrapolated"] == ""


def test_sides_are_a_comparisons_per_seed_losses_on_the_seeds_asked(tmp_path):
    # what a replication pools: the row's and the baseline's reported losses, by seed, only on the seeds given
    from mbexp.claims.evaluate import sides

    sweep(tmp_path, seeds=range(4))
    longer = {A: [v - 0.5 for v in ROWS[A]]}  # a second budget, the table's reference column: not the one read
    for seed in range(4):
        write_run(tmp_path, BASE, seed=seed, final=BASE_LOSS[seed] - 0.5, test=BASE_LOSS[seed] - 0.5, steps=600, **BIG)
        write_run(tmp_path, A, seed=seed, final=longer[A][seed], test=longer[A][seed], steps=600, **BIG)
    tables = table.build_tables(tmp_path)
    row, base = sides(claim(at={"train.steps": 300}), tables["quick"], (A, BASE), {1, 3})
    assert row.to_dict() == {1: ROWS[A][1], 3: ROWS[A][3]}
    assert base.to_dict() == {1: BASE_LOSS[1], 3: BASE_LOSS[3]}


def test_the_fast_yaml_reader_reads_every_shipped_file_as_safe_load_does():
    """libyaml (read_yaml, parse_yaml's fast path) and PyYAML's own reader: the same values for the claims file and
    every config, 1e-3 still text (YAML 1.1), an alias still refused."""
    files = [ROOT / "results" / "claims.yaml", *sorted((ROOT / "conf").rglob("*.yaml"))]
    assert len(files) > 50
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert read_yaml(text) == yaml.safe_load(text) == parse_yaml(text, "x"), path
    assert read_yaml("lr: 1e-3\nwd: 1.0e-3") == {"lr": "1e-3", "wd": 1.0e-3}
    with pytest.raises(ClaimsError, match="^x: line 2 uses the YAML alias [*]a; aliases are refused"):
        parse_yaml("a: &a [1]\nb: *a\n", "x")


def test_a_claims_text_or_file_with_a_yaml_error_names_itself_the_line_and_the_claim(tmp_path):
    broken = "claims:\n  - {id: a, claim: x}\n  - {id: b\n"
    with pytest.raises(ClaimsError) as err:
        load_claims_text(broken)
    assert str(err.value) == "claims text: not valid YAML on line 4 (claim b): expected ',' or '}', but got " \
                             "'<stream end>'"
    with pytest.raises(ClaimsError) as err:
        load_claims_text("claims: []", "the example")
    assert str(err.value) == "the example: expected a mapping with a non-empty list `claims`"
    (tmp_path / "claims.yaml").write_text(broken)
    with pytest.raises(ClaimsError) as err:
        load_claims(tmp_path / "claims.yaml")
    assert str(err.value) == f"claims file {tmp_path / 'claims.yaml'}: not valid YAML on line 4 (claim b): " \
                             "expected ',' or '}', but got '<stream end>'"


def test_a_claim_at_a_column_other_than_the_reference_is_tested_there(tmp_path):
    # the table's reference column is 600 steps, where A's deficit against the baseline is 0.3 nats smaller
    sweep(tmp_path)
    for seed in range(3):
        write_run(tmp_path, BASE, seed=seed, final=BASE_LOSS[seed] - 0.5, test=BASE_LOSS[seed] - 0.5, steps=600, **BIG)
        write_run(tmp_path, A, seed=seed, final=ROWS[A][seed] - 0.2, test=ROWS[A][seed] - 0.2, steps=600, **BIG)
    at_300 = result(tmp_path, rows=[A], at={"train.steps": 300}).comparisons[0].interval
    at_600 = result(tmp_path, rows=[A], at={"train.steps": 600}).comparisons[0].interval
    by_hand = statistics.mean(ROWS[A][:3]) - statistics.mean(BASE_LOSS[:3])
    assert at_300.delta == pytest.approx(by_hand) and at_600.delta == pytest.approx(by_hand + 0.3)


def test_a_claim_at_a_smaller_budget_reads_that_budgets_cell_on_its_planned_seeds(tmp_path):
    # the reference column (600 steps) lacks A's seed 2 and tried one LR; at 300 steps A has every planned seed
    # and two LRs, and an unplanned seed 3 that the compute multiplier must not pool
    for steps, lrs, a_seeds in [(300, (1e-3, 3e-3), range(4)), (600, (3e-3,), range(2))]:
        for lr in lrs:
            for seed in range(4):
                base = BASE_LOSS[seed] - steps / 600 + (lr == 1e-3) * 0.1
                write_run(tmp_path, BASE, seed=seed, final=base, test=base, steps=steps, lr=lr, **BIG)
                if seed in a_seeds:
                    a = ROWS[A][seed] - steps / 600 + (lr == 1e-3) * 0.1 - 0.1 * (seed == 3)
                    write_run(tmp_path, A, seed=seed, final=a, test=a, steps=steps, lr=lr, **BIG)
    for seed in range(3):  # a row of the table outside the claim: none of its runs is read
        write_run(tmp_path, C, seed=seed, final=ROWS[C][seed], test=ROWS[C][seed], lr=3e-3, **BIG)
    r = result(tmp_path, rows=[A], at={"train.steps": 300}, conditions={"own_lr": True})
    assert r.present[A] == [0, 1, 2, 3] and r.unmet == [] and r.verdict != "not tested as declared"
    assert r.comparisons[0].ceq["ceq_n"] == 3  # the planned seeds only
    assert r.added[0].n == 4  # every seed present, apart: at 300 steps too
    assert r.runs_read == 12  # both LRs of both rows at 300 steps, planned seeds: what the standing reads
    quick = table.build_tables(tmp_path)["quick"]
    scan = quick.runs[quick.runs["label"] == A].head(2)  # a study's scan runs of A: read for the standing too
    with_scan = family.tested(STATISTICS["delta"], claim(rows=[A], at={"train.steps": 300}), quick, scan=scan)
    assert with_scan.runs_read == 14 and with_scan.standing == "exploratory"


def test_a_studys_own_lr_column_decides_the_own_lr_condition(tmp_path):
    for lr in (1e-3, 3e-3):  # two LRs per row: each row's own by the table's reading alone
        sweep(tmp_path, lr=lr)
    quick = table.build_tables(tmp_path)["quick"]
    assert evaluate([claim(conditions={"own_lr": True})], {"quick": quick})[0].unmet == []
    quick.rows["lr_own"] = quick.rows["label"] != A  # the study's reading (analysis.studies): A's LR is not its own
    r = evaluate([claim(conditions={"own_lr": True})], {"quick": quick})[0]
    assert r.unmet == ["not at their own tuned LR: 1 of 3 rows (one lr: 0.001)"]  # the LR chosen


def test_a_claim_on_runs_without_a_test_split_says_it_reads_validation(tmp_path):
    sweep(tmp_path, legacy=True)  # runs of the first schema: no test split, so the table reports validation
    r = result(tmp_path)
    assert "validation split (runs without a test split)" in r.qualifiers and r.tags[-1] == "validation split"
    sweep(tmp_path / "test")
    assert not any("validation" in q for q in result(tmp_path / "test").qualifiers)


def test_a_claim_names_its_rows_at_an_lr_grid_edge_and_their_slow_starting_seeds(tmp_path):
    for seed in range(5):  # A's seed 4 starts slowly: its early loss is far above the other seeds'
        write_run(tmp_path, BASE, seed=seed, final=5.0 + 0.01 * seed, test=5.0 + 0.01 * seed,
                  early_val_loss=9.0 if seed == 0 else 6.0 + 0.01 * seed, **BIG)
        write_run(tmp_path, A, seed=seed, final=4.9 + 0.01 * seed, test=4.9 + 0.01 * seed,
                  early_val_loss=9.0 if seed == 4 else 6.0 + 0.01 * seed, **BIG)
    quick = table.build_tables(tmp_path)["quick"]
    quick.rows["lr_edge"] = quick.rows["label"].map({A: "high"}).fillna("")  # as a study's scan reads it
    r = evaluate([claim(rows=[A], seeds=[0, 1, 2, 3, 4])], {"quick": quick})[0]
    assert r.qualifiers[:2] == ["best LR at an end of the scan's grid for geglu (high): the optimum may lie beyond it",
                                "slow start (shown, not dropped): geglu seed 4; relu seed 0"]
    assert r.tags[:2] == ["LR at grid edge", "slow starts"] and r.comparisons[0].slow == {A: [4], BASE: [0]}


def test_a_comparisons_n_is_its_paired_seeds_or_else_the_smaller_side():
    a = pd.Series([4.8, 4.9, 5.0, 5.1], index=[0, 1, 2, 3])
    paired = family.compared(claim(rows=[A]), [((A, BASE), a, pd.Series([5.0, 5.1, 5.2, 5.0], index=[0, 1, 2, 4]))])
    assert paired[0].interval.method == "paired" and paired[0].n == 3  # seeds 0-2 on both sides
    welch = family.compared(claim(rows=[A]), [((A, BASE), a, pd.Series([5.0, 5.1, 5.2], index=[5, 6, 7]))])
    assert welch[0].interval.method != "paired" and welch[0].n == 3  # no seed in common: the smaller side


def test_a_replications_two_looks_double_every_p_of_its_family():
    base = pd.Series([5.0, 5.1, 5.2, 5.0])
    sided = [((A, BASE), base - 0.1 + pd.Series([0.01, -0.01, 0.0, 0.005]), base),  # beyond the margin
             ((B, BASE), base + pd.Series([0.001, -0.001, 0.002, 0.0]), base)]  # equivalent within it
    one, two = (family.compared(claim(rows=[A, B]), sided, looks=looks) for looks in (1, 2))
    for key in ("p_holm", "tost_holm", "beyond_holm"):
        got, single = [getattr(c, key) for c in two], [getattr(c, key) for c in one]
        assert min(single) < 0.25 and got == pytest.approx([min(1.0, 2 * v) for v in single]), key


def test_a_sensitivity_claim_reads_the_warmup_edge_on_its_planned_seeds(tmp_path):
    """The claim-level flag of test_the_warmup_edge_flag_needs_two_settings_and_reads_only_the_planned_seeds: an
    unplanned seed that moves the best warm-up to the grid's end does not flag the claim."""
    _warmup_runs(tmp_path, [0.40, 0.35, 0.45], [0.40, 0.35, 0.45], best=25)
    _warmup_runs(tmp_path, [0, 0, 0, 3.0], [0, 0, 0, 3.0], seeds=[3])
    r = result(tmp_path, statistic="sensitivity", hypothesis="worse", rows=[PRE], baseline=None)
    assert r.present[PRE] == [0, 1, 2, 3] and "best warm-up at grid edge" not in r.tags


def test_a_claim_without_at_reads_the_reference_column_and_a_sensitivity_claim_needs_warmups(tmp_path):
    sweep(tmp_path)
    sweep(tmp_path, steps=600)  # two budgets: a claim without `at` reads the reference, 600 steps
    r = result(tmp_path)
    assert r.runs_read == 9 and r.verdict == "agrees"  # the three rows' runs at 600 steps, seeds 0-2
    assert result(tmp_path, at={"train.steps": 400}).qualifiers == ["quick has no column train.steps=400"]
    spans = result(tmp_path, statistic="sensitivity", rows=[A], baseline=None)  # budgets are no warm-up settings
    assert spans.verdict == "not tested" and spans.qualifiers == ["quick has no column of warm-up settings"]
    _warmup_runs(tmp_path / "two", [0.40, 0.35, 0.45], [0.03, 0.02, 0.04], warmups=(0, 100))
    two = result(tmp_path / "two", statistic="sensitivity", hypothesis="worse", rows=[POST], baseline=None)
    assert two.verdict == "agrees" and len(two.comparisons) == 1  # two warm-up settings are enough


def test_a_claims_scan_experiment_is_its_own_studys_scan_only():
    import dataclasses

    from mbexp.claims.parse import scan_experiment

    outside = claim()
    assert outside.study == "" and scan_experiment(outside) is None
    assert scan_experiment(dataclasses.replace(outside, study="s")) == "quick_scan"
    assert scan_experiment(dataclasses.replace(outside, study="s", protocol={"scan_of": "t"})) is None  # t's scan


def test_evaluate_reads_a_replication_pooled_with_the_claim_it_repeats(tmp_path):
    for experiment, seeds in (("quick", range(3)), ("again", range(3, 6))):
        for seed in seeds:
            base, a = BASE_LOSS[seed % 4], ROWS[A][seed % 4]
            write_run(tmp_path, BASE, seed=seed, final=base, test=base, experiment=experiment, **BIG)
            write_run(tmp_path, A, seed=seed, final=a, test=a, experiment=experiment, **BIG)
    first = claim(id="first", rows=[A])
    rep = claim(id="rep", rows=[A], experiment="again", seeds=[3, 4, 5], replicates="first")
    results = evaluate([first, rep], table.build_tables(tmp_path))
    assert results[0].pooled is None and results[1].pooled.verdict == "agrees"
    assert results[1].pooled.comparisons[0].n == 6  # both claims' planned seeds


def committed_claims() -> dict:
    """The committed claims file's parsed YAML, a fresh copy each call (a valid file to break one key of)."""
    return read_yaml((ROOT / "results" / "claims.yaml").read_text(encoding="utf-8"))


def claim_entry(data: dict, claim_id: str) -> dict:
    return next(c for c in data["claims"] if c["id"] == claim_id)


def parse_error(data) -> str:
    from mbexp.claims.parse import parse_claims

    with pytest.raises(ClaimsError) as err:
        parse_claims(data, "x")
    return str(err.value)


def claim_error(claim_id: str, change) -> str:
    """The parse error of the committed claims file with claim `claim_id` changed by `change(entry)`."""
    data = committed_claims()
    change(claim_entry(data, claim_id))
    return parse_error(data)


def test_a_claims_files_top_level_is_checked_whole_with_the_files_name():
    from mbexp.claims.parse import TOP_KEYS

    allowed = ", ".join(TOP_KEYS)
    assert parse_error({"claims": "shazeer-glu-300"}) == "x: expected a mapping with a non-empty list `claims`"
    assert parse_error({**committed_claims(), "notes": 1, "extra": 2}) == (
        f"x: unknown top-level keys ['extra', 'notes']; allowed: {allowed}")
    data = committed_claims()
    data["claims"] += [claim_entry(data, "shazeer-glu-300"), claim_entry(committed_claims(), "width-8-3d")] * 2
    assert parse_error(data) == "x: repeated ids shazeer-glu-300, width-8-3d"
    data = committed_claims()
    data["claims"].append(claim_entry(data, "xiong-pre-better"))  # twice: repeated, not thrice
    assert parse_error(data) == "x: repeated ids xiong-pre-better"
    data = committed_claims()
    data["studies"]["ffn_wsd_cpu"]["lr_grid"] = "0.001"
    assert parse_error(data).startswith("x, study ffn_wsd_cpu: ")


@pytest.mark.parametrize(("change", "why"), [
    (lambda c: c.update(replicates="nosuch"), "which names no claim of the file"),
    (lambda c: c.update(experiment="ladder_wsd_cpu", study="ladder_wsd_cpu", seeds=[201, 202, 203]),
     "which is on the same experiment"),
    (lambda c: c.update(margin=0.05), "which differs from it in margin"),
    (lambda c: c.update(margin=0.05, hypothesis="worse"), "which differs from it in hypothesis, margin"),
    (lambda c: c.update(seeds=[203, 204]), "which plans seeds the first claim planned"),
])
def test_a_replication_names_the_file_the_claim_and_why_it_is_no_replication(change, why):
    data = committed_claims()
    data["studies"]["ladder_wsd_rep_cpu"]["seeds"] = [203, 204, 205]
    change(claim_entry(data, "ladderwsd-rep-deficit-shrinks-300"))
    message = parse_error(data)
    assert message.startswith("x, claim ladderwsd-rep-deficit-shrinks-300: replicates ") and message.endswith(why)


@pytest.mark.parametrize(("change", "message"), [
    ({"rows": "swiglu"}, "rows must be a list of row labels, got 'swiglu'"),
    ({"rows": ["swiglu", ""]}, "rows must be a list of row labels, got ['swiglu', '']"),
    ({"rows": [1]}, "rows must be a list of row labels, got [1]"),
    ({"pairs": [["swiglu", 1]]}, "pairs must be a list of [row, baseline] label pairs, got [['swiglu', 1]]"),
    ({"pairs": [["swiglu", "relu"]]}, "pairs replace rows and baseline, and suit neither an ordering nor a "
                                      "sensitivity"),
])
def test_rows_and_pairs_are_refused_with_what_they_were(change, message):
    assert claim_error("shazeer-glu-300", lambda c: c.update(change)) == f"x, claim 0 (shazeer-glu-300): {message}"


def test_pairs_suit_no_ordering_and_no_claim_that_also_gives_a_baseline():
    pairs = [["layer-pre-swiglu-matched", "layer-pre-relu-matched"]]
    refused = "pairs replace rows and baseline, and suit neither an ordering nor a sensitivity"
    data = committed_claims()
    entry = claim_entry(data, "shazeer-glu-300")
    del entry["rows"]
    entry["pairs"] = pairs  # with its baseline still there
    assert parse_error(data).endswith(refused)
    data = committed_claims()
    entry = claim_entry(data, "shazeer-order-300")
    entry.pop("rows"), entry.pop("baseline", None)
    entry["pairs"] = pairs
    assert entry["hypothesis"] == "ordering" and parse_error(data).endswith(refused)


def test_claims_on_the_same_runs_with_other_conditions_are_all_named_with_their_column():
    """The first claim clashes with two later ones: all three are named, with their column."""
    data = committed_claims()
    first = data["claims"][0]
    later = [{**first, "id": f"again-{i}", "conditions": {"own_lr": False, "max_epochs": 1 + i}} for i in (1, 2)]
    data["claims"][3:3] = later[:1]
    data["claims"].append(later[1])
    assert parse_error(data) == (
        "x: claims on the same runs (ffn_budgets_cpu, train.steps=300) declare different conditions "
        "(shazeer-glu-300: own_lr true, max_epochs 1.0; again-1: own_lr false, max_epochs 2.0; again-2: own_lr false, "
        "max_epochs 3.0); declare the same conditions for all of them")


def test_a_claim_without_an_id_or_with_a_bad_one_is_named_by_its_place():
    from mbexp.claims.parse import KEYS

    data = committed_claims()
    data["claims"].insert(1, "shazeer-glu-300")
    assert parse_error(data) == "x, claim 1: expected a mapping"
    data = committed_claims()
    del data["claims"][0]["id"]
    assert parse_error(data) == f"x, claim 0 (?): unknown keys [] / missing keys ['id']; allowed: {', '.join(KEYS)}"
    data = committed_claims()
    data["claims"][0]["id"] = 5
    assert parse_error(data) == "x, claim 0 (5): id must be text, got 5"


@pytest.mark.parametrize("key", ["experiment", "baseline", "study", "replicates"])
def test_a_key_that_names_something_must_be_text(key):
    assert claim_error("shazeer-glu-300", lambda c: c.update({key: 5})) == (
        f"x, claim 0 (shazeer-glu-300): {key} must be text, got 5")


def test_only_an_optional_text_key_may_be_empty():
    from mbexp.claims.parse import parse_claims

    assert claim_error("shazeer-glu-300", lambda c: c.update(experiment="")) == (
        "x, claim 0 (shazeer-glu-300): experiment must be text, got ''")
    data = committed_claims()
    claim_entry(data, "shazeer-glu-300")["replicates"] = ""
    claim = next(c for c in parse_claims(data, "x") if c.id == "shazeer-glu-300")
    assert claim.replicates == ""


def test_a_bad_hypothesis_names_every_hypothesis_and_statistic():
    from mbexp.claims.parse import HYPOTHESES, STATISTICS

    assert claim_error("shazeer-glu-300", lambda c: c.update(hypothesis="maybe")) == (
        f"x, claim 0 (shazeer-glu-300): hypothesis must be one of {', '.join(HYPOTHESES)} and statistic one of "
        f"{', '.join(STATISTICS)}, got 'maybe' and 'delta'")


@pytest.mark.parametrize("at", [{"train.steps": 300, "model.d_model": 64}, {"train.steps": [300]}, ["train.steps"]])
def test_at_is_one_key_with_one_plain_value(at):
    assert claim_error("shazeer-glu-300", lambda c: c.update(at=at)) == (
        f"x, claim 0 (shazeer-glu-300): at must map one column key to one value, got {at!r}")


@pytest.mark.parametrize("conditions", [{"own_lr": True, "warmup": 1}, ["own_lr"]])
def test_conditions_are_a_mapping_of_the_known_conditions(conditions):
    from mbexp.claims.parse import CONDITIONS

    assert claim_error("shazeer-glu-300", lambda c: c.update(conditions=conditions)) == (
        f"x, claim 0 (shazeer-glu-300): conditions must be a mapping of {', '.join(CONDITIONS)}, got {conditions!r}")


@pytest.mark.parametrize(("own_lr", "max_epochs"), [("yes", None), (True, 0), (True, -1), (True, "1")])
def test_own_lr_is_true_or_false_and_max_epochs_positive_or_null(own_lr, max_epochs):
    change = lambda c: c.update(conditions={"own_lr": own_lr, "max_epochs": max_epochs})  # noqa: E731
    assert claim_error("shazeer-glu-300", change) == (
        "x, claim 0 (shazeer-glu-300): conditions own_lr must be true/false and max_epochs a positive number or "
        f"null, got {own_lr!r} and {max_epochs!r}")


def test_max_epochs_null_lifts_the_epoch_condition():
    from mbexp.claims.parse import parse_claims

    data = committed_claims()
    for entry in data["claims"]:  # claims on the same runs declare the same conditions
        if entry["experiment"] == "ffn_budgets_cpu":
            entry["conditions"] = {"own_lr": True, "max_epochs": None}
    claim = next(c for c in parse_claims(data, "x") if c.id == "shazeer-glu-300")
    assert claim.max_epochs is None and claim.own_lr is True


@pytest.mark.parametrize(("claim_id", "change", "message"), [
    ("shazeer-order-300", lambda c: c.update(rows=c["rows"][:1]),
     "an ordering needs at least 2 rows, best first, and statistic delta"),
    ("shazeer-order-300", lambda c: c.update(statistic="trend"),  # four rows, but a statistic with no order
     "an ordering needs at least 2 rows, best first, and statistic delta"),
    ("xiong-pre-no-warmup", lambda c: c.update(baseline="layer-pre-relu-matched"),
     "a sensitivity takes rows and no baseline (sensitivity_diff compares two)"),
    ("shazeer-glu-300", lambda c: c.pop("baseline"), "rows need a baseline (or give pairs)"),
    ("shazeer-glu-300", lambda c: c.update(rows=[]), "no comparisons (rows or pairs)"),
])
def test_each_way_a_claims_comparisons_can_be_wrong_has_its_message(claim_id, change, message):
    index = [c["id"] for c in committed_claims()["claims"]].index(claim_id)
    assert claim_error(claim_id, change).startswith(f"x, claim {index} ({claim_id}): {message}")


def test_an_ordering_of_two_rows_is_one_comparison():
    from mbexp.claims.parse import parse_claims

    data = committed_claims()
    entry = claim_entry(data, "shazeer-order-300")
    entry["rows"] = entry["rows"][:2]
    claim = next(c for c in parse_claims(data, "x") if c.id == "shazeer-order-300")
    assert claim.pairs == (("layer-pre-geglu-matched", "layer-pre-swiglu-matched"),)


def test_a_claims_prose_is_kept_as_written():
    from mbexp.claims.parse import parse_claims

    data = committed_claims()
    entries = {e["id"]: e for e in data["claims"]}
    claims = parse_claims(data, "x")
    assert any(e.get("paper_numbers") for e in entries.values()) and any(not e.get("note") for e in entries.values())
    for c in claims:
        e = entries[c.id]
        assert (c.claim, c.paper, c.paper_numbers, c.note, c.replicates) == (
            e["claim"], e["paper"], e.get("paper_numbers", ""), e.get("note", ""), e.get("replicates", "")), c.id
    entry = claim_entry(data, "shazeer-glu-300")
    entry.pop("paper_numbers"), entry.pop("note", None)
    claim = next(c for c in parse_claims(data, "x") if c.id == "shazeer-glu-300")
    assert (claim.paper_numbers, claim.note) == ("", "")  # left out: empty text


def test_a_broken_claims_file_at_launch_is_one_warning_and_no_declaration(tmp_path, caplog):
    from mbexp.claims.parse import covering

    (tmp_path / "claims.yaml").write_text("claims: [1, 2\n")
    with caplog.at_level("WARNING"):
        assert covering(tmp_path, "x") == {}
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (f"claims file {tmp_path / 'claims.yaml'}: not valid YAML on line 2: expected ',' or ']', but "
                       "got '<stream end>'; the run records no declaration, so its verdicts will be exploratory")
