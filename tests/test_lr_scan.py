"""A declared study's LR scan as a table and a figure (docs/studies.md): validation loss against LR per size and FFN,
the chosen LR marked, an unfinished row said so, and the same choice as the study command's."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from mbexp.analysis import lr_scan, outputs
from mbexp.study.protocol import StudyError, choose
from mbexp.study.spec import load_studies

CLAIMS = """\
studies:
  lad:
    experiment: lad
    rows: {model: [ladder64, ladder96], ffn: [relu, geglu]}
    lr_grid: [1.0e-3, 3.0e-3, 1.0e-2]
    scan_seeds: [7]
    seeds: [8, 9]
    budgets: [30, 60]
"""
# (model, ffn) -> loss at each LR of the grid; ReLU's optimum moves up with width, GEGLU's stays inside the grid
LOSSES = {("ladder64", "relu"): (5.4, 5.2, 5.1), ("ladder64", "geglu"): (5.5, 5.3, 5.6),
          ("ladder96", "relu"): (5.3, 5.0, 5.05), ("ladder96", "geglu"): (5.2, 5.2, float("nan"))}


def write_scan(results, losses=LOSSES, steps=(30, 60), short=None):
    """The scan's summaries: at 60 steps `losses`, at 30 steps `short` (default: 0.3 above, the same ranking)."""
    results.mkdir(exist_ok=True)
    (results / "claims.yaml").write_text(CLAIMS)
    for (model, ffn), row in losses.items():
        for i, (lr, loss) in enumerate(zip((1e-3, 3e-3, 1e-2), row)):
            if loss != loss:  # NaN: this scan run has not finished
                continue
            for budget in steps:
                at = loss + (0.3 if budget == 30 else 0.0)
                if budget == 30 and short and (model, ffn) in short:
                    at = short[(model, ffn)][i]
                run = results / "runs" / "lad_scan" / f"{model}-{ffn}-{lr:g}-{budget}" / "seed=7"
                run.mkdir(parents=True)
                (run / "summary.json").write_text(json.dumps({
                    "status": "completed", "experiment": "lad_scan", "seed": 7, "steps": budget, "step": budget,
                    "identity": {"model.name": model, "ffn.name": ffn, "optim.lr": lr, "train.steps": budget},
                    "final_val_loss": at}))


def test_the_scan_table_marks_each_choice_and_an_unfinished_row(tmp_path):
    write_scan(tmp_path)
    study = load_studies(tmp_path)["lad"]
    frame = lr_scan.scan_frame(study, tmp_path)
    assert list(frame.columns) == ["model", "ffn", "lr", "steps", "n", "val_loss", "chosen", "edge", "vertex", "gap",
                                   "noise"]
    assert len(frame) == 4 * 3 and set(frame["steps"]) == {60}  # read at select_at, the largest budget
    picked = frame[frame["chosen"]].set_index(["model", "ffn"])
    assert picked["lr"].to_dict() == {("ladder64", "relu"): 1e-2, ("ladder64", "geglu"): 3e-3,
                                      ("ladder96", "relu"): 3e-3}  # ladder96 GEGLU is missing one LR
    assert picked.loc[("ladder64", "relu"), "edge"] == "high" and picked.loc[("ladder64", "geglu"), "edge"] == ""
    a, b, _ = np.polyfit(np.log10([1e-3, 3e-3, 1e-2]), [5.5, 5.3, 5.6], 2)  # the vertex, another way
    assert picked.loc[("ladder64", "geglu"), "vertex"] == pytest.approx(10 ** (-b / (2 * a)), rel=5e-3)
    assert np.isnan(picked.loc[("ladder64", "relu"), "vertex"])  # at the grid's end: no neighbour above

    md = lr_scan.to_markdown(study, frame)
    assert "| model | ffn | lr=0.001 | lr=0.003 | lr=0.01 | chosen | edge |" in md
    assert "| ladder64 | relu | 5.400 | 5.200 | **5.100** | 0.01 | high | — | — | 0.1000 (one seed) |" in md
    assert "| ladder96 | geglu | 5.200 | 5.200 | — | — | scan unfinished |" in md
    assert "11 of 12 scan runs finished" in md
    assert "| ladder64 | 0.01 | 0.003 |" in md and "| ladder96 | 0.003 | — |" in md  # chosen LR by size and FFN
    assert f"| ladder64 | — | {picked.loc[('ladder64', 'geglu'), 'vertex']:.2g} |" in md  # the vertex by both


def test_the_vertex_by_hand():
    # log10 LR = -3, -2, -1 with losses 5.0, 4.0, 4.5: y = a(x − h)² + c gives a(5 + 2h) = 1 and a(−3 − 2h) = 0.5,
    # so h = −11/6 and the vertex LR is 10^(−11/6) = 0.014678
    grid = [1e-3, 1e-2, 1e-1]
    assert lr_scan.vertex(grid, dict(zip(grid, (5.0, 4.0, 4.5))), 1e-2) == 0.0147
    assert math.isnan(lr_scan.vertex(grid, dict(zip(grid, (5.0, 4.0, math.inf))), 1e-2))  # a diverged neighbour
    assert math.isnan(lr_scan.vertex(grid, dict(zip(grid, (3.0, 4.0, 4.5))), 1e-3))  # the grid's end


def test_a_scan_run_still_training_is_missing_not_diverged(tmp_path):
    write_scan(tmp_path)
    summary = next((tmp_path / "runs" / "lad_scan").glob("ladder96-relu-0.01-60/seed=7/summary.json"))
    summary.write_text(summary.read_text().replace('"completed"', '"running"'))
    study = load_studies(tmp_path)["lad"]
    line = lr_scan.scan_frame(study, tmp_path).query("model == 'ladder96' and ffn == 'relu' and lr == 0.01")
    assert line["n"].tolist() == [0] and not line["chosen"].any()
    with pytest.raises(StudyError, match="2 scan run.s. unfinished"):
        choose(study, tmp_path)


def test_the_scan_picks_what_the_study_command_picks_ties_to_the_smaller(tmp_path):
    losses = {**LOSSES, ("ladder96", "geglu"): (5.2, 5.2, 5.4)}
    write_scan(tmp_path, losses)
    study = load_studies(tmp_path)["lad"]
    frame = lr_scan.scan_frame(study, tmp_path)
    picked = frame[frame["chosen"]].set_index(["model", "ffn"])["lr"].to_dict()
    assert picked == {values: c.value for values, c in choose(study, tmp_path).items()}
    assert picked[("ladder96", "geglu")] == 1e-3  # the tie at 5.2 goes to the smaller LR


def test_make_table_writes_the_scan_files_only_for_studies_with_scan_runs(tmp_path):
    assert outputs.write_scans(tmp_path / "none") == {}  # no claims file: no study, nothing written
    write_scan(tmp_path)
    written = outputs.write_scans(tmp_path)
    assert [p.name for p in written["lad"]] == ["lad_lr_scan.md", "lad_lr_scan.csv", "lad_lr_scan.png"]
    assert written["lad"][2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(written["lad"][1])
    assert csv["chosen"].sum() == 3 and csv.loc[csv["chosen"], "val_loss"].round(3).tolist() == [5.1, 5.3, 5.0]
    again = {p.name: p.read_bytes() for p in written["lad"]}
    assert {p.name: p.read_bytes() for p in outputs.write_scans(tmp_path)["lad"]} == again  # byte for byte
    assert outputs.write_scans(tmp_path, only="other_experiment") == {}


@pytest.mark.parametrize("only", ["lad", "lad_scan"])
def test_only_the_study_experiment_or_its_scan_writes_its_scan(tmp_path, only):
    write_scan(tmp_path)
    assert list(outputs.write_scans(tmp_path, only=only)) == ["lad"]


def test_successive_halving_is_read_from_the_scan_and_its_misses_are_counted(tmp_path):
    # ladder64 ReLU: 1e-2 is best at 60 steps but worst at 30, so halving drops it and picks 3e-3
    write_scan(tmp_path, short={("ladder64", "relu"): (5.0, 5.1, 5.9)})
    study = load_studies(tmp_path)["lad"]
    picks, full = lr_scan.halving(study, tmp_path)
    assert full == 3 * (60 + 6)  # per LR: the 60-step trunk and the 30-step budget's cool-down (20%: 6 steps)
    assert picks[("ladder64", "relu")] == (3e-3, 30 + 2 * 66)  # one LR stopped after 30 steps, two went on
    assert picks[("ladder96", "relu")][0] == 3e-3 and ("ladder96", "geglu") not in picks  # unfinished: no pick
    md = lr_scan.to_markdown(study, lr_scan.scan_frame(study, tmp_path), (picks, full))
    assert "| ladder64 | relu | 5.400 | 5.200 | **5.100** | 0.01 | high | 0.003 |" in md
    assert "picks the same LR as the full scan in **2 of 3 rows**, for 486 scan steps against 594 (0.82" in md


def test_a_studys_cooldown_is_the_one_its_runs_train_with():
    # budgets [300, 600]: the 600-step trunk plus the 300-step branch's cool-down, as its experiment composes it
    from mbexp.analysis.studies import per_run_steps
    from mbexp.study.spec import parse_study

    spec = {"experiment": "ffn_wsd_cpu", "rows": {"ffn": ["relu"]}, "lr_grid": [1e-3, 1e-2], "scan_seeds": [0],
            "seeds": [1], "budgets": [300, 600]}
    assert per_run_steps(parse_study("s", spec, "x")) == 600 + 60
    cooler = parse_study("s", spec | {"overrides": ["optim.cooldown_fraction=0.5"]}, "x")
    assert per_run_steps(cooler) == 600 + 150


def test_a_row_whose_every_lr_diverged_is_no_choice(tmp_path):
    inf = float("inf")
    write_scan(tmp_path, losses={**LOSSES, ("ladder96", "geglu"): (inf, inf, inf)})
    study = load_studies(tmp_path)["lad"]
    with pytest.raises(StudyError, match=r"every LR of the grid diverged in the scan for model=ladder96 ffn=geglu "
                                         r"\(1 row\(s\)\); declare a grid that reaches further"):
        choose(study, tmp_path)
    frame = lr_scan.scan_frame(study, tmp_path)
    assert not frame[(frame["model"] == "ladder96") & (frame["ffn"] == "geglu")]["chosen"].any()


def test_a_study_whose_overrides_do_not_compose_still_gets_its_cost():
    # mbexp.train refuses such a study's runs; make table and make report must still say what it would cost
    from mbexp.analysis.studies import per_run_steps
    from mbexp.study.spec import parse_study

    spec = {"experiment": "ffn_wsd_cpu", "rows": {"ffn": ["relu"]}, "lr_grid": [1e-3, 1e-2], "scan_seeds": [0],
            "seeds": [1], "budgets": [300, 600], "overrides": ["optim.warmup_step=30"]}
    assert per_run_steps(parse_study("s", spec, "x")) == 600 + 60


def test_a_choice_is_within_noise_when_the_runner_up_is_closer_than_seed_noise():
    from mbexp.analysis.lr_scan import Z95, choice_noise, seed_sd

    # two rows x two LRs on two seeds: every cell's two losses differ by 0.02, a pooled SD of 0.02 / sqrt(2)
    found = {(("relu",), 1e-3): [4.50, 4.52], (("relu",), 2e-3): [4.49, 4.51],
             (("geglu",), 1e-3): [4.40, 4.42], (("geglu",), 2e-3): [4.60, 4.62], (("gelu",), 4e-3): [4.7]}
    sd = seed_sd(found)
    assert abs(sd - 0.02 / math.sqrt(2)) < 1e-12
    gap, noise = choice_noise({1e-3: 4.51, 2e-3: 4.50, 4e-3: math.inf}, 2, sd)
    assert abs(gap - 0.01) < 1e-12 and abs(noise - Z95 * sd) < 1e-12 and gap < noise  # within noise
    gap, noise = choice_noise({1e-3: 4.41, 2e-3: 4.61}, 2, sd)
    assert gap > noise  # 0.2 apart: resolved
    assert math.isnan(seed_sd({(("relu",), 1e-3): [4.5], (("relu",), 2e-3): [4.4]}))  # one scan seed
    assert math.isnan(choice_noise({1e-3: 4.5, 2e-3: 4.4}, 1, math.nan)[1])
    assert math.isnan(choice_noise({1e-3: 4.5, 2e-3: math.inf}, 2, sd)[0])  # one finite LR: no runner-up
