"""Every budget of train.budgets from one wsd run (docs/usage.md): the trunk trains the largest budget and, at each
smaller budget's cool-down start, saves that budget's checkpoint into its own run directory as a standalone run of
that budget would have saved it there; each smaller budget then resumes from it and runs only its cool-down."""

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mbexp.config import Config
from mbexp.io import SUMMARY
from mbexp.run import checkpoint
from mbexp.run.state import (
    RunState,
    early_record,
    early_step,
    evaluates_at,
    finished_summary,
    logs_at,
    tokens_per_step,
    wandb_run_id,
)
from mbexp.schedule import cooldown_start


def budget_configs(cfg: Config) -> list[Config]:
    """One config per budget, the largest first, each that of a standalone run (train.steps=budget); [cfg] when
    the run has no train.budgets."""
    if not cfg.train.budgets:
        return [cfg]
    configs = []
    for budget in sorted(cfg.train.budgets, reverse=True):
        c = copy.deepcopy(cfg)
        c.train.steps, c.train.budgets = budget, None
        configs.append(c)
    return configs


@dataclass
class Branch:
    """A smaller budget, as the trunk sees it: where its checkpoint goes and when."""

    cfg: Config
    directory: Path
    chash: str

    @property
    def start(self) -> int:  # its cool-down start: the step of the checkpoint the trunk saves for it
        return cooldown_start(self.cfg.train.steps, self.cfg.optim.cooldown_fraction)

    @property
    def early(self) -> int:
        return early_step(self.cfg.train.steps)

    @property
    def key(self) -> str:
        return str(self.cfg.train.steps)

    def restart(self) -> None:
        """Forget this budget's run (force): the trunk saves its checkpoint anew."""
        checkpoint.remove(self.directory)
        (self.directory / SUMMARY).unlink(missing_ok=True)

    def pending(self) -> bool:
        """Unfinished, and without a checkpoint at or past its cool-down start."""
        if finished_summary(self.directory, self.chash):
            return False
        state = checkpoint.load(self.directory, config_hash=self.chash)
        return state is None or state["step"] < self.start

    def logs(self, record: dict) -> bool:
        """Whether a standalone run of this budget logs `record` (a trunk record before its cool-down)."""
        t = self.cfg.train
        return (evaluates_at if "val_loss" in record else logs_at)(record["step"], t, t.steps)


class Trunk:
    """What the trunk does for its branches after each step: evaluate at a branch's early step where the trunk
    itself does not, and save a branch's checkpoint at its cool-down start."""

    def __init__(self, branches: list[Branch], evaluate: Callable[[], dict]):
        self.branches, self.evaluate = branches, evaluate

    def after_step(self, run: RunState, learner) -> None:
        for b in self.branches:
            if run.step == b.early <= b.start and not any(r["step"] == b.early and "val_loss" in r
                                                           for r in run.records):
                tokens = run.step * tokens_per_step(b.cfg)
                run.branch_evals[b.key] = [{"step": run.step, **self.evaluate(), "tokens": tokens}]
            if run.step == b.start and run.ddp.is_main and b.pending() and (state := self.state(b, run, learner)):
                checkpoint.save(b.directory, state)

    def state(self, b: Branch, run: RunState, learner) -> dict | None:
        """The checkpoint a standalone run of b's budget saves at b.start: the trunk's, with b's records."""
        records = [r for r in run.records if b.logs(r)] + run.branch_evals.get(b.key, [])
        records.sort(key=lambda r: (r["step"], "val_loss" in r))  # a step's train record, then its evaluation
        early = next((early_record(r) for r in records if r["step"] == b.early and "val_loss" in r), {})
        # without its early evaluation (a trunk resumed from a run that did not make it), or with a diverged one,
        # the budget trains alone, as a standalone run
        if b.early <= b.start and not (early and math.isfinite(early["early_val_loss"])):
            return None
        return run.state(learner.model, learner.optimizer, learner.batches) | {
            "config_hash": b.chash, "metrics": records, "early": early, "wandb_id": wandb_run_id(b.chash, b.cfg.seed),
            "branch_evals": {},
            "branched": {"step": run.step, "wall_time_s": round(run.wall_time(), 3)}}
