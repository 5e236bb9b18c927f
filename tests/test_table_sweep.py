"""`make table` and the notebook on a real tiny sweep: 2 FFNs x 2 seeds x 2 warm-up settings."""

import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from tiny import REPO, mbexp_train, overrides, summaries

COLUMNS = ["variant", "params", "d_ff", "early log-ppl", "final log-ppl", "Δ vs baseline (95% CI)", "wu=0", "wu=10",
           "warm-up sens.", "diverged", "tokens/s"]


pytestmark = pytest.mark.slow  # real sweeps and `make` subprocesses: `make test-fast` leaves this module out


def make(*args: str, **kw) -> subprocess.CompletedProcess:
    """`make ARGS` with this interpreter, the install step taken as done."""
    return subprocess.run(["make", "-s", "-o", ".venv/.installed", *args, f"BIN={Path(sys.executable).parent}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    proc = mbexp_train(["-m", *overrides(tmp, tmp / "cache"), "name=tiny_sweep", "ffn=relu,swiglu", "seed=0,1",
                        "optim.warmup_steps=0,10"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(summaries(tmp / "results")) == 8
    return tmp / "results"


def test_make_table_writes_every_output_with_every_column(sweep):
    proc = make("table", f"RESULTS={sweep}")
    assert proc.returncode == 0, proc.stderr
    for suffix in ("md", "csv", "tex"):
        assert (sweep / "tables" / f"tiny_sweep.{suffix}").stat().st_size > 0
    for figure in ("tiny_sweep_curves.png", "tiny_sweep_warmup.png"):
        assert (sweep / "figures" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (sweep / "tables" / "tiny_sweep.md").read_text()
    assert md in proc.stdout.replace("\r", "")
    header, _, *rows = [line for line in md.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")] == COLUMNS
    assert [r.split("|")[1].strip() for r in rows] == ["layer-pre-relu-matched", "layer-pre-swiglu-matched"]
    assert "baseline" in rows[0] and "± " in rows[1] and "(2)" in rows[1] and "0/4" in rows[1]
    with open(sweep / "tables" / "tiny_sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 2 and all(float(r["final_bpb"]) > 0 for r in table)
    tex = (sweep / "tables" / "tiny_sweep.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and tex.count("\\\\") >= 3


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
    assert "tiny_sweep" in text and "layer-pre-swiglu-matched" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "the figures are shown"
