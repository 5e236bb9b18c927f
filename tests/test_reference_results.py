"""The committed reference results regenerate byte for byte from what is committed."""

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import REPO

from mbexp.analysis.files import DECISION, FIT

RESULTS = REPO / "results"


@pytest.mark.golden
def test_grad_at_init_regenerates_a_committed_seed_and_its_table_and_figure_are_the_seeds_means(tmp_path):
    """Seed 0's norms regenerate to 1e-3 (seeds 1-3 run the same code from their own init seed; `make grad-at-init`
    regenerates all four), and the committed table and figure are what the committed seeds give, byte for byte."""
    seeds = RESULTS / "grad_at_init" / "grad_at_init_seeds.csv"
    for args in (["--seeds", "1", "--out", str(tmp_path / "seed0")], ["--from-seeds", str(seeds), "--out",
                                                                        str(tmp_path / "means")]):
        proc = subprocess.run([sys.executable, "scripts/grad_at_init.py", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    header, *rows = seeds.read_text().splitlines()
    assert header.split(",")[4] == "seed" and {r.split(",")[4] for r in rows} == {"0", "1", "2", "3"}
    again = [r.rpartition(",") for r in (tmp_path / "seed0" / "grad_at_init" / "grad_at_init_seeds.csv").read_text()
             .splitlines()]
    seed0 = [r.rpartition(",") for r in [header] + [r for r in rows if r.split(",")[4] == "0"]]
    assert again[0] == seed0[0] and [row for row, _, _ in again] == [row for row, _, _ in seed0]  # all but the norm
    # another CPU's float32 kernels sum in another order: 1e-3 is far inside the table's three significant digits
    assert [float(n) for _, _, n in again[1:]] == pytest.approx([float(n) for _, _, n in seed0[1:]], rel=1e-3)
    for name in ("grad_at_init/grad_at_init.csv", "grad_at_init/grad_at_init.md", "figures/grad_at_init.png"):
        assert filecmp.cmp(tmp_path / "means" / name, RESULTS / name, shallow=False), name


@pytest.mark.parametrize(("text", "says"), [("layer,grad_norm\n1,0.5\n", "no column init, placement, weight, seed"),
                                           ("init,placement,layer,weight,seed,grad_norm\nmbexp,pre,1,FFN W1,0,x\n",
                                            "a grad_norm that is not a number")])
def test_grad_at_init_from_a_file_that_is_not_its_seeds_stops_in_one_line(tmp_path, text, says):
    bad = tmp_path / "norms.csv"
    bad.write_text(text)
    proc = subprocess.run([sys.executable, "scripts/grad_at_init.py", "--from-seeds", str(bad), "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: --from-seeds {bad}: {says}")
    assert not (tmp_path / "grad_at_init").exists()


def committed(folder: str) -> list[Path]:
    """The files git tracks under results/<folder> (runs of sweeps still in progress are not the reference)."""
    out = subprocess.run(["git", "ls-files", "-z", f"results/{folder}"], cwd=REPO, capture_output=True, check=True)
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def _experiment(figure: Path) -> str:
    """results/figures/<experiment>_<figure>.png -> <experiment>; figure names hold no "_" but <key>_tuned. A
    study's <study>_lr_scan.png goes with its table, tables/<study>_lr_scan.md."""
    if figure.stem.endswith("_lr_scan"):
        return figure.stem
    experiment = figure.stem.rsplit("_", 1)[0]
    return experiment.rsplit("_", 1)[0] if figure.stem.endswith("_tuned") else experiment


def _table_experiment(table: Path) -> str:
    """results/tables/<experiment>.{md,csv,tex}, and a ladder's <experiment>_fit.{md,csv} and
    <experiment>_decision.{md,csv} -> <experiment>."""
    return table.stem.removesuffix(FIT).removesuffix(DECISION)


@pytest.mark.golden
def test_make_table_regenerates_the_committed_tables(tmp_path):
    tables = committed("tables")
    if not tables:
        pytest.fail("no committed tables under results/tables")
    for path in committed("runs"):
        copy = tmp_path / path.relative_to(RESULTS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    # a link, not a copy: the claims' standing reads the declaring commits from the repository's git history
    (tmp_path / "claims.yaml").symlink_to(RESULTS / "claims.yaml")  # -> tables/claims.{md,csv}
    shutil.copytree(RESULTS / "baselines", tmp_path / "baselines")  # the captions' n-gram baselines
    # a hang guard, not a speed check: every committed run is read, and studies keep adding runs
    proc = subprocess.run([sys.executable, "scripts/make_table.py", "--results", str(tmp_path), "--no-wandb"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    experiments = {_table_experiment(p) for p in tables}  # runs committed before their tables are not checked yet
    figures = [p for p in committed("figures") if _experiment(p) in experiments]  # not grad_at_init.png
    regenerated = sorted(p.name for folder in ("tables", "figures") for p in (tmp_path / folder).iterdir()
                         if (_table_experiment(p) if folder == "tables" else _experiment(p)) in experiments)
    assert regenerated == sorted(p.name for p in tables + figures), "not the set of outputs make table writes"
    for path in tables + figures:
        again = tmp_path / path.parent.name / path.name
        assert filecmp.cmp(again, path, shallow=False), f"{path.relative_to(REPO)} differs when regenerated"


@pytest.mark.golden
def test_readme_claims_and_results_page_are_what_make_report_writes():
    """No hand-written verdict: the README's claims block and docs/results.md are generated (`make report`)."""
    proc = subprocess.run([sys.executable, "scripts/make_report.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_a_studys_lr_scan_and_an_lr_transfer_experiment_are_no_ladder_evidence():
    """The scan's runs, and the planned runs of an LR-transfer claim's experiment, are fitted like any ladder (their
    own tables), but no trend of theirs is read: none reaches the README or docs/results.md, and their fits have no
    robustness panel (a ladder's has)."""
    from mbexp.analysis.ladder.render import ladder_trends
    from mbexp.claims.parse import no_trend_read

    unread = {"ladder_wsd_cpu_scan", "width_lr_mup_cpu_scan", "width_lr_mup_cpu", "width_lr_sp_cpu"}
    skipped = no_trend_read(RESULTS)
    assert unread <= skipped and not {"ladder_wsd_cpu", "mup_ladder_cpu"} & skipped
    panel = "Robustness panel: "
    for ladder in ("ladder_wsd_cpu", "mup_ladder_cpu"):
        assert panel in (RESULTS / "tables" / f"{ladder}_fit.md").read_text(encoding="utf-8"), ladder
    for experiment in unread:
        fit = (RESULTS / "tables" / f"{experiment}_fit.md").read_text(encoding="utf-8")
        assert "| m along the ladder |" in fit and panel not in fit, experiment
    experiments = {t["experiment"] for t in ladder_trends(RESULTS)}
    assert {"ladder_cpu", "mup_ladder_cpu"} <= experiments and not experiments & unread
    for page in (REPO / "README.md", REPO / "docs" / "results.md"):
        text = page.read_text(encoding="utf-8")
        assert not [e for e in unread if f"| {e} |" in text or f"| geglu over relu | {e}," in text], page


def test_without_a_claims_file_every_experiment_is_read_as_a_ladder(tmp_path):
    from mbexp.claims.parse import no_trend_read

    assert no_trend_read(tmp_path) == set()  # no studies, no LR-transfer claims
