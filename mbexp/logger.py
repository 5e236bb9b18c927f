"""Experiment logging behind a small interface: W&B, or nothing."""

import os
from pathlib import Path
from typing import Protocol


class Logger(Protocol):
    def log(self, record: dict, step: int) -> None: ...

    def finish(self, exit_code: int = 0) -> None: ...


class NullLogger:
    def log(self, record: dict, step: int) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


class WandbLogger:
    """One W&B run per mbexp run: offline unless asked; a resumed run reuses its id."""

    def __init__(self, logger_cfg, *, run_id: str, name: str, group: str, job_type: str, tags: list[str],
                 config: dict):
        import wandb

        Path(logger_cfg.dir, "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=logger_cfg.project,
            entity=logger_cfg.entity,
            mode=os.environ.get("WANDB_MODE", logger_cfg.mode),
            dir=logger_cfg.dir,
            id=run_id,
            resume="allow",
            name=name,
            group=group,
            job_type=job_type,
            tags=tags,
            config=config,
            settings=wandb_settings(),
            reinit="finish_previous",
        )

    def log(self, record: dict, step: int) -> None:
        self.run.log(record, step=step)

    def finish(self, exit_code: int = 0) -> None:
        """Close the run (once; later calls do nothing)."""
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None


def wandb_settings():
    """The settings of every mbexp W&B run: quiet, no console capture, no system metrics."""
    import wandb

    return wandb.Settings(quiet=True, console="off", x_disable_stats=True)


def make_logger(logger_cfg, **run_info) -> Logger:
    return WandbLogger(logger_cfg, **run_info) if logger_cfg.name == "wandb" else NullLogger()
