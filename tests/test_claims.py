"""Claims as data on hand-made runs: family Holm, seeds beyond the plan, epochs, orderings, equivalence, power."""

import math
import re
import statistics
import subprocess
import sys

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from test_table import BASE, ROOT, write_run

from mbexp.analysis import claims, report, stats, table

A, B, C = "layer-pre-geglu-matched", "layer-pre-swiglu-matched", "layer-pre-reglu-matched"
BIG = {"train_tokens": 10**7, "epochs": 0.06}  # within one epoch
BASE_LOSS = [5.00, 5.30, 4.90, 5.10]
ROWS = {A: [4.80, 5.12, 4.74, 4.88], B: [4.95, 5.22, 4.86, 5.02], C: [5.10, 5.38, 5.02, 5.17]}


def sweep(results, seeds=range(3), rows=ROWS, **fields):
    for seed in seeds:
        write_run(results, BASE, seed=seed, final=BASE_LOSS[seed], test=BASE_LOSS[seed], **(BIG | fields))
        for row, values in rows.items():
            write_run(results, row, seed=seed, final=values[seed], test=values[seed], **(BIG | fields))


def claim(**entry) -> claims.Claim:
    base = {"id": "c", "claim": "gated beats relu", "paper": "Shazeer 2020", "experiment": "quick",
            "hypothesis": "better", "baseline": BASE, "rows": [A, B], "seeds": [0, 1, 2]}
    return claims.parse_claim(base | entry, 0.02, "test")


def result(results, **entry) -> claims.Result:
    return claims.evaluate([claim(**entry)], table.build_tables(results))[0]


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
    (0.0081800, 0.0421585); statsmodels is not a dependency, so its output is written down here."""
    sweep(tmp_path)
    got = result(tmp_path).comparisons
    assert [c.interval.p for c in got] == pytest.approx([0.0040900, 0.0421585], abs=1e-7)
    assert [c.p_holm for c in got] == pytest.approx([0.0081800, 0.0421585], abs=1e-7)


def test_a_planted_extra_seed_is_reported_as_added_after_the_plan(tmp_path):
    sweep(tmp_path, seeds=range(4))
    r = result(tmp_path)
    assert "seeds 3 added after the plan (planned 0–2)" in r.qualifiers
    assert r.present[A] == [0, 1, 2, 3] and all(c.n == 4 for c in r.comparisons)
    planned = claims.family(claim(), table.build_tables(tmp_path)["quick"], None, seeds={0, 1, 2})
    assert [c.n for c in planned] == [3, 3]
    csv = pd.read_csv(pd.io.common.StringIO(report.claims_csv([r])))
    assert csv["seeds_planned"].tolist() == ["0 1 2"] * 2 and csv["seeds_present"].tolist() == ["0 1 2 3"] * 2
    assert csv["seed_deltas"][0] == "0:-0.2000 1:-0.1800 2:-0.1600 3:-0.2200"


def test_missing_planned_runs_are_named(tmp_path):
    sweep(tmp_path, seeds=range(2))
    assert "runs missing: geglu seed 2; relu seed 2; swiglu seed 2" in result(tmp_path).qualifiers


def test_a_claim_past_one_epoch_says_so(tmp_path):
    sweep(tmp_path, train_tokens=250_000, epochs=2.4576)
    past = result(tmp_path)
    assert "past 1 epoch (2.46 epochs)" in past.qualifiers and "> 1 epoch" in past.tags
    within = tmp_path / "within"
    sweep(within)
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
    assert result(tmp_path, experiment="nope").verdict == "not tested"
    no_warmups = result(tmp_path, statistic="sensitivity", rows=[A], baseline=None)
    assert no_warmups.verdict == "not tested" and no_warmups.qualifiers == ["quick has no column of warm-up settings"]
    assert result(tmp_path, at={"train.steps": 300}).qualifiers == ["quick has no column train.steps=300"]


def test_sensitivity_claim_reads_each_rows_warmup_sensitivity(tmp_path):
    for seed in range(3):
        for warmup, loss in ((0, 6.7), (25, 6.6), (100, 6.3)):
            write_run(tmp_path, "layer-post-relu-matched", seed=seed, warmup=warmup, final=loss + 0.01 * seed,
                      test=loss + 0.02 * seed, **BIG)
            write_run(tmp_path, BASE, seed=seed, warmup=warmup, final=5.9 - 0.001 * seed, test=5.9, **BIG)
    post = result(tmp_path, rows=["layer-post-relu-matched"], statistic="sensitivity", hypothesis="worse",
                  baseline=None)
    assert post.comparisons[0].interval.delta == pytest.approx(0.4) and post.verdict == "agrees"
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
    with pytest.raises(claims.ClaimsError, match="hypothesis must be one of"):
        claims.load_claims(bad)
    sweep(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_table.py"), "--no-wandb", "--results",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and not (tmp_path / "tables").exists()
    assert done.stderr.splitlines() == [f"error: {bad} claim 0 (x): hypothesis must be one of better, worse, "
                                        "equivalent, ordering and statistic one of delta, sensitivity"]


def test_make_table_writes_the_claims_table(tmp_path):
    sweep(tmp_path)
    (tmp_path / "claims.yaml").write_text(
        "claims:\n  - {id: glu, claim: GLU beats ReLU, paper: Shazeer 2020, experiment: quick, hypothesis: better,\n"
        f"     baseline: {BASE}, rows: [{A}, {B}], seeds: [0, 1, 2]}}\n")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_table.py"), "--no-wandb", "--results",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
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
