"""Exit codes and one-line messages that survive Hydra's launchers (basic, joblib, submitit_local)."""

import pytest
import torch
from tiny import mbexp_train, overrides, summaries

SHORT = ["train.steps=6", "train.eval_every=6", "train.log_every=3", "train.checkpoint_every=100"]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_exits_2_with_one_line_and_no_run_directory(tmp_path, cache):
    proc = mbexp_train([*overrides(tmp_path, cache, *SHORT), "device=cuda"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: device=cuda but no CUDA device is visible; use device=auto or device=cpu"]
    assert not (tmp_path / "results" / "runs").exists()


@pytest.mark.parametrize(("bad", "line"), [
    (["model.n_kv_heads=3"], "error: model.n_kv_heads=3 must divide model.n_heads=2; choose one of: 1, 2"),
    (["norm=dyt", "norm.bias=true"],
     "error: norm.bias=True does not apply to norm=dyt; norm=dyt takes: norm.alpha_init"),
    (["-m", "seed=0,1", "compile=maybe"], "error: compile='maybe' is not valid; choose one of: auto, true, false"),
    (["model.emb_scale=maybe"], "error: model.emb_scale=maybe is not valid; choose one of: true, false"),
    (["train.steps=abc"], "error: Error merging override train.steps=abc: Value 'abc' of type 'str' could not be "
                          "converted to Integer"),
    # inside a sweep list, after a good value: no job runs, not even the good one
    (["-m", "model.n_kv_heads=1,3"], "error: model.n_kv_heads=3 must divide model.n_heads=2; choose one of: 1, 2"),
    (["-m", "norm=layer,dyt", "norm.eps=1e-6"],
     "error: norm.eps=1e-06 does not apply to norm=dyt; norm=dyt takes: norm.alpha_init"),
])
def test_a_bad_value_stops_before_hydra_starts_a_job_with_exactly_one_line(tmp_path, cache, bad, line):
    proc = mbexp_train([*overrides(tmp_path, cache, *SHORT), *bad])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "results").exists()


def test_a_warmup_longer_than_the_run_warns_in_one_line(tmp_path, cache):
    proc = mbexp_train(overrides(tmp_path, cache, "optim.warmup_steps=500", "train.steps=3", "train.eval_every=3"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines() if "optim.warmup_steps=500" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0]
    assert "(train.steps=3): the learning rate never reaches optim.lr=0.003" in warnings[0]
    (summary,) = summaries(tmp_path / "results")
    assert summary["status"] == "completed"


def test_a_run_failing_before_its_run_directory_says_so_and_exits_1(tmp_path, cache):
    not_a_dir = tmp_path / "link"  # a dangling link where the token cache should be: the pre-flight passes it
    not_a_dir.symlink_to(tmp_path / "gone" / "cache")
    proc = mbexp_train(overrides(tmp_path, cache, *SHORT, f"data.cache_dir={not_a_dir}"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = error_lines(proc.stderr)
    assert "failed before it wrote any run file" in line and "summary.json" not in line
    assert not (tmp_path / "results" / "runs").exists()


@pytest.mark.slow
def test_joblib_sweep_with_a_failing_run_exits_non_zero(tmp_path, cache):
    # the second job's token cache path is a dangling link: a fault only its job meets (every value the pre-flight can
    # judge, a sweep function's too, stops the command before any job), in its joblib worker
    not_a_dir = tmp_path / "link"  # a dangling link: the pre-flight passes it, the job cannot make the folder
    not_a_dir.symlink_to(tmp_path / "gone" / "cache")
    proc = mbexp_train(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                        f"hydra.sweep.dir={tmp_path}/multirun", *overrides(tmp_path, cache, *SHORT),
                        f"data.cache_dir={cache},{not_a_dir}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = error_lines(proc.stderr)
    assert "failed" in line and str(not_a_dir) in line and "the sweep ran its other runs" in line
    assert [s["status"] for s in summaries(tmp_path / "results")] == ["completed"]


@pytest.mark.slow
def test_submitit_local_sweep_with_a_failing_run_exits_non_zero(tmp_path, cache):
    # the second job's token cache path is a dangling link: that run fails before any run file, in its own process
    not_a_dir = tmp_path / "link"  # a dangling link: the pre-flight passes it, the job cannot make the folder
    not_a_dir.symlink_to(tmp_path / "gone" / "cache")
    proc = mbexp_train(["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
                        f"hydra.sweep.dir={tmp_path}/multirun", *overrides(tmp_path, cache, *SHORT),
                        f"data.cache_dir={cache},{not_a_dir}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = error_lines(proc.stderr)
    # data.cache_dir is not in the identity, so both jobs name one run directory: whether the good job had
    # created it yet decides between "before it wrote any run file" and "before it wrote its summary.json"
    assert "failed" in line and str(not_a_dir) in line and "the sweep ran its other runs" in line
    (summary,) = summaries(tmp_path / "results")
    assert summary["status"] == "completed"
    job_logs = "".join(p.read_text() for p in (tmp_path / "multirun").glob(".submitit/*/*_log.*"))
    assert job_logs.count("run failed") == 1
