"""What makes an experiment a size ladder: its runs differ in a model size key."""

import json

SIZE_KEYS = ("model.name", "model.d_model", "model.n_layers", "model.n_heads")  # what a rung of a ladder changes
# may differ from rung to rung without making another variant: each (size, FFN) at its own LR (a declared study)
PER_RUNG = ("optim.lr",)


def is_ladder(table) -> bool:
    """Whether the experiment's runs (a Table's) differ in size (a model.* size key)."""
    return any(len({json.dumps(i.get(k)) for i in table.runs["identity"]}) > 1 for k in SIZE_KEYS)
