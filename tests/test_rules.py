"""Pure rules: the learning-rate schedule, the run identity, the variant name and run directory, argv."""

import math
from pathlib import Path

import pytest

from mbexp.config import OptimConfig, compose_config, to_object
from mbexp.run.identity import config_hash, identity, row_name, run_dir, variant_name
from mbexp.schedule import lr_at, lr_for
from mbexp.train import normalize_argv


def test_warmup_is_linear_from_zero_then_cosine_to_the_floor():
    kw = dict(lr=1.0, warmup_steps=10, total_steps=110, schedule="cosine", min_lr_ratio=0.1)
    assert [lr_at(s, **kw) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert lr_at(9, **kw) == pytest.approx(1.0) and lr_at(10, **kw) == pytest.approx(1.0)
    assert lr_at(60, **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 50 / 99)))
    assert lr_at(109, **kw) == pytest.approx(0.1)
    lrs = [lr_at(s, **kw) for s in range(10, 110)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:])), "monotone decay after warm-up"


def test_no_warmup_starts_at_full_lr_and_other_schedules():
    assert lr_at(0, lr=3e-3, warmup_steps=0, total_steps=100) == pytest.approx(3e-3)
    linear = dict(lr=1.0, warmup_steps=0, total_steps=101, schedule="linear", min_lr_ratio=0.0)
    assert [lr_at(s, **linear) for s in (0, 50, 100)] == pytest.approx([1.0, 0.5, 0.0])
    assert lr_at(77, lr=2.0, warmup_steps=5, total_steps=100, schedule="constant") == 2.0
    with pytest.raises(ValueError, match="cosine, linear, constant"):
        lr_at(50, lr=1.0, warmup_steps=0, total_steps=100, schedule="step")


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_a_decay_of_one_step_reaches_the_floor_at_the_last_step_and_of_none_holds_the_peak(schedule):
    kw = dict(lr=1.0, warmup_steps=3, schedule=schedule, min_lr_ratio=0.1)
    assert [lr_at(s, total_steps=5, **kw) for s in (3, 4)] == pytest.approx([1.0, 0.1])
    assert lr_at(3, total_steps=4, **kw) == 1.0


@pytest.mark.parametrize("schedule", ["cosine", "linear", "wsd"])
def test_past_its_last_step_the_lr_stays_at_the_floor(schedule):
    kw = dict(lr=1.0, warmup_steps=10, total_steps=100, schedule=schedule, min_lr_ratio=0.1)
    assert [lr_at(s, **kw) for s in (99, 100, 130)] == pytest.approx([0.1, 0.1, 0.1])


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_lr_at_defaults_to_the_optim_configs_schedule_settings(schedule):
    """lr_at's keyword defaults (floor, cool-down fraction and shape, cosine) are OptimConfig's."""
    chosen = {} if schedule == "cosine" else {"schedule": schedule}
    by_default = [lr_at(s, lr=1.0, warmup_steps=10, total_steps=100, **chosen) for s in range(100)]
    assert by_default == [lr_for(OptimConfig(lr=1.0, warmup_steps=10, **chosen), s, 100) for s in range(100)]


def resolved(c, auto: str = "bf16"):
    """The config as a run hashes it: precision=auto resolved (bf16, as on the CPU of the committed runs)."""
    c.precision = auto if c.precision == "auto" else c.precision
    return c


def cfg(*overrides):
    return resolved(to_object(compose_config(list(overrides))))


def test_variant_name_is_readable_and_unique():
    base = cfg("norm=rms", "ffn=swiglu")
    assert row_name(base) == "rms-pre-swiglu-matched"
    assert variant_name(base) == f"rms-pre-swiglu-matched-wu30-{config_hash(base)}"
    assert variant_name(base) == variant_name(cfg("norm=rms", "ffn=swiglu")), "same config, same name"
    others = [cfg("norm=rms", "ffn=swiglu", o) for o in
              ("optim.lr=0.001", "train.steps=301", "model.d_model=256", "norm.eps=1e-6", "data.vocab_size=2048",
               "hidden.multiple_of=8", "optim.warmup_steps=0", "model.pos=learned", "precision=fp32")]
    names = {variant_name(c) for c in others} | {variant_name(base)}
    assert len(names) == len(others) + 1, "every change of a value that counts gives a new directory"


def test_where_and_how_a_run_is_logged_does_not_change_its_identity():
    base = cfg()
    for o in ("seed=3", "logger=none", "results_dir=elsewhere", "train.log_every=1", "force=true",
              "data.cache_dir=/tmp/x", "train.checkpoint_every=7", "slurm.partition=a100"):
        assert config_hash(cfg(o)) == config_hash(base), o
    assert "seed" not in identity(base) and "logger" not in identity(base)


def test_run_dir_layout():
    c = cfg("seed=2", "name=study", "results_dir=res")
    assert run_dir(c).as_posix() == f"res/runs/study/{variant_name(c)}/seed=2"


def test_row_id_ignores_only_the_warmup():
    a, b = cfg("optim.warmup_steps=0"), cfg("optim.warmup_steps=100")
    assert config_hash(a, without=("optim.warmup_steps",)) == config_hash(b, without=("optim.warmup_steps",))
    assert config_hash(a) != config_hash(b)


@pytest.mark.parametrize(("argv", "expected"), [
    (["t", "norm=rms", "ffn=swiglu", "-m", "seed=0,1,2"], ["t", "--multirun", "norm=rms", "ffn=swiglu", "seed=0,1,2"]),
    (["t", "seed=0,1", "--multirun"], ["t", "--multirun", "seed=0,1"]),
    (["t", "-m", "seed=0,1"], ["t", "--multirun", "seed=0,1"]),
    (["t", "seed=1"], ["t", "seed=1"]),
    (["t", "norm=rms", "-m", "train.steps=5", "seed=1,2"],
     ["t", "--multirun", "norm=rms", "train.steps=5", "seed=1,2"]),
    (["t", "--multi", "seed=0,1"], ["t", "--multirun", "seed=0,1"]),  # argparse's prefix of --multirun
    (["t", "hydra.mode=MULTIRUN", "seed=0,1"], ["t", "--multirun", "seed=0,1"]),  # Hydra's own spelling
    (["t", "--cfg", "job", "--", "seed=1"], ["t", "--cfg", "job", "--", "seed=1"]),
])
def test_multirun_flag_moves_to_the_front(argv, expected):
    assert normalize_argv(argv) == expected


# Golden config -> run-directory pairs: a change that renames a finished run makes its sweep train it again,
# so update these only on purpose, saying so in the commit (data.test_fraction=0: runs before the test split)
GOLDEN_RUN_DIRS = [
    ([], "default/layer-pre-relu-matched-wu30-d18382fd/seed=0"),
    (["norm=rms", "ffn=swiglu", "seed=2"], "default/rms-pre-swiglu-matched-wu30-01c9939f/seed=2"),
    # shazeer_ffn_cpu is pinned to data.test_fraction=0: its committed runs keep their directories
    (["+experiment=shazeer_ffn_cpu", "ffn=geglu"], "shazeer_ffn_cpu/layer-pre-geglu-matched-wu30-f81ec59c/seed=0"),
    (["+experiment=ffn_budgets_cpu", "ffn=geglu"], "ffn_budgets_cpu/layer-pre-geglu-matched-wu30-9c172d7f/seed=0"),
    (["compile=true"], "default/layer-pre-relu-matched-wu30-d18382fd/seed=0"),
    (["data.test_fraction=0"], "default/layer-pre-relu-matched-wu30-b58a8ed0/seed=0"),
    (["data.test_fraction=0", "norm=rms", "ffn=swiglu", "seed=2"],
     "default/rms-pre-swiglu-matched-wu30-d75a6e46/seed=2"),
    (["data.test_fraction=0", "+experiment=warmup_sensitivity_cpu", "placement=post", "optim.warmup_steps=100"],
     "warmup_sensitivity_cpu/layer-post-relu-matched-wu100-96b8f681/seed=0"),
    # placements beyond pre/post, DyT, GQA, biases, tanh GELU, QK-norm, sinusoidal positions, presets
    (["norm=dyt", "placement=peri"], "default/dyt-peri-relu-matched-wu30-ea2dcd4d/seed=0"),
    (["placement=deepnorm", "norm=rms", "norm.eps=1e-6"], "default/rms-deepnorm-relu-matched-wu30-aeec9cec/seed=0"),
    (["+arch=gpt2"], "default/layer-pre-gelu-4d-bias-gelutanh-wu30-2ee83e28/seed=0"),
    (["+arch=vaswani"], "default/layer-post-relu-4d-bias-sinusoidal-wu30-04672253/seed=0"),
    (["norm=dyt", "norm.alpha_init=0.8"], "default/dyt-pre-relu-matched-a0.8-wu30-f3ab3b13/seed=0"),
    # the llama and olmo2 presets take their checkpoints' RoPE base (500,000) and untied head
    (["+arch=llama", "model.n_kv_heads=2"], "default/rms-pre-swiglu-8_3d-kv2-rope500000-wu30-18c500f1/seed=0"),
    (["+arch=olmo2"], "default/rms-output-swiglu-8_3d-qkproj-rope500000-wu30-ed9d1927/seed=0"),
    (["+arch=gemma"], "default/rms-peri-geglu-4d-qkhead-gelutanh-embscale-rope1000000-wu30-4996f260/seed=0"),
    (["model.rope_base=10000"], "default/layer-pre-relu-matched-wu30-d18382fd/seed=0"),  # the default: as before
]


@pytest.mark.parametrize(("overrides", "expected"), GOLDEN_RUN_DIRS)
def test_run_directories_survive_upgrades(overrides, expected):
    cfg = resolved(to_object(compose_config(overrides)))
    assert run_dir(cfg).relative_to(Path(cfg.results_dir) / "runs").as_posix() == expected


def test_the_identity_holds_the_resolved_precision():
    bf16, fp32 = cfg(), cfg("precision=fp32")
    assert identity(bf16)["precision"] == "bf16" and identity(fp32)["precision"] == "fp32"
    assert run_dir(cfg("precision=bf16")) == run_dir(bf16), "auto resolved to bf16 is the same run as bf16"
    assert run_dir(fp32) != run_dir(bf16)
    assert config_hash(fp32, without=("optim.warmup_steps",)) != config_hash(bf16, without=("optim.warmup_steps",))
    with pytest.raises(ValueError, match="precision=auto must be resolved"):
        config_hash(to_object(compose_config([])))


@pytest.mark.parametrize(("overrides", "row"), [
    (["optim=muon"], "layer-pre-relu-matched-muon"),
    (["ffn=relu2", "optim=muon", "train.z_loss=1e-4", "model.logit_softcap=30", "model.attn_softcap=50",
      "model.zero_init_proj=true"], "layer-pre-relu2-matched-muon-z0.0001-cap30-acap50-zproj"),
    (["optim=muon", "optim.adamw_lr=0.001"], "layer-pre-relu-matched-muon-alr0.001"),
])
def test_row_names_show_the_optimiser_and_the_options_set(overrides, row):
    assert row_name(cfg(*overrides)) == row


def test_options_at_their_defaults_stay_out_of_the_identity_and_muon_records_its_lr_scaling():
    base = identity(cfg())
    for key in ("adamw_lr", "adjust_lr_fn"):
        assert key not in base["optim"]
    assert "z_loss" not in base["train"]
    assert not {"logit_softcap", "attn_softcap", "zero_init_proj"} & set(base["model"])
    assert identity(cfg("optim=muon"))["optim"]["adjust_lr_fn"] == "match_rms_adamw"
    assert config_hash(cfg("optim=muon")) != config_hash(cfg("optim=muon", "optim.adjust_lr_fn=original"))
