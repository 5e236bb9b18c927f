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
    """The newest readable checkpoint of this config, or None; damaged files are skipped with a warning."""
    damaged = []
    for name in (LATEST, PREVIOUS):
        path = Path(directory) / name
        if not path.exists():
            continue
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("config_hash") != config_hash or "step" not in state:
                raise ValueError("not a checkpoint of this run's config")
            return state
        except Exception as exc:  # a truncated zip, garbage bytes, a foreign file: never fatal
            log.warning("checkpoint %s is unreadable (%s: %s); falling back", path, type(exc).__name__, exc)
            damaged.append(path.name)
    if damaged:
        log.warning("no readable checkpoint in %s (%s damaged): training again from step 0", directory,
                    ", ".join(damaged))
    return None


def remove(directory: Path) -> None:
    for name in (LATEST, PREVIOUS):
        (Path(directory) / name).unlink(missing_ok=True)
