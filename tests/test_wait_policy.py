"""OpenMP's wait policy (mbexp.wait_policy): the rule that chooses it, the command lines it reads, and that the
policy changes a run's speed only, never its losses."""

import subprocess
import sys

import pytest
from tiny import REPO, losses, mbexp_train, overrides, summaries

from mbexp import wait_policy
from mbexp.wait_policy import ALONE, PASSIVE, SHARED, choose, describe, launch

QUIET = dict(user={}, jobs=1, world_size=1, slurm_array=False, load_avg=0.3, cores=2)  # a run alone, idle


def test_a_run_alone_on_a_quiet_machine_spins_and_any_company_makes_it_passive():
    assert choose(**QUIET).env == ALONE and "alone" in choose(**QUIET).why
    assert SHARED == PASSIVE and ALONE != SHARED
    for company in (dict(jobs=2), dict(world_size=4), dict(slurm_array=True), dict(load_avg=2.0)):
        assert choose(**QUIET | company).env == SHARED, company
    assert choose(**QUIET | dict(load_avg=1.9)).env == ALONE  # below one job per core
    assert choose(**QUIET | dict(load_avg=7.9, cores=8)).env == ALONE


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}, {"KMP_BLOCKTIME": "0"}])
def test_a_policy_the_user_sets_wins_over_the_rule_in_any_situation(user):
    for situation in (QUIET, QUIET | dict(jobs=8, load_avg=9.0)):
        assert choose(**situation | dict(user=user | {"HOME": "/home/x"})).env == user
    assert choose(**QUIET | dict(user={"OMP_WAIT_POLICY": "", "HOME": "/"})).env == ALONE  # empty: not set


def test_the_command_line_says_how_many_jobs_run_at_once():
    assert launch(["norm=rms"], 4) == (1, False)
    assert launch(["hydra/launcher=joblib", "hydra.launcher.n_jobs=4"], 4) == (1, False)  # no -m: one job
    assert launch(["--multirun", "seed=0,1"], 4) == (1, False)  # Hydra's basic launcher: one at a time
    sweep = ["--multirun", "seed=0,1", "hydra/launcher=joblib"]
    assert launch(sweep, 4) == (4, False)  # joblib's default n_jobs=-1: one per core
    assert launch([*sweep, "hydra.launcher.n_jobs=-2"], 4) == (3, False)
    assert launch([*sweep, "hydra.launcher.n_jobs=1"], 4) == (1, False)
    assert launch([*sweep, "hydra.launcher.n_jobs=x"], 4) == (1, False)  # the pre-flight refuses it
    assert launch(["--multirun", "+hydra/launcher=slurm"], 4) == (1, True)


def test_apply_sets_only_the_chosen_variables_and_describe_names_them():
    env = {"PATH": "/bin"}
    wait_policy.apply(choose(**QUIET | dict(jobs=2)), env)
    assert env == {"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"} and describe(env) == "OMP_WAIT_POLICY=PASSIVE"
    wait_policy.apply(choose(**QUIET), env := {})
    assert env == {} and describe(env) == "OpenMP's default"


def test_the_runtime_is_read_from_the_loaded_libraries():
    gomp = "7f00-7f10 r-xp 0 08:01 1 /venv/torch/lib/libgomp-a34b3233.so.1\n"
    assert wait_policy.runtime(gomp) == "libgomp"
    assert wait_policy.runtime("7f00 r-xp /opt/conda/lib/libiomp5.so\n") == "libiomp5"
    assert wait_policy.runtime("7f00 r-xp /usr/lib/libomp.so.5\n") == "libomp"
    assert wait_policy.runtime("") == "unknown"
    assert [set(e) for e in wait_policy.bounded_spins("libgomp")] == [{"GOMP_SPINCOUNT"}] * 2
    assert [set(e) for e in wait_policy.bounded_spins("libiomp5")] == [{"KMP_BLOCKTIME"}] * 2


def test_the_entry_point_sets_the_policy_before_torch_loads():
    code = """if True:
        import os, runpy, sys
        os.environ.pop("OMP_WAIT_POLICY", None)
        sys.argv = ["mbexp.train", "-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "--help"]
        try:
            runpy.run_module("mbexp.train", run_name="__main__")
        except SystemExit:
            print(os.environ.get("OMP_WAIT_POLICY"), "torch" in sys.modules)
    """
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "PASSIVE False", proc.stdout[-2000:]


def test_the_wait_policy_leaves_the_losses_bitwise_unchanged(tmp_path, cache):
    # two threads, so that OpenMP has threads that wait; libgomp shows the spin count it read (OMP_DISPLAY_ENV)
    runs = {}
    for policy in ("PASSIVE", "ACTIVE"):
        env = {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": policy, "OMP_DISPLAY_ENV": "true"}
        proc = mbexp_train(overrides(tmp_path / policy, cache, "model.d_model=64", "train.batch_size=16",
                                     "train.steps=20"), env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"OpenMP wait policy: OMP_WAIT_POLICY={policy} (set in your environment)" in proc.stderr
        if "GOMP_SPINCOUNT = " in proc.stderr:  # libgomp: PASSIVE waits no spin, ACTIVE spins all but forever
            assert ("GOMP_SPINCOUNT = '0'" in proc.stderr) == (policy == "PASSIVE"), proc.stderr[-3000:]
        [summary] = summaries(tmp_path / policy / "results")
        assert summary["status"] == "completed" and summary["wait_policy"] == f"OMP_WAIT_POLICY={policy}"
        [summary_file] = (tmp_path / policy / "results").glob("runs/**/summary.json")
        runs[policy] = summary, losses(summary_file.parent)
    (passive, passive_losses), (active, active_losses) = runs["PASSIVE"], runs["ACTIVE"]
    assert passive_losses == active_losses and passive_losses[0] and passive_losses[1]
    for key in ("final_val_loss", "final_train_loss", "final_test_loss"):
        assert passive[key] == active[key], key
    assert passive["config_hash"] == active["config_hash"]  # the policy is not part of the run's identity

