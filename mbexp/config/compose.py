"""Composition and conversion: conf/ composed with overrides as Hydra would, the result turned into a validated
Config, the ModelSpec a config gives, and the errors and quoting for keys and overrides Hydra cannot read."""

import difflib
import functools
import re
import shlex
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from mbexp import CONF_DIR
from mbexp.config.rules import ConfigError, validate
from mbexp.config.schema import Config, register


def when(name: str, choices: str, value: Any, otherwise: Any) -> Any:
    """${when:NAME,A|B,VALUE,OTHERWISE}: VALUE if NAME is A or B, else OTHERWISE. conf/arch presets set an
    option that only one choice takes this way (`norm.bias` for norm=layer), so `+arch=gpt2 norm=rms` composes."""
    return value if name in str(choices).split("|") else otherwise


OmegaConf.register_new_resolver("when", when, replace=True)


def to_object(cfg: DictConfig | Config) -> Config:
    """The plain, validated Config for a composed DictConfig (hydra node removed)."""
    if isinstance(cfg, DictConfig):
        cfg = cfg.copy()
        with_hydra = "hydra" in cfg
        if with_hydra:
            OmegaConf.set_struct(cfg, False)
            cfg.pop("hydra")
        for key in _keys(cfg):  # `+model.n_layer=8` adds a key the schema lacks: the merge would keep it unused
            if key not in SCHEMA_KEYS:
                raise ConfigError(unknown_key(key))
        try:
            if OmegaConf.select(cfg, "data.fingerprint") is not None:
                raise ConfigError("data.fingerprint is computed from the corpus content when a run starts; omit it")
            cfg = OmegaConf.to_object(OmegaConf.merge(_schema(), cfg))
        except OmegaConfBaseException as exc:  # an interpolation that does not resolve, a value the schema refuses
            raise ConfigError(_unresolved(cfg, exc)) from None
    return validate(cfg)


def _unresolved(cfg: DictConfig, exc: Exception) -> str:
    """The error for a value OmegaConf cannot resolve: the key, its value as given and why."""
    key = getattr(exc, "full_key", None) or "a value"
    node: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in re.findall(r"[^.\[\]]+", key):
        node = node[int(part)] if isinstance(node, list) else (node or {}).get(part)
    reason = re.sub(r"^\w+ raised while resolving interpolation: ", "", str(exc).strip().splitlines()[0]).strip('"')
    if not isinstance(exc, InterpolationResolutionError):
        return f"{key}={node}: {reason}"
    if "${hydra:" in str(node):
        reason = "${hydra:...} is known only inside a job, and every value is checked before any job starts"
    return (f"{key}={node} cannot be resolved ({reason}): an interpolation names another config key, e.g. "
            "${train.steps}, or an environment variable that is set, e.g. ${oc.env:VAR,default}")


@functools.cache
def _schema() -> DictConfig:
    """OmegaConf.structured(Config), built once: a sweep's check validates hundreds of configs."""
    return OmegaConf.structured(Config)


def _keys(node, prefix: str = "") -> list[str]:
    """The dotted keys of a config's leaves (a dataclass or a DictConfig)."""
    names = [f.name for f in fields(node)] if is_dataclass(node) else list(node.keys())
    out = []
    for name in names:
        value = getattr(node, name) if is_dataclass(node) else node._get_node(name)
        is_group = is_dataclass(value) or (isinstance(value, DictConfig) and not value._is_none())
        out += _keys(value, f"{prefix}{name}.") if is_group else [f"{prefix}{name}"]
    return out


def unknown_key(key: str) -> str:
    """The error for a key the schema does not have, with the closest keys or config groups that it has (a group
    only the command line adds, as +experiment)."""
    groups = [f"+{g}" if g in ("experiment", "arch") else g for g in GROUPS]
    names = {g.lstrip("+"): g for g in groups} | {k: k for k in SCHEMA_KEYS}
    close = [names[k] for k in difflib.get_close_matches(key, names, n=3, cutoff=0.6)]
    close = close or [g for g in groups if key.startswith(g.lstrip("+"))]  # ffn_typo: ffn
    close = close or [k for k in SCHEMA_KEYS if k.rpartition(".")[2] == key.rpartition(".")[2]]  # lr: optim.lr
    group = key.rpartition(".")[0]
    close = close or sorted(k for k in SCHEMA_KEYS if k.rpartition(".")[0] == group)
    return f"{key} is not a config key" + (f"; the closest: {', '.join(close)}" if close else "")


SPEC_KEYS = {  # each ModelSpec field and the config key it is read from (vocab_size: the tokenizer's)
    **{name: f"model.{name}" for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "seq_len", "pos", "rope_base",
                                          "tie_embeddings", "bias", "qk_norm", "emb_scale", "logit_softcap",
                                          "attn_softcap", "zero_init_proj")},
    "norm": "norm.name", "norm_eps": "norm.eps", "norm_bias": "norm.bias", "norm_alpha_init": "norm.alpha_init",
    "placement": "placement.name", "ffn": "ffn.name", "ffn_gelu": "ffn.gelu", "hidden": "hidden.name",
    "hidden_multiple_of": "hidden.multiple_of", **{k: f"model.{k}" for k in ("param", "init", "base_d_model")}}


def model_spec(cfg: Config, vocab_size: int):
    """The model contract (a ModelSpec) for this config and a tokenizer of `vocab_size` tokens."""
    from operator import attrgetter

    from mbexp.model import ModelSpec

    return ModelSpec(vocab_size=vocab_size, **{name: attrgetter(key)(cfg) for name, key in SPEC_KEYS.items()})


GROUPS = tuple(sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"))  # norm=rms, ...
_DEFAULTS = Config()
SCHEMA_KEYS = tuple(_keys(_DEFAULTS))
BOOL_KEYS = tuple(k for k in SCHEMA_KEYS if isinstance(functools.reduce(getattr, k.split("."), _DEFAULTS), bool))


def compose_config(overrides: list[str], *, return_hydra_config: bool = False) -> DictConfig:
    """Compose conf/config.yaml with `overrides` as Hydra would; errors become ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=overrides, return_hydra_config=return_hydra_config)
    except (HydraException, OmegaConfBaseException) as exc:
        if bad := _unparsable(overrides):
            raise ConfigError(parse_hint(bad)) from None
        raise ConfigError(_one_line(exc)) from None


@functools.cache
def parsed(override: str):
    """Hydra's reading of `override` (its key, its value: text stays text, 1.50 is a float), or None when its
    grammar cannot parse it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_override(override)
    except HydraException:
        return None


def _unparsable(overrides: list[str]) -> str | None:
    """The first override that Hydra's grammar cannot parse, or None."""
    return next((o for o in overrides if parsed(o) is None), None)


HYDRA_FUNCTIONS = "choice|range|interval|glob|shuffle|sort|tag|str|int|float|bool|json_str"  # its grammar's


def hydra_override(key: str, value: str) -> str:
    """`key=value` that Hydra reads back as the text `value` whole: quoted, and escaped for Hydra and OmegaConf,
    unless plain (a comma would make it a sweep, `${` an interpolation, a space or `ü` a parse error)."""
    plain = f"{key}={value}"
    if re.fullmatch(r"[\w./:+@%-]*", value, re.ASCII) and parsed(plain) and parsed(plain).value() == value:
        return plain  # not 1.50 (a float), null or true
    value = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)  # OmegaConf: a literal ${
    value = re.sub(r'(\\*)(?="|$)', lambda m: m.group(1) * 2, value).replace('"', '\\"')  # Hydra's quoted string
    return f'{key}="{value}"'


def parse_hint(override: str) -> str:
    """The error for an override Hydra cannot parse: the key, the value and the spelling that works, quoted for a
    shell as it is to be typed."""
    key, _, value = override.partition("=")
    why, note = "spaces, brackets, '~' or non-ASCII characters in a value need quotes", ""
    fix = hydra_override(key, value)
    items = value.split(",")
    if value.startswith("="):
        why, fix = "one '=' between key and value", f"{key}={value.lstrip('=')}"
    elif "${" in value and "}" not in value.partition("${")[2]:
        why, note = "'${' opens an interpolation that is never closed", " (a literal '${')"
    elif len(items) > 1 and not all(items) and any(items) and not re.search(r"[\[\]{}()'\"]", value):
        why, fix = "an empty item between commas", f"{key}={','.join(i for i in items if i)}"
    elif re.fullmatch(r"(choice|range|glob)\(\s*\)", value):
        why, fix = f"{value} lists no values", f"{key}={value[:-1]}A,B)"
    else:  # a list, a dict or a sweep function left open; in other text a bracket is quoted
        for opening, closing in ("[]", "{}", "()"):
            start = rf"({HYDRA_FUNCTIONS})\(" if opening == "(" else rf"(({HYDRA_FUNCTIONS})\()?\{opening}"
            if re.match(start, value) and value.count(opening) > value.count(closing):
                missing = closing * (value.count(opening) - value.count(closing))
                why, fix = f"an unclosed '{opening}'", f"{key}={value}{missing}"
    return f"cannot parse the override {override!r} (key {key}: {why}): write it as {shlex.quote(fix)}{note}"


def _one_line(exc: Exception) -> str:
    """Hydra's message, with the first line of OmegaConf's reason when Hydra hides it ("Error merging override
    train.steps=abc: Value 'abc' of type 'str' could not be converted to Integer"). A key the
    schema lacks is named with the closest valid ones (Hydra's own advice, the `+key` form, would add a key
    that nothing reads); an override Hydra cannot lex gets the quoting that works."""
    message, cause = str(exc).strip(), exc.__cause__
    if unknown := re.match(r"Could not override '([^']+)'\.\s+To append to your config use", message):
        return unknown_key(unknown[1])
    if group := re.match(r"Could not override '([^']+)'\. No match in the defaults list\.\s+.* use (\S+)", message):
        return f"{group[1]} is not chosen by default, so it cannot be overridden: add it with {group[2]}"
    if "LexerNoViableAltException" in message or "OverrideParseException" in type(exc).__name__:
        override = message.splitlines()[0].removeprefix("LexerNoViableAltException: ").strip()
        key, sep, value = override.partition("=")
        if sep:
            return (f"cannot parse the override {override!r} (spaces, brackets, '~' or non-ASCII characters in a "
                    f"value need quotes): write it as \"{key}='{value}'\"")
        return message.splitlines()[0]
    if cause is None or not str(cause).strip():
        return message
    reason = str(cause).strip().splitlines()[0]
    return f"{message}: {reason}" + ("; choose one of: true, false" if "valid bool" in reason else "")
