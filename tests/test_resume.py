"""Sweeps that survive: SIGKILL and resume, skip finished runs, one trainer per run, damaged checkpoints."""

import json
import logging
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from tiny import clean, losses, make_table_here, mbexp_train, overrides, popen_train, summaries
from wandb_files import offline_runs

from mbexp.config import compose_config, to_object
from mbexp.run.identity import run_dir
from mbexp.trainer import train

SLOW = ["train.steps=60", "train.checkpoint_every=10", "train.eval_every=20"]


def kill_when(proc, ready, timeout: float = 180) -> None:
    """SIGKILL the process group as soon as ready() holds."""
    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, f"finished before it could be killed:\n{proc.stdout.read()[-3000:]}"
        assert time.time() < deadline, "condition never reached"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def the_run_dir(tmp: Path, cache: Path, *extra: str) -> Path:
    return run_dir(to_object(compose_config(clean(overrides(tmp, cache, *extra)))))


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "logger"), [([], "wandb"), (["optim=muon", "train.z_loss=1e-4"], "none")],
                         ids=["adamw", "muon"])
def test_sigkill_then_same_command_resumes_to_identical_results(tmp_path, cache, extra, logger):
    """optim=muon: both optimisers' states (Muon's momentum, AdamW's moments) come back from the checkpoint (the
    W&B run's continuation is the optimiser's business in neither: checked once, with AdamW)."""
    run = [*SLOW, *extra]
    reference, ref_dir = None, the_run_dir(tmp_path / "ref", cache, *run)
    reference = train(compose_config(clean(overrides(tmp_path / "ref", cache, *run))))
    args = overrides(tmp_path / "killed", cache, *run, logger=logger)
    directory = the_run_dir(tmp_path / "killed", cache, *run)
    proc = popen_train(args)
    kill_when(proc, lambda: (directory / "checkpoint.prev.pt").exists())  # two checkpoints: step >= 20
    killed = json.loads((directory / "summary.json").read_text())
    # a checkpoint's step (the kill may fall between the second checkpoint and its summary)
    assert killed["status"] == "running" and killed["step"] >= 10 and killed["step"] % 10 == 0
    resumed = mbexp_train(args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout + resumed.stderr
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["final_val_loss"] == reference["final_val_loss"]
    assert losses(directory) == losses(ref_dir)
    if logger == "none":
        return
    wandb_dirs = sorted((tmp_path / "killed" / "wandb").glob("offline-run-*"))
    assert len(wandb_dirs) == 2, "the killed process's W&B files and the resumed ones"
    assert {d.name.split("-", 3)[-1] for d in wandb_dirs} == {summary["wandb_id"]}, "one W&B run id, continued"
    assert offline_runs(tmp_path / "killed", killed=1)[-1]["id"] == summary["wandb_id"]


@pytest.mark.slow
def test_sweep_killed_in_second_job_skips_first_resumes_second_runs_third(tmp_path, cache):
    args = ["-m", "seed=0,1,2", *overrides(tmp_path, cache, *SLOW)]
    runs = tmp_path / "results" / "runs" / "default"
    proc = popen_train(args)
    kill_when(proc, lambda: any(runs.glob("*/seed=1/checkpoint.pt")))
    (first,) = runs.glob("*/seed=0/summary.json")
    first_before = first.read_text()
    assert json.loads(first_before)["status"] == "completed"
    assert not any(runs.glob("*/seed=2"))
    rerun = mbexp_train(args)
    log = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, log[-3000:]
    assert first.read_text() == first_before, "the finished run was not touched"
    assert "skip" in log and "seed=0: already completed" in log.replace("/seed=0", " seed=0")
    assert "resuming" in log and "seed=1" in log
    assert sorted((s["seed"], s["status"]) for s in summaries(tmp_path / "results")) == [
        (0, "completed"), (1, "completed"), (2, "completed")]
    table = make_table_here(tmp_path / "results", "--no-wandb")
    assert table.returncode == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if line.startswith("| layer-pre-relu-matched")]
    assert "(3)" in row and "0/3" in row


@pytest.mark.slow
def test_two_processes_on_one_run_exactly_one_trains(tmp_path, cache):
    args = overrides(tmp_path, cache, "train.steps=150", "train.eval_every=50")
    procs = [popen_train(args, warm=False) for _ in range(2)]  # side by side: processes of their own
    outs = [p.communicate(timeout=300)[0] for p in procs]
    trained = [o for o in outs if "completed at step 150" in o]
    assert len(trained) == 1, outs
    other, code = outs[1 - outs.index(trained[0])], procs[1 - outs.index(trained[0])].returncode
    assert procs[outs.index(trained[0])].returncode == 0
    # the other one skipped the finished run (0), or left it to the training process and says so: exit 3, no
    # quiet success while the run is unfinished
    assert (code, "already completed" in other) == (0, True) or (
        code == 3 and "error: run " in other and "is being trained by another process" in other), outs
    (summary,) = summaries(tmp_path / "results")
    assert summary["status"] == "completed"
    directory = the_run_dir(tmp_path, cache, "train.steps=150", "train.eval_every=50")
    steps = [s for s, _ in losses(directory)[0]]
    assert steps == list(range(5, 151, 5)), "metrics written once, in order"


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_checkpoint_falls_back_or_restarts(tmp_path, cache, damage, caplog):
    caplog.set_level(logging.INFO)
    ref = train(compose_config(clean(overrides(tmp_path / "ref", cache, *SLOW))))
    args = overrides(tmp_path, cache, *SLOW)
    directory = the_run_dir(tmp_path, cache, *SLOW)
    kill_when(popen_train(args), lambda: all((directory / f).exists() for f in ("checkpoint.pt", "checkpoint.prev.pt")))
    latest = directory / "checkpoint.pt"
    previous_step = torch.load(directory / "checkpoint.prev.pt", weights_only=True)["step"]
    if damage == "truncate":  # the latest is cut short: fall back to the previous one
        latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    else:  # both are garbage: start again
        for f in directory.glob("checkpoint*.pt"):
            f.write_bytes(os.urandom(4096))
    summary = train(compose_config(clean(args)))
    assert summary["status"] == "completed"
    assert summary["final_val_loss"] == ref["final_val_loss"]
    warnings = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert warnings and "checkpoint.pt" in warnings[0]
    # the trainer's line (not the warning's "resuming from checkpoint.prev.pt") names the run and its step
    resumed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming")]
    assert resumed == ([f"resuming {directory} from step {previous_step}"] if damage == "truncate" else [])
    restarted = [r.getMessage() for r in caplog.records if "training again from step 0" in r.getMessage()]
    assert bool(restarted) == (damage == "garbage")


def test_changed_config_value_gets_its_own_directory_and_skips_nothing(tmp_path, cache):
    a, dir_a = train(compose_config(clean(overrides(tmp_path, cache)))), the_run_dir(tmp_path, cache)
    again = train(compose_config(clean(overrides(tmp_path, cache))))
    assert again == a, "the same config is skipped and returns the stored summary"
    b = train(compose_config(clean(overrides(tmp_path, cache, "optim.lr=0.002"))))
    dir_b = the_run_dir(tmp_path, cache, "optim.lr=0.002")
    assert dir_a != dir_b and dir_a.parent.name != dir_b.parent.name
    assert b["status"] == "completed" and b["final_val_loss"] != a["final_val_loss"]
    assert len(summaries(tmp_path / "results")) == 2


def test_force_reruns_a_finished_run(tmp_path, cache):
    a = train(compose_config(clean(overrides(tmp_path, cache))))
    directory = the_run_dir(tmp_path, cache)
    # mark the stored files: a skip would hand back this summary and leave the emptied metrics as they are
    (directory / "summary.json").write_text(json.dumps({**a, "wall_time_s": -1.0}))
    (directory / "metrics.jsonl").write_text("")
    b = train(compose_config(clean(overrides(tmp_path, cache, "force=true"))))
    assert b["status"] == "completed" and b["wall_time_s"] > 0, "force=true skipped the finished run"
    assert json.loads((directory / "summary.json").read_text())["wall_time_s"] == b["wall_time_s"]
    assert b["final_val_loss"] == pytest.approx(a["final_val_loss"], abs=1e-4)
    steps = [s for s, _ in losses(the_run_dir(tmp_path, cache))[0]]
    assert steps == list(range(5, 31, 5)), "metrics rewritten from step 0, not appended"


def test_a_finished_summary_of_another_config_is_not_this_runs(tmp_path):
    from mbexp.run.state import finished_summary

    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "config_hash": "x"}))
    assert finished_summary(tmp_path, "x")["status"] == "completed" and finished_summary(tmp_path, "y") is None


def test_a_checkpoint_of_another_config_is_never_resumed(tmp_path, caplog):
    """A checkpoint names its config's hash: one of another config is passed over for this run's previous one,
    and without one of this config the run starts from step 0."""
    from mbexp.run import checkpoint

    checkpoint.save(tmp_path, {"config_hash": "ours", "step": 10})
    checkpoint.save(tmp_path, {"config_hash": "theirs", "step": 20})  # the latest; ours becomes the previous one
    assert checkpoint.load(tmp_path, config_hash="ours") == {"config_hash": "ours", "step": 10}
    assert checkpoint.load(tmp_path, config_hash="other") is None
    assert "training again from step 0" in caplog.text


def test_no_readable_checkpoint_names_the_folder_and_every_file_passed_over(tmp_path, caplog):
    """Both checkpoints of another config: nothing to resume, and one warning naming the folder and each file."""
    from mbexp.run import checkpoint

    checkpoint.save(tmp_path, {"config_hash": "theirs", "step": 10})
    checkpoint.save(tmp_path, {"config_hash": "theirs", "step": 20})
    assert {p.name for p in tmp_path.iterdir()} == {checkpoint.LATEST, checkpoint.PREVIOUS}
    with caplog.at_level(logging.WARNING):
        assert checkpoint.load(tmp_path, config_hash="ours") is None
    [warning] = [r.getMessage() for r in caplog.records]
    other = "a checkpoint of another config, not this run's"
    assert warning == (f"no readable checkpoint in {tmp_path} (unreadable: {checkpoint.LATEST}: {other}; "
                       f"{checkpoint.PREVIOUS}: {other}): training again from step 0")


def test_a_previous_checkpoint_alone_is_resumed_and_a_passed_over_one_is_named(tmp_path, caplog):
    """The latest checkpoint missing: the previous one is read. One of another config passed over: the warning names
    the folder and says why, and the run resumes from this config's previous checkpoint."""
    from mbexp.run import checkpoint

    checkpoint.save(tmp_path, {"config_hash": "ours", "step": 10})
    (tmp_path / checkpoint.LATEST).rename(tmp_path / checkpoint.PREVIOUS)
    assert checkpoint.load(tmp_path, config_hash="ours") == {"config_hash": "ours", "step": 10}
    assert not caplog.records
    checkpoint.save(tmp_path, {"config_hash": "theirs", "step": 20})  # the latest; the previous one stays ours
    (tmp_path / checkpoint.PREVIOUS).unlink()
    checkpoint.save(tmp_path, {"config_hash": "ours", "step": 30})
    checkpoint.save(tmp_path, {"config_hash": "theirs", "step": 40})
    with caplog.at_level(logging.WARNING):
        assert checkpoint.load(tmp_path, config_hash="ours") == {"config_hash": "ours", "step": 30}
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (f"checkpoint unreadable in {tmp_path} (checkpoint.pt: a checkpoint of another config, not "
                       "this run's): resuming from checkpoint.prev.pt")
