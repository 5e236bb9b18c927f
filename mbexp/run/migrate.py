"""Legacy compatibility in one place: how today's identity is hashed so that finished runs keep their directories
(tests/test_rules.py pins config -> directory pairs), and `upgrade`, which reads older run files as today's."""

import copy

SCHEMA = 2  # of summary.json and checkpoints; a file without a `schema` key is schema 1

# A key added later is left out of the identity while it holds the value that reproduces the old behaviour.
ADDED_LATER = {"data.test_fraction": 0.0, "model.n_kv_heads": None, "model.bias": False, "model.qk_norm": "none",
               "norm.alpha_init": 0.5, "ffn.gelu": "exact", "model.emb_scale": False, "model.rope_base": 10000.0,
               "data.fingerprint": None,  # None: bigtxt, pinned by its checksum; text and hub corpora hash content
               "optim.cooldown_fraction": 0.2, "optim.cooldown_shape": "linear", "train.final_eval": "windows",
               "model.param": "sp", "model.init": "gpt2", "model.base_d_model": None, "optim.adamw_lr": None,
               "optim.adjust_lr_fn": None, "train.z_loss": 0.0, "model.logit_softcap": None,
               "model.attn_softcap": None, "model.zero_init_proj": False}
# Rows of this model preset predate the preset tag in row names (-ladder96): their names carry none.
UNTAGGED_PRESET = "tiny"
# The options added later, as they read in a row name when set away from their ADDED_LATER value.
ROW_TAGS = {"model.n_kv_heads": "kv{}", "model.bias": "bias", "model.qk_norm": "qk{}", "ffn.gelu": "gelu{}",
            "norm.alpha_init": "a{}", "model.emb_scale": "embscale", "model.rope_base": "rope{:.0f}",
            "model.param": "{}", "model.init": "init{}", "model.base_d_model": "base{}",
            "train.z_loss": "z{:g}", "model.logit_softcap": "cap{:g}", "model.attn_softcap": "acap{:g}",
            "model.zero_init_proj": "zproj", "optim.adamw_lr": "alr{:g}"}
# The optimiser every row before optim=muon trained with: its rows' names carry no optimiser tag.
UNTAGGED_OPTIMIZER = "adamw"
# A key that stopped deciding the numbers is hashed at the one value every old run had.
HASHED_AS = {"compile": False}  # compiling changes speed, not what is computed
# The identity holds the resolved precision; schema-1 runs hashed `auto`, which resolved to bf16 for every one.
LEGACY_PRECISION = {"bf16": "auto"}
# what a schema-1 checkpoint lacks, as the run it comes from had it (it timed every step, none as warm-up)
CHECKPOINT_DEFAULTS = {"warmup_steps": 0, "warmup_s": 0.0, "declarations": {}, "branch_evals": {}}


def identity_values(identity: dict) -> dict:
    """`identity` with each key added later that it leaves out at the value its absence stands for (ADDED_LATER)."""
    return ADDED_LATER | identity


def pop_key(d: dict, key: str):
    """Remove the dotted `key` from the nested dict `d`."""
    *parents, leaf = key.split(".")
    for part in parents:
        d = d.get(part, {})
    return d.pop(leaf, None)


def flat(d: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def row_tags(values: dict) -> list[str]:
    """What a row name adds to its four block axes (flat config `values`): an optimiser other than
    UNTAGGED_OPTIMIZER, the ROW_TAGS away from their old value, sinusoidal positions (rope and learned rows predate
    the tags), a model preset other than UNTAGGED_PRESET."""
    tags = [values["optim.name"]] if values["optim.name"] != UNTAGGED_OPTIMIZER else []
    tags += [tag.format(values[key]) for key, tag in ROW_TAGS.items() if values[key] != ADDED_LATER[key]]
    if values["model.pos"] == "sinusoidal":
        tags.append("sinusoidal")
    if values["model.name"] != UNTAGGED_PRESET:  # a size preset (model=small, model=ladder96) names its row
        tags.append(values["model.name"])
    return tags


def legacy_identity(summary: dict) -> dict:
    """Summaries written before `identity` existed: the row hash and the warm-up decide the config."""
    return {"row_id": summary["row_id"], "optim.warmup_steps": summary["axes"]["warmup_steps"]}


def recorded_identity(d: dict, *, without: tuple[str, ...] = ()) -> dict:
    """The nested config dict `d` as the identity records it: HASHED_AS keys, `without` and ADDED_LATER keys at
    their old value left out (in place)."""
    for key in (*HASHED_AS, *without):
        pop_key(d, key)
    values = flat(d)
    for key, old in ADDED_LATER.items():
        if key not in without and values.get(key) == old:
            pop_key(d, key)
    return d


def hashed_identity(identity: dict, *, without: tuple[str, ...] = ()) -> dict:
    """What the run hash covers: the identity with HASHED_AS put back and the precision as schema 1 hashed it."""
    if identity.get("precision") == "auto":
        raise ValueError("precision=auto must be resolved (fp32 or bf16) before a run's identity is hashed")
    d = identity | {k: v for k, v in HASHED_AS.items() if k not in without}
    if "precision" in d:
        d["precision"] = LEGACY_PRECISION.get(d["precision"], d["precision"])
    return d


def upgrade(kind: str, record: dict) -> dict:
    """A summary ("summary") or checkpoint state ("checkpoint") of any schema, as schema SCHEMA reads it (a copy)."""
    if kind not in ("summary", "checkpoint"):
        raise ValueError(f"unknown run file kind {kind!r}")
    record = copy.copy(record)
    if record.get("schema", 1) == 1:
        record = _summary_1_to_2(record) if kind == "summary" else _checkpoint_1_to_2(record)
    return record


def _summary_1_to_2(s: dict) -> dict:
    identity = s.get("identity")
    if isinstance(identity, dict) and identity.get("precision") == "auto" and s.get("precision") in ("fp32", "bf16"):
        s["identity"] = identity | {"precision": s["precision"]}  # the precision it computed with
    s.setdefault("declarations", {})
    return s | {"schema": 2}


def _checkpoint_1_to_2(state: dict) -> dict:
    return {**CHECKPOINT_DEFAULTS, "timed_steps": state.get("step", 0), **state, "schema": 2}
