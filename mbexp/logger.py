"""Experiment logging behind a small interface: W&B, or nothing."""

import os
import sys
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from mbexp.net import reachable

WANDB_MODES = ("offline", "online", "disabled")  # logger.mode and $WANDB_MODE
PROBE_TIMEOUT_S = 3.0  # how long an online run waits to learn that W&B's server is unreachable
_offline_reason: dict[str, str | None] = {}  # base URL -> why online failed (None: it worked), once per process
_warned: set[str] = set()  # the base URLs whose fallback this process has reported


class Logger(Protocol):
    def log(self, record: dict, step: int) -> None: ...

    def finish(self, exit_code: int = 0) -> None: ...


class NullLogger:
    def log(self, record: dict, step: int) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


def wandb_mode_problem() -> str | None:
    """The error for a $WANDB_MODE that W&B would refuse only once a run starts; None when unset or valid."""
    mode = os.environ.get("WANDB_MODE")
    if mode is None or mode in WANDB_MODES:
        return None
    return f"WANDB_MODE={mode!r} (environment) is not valid; choose one of: {', '.join(WANDB_MODES)}"


def wandb_mode(logger_cfg) -> str:
    """The W&B mode a run logs in: $WANDB_MODE, else logger.mode."""
    return os.environ.get("WANDB_MODE", logger_cfg.mode)


def wandb_dir(logger_cfg) -> str:
    """Where wandb/ goes: logger.dir, or $WANDB_DIR while logger.dir keeps its default (as `make table` does)."""
    return os.environ.get("WANDB_DIR", logger_cfg.dir) if logger_cfg.dir == "." else logger_cfg.dir


class WandbLogger:
    """One W&B run per mbexp run: offline unless asked; a resumed run reuses its id. Online without a key or
    a reachable server logs offline instead, with one warning (once per process) giving the `wandb sync` command."""

    def __init__(self, logger_cfg, *, run_id: str, name: str, group: str, job_type: str, tags: list[str],
                 config: dict):
        import wandb

        directory = wandb_dir(logger_cfg)
        Path(directory, "wandb").mkdir(parents=True, exist_ok=True)
        mode = wandb_mode(logger_cfg)
        init = dict(project=logger_cfg.project, entity=logger_cfg.entity, dir=directory, id=run_id, resume="allow",
                    name=name, group=group, job_type=job_type, tags=tags, config=config, reinit="finish_previous")
        if mode != "online":
            self.run = wandb.init(mode=mode, settings=wandb_settings(), **init)
            return
        base_url = wandb.setup().settings.base_url  # WANDB_BASE_URL and wandb's settings files applied
        if base_url not in _offline_reason and not reachable(base_url, PROBE_TIMEOUT_S):
            _offline_reason[base_url] = f"{urlparse(base_url).hostname} is unreachable"
        if _offline_reason.get(base_url) is None:
            try:
                settings = wandb_settings(init_timeout=logger_cfg.init_timeout)
                self.run = wandb.init(mode="online", settings=settings, **init)
                _offline_reason[base_url] = None
                return
            except wandb.errors.Error as err:  # no API key (UsageError), no answer in time (CommError)
                _offline_reason[base_url] = str(err).strip().splitlines()[0].rstrip(".")
                wandb.teardown()  # the service still holds the run that never started: its id would be "in use"
        self.run = wandb.init(mode="offline", settings=wandb_settings(silent=True), **init)  # its lines: ours below
        if base_url not in _warned:
            _warned.add(base_url)
            print(f"warning: W&B online is not possible ({_offline_reason[base_url]}): logging offline to "
                  f"{Path(directory, 'wandb')}; upload later with: wandb sync {Path(directory, 'wandb')}/offline-run-*",
                  file=sys.stderr)

    def log(self, record: dict, step: int) -> None:
        self.run.log(record, step=step)

    def finish(self, exit_code: int = 0) -> None:
        """Close the run (once; later calls do nothing)."""
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None


def wandb_settings(**more):
    """The settings of every mbexp W&B run: quiet, no console capture, no system metrics."""
    import wandb

    return wandb.Settings(quiet=True, console="off", x_disable_stats=True, **more)


def make_logger(logger_cfg, **run_info) -> Logger:
    return WandbLogger(logger_cfg, **run_info) if logger_cfg.name == "wandb" else NullLogger()
