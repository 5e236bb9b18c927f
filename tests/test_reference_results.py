"""The committed reference results regenerate byte for byte from what is committed."""

import filecmp
import shutil
import subprocess
import sys

import pytest
from tiny import REPO

RESULTS = REPO / "results"


def test_grad_at_init_reproduces_its_committed_table_and_figure(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/grad_at_init.py", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("grad_at_init/grad_at_init.csv", "grad_at_init/grad_at_init.md", "figures/grad_at_init.png"):
        assert filecmp.cmp(tmp_path / name, RESULTS / name, shallow=False), name


def test_make_table_regenerates_the_committed_tables(tmp_path):
    committed = sorted((RESULTS / "tables").glob("*"))
    if not committed:
        pytest.fail("no committed tables under results/tables")
    shutil.copytree(RESULTS / "runs", tmp_path / "runs")
    proc = subprocess.run([sys.executable, "scripts/make_table.py", "--results", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for path in committed + sorted((RESULTS / "figures").glob("*_*.png")):
        if path.name.startswith("grad_at_init"):
            continue
        regenerated = tmp_path / path.parent.name / path.name
        assert filecmp.cmp(regenerated, path, shallow=False), f"{path.relative_to(REPO)} differs when regenerated"
