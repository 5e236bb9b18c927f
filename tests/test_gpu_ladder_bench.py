"""scripts/gpu_ladder_bench.py (make gpu-ladder-bench): its CPU path end to end, its one-line answers."""

import json
import subprocess
import sys

import pytest
import torch
from tiny import REPO


def bench(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/gpu_ladder_bench.py", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the bench would run")
def test_without_cuda_it_says_so_in_one_line(tmp_path):
    proc = bench("--out", str(tmp_path / "cuda.json"))
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1 and "no CUDA device visible" in proc.stdout
    assert not (tmp_path / "cuda.json").exists()


@pytest.mark.parametrize("args", [["--models", "nope"], ["--jobs", "2,x"], ["--jobs", "0"], ["--runs", "0"]])
def test_bad_arguments_are_one_error_line(args):
    proc = bench("--device", "cpu", *args)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_cpu_path_measures_every_recipe_and_keeps_the_other_keys(tmp_path, cache):
    out = tmp_path / "cuda.json"
    out.write_text(json.dumps({"bench": {"kept": True}}))
    proc = bench("--device", "cpu", "--models", "tiny", "--jobs", "2", "--runs", "2", "--steps", "3",
                 "--batch-size", "4", "--cache-dir", str(cache), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tiny         fastest: " in proc.stdout
    data = json.loads(out.read_text())
    assert data["bench"] == {"kept": True}
    measured = data["ladder_bench"]["results"]["tiny"]
    assert measured["sweep"] == {"runs": 2, "steps": 3, "batch_size": 4, "compile": False}
    recipes = {r["recipe"]: r for r in measured["recipes"]}
    assert sorted(recipes) == ["joblib-2", "sequential"]
    for r in recipes.values():
        assert r["rc"] == 0 and r["runs_completed"] == 2 and r["tokens"] == 2 * 3 * 4 * 128
        assert r["tokens_per_s_total"] > 0 and r["tokens_per_s_per_run"] > 0
    assert data["ladder_bench"]["fastest"]["tiny"]["recipe"] in recipes
