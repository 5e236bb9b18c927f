"""Run identity and run files: the variant name, the run directory, the lock, provenance (commit, clean tree)."""

import contextlib
import hashlib
import json
import os
import platform
import shlex
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from mbexp.config import Config
from mbexp.io import file_lock
from mbexp.names import AXES
from mbexp.run.migrate import flat, hashed_identity, pop_key, recorded_identity, row_tags

# keys that change where or how a run is logged, not what it computes
NOT_IDENTITY = ("seed", "name", "force", "results_dir", "device", "logger", "slurm", "data.cache_dir",
                "train.log_every", "train.checkpoint_every", "train.progress", "train.budgets")


def identity(cfg: Config, *, without: tuple[str, ...] = ()) -> dict:
    """The config values that decide a run's numbers, as a nested dict; precision must be resolved first."""
    d = asdict(cfg)
    for key in NOT_IDENTITY:
        pop_key(d, key)
    return recorded_identity(d, without=without)


def identity_flat(cfg: Config) -> dict:
    """identity(cfg) as dotted keys, for the summary: the table groups runs by these values."""
    return flat(identity(cfg))


def config_hash(cfg: Config, *, without: tuple[str, ...] = ()) -> str:
    """A short stable hash of identity(cfg): different configs, different hashes."""
    blob = json.dumps(hashed_identity(identity(cfg, without=without), without=without), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def row_name(cfg: Config) -> str:
    """The readable table row: the four block axes, then each later model option that is not at its legacy
    value (e.g. rms-pre-swiglu-matched-kv2-qkhead; sinusoidal positions as -sinusoidal), then a model preset
    other than the default tiny (-ladder96)."""
    return "-".join([*(getattr(cfg, axis).name for axis in AXES), *row_tags(flat(asdict(cfg)))])


def variant_name(cfg: Config) -> str:
    """Readable and unique: the axes, the warm-up, and a hash of everything else that counts."""
    return f"{row_name(cfg)}-wu{cfg.optim.warmup_steps}-{config_hash(cfg)}"


def experiment_dir(results_dir, name: str) -> Path:
    """Where an experiment's runs live: <results_dir>/runs/<name>/<variant>/seed=<seed>/."""
    return Path(results_dir, "runs", name)


def experiments_in(results_dir) -> list[str]:
    """The experiments under <results_dir>/runs: one folder each (a link to a folder too)."""
    runs = experiment_dir(results_dir, "")
    return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def summaries_of(results_dir, name: str) -> list[Path]:
    """The summary.json of every run of experiment `name`, sorted; linked experiment and variant folders are
    followed, as mbexp.train writes through them."""
    return sorted(experiment_dir(results_dir, name).glob("*/seed=*/summary.json"))


def linked_outside(results_dir, names) -> list[tuple[Path, Path]]:
    """(link, where it leads) for each experiment or variant folder of experiments `names` that is a link out of
    results_dir: its runs are read, but they live elsewhere."""
    inside = Path(results_dir).resolve()
    found = []
    for name in names:
        folder = experiment_dir(results_dir, name)
        if folder.is_symlink():
            links = [folder]
        else:
            links = [p for p in sorted(folder.iterdir()) if p.is_symlink()] if folder.is_dir() else []
        found += [(link, link.resolve()) for link in links if not link.resolve().is_relative_to(inside)]
    return found


def run_dir(cfg: Config) -> Path:
    return experiment_dir(cfg.results_dir, cfg.name) / variant_name(cfg) / f"seed={cfg.seed}"


class RunBusy(RuntimeError):
    """Another process holds this run's lock."""


class RunLock:
    """An exclusive, non-blocking lock on a run directory; the OS drops it if the process dies."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / ".lock"
        self.held = contextlib.ExitStack()

    def __enter__(self):
        try:
            self.held.enter_context(file_lock(self.path, wait=False, note=f"{platform.node()} {os.getpid()}\n"))
        except BlockingIOError:
            raise RunBusy(f"{self.path.parent} is being trained by another process") from None
        return self

    def __exit__(self, *exc):
        return self.held.__exit__(*exc)


def job_command() -> str | None:
    """The command that runs this job alone (its overrides, a sweep's values resolved), or None outside Hydra:
    `make table` shows it for a run left unfinished."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return shlex.join(["python", "-m", "mbexp.train", *HydraConfig.get().overrides.task])


PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _git(*args: str, where: Path = PACKAGE_DIR) -> str | None:
    """A git command's output in the checkout `where` (the package's), or None outside one (an installed copy,
    no git)."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=where)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_commit(where: Path = PACKAGE_DIR) -> str:
    return (_git("rev-parse", "HEAD", where=where) or "unknown").strip() or "unknown"


def git_clean(where: Path = PACKAGE_DIR) -> bool | None:
    """Whether the checkout the code runs from has no change outside results/, untracked files included (None:
    not a git checkout), so that the recorded commit is the code that ran."""
    status = _git("status", "--porcelain", "--", ":(top)", ":(top,exclude)results", where=where)
    return None if status is None else status.strip() == ""


def launch_provenance() -> dict:
    """What a run records when it starts: the code commit and whether the tree was clean (docs/runs.md)."""
    return {"git_commit": git_commit(), "git_clean": git_clean()}


def resumed_provenance(launch: dict | None, now: dict) -> dict:
    """A resumed run's provenance: its launch's commit, every later commit it ran on, clean only if every start
    was (an older checkpoint without a record: unknown, so never clean)."""
    launch = launch or {"git_commit": now["git_commit"], "git_clean": None}
    later = list(launch.get("git_resumed", []))
    if now["git_commit"] not in (launch["git_commit"], *later):
        later.append(now["git_commit"])
    clean = launch["git_clean"] and now["git_clean"]
    return {"git_commit": launch["git_commit"], "git_clean": clean, "git_resumed": later}


def versions() -> dict[str, str]:
    names = ("mbexp", "torch", "hydra-core", "omegaconf", "tokenizers", "datasets", "wandb", "numpy")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["python"] = platform.python_version()
    return found
