"""compile=auto|true|false: the config, and a sweep that compiles each shape once (the auto rule: test_speed.py)."""

from collections import Counter

import pytest
import torch
from tiny import clean, compile_capturing, losses, mbexp_train, overrides, summaries

from mbexp import trainer
from mbexp.config import ConfigError, compose_config, to_object
from mbexp.run.identity import run_dir
from mbexp.trainer import compile_model, train


def test_compile_config_takes_auto_true_false_and_names_them_otherwise():
    assert to_object(compose_config([])).compile == "auto"
    assert to_object(compose_config(["compile=true"])).compile == "true"
    assert to_object(compose_config(["compile=False"])).compile == "false"
    with pytest.raises(ConfigError, match="compile='maybe' is not valid; choose one of: auto, true, false"):
        to_object(compose_config(["compile=maybe"]))


@pytest.mark.slow
def test_a_sweep_compiles_a_shape_once(tmp_path, cache):
    tiny = ["model.n_layers=1", "train.steps=4", "train.eval_every=4", "train.log_every=2", "compile=true"]
    # scalar C++ kernels build in about 2/3 the time, and one compile thread starts no pool of compile workers
    # (each would import torch): the same mechanism
    scalar = {"TORCHINDUCTOR_VEC_ISA_OK": "0", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    proc = mbexp_train(["-m", *overrides(tmp_path, cache, *tiny), "seed=0,1"], timeout=600, env=scalar)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = sorted(summaries(tmp_path / "results"), key=lambda s: s["seed"])
    assert first["compiled"] and second["compiled"]
    assert first["compile_s"] > 1.0  # dynamo, AOT autograd and inductor, from an empty cache
    assert second["compile_s"] < 0.25 * first["compile_s"]  # the compiled step is reused, not rebuilt
    assert first["tokens_per_s"] > 0 and second["tokens_per_s"] > 0  # the timed steps exclude the compile
    assert (cache / "inductor").is_dir()  # the on-disk cache beside the token cache
    eager = mbexp_train(overrides(tmp_path / "eager", cache, *tiny[:-1], "compile=false"))
    assert eager.returncode == 0, eager.stderr[-3000:]
    (plain,) = summaries(tmp_path / "eager" / "results")
    assert plain["compiled"] is False and plain["compile_s"] is None
    assert plain["variant"] == first["variant"]  # compile does not decide the run's identity
    assert plain["final_val_loss"] == pytest.approx(first["final_val_loss"], abs=2e-3)


def test_compile_model_wraps_the_model_itself_for_fixed_shapes():
    """Lazily: nothing compiles until the first step; dynamic=False: each batch shape gets a static graph, not
    one with symbolic shapes."""
    model = torch.nn.Linear(4, 4)
    compiled = compile_model(model)
    assert isinstance(compiled, torch.nn.Module) and compiled._orig_mod is model
    assert compiled.dynamo_ctx._dynamic is False


def test_compile_true_runs_every_training_step_through_the_compiled_model(tmp_path, cache, monkeypatch):
    """compile=true compiles the model the optimiser trains, whatever the run's length, and each training step's
    forward runs the compiled graph; evaluation runs the model itself."""
    runs = Counter()
    monkeypatch.setattr(trainer, "compile_model", compile_capturing(runs))
    summary = trainer.train(compose_config(clean(overrides(tmp_path, cache, "compile=true", "train.steps=3",
                                                           "train.eval_every=3", "device=cpu"))))
    assert summary["status"] == "completed" and summary["compiled"] is True and summary["compile_s"] is not None
    # each captured graph (one, or more where dynamo breaks the forward) runs alike in each of the 3 steps, and in
    # no evaluation
    assert runs and all(n % 3 == 0 for n in runs.values())


def test_compile_true_trains_the_runs_own_model_through_compile_model(tmp_path, cache, monkeypatch):
    """A compiled run's steps call compile_model(model). With dynamo switched off, torch.compile hands back what it
    is given, so the compiled run trains without a compile's wait, to the eager run's losses."""
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    short = ["train.steps=2", "train.log_every=1", "train.eval_every=2", "device=cpu"]
    cfgs = {s: compose_config(clean(overrides(tmp_path / s, cache, *short, f"compile={s}"))) for s in ("true", "false")}
    compiled, eager = train(cfgs["true"]), train(cfgs["false"])
    assert compiled["status"] == "completed" and compiled["compiled"] is True and eager["compiled"] is False
    assert losses(run_dir(to_object(cfgs["true"]))) == losses(run_dir(to_object(cfgs["false"])))
