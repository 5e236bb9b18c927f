"""The learning-rate schedule: linear warm-up, then cosine, linear, constant or wsd (docs/usage.md)."""

import math

from mbexp.io import is_int

# optim.schedule -> the learning rate after warm-up, given the peak lr, the floor and the decay progress in [0, 1]
SCHEDULES = {
    "cosine": lambda lr, floor, progress: floor + (lr - floor) * 0.5 * (1 + math.cos(math.pi * progress)),
    "linear": lambda lr, floor, progress: lr - (lr - floor) * progress,
    "constant": lambda lr, floor, progress: lr,
    "wsd": None,  # constant, then a cool-down of the run's last cooldown_fraction (COOLDOWNS)
}
# optim.cooldown_shape -> the learning rate in the wsd cool-down, given the progress through it in (0, 1]
COOLDOWNS = {
    "linear": SCHEDULES["linear"],
    "sqrt": lambda lr, floor, progress: floor + (lr - floor) * (1 - math.sqrt(progress)),  # 1 - sqrt
}


def cooldown_start(total_steps: int, cooldown_fraction: float) -> int:
    """The first step of a wsd cool-down: the last round(cooldown_fraction * total_steps) steps cool down."""
    return total_steps - math.floor(cooldown_fraction * total_steps + 0.5)


def lr_at(step: int, *, lr: float, warmup_steps: int, total_steps: int, schedule: str = "cosine",
          min_lr_ratio: float = 0.1, cooldown_fraction: float = 0.2, cooldown_shape: str = "linear") -> float:
    """The learning rate of optimiser step `step` (0-based).

    Warm-up ramps linearly to `lr` over `warmup_steps` (0: start at `lr`); the decay then reaches
    lr * min_lr_ratio at the last step. wsd holds `lr` until cooldown_start() and decays only there,
    so until then it does not depend on total_steps.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule '{schedule}'; valid: {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "wsd":
        start = cooldown_start(total_steps, cooldown_fraction)
        if step < start:
            return lr
        return COOLDOWNS[cooldown_shape](lr, lr * min_lr_ratio, min(1.0, (step - start + 1) / (total_steps - start)))
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    return SCHEDULES[schedule](lr, lr * min_lr_ratio, progress)


BUDGETS_RULE = "distinct positive step counts"  # train.budgets, and a declared study's budgets


def valid_budgets(budgets) -> bool:
    return bool(budgets) and all(is_int(b) and b >= 1 for b in budgets) and len(set(budgets)) == len(budgets)


def wsd_problem(optim, train) -> str | None:
    """What is wrong with the cool-down settings and train.budgets (docs/usage.md), or None: every budget must be
    distinct and positive, and cool down after its warm-up."""
    o, budgets = optim, train.budgets
    if o.cooldown_shape not in COOLDOWNS:
        return f"optim.cooldown_shape={o.cooldown_shape!r} is not valid; choose one of: {', '.join(COOLDOWNS)}"
    if not 0 < o.cooldown_fraction < 1:
        return f"optim.cooldown_fraction={o.cooldown_fraction} must lie strictly between 0 and 1"
    if budgets is not None and o.schedule != "wsd":
        return (f"train.budgets={list(budgets)} needs optim.schedule=wsd (got {o.schedule}): only a "
                "warm-up-stable-decay run shares its trunk between budgets")
    if budgets is not None and not valid_budgets(budgets):
        return f"train.budgets={list(budgets)} must be {BUDGETS_RULE}"
    for steps in budgets or ([train.steps] if o.schedule == "wsd" else []):
        start = cooldown_start(steps, o.cooldown_fraction)
        if start < o.warmup_steps or start == steps:
            return (f"a {steps}-step wsd run cools down from step {start} (optim.cooldown_fraction="
                    f"{o.cooldown_fraction}), which must come after optim.warmup_steps={o.warmup_steps} and before "
                    "its last step")
    return None


def lr_for(optim, step: int, total_steps: int) -> float:
    """lr_at with the schedule settings of an OptimConfig: what the trainer and the bench both train with."""
    return lr_at(step, lr=optim.lr, warmup_steps=optim.warmup_steps, total_steps=total_steps, schedule=optim.schedule,
                 min_lr_ratio=optim.min_lr_ratio, cooldown_fraction=optim.cooldown_fraction,
                 cooldown_shape=optim.cooldown_shape)
