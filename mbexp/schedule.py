"""The learning-rate schedule: linear warm-up, then cosine, linear or constant."""

import math

# optim.schedule -> the learning rate after warm-up, given the peak lr, the floor and the decay progress in [0, 1]
SCHEDULES = {
    "cosine": lambda lr, floor, progress: floor + (lr - floor) * 0.5 * (1 + math.cos(math.pi * progress)),
    "linear": lambda lr, floor, progress: lr - (lr - floor) * progress,
    "constant": lambda lr, floor, progress: lr,
}


def lr_at(step: int, *, lr: float, warmup_steps: int, total_steps: int, schedule: str = "cosine",
          min_lr_ratio: float = 0.1) -> float:
    """The learning rate of optimiser step `step` (0-based).

    Warm-up ramps linearly to `lr` over `warmup_steps` (0: start at `lr`); the decay
    then reaches lr * min_lr_ratio at the last step.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule '{schedule}'; valid: {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    return SCHEDULES[schedule](lr, lr * min_lr_ratio, progress)
