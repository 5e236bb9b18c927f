"""The user's exact sweep command, with -m anywhere: real Hydra multiruns, real offline W&B runs."""

import pytest
from tiny import clean, mbexp_train, overrides, summaries
from wandb_files import offline_runs


@pytest.mark.slow
def test_users_exact_command_gives_three_runs_and_three_wandb_runs_in_one_group(tmp_path, cache):
    budget = clean(overrides(tmp_path, cache, logger="wandb"))
    proc = mbexp_train(["norm=rms", "ffn=swiglu", "-m", "seed=0,1,2", *budget])
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = summaries(tmp_path / "results")
    assert sorted(s["seed"] for s in runs) == [0, 1, 2]
    assert {s["status"] for s in runs} == {"completed"}
    assert len({s["variant"] for s in runs}) == 1 and runs[0]["row"] == "rms-pre-swiglu-matched"
    dirs = sorted((tmp_path / "results" / "runs" / "default" / runs[0]["variant"]).iterdir())
    assert [d.name for d in dirs] == ["seed=0", "seed=1", "seed=2"]
    wandb_runs = offline_runs(tmp_path)
    assert len(wandb_runs) == 3
    assert {w["group"] for w in wandb_runs} == {runs[0]["variant"]}
    assert sorted(w["config"]["seed"] for w in wandb_runs) == [0, 1, 2]
    assert all(w["exit_code"] == 0 for w in wandb_runs)


@pytest.mark.slow
def test_the_long_multirun_flag_last(tmp_path, cache):
    """--multirun after every override sweeps too (the flag's other places: test_rules.py)."""
    args = ["norm=rms", "ffn=swiglu", "seed=0,1", *clean(overrides(tmp_path, cache, "train.steps=10")), "--multirun"]
    proc = mbexp_train(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = summaries(tmp_path / "results")
    assert sorted(s["seed"] for s in runs) == [0, 1]
    assert {(s["status"], s["step"], s["axes"]["ffn"], s["axes"]["norm"]) for s in runs} == {
        ("completed", 10, "swiglu", "rms")
    }
