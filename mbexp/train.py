"""`python -m mbexp.train [overrides] [-m]`: compose the config with Hydra and train.

Stock Hydra stops reading overrides at `-m`; here `-m`/`--multirun` may stand anywhere.
"""

import itertools
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import CompactHydraException, HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mbexp import distributed
from mbexp.config import CONF_DIR, Config, ConfigError, compose_config, register, to_object
from mbexp.corpus import CorpusError, fingerprint
from mbexp.declarations import ClaimsError
from mbexp.declarations import check as check_claims
from mbexp.io import disk_full, read_summary, write_error
from mbexp.run_state import failure_text
from mbexp.runs import run_dir
from mbexp.speed import resolve_precision
from mbexp.trainer import resolve_device, train

log = logging.getLogger("mbexp")
MULTIRUN_FLAGS = ("-m", "--multirun")
GROUPS = ("norm", "placement", "ffn", "hidden", "model", "data", "optim", "logger", "experiment", "arch")


def normalize_argv(argv: list[str]) -> list[str]:
    """Move a -m/--multirun found anywhere to the front, where Hydra's argparse expects it."""
    rest = [a for a in argv[1:] if a not in MULTIRUN_FLAGS]
    return argv[:1] + (["--multirun"] if len(rest) < len(argv) - 1 else []) + rest


def check_group_choices(args: list[str]) -> None:
    """Fail fast, before any job runs, on an unknown option of a config group (also inside a sweep list)
    and on device=cuda without CUDA."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if key == "device" and "cuda" in value.split(","):
            resolve_device("cuda")
        if not sep or key not in GROUPS or value.startswith(("choice(", "range(", "glob(")):
            continue
        valid = sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice and choice not in valid:
                raise ConfigError(f"{key}={choice!r} is not valid; choose one of: {', '.join(valid)}")


class JobFailed(CompactHydraException):
    """A failed run. Hydra hands it back to the launching process under every launcher (pickled from
    joblib's and submitit's workers), after the sweep's other runs; `code` becomes the exit code."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message, code)
        self.code = code

    def __str__(self) -> str:
        return self.args[0]


BUSY = 3  # the exit code of a command that left some run to another process (docs/troubleshooting.md)


def _failure(cfg: DictConfig, exc: Exception) -> str:
    """What failed, and where to look: the run's summary.json only if this failure was written there."""
    directory, error = getattr(exc, "run_dir", None) or _planned_dir(cfg), failure_text(exc)
    # a disk that takes no writes may hold no log either; a rerun resumes from the last checkpoint
    then = "; rerun the same command to resume once the disk takes writes" if write_error(exc) else "; see the log"
    summary = read_summary(directory) or {}
    if summary.get("status") == "failed" and summary.get("error") == error:
        return f"run {directory} failed ({error}); see its summary.json{then.replace('; see', ' and')}"
    if summary:
        return f"run {directory} failed ({error}); its summary.json could not say so{then}"
    if directory.exists():
        return f"run {directory} failed before it wrote its summary.json ({error}){then}"
    return f"run {directory} failed before it wrote any run file ({error}){then}"


def _planned_dir(cfg: DictConfig) -> Path:
    """The run directory of a run that failed before train() knew it: precision=auto as the hardware decides."""
    c = to_object(cfg)
    try:
        c.data.fingerprint = fingerprint(c.data.name, path=c.data.path, max_docs=c.data.max_docs)
        c.precision = resolve_precision(c.precision, resolve_device(c.device))
    except Exception:  # noqa: BLE001 - the corpus failed too: name the directory without its fingerprint
        c.precision = "fp32" if c.precision == "auto" else c.precision
    return run_dir(c)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> float | None:
    try:
        summary = train(cfg)
    except (ConfigError, CorpusError) as exc:  # the user's input: one clear line, no traceback
        raise JobFailed(str(exc), code=2) from None
    except Exception as exc:
        if not write_error(exc):  # a full or read-only disk: the line says all, and the log may not take it
            log.exception("run failed")
        raise JobFailed(_failure(cfg, exc)) from None
    if summary["status"] == "busy":
        raise JobFailed(f"run {summary['run_dir']} is being trained by another process: left to it; rerun the "
                        "same command once that process ends (finished runs are skipped)", code=BUSY)
    return summary.get("final_val_loss")


def hydra_dirs(cfg: Config | None, args: list[str]) -> list[str]:
    """Overrides that move Hydra's own files (its log, .hydra/) to a temporary folder when results_dir takes no
    writes (read-only, full), so that a finished run is still skipped and a run fails with one line naming its
    own path; [] otherwise, or when the command sets Hydra's folders itself."""
    if cfg is None or any(a.startswith(("hydra.run.dir", "hydra.sweep.dir")) for a in args):
        return []
    folder = Path(cfg.results_dir).resolve()
    while not folder.exists():
        folder = folder.parent
    if os.access(folder, os.W_OK) and not disk_full(folder):
        return []
    tmp = tempfile.mkdtemp(prefix="mbexp-hydra-")
    return [f"hydra.run.dir={tmp}", f"hydra.sweep.dir={tmp}"]


def _terminated(signum, frame):
    """SIGTERM outside a training loop (building the token cache) stops like Ctrl-C, through Python, so that
    temporary files are removed (io.atomic_write); the loop installs its own handler, which checkpoints first."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


# the most combinations of a sweep's plain lists checked one by one before any job (each takes a few ms, a new
# combination of config groups ~50 ms of composing); a larger product checks each value beside the other
# lists' first values instead, and leaves a value that is bad only beside another list's value to its job
MAX_COMBINATIONS = 512


def check_config(args: list[str]) -> list[Config]:
    """Compose and validate the config with the overrides that hold a single value, then every combination of
    the plain sweep lists (`key=a,b,c`) as the sweep will run it, so that a bad value or an impossible
    combination stops here with one line before Hydra starts any job. Sweep functions (range(), choice(),
    glob()), other brackets and quoted values are left to the jobs. Returns the configs checked."""
    if any(a.startswith("-") and a != "--multirun" for a in args):
        return []  # Hydra's own flags (--cfg, --info, ...): leave the command to Hydra
    mine = [a for a in args if a != "--multirun" and not a.lstrip("+~").startswith("hydra")]
    # one value: no comma, or one list in brackets (train.budgets=[400,800] is a list, not a sweep)
    single = [a for a in mine if "," not in (v := a.partition("=")[2]) or (v[:1], v[-1:]) == ("[", "]")]
    lists = {}
    for arg in mine:
        key, _, value = arg.partition("=")
        if "," in value and not any(c in value for c in "()[]{}'\""):
            lists[key] = list(dict.fromkeys(value.split(",")))
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
    if len(reasons) == 1 and (len(failures) == len(combinations) or len(lists) == 1):
        raise ConfigError(reasons.pop())  # not the sweep's doing, or one list's bad value: its message names it
    if failures:
        shown = "; ".join(f"{' '.join(c)} ({why})" for c, why in failures[:6])
        more = f"; and {len(failures) - 6} more" if len(failures) > 6 else ""
        raise ConfigError(f"{len(failures)} of {len(combinations)} combinations of this sweep cannot run: {shown}"
                          f"{more}; leave them out (split the sweep into commands without them)")
    return configs


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


def main() -> None:
    sys.argv = normalize_argv(sys.argv)
    try:
        check_group_choices(sys.argv[1:])
        configs = check_config(sys.argv[1:])
        for path in dict.fromkeys(c.data.path for c in configs if c.data.name == "text"):
            fingerprint("text", path=path)  # a file that is not text stops before Hydra's folders
        for results_dir in dict.fromkeys(c.results_dir for c in configs):
            check_claims(results_dir)  # a broken claims file stops here: its runs could record no declaration
    except (ConfigError, CorpusError, ClaimsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    register()
    # Hydra then raises a job's exception here instead of printing it and exiting 1 itself, so the
    # exit code can say what failed (2: the input, 1: a run, 3: a run left to another process) whichever
    # launcher ran the job
    os.environ["HYDRA_FULL_ERROR"] = "1"
    logging.raiseExceptions = False  # a log file on a full disk: no "--- Logging error ---" traceback per line
    moved = hydra_dirs(configs[0] if configs else None, sys.argv[1:])
    sys.argv += moved
    signal.signal(signal.SIGTERM, _terminated)
    try:
        _job()
    except JobFailed as exc:
        more = "; the sweep ran its other runs (any other failure is in the log)" if "--multirun" in sys.argv else ""
        print(f"error: {exc}{more}", file=sys.stderr)
        sys.exit(exc.code)
    except (HydraException, OmegaConfBaseException) as exc:  # an override Hydra cannot apply
        print(f"error: {str(exc).strip()}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # Hydra's own files (its log folder) on a disk that takes no writes
        if not write_error(exc):
            raise
        print(f"error: {write_error(exc)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted: the runs' checkpoints are kept; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    finally:
        distributed.shutdown()
        for override in moved[:1]:
            shutil.rmtree(override.partition("=")[2], ignore_errors=True)


if __name__ == "__main__":
    main()
