"""Causal self-attention through SDPA, or explicit scores when they are soft-capped: multi-head or grouped-query,
rotary positions, optional QK-norm."""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F


def rope_tables(seq_len: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each (T, head_dim / 2): pair j of position p turns by p * base^(-2j / head_dim)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x1, x2) of the last dimension of x: (B, H, T, hd)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[: x.shape[-2]].to(x.dtype), sin[: x.shape[-2]].to(x.dtype)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(x / cap): x where |x| << cap, never beyond ±cap (Gemma 2's logit and attention soft-capping)."""
    return cap * torch.tanh(x / cap)


def capped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float,
                     scale: float | None = None) -> torch.Tensor:
    """Causal attention with scores q·k·scale (None: 1/sqrt(hd)) soft-capped before the mask and softmax; SDPA
    cannot cap them."""
    T, group = q.shape[-2], q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # k/v head j serves j*g ... j*g+g-1
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = softcap(q @ k.transpose(-2, -1) * scale, cap)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1).to(v.dtype) @ v  # (B, H, T, hd)


class CausalSelfAttention(nn.Module):
    """qkv holds [q (n_heads heads) | k (n_kv_heads) | v (n_kv_heads)]; each k/v head serves n_heads / n_kv_heads
    query heads (GQA). qk_norm normalises q and k before RoPE, over each head ("head") or the whole
    projection ("proj"), with the norm `make_norm(dim)` builds. `scale` multiplies q·k (None: 1/sqrt(head_dim));
    softcap: cap the scores (capped_attention)."""

    def __init__(self, d_model: int, n_heads: int, seq_len: int, *, rope: bool, rope_base: float,
                 n_kv_heads: int | None = None, bias: bool = False, qk_norm: str = "none",
                 make_norm: Callable[[int], nn.Module] | None = None, scale: float | None = None,
                 softcap: float | None = None):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if d_model % n_heads:
            raise ValueError(f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"model.n_kv_heads={n_kv_heads} must divide model.n_heads={n_heads}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        q_dim, kv_dim = d_model, n_kv_heads * self.head_dim
        self.qkv = nn.Linear(d_model, q_dim + 2 * kv_dim, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.qk_norm, self.scale, self.softcap = qk_norm, scale, softcap
        if qk_norm != "none":
            q_norm_dim, k_norm_dim = (self.head_dim, self.head_dim) if qk_norm == "head" else (q_dim, kv_dim)
            self.q_norm, self.k_norm = make_norm(q_norm_dim), make_norm(k_norm_dim)
        self.rope = rope
        if rope:
            cos, sin = rope_tables(seq_len, self.head_dim, rope_base)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, T, hd), k and v (B, H_kv, T, hd), as the scores see them: normalised and rotated."""
        B, T, C = x.shape
        hd, kv_dim = self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([C, kv_dim, kv_dim], dim=-1)  # (B, T, C), 2 x (B, T, kv_dim)
        if self.qk_norm == "proj":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, self.n_kv_heads, hd).transpose(1, 2)  # (B, H_kv, T, hd)
        v = v.view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.heads(x)
        if self.softcap:
            y = capped_attention(q, k, v, self.softcap, self.scale)
        else:
            gqa = self.n_kv_heads != self.n_heads
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                               enable_gqa=gqa)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))
