"""μP for Adam (Yang et al. 2022, Tensor Programs V) and the init-only control: every width rule in one place.

The base model is this model at d_model = base_d_model (d_ff by the same width rule). A hidden matrix W is every
attention and FFN Linear (attn.qkv, attn.proj, ffn.w, ffn.v, ffn.w2); its width multiplier is

    m_W = fan_in(W) / fan_in(W in the base model)        (d_model ratio; d_ff ratio for ffn.w2)

model.param=mup, with η = optim.lr, λ = optim.weight_decay, σ_SP(W) the SP std (0.02; 0.02/√(2L) for
attn.proj and ffn.w2), m = d_model / base_d_model and d_head = d_model / n_heads:

    hidden W     init σ_SP(W) · m_W^(-1/2)   Adam LR η / m_W   decay λ · m_W   (η_W λ_W = η λ, as mup's MuAdamW)
    the rest     init as SP                  Adam LR η         decay as SP     (embeddings, norm gains, biases,
                                                                                readout weight, scalars)
    readout      logits = W_out (h / m)      (mup's MuReadout; MuSharedReadout when tied to the embedding)
    attention    softmax(q·k / d_head)       instead of q·k / √d_head

At the base width (m = m_W = 1) μP is SP except the attention scale, 1/d_head against 1/√d_head.
model.init=fan_in (SP): the hidden init rule alone, σ_SP(W) · m_W^(-1/2); every other rule SP's.
"""

import torch
from torch import nn

from mbexp.model.ffn import ffn_hidden_dim


def width_mults(model: nn.Module) -> dict[str, float]:
    """m_W for each hidden matrix, by parameter name (blocks.0.attn.qkv.weight, ...)."""
    s = model.spec
    base_d_ff = ffn_hidden_dim(s.base_d_model, ffn=s.ffn, rule=s.hidden, multiple_of=s.hidden_multiple_of)
    base_fan_in = {s.d_model: s.base_d_model, s.d_ff: base_d_ff}  # d_ff >= 8/3 d_model: never equal
    return {f"blocks.{i}.{path}.weight": linear.in_features / base_fan_in[linear.in_features]
            for i, block in enumerate(model.blocks)
            for path, linear in (("attn.qkv", block.attn.qkv), ("attn.proj", block.attn.proj),
                                 ("ffn.w", block.ffn.w), ("ffn.v", block.ffn.v), ("ffn.w2", block.ffn.w2))
            if linear is not None}


def scale_init_(model: nn.Module) -> None:
    """Hidden matrices from σ_SP to σ_SP · m_W^(-1/2) (model.param=mup, model.init=fan_in); SP: nothing."""
    if model.spec.param == "sp" and model.spec.init == "gpt2":
        return
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, m in width_mults(model).items():
            params[name].mul_(m ** -0.5)


def readout_mult(spec) -> float:
    """m = d_model / base_d_model: μP divides the head's input by it; SP: 1."""
    return spec.d_model / spec.base_d_model if spec.param == "mup" else 1.0


def attention_scale(spec) -> float | None:
    """The q·k scale: 1/d_head under μP; None (SDPA's 1/√d_head) under SP."""
    return 1.0 / (spec.d_model // spec.n_heads) if spec.param == "mup" else None


def scale_groups(model: nn.Module, groups: list[dict]) -> list[dict]:
    """μP: each hidden matrix moves to a group of its m_W, at lr_scale 1/m_W and weight decay λ · m_W; SP:
    `groups` as they are."""
    if model.spec.param != "mup":
        return groups
    by_name = width_mults(model)
    mults = {id(p): by_name[name] for name, p in model.named_parameters() if name in by_name}
    out = []
    for group in groups:
        rest, by_mult = [], {}
        for p in group["params"]:
            if id(p) in mults:
                by_mult.setdefault(mults[id(p)], []).append(p)
            else:
                rest.append(p)
        for m, params in by_mult.items():
            out.append({**group, "params": params, "lr_scale": 1.0 / m, "weight_decay": group["weight_decay"] * m})
        if rest:
            out.append({**group, "params": rest})
    return out
