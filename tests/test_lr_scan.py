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


def write_summary(results, folder: str, seed: int, budget: int, loss: float, identity: dict) -> None:
    """A finished scan run of experiment lad_scan: `budget` steps, validation loss `loss`."""
    run = results / "runs" / "lad_scan" / folder / f"seed={seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "status": "completed", "experiment": "lad_scan", "seed": seed, "steps": budget, "step": budget,
        "identity": identity | {"train.steps": budget}, "final_val_loss": loss}))


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
                write_summary(results, f"{model}-{ffn}-{lr:g}-{budget}", 7, budget, at,
                              {"model.name": model, "ffn.name": ffn, "optim.lr": lr})


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


HALVING = """\
studies:
  halve:
    experiment: lad
    rows: {ffn: [relu]}
    lr_grid: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2, 3.2e-2]
    scan_seeds: [7, 8]
    seeds: [9]
    budgets: [20, 40, 80]
"""
# loss at each LR of the grid per budget: large LRs lead at 20 steps, 3.2e-2 at 40, 8e-3 at 80
RUNGS = {20: (5.9, 5.8, 5.7, 5.5, 5.4, 5.6), 40: (5.7, 5.6, 5.5, 5.2, 5.3, 5.1), 80: (5.5, 5.4, 5.3, 4.9, 5.0, 5.2)}


def test_halving_over_three_rungs_keeps_the_better_half_by_loss_and_counts_each_stop(tmp_path):
    """20 steps: 1.6e-2, 8e-3, 3.2e-2 go on (the better half, not the smaller LRs); 40: 3.2e-2 and 8e-3; 80: 8e-3,
    though 3.2e-2 led at 40. Per seed: 3 stopped after 20 steps, 1 after 40 (+ 20's cool-down, 4), 2 trained 80
    (+ 4 + 8 of cool-down): 60 + 44 + 184 = 288; two seeds. The full scan: 6 LRs x (80 + 4 + 8) x 2 seeds."""
    write_halving(tmp_path)
    picks, full = lr_scan.halving(load_studies(tmp_path)["halve"], tmp_path)
    assert picks == {("relu",): (8e-3, 2 * 288)} and full == 6 * 92 * 2


def write_halving(results):
    (results / "claims.yaml").write_text(HALVING)
    for budget, losses in RUNGS.items():
        for lr, loss in zip((1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2), losses):
            for seed in (7, 8):
                write_summary(results, f"relu-{lr:g}-{budget}", seed, budget, loss + 0.01 * (seed - 7),
                              {"ffn.name": "relu", "optim.lr": lr})


def test_a_one_key_scans_figure_is_one_panel_named_for_the_study(tmp_path):
    write_halving(tmp_path)
    study = load_studies(tmp_path)["halve"]
    (ax,) = lr_scan.plot(study, lr_scan.scan_frame(study, tmp_path)).axes
    assert ax.get_title() == "halve" and ax.get_legend().get_title().get_text() == "ffn"
    curve, ring = ax.get_lines()
    assert list(curve.get_ydata()) == pytest.approx([5.505, 5.405, 5.305, 4.905, 5.005, 5.205])
    assert list(ring.get_xdata()) == [8e-3]


def test_the_scan_csv_is_plain_text_without_the_frames_index():
    frame = pd.DataFrame({"lr": [0.001, 1 / 3, 1.5e-7], "chosen": [True, False, False]})
    assert lr_scan.to_csv(frame) == "lr,chosen\n0.001,True\n0.333333,False\n1.5e-07,False\n"


def test_a_scan_cell_says_diverged_and_bolds_the_choice_and_the_noise_line_needs_two_seeds():
    cell = {"n": 2, "val_loss": math.inf, "chosen": False}
    assert lr_scan._cell(pd.Series(cell)) == "diverged"
    assert lr_scan._cell(pd.Series(cell | {"val_loss": 5.1234, "chosen": True})) == "**5.123**"
    assert lr_scan._cell(pd.Series(cell | {"n": 0})) == "—"
    assert lr_scan._sd_text(pd.DataFrame({"noise": [math.nan, math.nan]})) == "one scan seed: unknown"
    assert lr_scan._sd_text(pd.DataFrame({"noise": [0.02, math.nan, 0.01, 0.02]})) == "noise 0.0100, 0.0200"


def test_the_scan_figure_has_a_panel_per_second_key_a_line_per_first_and_rings_the_choice(tmp_path):
    """Rows declared ladder96 first: lines keep the declared order. ladder64 GEGLU diverged at 1e-2: left out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_hex
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    write_scan(tmp_path, {**LOSSES, ("ladder64", "geglu"): (5.5, 5.3, math.inf)})
    (tmp_path / "claims.yaml").write_text(CLAIMS.replace("[ladder64, ladder96]", "[ladder96, ladder64]"))
    study = load_studies(tmp_path)["lad"]
    fig = lr_scan.plot(study, lr_scan.scan_frame(study, tmp_path))
    assert isinstance(fig.canvas, FigureCanvasAgg) and isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    assert tuple(fig.get_size_inches()) == (8.0, 4.0) and fig.dpi == 100
    relu, geglu = fig.axes
    assert relu.get_shared_y_axes().joined(relu, geglu)
    assert (relu.get_title(), geglu.get_title()) == ("ffn=relu", "ffn=geglu")
    assert relu.get_ylabel() == "validation log-ppl at 60 steps (ring: chosen)" and geglu.get_ylabel() == ""
    for ax in (relu, geglu):
        assert ax.get_xscale() == "log" and ax.get_xlabel() == "learning rate"
        assert list(ax.get_xticks()) == [1e-3, 3e-3, 1e-2]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.001", "0.003", "0.01"]
        legend = ax.get_legend()
        assert legend.get_title().get_text() == "model" and legend.get_title().get_fontsize() == 7
        assert [t.get_text() for t in legend.get_texts()] == ["ladder96", "ladder64"]
        assert {t.get_fontsize() for t in legend.get_texts()} == {7}
    lines = [(list(line.get_xdata()), list(line.get_ydata())) for line in geglu.get_lines()]
    assert lines == [([1e-3, 3e-3], [5.2, 5.2]), ([], []),  # ladder96: 1e-2 unfinished, so no choice to ring
                     ([1e-3, 3e-3], [5.5, 5.3]), ([3e-3], [5.3])]  # ladder64: 1e-2 diverged, not drawn
    curve, ring = relu.get_lines()[:2]
    assert (curve.get_marker(), curve.get_markersize(), curve.get_label()) == ("o", 3, "ladder96")
    assert (ring.get_marker(), ring.get_markersize(), ring.get_markerfacecolor(), ring.get_linestyle()) == \
        ("o", 10, "none", "None")
    assert [to_hex(line.get_color()) for line in relu.get_lines()] == [to_hex(f"C{i}") for i in (0, 0, 1, 1)]


SCAN_MD = """\
**lad** — LR scan: mean final validation log-ppl at 60 steps over scan seed(s) 7 (runs in `lad_scan`); bold: the \
LR chosen (lowest; ties: the smaller); edge: the best LR is an end of the grid, so the optimum may lie beyond it; \
vertex: the LR at the vertex of the parabola in log LR through the chosen LR and its two neighbours, where between \
grid points the optimum lies (exploratory); gap: the second-best LR's mean minus the chosen one's, against the 95% \
noise of a difference of two 1-seed means at the scan's pooled seed SD (one scan seed: unknown): `within noise` \
when the gap is smaller, so the choice could be another LR on other seeds. 11 of 12 scan runs finished.

| model | ffn | lr=0.001 | lr=0.003 | lr=0.01 | chosen | edge | halving | vertex | gap (noise) |
|:---|:---|---:|---:|---:|---:|:---|---:|---:|:---|
| ladder64 | relu | 5.400 | 5.200 | **5.100** | 0.01 | high | 0.003 | — | 0.1000 (one seed) |
| ladder64 | geglu | 5.500 | **5.300** | 5.600 | 0.003 | — | 0.003 | 0.0028 | 0.2000 (one seed) |
| ladder96 | relu | 5.300 | **5.000** | 5.050 | 0.003 | — | 0.003 | 0.0047 | 0.0500 (one seed) |
| ladder96 | geglu | 5.200 | 5.200 | — | — | scan unfinished | — | — | — |

Successive halving (the column `halving`: every LR judged after the smallest budget's cool-down, the better half \
continuing to the next budget, read from these runs) picks the same LR as the full scan in **2 of 3 rows**, for 486 \
scan steps against 594 (0.82 of the full scan).

The chosen LR by model and ffn:

| model | relu | geglu |
|:---|---:|---:|
| ladder64 | 0.01 | 0.003 |
| ladder96 | 0.003 | — |

The vertex (an optimum between grid points) by model and ffn:

| model | relu | geglu |
|:---|---:|---:|
| ladder64 | — | 0.0028 |
| ladder96 | 0.0047 | — |
"""


def test_the_scan_table_whole(tmp_path):
    """Every line of a scan's markdown, read by a user in docs/results.md: a row per (model, FFN), the grid's
    losses, the choice, its edge, halving's pick, the vertex and the gap, then the two by-size tables."""
    write_scan(tmp_path, short={("ladder64", "relu"): (5.0, 5.1, 5.9)})
    study = load_studies(tmp_path)["lad"]
    assert lr_scan.to_markdown(study, lr_scan.scan_frame(study, tmp_path), lr_scan.halving(study, tmp_path)) == \
        SCAN_MD


def test_a_gap_cell_says_within_noise_only_when_the_gap_is_smaller_than_the_noise():
    def cell(gap, noise):
        return lr_scan._gap_cell(pd.DataFrame({"gap": [gap], "noise": [noise]}))

    assert cell(0.01, 0.02) == "0.0100 (0.0200), within noise" and cell(0.03, 0.02) == "0.0300 (0.0200)"
    assert cell(0.02, 0.02) == "0.0200 (0.0200)"  # "smaller": a gap equal to the noise is not within it
    assert cell(0.03, math.nan) == "0.0300 (one seed)" and cell(math.nan, 0.02) == "—"
    assert lr_scan._gap_cell(pd.DataFrame({"gap": [], "noise": []})) == "—"
    # two seeds at SD 0.05: 1.96 x 0.05 x sqrt(2/2); one finite LR: no gap; SD unknown: no noise
    assert lr_scan.choice_noise({1: 5.0, 2: 5.03, 3: math.inf}, 2, 0.05) == (pytest.approx(0.03), 1.959964 * 0.05)
    assert math.isnan(lr_scan.choice_noise({1: 5.0, 2: math.inf}, 2, 0.05)[0])
    assert math.isnan(lr_scan.choice_noise({1: 5.0, 2: 5.1}, 2, math.nan)[1])
    assert math.isnan(lr_scan.choice_noise({1: 5.0, 2: 5.1}, 0, 0.05)[1])  # no scan seed: no noise, no division
    assert lr_scan.choice_noise({1: 5.0, 2: 5.1}, 4, 0.05)[1] == pytest.approx(1.959964 * 0.05 * math.sqrt(0.5))


def test_a_two_seed_scans_frame_averages_the_seeds_and_gives_the_choice_its_gap_and_noise(tmp_path):
    """Seed 8 is seed 7 + 0.01 everywhere: pooled SD 0.01/√2, noise 1.959964 x SD x √(2/2); 8e-3's mean 4.905 is
    the choice, 5.005 the runner-up. Only the chosen line carries edge, vertex, gap and noise."""
    write_halving(tmp_path)
    frame = lr_scan.scan_frame(load_studies(tmp_path)["halve"], tmp_path)
    assert list(frame.columns) == ["ffn", "lr", "steps", "n", "val_loss", "chosen", "edge", "vertex", "gap", "noise"]
    assert frame["val_loss"].tolist() == pytest.approx([5.505, 5.405, 5.305, 4.905, 5.005, 5.205])
    chosen, others = frame[frame["chosen"]].iloc[0], frame[~frame["chosen"]]
    assert (chosen["lr"], chosen["edge"], chosen["gap"]) == (8e-3, "", pytest.approx(0.1))
    assert chosen["noise"] == pytest.approx(1.959964 * 0.01 / math.sqrt(2)) and chosen["vertex"] > 0
    assert set(others["edge"]) == {""} and others[["vertex", "gap", "noise"]].isna().all().all()


def test_a_scan_of_the_warmup_is_read_on_a_linear_axis_under_its_own_key():
    from mbexp.study.spec import parse_study

    warm = parse_study("w", {"experiment": "e", "rows": {"ffn": ["relu"]}, "tune": {"key": "optim.warmup_steps",
                       "grid": [0, 4, 8]}, "scan_seeds": [0], "seeds": [1], "budgets": [8]}, "x")
    assert lr_scan.value_column(warm) == "optim.warmup_steps" and not lr_scan.logged(warm.grid)
    assert lr_scan.logged([1e-3, 1e-2]) and not lr_scan.logged([0.0, 1e-3])
    # (0, 5.0), (4, 4.0), (8, 4.5): y = 0.046875 x² - 0.4375 x + 5, vertex at x = 0.4375 / 0.09375 = 4.67
    assert lr_scan.vertex([0, 4, 8], {0: 5.0, 4: 4.0, 8: 4.5}, 4) == 4.67


def test_a_warmup_scans_figure_is_linear_under_its_key_and_five_panels_stay_16_inches_at_100_dpi():
    """A grid with 0 is not logged: a linear axis named for the key. Five panels of 4 inches are capped at 16; the
    dpi is the figure's own whatever the user's matplotlibrc says (the committed PNGs' bytes depend on it)."""
    import matplotlib

    from mbexp.study.spec import parse_study

    panels = ["a", "b", "c", "d", "e"]
    warm = parse_study("w", {"experiment": "e", "rows": {"ffn": ["relu"], "model": panels}, "tune": {
        "key": "optim.warmup_steps", "grid": [0, 4, 8]}, "scan_seeds": [0], "seeds": [1], "budgets": [8]}, "x")
    frame = pd.DataFrame([{"ffn": "relu", "model": m, "optim.warmup_steps": w, "val_loss": 5.0 + abs(w - 4) / 10,
                           "chosen": w == 4} for m in panels for w in (0, 4, 8)])
    with matplotlib.rc_context({"figure.dpi": 50}):
        fig = lr_scan.plot(warm, frame)
    assert fig.dpi == 100 and tuple(fig.get_size_inches()) == (16.0, 4.0) and len(fig.axes) == 5
    for ax, model in zip(fig.axes, panels):
        assert (ax.get_xscale(), ax.get_xlabel(), ax.get_title()) == ("linear", "optim.warmup_steps", f"model={model}")
        assert list(ax.get_xticks()) == [0, 4, 8]


def test_a_one_key_two_seed_scans_markdown_names_both_seeds_and_has_no_table_by_pair(tmp_path):
    write_halving(tmp_path)
    study = load_studies(tmp_path)["halve"]
    text = lr_scan.to_markdown(study, lr_scan.scan_frame(study, tmp_path), lr_scan.halving(study, tmp_path))
    assert "over scan seed(s) 7, 8 (runs in `lad_scan`)" in text and "the parabola in log LR through" in text
    assert "| relu | 5.505 | 5.405 | 5.305 | **4.905** | 5.005 | 5.205 | 0.008 |" in text
    assert "by ffn" not in text and "The chosen LR" not in text


def scan_line(keys: dict, col: str, value, loss: float, chosen: bool = False, vertex: float = math.nan) -> dict:
    """One line of a scan frame (scan_frame's columns), one seed finished unless `loss` is NaN."""
    return {**keys, col: value, "steps": 8, "n": int(loss == loss), "val_loss": loss, "chosen": chosen,
            "edge": "", "vertex": vertex, "gap": 0.1 if chosen else math.nan, "noise": math.nan}


def test_a_warmup_scans_markdown_fits_its_parabola_on_a_linear_axis():
    from mbexp.study.spec import parse_study

    warm = parse_study("w", {"experiment": "e", "rows": {"ffn": ["relu"]}, "tune": {"key": "optim.warmup_steps",
                       "grid": [0, 4, 8]}, "scan_seeds": [0], "seeds": [1], "budgets": [8]}, "x")
    frame = pd.DataFrame([scan_line({"ffn": "relu"}, "optim.warmup_steps", w, loss, w == 4, 4.67 if w == 4 else
                                    math.nan) for w, loss in ((0, 5.0), (4, 4.0), (8, 4.5))])
    text = lr_scan.to_markdown(warm, frame)
    assert f"vertex: the {warm.tuned} at the vertex of the parabola in {warm.tuned} through" in text


def test_the_tables_by_pair_keep_a_size_without_a_choice_and_write_each_lr_as_the_grid_does():
    """m2's scan is unfinished: it has no choice but keeps its line (—) in both tables; the chosen LR is written with
    the grid's digits (2.83e-05), the vertex with two (2.6e-05)."""
    from mbexp.study.spec import parse_study

    grid = [1.41e-5, 2.83e-5, 5.66e-5]
    study = parse_study("p", {"experiment": "p", "rows": {"model": ["m1", "m2"], "ffn": ["relu"]}, "lr_grid": grid,
                              "scan_seeds": [0], "seeds": [1], "budgets": [8]}, "x")
    col = lr_scan.value_column(study)
    frame = pd.DataFrame([scan_line({"model": "m1", "ffn": "relu"}, col, lr, loss, lr == grid[1],
                                    2.6e-5 if lr == grid[1] else math.nan) for lr, loss in zip(grid, (5.2, 5.0, 5.1))]
                         + [scan_line({"model": "m2", "ffn": "relu"}, col, lr, math.nan) for lr in grid])
    text = lr_scan.to_markdown(study, frame)
    assert "The chosen LR by model and ffn:\n\n| model | relu |\n|:---|---:|\n| m1 | 2.83e-05 |\n| m2 | — |\n" in text
    assert "by model and ffn:\n\n| model | relu |\n|:---|---:|\n| m1 | 2.6e-05 |\n| m2 | — |\n" in text


def test_a_runs_own_cost_leaves_out_its_trunk_and_a_summary_with_text_for_a_number_is_not_costed():
    from mbexp.analysis.studies import _counts, _own

    branch = {"step": 300, "wall_time_s": 120.0, "tokens_seen": 614400, "branched": {"step": 240, "wall_time_s": 100.0}}
    assert _own(branch) == (60, 20.0)
    assert _own({"step": 600, "wall_time_s": None}) == (600, 0)  # no time recorded: none counted
    assert _counts(branch) and _counts({"step": 600}) and _counts(branch | {"branched": {"wall_time_s": 1.0}})
    for bad in ({"branched": {"step": "240", "wall_time_s": 100.0}}, {"branched": {"step": 240, "wall_time_s": "x"}},
                {"tokens_seen": "many"}, {"wall_time_s": "x"}, {"branched": [240]}):
        assert not _counts(branch | bad), bad


def test_an_unfinished_scan_says_to_rerun_the_study_command(tmp_path):
    write_scan(tmp_path)
    summary = next((tmp_path / "runs" / "lad_scan").glob("ladder96-relu-0.01-60/seed=7/summary.json"))
    summary.write_text(summary.read_text().replace('"completed"', '"running"'))
    with pytest.raises(StudyError) as err:
        choose(load_studies(tmp_path)["lad"], tmp_path)
    assert str(err.value).startswith("study 'lad': 2 scan run(s) unfinished, e.g. ")
    assert str(err.value).endswith("; rerun the study command")
