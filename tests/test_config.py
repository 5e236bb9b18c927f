"""Config composition: every option of every group composes; bad input names the key and the choices."""

import pytest
from tiny import mbexp_train

from mbexp.config import CONF_DIR, ConfigError, compose_config, to_object
from mbexp.ffn import FFNS, HIDDEN_RULES
from mbexp.model import PLACEMENTS
from mbexp.norms import NORMS

GROUP_OPTIONS = {
    "norm": list(NORMS), "placement": list(PLACEMENTS), "ffn": list(FFNS), "hidden": list(HIDDEN_RULES),
    "model": ["tiny", "small", "base"], "data": ["bigtxt", "tinystories", "wikitext2", "wikitext103", "text"],
    "optim": ["adamw"], "logger": ["wandb", "none"],
}


def test_group_files_are_exactly_the_registry_names():
    for group, options in GROUP_OPTIONS.items():
        assert sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")) == sorted(options), group


@pytest.mark.parametrize(("group", "option"), [(g, o) for g, opts in GROUP_OPTIONS.items() for o in opts])
def test_every_option_composes_and_names_itself(group, option):
    extra = ["data.path=somewhere.txt"] if option == "text" else []
    cfg = to_object(compose_config([f"{group}={option}", *extra]))
    assert getattr(cfg, group).name == option


@pytest.mark.parametrize("experiment", ["quickstart", "shazeer_ffn", "norm_placement", "warmup_sensitivity",
                                        "shazeer_ffn_cpu", "warmup_sensitivity_cpu"])
def test_experiments_compose_with_a_sweep(experiment):
    cfg = compose_config([f"+experiment={experiment}"], return_hydra_config=True)
    assert cfg.name == experiment
    assert "seed" in cfg.hydra.sweeper.params
    to_object(cfg)


def test_defaults():
    cfg = to_object(compose_config([]))
    assert (cfg.norm.name, cfg.placement.name, cfg.ffn.name, cfg.hidden.name) == ("layer", "pre", "relu", "matched")
    assert (cfg.model.name, cfg.data.name, cfg.logger.name, cfg.logger.mode) == ("tiny", "bigtxt", "wandb", "offline")
    assert cfg.norm.bias is False and cfg.model.pos == "rope" and cfg.model.tie_embeddings


@pytest.mark.parametrize(("args", "must_say"), [
    (["ffn=swigl"], ["ffn", "swiglu", "relu", "bilinear"]),
    (["norm=batch"], ["norm", "layer", "rms"]),
    (["foo=1"], ["foo"]),
    (["model.d_model=30", "model.n_heads=4"], ["model.d_model", "model.n_heads"]),
    (["optim.warmup_steps=-5"], ["optim.warmup_steps", ">= 0"]),
    (["optim.schedule=exp"], ["optim.schedule", "cosine", "linear", "constant"]),
    (["train.steps=many"], ["train.steps"]),
    (["data=text"], ["data.path"]),
])
def test_bad_input_names_the_key_and_choices(args, must_say):
    with pytest.raises(ConfigError) as err:
        to_object(compose_config(args))
    for word in must_say:
        assert word in str(err.value)


@pytest.mark.parametrize("args", [
    ["-m", "ffn=relu,swigl", "seed=0"],
    ["norm=batch"],
    ["model.d_model=30", "model.n_heads=4"],
    ["optim.warmup_steps=-1"],
])
def test_cli_fails_before_training(tmp_path, args):
    proc = mbexp_train([*args, f"results_dir={tmp_path}/results", "logger=none"], timeout=120)
    assert proc.returncode != 0
    assert not (tmp_path / "results" / "runs").exists(), "nothing may be trained or written"
    assert "Traceback" not in proc.stderr
    key = args[-2].split("=")[0] if args[0] == "-m" else args[0].split("=")[0]
    assert key.split(".")[0] in proc.stderr, proc.stderr
