"""Sweeps: the pre-check of a sweep beyond MAX_COMBINATIONS, and exits 3 and 130 under the joblib and submitit
launchers (docs/troubleshooting.md)."""

import os
import signal
import time

import pytest
from test_exit_codes import SHORT, error_lines
from tiny import clean, mbexp_train, overrides, popen_train, summaries

from mbexp import preflight
from mbexp import train as cli
from mbexp.config import ConfigError, compose_config, to_object
from mbexp.run.identity import RunLock, run_dir

LAUNCHERS = {"joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
             "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]}
SEEDS = ",".join(map(str, range(12)))
RATES = ",".join(f"{k}e-4" for k in range(1, 13))  # 2 x 2 x 12 seeds x 12 rates = 576 combinations


def test_a_sweep_over_512_combinations_checks_each_value_beside_the_others_first():
    assert preflight.MAX_COMBINATIONS == 512
    # n_heads=3 is impossible only beside d_model=32, the second d_model: checked beside the first, 48, it passes
    args = ["model.d_model=48,32", "model.n_heads=2,3", f"seed={SEEDS}", f"optim.lr={RATES}"]
    configs = cli.preflight(args, skip=False)
    assert len(configs) == 1 + 2 + 2 + 12 + 12  # the base, then each value of each list beside the others' first
    assert {(c.model.d_model, c.model.n_heads) for c in configs[1:]} == {(32, 2), (48, 2), (48, 3)}
    with pytest.raises(ConfigError, match="model.d_model=32 is not divisible by model.n_heads=3"):
        cli.preflight(args[:2], skip=False)  # 4 combinations: each checked as it will run
    with pytest.raises(ConfigError, match="train.steps") as err:
        cli.preflight([*args, "train.steps=30,0"], skip=False)  # a value bad on its own still stops the large sweep
    assert str(err.value).startswith("1 of the 30 settings checked (each value beside the other sweeps' first "
                                     "values; the sweep has 1,152 combinations) cannot run: ")


def test_skipping_in_a_sweep_over_512_combinations_counts_settings_not_combinations(tmp_path, capsys):
    args = [f"results_dir={tmp_path}", "model.d_model=48,32", "model.n_heads=2,3", f"seed={SEEDS}",
            f"optim.lr={RATES}", "train.steps=30,0"]
    cli.preflight(args, skip=True)
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("warning: 1 of the 30 settings checked cannot run (each value beside the other "
                              "sweeps' first values; of the sweep's 1,152 combinations, each one that cannot run "
                              "is skipped) (listed in ") and "train.steps=0 (train.steps" in warning, warning
    skipped = (tmp_path / "runs" / "default" / "skipped.txt").read_text().splitlines()
    assert len(skipped) == 1 and "train.steps=0  # train.steps" in skipped[0]


def sweep(tmp, cache, launcher: str, *extra: str) -> list[str]:
    return ["-m", *LAUNCHERS[launcher], f"hydra.sweep.dir={tmp}/multirun", *clean(overrides(tmp, cache, *SHORT)),
            "seed=0,1", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_sweep_with_a_run_held_by_another_process_exits_3(tmp_path, cache, launcher):
    held = run_dir(to_object(compose_config([*clean(overrides(tmp_path, cache, *SHORT)), "seed=1"])))
    with RunLock(held):
        proc = mbexp_train(sweep(tmp_path, cache, launcher))
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = error_lines(proc.stderr)
    assert f"run {held} is being trained by another process" in line and "the sweep ran its other runs" in line
    assert [(s["seed"], s["status"]) for s in summaries(tmp_path / "results")] == [(0, "completed")]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_ctrl_c_during_a_sweep_exits_130_and_keeps_the_checkpoint(tmp_path, cache, launcher):
    args = sweep(tmp_path, cache, launcher, "train.steps=100000", "train.log_every=1", "train.checkpoint_every=5",
                 "hydra.launcher.n_jobs=1" if launcher == "joblib" else "")
    proc = popen_train(args)
    deadline, jobs = time.monotonic() + 180, 2 if launcher == "submitit_local" else 1  # submitit runs both seeds
    while len({p.parent for p in (tmp_path / "results").glob("runs/**/checkpoint*.pt")}) < jobs:
        assert proc.poll() is None and time.monotonic() < deadline, "no job got going"
        time.sleep(0.2)  # every job started is training: Ctrl-C now
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's whole process group
    err, _ = proc.communicate(timeout=180)  # stdout and stderr together
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted: the runs' checkpoints are kept" in err
    assert list((tmp_path / "results").glob("runs/**/checkpoint*.pt")), "the checkpoint is kept"
