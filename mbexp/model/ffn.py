"""The eight feed-forward variants of Shazeer (2020), squared ReLU (So et al. 2021) and the hidden-width rule."""

import math
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from mbexp import names

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "swish": F.silu,  # Swish_1 = SiLU
    "glu": torch.sigmoid,
    "bilinear": lambda x: x,
    "reglu": F.relu,
    "geglu": F.gelu,
    "swiglu": F.silu,
    "relu2": lambda x: F.relu(x).square(),  # Primer's squared ReLU
}
GELUS = {"exact": F.gelu, "tanh": partial(F.gelu, approximate="tanh")}  # tanh: GPT-2's and Gemma's GELU
GATED = set(names.GATED)
FFNS = names.FFNS
HIDDEN_RULES = names.HIDDEN_RULES


def ffn_hidden_dim(d_model: int, *, ffn: str, rule: str = "matched", multiple_of: int = 1) -> int:
    """d_ff for `ffn` under `rule`, rounded up to a multiple of `multiple_of`.

    matched: 4D for two-matrix FFNs and 8/3 D for gated ones, so both hold 8 D^2 weights.
    """
    if ffn not in ACTIVATIONS:
        raise ValueError(f"unknown ffn '{ffn}'; valid: {', '.join(FFNS)}")
    if rule not in HIDDEN_RULES:
        raise ValueError(f"unknown hidden rule '{rule}'; valid: {', '.join(HIDDEN_RULES)}")
    if multiple_of < 1:
        raise ValueError(f"hidden.multiple_of must be >= 1, got {multiple_of}")
    gated_width = rule == "8_3d" or (rule == "matched" and ffn in GATED)
    d_ff = round(8 * d_model / 3) if gated_width else 4 * d_model
    return multiple_of * math.ceil(d_ff / multiple_of)


class FFN(nn.Module):
    """act(xW) W2, or act(xW) * xV W2 for the gated variants; biases (model.bias) only on request.

    gelu: the GELU of the gelu and geglu FFNs, exact (x * Phi(x)) or its tanh approximation.
    """

    def __init__(self, name: str, d_model: int, d_ff: int, *, bias: bool = False, gelu: str = "exact"):
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown ffn '{name}'; valid: {', '.join(FFNS)}")
        if gelu not in GELUS or (gelu != "exact" and name not in names.GELU_FFNS):
            raise ValueError(f"ffn.gelu={gelu} is not valid for ffn={name}; valid: exact, or tanh for "
                             f"ffn={' or '.join(names.GELU_FFNS)}")
        self.name = name
        self.act = GELUS[gelu] if name in names.GELU_FFNS else ACTIVATIONS[name]
        self.w = nn.Linear(d_model, d_ff, bias=bias)
        self.v = nn.Linear(d_model, d_ff, bias=bias) if name in GATED else None
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.w(x))  # (B, T, d_ff)
        if self.v is not None:
            h = h * self.v(x)
        return self.w2(h)  # (B, T, D)
