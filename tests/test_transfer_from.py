"""A study declared with `transfer_from` (docs/studies.md): its scan trains the base rows only, and every row runs
its planned seeds at its base row's choice, which counts as the row's own LR."""

import subprocess
import sys

import pytest
import yaml
from test_study import STUDY, write_scan
from tiny import REPO, summaries

from mbexp import RESULTS_DIR
from mbexp.analysis import lr_scan, studies
from mbexp.analysis.table import build_tables
from mbexp.claims import ClaimsError
from mbexp.study import command as study_cli
from mbexp.study.protocol import StudyError, choose
from mbexp.study.spec import load_studies, parse_study

TRANSFER = STUDY.replace("    scan_seeds: [0]\n", "    scan_seeds: [0]\n    transfer_from: {{ffn: relu}}\n")


def test_only_the_base_rows_are_scanned_and_every_row_takes_its_base_choice(tmp_path):
    (tmp_path / "claims.yaml").write_text(TRANSFER.format(cache="c"))
    study = load_studies(tmp_path)["tiny"]
    assert study.scanned_rows == {"ffn": ["relu"]} and study.scan_row_values() == [("relu",)]
    assert "ffn=relu" in study_cli.scan_command(study) and "ffn=relu,swiglu" not in study_cli.scan_command(study)
    with pytest.raises(StudyError, match="2 scan run"):
        choose(study, tmp_path)
    write_scan(tmp_path, {("relu", lr, 16): 5.0 + lr for lr in study.grid})  # no swiglu scan run at all
    choices = choose(study, tmp_path)
    assert {values: c.value for values, c in choices.items()} == {("relu",): 1e-3, ("swiglu",): 1e-3}
    confirm = study_cli.confirm_commands(study, choices)
    lrs = {next(a for a in c if a.startswith("ffn=")): next(a for a in c if a.startswith("optim.lr="))
           for c in confirm}
    assert lrs == {"ffn=relu": "optim.lr=0.001", "ffn=swiglu": "optim.lr=0.001"}
    for command in confirm:  # by default: one job at a time, into results/, under the study's experiment
        assert f"name={study.experiment}" in command and f"results_dir={RESULTS_DIR}" in command
        assert "seed=1,2" in command
        assert not any("launcher" in arg for arg in command)
    assert list(lr_scan.scan_frame(study, tmp_path)["ffn"]) == ["relu", "relu"]  # the scan's table: base rows


@pytest.mark.parametrize("transfer", ["{ffn: gelu}", "{optim.lr: 1.0e-3}", "[ffn, relu]"])
def test_transfer_from_names_one_row_key_and_one_of_its_values(transfer):
    spec = {"experiment": "e", "rows": {"ffn": ["relu", "swiglu"]}, "lr_grid": [1e-3, 1e-2], "scan_seeds": [0],
            "seeds": [1], "budgets": [8]}
    with pytest.raises(ClaimsError, match="transfer_from must map one row key to one of its values"):
        parse_study("s", spec | {"transfer_from": yaml.safe_load(transfer)}, "claims file x")


def test_the_study_command_scans_the_base_row_and_runs_every_row_at_its_lr(tmp_path, cache):
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.yaml").write_text(TRANSFER.format(cache=cache))
    done = subprocess.run([sys.executable, "-m", "mbexp.study", "tiny", "--results", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scanned at ffn=relu only" in done.stdout
    runs = summaries(results)
    scan = [s for s in runs if s["experiment"] == "smoke_scan"]
    planned = [s for s in runs if s["experiment"] == "smoke"]
    assert len(scan) == 1 * 2 * 2 and {s["axes"]["ffn"] for s in scan} == {"relu"}  # base row x LRs x budgets
    assert len(planned) == 2 * 2 * 2 and len({s["identity"]["optim.lr"] for s in planned}) == 1
    tables = build_tables(results)
    studies.annotate(tables, results)
    rows = tables["smoke"].rows
    assert rows["lr_own"].all() and rows["lr_chosen"].nunique() == 1
    c = studies.cost(load_studies(results)["tiny"], results)
    assert c["design_steps"] == 18 * (1 * 2 * 1 + 2 * 2) == c["steps"]
