"""A declared LR study end to end (docs/studies.md): scan, choice on validation, planned seeds, the table's chosen
LR and edge flag, the own-LR condition, and the compute against the naive grid."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from tiny import REPO, summaries

from mbexp import study as study_cli
from mbexp.analysis import studies
from mbexp.analysis.table import build_tables
from mbexp.claims_file import ClaimsError, load_studies, parse_studies, parse_study
from mbexp.declarations import load_claims

STUDY = """\
margin: 0.02
claims:
  - id: glu-tiny
    claim: SwiGLU beats ReLU
    paper: test
    experiment: smoke
    study: tiny
    at: {{train.steps: 16}}
    baseline: layer-pre-relu-matched
    rows: [layer-pre-swiglu-matched]
    hypothesis: better
    seeds: [1, 2]
    conditions: {{own_lr: true, max_epochs: 1}}
studies:
  tiny:
    experiment: smoke
    rows: {{ffn: [relu, swiglu]}}
    lr_grid: [1.0e-3, 1.0e-2]
    scan_seeds: [0]
    seeds: [1, 2]
    budgets: [8, 16]
    overrides: [data.cache_dir={cache}, logger=none, optim.warmup_steps=2, optim.cooldown_fraction=0.25,
                train.eval_every=4, train.log_every=4, train.checkpoint_every=4]
"""


def test_a_study_refuses_a_seed_that_both_scans_and_confirms():
    spec = {"experiment": "e", "rows": {"ffn": ["relu"]}, "lr_grid": [1e-3, 1e-2], "scan_seeds": [0],
            "seeds": [0, 1], "budgets": [8]}
    with pytest.raises(ClaimsError, match="both scan and planned seeds"):
        parse_study("s", spec, "claims file x")
    with pytest.raises(ClaimsError, match="select_at=9 is not one of the budgets"):
        parse_study("s", spec | {"seeds": [1], "select_at": 9}, "claims file x")


def test_a_study_reusing_a_scan_inherits_it_and_its_claims_digest_follows_it(tmp_path):
    rep = ("  rep:\n    experiment: smoke_rep\n    scan_of: tiny\n    rows: {{ffn: [swiglu]}}\n"
           "    seeds: [3, 4]\n")
    text = STUDY + rep
    claim = ("  - id: glu-rep\n    claim: SwiGLU beats ReLU\n    paper: test\n    experiment: smoke_rep\n"
             "    study: rep\n    baseline: layer-pre-relu-matched\n    rows: [layer-pre-swiglu-matched]\n"
             "    hypothesis: better\n    seeds: [3, 4]\nstudies:\n")
    (tmp_path / "claims.yaml").write_text(text.replace("studies:\n", claim, 1).format(cache="c"))
    found = load_studies(tmp_path)
    tiny, rep = found["tiny"], found["rep"]
    assert (rep.lr_grid, rep.scan_seeds, rep.budgets, rep.select_at, rep.overrides) == \
        (tiny.lr_grid, tiny.scan_seeds, tiny.budgets, tiny.select_at, tiny.overrides)
    assert rep.scan_experiment == "smoke_scan" and rep.experiment == "smoke_rep" and rep.seeds == (3, 4)
    digests = {c.id: c.digest for c in load_claims(tmp_path / "claims.yaml")}
    # the reused scan is part of the replication's declaration: editing its grid edits the replication's claim
    (tmp_path / "claims.yaml").write_text(text.replace("studies:\n", claim, 1).format(cache="c").replace(
        "lr_grid: [1.0e-3, 1.0e-2]", "lr_grid: [1.0e-3, 3.0e-3]"))
    edited = {c.id: c.digest for c in load_claims(tmp_path / "claims.yaml")}
    assert edited["glu-rep"] != digests["glu-rep"] and edited["glu-tiny"] != digests["glu-tiny"]

    c = studies.cost(rep, tmp_path)  # no runs yet; its design counts its planned seeds only
    assert c["design_steps"] == 18 * 1 * 2 and c["naive_steps"] == 1 * 2 * 2 * (8 + 16) and c["steps"] == 0


REP = {"experiment": "e", "scan_of": "tiny", "rows": {"ffn": ["swiglu"]}, "seeds": [3]}


@pytest.mark.parametrize("change, message", [
    ({"lr_grid": [1e-3, 1e-2]}, "lr_grid come from the study whose scan it reuses"),
    ({"scan_of": "nope"}, "scan_of must name another study"),
    ({"scan_of": ["tiny"]}, "scan_of must name another study"),
    ({"experiment": "smoke"}, "need an experiment of their own"),
    ({"rows": {"ffn": ["gelu"]}}, "must be among the rows of tiny"),
    ({"seeds": [0]}, "both scan and planned seeds"),
])
def test_a_study_reusing_a_scan_refuses_what_it_cannot_inherit(change, message):
    tiny = yaml.safe_load(STUDY.format(cache="c"))["studies"]["tiny"]
    with pytest.raises(ClaimsError, match=message):
        parse_studies({"tiny": tiny, "rep": REP | change}, "claims file x")


def test_ctrl_c_during_a_study_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))

    def interrupted(argv):
        raise KeyboardInterrupt  # Ctrl-C reaches the study while it waits for a sweep

    monkeypatch.setattr(study_cli.subprocess, "call", interrupted)
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path)])
    assert stop.value.code == 130
    assert capsys.readouterr().err == "interrupted: rerun python -m mbexp.study tiny to resume\n"


@pytest.mark.slow
def test_the_study_command_scans_chooses_and_runs_the_planned_seeds(tmp_path, cache):
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.yaml").write_text(STUDY.format(cache=cache))
    done = subprocess.run([sys.executable, "-m", "mbexp.study", "tiny", "--results", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[2/3] chosen on validation at 16 steps" in done.stdout
    runs = summaries(results)
    scan = [s for s in runs if s["experiment"] == "smoke_scan"]
    planned = [s for s in runs if s["experiment"] == "smoke"]
    assert len(scan) == 2 * 2 * 2 and {s["seed"] for s in scan} == {0}  # rows x LRs x budgets, scan seed only
    assert len(planned) == 2 * 2 * 2 and {s["seed"] for s in planned} == {1, 2}
    assert all(s["status"] == "completed" for s in runs)

    # the choice: the LR with the lower mean validation loss at 16 steps over the scan seed, per row
    best = {}
    for s in scan:
        if s["steps"] == 16:
            best.setdefault(s["axes"]["ffn"], []).append((s["final_val_loss"], s["identity"]["optim.lr"]))
    chosen = {ffn: min(v)[1] for ffn, v in best.items()}
    assert {(s["axes"]["ffn"], s["identity"]["optim.lr"]) for s in planned} == set(chosen.items())

    tables = build_tables(results)
    studies.annotate(tables, results)
    table = tables["smoke"]
    rows = table.rows.set_index("label")
    assert rows.loc["layer-pre-relu-matched", "lr_chosen"] == chosen["relu"]
    assert set(rows["lr_edge"]) <= {"low", "high"} and rows["lr_own"].all()  # a two-value grid: always an edge
    assert any("lr (scan)" in note for note in table.notes)

    # the branch runs count their own steps only: spent = by design = 18 steps per (row, LR or seed)
    c = studies.cost(load_studies(results)["tiny"], results)
    assert c["design_steps"] == 18 * 2 * (2 * 1 + 2) == c["steps"]
    assert c["naive_steps"] == 2 * 2 * 3 * (8 + 16) and c["design_ratio"] == pytest.approx(144 / 288)
    assert c["unbranched"] == 0 and "from scratch" not in "".join(studies.cost_lines(results))

    # the claim's conditions hold (each row at its scan's LR) and it was declared before its runs
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_table", REPO / "scripts" / "make_table.py")
    make_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_table)
    assert make_table.main(["--results", str(results), "--no-wandb"]) == 0
    claims = pd.read_csv(results / "tables" / "claims.csv").iloc[0]
    assert claims["standing"] == "confirmatory" and pd.isna(claims["conditions_unmet"])
    edge = claims["qualifiers"].partition("best LR at an end of the scan's grid for ")[2]  # two LRs: an end
    assert "relu (" in edge and "swiglu (" in edge
    shown = (results / "tables" / "smoke.md").read_text()
    assert "lr (scan)" in shown and "edge" in shown

    # a smaller budget trained from scratch (no branch record) costs its trunk again, and the cost line says so
    path = next(p for p in sorted((results / "runs" / "smoke").glob("*/seed=*/summary.json"))
                if json.loads(p.read_text())["steps"] == 8)
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "branched"}))
    c = studies.cost(load_studies(results)["tiny"], results)
    assert (c["unbranched"], c["unbranched_steps"], c["steps"]) == (1, 6, 18 * 2 * 4 + 6)
    assert "1 run(s) of a smaller budget trained from scratch, not branched: 6 steps beyond a branch" in "".join(
        studies.cost_lines(results))
