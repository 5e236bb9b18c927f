"""`python -m mbexp.train [overrides] [-m]`: compose the config with Hydra and train.

Stock Hydra stops reading overrides at `-m`; here `-m`/`--multirun` may stand anywhere.
"""

import logging
import os
import sys

import hydra
from hydra.errors import CompactHydraException, HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from mbexp import distributed
from mbexp.config import CONF_DIR, ConfigError, compose_config, register, to_object
from mbexp.corpus import CorpusError
from mbexp.io import read_summary
from mbexp.runs import run_dir
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


def _failure(cfg: DictConfig, exc: Exception) -> str:
    """What failed, and where to look: the run's summary.json only if this failure was written there."""
    directory, error = run_dir(to_object(cfg)), f"{type(exc).__name__}: {exc}"
    summary = read_summary(directory) or {}
    if summary.get("status") == "failed" and summary.get("error") == error:
        return f"run {directory} failed ({error}); see its summary.json and the log"
    return f"run {directory} failed before it wrote any run file ({error}); see the log"


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> float | None:
    try:
        summary = train(cfg)
    except (ConfigError, CorpusError) as exc:  # the user's input: one clear line, no traceback
        raise JobFailed(str(exc), code=2) from None
    except Exception as exc:
        log.exception("run failed")
        raise JobFailed(_failure(cfg, exc)) from None
    return summary.get("final_val_loss")


def check_config(args: list[str]) -> None:
    """Compose and validate the config with the overrides that hold a single value, then once per value of
    each plain sweep list (`key=a,b,c`), so that a bad value stops here with one line before Hydra starts any
    job. Sweep functions (range(), choice(), glob()), brackets and quoted values are left to the jobs, and so
    is a value that is bad only beside a value of another list."""
    if any(a.startswith("-") and a != "--multirun" for a in args):
        return  # Hydra's own flags (--cfg, --info, ...): leave the command to Hydra
    mine = [a for a in args if a != "--multirun" and not a.lstrip("+~").startswith("hydra")]
    single = [a for a in mine if "," not in a.partition("=")[2]]
    to_object(compose_config(single))
    for arg in mine:
        key, _, value = arg.partition("=")
        if "," in value and not any(c in value for c in "()[]{}'\""):
            for one in dict.fromkeys(value.split(",")):
                to_object(compose_config([*single, f"{key}={one}"]))


def main() -> None:
    sys.argv = normalize_argv(sys.argv)
    try:
        check_group_choices(sys.argv[1:])
        check_config(sys.argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    register()
    # Hydra then raises a job's exception here instead of printing it and exiting 1 itself, so the
    # exit code can say what failed (2: the input, 1: a run) whichever launcher ran the job
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _job()
    except JobFailed as exc:
        more = "; the sweep ran its other runs (any other failure is in the log)" if "--multirun" in sys.argv else ""
        print(f"error: {exc}{more}", file=sys.stderr)
        sys.exit(exc.code)
    except (HydraException, OmegaConfBaseException) as exc:  # an override Hydra cannot apply
        print(f"error: {str(exc).strip()}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: the runs' checkpoints are kept; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    main()
