"""The names of every option of the block's axes, in table order. Torch-free, so that `make table`
and the config checks can use them without loading the model; each dispatch registry (norms.NORMS,
ffn.ACTIVATIONS, ...) is keyed by exactly these names, which tests/test_rules.py checks."""

NORMS = ("layer", "rms")
PLACEMENTS = ("pre", "post")
FFNS = ("relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu")
GATED = ("glu", "bilinear", "reglu", "geglu", "swiglu")
HIDDEN_RULES = ("matched", "4d", "8_3d")
POSITIONS = ("rope", "learned")
