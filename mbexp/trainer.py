"""The training loop: `train(cfg)` runs (or resumes, or skips) one run and returns its summary; `train_step`
and `evaluate` are the compute it repeats (mbexp.run.state holds the run's state and files)."""

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from mbexp import distributed, speed
from mbexp.config import Config, ConfigError, model_spec, to_object
from mbexp.corpus import fingerprint
from mbexp.data import Batches, TokenData, prepare
from mbexp.logger import NullLogger, make_logger
from mbexp.model import DecoderLM, param_counts
from mbexp.optim import Optimizers, make_optimizer
from mbexp.progress import progress_bar
from mbexp.run import checkpoint
from mbexp.run.branches import Branch, Trunk, budget_configs
from mbexp.run.identity import RunBusy, RunLock, config_hash, run_dir
from mbexp.run.state import RunState, failure_text, finished, tokens_per_step
from mbexp.schedule import lr_for
from mbexp.stop import StopRequest

log = logging.getLogger("mbexp")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is visible; use device=auto or device=cpu")
    return torch.device(name)


def use_inductor_cache(cache_dir: str) -> None:
    """Keep inductor's on-disk cache beside the token cache (unless TORCHINDUCTOR_CACHE_DIR says otherwise),
    so a later run or sweep of the same shape compiles faster. Torch fixes the folder the first time it
    looks (constructing an optimiser does): call this before."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache_dir).resolve() / "inductor"))


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """torch.compile for the fixed shapes of training batches."""
    return torch.compile(model, dynamic=False)


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@dataclass
class Learner:
    """What a training step needs: the model (and the wrapper the step calls: DDP, compiled), the
    optimiser, the batches, and where and how to compute."""

    model: DecoderLM
    optimizer: torch.optim.Optimizer | Optimizers
    batches: Batches
    device: torch.device
    precision: str
    step_model: torch.nn.Module | None = None  # None: the model itself
    z_loss: float = 0.0  # train.z_loss: the weight of the log-partition penalty (z_loss_term)


def z_loss_term(logits: torch.Tensor, weight: float) -> torch.Tensor:
    """PaLM's z-loss: weight * log^2(sum_v exp logit_v), mean over tokens; it keeps the softmax normaliser near 1."""
    return weight * torch.logsumexp(logits.float(), dim=-1).square().mean()


def train_step(learner: Learner, lr: float, grad_clip: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimiser step on the next training batch: the (cross-entropy, gradient norm, z-loss term), left on the
    device (no host sync). The trainer and scripts/bench.py both call this, so the bench measures the product."""
    t = learner
    for group in t.optimizer.param_groups:  # a group's lr_scale: its LR relative to optim.lr (muP, Muon)
        group["lr"] = lr * group.get("lr_scale", 1.0)
    x, y = t.batches.next_train()
    step_model = t.model if t.step_model is None else t.step_model
    with autocast(t.device, t.precision):
        logits, loss = step_model(x.to(t.device, non_blocking=True), y.to(t.device, non_blocking=True))
    z = z_loss_term(logits, t.z_loss) if t.z_loss else torch.zeros((), device=loss.device)
    (loss + z).backward()
    if grad_clip > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), grad_clip)
    else:  # optim.grad_clip=0: no clipping (as in nanoGPT), the norm still logged
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in t.model.parameters() if p.grad is not None])
    t.optimizer.step()
    t.optimizer.zero_grad(set_to_none=True)
    return loss.detach(), grad_norm, z.detach()


def make_learner(cfg: Config, data: TokenData, device: torch.device, precision: str,
                 ddp: distributed.Dist | None = None) -> Learner:
    """The seeded model, its optimiser and this rank's batches: what the trainer and the bench train."""
    ddp = ddp or distributed.Dist()
    torch.manual_seed(cfg.seed)
    model = DecoderLM(model_spec(cfg, data.vocab_size)).to(device)
    batches = Batches(data, seq_len=cfg.model.seq_len, batch_size=cfg.train.batch_size, seed=cfg.seed,
                      val_windows=cfg.data.val_windows, rank=ddp.rank, world_size=ddp.world_size)
    return Learner(model, make_optimizer(model, cfg.optim, device), batches, device, precision,
                   z_loss=cfg.train.z_loss)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Batches, device: torch.device, precision: str,
             batch_size: int, split: str = "val", whole: bool = False) -> tuple[float, float]:
    """(log-perplexity in nats/token, bits per byte) over the fixed windows of `split` (val or test), or over the
    whole split."""
    model.eval()
    nll, tokens, nbytes = torch.zeros((), dtype=torch.float64), 0, 0
    for x, y in batches.val_batches(batch_size, split, whole):
        with autocast(device, precision):
            logits, _ = model(x.to(device))
        nll += torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum"
        ).double().cpu()
        tokens += y.numel()
        nbytes += int(batches.bytes_per_token[y.numpy()].sum())
    model.train()
    nll = nll.item()
    return nll / tokens, nll / math.log(2) / max(nbytes, 1)


def train(cfg) -> dict:
    """Train the run `cfg` describes and return its summary; a finished run is skipped, an
    interrupted one resumed from its checkpoint, a run locked by another process left alone."""
    cfg = to_object(cfg)
    # the corpus content joins the identity (an edited data=text file is a new run); a file that is not text
    # stops here, before any run file
    cfg.data.fingerprint = fingerprint(cfg.data.name, path=cfg.data.path, max_docs=cfg.data.max_docs)
    device = resolve_device(cfg.device)  # device=cuda without CUDA stops here, before any run file
    use_inductor_cache(cfg.data.cache_dir)
    if cfg.optim.warmup_steps >= cfg.train.steps:
        log.warning("optim.warmup_steps=%d is not shorter than the run (train.steps=%d): the learning rate never "
                    "reaches optim.lr=%g", cfg.optim.warmup_steps, cfg.train.steps, cfg.optim.lr)
    ddp = distributed.init(device.type)
    if ddp.enabled and cfg.optim.name == "muon":  # torch's Muon would orthogonalise each rank's shard alone
        raise ConfigError("optim=muon runs on one process only; launch it without torchrun (or use optim=adamw)")
    if device.type == "cuda" and ddp.enabled:  # one GPU per rank
        device = torch.device("cuda", ddp.local_rank)
        torch.cuda.set_device(device)
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)  # a corpus error stops here, before any run file
    found = speed.measured(cfg.data.cache_dir, device, model_spec(cfg, data.vocab_size), cfg.train.batch_size)
    cfg.precision = speed.resolve_precision(cfg.precision, device, found)  # the identity holds what it computes with
    configs = budget_configs(cfg)  # one per budget of train.budgets, the largest first: the trunk
    if len(configs) > 1:  # every budget computes as the trunk did, compiled or not
        compiled = speed.resolve_compile(cfg.compile, device, configs[0].train.steps, cfg.precision, found)
        for c in configs:
            c.compile, c.force = str(compiled).lower(), c.force and c is configs[0]
    branches = [Branch(c, run_dir(c), config_hash(c)) for c in configs[1:]]
    if cfg.force and ddp.is_main:  # every budget from scratch: the trunk saves the branches' checkpoints anew
        for b in branches:
            b.restart()
    summaries = []
    for c in configs:
        summaries.append(_run(c, data, device, ddp, found, branches if c is configs[0] else []))
        if summaries[-1]["status"] == "busy" and c is configs[0]:
            break  # the trunk is another process's: its branches wait for it
    return next((s for s in summaries if s["status"] == "busy"), summaries[0])


def _run(cfg: Config, data: TokenData, device: torch.device, ddp: distributed.Dist, found: dict,
         branches: list[Branch]) -> dict:
    """One run: skipped when finished, else trained (or resumed) under its lock."""
    directory, chash = run_dir(cfg), config_hash(cfg)
    if done := finished(directory, chash, cfg.force):
        return done
    lock = RunLock(directory) if ddp.is_main else contextlib.nullcontext()
    try:
        with lock:
            if ddp.is_main:  # a write killed mid-way (SIGKILL) leaves its temporary file; we hold the lock
                for orphan in directory.glob(".*.tmp"):
                    orphan.unlink(missing_ok=True)
            # another process may have finished it between the first look and the lock
            return finished(directory, chash, cfg.force) or _train(cfg, data, directory, chash, device, ddp, found,
                                                                   [b for b in branches if b.pending()])
    except RunBusy:  # the command line says so, and exits 3 (mbexp.train)
        return {"status": "busy", "run_dir": str(directory)}
    except Exception as exc:
        exc.run_dir = directory  # the failure line names it (mbexp.train)
        raise


def _train(cfg: Config, data: TokenData, directory: Path, chash: str, device: torch.device,
           ddp: distributed.Dist, found: dict, branches: list[Branch]) -> dict:
    if cfg.force and ddp.is_main:
        checkpoint.remove(directory)
    epochs = cfg.train.steps * tokens_per_step(cfg) / max(int(data.train.size), 1)
    if epochs > 1 and ddp.is_main:  # repeated text: the run measures memorising as much as the architecture
        log.warning("this run reads its training split %.1f times (%d training tokens in data=%s): past one epoch",
                    epochs, data.train.size, cfg.data.name)
    learner = make_learner(cfg, data, device, cfg.precision, ddp)
    model = learner.model
    run = RunState(cfg, directory, chash, ddp)
    state = None if cfg.force else checkpoint.load(directory, config_hash=chash)
    if state is not None:
        model.load_state_dict(state["model"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.batches.load_state(state["data"])
        torch.set_rng_state(state["rng"])
        run.restore(state)
        log.info("resuming %s from step %d", directory, run.step)
    distributed.barrier(ddp)  # every rank has read the checkpoint before rank 0 writes anything
    compiled = speed.resolve_compile(cfg.compile, device, cfg.train.steps, learner.precision, found)
    run.start(param_counts(model), model, data, learner.precision, device, compiled)
    if ddp.enabled:
        ids = [device.index] if device.type == "cuda" else None
        learner.step_model = DistributedDataParallel(model, device_ids=ids)
    if compiled:
        learner.step_model = compile_model(model if learner.step_model is None else learner.step_model)
    logger, stop = NullLogger(), StopRequest()
    try:
        if ddp.is_main:  # inside the try: a logger that cannot start leaves the summary `failed`, not `running`
            logger = make_logger(cfg.logger, **run.wandb_info())
        with stop:
            _loop(learner, run, logger, stop, Trunk(branches, lambda: _evaluate_val(learner, cfg)))
        if stop.requested:  # stopped cleanly between two steps: resumable from exactly here
            run.checkpoint(learner.model, learner.optimizer, learner.batches)
            raise KeyboardInterrupt(stop.requested)
        if ddp.is_main:
            checkpoint.remove(directory)
        return run.finish(run.status, logger)
    except KeyboardInterrupt:
        run.finish("interrupted", logger)
        stop.hand_on()  # under submitit: requeue, then exit
        raise
    except Exception as exc:
        with contextlib.suppress(OSError):  # a full or read-only disk may take no summary: the error line says why
            run.finish("failed", logger, error=failure_text(exc))
        raise


def _evaluate_val(learner: Learner, cfg: Config) -> dict:
    val_loss, val_bpb = evaluate(learner.model, learner.batches, learner.device, learner.precision,
                                 cfg.train.batch_size)
    return {"val_loss": val_loss, "val_bpb": val_bpb}


def _loop(learner: Learner, run: RunState, logger, stop: StopRequest, trunk: Trunk) -> None:
    """Train until the run is done, stopped or diverged: the compute; `run` keeps count and says when to log,
    evaluate and save."""
    cfg, t = run.cfg, learner
    diverge_above = cfg.train.diverge_factor * math.log(t.model.spec.vocab_size)
    timed = 0  # steps since the last log line that count for tokens/s
    t_last = time.perf_counter()
    bar = progress_bar(cfg.train.steps, initial=run.step, desc=run.variant,
                       enabled=cfg.train.progress and run.ddp.is_main)
    first = True
    while not run.done() and not stop.requested:
        lr = lr_for(cfg.optim, run.step, cfg.train.steps)
        loss, grad_norm, z_loss = train_step(t, lr, cfg.optim.grad_clip)
        run.stepped(loss)
        bar.update()
        if first:  # a process's first step (compiling it, when compiled) is warm-up, not throughput
            loss.item()
            now = time.perf_counter()
            run.warmed_up(now - t_last)
            t_last, first = now, False
        else:
            timed += 1
        if run.logs_now():
            train_loss = run.mean_train_loss()
            now = time.perf_counter()
            values = {"train_loss": train_loss, "lr": lr, "grad_norm": grad_norm.item()}
            if cfg.train.z_loss:  # train_loss stays the cross-entropy, comparable with val_loss
                values["z_loss"] = z_loss.item()
            if timed:
                values["tokens_per_s"] = run.timed(timed, now - t_last)
                bar.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{values['tokens_per_s']:,.0f}")
            run.record(values, logger)
            timed = 0
            if not math.isfinite(train_loss) or train_loss > diverge_above:
                run.diverged(f"train loss {train_loss} > {diverge_above:.2f}")
                break
            t_last = time.perf_counter()
        if run.evaluates_now():
            t_eval = time.perf_counter()
            values = _evaluate_val(t, cfg)
            if run.scores_test_now(t.batches):
                values["test_loss"], values["test_bpb"] = evaluate(t.model, t.batches, t.device, t.precision,
                                                                   cfg.train.batch_size, "test")
            if run.done() and cfg.train.final_eval == "full":  # the curve keeps the fixed windows
                for split in ("val", "test") if run.scores_test_now(t.batches) else ("val",):
                    values[f"{split}_loss_full"], values[f"{split}_bpb_full"] = evaluate(
                        t.model, t.batches, t.device, t.precision, cfg.train.batch_size, split, whole=True)
            run.record(values, logger)
            if not math.isfinite(values["val_loss"]):
                run.status = "diverged"
                break
            t_last += time.perf_counter() - t_eval  # evaluation time is not training throughput
        trunk.after_step(run, learner)  # a wsd trunk's evaluations and checkpoints for its budget branches
        if run.saves_now():
            run.checkpoint(t.model, t.optimizer, t.batches)
    bar.close()
