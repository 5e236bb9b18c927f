"""A declared study end to end (docs/studies.md): scan, choice on validation, planned seeds, the table's chosen
LR and edge flag, the own-LR condition, and the compute against the naive grid."""

import contextlib
import functools
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from tiny import REPO, children, committed_tables, group_alive, make_table_here, summaries

from mbexp.analysis import lr_scan, studies
from mbexp.analysis.table import Table, build_tables
from mbexp.claims import ClaimsError
from mbexp.claims.parse import load_claims
from mbexp.study import command as study_cli
from mbexp.study.protocol import StudyError, choose, load_study, row_of, scan_losses
from mbexp.study.spec import load_studies, parse_studies, parse_study

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
    assert (rep.grid, rep.scan_seeds, rep.budgets, rep.select_at, rep.overrides) == \
        (tiny.grid, tiny.scan_seeds, tiny.budgets, tiny.select_at, tiny.overrides)
    assert rep.scan_experiment == "smoke_scan" and rep.experiment == "smoke_rep" and rep.seeds == (3, 4)
    digests = {c.id: c.digest for c in load_claims(tmp_path / "claims.yaml")}
    # the reused scan is part of the replication's declaration: editing its grid edits the replication's claim
    (tmp_path / "claims.yaml").write_text(text.replace("studies:\n", claim, 1).format(cache="c").replace(
        "lr_grid: [1.0e-3, 1.0e-2]", "lr_grid: [1.0e-3, 3.0e-3]"))
    edited = {c.id: c.digest for c in load_claims(tmp_path / "claims.yaml")}
    assert edited["glu-rep"] != digests["glu-rep"] and edited["glu-tiny"] != digests["glu-tiny"]

    c = studies.cost(rep, tmp_path)  # no runs yet; its design counts its planned seeds only
    assert c["design_steps"] == 18 * 1 * 2 and c["naive_steps"] == 1 * 2 * 2 * (8 + 16) and c["steps"] == 0
    own = studies.cost(tiny, tmp_path)  # a study with its own scan: its scan seeds join the naive grid
    assert own["naive_steps"] == 2 * 2 * 3 * (8 + 16) and own["design_steps"] == 18 * 2 * (2 * 1 + 2)


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


TINY = yaml.safe_load(STUDY.format(cache="c"))["studies"]["tiny"]


@pytest.mark.parametrize("change, message", [
    ({"overrides": "logger=none"}, "overrides must be a list of key=value strings, e.g. [logger=none], got "
                                   "'logger=none'"),
    ({"overrides": None}, "overrides must be a list of key=value strings"),
    ({"overrides": ["logger"]}, "overrides must be a list of key=value strings"),
    ({"overrides": ["optim.lr=0.1"]}, "overrides item 'optim.lr=0.1' sets optim.lr, which the study sets itself"),
    ({"overrides": ["+seed=3"]}, "overrides item '+seed=3' sets +seed"),
    ({"overrides": ["ffn=gelu"]}, "overrides item 'ffn=gelu' sets ffn"),
    ({"overrides": ["logger=none,wandb"]}, "'logger=none,wandb' is not one key=value (Hydra reads it as a sweep"),
    ({"seeds": [-1, 2]}, "seeds must be a non-empty list of distinct integers in [0, 2**32), got [-1, 2]"),
    ({"scan_seeds": [-3]}, "scan_seeds must be a non-empty list of distinct integers in [0, 2**32), got [-3]"),
    ({"scan_seeds": [True]}, "scan_seeds must be a non-empty list of distinct integers in [0, 2**32), got [True]"),
    ({"rows": {"ffn": ["relu,swiglu"]}}, "rows value ffn='relu,swiglu' is not one value (Hydra reads it as a sweep"),
    ({"rows": {"ffn": ["relu", "range(1,3)"]}}, "rows value ffn='range(1,3)' is not one value (Hydra reads it as a "
                                                "sweep"),
    ({"rows": {"ffn": ["[relu,gelu]"]}}, "rows value ffn='[relu,gelu]' is not one value (Hydra reads it as ['relu'"),
    ({"rows": {"model.d_model": ["1e2"]}}, "rows value model.d_model='1e2' is not one value (Hydra reads it as 100.0"),
    ({"rows": {"ffn": ["relu", None]}}, "rows value ffn=None is not one value (not text or a number)"),
    ({"rows": {"ffn": ["relu", "relu"]}}, "rows ffn: ['relu', 'relu'] lists a value twice"),
    ({"rows": {"optim.lr": [1e-3, 1e-2]}}, "rows key 'optim.lr' is set by the study command itself"),
    ({"rows": {"ffn": ["relu"], "seed": [1, 2]}}, "rows key 'seed' is set by the study command itself"),
    ({"rows": {"train.budgets": ["[8]"]}}, "rows key 'train.budgets' is set by the study command itself"),
    ({"lr_grid": [1.0e-3, 0.001, 1.0e-2]}, "lr_grid must list at least two positive learning rates, each once, got "
                                           "[0.001, 0.001, 0.01]"),
    ({"lr_grid": [0, 1.0e-2]}, "lr_grid must list at least two positive learning rates"),
    ({"lr_grid": yaml.safe_load("[1e-3, 1.0e-2]")}, "got ['1e-3', 0.01]: YAML reads 1e-3 as text, not a number; "
                                                    "write 1.0e-3"),
    ({"budgets": [1, 16], "select_at": True}, "select_at=True is not one of the budgets [1, 16]"),
    ({"select_at": 16.0}, "select_at=16.0 is not one of the budgets [8, 16]"),
    ({"budgets": [True, 16]}, "budgets must be distinct positive step counts, got [True, 16]"),
    ({"seeds": [0, 2**32]}, "seeds must be a non-empty list of distinct integers in [0, 2**32), got [0, 4294967296]"),
    ({"rows": {"arch": ["llama"]}}, "rows key 'arch' is not recorded in a run's identity, so the study could not tell"),
    ({"rows": {"logger": ["none"]}}, "rows key 'logger' is not recorded in a run's identity"),
    ({"rows": {"train.progress": ["bar"]}}, "rows key 'train.progress' is not recorded in a run's identity"),
    ({"rows": {"model.d_modl": [32]}}, "rows key 'model.d_modl' is not recorded in a run's identity (model.d_modl is "
                                       "not a config key; the closest: model.d_model, model.base_d_model, "
                                       "model.pos), so"),
])
def test_a_study_refuses_a_bad_protocol_in_one_line(change, message):
    with pytest.raises(ClaimsError) as err:
        parse_studies({"tiny": TINY | change}, "claims file x")
    assert str(err.value).startswith("claims file x, study tiny: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_study_takes_single_values_and_plain_overrides():
    spec = TINY | {"rows": {"model.d_model": [32, 64], "ffn": ["relu"], "optim.weight_decay": [1.0e-5, 0.5]},
                   "overrides": [*TINY["overrides"], "+train.extra=1", "optim.betas=[0.9,0.95]"]}
    found = parse_study("tiny", spec, "claims file x")
    assert found.row_overrides(found.row_values()[0]) == ["model.d_model=32", "ffn=relu", "optim.weight_decay=1e-05"]


@pytest.mark.parametrize("args, message", [
    (["--jobs", "0"], "error: argument --jobs: must be a whole number of runs >= 1, got '0'"),
    (["--jobs", "-4"], "error: argument --jobs: must be a whole number of runs >= 1, got '-4'"),
    (["--jobs", "two"], "error: argument --jobs: must be a whole number of runs >= 1, got 'two'"),
    ([], "claim 0 (glu-tiny): at train.steps=999 is not one of study tiny's budgets [8, 16]"),
])
def test_the_study_command_refuses_before_any_run_in_one_line(tmp_path, monkeypatch, capsys, args, message):
    text = STUDY.format(cache=tmp_path)
    (tmp_path / "claims.yaml").write_text(text.replace("at: {train.steps: 16}", "at: {train.steps: 999}")
                                          if not args else text)
    monkeypatch.setattr(study_cli.subprocess, "Popen", lambda argv, **k: pytest.fail(f"a sweep started: {argv}"))
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1
    assert args or err.startswith(f"error: claims file {tmp_path / 'claims.yaml'}")


def test_ctrl_c_between_sweeps_is_one_line_with_the_command_as_typed(tmp_path, monkeypatch, capsys):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))

    def interrupted(argv, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C reaches the study outside a sweep

    monkeypatch.setattr(study_cli.subprocess, "Popen", interrupted)
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path), "--jobs", "2"])
    assert stop.value.code == 130
    assert capsys.readouterr().err == (f"interrupted: rerun python -m mbexp.study tiny --results {tmp_path} --jobs 2 "
                                       "to resume\n")


SWEEP = """\
import os, pathlib, signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
os.kill(os.getppid(), signal.SIGINT)  # the terminal's Ctrl-C reaches the study, which passes it on to its sweep
deadline = time.time() + 60
while not got and time.time() < deadline:
    time.sleep(0.01)
pathlib.Path(sys.argv[1]).write_text("kept" if got else "never passed on")  # the sweep's checkpoint
print(f"interrupted: the runs' checkpoints are kept; rerun {os.environ['MBEXP_RERUN']} to resume", file=sys.stderr)
sys.exit(130)
"""


def test_ctrl_c_during_a_sweep_waits_for_its_checkpoint_and_is_one_line(tmp_path, monkeypatch, capfd):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))
    kept = tmp_path / "kept"
    monkeypatch.setattr(study_cli, "scan_command", lambda *a, **k: [sys.executable, "-c", SWEEP, str(kept)])
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path)])
    assert stop.value.code == 130 and kept.read_text() == "kept"  # passed on, and not killed before its checkpoint
    assert [line for line in capfd.readouterr().err.splitlines() if line.startswith("interrupted")] == [
        f"interrupted: the runs' checkpoints are kept; rerun python -m mbexp.study tiny --results {tmp_path} to "
        "resume"]


TERMINATED = """\
import os, pathlib, signal, sys, time
def stop(signum, frame):  # the sweep's own SIGTERM: checkpoint, then exit 130
    pathlib.Path(sys.argv[1]).write_text("kept")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
os.kill(os.getppid(), signal.SIGTERM)  # a kill reaches the study alone
time.sleep(60)
sys.exit(1)
"""


def test_a_sigterm_to_the_study_is_passed_to_its_sweep_and_waited_for(tmp_path, monkeypatch):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))
    kept = tmp_path / "kept"
    monkeypatch.setattr(study_cli, "scan_command", lambda *a, **k: [sys.executable, "-c", TERMINATED, str(kept)])
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path)])
    assert stop.value.code == 130 and kept.read_text() == "kept"  # no orphan left training


def test_a_sweep_run_for_a_study_names_the_study_command_on_ctrl_c(monkeypatch, capsys):
    from mbexp import train

    monkeypatch.setenv("MBEXP_RERUN", "python -m mbexp.study tiny --jobs 2")
    with pytest.raises(SystemExit) as stop:
        train._interrupted()
    assert stop.value.code == 130 and capsys.readouterr().err == (
        "interrupted: the runs' checkpoints are kept; rerun python -m mbexp.study tiny --jobs 2 to resume\n")


SUMMARY = {"steps": 16, "seed": 0, "status": "completed", "final_val_loss": 5.0}



def write_summary(results, experiment: str, folder: str, seed: int = 0, **fields) -> None:
    """runs/<experiment>/<folder>/seed=<seed>/summary.json: a completed run's summary with `fields`."""
    run = results / "runs" / experiment / folder / f"seed={seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"seed": seed, "status": "completed"} | fields))


def test_a_studys_cost_counts_each_runs_own_steps_and_only_its_own_runs(tmp_path):
    """Budgets 8, 12, 16 with a cool-down of 0.25: one (row, LR or seed) costs 16 + 2 + 3 = 21 steps by design.
    Spent: each counted run's steps less its trunk's; runs of another seed, budget or experiment, not yet
    started or with a number that is not one are not counted; a smaller budget trained from scratch is named."""
    rep = "  rep:\n    experiment: smoke_rep\n    scan_of: tiny\n    rows: {{ffn: [swiglu]}}\n    seeds: [3, 4]\n"
    (tmp_path / "claims.yaml").write_text((STUDY + rep).replace("budgets: [8, 16]", "budgets: [8, 12, 16]")
                                          .format(cache="c"))
    run = functools.partial(write_summary, tmp_path)
    run("smoke_scan", "a", 0, steps=16, step=16, tokens_seen=1600, wall_time_s=16.0)
    run("smoke_scan", "b", 0, steps=8, step=8, tokens_seen=800, wall_time_s=10.0,  # a branch: 2 steps, 4 s its own
        branched={"step": 6, "wall_time_s": 6.0})
    run("smoke", "c", 1, steps=16, step=16, tokens_seen=1600, wall_time_s=20.0)
    run("smoke", "d", 2, steps=8, step=8, tokens_seen=800, wall_time_s=9.0)  # from scratch: 8 - 2 steps over
    run("smoke", "e", 1, steps=12, step=12, tokens_seen=1200, wall_time_s=12.0)  # from scratch: 12 - 3 over
    run("smoke", "f", 5, steps=16, step=16, tokens_seen=1600, wall_time_s=1.0)  # not a planned seed
    run("smoke", "g", 1, steps=32, step=32, tokens_seen=3200, wall_time_s=1.0)  # not a budget
    run("smoke", "h", 2, steps=16, step=0, tokens_seen=0, wall_time_s=0.0)  # not started
    run("smoke", "i", 1, steps=16, step=16, tokens_seen=1600, wall_time_s="n/a")  # not a number
    run("smoke_scan", "j", 1, steps=16, step=16, tokens_seen=1600, wall_time_s=1.0)  # not a scan seed
    run("smoke_rep", "k", 3, steps=16, step=16, tokens_seen=1600, wall_time_s=5.0)
    run("smoke_rep", "l", 4, steps=16, step=16, tokens_seen=None, wall_time_s=3.0)  # no token count: none counted
    run("smoke_rep", "m", 3, steps=8, step=8, tokens_seen=800, wall_time_s=2.0)  # from scratch: 8 - 2 over
    found = load_studies(tmp_path)
    assert studies.per_run_steps(found["tiny"]) == 21
    assert studies.cost(found["tiny"], tmp_path) == {
        "study": "tiny", "steps": 16 + 2 + 16 + 8 + 12, "tokens": 1600 + 200 + 1600 + 800 + 1200,
        "run_seconds": 16 + 4 + 20 + 9 + 12, "naive_steps": 2 * 2 * 3 * 36, "design_steps": 21 * (2 * 2 + 2 * 2),
        "design_ratio": 168 / 432, "done": 54 / 168, "unbranched": 2, "unbranched_steps": 6 + 9}
    reused = studies.cost(found["rep"], tmp_path)  # its scan is tiny's, counted there: its own seeds only
    assert (reused["steps"], reused["tokens"], reused["run_seconds"], reused["unbranched"]) == (40, 2400, 10, 1)
    # an experiment's runs and run-hours (docs/results.md): every budget and seed, each run's own seconds
    assert studies.run_hours(tmp_path, "smoke") == (5, (20 + 9 + 12 + 1 + 1) / 3600)
    assert studies.run_hours(tmp_path, "smoke_scan") == (3, (16 + 4 + 1) / 3600)
    assert studies.cost_lines(tmp_path) == [
        "- `tiny`: 54 steps spent (5,400 tokens, 61 run-seconds; 32% of its design; 2 run(s) of a smaller budget "
        "trained from scratch, not branched: 15 steps beyond a branch); by design 168 steps against 432 for the "
        "naive grid, ratio **0.39**",
        "- `rep`: 40 steps spent (2,400 tokens, 10 run-seconds; 95% of its design, its LRs from the scan of `tiny` "
        "(counted there); 1 run(s) of a smaller budget trained from scratch, not branched: 6 steps beyond a branch); "
        "by design 42 steps against 144 for the naive grid, ratio **0.29**"]

def test_a_row_key_left_out_of_an_identity_at_its_default_is_found(tmp_path):
    # runs at a later-added key's old value leave it out of their identity (mbexp.run.migrate.ADDED_LATER)
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path).replace(
        "rows: {ffn: [relu, swiglu]}", "rows: {optim.cooldown_shape: [linear, sqrt]}"))
    for i, (shape, lr) in enumerate([(c, lr) for c in ("linear", "sqrt") for lr in (1e-3, 1e-2)]):
        identity = {"optim.lr": lr} | ({"optim.cooldown_shape": shape} if shape != "linear" else {})
        write_summary(tmp_path, "smoke_scan", f"v{i}", **SUMMARY | {"identity": identity, "final_val_loss": 5 + lr})
    choices = choose(load_studies(tmp_path)["tiny"], tmp_path)
    assert {values: c.value for values, c in choices.items()} == {("linear",): 1e-3, ("sqrt",): 1e-3}


def write_scan(results, losses: dict, **keys) -> None:
    """Finished scan runs of study tiny on seed 0: {(ffn, lr, steps): final validation loss}; `keys`: other row keys'
    values in every identity."""
    for i, ((ffn, lr, steps), loss) in enumerate(losses.items()):
        identity = {"ffn.name": ffn, **keys, "optim.lr": lr}
        write_summary(results, "smoke_scan", f"v{i}", **SUMMARY | {"steps": steps, "identity": identity,
                                                                   "final_val_loss": loss})


def test_the_scan_is_read_at_the_selection_budget_not_the_largest(tmp_path):
    """At 8 steps (select_at) the smaller LR is best for both rows, at 16 the larger: the choice is the former."""
    (tmp_path / "claims.yaml").write_text(
        STUDY.format(cache="c").replace("budgets: [8, 16]", "budgets: [8, 16]\n    select_at: 8"))
    write_scan(tmp_path, {(ffn, lr, steps): 5.0 + (lr if steps == 8 else -lr) for ffn in ("relu", "swiglu")
                          for lr in (1e-3, 1e-2) for steps in (8, 16)})
    study = load_studies(tmp_path)["tiny"]
    assert study.select_at == 8
    choices = choose(study, tmp_path)
    assert {values: c.value for values, c in choices.items()} == {("relu",): 1e-3, ("swiglu",): 1e-3}
    assert scan_losses(study, tmp_path, steps=16)[(("relu",), 1e-2)] == [5.0 - 1e-2]


def test_an_unsorted_lr_grid_is_read_sorted_and_its_edges_are_its_ends(tmp_path):
    """The grid 3e-3, 1e-3, 1e-2 is scanned from 1e-3 to 1e-2: a best of 1e-3 is the low edge, 3e-3 none."""
    (tmp_path / "claims.yaml").write_text(
        STUDY.format(cache="c").replace("lr_grid: [1.0e-3, 1.0e-2]", "lr_grid: [3.0e-3, 1.0e-3, 1.0e-2]"))
    study = load_studies(tmp_path)["tiny"]
    assert study.grid == (1e-3, 3e-3, 1e-2)
    write_scan(tmp_path, {("relu", lr, 16): 5.0 + lr for lr in study.grid}
               | {("swiglu", lr, 16): 5.0 + abs(lr - 3e-3) for lr in study.grid})
    choices = choose(study, tmp_path)
    assert {v: (c.value, c.edge) for v, c in choices.items()} == {("relu",): (1e-3, "low"), ("swiglu",): (3e-3, "")}


def test_a_row_has_its_own_lr_only_when_every_planned_run_is_at_the_chosen_lr(tmp_path):
    """Both rows choose 1e-3: relu's planned seeds 1 and 2 ran at it, swiglu's seed 2 at 1e-2; seed 0 (a scan
    seed) is not planned and does not count."""
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache="c"))
    write_scan(tmp_path, {(ffn, lr, 16): 5.0 + lr for ffn in ("relu", "swiglu") for lr in (1e-3, 1e-2)})
    runs = [("relu", 1, 1e-3), ("relu", 2, 1e-3), ("relu", 0, 1e-2), ("swiglu", 1, 1e-3), ("swiglu", 2, 1e-2)]
    table = Table("smoke", pd.DataFrame({"label": ["relu", "swiglu"]}), pd.DataFrame(
        {"label": [r for r, _, _ in runs], "seed": [s for _, s, _ in runs],
         "identity": [{"ffn.name": r, "optim.lr": lr} for r, _, lr in runs]}), "validation", 0.02)
    studies.annotate({"smoke": table}, tmp_path)
    assert table.rows.set_index("label")["lr_own"].to_dict() == {"relu": True, "swiglu": False}
    assert table.rows["lr_chosen"].tolist() == [1e-3, 1e-3]


@pytest.mark.parametrize("damage, key", [
    ({"identity": {"ffn.name": "relu", "optim.lr": "abc"}}, "optim.lr"),
    ({"identity": {"ffn.name": "relu", "optim.lr": -1.0}}, "optim.lr"),
    ({"identity": {"ffn.name": "relu"}}, "optim.lr"),
    ({"identity": "abc"}, "identity"),
    ({"final_val_loss": "abc"}, "final_val_loss"),
])
def test_a_damaged_scan_summary_is_named_and_counts_as_unfinished(tmp_path, damage, key):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))
    for i, (ffn, lr) in enumerate([(f, lr) for f in ("relu", "swiglu") for lr in (1e-3, 1e-2)]):
        summary = SUMMARY | {"identity": {"ffn.name": ffn, "optim.lr": lr}} | (damage if i == 0 else {})
        write_summary(tmp_path, "smoke_scan", f"v{i}", **summary)
    study = load_studies(tmp_path)["tiny"]
    with pytest.raises(StudyError) as err:
        choose(study, tmp_path)
    path = re.escape(str(tmp_path / "runs/smoke_scan/v0/seed=0/summary.json"))
    assert re.search(rf"{path}: [^;]*{re.escape(key)}[^;]*; repair or delete that run folder", str(err.value))
    assert lr_scan.scan_frame(study, tmp_path)["n"].tolist() == [0, 1, 1, 1]  # make table: missing, not an error


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

    # the claim's conditions hold (each row at its scan's LR); declared before its runs, but in a results folder
    # git does not track, so no commit declared it: exploratory (tests/test_declarations.py: the confirmatory path)
    done = make_table_here(results, "--no-wandb")
    assert done.returncode == 0, done.stderr
    claims = pd.read_csv(results / "tables" / "claims.csv").iloc[0]
    assert claims["standing"] == "exploratory" and pd.isna(claims["conditions_unmet"])
    assert claims["runs_read"] > 4  # the planned runs and the scan runs of the rows read
    assert "the claims file is not tracked by git" in claims["qualifiers"]
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


def test_a_row_key_naming_a_config_group_is_read_by_its_name():
    found = parse_study("tiny", TINY | {"rows": {"data": ["text", "bigtxt"], "ffn": ["relu"], "model.d_model": [32]}},
                        "claims file x")
    assert row_of(found, {"data.name": "text", "ffn.name": "relu", "model.d_model": 32}) == (
        "text", "relu", "32")


def test_a_results_folder_hydra_would_read_as_a_sweep_is_quoted_in_every_command():
    found = parse_study("tiny", TINY, "claims file x")
    scan = study_cli.scan_command(found, results_dir="/tmp/a,b")
    assert 'results_dir="/tmp/a,b"' in scan and not any(a.startswith("results_dir=/") for a in scan)
    assert study_cli.scan_command(found, results_dir="results")[-len(TINY["overrides"]) - 1] == "results_dir=results"


def test_a_dry_run_checks_the_scan_as_mbexp_train_would_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(study_cli.subprocess, "Popen", lambda argv, **k: pytest.fail(f"a sweep started: {argv}"))
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))
    study_cli.main(["tiny", "--results", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("python -m mbexp.train -m +experiment=smoke name=smoke_scan ffn=relu,swiglu ")
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path).replace("[relu, swiglu]", "[relu, reluu]"))
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path), "--dry-run"])
    assert stop.value.code == 2 and capsys.readouterr().err.splitlines() == [
        "error: the scan cannot run: ffn='reluu' is not valid; choose one of: bilinear, geglu, gelu, glu, reglu, relu, "
        "relu2, swiglu, swish"]



def test_a_dry_runs_plan_line_counts_the_study_and_names_a_reused_scan_and_a_transfer(tmp_path, monkeypatch, capsys):
    """Read from sys.argv with --results left at results/: a study reusing a scan that transfers from its relu
    row; --jobs reaches the scan's launcher. Then a study tuning the warm-up, at the default of one job."""
    rep = "  rep:\n    experiment: smoke_rep\n    scan_of: tiny\n    rows: {{ffn: [relu, swiglu]}}\n    seeds: [3, 4]\n"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "claims.yaml").write_text(
        (STUDY + rep).replace("    scan_seeds: [0]\n", "    scan_seeds: [0]\n    transfer_from: {{ffn: relu}}\n", 1)
        .format(cache=tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mbexp.study", "rep", "--dry-run", "--jobs", "2"])
    study_cli.main()
    plan, scan, then = capsys.readouterr().out.splitlines()
    assert plan == ("study rep: 2 rows x 2 LRs x 1 scan seed(s) (the scan of tiny), scanned at ffn=relu only, then 2 "
                    "planned seeds; budgets [8, 16]")
    assert scan.startswith("python -m mbexp.train -m +experiment=smoke name=smoke_scan ffn=relu ")  # tiny's scan
    assert " results_dir=results " in scan and scan.endswith(" hydra/launcher=joblib hydra.launcher.n_jobs=2")
    assert then == "then, per row, its planned seeds at the LR the scan chose"
    (tmp_path / "results" / "claims.yaml").write_text(WARMUP.format(cache=tmp_path))
    study_cli.main(["warm", "--dry-run", "--results", str(tmp_path / "results")])
    plan, scan, then = capsys.readouterr().out.splitlines()
    assert f" results_dir={tmp_path / 'results'} " in scan
    assert plan == ("study warm: 2 rows x 2 values of optim.warmup_steps x 1 scan seed(s), then 1 planned seeds; "
                    "budgets [8]")
    assert " optim.warmup_steps=0,4 " in scan and "launcher" not in scan  # the grid, sorted


def test_the_study_commands_help_names_it_and_each_option(capsys):
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert stop.value.code == 0
    assert out.startswith("usage: python -m mbexp.study [-h] [--results RESULTS] [--jobs JOBS]")
    assert out.split("positional arguments:")[0].endswith(" ".join(study_cli.__doc__.split()) + " ")
    for text in ("name a study declared under `studies:` in <results>/claims.yaml",
                 "--jobs JOBS runs side by side (joblib launcher)", "--dry-run print the commands, run nothing"):
        assert text in out

def test_a_dry_run_names_a_missing_corpus_in_one_line(tmp_path, capsys):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path).replace(
        "overrides: [", f"overrides: [data=text, data.path={tmp_path / 'missing.txt'}, "))
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path), "--dry-run"])
    assert stop.value.code == 2 and capsys.readouterr().err.splitlines() == [
        f"error: the scan cannot run: data.path={tmp_path / 'missing.txt'} does not exist (no file, folder or glob "
        "match)"]


def test_a_results_folder_without_a_claims_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path / "nowhere")])
    assert stop.value.code == 2 and capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path / 'nowhere' / 'claims.yaml'} does not exist: a study is declared under `studies:` there "
        "(docs/studies.md); give --results the folder that holds it"]



def test_an_unknown_study_is_named_with_the_ones_declared(tmp_path):
    rep = "  rep:\n    experiment: smoke_rep\n    scan_of: tiny\n    rows: {{ffn: [swiglu]}}\n    seeds: [3, 4]\n"
    (tmp_path / "claims.yaml").write_text((STUDY + rep).format(cache="c"))
    with pytest.raises(StudyError) as err:
        load_study(tmp_path, "tinny")
    assert str(err.value) == f"{tmp_path / 'claims.yaml'} declares no study 'tinny'; declared: tiny, rep"
    (tmp_path / "claims.yaml").write_text("claims: []\n")
    with pytest.raises(StudyError) as err:
        load_study(tmp_path, "tiny")
    assert str(err.value) == f"{tmp_path / 'claims.yaml'} declares no study 'tiny'; declared: none"


def test_a_study_runs_its_scan_then_each_row_at_its_choice_and_says_so(tmp_path, monkeypatch, capsys):
    """The study's orchestration in this process, each sweep stood in for by writing its scan's summaries (the
    real sweeps: the slow tests). ReLU is best at the grid's low end, SwiGLU at its high end."""
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))
    ran = []

    def sweep(argv, rerun):
        ran.append((argv, rerun))
        if "name=smoke_scan" in argv:
            write_scan(tmp_path, {(ffn, lr, steps): 5.0 + (lr if ffn == "relu" else -lr)
                                  for ffn in ("relu", "swiglu") for lr in (1e-3, 1e-2) for steps in (8, 16)})

    monkeypatch.setattr(study_cli, "_run", sweep)
    study_cli.main(["tiny", "--results", str(tmp_path), "--jobs", "2"])
    assert capsys.readouterr().out.splitlines() == [
        "study tiny: 2 rows x 2 LRs x 1 scan seed(s), then 2 planned seeds; budgets [8, 16]",
        f"[1/3] scan -> {tmp_path}/runs/smoke_scan", "[2/3] chosen on validation at 16 steps:",
        "  ffn=relu: optim.lr=0.001 (at the low edge of the grid)",
        "  ffn=swiglu: optim.lr=0.01 (at the high edge of the grid)", f"[3/3] planned seeds -> {tmp_path}/runs/smoke"]
    study = load_studies(tmp_path)["tiny"]
    assert [r for _, r in ran] == [f"python -m mbexp.study tiny --results {tmp_path} --jobs 2"] * 3
    assert ran[0][0] == study_cli.scan_command(study, jobs=2, results_dir=str(tmp_path))
    assert [argv for argv, _ in ran[1:]] == study_cli.confirm_commands(
        study, choose(study, tmp_path), jobs=2, results_dir=str(tmp_path))
    assert [[a for a in argv if a.startswith(("ffn=", "optim.lr="))] for argv, _ in ran[1:]] == [
        ["ffn=relu", "optim.lr=0.001"], ["ffn=swiglu", "optim.lr=0.01"]]


# tiny's study with its rows on two keys and three LRs
TWO_KEYS = STUDY.replace(
    "rows: {{ffn: [relu, swiglu]}}", "rows: {{ffn: [relu, swiglu], model.n_heads: [2]}}").replace(
    "lr_grid: [1.0e-3, 1.0e-2]", "lr_grid: [1.0e-3, 3.0e-3, 1.0e-2]")


def test_each_step_of_a_study_is_out_before_its_sweep_and_names_each_rows_choice(tmp_path, monkeypatch):
    """Under nohup stdout is block-buffered: [1/3] is out before the scan writes, [3/3] before the planned sweeps.
    Each choice names its row's two keys; SwiGLU's is inside the grid: no edge."""
    (tmp_path / "claims.yaml").write_text(TWO_KEYS.format(cache=tmp_path))
    raw = io.BytesIO()
    out = io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=1 << 16))
    monkeypatch.setattr(sys, "stdout", out)
    seen = []

    def sweep(argv, rerun):
        seen.append(raw.getvalue().decode().splitlines()[-1])
        if "name=smoke_scan" in argv:
            write_scan(tmp_path, {(ffn, lr, steps): 5.0 + (lr if ffn == "relu" else abs(lr - 3e-3)) for ffn, lr, steps
                                  in itertools.product(("relu", "swiglu"), (1e-3, 3e-3, 1e-2), (8, 16))},
                       **{"model.n_heads": 2})

    monkeypatch.setattr(study_cli, "_run", sweep)
    study_cli.main(["tiny", "--results", str(tmp_path)])
    out.flush()
    assert seen == [f"[1/3] scan -> {tmp_path}/runs/smoke_scan", *[f"[3/3] planned seeds -> {tmp_path}/runs/smoke"] * 2]
    assert raw.getvalue().decode().splitlines()[2:5] == [
        "[2/3] chosen on validation at 16 steps:",
        "  ffn=relu model.n_heads=2: optim.lr=0.001 (at the low edge of the grid)",
        "  ffn=swiglu model.n_heads=2: optim.lr=0.003"]


def test_a_dry_run_refuses_a_scan_with_an_impossible_row_as_mbexp_train_does(tmp_path, capsys):
    """model.n_kv_heads=4 with 2 heads cannot run: the dry run stops there, skipping nothing and writing nothing."""
    impossible = TWO_KEYS.replace("model.n_heads: [2]", "model.n_kv_heads: [2, 4]")
    (tmp_path / "claims.yaml").write_text(impossible.replace("overrides: [", "overrides: [model.n_heads=2, ")
                                          .format(cache=tmp_path))
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: the scan cannot run: 6 of 12 ")
    assert "model.n_kv_heads=4" in err[0] and not (tmp_path / "runs").exists()


def test_a_study_stopped_between_sweeps_says_how_to_resume(tmp_path, monkeypatch, capsys):
    (tmp_path / "claims.yaml").write_text(STUDY.format(cache=tmp_path))

    def interrupted(argv, rerun):
        raise KeyboardInterrupt

    monkeypatch.setattr(study_cli, "_run", interrupted)
    with pytest.raises(SystemExit) as stop:
        study_cli.main(["tiny", "--results", str(tmp_path)])
    assert stop.value.code == study_cli.INTERRUPTED == 130
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: rerun python -m mbexp.study tiny --results {tmp_path} to resume"]

SLOW_SCAN = """\
claims:
  - {{id: a, claim: c, paper: p, experiment: other, baseline: b, rows: [r], hypothesis: better, seeds: [0]}}
studies:
  tiny:
    experiment: smoke
    rows: {{ffn: [relu]}}
    lr_grid: [1.0e-3, 1.0e-2]
    scan_seeds: [0]
    seeds: [1]
    budgets: [{steps}]
    overrides: [data.cache_dir={cache}, logger=none, optim.warmup_steps=2, train.eval_every=10, train.log_every=10,
                train.checkpoint_every=1000]
"""


def started_sweep(study: subprocess.Popen, results: Path, sweeps: list) -> int:
    """The process group of the study's sweep, once its first run has logged a record."""
    deadline = time.monotonic() + 120
    def logged() -> bool:  # metrics.jsonl exists from the start, empty until the first record
        return any(p.stat().st_size for p in results.glob("runs/smoke_scan/*/seed=0/metrics.jsonl"))

    while not logged() and time.monotonic() < deadline:
        time.sleep(0.1)
    sweeps.extend(children(study.pid))
    assert len(sweeps) == 1, f"no sweep training: {sweeps}"
    return sweeps[0]


def killed(study: subprocess.Popen, sweep: int) -> bool:
    """SIGKILL the study (no handler of its own runs), then whether its sweep's group ends within seconds."""
    study.kill()
    study.wait()
    deadline = time.monotonic() + 20
    while group_alive(sweep) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_alive(sweep)


def test_a_killed_study_takes_its_sweep_down_and_its_rerun_resumes(tmp_path, cache):
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.yaml").write_text(SLOW_SCAN.format(cache=cache, steps=100000))  # trains until stopped
    command = [sys.executable, "-m", "mbexp.study", "tiny", "--results", str(results)]
    sweeps: list = []
    try:
        study = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert killed(study, started_sweep(study, results, sweeps)), "the sweep trains on without its study"
        (stopped,) = summaries(results)
        assert stopped["status"] == "interrupted" and stopped["step"] > 0

        log = tmp_path / "rerun.log"
        with log.open("w") as out:  # the same command again: its run resumes from its checkpoint
            rerun = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "resuming" not in log.read_text() and rerun.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        sweeps.clear()
        assert killed(rerun, started_sweep(rerun, results, sweeps))
        assert f"from step {stopped['step']}" in log.read_text(), log.read_text()[-2000:]
    finally:  # never leave a sweep training after the test
        for sweep in sweeps:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sweep, signal.SIGKILL)


WARMUP = """\
claims:
  - {{id: warm-tiny, claim: SwiGLU beats ReLU at its own warm-up, paper: test, experiment: smoke, study: warm,
     baseline: layer-pre-relu-matched, rows: [layer-pre-swiglu-matched], hypothesis: better, seeds: [1]}}
studies:
  warm:
    experiment: smoke
    rows: {{ffn: [relu, swiglu]}}
    tune: {{key: optim.warmup_steps, grid: [4, 0]}}
    scan_seeds: [0]
    seeds: [1]
    budgets: [8]
    overrides: [data.cache_dir={cache}, logger=none, optim.lr=1.0e-2, optim.cooldown_fraction=0.25,
                train.eval_every=4, train.log_every=4, train.checkpoint_every=4]
"""


def test_a_study_tunes_the_key_it_declares_and_lr_grid_means_tune_the_lr():
    warm = yaml.safe_load(WARMUP.format(cache="c"))["studies"]["warm"]
    found = parse_study("warm", warm, "claims file x")
    assert (found.tune, found.grid, found.tuned) == ("optim.warmup_steps", (0, 4), "optim.warmup_steps")
    scan = study_cli.scan_command(found)
    assert "optim.warmup_steps=0,4" in scan and "optim.lr=1.0e-2" in scan and not any(
        a.startswith("optim.lr=") and a != "optim.lr=1.0e-2" for a in scan)  # the LR is the experiment's, fixed
    old = parse_study("tiny", TINY, "claims file x")
    spelled = {k: v for k, v in TINY.items() if k != "lr_grid"} | {"tune": {"grid": TINY["lr_grid"]}}
    assert old.tune == "optim.lr" and old == parse_study("tiny", spelled, "claims file x")
    assert old == parse_study("tiny", spelled | {"tune": {"key": "optim.lr", "grid": TINY["lr_grid"]}}, "x")


@pytest.mark.parametrize("change, message", [
    ({"lr_grid": [1.0e-3, 1.0e-2]}, "give tune or lr_grid, not both"),
    ({"tune": [0, 4]}, "tune must map key (a config key; optim.lr when left out) and grid (its values), got [0, 4]"),
    ({"tune": {"key": "optim.warmup_steps", "grid": [0, 4], "step": 2}}, "tune must map key"),
    ({"tune": {"key": "seed", "grid": [0, 4]}}, "tune key 'seed' is not a key a run's identity records or is set by "
                                                "the study command itself"),
    ({"tune": {"key": "logger", "grid": [0, 4]}}, "tune key 'logger' is not a key a run's identity records"),
    ({"tune": {"key": "optim.warmup_step", "grid": [0, 4]}}, "(optim.warmup_step is not a config key; the closest: "
                                                            "optim.warmup_steps"),
    ({"tune": {"key": "optim.warmup_steps", "grid": [4, 4.0]}}, "tune grid must list at least two numbers (values "
                                                                "of optim.warmup_steps), each once, got [4, 4.0]"),
    ({"tune": {"key": "optim.warmup_steps", "grid": ["4", 8]}}, "tune grid must list at least two numbers"),
    ({"tune": {"grid": [0, 1.0e-2]}}, "tune grid must list at least two positive learning rates"),
    ({"rows": {"optim.warmup_steps": [0, 4]}}, "rows key 'optim.warmup_steps' is set by the study command itself "
                                               "(experiment, name, optim.schedule, optim.warmup_steps, seed"),
    ({"overrides": ["optim.warmup_steps=2"]}, "overrides item 'optim.warmup_steps=2' sets optim.warmup_steps"),
    ({"family": "budget"}, "family must be one of claim, study (the Holm family its verdicts read), got 'budget'"),
])
def test_a_study_refuses_a_bad_tuned_key_or_grid_in_one_line(change, message):
    warm = yaml.safe_load(WARMUP.format(cache="c"))["studies"]["warm"]
    with pytest.raises(ClaimsError) as err:
        parse_studies({"warm": warm | change}, "claims file x")
    assert str(err.value).startswith("claims file x, study warm: ") and message in str(err.value)


@pytest.mark.slow
def test_a_study_that_tunes_the_warmup_scans_chooses_and_runs_end_to_end(tmp_path, cache):
    """`tune: {key: optim.warmup_steps}`: the scan sweeps the warm-up at one LR, each row's warm-up is chosen on
    validation, the planned seed runs at it, and make table reads the study by its key."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.yaml").write_text(WARMUP.format(cache=cache))
    done = subprocess.run([sys.executable, "-m", "mbexp.study", "warm", "--results", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "study warm: 2 rows x 2 values of optim.warmup_steps x 1 scan seed(s)" in done.stdout
    assert "[2/3] chosen on validation at 8 steps" in done.stdout
    runs = summaries(results)
    scan = [s for s in runs if s["experiment"] == "smoke_scan"]
    planned = [s for s in runs if s["experiment"] == "smoke"]
    assert sorted((s["axes"]["ffn"], s["identity"]["optim.warmup_steps"]) for s in scan) == [
        ("relu", 0), ("relu", 4), ("swiglu", 0), ("swiglu", 4)]
    assert {s["identity"]["optim.lr"] for s in runs} == {1e-2} and all(s["status"] == "completed" for s in runs)
    best = {}  # each row's warm-up: the lower validation loss over the scan seed (ties: the smaller)
    for s in scan:
        best.setdefault(s["axes"]["ffn"], []).append((s["final_val_loss"], s["identity"]["optim.warmup_steps"]))
    chosen = {ffn: min(v)[1] for ffn, v in best.items()}
    assert {(s["axes"]["ffn"], s["identity"]["optim.warmup_steps"]) for s in planned} == set(chosen.items())
    assert {s["seed"] for s in planned} == {1} and len(planned) == 2
    assert f"  ffn=relu: optim.warmup_steps={chosen['relu']}" in done.stdout

    done = make_table_here(results, "--no-wandb")
    assert done.returncode == 0, done.stderr
    scanned = (results / "tables" / "warm_lr_scan.md").read_text()
    assert scanned.startswith("**warm** — optim.warmup_steps scan") and "| optim.warmup_steps=0 |" in scanned
    frame = pd.read_csv(results / "tables" / "warm_lr_scan.csv")
    assert frame.loc[frame["chosen"]].set_index("ffn")["optim.warmup_steps"].to_dict() == chosen
    tables = build_tables(results)
    studies.annotate(tables, results)
    note = next(n for n in tables["smoke"].notes if n.startswith("optim.warmup_steps (scan)"))
    assert f"layer-pre-relu-matched {chosen['relu']}" in note and "lr_chosen" not in tables["smoke"].rows
    assert pd.read_csv(results / "tables" / "claims.csv")["claim"].tolist() == ["warm-tiny"]


def test_the_cooldown_fraction_is_read_from_the_studys_experiment_file_and_overrides(tmp_path, monkeypatch):
    # an experiment file of its own cool-down: every shipped one uses the default, which would hide a wrong read
    import dataclasses

    from mbexp.config import compose

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    text = (conf / "experiment" / "ffn_wsd_cpu.yaml").read_text()
    text = text.replace("cooldown_fraction: 0.2", "cooldown_fraction: 0.5").replace("name: ffn_wsd_cpu", "name: x")
    (conf / "experiment" / "cool_half.yaml").write_text(text)
    monkeypatch.setattr(studies, "CONF_DIR", conf)
    monkeypatch.setattr(compose, "CONF_DIR", conf)
    studies._fraction.cache_clear()
    study = dataclasses.replace(load_studies(REPO / "results")["ffn_wsd_cpu"], experiment="cool_half", overrides=())
    try:
        assert studies.cooldown_fraction(study) == 0.5
        assert studies.cooldown_fraction(dataclasses.replace(study, overrides=("optim.cooldown_fraction=0.3",))) == 0.3
        assert studies.cooldown_fraction(dataclasses.replace(study, experiment="gone")) == 0.2  # the default
    finally:
        studies._fraction.cache_clear()


def test_a_study_table_gets_each_rows_chosen_lr_its_edge_and_the_note_the_committed_table_shows():
    tables = committed_tables("ffn_wsd_cpu", "ladder_wsd_cpu", "ladder_wsd_rep_cpu")
    studies.annotate(tables, REPO / "results")
    for experiment, table in tables.items():
        committed = pd.read_csv(REPO / "results" / "tables" / f"{experiment}.csv", keep_default_na=False)
        got = table.rows[["label", "lr_chosen", "lr_edge", "lr_own"]].astype(str).to_numpy().tolist()
        assert got == committed[["label", "lr_chosen", "lr_edge", "lr_own"]].astype(str).to_numpy().tolist()
        (note,) = [n for n in table.notes if n.startswith("lr (scan)")]
        assert f"\n{note}\n" in (REPO / "results" / "tables" / f"{experiment}.md").read_text(), experiment
    assert "low" in tables["ladder_wsd_cpu"].rows["lr_edge"].to_list()  # one cell chose the grid's low end


def test_a_row_without_a_choice_or_without_planned_runs_is_not_at_its_own_lr():
    # one run per row; the ReLU row's runs moved to an unplanned seed, the GELU row's to a row the study lacks
    table = committed_tables("ffn_wsd_cpu")["ffn_wsd_cpu"]
    runs = table.runs[table.runs["seed"] == 101].drop_duplicates("label").copy()
    runs.loc[runs["label"] == "layer-pre-relu-matched", "seed"] = 999
    gelu = runs["label"] == "layer-pre-gelu-matched"
    runs.loc[gelu, "identity"] = [{**i, "ffn.name": "unscanned"} for i in runs.loc[gelu, "identity"]]
    table.runs = runs
    studies.annotate({"ffn_wsd_cpu": table}, REPO / "results")
    rows = table.rows.set_index("label")
    assert rows.loc["layer-pre-relu-matched", "lr_chosen"] == 0.002
    assert not rows.loc["layer-pre-relu-matched", "lr_own"]
    assert math.isnan(rows.loc["layer-pre-gelu-matched", "lr_chosen"])
    assert rows.loc["layer-pre-gelu-matched", "lr_edge"] == "" and not rows.loc["layer-pre-gelu-matched", "lr_own"]
    assert rows.loc["layer-pre-swiglu-matched", "lr_own"]  # one planned run, at its choice


def test_a_study_with_an_unfinished_scan_says_so_and_the_next_study_is_still_annotated(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results" / "runs" / "ffn_wsd_cpu_scan", results / "runs" / "ffn_wsd_cpu_scan")
    shutil.copy(REPO / "results" / "claims.yaml", results / "claims.yaml")
    gone = next((results / "runs" / "ffn_wsd_cpu_scan").glob("*/seed=100"))
    shutil.rmtree(gone)
    shutil.copytree(REPO / "results" / "runs" / "relu2_wsd_cpu_scan", results / "runs" / "relu2_wsd_cpu_scan")
    tables = committed_tables("ffn_wsd_cpu", "relu2_wsd_cpu")
    studies.annotate(tables, results)
    (note,) = tables["ffn_wsd_cpu"].notes
    assert note.startswith("each row's LR is not known yet: ") and "lr_chosen" not in tables["ffn_wsd_cpu"].rows
    assert tables["relu2_wsd_cpu"].rows["lr_chosen"].notna().all()


WARMUP_STUDIES = """claims: []
studies:
  warm:
    experiment: ffn_wsd_cpu
    rows: {ffn: [relu, gelu], model: [tiny]}
    tune: {key: optim.warmup_steps, grid: [10, 20, 30]}
    scan_seeds: [100, 107]
    seeds: [101, 102, 103, 104, 105, 106]
    budgets: [390, 780]
    select_at: 780
  warm2:
    experiment: relu2_wsd_cpu
    rows: {ffn: [relu2]}
    tune: {key: optim.warmup_steps, grid: [10, 30]}
    scan_seeds: [300]
    seeds: [302, 303, 304, 305, 306, 307]
    budgets: [390, 780]
    select_at: 780
"""


def scan_identity(ffn: str, warmup) -> dict:
    return {"ffn.name": ffn, "model.name": "tiny", "optim.warmup_steps": warmup}


def test_a_study_tuning_another_key_says_each_rows_choice_in_its_note(tmp_path):
    # scans written as their summaries, the committed runs as the planned ones (each trained with 30 warm-up steps)
    (tmp_path / "claims.yaml").write_text(WARMUP_STUDIES)
    relu, gelu = {10: 5.0, 20: 5.05, 30: 5.1}, {10: 5.2, 20: 5.05, 30: 5.1}
    scans = [("ffn_wsd_cpu", "relu", 100, relu), ("ffn_wsd_cpu", "relu", 107, {**relu, 30: 5.3}),
             ("ffn_wsd_cpu", "gelu", 100, gelu), ("ffn_wsd_cpu", "gelu", 107, gelu),
             ("relu2_wsd_cpu", "relu2", 300, {10: 5.2, 30: 5.1})]
    for experiment, ffn, seed, losses in scans:
        for warmup, loss in losses.items():
            write_summary(tmp_path, f"{experiment}_scan", f"{ffn}-{warmup}", seed, steps=780, step=780,
                          final_val_loss=loss, identity=scan_identity(ffn, warmup))
    tables = committed_tables("ffn_wsd_cpu", "relu2_wsd_cpu")
    for experiment, ffns in (("ffn_wsd_cpu", ["relu", "gelu"]), ("relu2_wsd_cpu", ["relu2"])):
        tables[experiment].runs = tables[experiment].runs[tables[experiment].runs["ffn"].isin(ffns)]
    studies.annotate(tables, tmp_path)
    how = ("optim.warmup_steps (scan): each row's optim.warmup_steps, chosen by the declared study `{}` on mean "
           "validation log-ppl at 780 steps over scan seed(s) {} (runs in `{}_scan`) from {}: ")
    assert tables["ffn_wsd_cpu"].notes == [
        how.format("warm", "100, 107", "ffn_wsd_cpu", "10, 20, 30") + "layer-pre-gelu-matched 20, not every planned "
        "run at it; layer-pre-relu-matched 10 (the low edge of the grid), not every planned run at it"]
    assert tables["relu2_wsd_cpu"].notes == [  # its planned runs trained at its choice
        how.format("warm2", "300", "relu2_wsd_cpu", "10, 30") + "layer-pre-relu2-matched 30 (the high edge of the "
        "grid)"]
    assert "lr_chosen" not in tables["ffn_wsd_cpu"].rows  # the LR columns stay the LR's


def warmup_scan(results: Path, skip=()) -> None:
    """The `warm` study of WARMUP_STUDIES with every scan run finished (but those in `skip`: (ffn, warm-up, seed))."""
    (results / "claims.yaml").write_text(WARMUP_STUDIES)
    for ffn, seed, warmup in itertools.product(("relu", "gelu"), (100, 107), (10, 20, 30)):
        if (ffn, warmup, seed) not in skip:
            write_summary(results, "ffn_wsd_cpu_scan", f"{ffn}-{warmup}", seed, steps=780, step=780,
                          final_val_loss=5.0 + warmup / 100, identity=scan_identity(ffn, warmup))


def scan_run(results: Path, ffn: str, warmup: int, seed: int) -> Path:
    return results / "runs" / "ffn_wsd_cpu_scan" / f"{ffn}-{warmup}" / f"seed={seed}" / "summary.json"


def test_a_damaged_scan_run_is_named_with_what_to_do_and_the_others_are_read(tmp_path):
    from mbexp.study.protocol import choose

    warmup_scan(tmp_path, skip={("relu", 20, 100), ("gelu", 30, 107)})
    write_summary(tmp_path, "ffn_wsd_cpu_scan", "relu-20", 100, steps=780, step=780, final_val_loss=5.2,
                  identity=scan_identity("relu", "abc"))
    scan_run(tmp_path, "gelu", 30, 107).parent.mkdir(parents=True)
    scan_run(tmp_path, "gelu", 30, 107).write_text("{not json")
    study = load_studies(tmp_path)["warm"]
    with pytest.raises(StudyError) as error:
        choose(study, tmp_path)
    # both runs are missing; the first damaged one the scan read (in path order) is named, with why
    assert str(error.value) == (
        "study 'warm': 2 scan run(s) unfinished, e.g. ffn=relu model=tiny optim.warmup_steps=20; "
        f"{scan_run(tmp_path, 'gelu', 30, 107)}: unreadable JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)); repair or delete that run folder, then rerun the study command")
    scan_run(tmp_path, "gelu", 30, 107).unlink()
    with pytest.raises(StudyError) as error:
        choose(study, tmp_path)
    assert f"{scan_run(tmp_path, 'relu', 20, 100)}: identity optim.warmup_steps='abc' is not a number; " in str(
        error.value)
    scan_run(tmp_path, "relu", 20, 100).write_text(json.dumps({"seed": 100, "status": "completed", "steps": 780,
                                                               "final_val_loss": 5.2, "identity": ["relu"]}))
    with pytest.raises(StudyError) as error:  # an identity that is no mapping names no value
        choose(study, tmp_path)
    assert f"{scan_run(tmp_path, 'relu', 20, 100)}: identity optim.warmup_steps=None is not a number; " in str(
        error.value)


def test_a_diverged_scan_run_counts_as_diverged_whatever_its_last_loss(tmp_path):
    from mbexp.study.protocol import choose

    warmup_scan(tmp_path, skip={("relu", 10, 100)})
    write_summary(tmp_path, "ffn_wsd_cpu_scan", "relu-10", 100, steps=780, step=780, status="diverged",
                  final_val_loss="NaN at step 300", identity=scan_identity("relu", 10))
    choice = choose(load_studies(tmp_path)["warm"], tmp_path)[("relu", "tiny")]
    assert (choice.value, choice.edge) == (20, "") and choice.losses[10] == math.inf
    assert (choice.losses[20], choice.losses[30]) == pytest.approx((5.2, 5.3))  # mean over the scan seeds
