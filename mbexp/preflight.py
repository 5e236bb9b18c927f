"""The checks `python -m mbexp.train` makes before Hydra starts any job: every override, every combination of the
sweep Hydra will run (the experiment file's `hydra.sweeper.params` included), the environment and the launcher.
Over 300 lines: every check shares one reading of the command line (its sweeps, as Hydra's parser expands them)."""

import difflib
import itertools
import os
import shlex
import shutil
from pathlib import Path

from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mbexp.config import BOOL_KEYS, CONF_DIR, GROUPS, Config, ConfigError, compose_config, parsed, to_object
from mbexp.corpus_check import corpus_problem
from mbexp.logger import wandb_dir, wandb_mode_problem

SKIP_FLAG = "--skip-impossible"  # run a sweep's possible combinations, skipping (and recording) the others
SKIP_ENV = "MBEXP_SKIP_IMPOSSIBLE"  # set for the jobs of such a sweep
HYDRA_GROUPS = ("hydra/launcher", "hydra/sweeper")  # Hydra's groups a command may choose
# the most combinations of a sweep checked one by one before any job; past it, each value is checked beside the
# other lists' first values, and a value bad only beside another list's value is left to its job
MAX_COMBINATIONS = 512


def hydra_flags(args: list[str]) -> bool:
    """Whether the command carries one of Hydra's own flags (--cfg, --info, ...): it prints, and launches nothing."""
    return any(a.startswith("-") and a != "--multirun" for a in args)


def check_flags(args: list[str]) -> None:
    """A flag that is neither mbexp's nor Hydra's (argparse would print Hydra's usage, naming train.py)."""
    parser = get_args_parser()
    options = sorted(parser._option_string_actions)
    long = [o for o in options if o.startswith("--")]
    for arg in args:
        if arg == "--":
            return  # argparse reads every argument after it as an override
        flag = arg.partition("=")[0]
        if not arg.startswith("-") or flag in options or flag[:2] in options and not flag.startswith("--") or \
                flag.startswith("--") and sum(o.startswith(flag) for o in long) == 1:
            continue  # argparse takes a long flag's unambiguous prefix, and a short one's value attached (-cjob)
        close = difflib.get_close_matches(flag, [SKIP_FLAG, *options], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"unknown flag {flag}{hint}; python -m mbexp.train takes -m/--multirun, {SKIP_FLAG} and "
                          f"Hydra's flags: {', '.join(long)}")
    if not {"-h", "--help", "--hydra-help", "--version"} & set(args):  # those print and exit in Hydra's argparse
        def refuse(message: str):  # a flag's value (--cfg without one, --multirun=true): argparse's usage block
            raise ConfigError(f"{message}; see python -m mbexp.train --help")

        parser.error = refuse
        parser.parse_args(args)


def check_group_choices(args: list[str]) -> None:
    """Fail fast on an unknown option of a config group (also inside a sweep) and on device=cuda without CUDA."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        values = sweep_values(arg) or [value]
        if key == "device" and "cuda" in values:
            from mbexp.trainer import resolve_device

            resolve_device("cuda")
        if not sep or key not in (*GROUPS, *HYDRA_GROUPS):
            continue
        valid = hydra_options(key) if key in HYDRA_GROUPS else sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        for choice in values:
            if choice and choice not in valid:
                raise ConfigError(f"{key}={choice!r} is not valid; choose one of: {', '.join(valid)}")


def hydra_options(group: str) -> list[str]:
    """The options of one of Hydra's own config groups (its launchers, its sweepers), as installed."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


def check_overrides(args: list[str]) -> None:
    """An override without a value, and a key given twice (Hydra would keep the last one silently)."""
    if hydra_flags(args):
        return
    seen: dict[str, str] = {}
    for arg in (a for a in args if a != "--multirun"):
        key, sep, value = arg.partition("=")
        if not sep and not key.startswith("~"):
            raise ConfigError(f"the override {arg!r} has no value: write {key}=VALUE")
        if (sweep := parsed(arg)) is not None and sweep.is_sweep_override() and not sweep.is_discrete_sweep():
            raise ConfigError(f"{arg} samples a range, which Hydra's basic sweeper cannot run; list the values "
                              f"({key}=a,b,c), or use range() or choice()")
        values = [v.strip("'\"") for v in sweep_values(arg) or [value]]  # quoted 'true' reads as true
        if sep and key.lstrip("+") in BOOL_KEYS and (bad := [v for v in values if "${" not in v and v.lower() not in
                                                          ("true", "false")]):
            raise ConfigError(f"{key.lstrip('+')}={bad[0]} is not valid; choose one of: true, false")  # not yes, 2
        if sep and key.lstrip("+~") in seen:
            first = seen[key.lstrip("+~")]
            raise ConfigError(f"{key.lstrip('+~')} is given twice ({first} and {arg}): give each key once; a sweep "
                              f"lists its values in one override ({key}=a,b,c)")
        seen[key.lstrip("+~")] = arg


def check_multirun(args: list[str]) -> str | None:
    """A sweep without -m (Hydra's own error, "Ambiguous value", does not say how to run it), and a sweep of
    experiment files that sweep themselves (Hydra would drop their sweeps). Returns a warning line for an
    experiment file's sweep run without -m: one job, each swept key at its default."""
    # with --multirun, or one of Hydra's own flags (--cfg, --info), Hydra reads the command
    sweeps = [] if any(a.startswith("-") for a in args) else [a for a in args if _is_sweep(a)]
    if sweeps:
        raise ConfigError(f"{sweeps[0]} is a sweep (one job per value): add -m to run it, or give "
                          f"{sweeps[0].partition('=')[0].lstrip('+~')} one value")
    experiments = [a for a in args if a.lstrip("+").startswith("experiment=")]
    if "--multirun" in args and experiments and (values := sweep_values(experiments[0])):
        if swept := [v for v in values if _file_params([f"+experiment={v}"])]:
            raise ConfigError(f"{experiments[0]} sweeps experiments that sweep themselves ({', '.join(swept)}: "
                              "hydra.sweeper.params), which a sweep over experiments drops; run each as its own -m")
    elif "--multirun" not in args and experiments and not hydra_flags(args):
        given = {a.partition("=")[0].lstrip("+~") for a in args}
        if unset := [p.partition("=")[0] for p in _file_params(experiments) if p.partition("=")[0] not in given]:
            return (f"warning: {experiments[0]} sweeps {', '.join(unset)} (hydra.sweeper.params); without -m this "
                    "runs one job, each of them at its default: add -m to run the sweep")
    return None


def _is_sweep(override: str) -> bool:
    """Whether Hydra reads `override` as a sweep (a,b / range() / choice() / glob() / interval())."""
    return parsed(override) is not None and parsed(override).is_sweep_override()


def sweep_values(override: str) -> list[str] | None:
    """The values Hydra's basic sweeper runs for `override` (a,b / choice() / range() / a config group's glob()),
    each written as it goes after `key=`; None for a single value."""
    sweep = parsed(override)
    if sweep is None or not sweep.is_discrete_sweep():
        return None
    if isinstance(sweep.value(), Glob):
        group = CONF_DIR / sweep.key_or_group
        return sweep.value().filter(sorted(p.stem for p in group.glob("*.yaml"))) if group.is_dir() else None
    return list(sweep.sweep_string_iterator())


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
    """(the overrides holding one value, {key: values} of the sweeps), as Hydra's basic sweeper will run them:
    the experiment file's sweep first, a command-line key replacing the file's."""
    mine = [a for a in args if a != "--multirun" and not a.lstrip("+~").startswith("hydra")]
    if "--multirun" in args:
        given = {a.partition("=")[0] for a in mine}
        file = _file_params([a for a in mine if not _is_sweep(a)])  # its group sweeps would not compose as one
        mine = [p for p in file if p.partition("=")[0] not in given] + mine
    single = [a for a in mine if not _is_sweep(a)]
    lists = {a.partition("=")[0]: values for a in mine if (values := sweep_values(a)) is not None}
    return single, lists


def check_config(args: list[str]) -> tuple[list[Config], list[tuple[list[str], str]], int]:
    """Compose and validate the config with the overrides that hold a single value, then every combination of
    the sweeps (a,b / choice() / range() / glob()) as the sweep will run it. Returns (the configs checked, the
    impossible combinations with why, the number of combinations)."""
    if hydra_flags(args):
        return [], [], 0
    single, lists = sweep_of(args)
    for key, values in lists.items():  # Hydra would launch no job, or one job twice (racing itself for its run)
        if not values:
            raise ConfigError(f"the sweep of {key} holds no values (an empty range(), a glob() matching no option); "
                              "give it at least one")
        if twice := next((v for v in values if values.count(v) > 1), None):
            raise ConfigError(f"the sweep of {key} lists {twice} twice ({key}={','.join(values)}): each value would "
                              "run twice; list each value once")
    given = {a.partition("=")[0].lstrip("+~") for a in [*single, *lists]}
    try:
        base = _possible(to_object(compose_config(single)), given)
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
            configs.append(_possible(to_object(_compose(single, combination, composed)), given))
        except ConfigError as exc:
            failures.append((combination, str(exc)))
    reasons = {why for _, why in failures}
    if len(reasons) == 1 and len(failures) == len(combinations):
        raise ConfigError(reasons.pop())  # not the sweep's doing: its message names the value
    return configs, failures, len(combinations)


def _possible(cfg: Config, given: set[str]) -> Config:
    """The rules beyond the config's own: a train.steps the command gives beside train.budgets, and a corpus
    too small for the run."""
    budgets = cfg.train.budgets
    if "train.steps" in given and budgets and cfg.train.steps != max(budgets):
        raise ConfigError(f"train.steps={cfg.train.steps} is not used with train.budgets={list(budgets)}: each budget "
                          f"is the train.steps of its own run; leave train.steps out, or give the largest budget "
                          f"({max(budgets)})")
    if problem := corpus_problem(cfg.data, cfg.model.seq_len):
        raise ConfigError(problem)
    return cfg


def impossible_line(failures: list[tuple[list[str], str]], total: int, n_lists: int, product: int = 0) -> str:
    """One line for the impossible combinations of a sweep: one list's bad value in its own words, else each
    combination with why; a sweep of `product` > `total` combinations had each value checked on its own."""
    reasons = {why for _, why in failures}
    if len(reasons) == 1 and n_lists == 1:
        return reasons.pop()
    if product > total:
        return (f"{len(failures)} of the {total} settings checked (each value beside the other sweeps' first values; "
                f"the sweep has {product:,} combinations) cannot run: {listed(failures)}; leave them out")
    return f"{len(failures)} of {total} combinations of this sweep cannot run: {listed(failures)}; leave them out"


def listed(failures: list[tuple[list[str], str]], shown: int = 6) -> str:
    """The first `shown` impossible combinations, each with why, and how many more."""
    more = f"; and {len(failures) - shown} more" if len(failures) > shown else ""
    return "; ".join(f"{' '.join(c)} ({why})" for c, why in failures[:shown]) + more


def split_commands(args: list[str], failures: list[tuple[list[str], str]]) -> list[str]:
    """Commands that run every possible combination of the sweep and none of the impossible ones."""
    _, lists = sweep_of(args)
    bad = {tuple(c) for c, _ in failures}
    keep = [a for a in args if a != "--multirun" and sweep_values(a) is None]
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
    if hydra_flags(args):
        return
    if (problem := wandb_mode_problem()) and any(c.logger.name == "wandb" for c in configs):
        raise ConfigError(problem)
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) > 1 and not os.environ.get("RANK", "").isdigit():
        raise ConfigError(f"WORLD_SIZE={world!r} (environment) needs a whole number of ranks, and beside it each "
                          "rank's RANK: launch with torchrun, or unset WORLD_SIZE")
    for c in configs:
        if world.isdigit() and int(world) > 1 and c.train.batch_size % int(world):
            raise ConfigError(f"train.batch_size={c.train.batch_size} does not divide among WORLD_SIZE={world} "
                              f"ranks (torchrun); choose a multiple of {world}")
        _check_folder("results_dir", c.results_dir)
        _check_folder("data.cache_dir", c.data.cache_dir)
        if c.logger.name == "wandb":  # W&B makes <logger.dir>/wandb, or <$WANDB_DIR>/wandb while logger.dir is "."
            env = c.logger.dir == "." and "WANDB_DIR" in os.environ
            _check_folder("WANDB_DIR" if env else "logger.dir", wandb_dir(c.logger), "wandb",
                          "point WANDB_DIR (environment) at a folder, or unset it" if env else "")
    launchers = [a.partition("=")[2] for a in args if a.lstrip("+").startswith("hydra/launcher=")]
    for arg in args:
        key, _, value = arg.partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir"):
            _check_folder(key, value)
        if key == "hydra.job.chdir" and value.lower() == "true":  # results_dir would resolve in Hydra's folder
            raise ConfigError("hydra.job.chdir=true runs each job in Hydra's dated folder, where a relative "
                              "results_dir or data.cache_dir would put its run out of reach of a rerun; leave it out")
        if key.startswith("hydra.launcher.") and not launchers:  # Hydra: "Could not override", nothing more
            raise ConfigError(f"{arg} sets an option of a launcher the command does not choose; add "
                              "hydra/launcher=joblib (n_jobs: runs side by side) or hydra/launcher=slurm")
        if key.startswith("hydra.launcher.") and key.removeprefix("hydra.launcher.") not in (
                options := _launcher_options(launchers[0])):
            raise ConfigError(f"{key} is not an option of hydra/launcher={launchers[0]}; its options: "
                              f"{', '.join(options)}")
        if key == "hydra.launcher.n_jobs" and not (value.isdigit() and int(value) > 0 or value == "-1"):
            raise ConfigError(f"hydra.launcher.n_jobs={value} is not valid; give a positive number of jobs "
                              "(or -1: one per CPU)")
        if key.lstrip("+") == "hydra/launcher" and value == "slurm" and shutil.which("sbatch") is None:
            raise ConfigError("hydra/launcher=slurm needs SLURM (no sbatch on PATH); on this machine use "
                              "hydra/launcher=joblib, or submit from a SLURM login node")


def _launcher_options(launcher: str) -> list[str]:
    hydra_cfg = compose_config([f"hydra/launcher={launcher}"], return_hydra_config=True).hydra
    return [k for k in hydra_cfg.launcher if not k.startswith("_")]


def _check_folder(key: str, path: str, inside: str = "", fix: str = "") -> None:
    """A folder to be created (with `inside` in it): no part of it may be an existing file."""
    for part in [Path(path, inside), *Path(path, inside).parents]:
        if part.exists() and not part.is_dir():
            what = f"cannot hold the folder {inside}/" if inside else "cannot be a folder"
            raise ConfigError(f"{key}={path} {what}: {part} is a file, not a folder (ENOTDIR); "
                              f"{fix or f'choose another {key}'}")


def _compose(single: list[str], combination: list[str], composed: dict) -> DictConfig:
    """The config of one sweep combination: the config groups it picks composed once (cached in `composed`),
    its plain values set on a copy, as Hydra sets command-line values after every default. A value that does
    not set cleanly is composed the slow way, for Hydra's own message."""
    groups = tuple(o for o in combination if _is_group(o))
    if groups not in composed:
        composed[groups] = compose_config([*single, *groups])
    cfg = composed[groups].copy()
    try:
        for override in map(parsed, (o for o in combination if not _is_group(o))):
            if override is None or override.is_add():
                raise ValueError("unparsable, or a new key")
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
    except (ValueError, HydraException, OmegaConfBaseException):
        return compose_config([*single, *combination])
    return cfg


def _is_group(override: str) -> bool:
    key = override.partition("=")[0].lstrip("+~")
    return key in GROUPS or "/" in key or "@" in key
