"""Checkpoints written atomically, with the previous one kept until the new one is safe."""

import logging
import os
from pathlib import Path

import torch

from mbexp.io import atomic_write

log = logging.getLogger(__name__)
LATEST, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"


def save(directory: Path, state: dict) -> None:
    """Write `state` as the latest checkpoint; the one it replaces becomes the previous one."""
    directory = Path(directory)

    def write(tmp: str) -> None:
        torch.save(state, tmp)
        if (directory / LATEST).exists():
            os.replace(directory / LATEST, directory / PREVIOUS)

    atomic_write(directory / LATEST, write)


def load(directory: Path, *, config_hash: str) -> dict | None:
    """The newest readable checkpoint of this config, or None; damaged files are skipped with one warning line."""
    damaged = []
    for name in (LATEST, PREVIOUS):
        path = Path(directory) / name
        if not path.exists():
            continue
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("config_hash") != config_hash or "step" not in state:
                raise ValueError("not a checkpoint of this run's config")
        except Exception as exc:  # a truncated zip, garbage bytes, a foreign file: never fatal
            damaged.append(f"{name}: {_reason(exc)}")
            continue
        if damaged:
            log.warning("checkpoint unreadable in %s (%s): resuming from %s", directory, "; ".join(damaged), name)
        return state
    if damaged:
        log.warning("no readable checkpoint in %s (unreadable: %s): training again from step 0", directory,
                    "; ".join(damaged))
    return None


def _reason(exc: Exception) -> str:
    """Why a checkpoint did not load, in a few words; never torch's advice to load it unsafely."""
    text = str(exc).strip()
    if "Weights only load failed" in text:
        return "it holds objects a safe (weights-only) load refuses; delete it"
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'unreadable'}"[:200]


def remove(directory: Path) -> None:
    for name in (LATEST, PREVIOUS):
        (Path(directory) / name).unlink(missing_ok=True)
