"""The table's documented rules (docs/columns.md), each against an independent value: scipy, a hand calculation."""

import io
import math
import shutil
import statistics

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from test_scaling import curve, write_ladder
from test_table import BASE, write_run
from tiny import script

from mbexp.analysis import figures, render, stats, table

BASE_LOSS = [5.00, 5.30, 4.90, 5.10]
ROWS = {"layer-pre-swiglu-matched": [4.99, 5.31, 4.905, 5.095], "layer-pre-gelu-matched": [5.01, 5.28, 4.92, 5.11],
        "layer-pre-geglu-matched": [4.998, 5.302, 4.899, 5.101]}


def three_rows(results) -> pd.DataFrame:
    for seed, base in enumerate(BASE_LOSS):
        write_run(results, BASE, seed=seed, final=base, test=base)
        for row, values in ROWS.items():
            write_run(results, row, seed=seed, final=values[seed], test=values[seed])
    return table.build_tables(results)["quick"].rows.set_index("label")


def holm_by_hand(p: list[float]) -> list[float]:
    """Holm's step-down: sorted ascending, p(i)·(m − i) kept monotone and capped at 1, back in input order."""
    order = sorted(range(len(p)), key=p.__getitem__)
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def tost_by_hand(diffs: list[float], margin: float) -> float:
    """The larger of the two one-sided t-test p's of H0: Δ ≤ −margin and H0: Δ ≥ +margin, n − 1 df."""
    n, mean, se = len(diffs), statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    return max(scipy_stats.t.sf((mean + margin) / se, n - 1), scipy_stats.t.cdf((mean - margin) / se, n - 1))


def test_tost_p_holm_is_holm_over_the_tables_tost_ps(tmp_path):
    rows = three_rows(tmp_path)
    raw = [tost_by_hand([a - b for a, b in zip(ROWS[r], BASE_LOSS)], table.DEFAULT_MARGIN) for r in ROWS]
    assert rows.loc[list(ROWS), "tost_p"].tolist() == pytest.approx(raw, rel=1e-6)
    adjusted = holm_by_hand(raw)
    assert adjusted != pytest.approx(raw)  # the fixture is one where the adjustment shows
    assert rows.loc[list(ROWS), "tost_p_holm"].tolist() == pytest.approx(adjusted, rel=1e-6)


def test_the_narrow_interval_is_the_90_percent_paired_t_interval(tmp_path):
    rows = three_rows(tmp_path)
    for row, values in ROWS.items():
        ci = scipy_stats.ttest_rel(values, BASE_LOSS).confidence_interval(0.90)
        assert (rows.loc[row, "ci90_low"], rows.loc[row, "ci90_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
        wide = scipy_stats.ttest_rel(values, BASE_LOSS).confidence_interval(0.95)
        assert (rows.loc[row, "ci_low"], rows.loc[row, "ci_high"]) == pytest.approx((wide.low, wide.high), rel=1e-9)


def test_seed_deltas_and_seeds_needed_are_read_off_a_rows_paired_differences(tmp_path):
    rows = three_rows(tmp_path)
    for row, values in ROWS.items():
        diffs = [a - b for a, b in zip(values, BASE_LOSS)]
        assert rows.loc[row, "seed_deltas"] == " ".join(f"{seed}:{d:+.4f}" for seed, d in enumerate(diffs))
        assert rows.loc[row, "seeds_needed"] == stats.seeds_needed(statistics.mean(diffs), statistics.stdev(diffs))
    assert rows.loc["layer-pre-gelu-matched", "seeds_needed"] == 97  # the sample SD (n − 1); n − 2 would say 144
    assert rows.loc[BASE, "seed_deltas"] == "" and math.isnan(rows.loc[BASE, "seeds_needed"])


def test_tokens_per_s_is_the_median_over_seeds(tmp_path):
    for seed, speed in enumerate([100.0, 200.0, 900.0]):  # mean 400, median 200
        write_run(tmp_path, BASE, seed=seed, final=5.0 + seed / 100, tokens_per_s_median=speed)
    assert table.build_tables(tmp_path)["quick"].rows.set_index("label").loc[BASE, "tokens_per_s"] == 200.0


def test_tuned_key_ties_choose_the_smaller_value(tmp_path):
    for seed in range(2):  # equal mean validation loss at both rates; the larger is written first
        for lr in (3e-3, 1e-3):
            write_run(tmp_path, BASE, seed=seed, lr=lr, final=5.0 + seed / 10, test=5.0 + lr)
    row = table.build_tables(tmp_path)["quick"].rows.set_index("label").loc[BASE]
    assert row["tuned"] == 1e-3 and row["final_mean"] == pytest.approx(5.001)


def test_forest_draws_a_one_seed_row_as_a_hollow_point_without_interval(tmp_path):
    for seed, base in enumerate(BASE_LOSS[:3]):
        write_run(tmp_path, BASE, seed=seed, final=base, test=base)
        write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, final=base - 0.1, test=base - 0.1 + seed / 100)
    write_run(tmp_path, "layer-pre-gelu-matched", seed=0, final=4.5, test=4.5)
    t = table.build_tables(tmp_path)["quick"]
    ax = figures.plot_forest(t).axes[0]
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert "layer-pre-gelu-matched (n = 1: no interval)" in labels
    y = labels.index("layer-pre-gelu-matched (n = 1: no interval)")
    hollow = [line for line in ax.lines if line.get_fillstyle() == "none"]
    [(x, ys)] = [(list(line.get_xdata()), list(line.get_ydata())) for line in hollow]
    assert x == pytest.approx([4.5 - statistics.mean(BASE_LOSS[:3])]) and ys == [y]  # Δ vs the baseline's mean
    assert len(ax.containers) == 1  # one error bar: the swiglu row's; none for n = 1


def make_table_main(*args: str) -> int:
    return script("make_table").main(["--no-wandb", *args])


def test_make_table_exits_1_for_a_bad_baseline_and_2_for_bad_arguments(tmp_path, capsys):
    for seed in range(2):
        write_run(tmp_path, BASE, seed=seed, final=5.0 + seed / 10)
        write_run(tmp_path, "rms-pre-relu-matched", seed=seed, final=5.1 + seed / 10)
    capsys.readouterr()
    assert make_table_main("--results", str(tmp_path), "--baseline", "quick=rms-pre-glu-matched") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: baseline 'rms-pre-glu-matched' is not one row of quick; rows: {BASE}, "
                   "rms-pre-relu-matched"]
    assert make_table_main("--results", str(tmp_path), "--baseline", "nope=rms-pre-relu-matched") == 1
    assert "--baseline names experiments without finished runs: nope" in capsys.readouterr().err
    for bad in (["--baseline", "quick"], ["--margin", "wide"], ["--unknown"]):
        with pytest.raises(SystemExit) as exit_:
            make_table_main("--results", str(tmp_path), *bad)
        assert exit_.value.code == 2, bad
        assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "tables").exists(), "a bad argument or baseline wrote nothing"


def test_an_option_left_off_beside_a_run_that_sets_it_adds_nothing_to_a_row_name(tmp_path):
    from test_table import BASE, write_run

    from mbexp.analysis import table

    for seed in range(2):  # two runs of one row, the option off (left out of their identity)
        write_run(tmp_path, BASE, seed=seed)
    write_run(tmp_path, "rms-pre-relu-matched", seed=0, extra={"model.logit_softcap": 30.0})  # another row sets it
    labels = set(table.build_tables(tmp_path)["quick"].runs["label"])
    assert labels == {BASE, "rms-pre-relu-matched"}  # not "... (model.logit_softcap=nan)"


def test_a_baseline_row_says_baseline_in_ci_method_and_every_row_names_the_split(tmp_path):
    rows = three_rows(tmp_path)
    assert rows.loc[BASE, "ci_method"] == "baseline" and rows.loc[BASE, "seed_deltas"] == ""
    assert set(rows.loc[list(ROWS), "ci_method"]) == {"paired"}
    assert rows["split"].tolist() == ["test"] * 4  # the CSV's split column, one cell a row


def test_a_ladder_names_each_rows_baseline_right_after_the_baseline_column(tmp_path):
    sizes = {"ladder64": 1e6, "ladder96": 2e6, "ladder128": 4e6}  # two sizes with the baseline, one without
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)}, sizes=sizes, noise=0.02)
    for steps in (200, 600):
        shutil.rmtree(tmp_path / "runs" / "synth" / f"relu-ladder128-{steps}")
    t = table.build_tables(tmp_path)["synth"]
    columns = list(t.rows.columns)
    assert columns[columns.index("baseline") + 1] == "baseline_row"
    rows = t.rows.set_index("label")
    assert rows.loc["layer-pre-swiglu-matched-ladder96", "baseline_row"] == "layer-pre-relu-matched-ladder96"
    orphan = rows.loc["layer-pre-swiglu-matched-ladder128"]  # no Δ, so no per-seed Δ in its cell or the Table
    assert (orphan["ci_method"], orphan["seed_deltas"], orphan["baseline_row"]) == ("no baseline", "", "")
    assert "layer-pre-swiglu-matched-ladder128" not in t.seed_deltas


def test_every_csv_row_names_the_split_the_column_axis_and_the_reference_value_its_delta_is_at(tmp_path):
    """The CSV is read without the caption: each row carries the split, the column axis key and its reference."""
    for warmup in (0, 100):
        for seed in range(2):
            write_run(tmp_path, BASE, seed=seed, warmup=warmup)
            write_run(tmp_path, "rms-pre-relu-matched", seed=seed, warmup=warmup, final=4.9)
    csv = pd.read_csv(io.StringIO(render.to_csv(table.build_tables(tmp_path)["quick"])))
    assert csv[["split", "column", "reference"]].values.tolist() == [["test", "optim.warmup_steps", 100]] * 2
