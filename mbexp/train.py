"""`python -m mbexp.train [overrides] [-m] [--skip-impossible]`: check the config (mbexp.preflight), compose it
with Hydra and train.

Stock Hydra stops reading overrides at `-m`; here `-m`/`--multirun` may stand anywhere.
"""

import logging
import math
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.errors import CompactHydraException, HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

import mbexp
from mbexp.claims import ClaimsError
from mbexp.claims.parse import check as check_claims
from mbexp.config import CONF_DIR, Config, ConfigError, register, to_object
from mbexp.corpus import CorpusError, fingerprint
from mbexp.io import disk_full, read_summary, write_error, write_text
from mbexp.preflight import (
    SKIP_ENV,
    SKIP_FLAG,
    check_config,
    check_environment,
    check_flags,
    check_group_choices,
    check_multirun,
    check_overrides,
    hydra_flags,
    impossible_line,
    listed,
    split_commands,
    sweep_of,
)
from mbexp.run.identity import experiment_dir, run_dir

log = logging.getLogger("mbexp")


def normalize_argv(argv: list[str]) -> list[str]:
    """Move a -m/--multirun found anywhere to the front, where Hydra's argparse expects it, in its one spelling
    (argparse's prefixes of --multirun and the override hydra.mode=MULTIRUN say the same), unless after `--`."""
    end = argv.index("--") if "--" in argv else len(argv)
    rest = [a for a in argv[1:end] if not _multirun(a)] + argv[end:]
    return argv[:1] + (["--multirun"] if len(rest) < len(argv) - 1 else []) + rest


def _multirun(arg: str) -> bool:
    return arg == "-m" or len(arg) >= 3 and "--multirun".startswith(arg) or arg.lower() == "hydra.mode=multirun"


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
    from mbexp.run.state import failure_text

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
    from mbexp.speed import resolve_precision
    from mbexp.trainer import resolve_device

    c = to_object(cfg)
    try:
        c.data.fingerprint = fingerprint(c.data.name, path=c.data.path, max_docs=c.data.max_docs)
        c.precision = resolve_precision(c.precision, resolve_device(c.device))
    except Exception:  # noqa: BLE001 - the corpus failed too: name the directory without its fingerprint
        c.precision = "fp32" if c.precision == "auto" else c.precision
    return run_dir(c)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _job(cfg: DictConfig) -> float | None:
    from mbexp.trainer import train  # torch loads here: a command the pre-flight stops never waits for it

    if os.environ.get(SKIP_ENV):  # a combination the pre-flight named and recorded as skipped
        try:
            to_object(cfg)
        except ConfigError:
            return None
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


def _interrupted() -> None:
    again = os.environ.get(mbexp.RERUN_ENV) or "the same command"
    print(f"interrupted: the runs' checkpoints are kept; rerun {again} to resume", file=sys.stderr)
    sys.exit(mbexp.INTERRUPTED)


def _terminated(signum, frame):
    """SIGTERM outside a training loop (building the token cache) stops like Ctrl-C, through Python, so that
    temporary files are removed (io.atomic_write); the loop installs its own handler, which checkpoints first."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def preflight(args: list[str], skip: bool) -> list[Config]:
    """Every check that can stop the command before Hydra starts a job; with `skip`, the impossible combinations
    of the sweep are named, counted and recorded instead, and the others run."""
    check_flags(args)
    check_overrides(args)
    check_group_choices(args)
    configs, failures, total = check_config(args)
    if failures:  # each of the sweep's combinations, or each value beside the others' first (over 512)
        _, lists = sweep_of(args)
        product = math.prod(len(values) for values in lists.values())
    if failures and skip and len(failures) == total:
        raise ConfigError(f"{SKIP_FLAG} leaves nothing to run: {impossible_line(failures, total, len(lists), product)}")
    if failures and not skip:
        commands = split_commands(args, failures) if total == product else []
        if commands:  # stdout: the error stays one line on stderr
            print(f"the possible combinations run with these commands (or add {SKIP_FLAG}):\n" + "\n".join(commands))
        raise ConfigError(impossible_line(failures, total, len(lists), product))
    check_environment(configs, args)
    for path in dict.fromkeys(c.data.path for c in configs if c.data.name == "text"):
        fingerprint("text", path=path)  # a file that is not text stops before Hydra's folders
    if failures:
        where = experiment_dir(configs[0].results_dir, configs[0].name) / "skipped.txt"
        lines = [f"{' '.join(c)}  # {why}" for c, why in failures]
        old = where.read_text(encoding="utf-8").splitlines() if where.is_file() else []
        write_text(where, "\n".join(dict.fromkeys(old + lines)) + "\n")
        head = f"skipping {len(failures)} of {total} combinations that cannot run" if product <= total else (
            f"{len(failures)} of the {total} settings checked cannot run (each value beside the other sweeps' first "
            f"values; of the sweep's {product:,} combinations, each one that cannot run is skipped)")
        print(f"warning: {head} (listed in {where}): {listed(failures)}", file=sys.stderr)
        os.environ[SKIP_ENV] = "1"
    return configs


class _QuietHydra:
    """stderr without Hydra's "Error executing job with overrides" line: the error line that follows says more."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if text.startswith("Error executing job with overrides") else self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def main() -> None:
    skip = SKIP_FLAG in sys.argv
    sys.argv = normalize_argv([a for a in sys.argv if a != SKIP_FLAG])
    policy = mbexp.set_entry_defaults(sys.argv[1:])  # before torch loads: nothing above the jobs imports it
    os.environ.pop(SKIP_ENV, None)  # set below for a sweep's jobs only: one inherited would skip bad jobs silently
    try:
        warning = check_multirun(sys.argv[1:])
        configs = preflight(sys.argv[1:], skip)
        for results_dir in dict.fromkeys(c.results_dir for c in configs):
            check_claims(results_dir)  # a broken claims file stops here: its runs could record no declaration
    except (ConfigError, CorpusError, ClaimsError) as exc:  # one line, though Hydra's own message has several
        print("error: " + " ".join(line.strip() for line in str(exc).splitlines() if line.strip()), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # during the checks: nothing has started
        print("interrupted before any job started", file=sys.stderr)
        sys.exit(mbexp.INTERRUPTED)
    except OSError as exc:  # recording the skipped combinations
        print(f"error: {write_error(exc) or exc}", file=sys.stderr)
        sys.exit(1)
    if warning:
        print(warning, file=sys.stderr)
    register()
    # Hydra raises a job's exception here rather than exiting 1 itself: the exit code then says what failed
    # (2: the input, 1: a run, 3: a run left to another process) under any launcher
    os.environ["HYDRA_FULL_ERROR"] = "1"
    logging.raiseExceptions = False  # a log file on a full disk: no "--- Logging error ---" traceback per line
    moved = hydra_dirs(configs[0] if configs else None, sys.argv[1:])
    sys.argv += moved
    signal.signal(signal.SIGTERM, _terminated)
    if os.environ.get("RANK", "0") == "0" and not hydra_flags(sys.argv[1:]):  # once, where runs start
        print(policy, file=sys.stderr)
    sys.stderr = _QuietHydra(sys.stderr)
    try:
        _job()
    except JobFailed as exc:
        more = "; the sweep ran its other runs (any other failure is in the log)" if "--multirun" in sys.argv else ""
        print(f"error: {exc}{more}", file=sys.stderr)
        sys.exit(exc.code)
    except (HydraException, OmegaConfBaseException) as exc:  # an override Hydra cannot apply
        print(f"error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    except ValueError as exc:  # Hydra's modes that exclude each other, as -m with --cfg
        if "can be specified" not in str(exc):
            raise
        print(f"error: {exc} (-m runs a sweep, --cfg prints one job's config: give one)", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # Hydra's own files (its log folder) on a disk that takes no writes
        if not write_error(exc):
            raise
        print(f"error: {write_error(exc)}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        # submitit's jobs may die of the Ctrl-C before the launcher sees it: their missing result is that Ctrl-C
        if type(exc).__name__ != "UncompletedJobError" or "KeyboardInterrupt" not in str(exc):
            raise
        _interrupted()
    except KeyboardInterrupt:
        _interrupted()
    finally:
        distributed = sys.modules.get("mbexp.distributed")  # loaded only by a job: --help or --cfg needs no torch
        if distributed is not None:
            distributed.shutdown()
        for override in moved[:1]:
            shutil.rmtree(override.partition("=")[2], ignore_errors=True)


if __name__ == "__main__":
    main()
