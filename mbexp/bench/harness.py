"""The bench's two loops and its harness: BareLoop (the trainer's train_step alone) and Bench (configs composed
as `python -m mbexp.train` composes them, the trainer run on them, mbexp.speed's record kept up to date)."""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from mbexp import speed
from mbexp.config import Config, compose_config, model_spec, rules, to_object
from mbexp.data import TokenData, prepare
from mbexp.io import METRICS
from mbexp.model import DecoderLM, param_counts
from mbexp.run.identity import run_dir
from mbexp.run.state import tokens_per_step
from mbexp.schedule import lr_for
from mbexp.trainer import compile_model, evaluate, make_learner, train, train_step

ROOT = Path(__file__).resolve().parents[2]  # the repository: its data_cache/ and scripts/bench.py
PRECISIONS = tuple(p for p in rules.PRECISIONS if p != "auto")  # what `auto` may resolve to
# Other work on the machine only ever slows a window down, so the fastest window is the estimate
# of each loop's own speed; medians are reported beside it.
ESTIMATE = "best"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summarize(rates: list[float]) -> dict:
    return {"best": max(rates), "median": statistics.median(rates), "n": len(rates), "all": rates}


class BareLoop:
    """The trainer's train_step and nothing else: its model init, batches, AdamW, lr schedule and
    gradient clipping, without logging, checkpoints or evaluation. At precision=fp32 and eager this
    is the plain nanoGPT loop on a CPU (nanoGPT's AdamW groups, fused only on CUDA, fp32, no compile)."""

    def __init__(self, cfg: Config, data: TokenData, device: torch.device, precision: str, *, compile: bool = False):
        self.cfg, self.device, self.compiled = cfg, device, compile
        self.learner = make_learner(cfg, data, device, precision)  # as the trainer builds it: same model, batches
        self.model, self.step = self.learner.model, 0
        self.learner.step_model = compile_model(self.model) if compile else None

    def train(self, steps: int, *, window: int) -> list[float]:
        """Train `steps` more steps; the tokens/s of each run of `window` steps."""
        o, total = self.cfg.optim, self.cfg.train.steps
        tokens = window * tokens_per_step(self.cfg)
        rates = []
        sync(self.device)
        t_last = time.perf_counter()
        for i in range(steps):
            lr = lr_for(o, self.step, total)
            loss, *_ = train_step(self.learner, lr, o.grad_clip)
            self.step += 1
            if (i + 1) % window == 0:
                loss.item()  # waits for the step, as the trainer's one host sync per log interval does
                sync(self.device)
                now = time.perf_counter()
                rates.append(tokens / (now - t_last))
                t_last = now
        return rates

    def first_step_s(self) -> float:
        """The wall time of one step from cold: the compile, when compiled."""
        t0 = time.perf_counter()
        self.train(1, window=1)
        return time.perf_counter() - t0

    def val_loss(self) -> float:
        return evaluate(self.model, self.learner.batches, self.device, self.learner.precision,
                        self.cfg.train.batch_size)[0]


class Bench:
    """Composes configs the way `python -m mbexp.train` does and runs both loops on them."""

    def __init__(self, args, device: torch.device, results_dir: str):
        self.args, self.device = args, device
        # the trainer's runs stay eager: the speed bar measures compiling, with the bare loop
        self.base = ["logger=none", "train.progress=false", f"device={device.type}", "name=bench",
                     f"data.cache_dir={ROOT / 'data_cache'}", f"results_dir={results_dir}", "force=true",
                     f"train.log_every={args.window}", "compile=false", *args.overrides]
        self.default = self.cfg()
        self.data = prepare(self.default.data, seq_len=self.default.model.seq_len)
        self.spec = model_spec(self.default, self.data.vocab_size)
        # mbexp.speed's record for this machine and the measured shape, what the trainer's `auto` reads,
        # with this bench's own measurements merged in as they come
        self.found = speed.measured(self.default.data.cache_dir, device, self.spec, self.default.train.batch_size)
        self.auto = speed.resolve_precision("auto", device, self.found)

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions worth timing here: bf16 only where it runs natively (or the record picks it)."""
        return PRECISIONS if speed.has_native_bf16(self.device) or self.auto == "bf16" else ("fp32",)

    def record(self, **measurement) -> None:
        """Merge a measurement into the record (not --quick's: a smoke test's numbers decide nothing);
        precision=auto and compile=auto follow it from here on."""
        d = self.default
        if "precision" in measurement:
            self.found["precision"] = measurement["precision"]
        self.found["compile"] = self.found.get("compile", {}) | measurement.get("compile", {})
        self.auto = speed.resolve_precision("auto", self.device, self.found)
        if self.args.quick:
            return
        about = {"model": d.model.name, "params": param_counts(DecoderLM(self.spec))["total"],
                 "batch_size": d.train.batch_size, "seq_len": d.model.seq_len, "overrides": self.args.overrides,
                 "by": "scripts/bench.py"}
        speed.record(d.data.cache_dir, self.device, self.spec, d.train.batch_size, about, **measurement)

    def overrides(self, steps: int, *extra: str) -> list[str]:
        # evaluation at the end only (plus the trainer's fixed early eval, which its tokens/s excludes)
        return self.base + [f"train.steps={steps}", f"train.eval_every={steps}", f"train.checkpoint_every={steps}",
                            *extra]

    def cfg(self, *extra: str) -> Config:
        return to_object(compose_config(self.overrides(self.args.steps, *extra)))

    def trainer(self, precision: str, steps: int) -> tuple[dict, list[float]]:
        """mbexp's trainer on the same config: its summary and the tokens/s it logged, first interval skipped."""
        dcfg = compose_config(self.overrides(steps, f"precision={precision}"))
        summary = train(dcfg)
        resolved = to_object(dcfg)
        resolved.precision = summary["precision"]  # the run directory holds the precision auto resolved to
        lines = (run_dir(resolved) / METRICS).read_text().splitlines()
        rates = [r["tokens_per_s"] for r in map(json.loads, lines) if "tokens_per_s" in r]
        return summary, rates[1:]

    def bare(self, precision: str) -> tuple[BareLoop, list[float]]:
        """The bare loop on the default config: the loop and its tokens/s, first window skipped."""
        loop = BareLoop(self.default, self.data, self.device, precision)
        return loop, loop.train(self.args.steps, window=self.args.window)[1:]
