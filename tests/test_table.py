"""The results table on hand-made run files: statistics, robustness, baseline choice and outputs."""

import hashlib
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from mbexp import table

ROOT = Path(__file__).resolve().parents[1]
BASE = "layer-pre-relu-matched"


def write_run(
    results: Path,
    row: str = BASE,
    *,
    seed: int = 0,
    final: float | None = 5.0,
    experiment: str = "quick",
    warmup: int = 0,
    status: str = "completed",
    curve: list[float] | None = None,
    **fields,
) -> Path:
    """Write runs/<experiment>/<variant>/seed=<s>/summary.json (and metrics.jsonl if `curve`); returns the run dir."""
    norm, placement, ffn, hidden = row.split("-")
    row_id = fields.pop("row_id", hashlib.sha1(f"{experiment}/{row}".encode()).hexdigest()[:8])
    variant = fields.pop("variant", f"{row}-wu{warmup}-{row_id}")
    summary = {
        "status": status, "experiment": experiment, "variant": variant, "row": row, "row_id": row_id, "seed": seed,
        "axes": {"norm": norm, "placement": placement, "ffn": ffn, "hidden": hidden, "warmup_steps": warmup},
        "steps": 300, "step": 300, "params": 1311360, "params_non_embedding": 786432, "params_ffn": 524288,
        "d_ff": 512, "early_step": 37, "early_val_loss": 6.0, "early_val_bpb": 2.3,
        "final_val_loss": final if status == "completed" else None,
        "final_val_bpb": final / 3 if final is not None and status == "completed" else None,
        "tokens_seen": 614400, "wall_time_s": 55.0, "tokens_per_s": 10000.0,
        "git_commit": "abc123", "versions": {"torch": "2.13.0"}, "config_hash": "0" * 8,
    } | fields  # fmt: skip
    run_dir = results / "runs" / experiment / variant / f"seed={seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    if curve:
        records = [{"step": 10 * i, "train_loss": v + 0.1, "lr": 1e-3, "grad_norm": 1.0, "tokens": 100 * i,
                    "tokens_per_s": 1e4} for i, v in enumerate(curve)]  # fmt: skip
        records += [{"step": 10 * i, "val_loss": v, "val_bpb": v / 3, "tokens": 100 * i} for i, v in enumerate(curve)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def row_of(results: Path, label: str, experiment: str = "quick", **kwargs) -> pd.Series:
    t = table.build_tables(results, **kwargs)[experiment]
    return t.set_index("label").loc[label]


def test_mean_and_sample_std(tmp_path):
    for seed, final in enumerate([5.0, 5.2, 5.6]):
        write_run(tmp_path, seed=seed, final=final)
    row = row_of(tmp_path, BASE)
    assert row["n"] == 3
    assert row["final_mean"] == pytest.approx(statistics.mean([5.0, 5.2, 5.6]))
    assert row["final_std"] == pytest.approx(statistics.stdev([5.0, 5.2, 5.6]))
    assert row["final_bpb"] == pytest.approx(statistics.mean([5.0, 5.2, 5.6]) / 3)
    assert "| 5.267 ± 0.3055 (3) | baseline |" in table.to_markdown(table.build_tables(tmp_path)["quick"])


def test_paired_interval_matches_scipy(tmp_path):
    base, better, noisy = [5.0, 5.3, 4.9, 5.1], [4.8, 5.15, 4.75, 4.85], [5.1, 5.1, 4.9, 5.0]
    for seed in range(4):
        write_run(tmp_path, BASE, seed=seed, final=base[seed])
        write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, final=better[seed])
        write_run(tmp_path, "layer-pre-gelu-matched", seed=seed, final=noisy[seed])
    t = table.build_tables(tmp_path)["quick"].set_index("label")
    for label, values in [("layer-pre-swiglu-matched", better), ("layer-pre-gelu-matched", noisy)]:
        ci = stats.ttest_rel(values, base).confidence_interval(0.95)
        row = t.loc[label]
        assert row["ci_method"] == "paired"
        assert row["delta"] == pytest.approx(statistics.mean(values) - statistics.mean(base))
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert not t.loc["layer-pre-swiglu-matched", "within_noise"] and t.loc["layer-pre-gelu-matched", "within_noise"]
    shown = table.display(t.reset_index()).set_index("variant")["Δ vs baseline (95% CI)"]
    assert shown["layer-pre-gelu-matched"].endswith(table.NOISE)
    assert not shown["layer-pre-swiglu-matched"].endswith(table.NOISE)
    assert shown[BASE] == "baseline"


def test_welch_interval_matches_scipy(tmp_path):
    base, other = [5.0, 5.3, 4.9], [4.6, 4.7, 4.9, 4.65]
    for seed, final in enumerate(base):
        write_run(tmp_path, BASE, seed=seed, final=final)
    for seed, final in enumerate(other, start=10):  # no shared seeds
        write_run(tmp_path, "rms-pre-relu-matched", seed=seed, final=final)
    row = row_of(tmp_path, "rms-pre-relu-matched")
    ci = stats.ttest_ind(other, base, equal_var=False).confidence_interval(0.95)
    assert row["ci_method"] == "welch"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))


def test_one_shared_seed_falls_back_to_welch(tmp_path):
    for seed, final in enumerate([5.0, 5.3, 4.9]):
        write_run(tmp_path, BASE, seed=seed, final=final)
    for seed, final in [(0, 4.6), (7, 4.8)]:
        write_run(tmp_path, "rms-pre-relu-matched", seed=seed, final=final)
    row = row_of(tmp_path, "rms-pre-relu-matched")
    ci = stats.ttest_ind([4.6, 4.8], [5.0, 5.3, 4.9], equal_var=False).confidence_interval(0.95)
    assert row["ci_method"] == "welch"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))


def test_diverged_run_counted_not_averaged(tmp_path, caplog):
    write_run(tmp_path, seed=0, final=5.0)
    write_run(tmp_path, seed=1, final=5.4)
    write_run(tmp_path, seed=2, status="diverged", early_val_loss=9.0)
    write_run(tmp_path, seed=3, status="failed")  # not finished: ignored, like a run in progress
    write_run(tmp_path, seed=4, status="running")
    row = row_of(tmp_path, BASE)
    assert (row["diverged"], row["finished"], row["n"]) == (1, 3, 2)
    assert row["final_mean"] == pytest.approx(5.2)
    assert row["early_log_ppl"] == pytest.approx(6.0)
    assert "| 1/3 |" in table.to_markdown(table.build_tables(tmp_path)["quick"])
    assert not caplog.records


def test_bad_summaries_reported_skipped_and_strict_raises(tmp_path, caplog):
    write_run(tmp_path, seed=0, final=5.0)
    bad_json = write_run(tmp_path, seed=1) / "summary.json"
    bad_json.write_text('{"status": "completed", "experim')
    partial = write_run(tmp_path, seed=2) / "summary.json"
    partial.write_text(json.dumps({k: v for k, v in json.loads(partial.read_text()).items() if k != "row_id"}))
    wrong_type = write_run(tmp_path, seed=3, final_val_loss="5.1")
    runs = table.collect_runs(tmp_path)
    assert runs["seed"].tolist() == [0]
    for path in (bad_json, partial, wrong_type / "summary.json"):
        assert str(path) in caplog.text
    with pytest.raises(table.SummaryError, match="seed=1"):
        table.collect_runs(tmp_path, strict=True)


def test_experiments_never_mix(tmp_path):
    write_run(tmp_path, experiment="a", seed=0, final=5.0, row_id="same")
    write_run(tmp_path, experiment="a", seed=1, final=5.2, row_id="same")
    write_run(tmp_path, experiment="b", seed=0, final=7.0, row_id="same")
    tables = table.build_tables(tmp_path)
    assert sorted(tables) == ["a", "b"]
    assert tables["a"]["n"].tolist() == [2] and tables["a"]["final_mean"].iloc[0] == pytest.approx(5.1)
    assert tables["b"]["n"].tolist() == [1] and tables["b"]["final_mean"].iloc[0] == pytest.approx(7.0)


def test_seed_recorded_twice_counts_once(tmp_path):
    write_run(tmp_path, seed=0, final=5.0, row_id="r1", variant="v1")
    write_run(tmp_path, seed=0, final=6.0, row_id="r1", variant="v2", step=150, status="interrupted")
    write_run(tmp_path, seed=1, final=5.5, row_id="r1", variant="v1")
    write_run(tmp_path, seed=1, final=5.3, row_id="r1", variant="v2")
    row = row_of(tmp_path, BASE)
    assert row["n"] == 2 and row["finished"] == 2
    assert row["final_mean"] == pytest.approx((5.0 + 5.3) / 2)  # completed beats interrupted; then the last path


def test_warmup_columns_and_sensitivity(tmp_path):
    for warmup, finals in [(0, [5.5, 5.7]), (100, [5.1, 5.1]), (500, [5.2, 5.4])]:
        for seed, final in enumerate(finals):
            write_run(tmp_path, BASE, seed=seed, final=final, warmup=warmup, row_id="a")
    for warmup in (0, 100, 500):
        for seed in range(2):
            status = "diverged" if warmup == 0 else "completed"
            write_run(tmp_path, "rms-pre-relu-matched", seed=seed, final=5.0, warmup=warmup, status=status, row_id="b")
    t = table.build_tables(tmp_path)["quick"].set_index("label")
    base = t.loc[BASE]
    assert [base["final_wu0"], base["final_wu100"], base["final_wu500"]] == pytest.approx([5.6, 5.1, 5.3])
    assert base["warmup_sensitivity"] == pytest.approx(0.5)
    assert base["final_mean"] == pytest.approx(5.3) and base["n"] == 2  # the longest warm-up is the reference
    assert base["diverged"] == 0 and base["finished"] == 6
    rms = t.loc["rms-pre-relu-matched"]
    assert math.isinf(rms["final_wu0"]) and math.isinf(rms["warmup_sensitivity"])
    assert (rms["diverged"], rms["finished"]) == (2, 6)
    shown = table.display(t.reset_index()).set_index("variant")
    assert list(shown.columns)[5:8] == ["wu=0", "wu=100", "wu=500"]
    assert shown.loc["rms-pre-relu-matched", ["wu=0", "warm-up sens.", "diverged"]].tolist() == ["div.", "∞", "2/6"]
    assert shown.loc[BASE, "warm-up sens."] == "0.500"


def test_single_warmup_has_no_sensitivity_column(tmp_path):
    write_run(tmp_path, warmup=50)
    shown = table.display(table.build_tables(tmp_path)["quick"])
    assert "wu=50" in shown.columns and "warm-up sens." not in shown.columns


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
    t = table.build_tables(tmp_path)["quick"]
    assert t.loc[t["baseline"], "label"].tolist() == [expected]


def test_baseline_override(tmp_path):
    write_run(tmp_path, BASE, final=5.0)
    write_run(tmp_path, "layer-pre-swiglu-matched", final=4.8)
    t = table.build_tables(tmp_path, baselines={"quick": "layer-pre-swiglu-matched"})["quick"].set_index("label")
    assert t.loc["layer-pre-swiglu-matched", "baseline"] and not t.loc[BASE, "baseline"]
    assert t.loc[BASE, "delta"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="nope"):
        table.build_tables(tmp_path, baselines={"quick": "nope"})
    with pytest.raises(ValueError, match="other"):
        table.build_tables(tmp_path, baselines={"other": BASE})


def test_row_order_and_label_clash(tmp_path):
    rows = ["rms-pre-relu-matched", "layer-pre-swiglu-8_3d", "layer-post-relu-matched", "layer-pre-swiglu-matched"]
    for row in rows:
        write_run(tmp_path, row)
    write_run(tmp_path, BASE, row_id="aaaaaaa1")
    write_run(tmp_path, BASE, row_id="bbbbbbb2")
    labels = table.build_tables(tmp_path)["quick"]["label"].tolist()
    assert labels == [
        f"{BASE}-aaaaaa", f"{BASE}-bbbbbb", "layer-pre-swiglu-matched", "layer-pre-swiglu-8_3d",
        "layer-post-relu-matched", "rms-pre-relu-matched",
    ]  # fmt: skip


def test_load_curves_reads_eval_records(tmp_path):
    run_dir = write_run(tmp_path, curve=[7.0, 6.0, 5.5])
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 20, "val_loss": 5.4, "val_bpb": 1.8, "tokens": 200}\n{"step": 30, "val_lo')
    curves = table.load_curves([run_dir])
    assert curves["step"].tolist() == [0, 10, 20] and curves["val_loss"].tolist() == [7.0, 6.0, 5.4]


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
    runs = table.collect_runs(tmp_path)
    tables = table.tables_for(runs)
    written = table.write_outputs(tmp_path, tables, runs)
    names = sorted(p.name for paths in written.values() for p in paths)
    exts = ["csv", "md", "tex"]
    expected = [f"{e}.{x}" for e in ("other", "quick") for x in exts] + [f"{e}_{k}.png" for e in ("other", "quick")
                                                                         for k in ("curves", "warmup")]  # fmt: skip
    assert names == sorted(expected)
    md = (tmp_path / "tables" / "quick.md").read_text()
    header, rows = md.splitlines()[0], [line for line in md.splitlines()[2:] if line.startswith("|")]
    columns = ["variant", "params", "d_ff", "early log-ppl", "final log-ppl", "Δ vs baseline (95% CI)", "wu=0",
               "wu=100", "warm-up sens.", "diverged", "tokens/s"]  # fmt: skip
    assert header == "| " + " | ".join(columns) + " |"
    assert len(rows) == 3 and all(row.count("|") == len(columns) + 1 for row in rows)
    assert "| layer-post-gelu-4d | 1,311,360 | 512 | — | div. | — | — | div. | — | 3/3 | — |" in rows
    tex = (tmp_path / "tables" / "quick.tex").read_text()
    assert all(cmd in tex for cmd in (r"\toprule", r"\midrule", r"\bottomrule", r"layer-post-gelu-4d", r"d\_ff"))
    csv = pd.read_csv(tmp_path / "tables" / "quick.csv")
    assert {"final_mean", "final_std", "n", "final_bpb", "delta", "ci_low", "ci_high"} <= set(csv.columns)
    before = {p: p.read_bytes() for paths in written.values() for p in paths}
    table.write_outputs(tmp_path, table.build_tables(tmp_path), table.collect_runs(tmp_path))
    assert {p: p.read_bytes() for p in before} == before


def make_table(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "scripts" / "make_table.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_cli_without_results_prints_one_line(tmp_path):
    done = make_table("--results", str(tmp_path / "results"))
    assert done.returncode == 0
    assert done.stdout.strip().count("\n") == 0 and "no finished runs" in done.stdout
    assert "Traceback" not in done.stderr


def test_cli_writes_and_prints_tables(tmp_path):
    write_sweep(tmp_path)
    bad = write_run(tmp_path, "rms-post-relu-matched") / "summary.json"
    bad.write_text("{")
    done = make_table("--results", str(tmp_path), "--baseline", "quick=rms-pre-swiglu-matched")
    assert done.returncode == 0, done.stderr
    assert "## other" in done.stdout and "## quick" in done.stdout and "| rms-pre-swiglu-matched |" in done.stdout
    assert str(bad) in done.stderr and "Traceback" not in done.stderr
    strict = make_table("--results", str(tmp_path), "--strict")
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    [line] = strict.stderr.strip().splitlines()
    assert line.startswith(f"error: {bad}: unreadable JSON")
