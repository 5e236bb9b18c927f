"""The decoder-only LM, assembled from a norm, a placement, an FFN and a width rule (docs/model.md)."""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from mbexp import names
from mbexp.model import mup
from mbexp.model.attention import CausalSelfAttention, softcap
from mbexp.model.ffn import FFN, ffn_hidden_dim
from mbexp.model.norms import build_norm

PLACEMENTS = names.PLACEMENTS
POSITIONS = names.POSITIONS
# whether the residual stream needs a norm before the head: post and deepnorm already end in one
FINAL_NORM = {"pre": True, "post": False, "peri": True, "output": True, "deepnorm": False}


@dataclass
class ModelSpec:
    """Everything that decides the model's shape; the model's only contract. No defaults here: they are the
    config's (config.SPEC_KEYS names each field's key, config.model_spec fills it; vocab_size comes from the
    tokenizer)."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None  # None: n_heads (multi-head); fewer: grouped-query attention
    seq_len: int
    pos: str  # rope: no position parameters; learned: GPT-2's; sinusoidal: fixed (Vaswani et al. §3.5)
    rope_base: float  # RoPE's base (pos=rope): 10,000 in RoFormer and Llama 1/2, 500,000 in Llama 3 and OLMo 2
    tie_embeddings: bool  # head shares the token embedding: fewer params at tiny scale
    bias: bool  # biases in every attention and FFN Linear (GPT-2, the original Transformer)
    qk_norm: str  # none | head | proj: normalise q and k before RoPE
    emb_scale: bool  # token embedding ~ N(0, 1/D), times a learnable scalar initialised to sqrt(D)
    logit_softcap: float | None  # cap * tanh(logits / cap) on the head's logits; None: off
    attn_softcap: float | None  # the same on attention scores, before the mask (explicit scores, not SDPA)
    zero_init_proj: bool  # attn.proj and ffn.w2 start at 0
    norm: str
    norm_eps: float
    norm_bias: bool
    norm_alpha_init: float
    placement: str
    ffn: str
    ffn_gelu: str
    hidden: str
    hidden_multiple_of: int
    param: str  # sp | mup: the width parametrisation (mbexp/model/mup.py)
    init: str  # gpt2: N(0, 0.02) | fan_in: the hidden matrices' std scaled as μP's (mup.py), nothing else
    base_d_model: int | None  # the base width of model.param=mup and model.init=fan_in

    @property
    def d_ff(self) -> int:
        return ffn_hidden_dim(self.d_model, ffn=self.ffn, rule=self.hidden, multiple_of=self.hidden_multiple_of)

    def make_norm(self, dim: int) -> nn.Module:
        return build_norm(self.norm, dim, eps=self.norm_eps, bias=self.norm_bias, alpha_init=self.norm_alpha_init)


def deepnorm_alpha(n_layers: int) -> float:
    """DeepNorm's residual up-weighting for a decoder-only stack of L layers: (2L)^(1/4) (Wang et al. 2022)."""
    return (2 * n_layers) ** 0.25


def deepnorm_beta(n_layers: int) -> float:
    """DeepNorm's Xavier gain for the FFN, value and output projections: (8L)^(-1/4)."""
    return (8 * n_layers) ** -0.25


def xavier_normal_(weight: torch.Tensor, gain: float) -> None:
    """Xavier-normal init of one (out, in) matrix or row block of a fused one: std = gain * sqrt(2 / (in + out))."""
    with torch.no_grad():
        weight.normal_(0.0, gain * math.sqrt(2.0 / sum(weight.shape)))


def sinusoidal_positions(seq_len: int, d_model: int) -> torch.Tensor:
    """(T, D): PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)) (Vaswani et al. §3.5)."""
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32),
                         10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model))
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement '{spec.placement}'; valid: {', '.join(PLACEMENTS)}")
        self.placement = spec.placement
        self.norm1, self.norm2 = spec.make_norm(spec.d_model), spec.make_norm(spec.d_model)
        if spec.placement == "peri":  # norm1/norm2 wrap the sublayers' inputs, these their outputs
            self.norm1_out, self.norm2_out = spec.make_norm(spec.d_model), spec.make_norm(spec.d_model)
        self.alpha = deepnorm_alpha(spec.n_layers) if spec.placement == "deepnorm" else 1.0
        self.attn = CausalSelfAttention(spec.d_model, spec.n_heads, spec.seq_len, rope=spec.pos == "rope",
                                        rope_base=spec.rope_base, n_kv_heads=spec.n_kv_heads, bias=spec.bias,
                                        qk_norm=spec.qk_norm, make_norm=spec.make_norm,
                                        scale=mup.attention_scale(spec), softcap=spec.attn_softcap)
        self.ffn = FFN(spec.ffn, spec.d_model, spec.d_ff, bias=spec.bias, gelu=spec.ffn_gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        attn, ffn, p = self.attn, self.ffn, self.placement
        if p == "pre":
            x = x + attn(self.norm1(x))
            x = x + ffn(self.norm2(x))
        elif p == "post":
            x = self.norm1(x + attn(x))
            x = self.norm2(x + ffn(x))
        elif p == "peri":
            x = x + self.norm1_out(attn(self.norm1(x)))
            x = x + self.norm2_out(ffn(self.norm2(x)))
        elif p == "output":
            x = x + self.norm1(attn(x))
            x = x + self.norm2(ffn(x))
        else:  # deepnorm
            x = self.norm1(self.alpha * x + attn(x))
            x = self.norm2(self.alpha * x + ffn(x))
        return x


class DecoderLM(nn.Module):
    """Token embedding (+ positions) -> blocks -> final norm (placement's choice, FINAL_NORM) -> LM head.

    Initialisation (GPT-2): every Linear and Embedding weight ~ N(0, 0.02), the two
    residual-branch output projections (attn.proj, ffn.w2) ~ N(0, 0.02 / sqrt(2 L)) so the
    residual stream's variance does not grow with depth; norm gains 1, biases 0. DeepNorm
    instead uses its paper's init (deepnorm_init_); model.emb_scale draws the embedding from N(0, 1/D);
    model.zero_init_proj starts the two output projections at 0 (after either init). model.param=mup and
    model.init=fan_in rescale the hidden matrices, μP also the head's input (mup.py).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.pos not in POSITIONS:
            raise ValueError(f"unknown model.pos '{spec.pos}'; valid: {', '.join(POSITIONS)}")
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model)
        self.emb_scale = nn.Parameter(torch.tensor(math.sqrt(spec.d_model))) if spec.emb_scale else None
        self.pos_emb = nn.Embedding(spec.seq_len, spec.d_model) if spec.pos == "learned" else None
        if spec.pos == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_positions(spec.seq_len, spec.d_model), persistent=False)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.final_norm = spec.make_norm(spec.d_model) if FINAL_NORM[spec.placement] else nn.Identity()
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.apply(self._init_weights)
        for block in self.blocks:
            if spec.placement == "deepnorm":
                deepnorm_init_(block, spec.n_layers)
            else:
                for proj in (block.attn.proj, block.ffn.w2):
                    nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * spec.n_layers))
            if spec.zero_init_proj:  # each block starts as the identity map
                for proj in (block.attn.proj, block.ffn.w2):
                    nn.init.zeros_(proj.weight)
        if spec.emb_scale:  # the scaled embedding starts at unit RMS, the scale a normalised stream has
            nn.init.normal_(self.tok_emb.weight, std=spec.d_model ** -0.5)
        mup.scale_init_(self)
        self.readout_mult = mup.readout_mult(spec)
        if spec.tie_embeddings:
            self.head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (B, T, V) for idx (B, T); with targets, also the mean cross-entropy."""
        T = idx.shape[1]
        x = self.tok_emb(idx)  # (B, T, D)
        if self.emb_scale is not None:
            x = x * self.emb_scale
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T, device=idx.device))
        elif self.spec.pos == "sinusoidal":
            x = x + self.pos_table[:T].to(x.dtype)
        for block in self.blocks:
            x = block(x)
        x = self.final_norm(x)
        if self.spec.param == "mup":  # MuReadout: the head sees h / m
            x = x / self.readout_mult
        logits = self.head(x)  # (B, T, V)
        if self.spec.logit_softcap:
            logits = softcap(logits, self.spec.logit_softcap)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return logits, loss


def deepnorm_init_(block: Block, n_layers: int) -> None:
    """DeepNet's init (Wang et al. 2022): Xavier-normal with gain beta = (8L)^(-1/4) on the FFN, value and output
    projections, gain 1 on the query and key projections."""
    beta, attn, d_model = deepnorm_beta(n_layers), block.attn, block.attn.proj.weight.shape[0]
    q, k, v = attn.qkv.weight.split([d_model, *(2 * [attn.n_kv_heads * attn.head_dim])])
    for weight, gain in ((q, 1.0), (k, 1.0), (v, beta), (attn.proj.weight, beta)):
        xavier_normal_(weight, gain)
    for linear in (block.ffn.w, block.ffn.v, block.ffn.w2):
        if linear is not None:
            xavier_normal_(linear.weight, beta)


def flops_terms(model: "DecoderLM") -> dict[str, int]:
    """FLOPS_FORMULA's terms: N_matmul (every nn.Linear weight, the tied LM head included, not embedding lookups
    nor norm gains) and the attention scores with their weighted sum (Kaplan et al. 2020)."""
    s = model.spec
    return {"n_matmul": sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)),
            "attention": 12 * s.n_layers * s.d_model * s.seq_len}


def flops_per_token(model: "DecoderLM") -> int:
    """Training FLOPs per token (FLOPS_FORMULA): 6 per matmul weight, forward and backward, plus attention."""
    terms = flops_terms(model)
    return 6 * terms["n_matmul"] + terms["attention"]


def param_counts(model: DecoderLM) -> dict[str, int]:
    """Total parameters (tied weights once), non-embedding ones, and those in FFNs."""
    total = sum(p.numel() for p in model.parameters())
    embedding = model.tok_emb.weight.numel() + (model.pos_emb.weight.numel() if model.pos_emb is not None else 0)
    if not model.spec.tie_embeddings:
        embedding += model.head.weight.numel()
    ffn = sum(p.numel() for block in model.blocks for p in block.ffn.parameters())
    return {"total": total, "non_embedding": total - embedding, "ffn": ffn}
