"""Normalisation layers: LayerNorm and RMSNorm (DESIGN.md §3), keyed by name."""

import torch
from torch import nn


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * g (+ b). No bias by default (Llama/T5 convention)."""

    def __init__(self, dim: int, *, eps: float = 1e-5, bias: bool = False):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * g: no centring, no bias."""

    def __init__(self, dim: int, *, eps: float = 1e-5, bias: bool = False):
        super().__init__()
        if bias:
            raise ValueError("norm.bias=true is only defined for norm=layer; RMSNorm has no bias")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # computed in fp32 so that bf16 autocast does not lose the small mean of squares
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


NORMS = {"layer": LayerNorm, "rms": RMSNorm}


def build_norm(name: str, dim: int, *, eps: float = 1e-5, bias: bool = False) -> nn.Module:
    """The norm called `name`; an unknown name lists the valid ones."""
    if name not in NORMS:
        raise ValueError(f"unknown norm '{name}'; valid: {', '.join(NORMS)}")
    return NORMS[name](dim, eps=eps, bias=bias)
