"""The optimisers (optim=adamw | muon) and the composite that puts Muon and AdamW behind one optimizer interface."""

import torch

from mbexp.model import mup
from mbexp.names import OPTIMIZERS

# Jordan et al. 2024's Muon: Nesterov momentum, then Newton-Schulz with the quintic's coefficients for 5 steps
MUON_MOMENTUM, NS_COEFFICIENTS, NS_STEPS = 0.95, (3.4445, -4.7750, 2.0315), 5


class Optimizers:
    """Several optimisers stepped as one: what the trainer, its LR schedule and checkpoints see of optim=muon."""

    def __init__(self, **optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [group for opt in self.optimizers.values() for group in opt.param_groups]

    def step(self) -> None:
        for opt in self.optimizers.values():
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: opt.state_dict() for name, opt in self.optimizers.items()}

    def load_state_dict(self, state: dict) -> None:
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state[name])


def adamw(params: list[torch.nn.Parameter], optim, device: torch.device, lr_scale: float = 1.0,
          model: torch.nn.Module | None = None) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only, not on norm gains or biases; every group's LR
    is lr_scale times the schedule's (trainer.train_step); `model` under μP: its hidden matrices by width."""
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": optim.weight_decay, "lr_scale": lr_scale},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "lr_scale": lr_scale},
    ]
    if model is not None:
        groups = mup.scale_groups(model, groups)
    return torch.optim.AdamW(groups, lr=optim.lr * lr_scale, betas=tuple(optim.betas), fused=device.type == "cuda")


def muon_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The blocks' matrices (attention qkv and proj, the FFN's): Muon's. The fused qkv matrix is one matrix to
    Muon, orthogonalised whole (modded-nanogpt splits it per q, k, v)."""
    return [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2]


def make_optimizer(model: torch.nn.Module, optim, device: torch.device):
    """optim=adamw: AdamW on every parameter. optim=muon: Muon on the blocks' matrices (muon_params), AdamW on the
    embeddings, head, gains and biases at optim.adamw_lr; both decay their matrices by optim.weight_decay."""
    if optim.name not in OPTIMIZERS:
        raise ValueError(f"unknown optim '{optim.name}'; valid: {', '.join(OPTIMIZERS)}")
    params = [p for p in model.parameters() if p.requires_grad]
    if optim.name == "adamw":  # under μP the hidden matrices in groups of their own LR scale (mup.scale_groups)
        return adamw(params, optim, device, model=model)
    hidden = muon_params(model)
    rest = [p for p in params if all(p is not h for h in hidden)]
    adamw_lr = optim.lr if optim.adamw_lr is None else optim.adamw_lr
    muon = torch.optim.Muon([{"params": hidden, "lr_scale": 1.0}], lr=optim.lr, weight_decay=optim.weight_decay,
                            momentum=MUON_MOMENTUM, nesterov=True, ns_coefficients=NS_COEFFICIENTS,
                            ns_steps=NS_STEPS, adjust_lr_fn=optim.adjust_lr_fn)
    return Optimizers(muon=muon, adamw=adamw(rest, optim, device, lr_scale=adamw_lr / optim.lr))
