"""The decoder-only LM, assembled from a norm, a placement, an FFN and a width rule."""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from mbexp.attention import CausalSelfAttention
from mbexp.ffn import FFN, ffn_hidden_dim
from mbexp.norms import build_norm

PLACEMENTS = ("pre", "post")
POSITIONS = ("rope", "learned")


@dataclass
class ModelSpec:
    """Everything that decides the model's shape; the model's only contract."""

    vocab_size: int = 4096
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    pos: str = "rope"  # rope: no position parameters; learned: GPT-2 absolute positions
    tie_embeddings: bool = True  # head shares the token embedding: fewer params at tiny scale
    norm: str = "layer"
    norm_eps: float = 1e-5
    norm_bias: bool = False
    placement: str = "pre"
    ffn: str = "relu"
    hidden: str = "matched"
    multiple_of: int = 1

    @property
    def d_ff(self) -> int:
        return ffn_hidden_dim(self.d_model, ffn=self.ffn, rule=self.hidden, multiple_of=self.multiple_of)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement '{spec.placement}'; valid: {', '.join(PLACEMENTS)}")
        self.placement = spec.placement
        self.norm1 = build_norm(spec.norm, spec.d_model, eps=spec.norm_eps, bias=spec.norm_bias)
        self.norm2 = build_norm(spec.norm, spec.d_model, eps=spec.norm_eps, bias=spec.norm_bias)
        self.attn = CausalSelfAttention(spec.d_model, spec.n_heads, spec.seq_len, rope=spec.pos == "rope")
        self.ffn = FFN(spec.ffn, spec.d_model, spec.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        if self.placement == "pre":
            x = x + self.attn(self.norm1(x))
            x = x + self.ffn(self.norm2(x))
        else:  # post
            x = self.norm1(x + self.attn(x))
            x = self.norm2(x + self.ffn(x))
        return x


class DecoderLM(nn.Module):
    """Token embedding -> blocks -> (final norm, pre only) -> LM head.

    Initialisation (GPT-2): every Linear and Embedding weight ~ N(0, 0.02), the two
    residual-branch output projections (attn.proj, ffn.w2) ~ N(0, 0.02 / sqrt(2 L)) so the
    residual stream's variance does not grow with depth; norm gains 1, biases 0.
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.pos not in POSITIONS:
            raise ValueError(f"unknown model.pos '{spec.pos}'; valid: {', '.join(POSITIONS)}")
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model)
        self.pos_emb = nn.Embedding(spec.seq_len, spec.d_model) if spec.pos == "learned" else None
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        # Post-LN already ends in a norm; Pre-LN's residual stream needs one before the head
        self.final_norm = (
            build_norm(spec.norm, spec.d_model, eps=spec.norm_eps, bias=spec.norm_bias)
            if spec.placement == "pre"
            else nn.Identity()
        )
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.apply(self._init_weights)
        for block in self.blocks:
            for proj in (block.attn.proj, block.ffn.w2):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * spec.n_layers))
        if spec.tie_embeddings:
            self.head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (B, T, V) for idx (B, T); with targets, also the mean cross-entropy."""
        x = self.tok_emb(idx)  # (B, T, D)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.final_norm(x))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return logits, loss


FLOPS_FORMULA = "6*N_matmul + 12*n_layers*d_model*seq_len"


def flops_per_token(model: "DecoderLM") -> int:
    """Training FLOPs per token (FLOPS_FORMULA): 6 per matmul weight, forward and backward, where N_matmul
    counts every nn.Linear weight, the tied LM head included (not embedding lookups nor norm gains),
    plus the attention scores and their weighted sum (Kaplan et al. 2020)."""
    s = model.spec
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return 6 * n_matmul + 12 * s.n_layers * s.d_model * s.seq_len


def param_counts(model: DecoderLM) -> dict[str, int]:
    """Total parameters (tied weights once), non-embedding ones, and those in FFNs."""
    total = sum(p.numel() for p in model.parameters())
    embedding = model.tok_emb.weight.numel() + (model.pos_emb.weight.numel() if model.pos_emb is not None else 0)
    if not model.spec.tie_embeddings:
        embedding += model.head.weight.numel()
    ffn = sum(p.numel() for block in model.blocks for p in block.ffn.parameters())
    return {"total": total, "non_embedding": total - embedding, "ffn": ffn}
