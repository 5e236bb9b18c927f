"""Config composition: every option of every group composes; bad input names the key and the choices."""

import pytest
from tiny import clean, mbexp_train, overrides, summaries

from mbexp.config import CONF_DIR, ConfigError, compose_config, to_object
from mbexp.model import PLACEMENTS
from mbexp.model.ffn import FFNS, HIDDEN_RULES
from mbexp.model.norms import NORMS
from mbexp.names import OPTIMIZERS

GROUP_OPTIONS = {
    "norm": list(NORMS), "placement": list(PLACEMENTS), "ffn": list(FFNS), "hidden": list(HIDDEN_RULES),
    "model": ["tiny", "small", "base", *(f"ladder{d}" for d in (64, 96, 128, 160, 192, 256, 384, 512, 640)),
              *(f"width{d}" for d in (64, 96, 128, 192, 256))],
    "data": ["bigtxt", "tinystories", "wikitext2", "wikitext103", "text"],
    "optim": list(OPTIMIZERS), "logger": ["wandb", "none"],
}


def test_arch_presets_are_the_named_ones():
    # the five published presets docs/model.md describes
    assert sorted(p.stem for p in (CONF_DIR / "arch").glob("*.yaml")) == ["gemma", "gpt2", "llama", "olmo2", "vaswani"]


@pytest.mark.parametrize(("arch", "expected", "constants"), [
    ("gpt2", ("layer", True, "pre", "gelu", "tanh", "4d", "learned", True, "none"), (1e-5, 10000.0, True, False)),
    ("llama", ("rms", False, "pre", "swiglu", "exact", "8_3d", "rope", False, "none"), (1e-5, 5e5, False, False)),
    ("vaswani", ("layer", True, "post", "relu", "exact", "4d", "sinusoidal", True, "none"),
     (1e-5, 10000.0, True, False)),
    ("olmo2", ("rms", False, "output", "swiglu", "exact", "8_3d", "rope", False, "proj"), (1e-6, 5e5, False, False)),
    ("gemma", ("rms", False, "peri", "geglu", "tanh", "4d", "rope", False, "head"), (1e-6, 1e6, True, True)),
])
def test_arch_presets_set_the_published_block(arch, expected, constants):
    c = to_object(compose_config([f"+arch={arch}"]))
    assert (c.norm.name, c.norm.bias, c.placement.name, c.ffn.name, c.ffn.gelu, c.hidden.name, c.model.pos,
            c.model.bias, c.model.qk_norm) == expected
    # the checkpoint family's constants: norm eps, RoPE base, tied head, sqrt(D) embedding scale
    assert (c.norm.eps, c.model.rope_base, c.model.tie_embeddings, c.model.emb_scale) == constants


def test_arch_presets_compose_with_overrides():
    c = to_object(compose_config(["+arch=llama", "norm=layer", "model.n_kv_heads=2"]))
    assert (c.norm.name, c.ffn.name, c.model.n_kv_heads) == ("layer", "swiglu", 2)  # Llama with LayerNorm
    c = to_object(compose_config(["+arch=gpt2", "norm=rms", "ffn=swiglu"]))  # options follow the choice
    assert (c.norm.name, c.norm.bias, c.ffn.name, c.ffn.gelu, c.model.bias) == ("rms", False, "swiglu", "exact", True)
    c = to_object(compose_config(["+arch=olmo2", "norm=dyt"]))
    assert (c.norm.name, c.norm.eps, c.placement.name) == ("dyt", 1e-5, "output")
    c = to_object(compose_config(["+arch=llama", "model.pos=learned"]))  # the RoPE base follows the positions
    assert (c.model.pos, c.model.rope_base) == ("learned", 10000.0)
    c = to_object(compose_config(["+experiment=norm_placement_cpu", "+arch=gemma", "placement=pre"]))
    assert (c.name, c.model.n_layers, c.placement.name, c.model.qk_norm) == ("norm_placement_cpu", 8, "pre", "head")


@pytest.mark.slow
def test_arch_composes_under_multirun(tmp_path, cache):
    proc = mbexp_train(clean(overrides(tmp_path, cache, "+arch=llama", "model.n_kv_heads=1", "-m",
                                       "norm=rms,dyt", "train.steps=4", "train.eval_every=4")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = sorted(s["row"] for s in summaries(tmp_path / "results"))
    assert rows == ["dyt-pre-swiglu-8_3d-kv1-rope500000", "rms-pre-swiglu-8_3d-kv1-rope500000"]


def test_group_files_are_exactly_the_registry_names():
    for group, options in GROUP_OPTIONS.items():
        assert sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")) == sorted(options), group


@pytest.mark.parametrize(("group", "option"), [(g, o) for g, opts in GROUP_OPTIONS.items() for o in opts])
def test_every_option_composes_and_names_itself(group, option):
    extra = ["data.path=somewhere.txt"] if option == "text" else []
    cfg = to_object(compose_config([f"{group}={option}", *extra]))
    assert getattr(cfg, group).name == option


@pytest.mark.parametrize("experiment", ["quickstart", "shazeer_ffn", "norm_placement", "warmup_sensitivity",
                                        "shazeer_ffn_cpu", "warmup_sensitivity_cpu", "norm_placement_cpu"])
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
    (["data=text"], ["data=text needs data.path=<file, folder or glob>"]),
    (["data.path=corpus.txt"], ["data.path=corpus.txt applies only to data=text", "leave it out"]),
    (["data.max_docs=0"], ["data.max_docs=0", ">= 1", "null"]),
    (["data.val_fraction=0"], ["data.val_fraction=0.0", "strictly between 0 and 1"]),
    (["data.val_fraction=1"], ["data.val_fraction=1.0", "strictly between 0 and 1"]),
    (["model.n_kv_heads=3"], ["model.n_kv_heads", "model.n_heads=4", "1, 2, 4"]),
    (["norm=dyt", "norm.bias=true"], ["norm.bias", "norm=dyt", "norm.alpha_init"]),
    (["norm=dyt", "norm.eps=1e-6"], ["norm.eps", "norm=dyt", "norm.alpha_init"]),
    (["norm=rms", "norm.alpha_init=1.0"], ["norm.alpha_init", "norm=rms", "norm.eps"]),
    (["ffn.gelu=tanh"], ["ffn.gelu", "ffn=gelu", "ffn=geglu"]),
    (["ffn=gelu", "ffn.gelu=fast"], ["ffn.gelu", "exact", "tanh"]),
    (["model.qk_norm=all"], ["model.qk_norm", "none", "head", "proj"]),
    (["model.pos=alibi"], ["model.pos", "rope", "learned", "sinusoidal"]),
    (["model.pos=learned", "model.rope_base=500000"], ["model.rope_base", "model.pos=rope", "10000.0"]),
    (["model.rope_base=1"], ["model.rope_base", "> 1"]),
    (["placement=sandwich"], ["placement", "pre", "peri", "deepnorm"]),
    (["optim.cooldown_fraction=0.5"], ["optim.cooldown_fraction=0.5", "optim.schedule=wsd", "leave it at 0.2"]),
    (["optim.cooldown_shape=sqrt"], ["optim.cooldown_shape=sqrt", "optim.schedule=wsd", "leave it at linear"]),
    (["seed=4294967296"], ["seed=4294967296", "< 2**32"]),
    (["results_dir="], ["results_dir=''"]),
    (["norm.eps=0"], ["norm.eps=0.0", "> 0"]),  # the boundaries themselves: each is refused
    (["optim.betas=[0.9,1.0]"], ["optim.betas=[0.9, 1.0]", "[0, 1)"]),
    (["optim.betas=[0.9]"], ["optim.betas=[0.9] must be two numbers in [0, 1), e.g. [0.9,0.95]"]),
    (["optim.betas=[-0.1,0.9]"], ["optim.betas=[-0.1, 0.9] must be two numbers in [0, 1)"]),
    (["data.val_fraction=0.1", "data.test_fraction=0.9"], ["data.test_fraction", "data.val_fraction"]),
    (["model.param=mu"], ["model.param", "sp", "mup"]),
    (["model.param=mup"], ["model.param=mup", "model.base_d_model"]),
    (["model.init=fan_in"], ["model.init=fan_in", "model.base_d_model"]),
    (["model.base_d_model=64"], ["model.base_d_model=64", "model.param=mup", "model.init=fan_in"]),
    (["model.param=mup", "model.base_d_model=64", "placement=deepnorm"], ["model.param=mup", "placement=deepnorm"]),
    (["model.init=fan_in", "model.base_d_model=64", "placement=deepnorm"], ["model.init=fan_in", "deepnorm"]),
    (["model.param=mup", "model.base_d_model=64", "model.emb_scale=true"], ["model.param=mup", "model.emb_scale"]),
    (["model.param=mup", "model.base_d_model=64", "model.init=fan_in"], ["model.init=fan_in", "model.param=mup"]),
    (["model.param=mup", "model.base_d_model=64", "optim.name=muon"], ["model.param=mup", "optim=adamw",
                                                                        "optim=muon"]),
    (["optim=lion"], ["optim", "adamw", "muon"]),
    (["optim.name=lion"], ["optim.name", "adamw", "muon"]),
    (["optim=muon", "optim.adjust_lr_fn=spectral"], ["optim.adjust_lr_fn='spectral'", "original", "match_rms_adamw"]),
    (["optim.adjust_lr_fn=original"], ["optim.adjust_lr_fn=original", "optim=muon", "leave it out (null)"]),
    (["optim.adamw_lr=0.001"], ["optim.adamw_lr=0.001", "optim=muon"]),
    (["optim=muon", "optim.adamw_lr=0"], ["optim.adamw_lr=0.0", "> 0",
                                           "(or null: the AdamW group trains at optim.lr)"]),
    (["optim.lr=0"], ["optim.lr=0.0 must be > 0"]),
    (["optim.warmup_steps=-1"], ["optim.warmup_steps=-1 must be >= 0"]),
    (["optim.weight_decay=-0.1"], ["optim.weight_decay=-0.1 must be >= 0"]),
    (["optim.grad_clip=-1"], ["optim.grad_clip=-1.0 must be >= 0"]),
    (["optim.min_lr_ratio=1.5"], ["optim.min_lr_ratio=1.5 must lie between 0 and 1 (the schedule ends at optim.lr * "
                                  "optim.min_lr_ratio)"]),
    (["optim.min_lr_ratio=-0.1"], ["optim.min_lr_ratio=-0.1 must lie between 0 and 1"]),
    (["train.z_loss=-1e-4"], ["train.z_loss", ">= 0"]),
    (["model.logit_softcap=0"], ["model.logit_softcap=0.0", "positive", "null"]),
    (["model.attn_softcap=-50"], ["model.attn_softcap=-50.0", "positive", "null"]),
])
def test_bad_input_names_the_key_and_choices(args, must_say):
    with pytest.raises(ConfigError) as err:
        to_object(compose_config(args))
    for word in must_say:
        assert word in str(err.value)


@pytest.mark.parametrize(("args", "message"), [
    (["data=text"], "data=text needs data.path=<file, folder or glob>"),
    (["optim.adjust_lr_fn=original"],
     "optim.adjust_lr_fn=original applies only to optim=muon; with optim=adamw leave it out (null)"),
    (["optim=muon", "optim.adamw_lr=0"],
     "optim.adamw_lr=0.0 must be > 0 (or null: the AdamW group trains at optim.lr)"),
    (["model.base_d_model=64"],
     "model.base_d_model=64 applies only to model.param=mup or model.init=fan_in; leave it out"),
    (["model.param=mup", "model.base_d_model=64", "model.init=fan_in"],
     "model.init=fan_in is μP's hidden init, already part of model.param=mup; leave it at gpt2"),
    (["model.param=mup", "model.base_d_model=64", "placement=deepnorm"],
     "model.param=mup does not apply to placement=deepnorm, which has its own init; choose another placement or "
     "model.param=sp model.init=gpt2"),
    (["model.param=mup", "model.base_d_model=64", "model.emb_scale=true"],
     "model.param=mup does not hold with model.emb_scale=true: its learnable √D factor grows the embedding's updates "
     "with width; leave model.emb_scale=false"),
])
def test_a_refusal_that_says_what_to_write_reads_exactly_so(args, message):
    # the key, the bound and the fix a user copies from the message, with nothing glued to them
    with pytest.raises(ConfigError) as err:
        to_object(compose_config(args))
    assert str(err.value) == message


def test_the_data_settings_boundaries_that_hold_pass():
    c = to_object(compose_config(["data.max_docs=1", "data.val_fraction=0.5", "data.test_fraction=0.25"]))
    assert (c.data.max_docs, c.data.val_fraction, c.data.test_fraction) == (1, 0.5, 0.25)


def test_a_base_width_of_1_is_the_smallest_mup_takes():
    """model.base_d_model must be >= 1: 1 is accepted, 0 is refused with the bound."""
    assert to_object(compose_config(["model.param=mup", "model.base_d_model=1"])).model.base_d_model == 1
    with pytest.raises(ConfigError, match=r"model\.base_d_model=<the base width, >= 1>"):
        to_object(compose_config(["model.param=mup", "model.base_d_model=0"]))


def test_the_optimiser_settings_at_zero_pass():
    """No warm-up, no weight decay, no clipping (grad_clip 0), betas of 0 and min_lr_ratio at either end are each
    allowed."""
    c = to_object(compose_config(["optim.warmup_steps=0", "optim.weight_decay=0", "optim.grad_clip=0"]))
    assert (c.optim.warmup_steps, c.optim.weight_decay, c.optim.grad_clip) == (0, 0.0, 0.0)
    assert to_object(compose_config(["optim.betas=[0,0]"])).optim.betas == [0.0, 0.0]
    for ratio in (0, 1):  # the schedule may end at 0 or stay at optim.lr
        assert to_object(compose_config([f"optim.min_lr_ratio={ratio}"])).optim.min_lr_ratio == ratio


def test_the_wsd_cool_down_settings_the_largest_seed_and_budgets_beside_their_largest_steps_pass():
    from mbexp import train as cli

    c = to_object(compose_config(["optim.schedule=wsd", "optim.cooldown_shape=sqrt", "optim.cooldown_fraction=0.5",
                                  "seed=4294967295"]))
    assert (c.optim.cooldown_shape, c.optim.cooldown_fraction, c.seed) == ("sqrt", 0.5, 2**32 - 1)
    for steps in ([], ["train.steps=16"]):  # mbexp.study gives the largest budget as train.steps
        (c,) = cli.preflight(["optim.schedule=wsd", "train.budgets=[8,16]", "optim.warmup_steps=2", *steps], skip=False)
        assert c.train.budgets == [8, 16]


@pytest.mark.parametrize("args", [
    ["-m", "ffn=relu,swigl", "seed=0"],
    ["norm=batch"],
    ["model.d_model=30", "model.n_heads=4"],
    ["optim.warmup_steps=-1"],
    ["+arch=bert"],
    ["-m", "+arch=llama,bert", "seed=0"],
    ["model.n_kv_heads=3"],
    ["norm=dyt", "norm.bias=true"],
])
def test_cli_fails_before_training(tmp_path, args):
    proc = mbexp_train([*args, f"results_dir={tmp_path}/results", "logger=none"], timeout=120)
    assert proc.returncode != 0
    assert not (tmp_path / "results" / "runs").exists(), "nothing may be trained or written"
    assert "Traceback" not in proc.stderr
    key = args[-2].split("=")[0] if args[0] == "-m" else args[0].split("=")[0]
    assert key.lstrip("+").split(".")[0] in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["-cjob"], ["-pPKG"], ["--multi"], ["--cfg", "job", "--", "-x=1"],
                                  ["--cfg=job"], ["--hydra-help"]])
def test_hydra_flags_in_every_spelling_argparse_takes_pass_the_flag_check(args):
    from mbexp.preflight import check_flags

    check_flags(args)  # a short flag's value attached, a long flag's prefix, `--` ending the flags


def test_a_misspelt_flag_is_refused_with_the_closest_one():
    from mbexp.preflight import SKIP_FLAG, check_flags

    with pytest.raises(ConfigError, match=f"unknown flag --skip-impossibel \\(did you mean {SKIP_FLAG}\\?\\)"):
        check_flags(["--skip-impossibel"])


def test_a_command_line_group_sweep_keeps_the_experiment_files_grid_in_the_check():
    from mbexp.preflight import check_config

    # the file's grid (4 rungs x 3 FFNs x 3 seeds x 2 budgets) times the command line's 2 norms; ladder96 and
    # ladder160 have 3 and 5 heads, which n_kv_heads=2 cannot divide
    configs, failures, total = check_config(["--multirun", "+experiment=ladder_cpu", "model.n_kv_heads=2",
                                             "norm=layer,rms"])
    assert total == 144 and len(failures) == 72 and len(configs) == 1 + 72  # the base config, then each
    assert {dict(o.partition("=")[::2] for o in combination)["model"] for combination, _ in failures} == {
        "ladder96", "ladder160"}


@pytest.mark.parametrize(("typed", "key", "value"), [
    ("name=${oops", "name", "${oops"), ("name=ü", "name", "ü"), ("results_dir=/tmp/a b[", "results_dir", "/tmp/a b["),
    ("optim.betas=[0.9,0.95", "optim.betas", [0.9, 0.95]), ("optim.lr==3", "optim.lr", 3.0),
    ("seed=0,,1", "seed", None), ("seed=choice()", "seed", None),
])
def test_the_spelling_a_parse_error_suggests_works_when_pasted_into_a_shell(typed, key, value):
    import subprocess

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mbexp.config import parse_hint

    fix = parse_hint(typed).split(": write it as ", 1)[1].removesuffix(" (a literal '${')")
    argv = subprocess.run(["bash", "-c", f"printf '%s\\0' {fix}"], capture_output=True, text=True,
                          check=True).stdout.split("\0")[:-1]
    assert len(argv) == 1 and OverridesParser.create().parse_overrides(argv)  # one override Hydra reads
    if value is not None:  # a sweep's fix (seed=0,1) is checked by the parser alone
        found = compose_config(argv)
        assert found[key.split(".")[0]][key.split(".")[1]] == value if "." in key else found[key] == value


@pytest.mark.parametrize("value", ["/tmp/s8,x", "/tmp/s6 x", "/tmp/a'b", '/tmp/a"b', "/tmp/${x}", "/tmp/${x",
                                   "/tmp/[a]", "/tmp/a\\b", "/tmp/a\\", "/tmp/ü", "a=b", "/tmp/a\\${x}", "plain", "~/r",
                                   "$x"])
def test_an_override_built_for_any_text_reads_back_as_that_text(value):
    from mbexp.config import hydra_override

    assert compose_config([hydra_override("results_dir", value)]).results_dir == value


@pytest.mark.parametrize(("key", "closest"), [
    ("nrom", "norm"), ("ffn_typo", "ffn"), ("expriment", "+experiment"), ("lr", "optim.lr"),
    ("norm.epsilon", "norm.eps"), ("model.dmodel", "model.d_model, model.base_d_model, model.name"),
])
def test_an_unknown_key_names_the_closest_keys_and_groups(key, closest):
    with pytest.raises(ConfigError) as err:
        to_object(compose_config([f"+{key}=1"]))
    assert str(err.value) == f"{key} is not a config key; the closest: {closest}"


@pytest.mark.parametrize("value", ["1.50", "null", "true", "1e3", "nan"])
def test_a_folder_named_like_a_number_is_quoted_to_stay_text(value):
    from mbexp.config import hydra_override

    assert hydra_override("results_dir", value) == f'results_dir="{value}"'
    assert compose_config([hydra_override("results_dir", value)]).results_dir == value


def test_a_word_before_a_bracket_is_quoted_unless_hydra_knows_the_function():
    from mbexp.config import parse_hint

    assert parse_hint("data.path=my(file.txt").endswith("""write it as 'data.path="my(file.txt"'""")
    assert parse_hint("seed=choice(1,2").endswith("write it as 'seed=choice(1,2)'")


@pytest.mark.parametrize("override", ["model.bias='true'", "model.bias=${model.tie_embeddings}", "~model.bias",
                                      "model.bias=False"])
def test_a_true_false_key_takes_what_hydra_reads_as_true_or_false(override):
    from mbexp.preflight import check_overrides

    check_overrides([override])  # no ConfigError: quoted, an interpolation, a deletion are Hydra's to read


@pytest.mark.parametrize(("override", "message"), [
    ("train.budgets=[[10],[20,[30]]]",
     "train.budgets=[[10], [20, [30]]] must be a flat list of whole numbers, e.g. train.budgets=[10,20,30]"),
    ("optim.betas=[[0.9],0.95]",
     "optim.betas=[[0.9], 0.95] must be a flat list of numbers, e.g. optim.betas=[0.9,0.95]"),
])
def test_a_nested_list_is_refused_with_its_flattened_spelling(override, message):
    with pytest.raises(ConfigError) as err:
        to_object(compose_config(["optim.schedule=wsd", override]))
    assert str(err.value) == message


def test_the_schema_is_stored_once_and_again_after_it_is_removed():
    """Each compose registers the schema; storing converts the dataclasses anew, so a stored schema is kept."""
    from hydra.core.config_store import ConfigStore

    from mbexp.config import register

    repo = ConfigStore.instance().repo
    register()
    stored = repo["mbexp_schema.yaml"]
    register()
    assert repo["mbexp_schema.yaml"] is stored
    del repo["mbexp_schema.yaml"]
    assert compose_config(["norm=rms"]).norm.name == "rms" and repo["mbexp_schema.yaml"] is not stored
