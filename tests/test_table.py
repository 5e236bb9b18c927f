"""The results table on hand-made run files: rows, tuned key, column axes, statistics, robustness and outputs."""

import io
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from tiny import make_table_here

from mbexp.analysis import figures, outputs, render, stats, table
from mbexp.analysis.collect import SummaryError, collect_runs, load_curves

ROOT = Path(__file__).resolve().parents[1]
BASE = "layer-pre-relu-matched"


def write_run(
    results: Path,
    row: str = BASE,
    *,
    seed: int = 0,
    final: float | None = 5.0,
    test: float | None = None,
    experiment: str = "quick",
    warmup: int = 30,
    lr: float = 3e-3,
    steps: int = 300,
    status: str = "completed",
    curve: list[float] | None = None,
    legacy: bool = False,
    extra: dict | None = None,
    **fields,
) -> Path:
    """Write runs/<experiment>/<variant>/seed=<s>/summary.json (and metrics.jsonl if `curve`); returns the run dir.
    The test loss defaults to final + 0.05; `legacy`: a summary of the first schema (no identity, no test split)."""
    norm, placement, ffn, hidden = row.split("-")
    identity = {"norm.name": norm, "placement.name": placement, "ffn.name": ffn, "hidden.name": hidden,
                "optim.lr": lr, "optim.warmup_steps": warmup, "train.steps": steps, "optim.betas": [0.9, 0.95],
                **(extra or {})}
    chash = str(abs(hash(json.dumps(identity, sort_keys=True))))[:8]
    row_id = fields.pop("row_id", f"r{abs(hash((experiment, row, lr, steps, json.dumps(extra)))) % 10**7}")
    variant = fields.pop("variant", f"{row}-wu{warmup}-{chash}")
    done = status == "completed"
    test = final + 0.05 if test is None and final is not None else test
    summary = {
        "status": status, "experiment": experiment, "variant": variant, "row": row, "row_id": row_id, "seed": seed,
        "axes": {"norm": norm, "placement": placement, "ffn": ffn, "hidden": hidden, "warmup_steps": warmup},
        "steps": steps, "step": steps, "params": 1311360, "params_non_embedding": 786432, "d_ff": 512,
        "early_step": 37, "early_val_loss": 6.0, "final_val_loss": final if done else None,
        "final_val_bpb": final / 3 if final is not None and done else None, "tokens_seen": steps * 2048,
        "tokens_per_s": 10000.0, "config_hash": chash,
    }  # fmt: skip
    if not legacy:
        summary |= {
            "identity": identity, "flops_per_token": 7_000_000, "early_tokens": 37 * 2048,
            "final_test_loss": test if done else None,
            "final_test_bpb": test / 3 if test is not None and done else None,
            "final_train_loss": final - 0.1 if done else None, "generalization_gap": -0.1 if done else None,
            "train_tokens": 250_000, "epochs": steps * 2048 / 250_000, "tokens_per_s_median": 9000.0 + seed,
        }  # fmt: skip
    summary |= fields
    run_dir = results / "runs" / experiment / variant / f"seed={seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    if curve:
        records = [{"step": 10 * i, "train_loss": v + 0.1, "tokens": 100 * i} for i, v in enumerate(curve)]
        records += [{"step": 10 * i, "val_loss": v, "val_bpb": v / 3, "tokens": 100 * i} for i, v in enumerate(curve)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def built(results: Path, experiment: str = "quick", **kwargs) -> table.Table:
    return table.build_tables(results, **kwargs)[experiment]


def row_of(results: Path, label: str, experiment: str = "quick", **kwargs) -> pd.Series:
    return built(results, experiment, **kwargs).rows.set_index("label").loc[label]


def shown(t: table.Table) -> pd.DataFrame:
    return render.display(t).set_index("variant")


def test_mean_and_sample_std_of_the_test_loss(tmp_path):
    for seed, final in enumerate([5.0, 5.2, 5.6]):
        write_run(tmp_path, seed=seed, final=final, test=final + 0.1)
    t = built(tmp_path)
    row = t.rows.set_index("label").loc[BASE]
    assert t.split == "test" and row["n"] == 3
    assert row["final_mean"] == pytest.approx(statistics.mean([5.1, 5.3, 5.7]))
    assert row["final_std"] == pytest.approx(statistics.stdev([5.1, 5.3, 5.7]))
    assert row["final_bpb"] == pytest.approx(statistics.mean([5.1, 5.3, 5.7]) / 3)
    md = render.to_markdown(t)
    assert "| 5.367 ± 0.3055 (3) | baseline |" in md and "final test log-ppl" in md
    assert md.startswith("**quick** — 300 steps, 614,400 tokens per run; final log-ppl on the test split.")


def test_paired_interval_holm_and_marks(tmp_path):
    base, better, noisy = [5.0, 5.3, 4.9, 5.1], [4.8, 5.15, 4.75, 4.85], [5.1, 5.1, 4.9, 5.0]
    close = list(base)
    rows = {"layer-pre-swiglu-matched": better, "layer-pre-gelu-matched": noisy, "layer-pre-geglu-matched": close}
    for seed in range(4):
        write_run(tmp_path, BASE, seed=seed, final=base[seed], test=base[seed])
        for row, values in rows.items():
            write_run(tmp_path, row, seed=seed, final=values[seed], test=values[seed] + 0.001 * (seed % 2))
    t = built(tmp_path).rows.set_index("label")
    tests = {row: [v + 0.001 * (s % 2) for s, v in enumerate(values)] for row, values in rows.items()}
    raw = {}
    for label, values in tests.items():
        result = scipy_stats.ttest_rel(values, base)
        ci = result.confidence_interval(0.95)
        row = t.loc[label]
        assert row["ci_method"] == "paired"
        assert row["delta"] == pytest.approx(statistics.mean(values) - statistics.mean(base))
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
        assert (row["paired_low"], row["paired_high"]) == pytest.approx((ci.low, ci.high))
        welch = scipy_stats.ttest_ind(values, base, equal_var=False).confidence_interval(0.95)
        assert (row["welch_low"], row["welch_high"]) == pytest.approx((welch.low, welch.high))
        raw[label] = result.pvalue
    adjusted = dict(zip(raw, stats.holm(list(raw.values()))))
    assert t.loc[list(raw), "p_holm"].tolist() == pytest.approx([adjusted[k] for k in raw])
    assert t.loc["layer-pre-swiglu-matched", "mark"] == "better"
    assert t.loc["layer-pre-gelu-matched", "mark"] == "not resolved"  # its interval contains 0: not agreement
    assert t.loc["layer-pre-geglu-matched", "mark"] == "equivalent"  # Δ 0.0005 ± 0.0009, far inside ±0.02
    assert t.loc[BASE, "mark"] == "baseline" and math.isnan(t.loc[BASE, "p_holm"])
    marks = shown(built(tmp_path))["mark"]
    assert marks.tolist() == ["baseline", "not resolved", "equiv. ±0.02", "better"]
    assert shown(built(tmp_path, margin=1e-4))["mark"]["layer-pre-geglu-matched"] == "not resolved"


def test_welch_when_no_seed_is_shared(tmp_path):
    base, other = [5.0, 5.3, 4.9], [4.6, 4.7, 4.9, 4.65]
    for seed, final in enumerate(base):
        write_run(tmp_path, BASE, seed=seed, test=final)
    for seed, final in enumerate(other, start=10):
        write_run(tmp_path, "rms-pre-relu-matched", seed=seed, test=final)
    row = row_of(tmp_path, "rms-pre-relu-matched")
    ci = scipy_stats.ttest_ind(other, base, equal_var=False).confidence_interval(0.95)
    assert row["ci_method"] == "welch" and math.isnan(row["paired_low"])
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))


def test_lr_chosen_on_validation_reported_on_test(tmp_path):
    """Validation prefers lr 1e-3, test would prefer 3e-3: the row shows 1e-3 and its test loss."""
    for seed in range(2):
        write_run(tmp_path, BASE, seed=seed, lr=1e-3, final=5.00 + seed / 100, test=5.30 + seed / 100)
        write_run(tmp_path, BASE, seed=seed, lr=3e-3, final=5.10 + seed / 100, test=5.00 + seed / 100)
        write_run(tmp_path, BASE, seed=seed, lr=1e-2, status="diverged")
        write_run(tmp_path, "layer-pre-gelu-matched", seed=seed, lr=1e-3, final=5.2, test=5.2 + seed / 100)
        write_run(tmp_path, "layer-pre-gelu-matched", seed=seed, lr=3e-3, final=5.1, test=5.1 + seed / 50)
    t = built(tmp_path)
    assert t.tuned == "optim.lr" and t.column is None
    rows = t.rows.set_index("label")
    assert rows.loc[BASE, "tuned"] == 1e-3 and rows.loc[BASE, "tried"] == 3
    assert rows.loc[BASE, "final_mean"] == pytest.approx(5.305)  # the test loss of the validation choice
    assert rows.loc["layer-pre-gelu-matched", "tuned"] == 3e-3
    assert rows.loc["layer-pre-gelu-matched", "delta"] == pytest.approx((5.1 + 5.12) / 2 - 5.305)
    assert (rows.loc[BASE, "diverged"], rows.loc[BASE, "finished"]) == (2, 6)
    cells = shown(t)
    assert cells["lr (tried)"].tolist() == ["0.001 (3)", "0.003 (2)"]
    assert "chosen on validation, reported on test" in render.legend(t)
    assert sorted(figures.figures(t)) == ["curves", "forest", "lr_tuned"]


def test_tune_other_key_and_bad_tune_key(tmp_path):
    for seed in range(2):
        for warmup, final in [(0, 5.3), (100, 5.1)]:
            write_run(tmp_path, BASE, seed=seed, warmup=warmup, final=final)
    t = built(tmp_path, tune="optim.warmup_steps")
    assert t.tuned == "optim.warmup_steps" and t.column is None and t.rows["tuned"].tolist() == [100]
    with pytest.raises(ValueError, match=r"--tune 'optim.lrr' is not a config key of any run; keys: .*optim\.lr"):
        table.build_tables(tmp_path, tune="optim.lrr")
    with pytest.raises(ValueError, match="--margin"):
        table.build_tables(tmp_path, margin=0)


def test_warmup_columns_and_sensitivity_interval(tmp_path):
    for warmup, finals in [(0, [5.5, 5.7]), (100, [5.1, 5.1]), (500, [5.2, 5.4])]:
        for seed, final in enumerate(finals):
            write_run(tmp_path, BASE, seed=seed, final=final, test=final + 0.1 * seed, warmup=warmup)
    for warmup in (0, 100, 500):
        for seed in range(2):
            status = "diverged" if warmup == 0 else "completed"
            write_run(tmp_path, "rms-pre-relu-matched", seed=seed, final=5.0, warmup=warmup, status=status)
    t = built(tmp_path)
    assert (t.column, t.columns, t.reference) == ("optim.warmup_steps", [0, 100, 500], 500)  # ties: the largest
    base = t.rows.set_index("label").loc[BASE]
    assert [base["wu=0"], base["wu=100"], base["wu=500"]] == pytest.approx([5.65, 5.15, 5.35])
    # chosen on validation (100), reported on test: (5.5 − 5.1, 5.8 − 5.2) = (0.4, 0.6), 1 df
    assert base["sensitivity"] == pytest.approx(0.5)
    assert (base["sensitivity_low"], base["sensitivity_high"]) == pytest.approx((0.5 - 12.706 * 0.1,
                                                                                 0.5 + 12.706 * 0.1), abs=1e-3)
    assert base["final_mean"] == pytest.approx(5.35) and base["n"] == 2  # Δ at the reference column
    assert base["diverged"] == 0 and base["finished"] == 6
    rms = t.rows.set_index("label").loc["rms-pre-relu-matched"]
    assert math.isinf(rms["wu=0"]) and math.isinf(rms["sensitivity"]) and (rms["diverged"], rms["finished"]) == (2, 6)
    cells = shown(t)
    assert [c for c in cells.columns if c.startswith("wu=")] == ["wu=0", "wu=100", "wu=500"]
    assert cells.loc["rms-pre-relu-matched", ["wu=0", "warm-up sens. (95% CI)", "diverged"]].tolist() == \
        ["div.", "∞", "2/6"]
    assert cells.loc[BASE, "wu=100"] == "5.150 (2)" and cells.loc[BASE, "warm-up sens. (95% CI)"].startswith("+0.500 [")
    assert "Δ and marks at optim.warmup_steps=500" in render.caption(t)
    assert sorted(figures.figures(t)) == ["curves", "forest", "warmup"]


def test_budget_columns_reference_the_largest(tmp_path):
    for steps, final in [(100, 5.6), (300, 5.2), (200, 5.4)]:
        for seed in range(2):
            write_run(tmp_path, BASE, seed=seed, steps=steps, final=final)
            write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, steps=steps, final=final - 0.1)
    write_run(tmp_path, BASE, seed=2, steps=100, final=5.6)  # the most common budget is not the reference
    t = built(tmp_path)
    assert (t.column, t.columns, t.reference) == ("train.steps", [100, 200, 300], 300)
    cells = shown(t)
    assert [c for c in cells.columns if c.startswith("steps=")] == ["steps=100", "steps=200", "steps=300"]
    assert cells.loc[BASE, "steps=100"] == "5.650 (3)" and "warm-up sens. (95% CI)" not in cells.columns
    assert "(the largest budget)" in render.caption(t) and "614,400 tokens" in render.caption(t)
    assert sorted(figures.figures(t)) == ["curves", "forest", "steps"]


def test_single_warmup_has_no_column_axis(tmp_path):
    write_run(tmp_path, warmup=50)
    t = built(tmp_path)
    assert t.column is None and not any(c.startswith("wu=") for c in render.display(t).columns)
    assert sorted(figures.figures(t)) == ["curves"]  # one row: no comparison, no forest plot


def test_legacy_summaries_table_on_validation(tmp_path):
    for seed, final in enumerate([5.0, 5.2]):
        for warmup in (0, 100):
            write_run(tmp_path, BASE, seed=seed, final=final + warmup / 1000, warmup=warmup, legacy=True)
    t = built(tmp_path)
    assert t.split == "validation" and t.column == "optim.warmup_steps" and t.reference == 100
    row = t.rows.iloc[0]
    assert row["final_mean"] == pytest.approx(5.2) and row["early_tokens"] == 37 * 2048  # derived from tokens/step
    md = render.to_markdown(t)
    assert "validation split (these runs have no test split)" in md and "final validation log-ppl" in md
    cells = shown(t)
    assert cells.loc[BASE, ["FLOPs/token", "epochs", "gen. gap", "tokens/s"]].tolist() == ["—"] * 4
    assert "early log-ppl (step 37, 75.8k tok)" in cells.columns


def test_new_columns_and_the_epoch_flag(tmp_path):
    write_run(tmp_path, seed=0, steps=300)
    write_run(tmp_path, "layer-pre-gelu-matched", seed=0, steps=300, extra={"train.batch_size": 64},
              epochs=2.4, tokens_seen=2_457_600)
    t = built(tmp_path)
    cells = shown(t)
    assert cells.loc[BASE, ["non-emb. params", "FLOPs/token", "epochs", "gen. gap", "tokens/s"]].tolist() == \
        ["786,432", "7,000,000", "2.46†", "-0.100", "9,000"]
    assert cells.loc["layer-pre-gelu-matched", "epochs"] == "2.40†"
    assert cells["tokens"].tolist() == ["614.4k", "2.46M"] and "steps" not in cells.columns  # tokens differ
    assert "budget per row" in render.caption(t) and "† past one epoch" in render.legend(t)


def test_diverged_run_counted_not_averaged(tmp_path, caplog):
    write_run(tmp_path, seed=0, final=5.0)
    write_run(tmp_path, seed=1, final=5.4)
    write_run(tmp_path, seed=2, status="diverged", early_val_loss=9.0)
    write_run(tmp_path, seed=3, status="failed")  # not finished: ignored, like a run in progress
    write_run(tmp_path, seed=4, status="running")
    row = row_of(tmp_path, BASE)
    assert (row["diverged"], row["finished"], row["n"]) == (1, 3, 2)
    assert row["final_mean"] == pytest.approx(5.25) and row["early_log_ppl"] == pytest.approx(6.0)
    assert "| 1/3 |" in render.to_markdown(built(tmp_path))
    assert not caplog.records


def test_bad_summaries_reported_skipped_and_strict_raises(tmp_path, caplog):
    write_run(tmp_path, seed=0, final=5.0)
    bad_json = write_run(tmp_path, seed=1) / "summary.json"
    bad_json.write_text('{"status": "completed", "experim')
    partial = write_run(tmp_path, seed=2) / "summary.json"
    partial.write_text(json.dumps({k: v for k, v in json.loads(partial.read_text()).items() if k != "row_id"}))
    wrong_type = write_run(tmp_path, seed=3, final_val_loss="5.1")
    wrong_identity = write_run(tmp_path, seed=4, identity=[1])
    runs = collect_runs(tmp_path)
    assert runs["seed"].tolist() == [0]
    for path in (bad_json, partial, wrong_type / "summary.json", wrong_identity / "summary.json"):
        assert str(path) in caplog.text
    with pytest.raises(SummaryError, match="seed=1"):
        collect_runs(tmp_path, strict=True)


def test_experiments_never_mix(tmp_path):
    write_run(tmp_path, experiment="a", seed=0, final=5.0, test=5.0)
    write_run(tmp_path, experiment="a", seed=1, final=5.2, test=5.2)
    write_run(tmp_path, experiment="b", seed=0, final=7.0, test=7.0)
    tables = table.build_tables(tmp_path)
    assert sorted(tables) == ["a", "b"]
    assert tables["a"].rows["n"].tolist() == [2] and tables["a"].rows["final_mean"].iloc[0] == pytest.approx(5.1)
    assert tables["b"].rows["n"].tolist() == [1] and tables["b"].rows["final_mean"].iloc[0] == pytest.approx(7.0)


def test_seed_recorded_twice_counts_once(tmp_path):
    write_run(tmp_path, seed=0, test=5.0, variant="v1")
    write_run(tmp_path, seed=0, test=6.0, variant="v2", step=150, status="interrupted")
    write_run(tmp_path, seed=1, test=5.5, variant="v1")
    write_run(tmp_path, seed=1, test=5.3, variant="v2")
    row = row_of(tmp_path, BASE)
    assert row["n"] == 2 and row["finished"] == 2
    assert row["final_mean"] == pytest.approx((5.0 + 5.3) / 2)  # completed beats interrupted; then the last path


@pytest.mark.parametrize(
    "rows, expected",
    [
        (["rms-pre-swiglu-matched", "layer-pre-relu-4d", BASE, "layer-post-relu-matched"], BASE),
        (["rms-pre-gelu-matched", "layer-post-relu-4d", "layer-post-relu-matched"], "layer-post-relu-matched"),
        (["rms-post-gelu-4d", "rms-pre-swiglu-4d", "rms-pre-gelu-4d"], "rms-pre-gelu-4d"),  # tie: first in row order
    ],
)
def test_default_baseline(tmp_path, rows, expected):
    for row in rows:
        write_run(tmp_path, row)
    assert built(tmp_path).baseline == expected


def test_baseline_override(tmp_path):
    for seed in range(2):  # two seeds: one seed has no interval, so no Δ
        write_run(tmp_path, BASE, seed=seed, test=5.0 + 0.01 * seed)
        write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, test=4.8 + 0.01 * seed)
    t = built(tmp_path, baselines={"quick": "layer-pre-swiglu-matched"})
    rows = t.rows.set_index("label")
    assert t.baseline == "layer-pre-swiglu-matched" and not rows.loc[BASE, "baseline"]
    assert rows.loc[BASE, "delta"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="nope"):
        table.build_tables(tmp_path, baselines={"quick": "nope"})
    with pytest.raises(ValueError, match="other"):
        table.build_tables(tmp_path, baselines={"other": BASE})


def rows_named(*labels: str, rows: tuple = ()) -> pd.DataFrame:
    """A table's rows as pick_baseline reads them: a label (its row name from `rows`, else the label) and its axes."""
    names = rows or labels
    return pd.DataFrame([{"label": label, "row": name, "experiment": "quick",
                          **dict(zip(("norm", "placement", "ffn", "hidden"), name.split("-")))}
                         for label, name in zip(labels, names)])


def test_the_default_baseline_matches_most_shazeer_axes_then_hidden_matched_in_any_row_order():
    # three of Shazeer's axes beat hidden=matched; on equal axes, matched beats 4d even when it comes second
    assert table.pick_baseline(rows_named("rms-pre-swiglu-matched", "layer-pre-relu-4d")) == 1
    assert table.pick_baseline(rows_named("layer-pre-relu-4d", BASE)) == 1


def test_a_baseline_choice_of_no_row_or_of_a_name_two_rows_share_is_refused_naming_the_rows():
    with pytest.raises(ValueError) as err:  # a one-row table: no other row to fall back on
        table.pick_baseline(rows_named(BASE), "nope")
    assert str(err.value) == f"baseline 'nope' is not one row of quick; rows: {BASE}"
    shared = rows_named(f"{BASE} (model.d_model=128)", f"{BASE} (model.d_model=64)", "layer-pre-swiglu-matched",
                        rows=(BASE, BASE, "layer-pre-swiglu-matched"))
    with pytest.raises(ValueError, match=r"rows: .*\(model\.d_model=64\), layer-pre-swiglu-matched$"):
        table.pick_baseline(shared, BASE)
    assert table.pick_baseline(shared, f"{BASE} (model.d_model=64)") == 1


def test_a_row_without_a_recorded_size_sorts_as_size_0_before_a_sized_row_of_the_same_axes(tmp_path):
    # the sized row's files come first on disk; the size-less one's label sorts last
    write_run(tmp_path, BASE, extra={"model.d_model": 128}, variant="a")
    write_run(tmp_path, BASE, extra={"model.d_model": 64}, variant="b", params_non_embedding=None)
    t = built(tmp_path)
    assert t.rows["label"].tolist() == [f"{BASE} (model.d_model=64)", f"{BASE} (model.d_model=128)"]
    assert shown(t)["non-emb. params"].tolist() == ["—", "786,432"]


def test_a_row_without_params_or_d_ff_tables_them_as_not_recorded_and_the_others_as_whole_numbers(tmp_path):
    """A summary may hold params and d_ff as null: that row's cells are empty in the CSV and "—" when shown."""
    write_run(tmp_path, BASE)
    write_run(tmp_path, "layer-pre-swiglu-matched", params=None, d_ff=None)
    t = built(tmp_path)
    csv = pd.read_csv(io.StringIO(render.to_csv(t)), dtype=str, keep_default_na=False).set_index("label")
    assert csv.loc[[BASE, "layer-pre-swiglu-matched"], ["params", "d_ff"]].values.tolist() == \
        [["1311360", "512"], ["", ""]]
    assert shown(t).loc["layer-pre-swiglu-matched", ["params", "d_ff"]].tolist() == ["—", "—"]


def test_a_rows_sizes_and_early_step_are_its_runs_at_the_reference_column_else_any_of_its_runs(tmp_path):
    # the 100-step runs come first on disk; the swiglu row has none at the reference (300 steps)
    for steps, seed in [(100, 0), (100, 1), (300, 0), (300, 1)]:
        write_run(tmp_path, BASE, seed=seed, steps=steps, early_step=steps // 10, early_tokens=steps // 10 * 2048,
                  variant=f"a-{steps}")
    write_run(tmp_path, "layer-pre-swiglu-matched", steps=100, params=999, d_ff=344)
    rows = built(tmp_path).rows.set_index("label")
    assert rows.loc[BASE, "early_step"] == 30
    assert rows.loc["layer-pre-swiglu-matched", ["params", "d_ff", "n"]].astype(float).tolist() == [999, 344, 0]


def test_warmup_sensitivity_reads_only_the_warmups_a_row_was_run_at(tmp_path):
    """rms ran at 100 and 500 only: its smallest warm-up is 100, not the table's 0 (no run there is no divergence);
    post ran at 0 only: one setting, no sensitivity."""
    for seed in range(2):
        for warmup in (0, 100, 500):
            write_run(tmp_path, BASE, seed=seed, warmup=warmup)
        for warmup, final in [(100, [5.3, 5.5]), (500, [5.1, 5.2])]:
            write_run(tmp_path, "rms-pre-relu-matched", seed=seed, warmup=warmup, final=final[seed],
                      test=final[seed])
        write_run(tmp_path, "layer-post-relu-matched", seed=seed, warmup=0)
    rows = built(tmp_path).rows.set_index("label")
    assert rows.loc["rms-pre-relu-matched", "sensitivity"] == pytest.approx(0.25)  # 100 minus the val-best 500
    assert math.isnan(rows.loc["layer-post-relu-matched", "sensitivity"])


def test_row_order_and_label_clash(tmp_path):
    for row in ["rms-pre-relu-matched", "layer-pre-swiglu-8_3d", "layer-post-relu-matched", "layer-pre-swiglu-matched"]:
        write_run(tmp_path, row)
    write_run(tmp_path, BASE, extra={"model.d_model": 64})
    write_run(tmp_path, BASE, extra={"model.d_model": 128})
    labels = built(tmp_path).rows["label"].tolist()
    assert labels == [
        f"{BASE} (model.d_model=128)", f"{BASE} (model.d_model=64)", "layer-pre-swiglu-matched",
        "layer-pre-swiglu-8_3d", "layer-post-relu-matched", "rms-pre-relu-matched",
    ]  # fmt: skip


def test_unknown_axis_values_sort_last_by_name_before_the_other_axes(tmp_path):
    """A norm outside the registry ranks after every known one, by its name: b's ReLU row after a's SwiGLU row,
    though ReLU ranks before SwiGLU on the next axis."""
    for row in ["b-pre-relu-matched", "a-pre-swiglu-matched", "rms-pre-swiglu-matched"]:
        write_run(tmp_path, row)
    assert built(tmp_path).rows["label"].tolist() == ["rms-pre-swiglu-matched", "a-pre-swiglu-matched",
                                                      "b-pre-relu-matched"]


def test_the_slow_start_column_lists_every_flagged_seed(tmp_path):
    for seed, early in enumerate([5.00, 5.01, 5.02, 5.03, 5.04, 9.0, 9.0]):
        write_run(tmp_path, seed=seed, early_val_loss=early)
    t = built(tmp_path)
    assert t.rows.set_index("label").loc[BASE, "slow_start"] == "5 6"
    assert shown(t)["slow start (seeds)"].tolist() == ["5 6"]


def test_load_curves_reads_eval_records(tmp_path):
    run_dir = write_run(tmp_path, curve=[7.0, 6.0, 5.5])
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 20, "val_loss": 5.4, "val_bpb": 1.8, "tokens": 200}\n{"step": 30, "val_lo')
    curves = load_curves([run_dir])
    assert curves["step"].tolist() == [0, 10, 20] and curves["val_loss"].tolist() == [7.0, 6.0, 5.4]
    assert curves["tokens"].tolist() == [0, 100, 200]


def write_sweep(results: Path) -> None:
    for seed in range(3):
        for warmup in (0, 100):
            write_run(results, BASE, seed=seed, warmup=warmup, final=5.0 + 0.1 * seed, curve=[7.0, 6.0 - seed / 10])
            write_run(results, "rms-pre-swiglu-matched", seed=seed, warmup=warmup, final=4.9 + 0.05 * seed,
                      curve=[7.1, 5.9])  # fmt: skip
        write_run(results, "layer-post-gelu-4d", seed=seed, warmup=100, final=5.3, status="diverged")
    write_run(results, BASE, experiment="other", final=4.0)


def test_outputs_written_complete_and_deterministic(tmp_path):
    write_sweep(tmp_path)
    written = outputs.write_outputs(tmp_path, table.build_tables(tmp_path))
    names = sorted(p.name for paths in written.values() for p in paths)
    expected = [f"{e}.{x}" for e in ("other", "quick") for x in ("csv", "md", "tex")] + ["other_curves.png"]
    expected += [f"quick_{k}.png" for k in ("curves", "warmup", "forest")]
    assert names == sorted(expected)
    md = (tmp_path / "tables" / "quick.md").read_text()
    header, rows = md.splitlines()[2], [line for line in md.splitlines()[4:] if line.startswith("|")]
    columns = ["variant", "params", "non-emb. params", "d_ff", "FLOPs/token", "early log-ppl (step 37, 75.8k tok)",
               "final test log-ppl", "Δ vs baseline (95% CI)", "p (Holm)", "mark", "wu=0", "wu=100",
               "warm-up sens. (95% CI)", "epochs", "gen. gap", "diverged", "tokens/s"]  # fmt: skip
    assert header == "| " + " | ".join(columns) + " |"
    assert len(rows) == 3 and all(row.count("|") == len(columns) + 1 for row in rows)
    assert "| layer-post-gelu-4d | 1,311,360 | 786,432 | 512 | 7,000,000 | — | div. | — | — | not resolved | — | " \
           "div. | — | — | — | 3/3 | — |" in rows
    tex = (tmp_path / "tables" / "quick.tex").read_text()
    assert all(cmd in tex for cmd in (r"\toprule", r"\midrule", r"\bottomrule", r"layer-post-gelu-4d", r"d\_ff"))
    csv = pd.read_csv(tmp_path / "tables" / "quick.csv")
    assert {"final_mean", "final_std", "n", "final_bpb", "delta", "ci_low", "ci_high", "paired_low", "paired_high",
            "welch_low", "welch_high", "p", "p_holm", "tost_p", "tost_p_holm", "mark"} <= set(csv.columns)
    before = {p: p.read_bytes() for paths in written.values() for p in paths}
    outputs.write_outputs(tmp_path, table.build_tables(tmp_path))
    assert {p: p.read_bytes() for p in before} == before


def make_table(results: Path, *args: str) -> subprocess.CompletedProcess:
    return make_table_here(results, "--no-wandb", *args)


def test_cli_without_results_prints_one_line(tmp_path):
    done = make_table(tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip().count("\n") == 0 and "no finished runs" in done.stdout
    assert "Traceback" not in done.stderr
    typo = make_table(tmp_path / "resluts")
    assert typo.returncode == 2 and not typo.stdout
    assert typo.stderr.splitlines() == [
        f"error: --results {tmp_path / 'resluts'} is not a folder (it should hold runs/)"]


def test_cli_writes_and_prints_tables_and_rejects_bad_options(tmp_path):
    write_sweep(tmp_path)
    bad = write_run(tmp_path, "rms-post-relu-matched") / "summary.json"
    bad.write_text("{")
    done = make_table(tmp_path, "--baseline", "quick=rms-pre-swiglu-matched", "--margin", "0.05")
    assert done.returncode == 4, done.stderr  # tables written, one file left out
    assert "## other" in done.stdout and "## quick" in done.stdout and "| rms-pre-swiglu-matched |" in done.stdout
    assert "within ±0.05 nats" in done.stdout
    assert str(bad) in done.stderr and "Traceback" not in done.stderr
    strict = make_table(tmp_path, "--strict")
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    [line] = strict.stderr.strip().splitlines()
    assert line.startswith(f"error: {bad}: unreadable JSON")
    tune = make_table(tmp_path, "--tune", "optim.lrr")
    [line] = tune.stderr.strip().splitlines()[-1:]
    assert tune.returncode == 1 and line.startswith("error: --tune 'optim.lrr' is not a config key")
    few = make_table(tmp_path, "--resamples", "5")
    assert few.returncode == 2 and "--resamples: expected an integer of at least 20, got '5'" in few.stderr


def test_make_table_never_imports_torch(tmp_path):
    """`make table` (its modules, its script, the W&B module) runs without loading torch."""
    write_sweep(tmp_path)
    code = (
        "import importlib.util, sys\n"
        "import mbexp.analysis.collect, mbexp.analysis.stats, mbexp.analysis.table, mbexp.analysis.render\n"
        "import mbexp.analysis.figures, mbexp.analysis.outputs, mbexp.analysis.wandb_run\n"
        f"spec = importlib.util.spec_from_file_location('make_table', {str(ROOT / 'scripts' / 'make_table.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"assert module.main(['--results', {str(tmp_path)!r}, '--no-wandb']) == 0\n"
        "import wandb\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "tables" / "quick.md").exists()


def test_tuned_warmup_cells_and_all_diverged(tmp_path):
    """LR tuned per warm-up cell on validation; a cell where every LR diverged reads div., its tuned value —."""
    for seed in range(2):
        for warmup, lr, final, test in [(0, 1e-3, 5.5, 5.6), (0, 1e-2, 5.4, 5.9), (100, 1e-3, 5.2, 5.1),
                                        (100, 1e-2, 5.3, 5.0)]:
            write_run(tmp_path, BASE, seed=seed, warmup=warmup, lr=lr, final=final + seed / 100, test=test)
        for warmup, lr in [(0, 1e-3), (0, 1e-2), (100, 1e-3), (100, 1e-2)]:
            write_run(tmp_path, "layer-post-relu-matched", seed=seed, warmup=warmup, lr=lr, status="diverged")
    t = built(tmp_path)
    assert (t.tuned, t.column, t.reference) == ("optim.lr", "optim.warmup_steps", 100)
    rows = t.rows.set_index("label")
    assert rows.loc[BASE, "tuned"] == 1e-3 and rows.loc[BASE, "final_mean"] == pytest.approx(5.1)
    assert rows.loc[BASE, "wu=0"] == pytest.approx(5.9)  # wu=0 chose 1e-2 on validation: its test loss
    assert rows.loc[BASE, "sensitivity"] == pytest.approx(0.8)  # 5.9 at wu=0 minus 5.1 at the val-best wu=100
    post = rows.loc["layer-post-relu-matched"]
    assert pd.isna(post["tuned"]) and math.isinf(post["wu=0"]) and math.isinf(post["final_mean"])
    cells = shown(t)
    assert cells.loc["layer-post-relu-matched", ["lr (tried)", "final test log-ppl", "wu=100"]].tolist() == \
        ["— (2)", "div.", "div."]
    assert sorted(figures.figures(t)) == ["curves", "forest", "lr_tuned", "warmup"]
    outputs.write_outputs(tmp_path, {"quick": t})


def test_a_cells_runs_are_those_at_the_reference_column_unless_a_value_is_given(tmp_path):
    from mbexp.analysis.table import cell_runs, losses_at

    for warmup, finals in [(0, [5.5, 5.7]), (100, [5.1, 5.3]), (500, [5.2, 5.4])]:
        for seed, final in enumerate(finals):
            write_run(tmp_path, BASE, seed=seed, final=final, test=final, warmup=warmup)
    t = built(tmp_path)
    assert t.reference == 500
    assert sorted(cell_runs(t, BASE)["_col"]) == [500, 500] and sorted(cell_runs(t, BASE, 0)["_col"]) == [0, 0]
    assert list(losses_at(t, BASE)) == pytest.approx([5.2, 5.4]) and list(losses_at(t, BASE, 100)) == pytest.approx(
        [5.1, 5.3])


def test_build_tables_skips_a_bad_summary_unless_strict(tmp_path, caplog):
    write_run(tmp_path, seed=0, final=5.0)
    (write_run(tmp_path, seed=1) / "summary.json").write_text('{"status": "completed", "experim')
    assert table.build_tables(tmp_path)["quick"].rows["n"].tolist() == [1]
    with pytest.raises(SummaryError, match="seed=1"):
        table.build_tables(tmp_path, strict=True)


def test_a_column_heading_is_the_keys_short_name_or_its_last_part():
    assert [table.short(k) for k in ("optim.lr", "optim.warmup_steps", "train.steps", "model.d_model", "seed",
                                     "data.hub.name")] == ["lr", "wu", "steps", "d_model", "seed", "name"]


def test_a_results_folder_without_runs_holds_no_experiments(tmp_path):
    from mbexp.run.identity import experiments_in

    assert experiments_in(tmp_path) == []
    write_run(tmp_path, experiment="quick")
    assert experiments_in(tmp_path) == ["quick"]


@pytest.mark.parametrize(("finals", "tuned", "tried", "final_mean"), [
    ({None: 5.0, 30.0: 5.2, 50.0: 5.1}, None, 3, 5.0),  # off is best: its runs are the row's
    ({None: 5.3, 30.0: 5.0}, 30.0, 2, 5.0),  # off and one value: still a tuned key, its value best
    ({None: 5.0, 30.0: 5.0, 50.0: 5.0}, 30.0, 3, 5.0),  # a tie: settings in order, numbers before off
])
def test_a_tuned_key_that_can_be_off_chooses_off_as_any_other_setting(tmp_path, finals, tuned, tried, final_mean):
    for seed in range(2):
        for cap, final in finals.items():
            write_run(tmp_path, BASE, seed=seed, final=final, test=final, extra={"model.logit_softcap": cap})
    t = built(tmp_path, tune="model.logit_softcap")
    row = t.rows.set_index("label").loc[BASE]
    assert t.tuned == "model.logit_softcap" and (row["tried"], row["final_mean"]) == (tried, pytest.approx(final_mean))
    assert row["tuned"] == tuned if tuned is not None else row["tuned"] is None or math.isnan(row["tuned"])


def test_mixed_numerics_names_each_rows_mix_in_row_order_with_counts():
    """Rows in the order they come (not sorted), each mixed key with its counts; one value, or none recorded, is no
    mix."""
    runs = pd.DataFrame({"label": ["b", "b", "b", "a", "a"], "precision": ["fp32"] * 5,
                         "device": ["cuda", "cpu", "cpu", "cpu", "cuda"], "compiled": [False, False, True, None, None]})
    assert table.mixed_numerics(runs) == ["Row b mixes runs: 2 device=cpu, 1 device=cuda.",
                                    "Row b mixes runs: 2 compiled=False, 1 compiled=True.",
                                    "Row a mixes runs: 1 device=cpu, 1 device=cuda."]
    assert table.mixed_numerics(runs.assign(device="cpu", compiled=None)) == []


def test_a_rows_mix_of_values_of_different_types_is_named_in_the_order_of_their_text(tmp_path):
    """The reader accepts any JSON value for how a run computed; a row mixing a bool and a text is still one note."""
    write_run(tmp_path, BASE, seed=0, compiled=True)
    write_run(tmp_path, BASE, seed=1, compiled="max-autotune")  # a compile mode recorded as text
    assert built(tmp_path).notes == [f"Row {BASE} mixes runs: 1 compiled=max-autotune, 1 compiled=True."]


def test_a_config_object_groups_as_its_json_with_sorted_keys_and_a_list_as_a_tuple():
    assert table._hashable({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert table._hashable([{"b": 1, "a": 2}, [3, 4]]) == ('{"a": 2, "b": 1}', (3, 4))
    assert table._hashable("relu") == "relu"


def test_tables_for_names_every_unknown_baseline_and_every_key_in_one_line():
    runs = pd.DataFrame({"status": ["completed"], "experiment": ["e"], "identity": [{"ffn.name": "relu", "seed": 0}]})
    with pytest.raises(ValueError) as err:
        table.tables_for(runs, {"y": "r", "x": "r"})
    assert str(err.value) == "--baseline names experiments without finished runs: x, y"
    with pytest.raises(ValueError) as err:
        table.tables_for(runs, tune="optim.lrr")
    assert str(err.value) == "--tune 'optim.lrr' is not a config key of any run; keys: ffn.name, seed"


def test_the_tuned_key_needs_several_values_within_a_row_an_option_off_being_one_row():
    """_axes: a key tried at one value per row is a column, not tuned; rows told apart by a setting that is off
    (None) in some runs keep those runs as a row of their own."""
    one_each = pd.DataFrame({"ffn.name": ["relu", "swiglu"], "optim.lr": [1e-3, 3e-3]}).astype(object)
    assert table._axes(one_each, ["ffn.name", "optim.lr"], "optim.lr") == ("optim.lr", None)
    off = pd.DataFrame({"model.logit_softcap": [None, None, 30.0], "optim.lr": [1e-3, 3e-3, 1e-3]}).astype(object)
    assert table._axes(off, ["model.logit_softcap", "optim.lr"], "optim.lr") == (None, "optim.lr")
    budgets = pd.DataFrame({"train.steps": [300, 600, 300, 600], "optim.lr": [1e-3, 1e-3, 3e-3, 3e-3]}).astype(object)
    assert table._axes(budgets, ["train.steps", "optim.lr"], "optim.lr") == ("train.steps", "optim.lr")


def test_a_key_without_a_short_name_is_shown_by_its_last_part():
    assert table.short("optim.lr") == "lr"
    assert table.short("model.attn.cap") == "cap" and table.short("seed") == "seed"


def test_rows_sharing_a_name_are_labelled_by_every_key_they_differ_in_an_option_off_among_them(tmp_path):
    write_run(tmp_path, BASE, extra={"model.d_model": 64, "model.n_layers": 2})
    write_run(tmp_path, BASE, extra={"model.d_model": 128, "model.n_layers": 4})
    write_run(tmp_path, "layer-pre-swiglu-matched", extra={"model.logit_softcap": None})  # off beside a number
    write_run(tmp_path, "layer-pre-swiglu-matched", extra={"model.logit_softcap": 30.0})
    rows = built(tmp_path).rows
    assert rows["label"].tolist() == [
        f"{BASE} (model.d_model=128, model.n_layers=4)", f"{BASE} (model.d_model=64, model.n_layers=2)",
        "layer-pre-swiglu-matched (model.logit_softcap=30)", "layer-pre-swiglu-matched (model.logit_softcap=None)"]
    assert rows["tried"].isna().all()  # nothing tuned: no count of settings tried


def test_a_warmup_columns_reference_is_its_most_common_setting_ties_going_to_the_largest(tmp_path):
    for seed in range(2):
        for warmup in (0, 100):
            write_run(tmp_path / "tie", BASE, seed=seed, warmup=warmup)
            write_run(tmp_path / "most", BASE, seed=seed, warmup=warmup)
    write_run(tmp_path / "most", BASE, seed=2, warmup=0)
    assert (built(tmp_path / "tie").reference, built(tmp_path / "most").reference) == (100, 0)


def test_a_table_on_validation_reports_validation_bits_per_byte(tmp_path):
    write_run(tmp_path, BASE, seed=0, final=5.0)
    write_run(tmp_path, BASE, seed=1, final=5.3, final_test_loss=None)  # one run without a test split
    t = built(tmp_path)
    assert t.split == "validation" and t.rows.iloc[0]["final_bpb"] == pytest.approx((5.0 + 5.3) / 2 / 3)
