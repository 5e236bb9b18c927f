"""A ladder's per-size rules (docs/ladders.md, docs/ladder-fits.md#lack-of-fit), each against an independent value:
scipy, by hand."""

import json
import math
import shutil

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from test_scaling import curve, write_ladder
from test_table_rules import holm_by_hand
from tiny import REPO, committed_tables

from mbexp.analysis import studies, table
from mbexp.analysis.ladder import checks, powerlaw
from mbexp.claims.evaluate import evaluate_claim
from mbexp.claims.parse import load_claims


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


def test_lack_of_fit_is_the_f_test_of_the_residuals_against_the_pooled_seed_variance():
    """Two points of 3 seeds, one parameter: residual MS = 3·(0.1² + 0.2²)/1 = 0.15; within = (2 + 0.5)/4 = 0.625;
    F = 0.24 on (1, 4) df."""
    points = pd.DataFrame({"losses": [pd.Series([4.0, 5.0, 6.0]), pd.Series([5.0, 5.5, 6.0])], "n": [3, 3],
                           "residual": [0.1, -0.2]})
    got = checks.lack_of_fit(points, 1)
    assert got["F"] == pytest.approx(0.24, rel=1e-12) and (got["df1"], got["df2"]) == (1, 4)
    assert got["p"] == pytest.approx(scipy_stats.f.sf(0.24, 1, 4), rel=1e-12)
    assert math.isnan(checks.lack_of_fit(points, 2)["p"])  # no residual df


def test_the_panel_says_rises_or_falls_only_when_every_form_agrees():
    verdict = checks.verdict
    assert verdict(["rises", "rises", "crosses 1 upward"]) == "rises"
    assert verdict(["falls", "crosses 1 downward"]) == "falls"
    assert verdict(["rises", "not resolved", "rises"]) == "form-dependent"
    assert verdict(["rises", "falls"]) == "form-dependent"
    assert verdict(["not resolved", "not resolved"]) == "not resolved"


def test_a_draw_with_a_loss_at_or_below_zero_is_no_fit():
    """A 2-seed point's bootstrap draw (t on 1 df) can fall below 0: the refit raises, and the bootstrap drops it."""
    points = pd.DataFrame({"variant": ["a"] * 3, "compute": [1e12, 2e12, 4e12], "loss": [5.0, 4.0, -0.1]})
    with pytest.raises(RuntimeError, match="at or below 0"):
        powerlaw.fit(points)


def test_a_trend_claim_names_its_slow_starts_edge_lrs_and_permutation_p_on_the_committed_replication():
    results = REPO / "results"
    tables = committed_tables("ladder_wsd_rep_cpu")
    studies.annotate(tables, results)
    claim = next(c for c in load_claims(results / "claims.yaml") if c.id == "ladderwsd-rep-deficit-shrinks-600")
    got = evaluate_claim(claim, tables["ladder_wsd_rep_cpu"])

    # by hand from the summaries: early loss > 5 robust SDs (1.4826 MAD) above the median of the cell's other seeds
    cells = {}
    for path in (results / "runs" / "ladder_wsd_rep_cpu").glob("*/seed=*/summary.json"):
        s = json.loads(path.read_text())
        if s["steps"] == 600 and s["status"] == "completed":
            cells.setdefault(s["row"], {})[s["seed"]] = s["early_val_loss"]
    slow = {}
    for row, early in cells.items():
        for seed, value in early.items():
            others = pd.Series({k: v for k, v in early.items() if k != seed})
            if value - others.median() > 5 * 1.4826 * (others - others.median()).abs().median():
                slow.setdefault(row, []).append(seed)
    assert slow == {"layer-pre-relu-matched-ladder96": [208]}
    assert all(c.slow == slow for c in got.comparisons) and "slow starts" in got.tags

    # by hand from the scan: each row's best mean validation loss over the grid at 600 steps; an end: an edge
    losses = {}
    for path in (results / "runs" / "ladder_wsd_cpu_scan").glob("*/seed=*/summary.json"):
        s = json.loads(path.read_text())
        if s["steps"] == 600:
            losses.setdefault(s["row"], {}).setdefault(s["identity"]["optim.lr"], []).append(s["final_val_loss"])
    grid = sorted(claim.protocol["lr_grid"])
    edges = {}
    for row, by_lr in losses.items():
        best = min(by_lr, key=lambda lr: sum(by_lr[lr]) / len(by_lr[lr]))
        if best in (grid[0], grid[-1]):
            edges[row] = "low" if best == grid[0] else "high"
    assert edges == {"layer-pre-geglu-matched-ladder96": "low"} and "LR at grid edge" in got.tags
    assert any("geglu-matched-ladder96 (low)" in q for q in got.qualifiers)

    # both p's a trend claim reads: the permutation p is Holm-adjusted too, and p_holm is the larger
    for c in got.comparisons:
        assert 0 < c.p_permutation <= c.p_permutation_holm <= c.p_holm < 0.05


def test_the_readmes_ladder_lines_read_each_ladders_largest_budget_and_skip_a_ladder_not_yet_fitted():
    from mbexp.analysis.ladder.render import readme_ladder_lines

    def trend(experiment, steps, panel, fit_free, p=math.nan):
        return {"experiment": experiment, "steps": steps, "variant": "layer-pre-geglu-matched",
                "baseline": "layer-pre-relu-matched", "panel": panel, "fit_free": fit_free, "fit_free_p": p}

    trends = [trend("lad", 300, "rises", "shrinks", 0.02), trend("lad", 600, "rises", "shrinks", 0.01),
              trend("new", 600, "—", "—")]
    assert readme_ladder_lines(trends) == [
        "| geglu over relu | lad, train.steps=600 | **rises** | fit-free: the deficit shrinks with size (p 0.01) |"]


def declared_elsewhere(tmp_path, claim_id: str, experiment: str):
    """A committed claim, its experiment's and scan's tables from the committed runs, the scan's runs, and the
    history of a repository whose claims file is tracked but holds no commit declaring it as it now reads (its
    experiment's config is not there): (claim, tables, scan, history)."""
    from test_declarations import git

    from mbexp.claims.evaluate import scan_runs
    from mbexp.claims.provenance import History

    results = REPO / "results"
    tables = committed_tables(experiment, f"{experiment}_scan")
    studies.annotate(tables, results)
    claim = next(c for c in load_claims(results / "claims.yaml") if c.id == claim_id)
    (tmp_path / "results").mkdir()
    shutil.copy(results / "claims.yaml", tmp_path / "results" / "claims.yaml")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "results/claims.yaml")
    git(tmp_path, "commit", "-q", "-m", "declare")
    return claim, tables, scan_runs(claim, tables), History(tmp_path / "results" / "claims.yaml")


def exploratory_why(result) -> str:
    return next(q for q in result.qualifiers if q.startswith("exploratory:"))


def test_a_ladder_claim_reads_its_claims_files_history_and_its_studys_scan(tmp_path):
    """evaluate_claim passes a trend claim's git history and scan runs on: the committed μP ladder's runs, read
    against a repository that does not declare the claim as it reads (declared_elsewhere), are exploratory for
    that reason, and the scan's runs are counted among those read."""
    claim, tables, scan, history = declared_elsewhere(tmp_path, "mupladder-deficit-shrinks-600", "mup_ladder_cpu")
    got = evaluate_claim(claim, tables["mup_ladder_cpu"], history, scan)
    planned = tables["mup_ladder_cpu"].runs
    planned = planned[planned["seed"].isin(claim.seeds) & (planned["steps"] == 600)]
    assert got.standing == "exploratory" and got.runs_read == len(planned) + len(scan[scan["label"].isin(
        set(planned["label"]))]) > len(planned)
    why = exploratory_why(got)
    assert why.endswith("(its current declaration is not committed)"), why  # None: "not tracked by git"


@pytest.mark.parametrize("claim_id, experiment", [("mup-lr-transfers-wide", "width_lr_mup_wide_cpu"),
                                                  ("muon-beats-adamw-780", "muon_wsd_cpu")])
def test_a_transfer_or_family_claim_reads_its_claims_files_history_and_its_studys_scan(tmp_path, claim_id,
                                                                                      experiment):
    """As the ladder test above, for evaluate_claim's other two branches: the reason read from the history, and
    the scan's runs among those read."""
    claim, tables, scan, history = declared_elsewhere(tmp_path, claim_id, experiment)
    got = evaluate_claim(claim, tables.get(experiment), history, scan)
    alone = evaluate_claim(claim, tables.get(experiment), history, None)
    assert got.standing == "exploratory" and got.runs_read > alone.runs_read
    why = exploratory_why(got)
    assert why.endswith("(its current declaration is not committed)"), why  # None: "not tracked by git"


def test_rows_split_by_lr_read_the_baseline_at_their_own_size_and_lr(tmp_path):
    """An LR grid that is not the tuned key splits each size's rows by LR: each row's baseline is the baseline
    variant's row at its own size and LR, and each baseline row is its own, whatever order the runs come in."""
    for sub, lr in (("b", 1e-2), ("a", 3e-3)):
        write_ladder(tmp_path / sub, {"swiglu": curve(0.36, 4.2), "relu": curve(0.3, 4.3)},
                     lr=lambda ffn, size, lr=lr: lr)
        for run in (tmp_path / sub / "runs" / "synth").iterdir():
            shutil.copytree(run, tmp_path / "runs" / "synth" / f"{run.name}-{sub}")
    built = table.build_tables(tmp_path, tune="norm.name", baselines={"synth": "layer-pre-relu-matched-ladder64 "
                                                                               "(optim.lr=0.003)"})["synth"]
    assert len(built.baselines) == 16 and all("(optim.lr=" in label for label in built.baselines)
    assert built.baselines == {label: label.replace("swiglu", "relu") for label in built.baselines}
    rows = built.rows.set_index("label")
    assert (rows.loc[[label for label in rows.index if "relu" in label and "swiglu" not in label], "mark"]
            == "baseline").all()
