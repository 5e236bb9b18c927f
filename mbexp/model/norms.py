"""Normalisation layers: LayerNorm, RMSNorm and DyT (docs/model.md, "Norms"), keyed by name."""

import torch
from torch import nn

from mbexp import names
from mbexp.names import NORM_DEFAULTS


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * g (+ b). No bias by default (Llama/T5 convention)."""

    def __init__(self, dim: int, *, eps: float = NORM_DEFAULTS["eps"], bias: bool = NORM_DEFAULTS["bias"]):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * g: no centring, no bias."""

    def __init__(self, dim: int, *, eps: float = NORM_DEFAULTS["eps"]):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # computed in fp32 so that bf16 autocast does not lose the small mean of squares
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025): g * tanh(alpha * x) + b, alpha one learnable scalar; no statistics."""

    def __init__(self, dim: int, *, alpha_init: float = NORM_DEFAULTS["alpha_init"]):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias


NORMS = {"layer": LayerNorm, "rms": RMSNorm, "dyt": DyT}


def build_norm(name: str, dim: int, **options) -> nn.Module:
    """The norm called `name` with the norm.* `options` it takes (names.NORM_OPTIONS); an unknown name lists
    the valid ones, and an option the norm cannot take, set away from its default (NORM_DEFAULTS), is an error."""
    if name not in NORMS:
        raise ValueError(f"unknown norm '{name}'; valid: {', '.join(NORMS)}")
    if message := names.misapplied_norm_option(name, options):
        raise ValueError(message)
    takes = names.NORM_OPTIONS[name]
    return NORMS[name](dim, **{key: value for key, value in options.items() if key in takes})
