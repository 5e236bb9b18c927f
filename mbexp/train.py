"""`python -m mbexp.train [overrides] [-m]`: compose the config with Hydra and train.

Stock Hydra stops reading overrides at `-m`; here `-m`/`--multirun` may stand anywhere.
"""

import logging
import sys

import hydra
from omegaconf import DictConfig

from mbexp import distributed
from mbexp.config import CONF_DIR, ConfigError, register
from mbexp.corpus import CorpusError
from mbexp.trainer import train

log = logging.getLogger("mbexp")
MULTIRUN_FLAGS = ("-m", "--multirun")
GROUPS = ("norm", "placement", "ffn", "hidden", "model", "data", "optim", "logger", "experiment")
failures: list[str] = []


def normalize_argv(argv: list[str]) -> list[str]:
    """Move a -m/--multirun found anywhere to the front, where Hydra's argparse expects it."""
    rest = [a for a in argv[1:] if a not in MULTIRUN_FLAGS]
    return argv[:1] + (["--multirun"] if len(rest) < len(argv) - 1 else []) + rest


def check_group_choices(args: list[str]) -> None:
    """Fail fast, before any job runs, on an unknown option of a config group (also inside a sweep list)."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or value.startswith(("choice(", "range(", "glob(")):
            continue
        valid = sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice and choice not in valid:
                raise ConfigError(f"{key}={choice!r} is not valid; choose one of: {', '.join(valid)}")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> float | None:
    try:
        summary = train(cfg)
    except (ConfigError, CorpusError) as exc:  # the user's input: one clear line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception:
        log.exception("run failed (recorded in its summary.json); going on with the sweep")
        failures.append(str(cfg.get("seed")))
        return None
    return summary.get("final_val_loss")


def main() -> None:
    sys.argv = normalize_argv(sys.argv)
    try:
        check_group_choices(sys.argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    register()
    try:
        _job()
    except KeyboardInterrupt:
        print("interrupted: the runs' checkpoints are kept; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    finally:
        distributed.shutdown()
    if failures:
        print(f"error: {len(failures)} run(s) failed; see their summary.json and the log above", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
