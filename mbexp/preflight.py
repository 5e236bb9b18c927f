"""The checks `python -m mbexp.train` makes before Hydra starts any job: every override, every combination of the
sweep Hydra will run (the experiment file's `hydra.sweeper.params` included), the environment and the launcher."""

import itertools
import os
import shlex
import shutil
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mbexp.config import CONF_DIR, Config, ConfigError, compose_config, to_object
from mbexp.logger import WANDB_MODES

GROUPS = ("norm", "placement", "ffn", "hidden", "model", "data", "optim", "logger", "experiment", "arch")
SKIP_FLAG = "--skip-impossible"  # run a sweep's possible combinations, skipping (and recording) the others
SKIP_ENV = "MBEXP_SKIP_IMPOSSIBLE"  # set for the jobs of such a sweep
# the most combinations of a sweep's plain lists checked one by one before any job (each takes a few ms, a new
# combination of config groups ~50 ms of composing); a larger product checks each value beside the other
# lists' first values instead, and leaves a value that is bad only beside another list's value to its job
MAX_COMBINATIONS = 512


def check_group_choices(args: list[str]) -> None:
    """Fail fast on an unknown option of a config group (also inside a sweep list) and on device=cuda without CUDA."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if key == "device" and "cuda" in value.split(","):
            from mbexp.trainer import resolve_device

            resolve_device("cuda")
        if not sep or key not in GROUPS or value.startswith(("choice(", "range(", "glob(")):
            continue
        valid = sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice and choice not in valid:
                raise ConfigError(f"{key}={choice!r} is not valid; choose one of: {', '.join(valid)}")


def check_overrides(args: list[str]) -> None:
    """An override without a value, and a key given twice (Hydra would keep the last one silently)."""
    if any(a.startswith("-") and a != "--multirun" for a in args):
        return  # Hydra's own flags (--cfg job, --info, ...): leave the command to Hydra
    seen: dict[str, str] = {}
    for arg in (a for a in args if a != "--multirun"):
        key, sep, value = arg.partition("=")
        if not sep and not key.startswith("~"):
            raise ConfigError(f"the override {arg!r} has no value: write {key}=VALUE")
        if sep and key.lstrip("+~") in seen:
            first = seen[key.lstrip("+~")]
            raise ConfigError(f"{key.lstrip('+~')} is given twice ({first} and {arg}): give each key once; a sweep "
                              f"lists its values in one override ({key}=a,b,c)")
        seen[key.lstrip("+~")] = arg


def _is_list(value: str) -> bool:
    return "," in value and not any(c in value for c in "()[]{}'\"")


def _is_sweep(override: str) -> bool:
    """Whether Hydra reads `override` as a sweep (a,b / range() / choice() / glob()); one it cannot parse is not:
    composing it gives the hint."""
    try:
        return OverridesParser.create().parse_override(override).is_sweep_override()
    except HydraException:
        return False


def _file_params(single: list[str]) -> list[str]:
    """The sweep of the experiment file (its `hydra.sweeper.params`) as overrides, which Hydra puts before the
    command line's."""
    try:
        hydra_cfg = compose_config([a for a in single if _is_group(a)], return_hydra_config=True).hydra
    except ConfigError:
        return []
    params = OmegaConf.select(hydra_cfg, "sweeper.params") or {}
    return [f"{key}={value}" for key, value in params.items()]


def sweep_of(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the overrides holding one value, {key: values} of the plain lists), as Hydra's basic sweeper will run
    them: the experiment file's sweep first, a command-line key replacing the file's."""
    mine = [a for a in args if a != "--multirun" and not a.lstrip("+~").startswith("hydra")]
    if "--multirun" in args:
        given = {a.partition("=")[0] for a in mine}
        mine = [p for p in _file_params(mine) if p.partition("=")[0] not in given] + mine
    single = [a for a in mine if not _is_sweep(a)]
    lists = {}
    for arg in mine:
        key, _, value = arg.partition("=")
        if _is_list(value):
            lists[key] = list(dict.fromkeys(value.split(",")))
    return single, lists


def check_config(args: list[str]) -> tuple[list[Config], list[tuple[list[str], str]], int]:
    """Compose and validate the config with the overrides that hold a single value, then every combination of
    the plain sweep lists as the sweep will run it. Sweep functions (range(), choice(), glob()), brackets and
    quoted values are left to the jobs. Returns (the configs checked, the impossible combinations with why,
    the number of combinations)."""
    if any(a.startswith("-") and a != "--multirun" for a in args):
        return [], [], 0  # Hydra's own flags (--cfg, --info, ...): leave the command to Hydra
    single, lists = sweep_of(args)
    try:
        base = to_object(compose_config(single))
    except ConfigError:
        if not lists:
            raise
        base = None  # it may lack what every combination sets (data=text with data.path=a.txt,b.txt)
    combinations = [[f"{k}={v}" for k, v in zip(lists, values)] for values in itertools.product(*lists.values())]
    if len(combinations) > MAX_COMBINATIONS:
        combinations = [[*(f"{k}={vs[0]}" for k, vs in lists.items() if k != key), f"{key}={v}"]
                        for key, values in lists.items() for v in values]
    composed: dict[tuple, DictConfig] = {}
    failures, configs = [], [] if base is None else [base]
    for combination in combinations if lists else []:
        try:
            configs.append(to_object(_compose(single, combination, composed)))
        except ConfigError as exc:
            failures.append((combination, str(exc)))
    reasons = {why for _, why in failures}
    if len(reasons) == 1 and len(failures) == len(combinations):
        raise ConfigError(reasons.pop())  # not the sweep's doing: its message names the value
    return configs, failures, len(combinations)


def impossible_line(failures: list[tuple[list[str], str]], total: int, n_lists: int) -> str:
    """One line for the impossible combinations of a sweep: one list's bad value in its own words, else each
    combination with why."""
    reasons = {why for _, why in failures}
    if len(reasons) == 1 and n_lists == 1:
        return reasons.pop()
    shown = "; ".join(f"{' '.join(c)} ({why})" for c, why in failures[:6])
    more = f"; and {len(failures) - 6} more" if len(failures) > 6 else ""
    return f"{len(failures)} of {total} combinations of this sweep cannot run: {shown}{more}; leave them out"


def split_commands(args: list[str], failures: list[tuple[list[str], str]]) -> list[str]:
    """Commands that run every possible combination of the sweep and none of the impossible ones."""
    _, lists = sweep_of(args)
    bad = {tuple(c) for c, _ in failures}
    keep = [a for a in args if a != "--multirun" and not _is_list(a.partition("=")[2])]
    return [shlex.join(["python", "-m", "mbexp.train", "-m", *keep, *(f"{k}={','.join(v)}" for k, v in part.items())])
            for part in _split(lists, bad)]


def _split(lists: dict[str, list[str]], bad: set[tuple[str, ...]]) -> list[dict[str, list[str]]]:
    """The fewest sub-grids (found greedily) of `lists` that hold every combination not in `bad`."""
    combos = [tuple(f"{k}={v}" for k, v in zip(lists, values)) for values in itertools.product(*lists.values())]
    good = [c for c in combos if c not in bad]
    if not good:
        return []
    if len(good) == len(combos):
        return [lists]
    best = None
    for key, values in lists.items():
        if len(values) < 2:
            continue
        parts: list[dict[str, list[str]]] = []
        for part in (p for v in values for p in _split({**lists, key: [v]}, bad)):
            same = [q for q in parts if all(q[k] == part[k] for k in lists if k != key)]
            if same:  # the same sub-grid for another value of `key`: one command for both
                same[0][key] = same[0][key] + part[key]
            else:
                parts.append(dict(part))
        best = parts if best is None or len(parts) < len(best) else best
    return best or []


def check_environment(configs: list[Config], args: list[str]) -> None:
    """What the environment, the launcher and the file system must allow for these configs."""
    if any(a.startswith("-") and a != "--multirun" for a in args):
        return  # Hydra's own flags (--cfg job, --info, ...) print and launch nothing
    if (mode := os.environ.get("WANDB_MODE")) is not None and mode not in WANDB_MODES and any(
            c.logger.name == "wandb" for c in configs):
        raise ConfigError(f"WANDB_MODE={mode!r} (environment) is not valid; choose one of: {', '.join(WANDB_MODES)}")
    world = os.environ.get("WORLD_SIZE", "1")
    for c in configs:
        if world.isdigit() and int(world) > 1 and c.train.batch_size % int(world):
            raise ConfigError(f"train.batch_size={c.train.batch_size} does not divide among WORLD_SIZE={world} "
                              f"ranks (torchrun); choose a multiple of {world}")
        _check_folder("results_dir", c.results_dir)
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "hydra.launcher.n_jobs" and not (value.lstrip("-").isdigit() and int(value) != 0):
            raise ConfigError(f"hydra.launcher.n_jobs={value} is not valid; give a positive number of jobs "
                              "(or -1: one per CPU)")
        if key.lstrip("+") == "hydra/launcher" and value == "slurm" and shutil.which("sbatch") is None:
            raise ConfigError("hydra/launcher=slurm needs SLURM (no sbatch on PATH); on this machine use "
                              "hydra/launcher=joblib, or submit from a SLURM login node")


def _check_folder(key: str, path: str) -> None:
    """A folder to be created: no part of it may be an existing file."""
    for part in [Path(path), *Path(path).parents]:
        if part.exists() and not part.is_dir():
            raise ConfigError(f"{key}={path} cannot be a folder: {part} is a file; choose another {key}")


def _compose(single: list[str], combination: list[str], composed: dict) -> DictConfig:
    """The config of one sweep combination: the config groups it picks composed once (cached in `composed`),
    its plain values set on a copy, as Hydra sets command-line values after every default. A value that does
    not set cleanly is composed the slow way, for Hydra's own message."""
    groups = tuple(o for o in combination if _is_group(o))
    if groups not in composed:
        composed[groups] = compose_config([*single, *groups])
    cfg = composed[groups].copy()
    try:
        for override in OverridesParser.create().parse_overrides([o for o in combination if not _is_group(o)]):
            if override.is_add():
                raise ValueError("a new key")
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
    except (ValueError, HydraException, OmegaConfBaseException):
        return compose_config([*single, *combination])
    return cfg


def _is_group(override: str) -> bool:
    key = override.partition("=")[0].lstrip("+~")
    return key in GROUPS or "/" in key or "@" in key
