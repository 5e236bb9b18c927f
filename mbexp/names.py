"""The names of every option of the block's axes, in table order. Torch-free, so that `make table`
and the config checks can use them without loading the model; each dispatch registry (model.norms.NORMS,
model.ffn.ACTIVATIONS, model.FINAL_NORM, ...) is keyed by exactly these names, which tests/test_model.py checks."""

NORMS = ("layer", "rms", "dyt")
# the norm.* options each norm takes; any other norm.* key must keep its default (mbexp.config.rules)
NORM_OPTIONS = {"layer": ("eps", "bias"), "rms": ("eps",), "dyt": ("alpha_init",)}
# each option's default: NormConfig's and the norm classes' (alpha_init: Zhu et al. 2025's initial alpha)
NORM_DEFAULTS = {"eps": 1e-5, "bias": False, "alpha_init": 0.5}
PLACEMENTS = ("pre", "post", "peri", "output", "deepnorm")
# appended options go last: the table lists rows in this order
FFNS = ("relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu", "relu2")
GATED = ("glu", "bilinear", "reglu", "geglu", "swiglu")
GELU_FFNS = ("gelu", "geglu")  # the FFNs that ffn.gelu (exact | tanh) applies to
GELUS = ("exact", "tanh")
HIDDEN_RULES = ("matched", "4d", "8_3d")
POSITIONS = ("rope", "learned", "sinusoidal")
PARAMS = ("sp", "mup")  # the width parametrisation: standard, or μP (mbexp/model/mup.py)
INITS = ("gpt2", "fan_in")  # the hidden matrices' init std: 0.02, or scaled with 1/sqrt(fan_in) as μP's
QK_NORMS = ("none", "head", "proj")  # head: each head's dims (Gemma 3, Qwen 3); proj: the whole projection (OLMo 2)
OPTIMIZERS = ("adamw", "muon")
ADJUST_LR_FNS = ("original", "match_rms_adamw")  # torch's Muon update scalings: Jordan et al.'s, Moonlight's
# the block's axes, each a config group: a run's `axes`, a table's row order, the model contract's first fields
AXES = {"norm": NORMS, "placement": PLACEMENTS, "ffn": FFNS, "hidden": HIDDEN_RULES}


def misapplied_norm_option(norm: str, options: dict) -> str | None:
    """The error for the first norm.* option that `norm` does not take (NORM_OPTIONS) yet is set away from its
    default (NORM_DEFAULTS), else None: config validation and norms.build_norm both ask it."""
    takes = NORM_OPTIONS[norm]
    for key, value in options.items():
        if key not in takes and value != NORM_DEFAULTS[key]:
            return (f"norm.{key}={value} does not apply to norm={norm}; "
                    f"norm={norm} takes: {', '.join(f'norm.{k}' for k in takes)}")
    return None
