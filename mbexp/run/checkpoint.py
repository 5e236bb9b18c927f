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


class OtherRun(ValueError):
    """A checkpoint that loads, but of another run's config."""


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
                raise OtherRun("a checkpoint of another config, not this run's")
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
    if "Unsupported global" in text:  # a pickle of classes the safe (weights-only) load refuses
        return "it holds objects a safe (weights-only) load refuses; delete it"
    if isinstance(exc, OtherRun):
        return text
    # any other failure: bytes that are no checkpoint, which torch's safe loader calls a refusal all the same
    first = (text.splitlines() or ["?"])[0]
    detail = "" if "Weights only load failed" in text else f": {type(exc).__name__}: {first}"[:120]
    return f"not a checkpoint (corrupt or another kind of file{detail}); delete it"


def remove(directory: Path) -> None:
    for name in (LATEST, PREVIOUS):
        (Path(directory) / name).unlink(missing_ok=True)
