"""A ladder's per-size rules (docs/table.md, "Ladders"), each against an independent value: scipy, by hand."""

import json
import shutil

import pytest
from scipy import stats as scipy_stats
from test_scaling import curve, write_ladder
from test_table_rules import holm_by_hand

from mbexp.analysis import table


def losses(results, ffn: str, size: str, steps: int = 600) -> list[float]:
    runs = sorted((results / "runs" / "synth" / f"{ffn}-{size}-{steps}").glob("seed=*"))
    return [json.loads((r / "summary.json").read_text())["final_test_loss"] for r in runs]


def test_each_rung_is_compared_with_the_baseline_at_its_own_size(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)}, noise=0.02)
    rows = table.build_tables(tmp_path)["synth"].rows.set_index("label")
    sizes = ["ladder64", "ladder96", "ladder128", "ladder160"]
    ps = []
    for size in sizes:
        mine, base = losses(tmp_path, "swiglu", size), losses(tmp_path, "relu", size)
        row = rows.loc[f"layer-pre-swiglu-matched-{size}"]
        assert row["baseline_row"] == f"layer-pre-relu-matched-{size}"
        assert row["delta"] == pytest.approx(sum(m - b for m, b in zip(mine, base)) / 3, abs=1e-12)
        assert row["p"] == pytest.approx(scipy_stats.ttest_rel(mine, base).pvalue, rel=1e-9)
        ps.append(row["p"])
        assert rows.loc[f"layer-pre-relu-matched-{size}", "mark"] == "baseline"
    assert list(rows.loc[[f"layer-pre-swiglu-matched-{s}" for s in sizes], "p_holm"]) == \
        pytest.approx(holm_by_hand(ps), rel=1e-9)  # one family: the table's four comparisons


def test_a_size_without_the_baseline_has_no_delta(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)}, noise=0.02)
    for steps in (200, 600):
        shutil.rmtree(tmp_path / "runs" / "synth" / f"relu-ladder160-{steps}")
    rows = table.build_tables(tmp_path)["synth"].rows.set_index("label")
    orphan = rows.loc["layer-pre-swiglu-matched-ladder160"]
    assert orphan["ci_method"] == "no baseline" and orphan["baseline_row"] == "" and orphan["delta"] != orphan["delta"]
    assert rows["p_holm"].notna().sum() == 3


def test_a_table_of_one_size_keeps_one_baseline(tmp_path):
    write_ladder(tmp_path, {"relu": curve(0.3, 4.3), "swiglu": curve(0.36, 4.2)}, sizes={"ladder64": 1e6})
    built = table.build_tables(tmp_path)["synth"]
    assert "baseline_row" not in built.rows
    assert set(built.baselines.values()) == {"layer-pre-relu-matched-ladder64"}
