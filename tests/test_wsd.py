"""Warm-up-stable-decay and budget branches: every budget of one wsd run equals its standalone run bit for bit."""

import json
import math

import pytest
from test_resume import kill_when
from tiny import clean, mbexp_train, metrics, overrides, popen_train

from mbexp.config import OptimConfig, TrainConfig, compose_config, to_object
from mbexp.run.identity import run_dir
from mbexp.schedule import cooldown_start, lr_at, lr_for, valid_budgets, wsd_problem
from mbexp.trainer import train

WSD = ["optim.schedule=wsd", "device=cpu", "compile=false", "train.eval_every=10", "train.log_every=3"]
SAME = ("variant", "config_hash", "identity", "step", "early_step", "early_val_loss", "final_val_loss", "final_val_bpb",
        "final_test_loss", "final_train_loss", "tokens_seen")
TIMING = ("tokens_per_s",)


def test_wsd_holds_the_peak_until_the_cool_down_of_each_budget():
    kw = dict(lr=1.0, warmup_steps=10, schedule="wsd", min_lr_ratio=0.1)
    assert cooldown_start(400, 0.2) == 320 and cooldown_start(800, 0.2) == 640 and cooldown_start(16, 0.2) == 13
    assert [lr_at(s, total_steps=400, **kw) for s in (0, 9, 10, 319)] == pytest.approx([0.1, 1.0, 1.0, 1.0])
    trunk = range(320)
    assert [lr_at(s, total_steps=400, **kw) for s in trunk] == [lr_at(s, total_steps=800, **kw) for s in trunk]
    assert lr_at(359, total_steps=400, **kw) == pytest.approx(1 - 0.9 * 40 / 80)
    assert lr_at(399, total_steps=400, **kw) == pytest.approx(0.1)
    sqrt = lr_at(339, total_steps=400, cooldown_shape="sqrt", **kw)
    assert sqrt == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(20 / 80)))
    lrs = [lr_at(s, total_steps=400, cooldown_shape="sqrt", **kw) for s in range(10, 400)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_the_cool_down_decays_from_its_first_step():
    """Budget 400 at 20%: step 319 is the last at the peak, step 320 already takes the first decay step (p = 1/80)."""
    kw = dict(lr=1.0, warmup_steps=10, total_steps=400, schedule="wsd", min_lr_ratio=0.1)
    assert lr_at(319, **kw) == 1.0
    assert lr_at(320, **kw) == pytest.approx(1 - 0.9 / 80)
    assert lr_at(320, cooldown_shape="sqrt", **kw) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(1 / 80)))


def test_a_cool_down_may_start_right_after_the_warm_up_not_inside_it():
    """Warm-up trains steps 0..W-1 (docs/usage.md), so a budget of 20 at 20% (cool-down from step 16) fits a
    warm-up of 16 steps and not one of 17."""
    def problem(warmup: int) -> str | None:
        return wsd_problem(OptimConfig(schedule="wsd", warmup_steps=warmup, cooldown_fraction=0.2),
                           TrainConfig(steps=20, budgets=[20, 40]))

    assert cooldown_start(20, 0.2) == 16
    assert problem(16) is None
    assert problem(17) == ("a 20-step wsd run cools down from step 16 (optim.cooldown_fraction=0.2), which must come "
                           "after optim.warmup_steps=17 and before its last step")


@pytest.mark.parametrize(("args", "message"), [
    (["train.budgets=[40,80]"], "train.budgets=[40, 80] needs optim.schedule=wsd (got cosine)"),
    (["optim.schedule=wsd", "train.budgets=[40,40]"], "train.budgets=[40, 40] must be distinct positive step counts"),
    (["optim.schedule=wsd", "train.budgets=[0,40]"], "train.budgets=[0, 40] must be distinct positive step counts"),
    (["optim.schedule=wsd", "train.budgets=[20,80]", "optim.warmup_steps=30"],
     "a 20-step wsd run cools down from step 16 (optim.cooldown_fraction=0.2), which must come after "
     "optim.warmup_steps=30"),
    (["optim.schedule=wsd", "train.steps=20", "optim.warmup_steps=30"],
     "a 20-step wsd run cools down from step 16 (optim.cooldown_fraction=0.2), which must come after "
     "optim.warmup_steps=30"),
    (["optim.schedule=wsd", "optim.cooldown_fraction=1.5"], "optim.cooldown_fraction=1.5 must lie strictly between"),
    (["optim.schedule=wsd", "optim.cooldown_fraction=0"], "optim.cooldown_fraction=0.0 must lie strictly between"),
    (["optim.schedule=wsd", "optim.cooldown_fraction=1"], "optim.cooldown_fraction=1.0 must lie strictly between"),
    (["optim.schedule=wsd", "optim.cooldown_shape=cubic"],
     "optim.cooldown_shape='cubic' is not valid; choose one of: linear, sqrt"),
])
def test_bad_budgets_stop_with_one_line(args, message):
    from mbexp.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        to_object(compose_config(args))


def test_the_trainers_lr_follows_the_configs_cool_down_fraction_and_shape():
    o = OptimConfig(lr=1.0, warmup_steps=10, schedule="wsd", min_lr_ratio=0.1, cooldown_fraction=0.5,
                    cooldown_shape="sqrt")
    # a half-run cool-down starts at step 50 of 100: step 60 is 11/50 of the way down; 0.2 would still hold the peak
    assert lr_for(o, 60, 100) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(11 / 50)))


def test_a_budget_of_one_step_is_a_positive_step_count():
    assert valid_budgets([1]) and valid_budgets((1, 400))
    assert not valid_budgets([0, 400]) and not valid_budgets([400, 400]) and not valid_budgets([]) \
        and not valid_budgets([2.5])


def test_bad_budgets_exit_2_before_any_job(tmp_path, cache):
    done = mbexp_train(overrides(tmp_path, cache, "optim.schedule=wsd", "train.budgets=[40,40]"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["error: train.budgets=[40, 40] must be distinct positive step counts"]
    assert not (tmp_path / "results").exists()


def test_a_budget_is_pending_until_it_finished_or_holds_its_own_checkpoint_at_its_cool_down(tmp_path, cache):
    from mbexp.io import SUMMARY
    from mbexp.run import checkpoint
    from mbexp.run.branches import Branch

    cfg = to_object(compose_config(clean(overrides(tmp_path, cache, *WSD, "train.steps=16"))))
    b = Branch(cfg, tmp_path / "b16", "own")
    b.directory.mkdir()
    assert b.start == 13 and b.pending()
    for chash, step, pending in [("own", 12, True), ("other", 13, True), ("own", 13, False), ("own", 14, False)]:
        checkpoint.remove(b.directory)
        checkpoint.save(b.directory, {"config_hash": chash, "step": step})
        assert b.pending() is pending, (chash, step)
    checkpoint.remove(b.directory)
    for chash, status, pending in [("own", "completed", False), ("other", "completed", True), ("own", "running", True)]:
        (b.directory / SUMMARY).write_text(json.dumps({"status": status, "config_hash": chash}))
        assert b.pending() is pending, (chash, status)


def test_a_budget_whose_early_evaluation_is_missing_or_diverged_gets_no_checkpoint_from_the_trunk(tmp_path, cache):
    """Where a budget's early evaluation falls at or before its cool-down start (here both at step 2), the trunk saves
    it a checkpoint only with that evaluation in hand and finite; without it the budget trains alone. The learner is
    None: a checkpoint would need it."""
    from types import SimpleNamespace

    from mbexp.run.branches import Branch, Trunk

    cfg = to_object(compose_config(clean(overrides(tmp_path, cache, *WSD, "train.steps=16",
                                                   "optim.cooldown_fraction=0.875", "optim.warmup_steps=0"))))
    b = Branch(cfg, tmp_path / "b16", "own")
    assert b.early == b.start == 2
    run = SimpleNamespace(records=[{"step": 1, "loss": 5.0}], branch_evals={})  # a trunk resumed past step 2
    trunk = Trunk([b], evaluate=None)
    assert trunk.state(b, run, learner=None) is None
    for loss in (math.nan, math.inf):
        run.branch_evals = {b.key: [{"step": 2, "val_loss": loss, "val_bpb": loss}]}
        assert trunk.state(b, run, learner=None) is None, loss


def standalone(tmp, cache, budget, *extra):
    cfg = compose_config(clean(overrides(tmp, cache, *WSD, f"train.steps={budget}", *extra)))
    return train(cfg), run_dir(to_object(cfg))


def assert_same_run(branch_dir, reference_dir, reference):
    summary = json.loads((branch_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert {k: summary[k] for k in SAME} == {k: reference[k] for k in SAME}
    strip = [[{k: v for k, v in r.items() if k not in TIMING} for r in metrics(d)] for d in (branch_dir, reference_dir)]
    assert strip[0] == strip[1]


@pytest.mark.parametrize("extra", [[], ["optim=muon"]], ids=["adamw", "muon"])
def test_the_branches_of_one_wsd_run_equal_standalone_runs_bit_for_bit(tmp_path, cache, caplog, extra):
    # budget 16: early step 2 and cool-down start 13 fall between the trunk's evaluations and log lines
    caplog.set_level("INFO", logger="mbexp")
    trunk = train(compose_config(clean(overrides(tmp_path / "branched", cache, *WSD, "train.budgets=[16,40]",
                                                 *extra))))
    assert trunk["steps"] == 40 and trunk["status"] == "completed"
    assert "from step 13" in caplog.text, "budget 16 ran only its cool-down, from the trunk's checkpoint"
    assert len(list((tmp_path / "branched").rglob("summary.json"))) == 2
    for budget in (16, 40):
        reference, ref_dir = standalone(tmp_path / "alone", cache, budget, *extra)
        _, branch_dir = standalone(tmp_path / "branched", cache, budget, *extra)  # a rerun: skipped, finished
        assert_same_run(branch_dir, ref_dir, reference)


def test_branches_the_trunk_evaluates_at_or_before_their_early_step_equal_standalone_runs(tmp_path, cache):
    """eval_every=2: the trunk's own evaluation is budget 16's early one (step 2) and comes before budget 24's (step 3,
    also a log step). Each branch's summary names the trunk step and seconds it took over, and its own W&B run."""
    every2 = ["train.eval_every=2"]
    trunk = train(compose_config(clean(overrides(tmp_path / "branched", cache, *WSD, *every2,
                                                 "train.budgets=[16,24,40]"))))
    assert trunk["status"] == "completed" and trunk["branched"] is None
    for budget in (16, 24):
        reference, ref_dir = standalone(tmp_path / "alone", cache, budget, *every2)
        summary, branch_dir = standalone(tmp_path / "branched", cache, budget, *every2)
        assert_same_run(branch_dir, ref_dir, reference)
        assert summary["early_step"] == budget // 8
        assert summary["wandb_id"].startswith(f"{summary['config_hash']}-s{summary['seed']}-")
        assert set(summary["branched"]) == {"step", "wall_time_s"}
        assert summary["branched"]["step"] == cooldown_start(budget, 0.2)
        took = summary["branched"]["wall_time_s"]
        assert isinstance(took, float) and round(took, 3) == took and 0 < took < trunk["wall_time_s"]


def test_a_branch_that_cools_down_before_its_early_step_equals_its_standalone_run(tmp_path, cache):
    """A 93% cool-down: budget 16 leaves the trunk at step 1, before its early evaluation (step 2), which it then
    makes itself."""
    steep = ["optim.cooldown_fraction=0.93", "optim.warmup_steps=0"]
    train(compose_config(clean(overrides(tmp_path / "branched", cache, *WSD, *steep, "train.budgets=[16,40]"))))
    reference, ref_dir = standalone(tmp_path / "alone", cache, 16, *steep)
    summary, branch_dir = standalone(tmp_path / "branched", cache, 16, *steep)
    assert summary["branched"]["step"] == 1 and summary["early_step"] == 2
    assert_same_run(branch_dir, ref_dir, reference)


def test_a_branch_that_cools_down_at_its_early_step_takes_the_trunks_evaluation_there(tmp_path, cache):
    """An 87.5% cool-down: budget 16 leaves the trunk at step 2, its early step; the trunk evaluates there for it and
    the branch takes over from the trunk (not a run of its own)."""
    steep = ["optim.cooldown_fraction=0.875", "optim.warmup_steps=0"]
    train(compose_config(clean(overrides(tmp_path / "branched", cache, *WSD, *steep, "train.budgets=[16,40]"))))
    reference, ref_dir = standalone(tmp_path / "alone", cache, 16, *steep)
    summary, branch_dir = standalone(tmp_path / "branched", cache, 16, *steep)
    assert summary["branched"] and summary["branched"]["step"] == 2 == summary["early_step"]
    assert_same_run(branch_dir, ref_dir, reference)


@pytest.mark.slow
def test_a_kill_in_the_trunk_and_in_a_branch_resumes_bit_for_bit(tmp_path, cache):
    extra = ["optim.cooldown_fraction=0.5", "train.checkpoint_every=5"]  # budget 40 branches at 20, trunk at 40
    args = overrides(tmp_path / "killed", cache, *WSD, *extra, "train.budgets=[40,80]")
    branch = run_dir(to_object(compose_config(clean(overrides(tmp_path / "killed", cache, *WSD, *extra,
                                                              "train.steps=40")))))
    trunk = run_dir(to_object(compose_config(clean(overrides(tmp_path / "killed", cache, *WSD, *extra,
                                                             "train.steps=80")))))
    kill_when(popen_train(args), lambda: (branch / "checkpoint.pt").exists())  # the trunk is past step 20
    assert json.loads((trunk / "summary.json").read_text())["status"] == "running"
    assert not (branch / "summary.json").exists()

    def branch_running():
        summary = json.loads((branch / "summary.json").read_text()) if (branch / "summary.json").exists() else {}
        return summary.get("status") == "running" and (branch / "checkpoint.prev.pt").exists()

    kill_when(popen_train(args), branch_running)  # the branch saved its step-25 checkpoint
    done = mbexp_train(args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" in done.stdout + done.stderr
    for budget, directory in ((40, branch), (80, trunk)):
        reference, ref_dir = standalone(tmp_path / "alone", cache, budget, *extra)
        assert_same_run(directory, ref_dir, reference)


def test_a_cool_down_of_half_a_step_rounds_up():
    # round(f * T) with halves up, not Python's round half to even (12 would give 8 and 38)
    assert cooldown_start(10, 0.25) == 7 and cooldown_start(50, 0.25) == 37


def test_force_reruns_every_budget_even_a_finished_or_missing_branch(tmp_path, cache):
    def run(*extra):
        return train(compose_config(clean(overrides(tmp_path, cache, *WSD, "train.budgets=[16,40]", *extra))))

    assert run()["status"] == "completed"
    [branch] = [p for p in tmp_path.rglob("summary.json") if json.loads(p.read_text())["steps"] == 16]
    first = json.loads(branch.read_text())
    branch.write_text(json.dumps(first | {"final_val_loss": 999.0}))  # a finished branch force must not keep
    assert run("force=true")["status"] == "completed"
    assert json.loads(branch.read_text())["final_val_loss"] == first["final_val_loss"]
    branch.unlink()  # a branch that never finished: force starts it afresh all the same
    assert run("force=true")["status"] == "completed"
    assert json.loads(branch.read_text())["final_val_loss"] == first["final_val_loss"]
