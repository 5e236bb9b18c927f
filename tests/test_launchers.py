"""Beyond one process on existing engines: Hydra's joblib and submitit launchers, torchrun DDP."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import REPO, clean, losses, mbexp_train, overrides, summaries
from wandb_files import offline_runs

from mbexp.config import compose_config
from mbexp.trainer import train

BUDGET = ["train.steps=120", "train.eval_every=60", "train.checkpoint_every=1000"]
SWEEP = ["ffn=relu,swiglu", *BUDGET]


@pytest.fixture(scope="session")  # once per test process: see test_table_sweep.py's `sweep`
def joblib_sweep(tmp_path_factory, cache):
    tmp = tmp_path_factory.mktemp("joblib")
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp}/multirun",
            *overrides(tmp, cache, *SWEEP, logger="wandb")]
    proc = mbexp_train(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


def by_ffn(results: Path) -> dict[str, dict]:
    return {s["axes"]["ffn"]: s for s in summaries(results)}


@pytest.mark.slow
def test_joblib_sweep_gives_completed_runs_and_one_wandb_run_each(joblib_sweep):
    runs = by_ffn(joblib_sweep / "results")
    assert set(runs) == {"relu", "swiglu"} and {s["status"] for s in runs.values()} == {"completed"}
    wandb_runs = offline_runs(joblib_sweep)
    assert len(wandb_runs) == 2
    assert {w["group"] for w in wandb_runs} == {s["variant"] for s in runs.values()}
    assert all(w["exit_code"] == 0 and any("val_loss" in h for h in w["history"]) for w in wandb_runs)


@pytest.mark.slow
def test_submitit_local_sweep_survives_preemption(tmp_path, cache):
    args = ["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={tmp_path}/multirun", *overrides(tmp_path, cache, *SWEEP)]
    proc = subprocess.Popen([sys.executable, "-m", "mbexp.train", *clean(args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    runs = tmp_path / "results" / "runs" / "default"
    deadline = time.time() + 180
    while True:  # preempt the relu job once it has logged a few times
        assert time.time() < deadline and proc.poll() is None, "the relu job never got going"
        metrics = list(runs.glob("layer-pre-relu-*/seed=0/metrics.jsonl"))
        if metrics and metrics[0].read_text().count("\n") >= 4:
            break
        time.sleep(0.05)
    pid = int((metrics[0].parent / ".lock").read_text().split()[1])
    os.kill(pid, signal.SIGUSR2)  # submitit's preemption signal
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    job_logs = "".join(p.read_text() for p in (tmp_path / "multirun").glob(".submitit/*/*_log.out"))
    assert "Requeued job" in job_logs
    resumed_at = [line for line in job_logs.splitlines() if "resuming" in line]
    assert len(resumed_at) == 1 and 0 < int(resumed_at[0].split()[-1]) < 120  # checkpointed at the signal
    submitit_runs = by_ffn(tmp_path / "results")
    assert {s["status"] for s in submitit_runs.values()} == {"completed"}
    for ffn in ("relu", "swiglu"):  # the preempted run and its neighbour: the runs trained in one go
        uninterrupted = train(compose_config(clean(overrides(tmp_path / ffn, cache, *BUDGET, f"ffn={ffn}"))))
        assert submitit_runs[ffn]["variant"] == uninterrupted["variant"]
        assert submitit_runs[ffn]["final_val_loss"] == uninterrupted["final_val_loss"]


@pytest.mark.slow
def test_two_process_gloo_ddp_follows_the_single_process_run(tmp_path, cache):
    args = clean(overrides(tmp_path / "ddp", cache, "train.batch_size=8", "train.log_every=1", logger="wandb"))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "mbexp.train",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = train(compose_config(clean(overrides(tmp_path / "single", cache, "train.batch_size=8",
                                                  "train.log_every=1"))))
    (ddp,) = summaries(tmp_path / "ddp" / "results")
    assert ddp["status"] == "completed" and ddp["tokens_seen"] == single["tokens_seen"]
    run_dirs = list((tmp_path / "ddp" / "results").glob("runs/*/*/seed=0"))
    assert len(run_dirs) == 1
    single_dir = next((tmp_path / "single" / "results").glob("runs/*/*/seed=0"))
    (ddp_train, _), (single_train, _) = losses(run_dirs[0]), losses(single_dir)
    assert [s for s, _ in ddp_train] == [s for s, _ in single_train] == list(range(1, 31))
    for (_, a), (_, b) in zip(ddp_train[:10], single_train[:10]):
        assert abs(a - b) < 1e-4
    assert abs(ddp["final_val_loss"] - single["final_val_loss"]) < 1e-3
    assert len(offline_runs(tmp_path / "ddp")) == 1


def test_slurm_preset_composes_with_sbatch_parameters():
    proc = mbexp_train(["hydra/launcher=slurm", "slurm.partition=a100", "slurm.gpus_per_node=4", "--cfg", "job"])
    assert proc.returncode == 0, proc.stderr
    assert "partition: a100" in proc.stdout and "gpus_per_node: 4" in proc.stdout
    proc = mbexp_train(["hydra/launcher=slurm", "--cfg", "hydra", "-p", "hydra.launcher"])
    assert proc.returncode == 0, proc.stderr
    assert "SlurmLauncher" in proc.stdout and "partition: ${slurm.partition}" in proc.stdout
    cfg = compose_config(["hydra/launcher=slurm", "+experiment=shazeer_ffn", "slurm.partition=a100",
                          "slurm.timeout_min=60"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert (launcher.partition, launcher.timeout_min, launcher.gpus_per_node) == ("a100", 60, 1)
    assert (launcher.array_parallelism, launcher.max_num_timeout) == (32, 10)
    assert cfg.hydra.sweeper.params.ffn.count(",") == 7
