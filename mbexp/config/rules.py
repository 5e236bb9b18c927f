"""The rules a composed config must satisfy: each impossible value raises a ConfigError naming the key, the value
and what is allowed."""

import math
import re
import typing
from dataclasses import fields, is_dataclass
from typing import Any

from mbexp import names
from mbexp.corpus import CORPORA
from mbexp.logger import WANDB_MODES
from mbexp.names import (
    ADJUST_LR_FNS,
    FFNS,
    GELU_FFNS,
    GELUS,
    HIDDEN_RULES,
    INITS,
    NORMS,
    OPTIMIZERS,
    PARAMS,
    PLACEMENTS,
    POSITIONS,
    QK_NORMS,
)
from mbexp.schedule import SCHEDULES, wsd_problem

LOGGERS = ("wandb", "none")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16")
COMPILE = ("auto", "true", "false")


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the valid choices."""


# an experiment name is one folder under results/runs/ and the stem of its table files
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PROJECT = re.compile(r"[^/\\#?%:]{1,128}")  # the W&B project names its API accepts
MIN_VOCAB = 260  # byte-level BPE: its 256 byte tokens and the end-of-text token, with a few merges to spare
SEEDS = 2**32  # a seed lies in [0, SEEDS): 32 bits, which torch and numpy's legacy seeding both take


FINAL_EVALS = ("windows", "full")  # train.final_eval: the fixed val/test windows, or the whole splits


def _choice(key: str, value: Any, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(map(str, choices))}")


def _at_least(key: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{key}={value} must be >= {low}")


def _above(key: str, value: float, low: float, why: str = "") -> None:
    if value <= low:
        raise ConfigError(f"{key}={value} must be > {low}{why}")


def _leaves(node, prefix: str = ""):
    """(dotted key, value, field) of every value of a config dataclass that is not a dataclass itself."""
    for f in fields(node):
        value = getattr(node, f.name)
        if is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value, f


def _floats(node):
    """(dotted key, value) of every float in a config dataclass, list items included (optim.betas)."""
    for key, value, _ in _leaves(node):
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, float):
                yield key, v


def _lists(node):
    """(dotted key, value, item type) of every list in a config dataclass (optim.betas: float)."""
    for key, value, f in _leaves(node):
        if isinstance(value, list):
            types = [typing.get_args(t) for t in (f.type, *typing.get_args(f.type)) if typing.get_origin(t) is list]
            yield key, value, types[0][0] if types else object


def _flat(value) -> list:
    return [x for v in value for x in (_flat(v) if isinstance(v, list | tuple) else [v])]


def validate(cfg) -> object:
    """Raise ConfigError naming the key (and the valid choices) for any impossible value."""
    for key, value, item in _lists(cfg):  # OmegaConf lets a nested list into list[int]: the checks below compare items
        if not all(isinstance(v, (int, float) if item is float else item) and not isinstance(v, bool) for v in value):
            kind = "whole numbers" if item is int else "numbers"
            raise ConfigError(f"{key}={value} must be a flat list of {kind}, e.g. "
                              f"{key}=[{','.join(map(str, _flat(value)))}]")
    for key, value in _floats(cfg):  # nan compares false with every bound below: reject it first
        if not math.isfinite(value):
            raise ConfigError(f"{key}={value} must be a finite number")
    for key, value, what in (("results_dir", cfg.results_dir, "the runs and Hydra's logs (default: results)"),
                             ("data.cache_dir", cfg.data.cache_dir, "the token caches (default: data_cache)")):
        if not str(value).strip():
            raise ConfigError(f"{key}={value!r} is not valid; give the folder for {what}")
    _above("logger.init_timeout", cfg.logger.init_timeout, 0)
    if not PROJECT.fullmatch(cfg.logger.project):
        raise ConfigError(f"logger.project={cfg.logger.project!r} is not valid; W&B takes up to 128 characters "
                          "without / \\ # ? % or :")
    if not NAME.fullmatch(cfg.name):
        raise ConfigError(f"name={cfg.name!r} is not valid; use letters, digits, '.', '_' and '-', starting with a "
                          "letter or digit (it names a folder under results/runs/)")
    for key, value, choices in [
        ("norm.name", cfg.norm.name, NORMS),
        ("placement.name", cfg.placement.name, PLACEMENTS),
        ("ffn.name", cfg.ffn.name, FFNS),
        ("hidden.name", cfg.hidden.name, HIDDEN_RULES),
        ("model.pos", cfg.model.pos, POSITIONS),
        ("model.qk_norm", cfg.model.qk_norm, QK_NORMS),
        ("model.param", cfg.model.param, PARAMS),
        ("model.init", cfg.model.init, INITS),
        ("ffn.gelu", cfg.ffn.gelu, GELUS),
        ("data.name", cfg.data.name, CORPORA),
        ("optim.name", cfg.optim.name, OPTIMIZERS),
        ("optim.schedule", cfg.optim.schedule, SCHEDULES),
        ("logger.name", cfg.logger.name, LOGGERS),
        ("logger.mode", cfg.logger.mode, WANDB_MODES),
        ("device", cfg.device, DEVICES),
        ("precision", cfg.precision, PRECISIONS),
        ("train.final_eval", cfg.train.final_eval, FINAL_EVALS),
    ]:
        _choice(key, value, choices)
    cfg.compile = str(cfg.compile).lower()  # Hydra reads compile=true as a bool
    _choice("compile", cfg.compile, COMPILE)
    _check_model_options(cfg)
    _check_width_rules(cfg)
    _check_optim(cfg)
    for key, value, low in [
        ("train.steps", cfg.train.steps, 1),
        ("train.batch_size", cfg.train.batch_size, 1),
        ("train.eval_every", cfg.train.eval_every, 1),
        ("train.log_every", cfg.train.log_every, 1),
        ("train.checkpoint_every", cfg.train.checkpoint_every, 1),
        ("hidden.multiple_of", cfg.hidden.multiple_of, 1),
        ("data.vocab_size", cfg.data.vocab_size, MIN_VOCAB),
        ("data.val_windows", cfg.data.val_windows, 1),
        ("data.min_frequency", cfg.data.min_frequency, 0),
        ("train.z_loss", cfg.train.z_loss, 0),
        ("seed", cfg.seed, 0),
    ]:
        _at_least(key, value, low)
    if cfg.seed >= SEEDS:
        raise ConfigError(f"seed={cfg.seed} must be < 2**32 ({SEEDS}): a seed is a 32-bit number, 0 to {SEEDS - 1}")
    _above("train.diverge_factor", cfg.train.diverge_factor, 1,
           " (a loss above diverge_factor * ln(vocab) counts as diverged, and training starts near ln(vocab))")
    _check_data(cfg)
    if problem := wsd_problem(cfg.optim, cfg.train):
        raise ConfigError(problem)
    return cfg


def _check_data(cfg) -> None:
    d = cfg.data
    if d.max_docs is not None and d.max_docs < 1:
        raise ConfigError(f"data.max_docs={d.max_docs} must be >= 1, or null for every document")
    if not 0 < d.val_fraction < 1:
        raise ConfigError(f"data.val_fraction={d.val_fraction} must lie strictly between 0 and 1")
    if not 0 <= d.test_fraction < 1 - d.val_fraction:
        raise ConfigError(f"data.test_fraction={d.test_fraction} must be >= 0 and leave training data "
                          f"(data.val_fraction + data.test_fraction < 1)")
    if d.name == "text" and not d.path:
        raise ConfigError("data=text needs data.path=<file, folder or glob>")
    if d.name != "text" and d.path:  # it would be ignored, yet hashed: a second run of the same corpus
        raise ConfigError(f"data.path={d.path} applies only to data=text; with data={d.name} leave it out")


def _check_optim(cfg) -> None:
    o = cfg.optim
    _above("optim.lr", o.lr, 0)
    for key, value in [("optim.warmup_steps", o.warmup_steps), ("optim.weight_decay", o.weight_decay),
                       ("optim.grad_clip", o.grad_clip)]:  # grad_clip 0: no clipping
        _at_least(key, value, 0)
    _check_muon(o)
    if not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError(f"optim.min_lr_ratio={o.min_lr_ratio} must lie between 0 and 1 (the schedule ends at "
                          "optim.lr * optim.min_lr_ratio)")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas={list(o.betas)} must be two numbers in [0, 1), e.g. [0.9,0.95]")
    for key in ("cooldown_fraction", "cooldown_shape"):  # the wsd cool-down: another schedule would ignore it
        if o.schedule != "wsd" and getattr(o, key) != getattr(type(o), key):
            raise ConfigError(f"optim.{key}={getattr(o, key)} applies only to optim.schedule=wsd; with "
                              f"optim.schedule={o.schedule} leave it at {getattr(type(o), key)}")


def _check_width_rules(cfg) -> None:
    """model.param=mup and model.init=fan_in: a base width, and none of the options whose own rules they break."""
    m = cfg.model
    scaled = [f"model.{k}={getattr(m, k)}" for k, sp in (("param", "sp"), ("init", "gpt2")) if getattr(m, k) != sp]
    if not scaled:
        if m.base_d_model is not None:
            raise ConfigError(f"model.base_d_model={m.base_d_model} applies only to model.param=mup or "
                              "model.init=fan_in; leave it out")
        return
    if len(scaled) > 1:
        raise ConfigError("model.init=fan_in is μP's hidden init, already part of model.param=mup; leave it at gpt2")
    if m.base_d_model is None or m.base_d_model < 1:
        raise ConfigError(f"{scaled[0]} needs model.base_d_model=<the base width, >= 1>, e.g. model.base_d_model=64")
    if cfg.placement.name == "deepnorm":
        raise ConfigError(f"{scaled[0]} does not apply to placement=deepnorm, which has its own init; choose "
                          "another placement or model.param=sp model.init=gpt2")
    if m.param == "mup" and m.emb_scale:
        raise ConfigError("model.param=mup does not hold with model.emb_scale=true: its learnable √D factor grows "
                          "the embedding's updates with width; leave model.emb_scale=false")
    if m.param == "mup" and cfg.optim.name != "adamw":
        raise ConfigError(f"model.param=mup holds for optim=adamw only (its rules are Adam's), not "
                          f"optim={cfg.optim.name}")


def _check_muon(o) -> None:
    """optim.adamw_lr and optim.adjust_lr_fn belong to optim=muon: set with adamw they would be ignored, yet hashed."""
    if o.name != "muon":
        for key in ("adamw_lr", "adjust_lr_fn"):
            if getattr(o, key) is not None:
                raise ConfigError(f"optim.{key}={getattr(o, key)} applies only to optim=muon; with optim={o.name} "
                                  "leave it out (null)")
        return
    _choice("optim.adjust_lr_fn", o.adjust_lr_fn, ADJUST_LR_FNS)
    if o.adamw_lr is not None:
        _above("optim.adamw_lr", o.adamw_lr, 0, " (or null: the AdamW group trains at optim.lr)")


def _check_model_options(cfg) -> None:
    """The model sizes and the model options that depend on one another (docs/model.md)."""
    m = cfg.model
    for key, value, low in [("model.d_model", m.d_model, 1), ("model.n_heads", m.n_heads, 1),
                            ("model.n_layers", m.n_layers, 1), ("model.seq_len", m.seq_len, 2)]:
        _at_least(key, value, low)
    if m.d_model % m.n_heads:
        raise ConfigError(f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}")
    if m.pos == "rope" and (m.d_model // m.n_heads) % 2:
        raise ConfigError("model.pos=rope needs an even head size (model.d_model / model.n_heads)")
    if m.n_kv_heads is not None and (m.n_kv_heads < 1 or m.n_heads % m.n_kv_heads):
        divisors = [d for d in range(1, m.n_heads + 1) if m.n_heads % d == 0]
        raise ConfigError(f"model.n_kv_heads={m.n_kv_heads} must divide model.n_heads={m.n_heads}; "
                          f"choose one of: {', '.join(map(str, divisors))}")
    if m.pos == "sinusoidal" and m.d_model % 2:
        raise ConfigError("model.pos=sinusoidal needs an even model.d_model")
    if m.rope_base != type(m).rope_base and m.pos != "rope":
        raise ConfigError(f"model.rope_base={m.rope_base} applies only to model.pos=rope; with model.pos={m.pos} "
                          f"leave it at {type(m).rope_base}")
    if m.rope_base <= 1:
        raise ConfigError(f"model.rope_base={m.rope_base} must be > 1")
    if cfg.ffn.gelu != "exact" and cfg.ffn.name not in GELU_FFNS:
        raise ConfigError(f"ffn.gelu={cfg.ffn.gelu} applies only to ffn={' or ffn='.join(GELU_FFNS)}; "
                          f"with ffn={cfg.ffn.name} leave ffn.gelu=exact")
    _above("norm.eps", cfg.norm.eps, 0)
    for key in ("logit_softcap", "attn_softcap"):  # null: off; 0 would divide by zero, a negative cap flips signs
        if getattr(m, key) is not None:
            _above(f"model.{key}", getattr(m, key), 0, "; choose a positive cap, or null for none")
    options = {key: getattr(cfg.norm, key) for key in names.NORM_DEFAULTS}
    if message := names.misapplied_norm_option(cfg.norm.name, options):
        raise ConfigError(message)
