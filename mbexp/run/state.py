"""A run's state and files: what outlives a process (step, metrics, timers, ids) and what it writes
(config.yaml, metrics.jsonl, checkpoint, summary.json)."""

import logging
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import OmegaConf

from mbexp import distributed, wait_policy
from mbexp.claims.parse import covering
from mbexp.config import Config
from mbexp.data import Batches, TokenData
from mbexp.io import (
    CONFIG,
    FINISHED,
    METRICS,
    SUMMARY,
    json_line,
    named,
    read_summary,
    write_error,
    write_json,
    write_text,
)
from mbexp.model import DecoderLM, flops_per_token
from mbexp.names import AXES
from mbexp.run import checkpoint
from mbexp.run.identity import (
    config_hash,
    identity_flat,
    job_command,
    launch_provenance,
    resumed_provenance,
    row_name,
    variant_name,
    versions,
)
from mbexp.run.migrate import SCHEMA, upgrade
from mbexp.run.summary import RunSummary

log = logging.getLogger("mbexp")


def early_step(steps: int) -> int:
    """The step of the table's early column (warm-up sensitivity is read there): an eighth of the run."""
    return max(1, steps // 8)


def logs_at(step: int, train, steps: int) -> bool:
    """Whether a run of `steps` steps writes a train record (loss, lr, tokens/s) after `step`."""
    return step % train.log_every == 0 or step == steps


def evaluates_at(step: int, train, steps: int) -> bool:
    """Whether a run of `steps` steps evaluates on validation after `step`: every eval_every, early, and last."""
    return step % train.eval_every == 0 or step in (early_step(steps), steps)


def failure_text(exc: BaseException) -> str:
    """What a failed run's summary and error line say: the path and errno of a disk that takes no more
    writes, else the exception."""
    return write_error(exc) or f"{type(exc).__name__}: {exc}"


def finished_summary(directory: Path, chash: str) -> dict | None:
    """The summary of a finished run of this config in `directory`, or None."""
    summary = read_summary(directory)
    return summary if summary and summary.get("status") in FINISHED and summary.get("config_hash") == chash else None


def tokens_per_step(cfg: Config) -> int:
    """Tokens one optimiser step reads: its batch of seq_len-token windows."""
    return cfg.train.batch_size * cfg.model.seq_len


def wandb_run_id(chash: str, seed: int) -> str:
    """A new W&B run id for a run (a resumed run keeps its own): its config, seed and a start-time stamp."""
    return f"{chash}-s{seed}-{int(time.time()) % 10**6:06d}"


def early_record(record: dict) -> dict:
    """A run's early evaluation (its summary's early_* keys) from its metrics record."""
    return {"early_step": record["step"], "early_val_loss": record["val_loss"], "early_val_bpb": record["val_bpb"]}


def finished(directory: Path, chash: str, force: bool) -> dict | None:
    """The summary of a finished run of this config (logged as skipped), unless force."""
    summary = None if force else finished_summary(directory, chash)
    if summary is None:
        return None
    log.info("skip %s: already %s", directory, summary["status"])
    return summary


def log_ppl(value: float | None) -> str:
    """A log-perplexity as the finish line prints it: 4 decimals, or a dash where there is none."""
    return "—" if value is None else f"{value:.4f}"


class RunState:
    """Everything about a run that outlives a process: step, metrics, timers, ids, files."""

    def __init__(self, cfg: Config, directory: Path, chash: str, ddp: distributed.Dist):
        self.cfg, self.dir, self.chash, self.ddp = cfg, directory, chash, ddp
        self.variant = variant_name(cfg)
        self.step, self.train_time, self.wall_before = 0, 0.0, 0.0
        self.records: list[dict] = []
        self.status = "completed"
        self.wandb_id = wandb_run_id(chash, cfg.seed)
        self.t0 = time.perf_counter()
        self.early: dict = {}
        self.meta: dict = {}
        self.declarations = covering(cfg.results_dir, cfg.name)  # claim digests at launch; a resume keeps its own
        self.provenance = launch_provenance()  # the commit and a clean tree at launch; a resume adds its own
        self.branch_evals: dict = {}  # budget -> evaluations a trunk made for that budget only (mbexp.run.branches)
        self.branched: dict | None = None  # a budget branch: the trunk step and wall time it started from
        self.loss_sum, self.n_losses = torch.zeros(()), 0  # train loss accumulated since the last log line
        # tokens/s counts timed steps only: each process's first step (the compile, when compiled) is warm-up
        self.timed_steps, self.warmup_steps, self.warmup_s = 0, 0, 0.0

    def restore(self, state: dict) -> None:
        state = upgrade("checkpoint", state)
        self.step, self.records = state["step"], state["metrics"]
        self.train_time, self.wall_before = state["train_time"], state["wall_time"]
        self.wandb_id, self.early = state["wandb_id"], state["early"]
        self.loss_sum, self.n_losses = torch.tensor(state["loss_sum"]), state["n_losses"]
        self.timed_steps, self.warmup_steps = state["timed_steps"], state["warmup_steps"]
        self.warmup_s, self.declarations = state["warmup_s"], state["declarations"]
        self.branch_evals, self.branched = state["branch_evals"], state.get("branched")
        self.provenance = resumed_provenance(state.get("provenance"), self.provenance)

    def start(self, counts: dict, model: DecoderLM, data: TokenData, precision: str, device: torch.device,
              compiled: bool) -> None:
        self.loss_sum = self.loss_sum.to(device)
        self.meta = {"params": counts["total"], "params_non_embedding": counts["non_embedding"],
                     "params_ffn": counts["ffn"], "d_ff": model.spec.d_ff, "flops_per_token": flops_per_token(model),
                     "train_tokens": int(data.train.size), "precision": precision, "device": str(device),
                     "compiled": compiled, "wait_policy": wait_policy.in_force()}
        if self.ddp.is_main:
            write_text(self.dir / CONFIG, OmegaConf.to_yaml(OmegaConf.structured(self.cfg)))
            write_text(self.dir / METRICS, "".join(json_line(r) for r in self.records))
            self.write_summary("running")

    def wandb_info(self) -> dict:
        c = self.cfg
        tags = [f"{axis}={getattr(c, axis).name}" for axis in AXES] + [f"warmup={c.optim.warmup_steps}"]
        config = asdict(c) | {"variant": self.variant, "run_dir": str(self.dir), **self.meta}
        return dict(run_id=self.wandb_id, name=f"{self.variant}/seed={c.seed}", group=self.variant,
                    job_type=c.name, tags=tags, config=config)

    # What the training loop tells the run, and asks it: it computes, the run keeps count and decides when.
    def done(self) -> bool:
        return self.step >= self.cfg.train.steps

    def stepped(self, loss: torch.Tensor) -> None:
        """One optimiser step taken, with its loss (kept on the device until the next log line)."""
        self.step += 1
        self.loss_sum += loss
        self.n_losses += 1

    def warmed_up(self, seconds: float) -> None:
        """A process's first step took `seconds`: warm-up (the compile, when compiled), not throughput."""
        self.warmup_s += seconds
        self.warmup_steps += 1

    def timed(self, steps: int, seconds: float) -> float:
        """`steps` steady steps took `seconds`: their tokens/s, counted towards the run's."""
        self.train_time += seconds
        self.timed_steps += steps
        return steps * tokens_per_step(self.cfg) / seconds

    def mean_train_loss(self) -> float:
        """The mean train loss since the last log line, over every rank (one host sync); starts the next mean."""
        value = distributed.mean(self.loss_sum / self.n_losses, self.ddp).item()
        self.loss_sum.zero_()
        self.n_losses = 0
        return value

    def logs_now(self) -> bool:
        return logs_at(self.step, self.cfg.train, self.cfg.train.steps)

    def evaluates_now(self) -> bool:
        return evaluates_at(self.step, self.cfg.train, self.cfg.train.steps)

    def scores_test_now(self, batches: Batches) -> bool:
        """The held-out split is scored once, at the last step, where there is one."""
        return self.step == self.cfg.train.steps and len(batches.starts["test"]) > 0

    def saves_now(self) -> bool:
        """A periodic checkpoint; none at the last step (the run then finishes)."""
        return self.step % self.cfg.train.checkpoint_every == 0 and not self.done()

    def diverged(self, why: str) -> None:
        log.warning("%s diverged at step %d (%s)", self.variant, self.step, why)
        self.status = "diverged"

    def record(self, values: dict, logger) -> None:
        rec = {"step": self.step, **values, "tokens": self.step * tokens_per_step(self.cfg)}
        self.records.append(rec)
        if "val_loss" in values and self.step == early_step(self.cfg.train.steps):
            self.early = early_record(rec)
        if self.ddp.is_main:
            path = self.dir / METRICS
            with named(path), open(path, "a") as f:
                f.write(json_line(rec))
            logger.log({k: v for k, v in rec.items() if k != "step"}, step=self.step)

    def checkpoint(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Batches) -> None:
        """Save the learner's parts (model, optimiser, data position) with this state and the RNG; the summary
        follows, so a run killed outright (SIGKILL, out of memory) reads as stopped where it resumes."""
        if self.ddp.is_main:
            checkpoint.save(self.dir, self.state(model, optimizer, batches))
            self.write_summary("running")

    def state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Batches) -> dict:
        """What a checkpoint holds: the learner's parts, this state and the RNG."""
        return {
            "config_hash": self.chash, "step": self.step, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "data": batches.state(), "rng": torch.get_rng_state(),
            "metrics": self.records, "train_time": self.train_time, "wall_time": self.wall_time(),
            "wandb_id": self.wandb_id, "early": self.early,
            "loss_sum": self.loss_sum.item(), "n_losses": self.n_losses,
            "timed_steps": self.timed_steps, "warmup_steps": self.warmup_steps, "warmup_s": self.warmup_s,
            "declarations": self.declarations, "branch_evals": self.branch_evals, "branched": self.branched,
            "provenance": self.provenance, "schema": SCHEMA,
        }

    def compile_s(self) -> float | None:
        """Seconds compiling took: the warm-up steps' time beyond that of as many steady steps."""
        if not self.meta.get("compiled") or not self.warmup_steps:
            return None
        steady = self.train_time / self.timed_steps if self.timed_steps else 0.0
        return round(max(0.0, self.warmup_s - self.warmup_steps * steady), 3)

    def wall_time(self) -> float:
        return self.wall_before + time.perf_counter() - self.t0

    def write_summary(self, status: str, error: str | None = None) -> dict:
        c = self.cfg
        evals = [r for r in self.records if "val_loss" in r]
        final = evals[-1] if status == "completed" and evals else {}
        trains = [r for r in self.records if "train_loss" in r]
        final_train = trains[-1]["train_loss"] if status == "completed" and trains else None
        rates = sorted(r["tokens_per_s"] for r in trains if "tokens_per_s" in r)
        per_step = tokens_per_step(c)
        tokens, early = self.step * per_step, early_step(c.train.steps)
        train_tokens = self.meta.get("train_tokens")
        summary = asdict(RunSummary(
            status=status, experiment=c.name, variant=self.variant, row=row_name(c),
            row_id=config_hash(c, without=("optim.warmup_steps",)), seed=c.seed, config_hash=self.chash,
            axes={**{axis: getattr(c, axis).name for axis in AXES}, "warmup_steps": c.optim.warmup_steps},
            steps=c.train.steps, step=self.step, **self.meta, identity=identity_flat(c),
            early_tokens=early * per_step, **({"early_step": early} | self.early),
            # train.final_eval=full: the whole splits' losses; else the fixed windows'
            **{f"final_{m}": final.get(f"{m}_full", final.get(m)) for m in ("val_loss", "val_bpb", "test_loss",
                                                                          "test_bpb")},
            # the mean train loss of the last log interval, and its gap to validation (negative: the model fits
            # its training text better than held-out text, as it does past one epoch)
            final_train_loss=final_train,
            generalization_gap=final_train - final["val_loss"] if final_train is not None and final else None,
            tokens_seen=tokens, epochs=round(tokens / train_tokens, 4) if train_tokens else None,
            wall_time_s=round(self.wall_time(), 3), compile_s=self.compile_s(),
            # compile warm-up excluded: the timed steps only
            tokens_per_s=round(self.timed_steps * per_step / self.train_time, 1) if self.train_time else None,
            # the median over log intervals: less sensitive to a moment of load on a shared machine
            tokens_per_s_median=round(statistics.median(rates), 1) if rates else None,
            **{"git_resumed": [], **self.provenance}, versions=versions(), wandb_id=self.wandb_id,
            command=job_command(), declarations=self.declarations, branched=self.branched, error=error,
        ))
        if self.ddp.is_main:
            write_json(self.dir / SUMMARY, summary)
        return summary

    def finish(self, status: str, logger, error: str | None = None) -> dict:
        """Write the final summary and close the W&B run (exit code 1 unless the run finished)."""
        summary = self.write_summary(status, error)
        if status == "completed":
            logger.log({k: summary[k] for k in ("final_val_loss", "final_val_bpb", "final_test_loss", "final_test_bpb")
                        if summary[k] is not None}, step=self.step)
        if self.ddp.is_main:
            log.info("%s seed=%d %s at step %d: val log-ppl %s, test log-ppl %s", self.variant, self.cfg.seed, status,
                     self.step, log_ppl(summary["final_val_loss"]), log_ppl(summary["final_test_loss"]))
        logger.finish(0 if status in FINISHED else 1)
        return summary
