"""One source of truth: defaults in the schema, registries beside their dispatch, one run-file helper of each
kind in mbexp/io.py; the smoke experiment; the tooling around the tests (make targets, CI, the GPU check)."""

import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch
import yaml

from mbexp import config, corpus, io, schedule
from mbexp.config import compose_config, rules, to_object
from mbexp.run.summary import FIELDS

REPO = Path(__file__).resolve().parent.parent


def test_root_config_holds_no_defaults_of_its_own():
    root = yaml.safe_load((REPO / "conf" / "config.yaml").read_text())
    assert set(root) == {"defaults", "hydra"}  # every other default lives in mbexp/config/schema.py's dataclasses
    assert to_object(compose_config([])) == to_object(config.Config())


def test_hydra_output_dirs_follow_results_dir():
    cfg = compose_config(["results_dir=/elsewhere/res"], return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith("/elsewhere/res/hydra/")
    assert cfg.hydra.sweep.dir.startswith("/elsewhere/res/hydra/multirun/")


def test_registries_are_imported_from_their_dispatch():
    assert rules.SCHEDULES is schedule.SCHEDULES and rules.CORPORA is corpus.CORPORA
    assert {p.stem for p in (REPO / "conf" / "data").glob("*.yaml")} == set(corpus.CORPORA)
    for name in corpus.CORPORA:
        assert yaml.safe_load((REPO / "conf" / "data" / f"{name}.yaml").read_text())["name"] == name
    for name in schedule.SCHEDULES:
        assert to_object(compose_config([f"optim.schedule={name}"])).optim.schedule == name


def test_run_file_helpers_are_defined_once():
    sources = {p: p.read_text() for d in ("mbexp", "scripts") for p in sorted((REPO / d).rglob("*.py"))}
    for pattern in (r"^FINISHED\s*=", r"^def read_summary\(", r"fcntl\.flock\("):
        where = [p.relative_to(REPO).as_posix() for p, text in sources.items() if re.search(pattern, text, re.M)]
        assert where == ["mbexp/io.py"], (pattern, where)


def test_read_summary_reads_a_file_or_its_run_directory(tmp_path):
    io.write_json(tmp_path / "summary.json", {"status": "completed", "steps": 3})
    assert io.read_summary(tmp_path) == io.read_summary(tmp_path / "summary.json") == {"status": "completed",
                                                                                       "steps": 3}
    assert io.read_summary(tmp_path / "missing") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{half")
    assert io.read_summary(tmp_path / "bad") is None
    with pytest.raises(io.SummaryError, match=r"bad/summary.json: unreadable JSON"):
        io.read_summary(tmp_path / "bad", strict=True)
    (tmp_path / "bad" / "summary.json").write_text("[1, 2]")
    with pytest.raises(io.SummaryError, match="not a JSON object"):
        io.read_summary(tmp_path / "bad", strict=True)


def test_file_lock_keeps_a_second_process_out_until_released(tmp_path):
    lock = tmp_path / "sub" / "x.lock"
    probe = ("import sys; from mbexp.io import file_lock\n"
             "try:\n    with file_lock(sys.argv[1], wait=False): print('got it')\n"
             "except BlockingIOError: print('busy')")
    with io.file_lock(lock, note="holder 1\n"):
        assert lock.read_text() == "holder 1\n"
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True, timeout=60)
    free = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True, timeout=60)
    assert (held.stdout.strip(), free.stdout.strip()) == ("busy", "got it"), held.stderr + free.stderr


def test_smoke_experiment_is_the_tests_tiny_run():
    cfg = to_object(compose_config(["+experiment=smoke"]))
    m, t = cfg.model, cfg.train
    assert (m.d_model, m.n_layers, m.n_heads, m.seq_len, cfg.data.vocab_size) == (32, 2, 2, 32, 512)
    assert (t.steps, t.batch_size, cfg.precision, cfg.name) == (30, 8, "fp32", "default")
    assert '"+experiment=smoke"' in (REPO / "tests" / "tiny.py").read_text()


def test_make_help_lists_every_target_once():
    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z-]*):", makefile, re.M)
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    listed = re.findall(r"^  make (\S+)\s+\S", shown, re.M)
    assert sorted(listed) == sorted(targets) and len(set(targets)) == len(targets)
    assert {"test", "test-fast", "lint", "gpu-check", "wheelhouse", "check-wheelhouse"} <= set(listed)
    assert re.search(r'^test:.*\n\t.*pytest -q -n 2 --dist worksteal$', makefile, re.M)  # the whole suite
    assert re.search(r'^test-fast:.*\n\t.*pytest -q -n 2 --dist worksteal -m "not slow"$', makefile, re.M)


def test_ci_lints_then_runs_the_whole_suite():
    steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert steps == ["make lint", "make test"]


def test_ruff_is_pinned_to_the_installed_version():
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert f"ruff=={metadata.version('ruff')}" in dev


def test_slow_marker_is_registered_and_used():
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("slow:") for m in markers)
    used = [p.name for p in (REPO / "tests").glob("test_*.py") if "pytest.mark.slow" in p.read_text()]
    assert {"test_launchers.py", "test_resume.py", "test_sweep.py"} <= set(used)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu-check would run")
def test_gpu_check_without_cuda_says_so_in_one_line(tmp_path):
    out = tmp_path / "cuda.json"
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("gpu-check: no CUDA device visible") and proc.stdout.count("\n") == 1
    assert not out.exists()


def test_gpu_check_reports_summary_fields_that_exist():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert set(gpu_check.SUMMARY_KEYS) <= set(FIELDS)


@pytest.mark.source
def test_every_mutant_breaks_a_line_that_exists_and_names_tests_that_do():
    # make mutants: a snippet the code no longer holds would end as an error, never applied (docs/testing.md)
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutants", REPO / "scripts" / "mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutants)
    found = {m.name: (REPO / m.path).read_text(encoding="utf-8").count(m.old) for m in mutants.MUTANTS}
    missing = [t for m in mutants.MUTANTS for t in m.tests if not (REPO / t.split("::")[0]).is_file()]
    assert len(found) >= 30 and set(found.values()) == {1} and not missing, (found, missing)
