"""What makes an experiment a size ladder: its runs differ in a model size key."""

import json

SIZE_KEYS = ("model.name", "model.d_model", "model.n_layers", "model.n_heads")  # what a rung of a ladder changes
# may differ from rung to rung without making another variant: each (size, FFN) at its own LR (a declared study)
PER_RUNG = ("optim.lr",)


def variant_and_size(identity: dict, drop: set) -> tuple[str, tuple]:
    """A run's variant (its identity less the size keys and `drop`: per-rung keys, the column, the tuned key) and
    its size (the size keys' values): two runs of one variant at two sizes are one ladder's rungs."""
    variant = json.dumps({k: v for k, v in identity.items() if k not in {*SIZE_KEYS, *drop}}, sort_keys=True)
    return variant, tuple(json.dumps(identity.get(k)) for k in SIZE_KEYS)


def is_ladder(table) -> bool:
    """Whether the experiment's runs (a Table's) differ in size (a model.* size key)."""
    return any(len({json.dumps(i.get(k)) for i in table.runs["identity"]}) > 1 for k in SIZE_KEYS)
