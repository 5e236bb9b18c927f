"""`make table`, its W&B run and the notebook on real tiny sweeps: 2 FFNs x 2 LRs x 2 seeds, and 2 budgets."""

import csv
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from scipy import stats as scipy_stats
from tiny import REPO, mbexp_train, overrides, summaries
from wandb_files import offline_runs

COLUMNS = ["variant", "lr (tried)", "params", "non-emb. params", "d_ff", "FLOPs/token",
           "early log-ppl (step 3, 768 tok)", "final test log-ppl", "Δ vs baseline (95% CI)", "p (Holm)", "mark",
           "epochs", "gen. gap", "diverged", "tokens/s"]  # fmt: skip


pytestmark = pytest.mark.slow  # real sweeps and `make` subprocesses: `make test-fast` leaves this module out


def make(*args: str, **kw) -> subprocess.CompletedProcess:
    """`make ARGS` with this interpreter, the install step taken as done."""
    return subprocess.run(["make", "-s", "-o", ".venv/.installed", *args, f"BIN={Path(sys.executable).parent}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, **kw)


# the sweeps are set up once per test process (session scope): the workers interleave this module with others,
# and a module fixture would be set up again each time its module comes back
@pytest.fixture(scope="session")
def sweep(tmp_path_factory, cache):
    tmp = tmp_path_factory.mktemp("sweep")
    proc = mbexp_train(["-m", *overrides(tmp, cache), "name=tiny_sweep", "ffn=relu,swiglu", "optim.lr=0.001,0.01",
                        "seed=0,1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = mbexp_train(["-m", *overrides(tmp, cache), "name=tiny_budget", "train.steps=20,30", "seed=0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(summaries(tmp / "results")) == 10
    return tmp / "results"


@pytest.fixture(scope="session")
def made(sweep, tmp_path_factory):
    """`make table` on the sweeps (with a claim declared after their runs), its W&B run written under a folder of
    its own."""
    wandb_dir = tmp_path_factory.mktemp("wandb")
    (sweep / "claims.yaml").write_text(
        "claims:\n  - {id: glu, claim: SwiGLU beats ReLU, paper: Shazeer 2020, experiment: tiny_sweep, hypothesis: "
        "better,\n     baseline: layer-pre-relu-matched, rows: [layer-pre-swiglu-matched], seeds: [0, 1],\n"
        "     conditions: {own_lr: true}}\n", encoding="utf-8")
    proc = make("table", f"RESULTS={sweep}", "MARGIN=0.05", env={**os.environ, "WANDB_DIR": str(wandb_dir),
                                                                 "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stderr
    return proc, wandb_dir


def test_rows_at_their_validation_chosen_lr_report_test(sweep, made):
    proc, _ = made
    for suffix in ("md", "csv", "tex"):
        assert (sweep / "tables" / f"tiny_sweep.{suffix}").stat().st_size > 0
    figures = sorted(p.name for p in (sweep / "figures").glob("tiny_sweep_*.png"))
    assert figures == ["tiny_sweep_curves.png", "tiny_sweep_forest.png", "tiny_sweep_lr_tuned.png"]  # no warm-up
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (sweep / "figures").glob("*.png"))
    md = (sweep / "tables" / "tiny_sweep.md").read_text()
    assert md in proc.stdout.replace("\r", "")
    header, _, *rows = [line for line in md.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")] == COLUMNS
    assert [r.split("|")[1].strip() for r in rows] == ["layer-pre-relu-matched", "layer-pre-swiglu-matched"]
    assert "30 steps, 7,680 tokens per run" in md and "within ±0.05 nats" in md and "test split" in md
    with open(sweep / "tables" / "tiny_sweep.csv") as f:
        table = {r["ffn"]: r for r in csv.DictReader(f)}
    runs = [s for s in summaries(sweep) if s["experiment"] == "tiny_sweep"]
    for ffn in ("relu", "swiglu"):
        mine = [s for s in runs if s["axes"]["ffn"] == ffn]
        val = {lr: sum(s["final_val_loss"] for s in mine if s["identity"]["optim.lr"] == lr) / 2 for lr in (1e-3, 1e-2)}
        best = min(val, key=val.get)
        test = [s["final_test_loss"] for s in mine if s["identity"]["optim.lr"] == best]
        assert float(table[ffn]["tuned"]) == best and table[ffn]["tried"] == "2"
        assert float(table[ffn]["final_mean"]) == pytest.approx(sum(test) / 2, abs=1e-6)
        assert float(table[ffn]["flops_per_token"]) == mine[0]["flops_per_token"]
    # swiglu against the relu baseline, each at its chosen lr: the paired test and TOST by scipy, one comparison
    chosen = {ffn: {s["seed"]: s["final_test_loss"] for s in runs if s["axes"]["ffn"] == ffn
                    and s["identity"]["optim.lr"] == float(table[ffn]["tuned"])} for ffn in ("relu", "swiglu")}
    diffs = [chosen["swiglu"][seed] - chosen["relu"][seed] for seed in (0, 1)]
    paired = scipy_stats.ttest_1samp(diffs, 0.0)
    se = statistics.stdev(diffs) / math.sqrt(2)
    tost = max(scipy_stats.t.sf((statistics.mean(diffs) + 0.05) / se, 1),
               scipy_stats.t.cdf((statistics.mean(diffs) - 0.05) / se, 1))
    mark = ("better" if diffs[0] < 0 else "worse") if paired.pvalue < 0.05 else \
        "equivalent" if tost < 0.05 else "not resolved"
    assert table["swiglu"]["ci_method"] == "paired" and table["swiglu"]["mark"] == mark
    assert float(table["swiglu"]["delta"]) == pytest.approx(statistics.mean(diffs), abs=1e-6)
    assert float(table["swiglu"]["p_holm"]) == pytest.approx(paired.pvalue, rel=1e-4)
    assert float(table["swiglu"]["tost_p_holm"]) == pytest.approx(tost, rel=1e-4)


def test_budget_sweep_gives_budget_columns(sweep, made):
    md = (sweep / "tables" / "tiny_budget.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| variant"))
    assert "| steps=20 | steps=30 |" in header and "Δ and marks at train.steps=30 (the largest budget)" in md
    assert (sweep / "figures" / "tiny_budget_steps.png").exists()
    assert not (sweep / "figures" / "tiny_budget_forest.png").exists()  # one row: nothing to compare


def test_the_table_run_in_the_offline_wandb_files(made):
    _, wandb_dir = made
    [run] = offline_runs(wandb_dir)
    assert run["job_type"] == "table" and run["exit_code"] == 0
    assert run["config"]["experiments"] == ["tiny_budget", "tiny_sweep"]
    logged = {k: v for row in run["history"] for k, v in row.items()}
    assert logged["tiny_sweep/table/_type"] == "table-file" and logged["tiny_sweep/forest/_type"] == "image-file"
    [run_dir] = (wandb_dir / "wandb").glob("offline-run-*")
    saved = json.loads((run_dir / "files" / logged["tiny_sweep/table/path"]).read_text())
    assert saved["columns"] == COLUMNS
    assert [row[0] for row in saved["data"]] == ["layer-pre-relu-matched", "layer-pre-swiglu-matched"]
    claims = json.loads((run_dir / "files" / logged["claims/table/path"]).read_text())  # beside the tables
    [line] = [dict(zip(claims["columns"], row)) for row in claims["data"]]
    assert line["claim"] == "SwiGLU beats ReLU (`glu`)" and line["verdict"].endswith("** (exploratory)")


def test_make_table_without_results_prints_one_line(tmp_path):
    proc = make("table", f"RESULTS={tmp_path}")
    assert proc.returncode == 0
    assert len(proc.stdout.strip().splitlines()) == 1 and "no finished runs" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout


def test_notebook_runs_against_the_sweep(sweep, monkeypatch):
    monkeypatch.setenv("MBEXP_RESULTS", str(sweep))
    notebook = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "tiny_sweep" in text and "layer-pre-swiglu-matched" in text and "lr (tried)" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4, "the figures are shown"
