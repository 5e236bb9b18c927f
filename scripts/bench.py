"""Benchmark training on this machine (`make bench`) and write results/bench/<device>.json.

One process measures, for the default model (or the run the overrides describe): the matmul peak (fp32,
bf16); fp32 against bf16 autocast (trainer speed and validation loss, where bf16 runs natively); the
speed bar, i.e. eager and compiled at each precision against a plain nanoGPT-style loop (fp32, eager) on
the same model and batches, at steady state and over a whole 2,000-step run with the compile time;
tokens/s and MFU of the bare step against mbexp's trainer at each precision; the step time of every FFN
variant and of LayerNorm against RMSNorm; and, in child processes, OMP_WAIT_POLICY=PASSIVE against
OpenMP's default wait policy, alone and beside a second job. Every loop calls the trainer's own
mbexp.trainer.train_step; compared loops alternate.

The precision and compile measurements go into mbexp.speed's record (<data_cache>/speed.json), keyed by
this machine and the run's shape: precision=auto and compile=auto follow it in every later run of that
shape here. The last line is the speed bar's verdict.

    python scripts/bench.py [--quick] [--only SECTION,...] [--steps N] [--rounds R] [--out PATH] [OVERRIDE ...]

--only runs some sections and merges them into the existing JSON. Compile times are measured
with an empty inductor cache (the first compile of a shape on a machine).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mbexp import speed
from mbexp.config import Config, compose_config, model_spec, to_object
from mbexp.data import Batches, TokenData, prepare
from mbexp.io import write_json
from mbexp.model import FLOPS_FORMULA, DecoderLM, param_counts
from mbexp.model import flops_per_token as model_flops_per_token
from mbexp.model.ffn import FFNS
from mbexp.model.norms import NORMS, build_norm
from mbexp.runs import run_dir
from mbexp.schedule import lr_at
from mbexp.speed import MIN_SPEEDUP, VAL_LOSS_TOLERANCE
from mbexp.trainer import Learner, autocast, compile_model, evaluate, make_optimizer, resolve_device, train, train_step

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
N_MATMUL = "N_matmul = every nn.Linear weight, the tied LM head included (embedding lookups and norm gains excluded)"
# Per device type: steps of one throughput run; the timing window (the trainer's train.log_every);
# steps per variant and round, and the window they are timed in; matmul sizes and matmuls per timing.
DEFAULTS = {
    "cpu": dict(steps=40, window=5, variant_steps=6, variant_window=1, sizes=(512, 1024, 2048), inner=1),
    "cuda": dict(steps=200, window=20, variant_steps=50, variant_window=10, sizes=(2048, 4096, 8192), inner=10),
}
# Other work on the machine only ever slows a window down, so the fastest window is the estimate
# of each loop's own speed; medians are reported beside it.
ESTIMATE = "best"
TRAINER_MIN_RATIO = 0.95  # the trainer must reach this share of the bare loop's tokens/s
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS", "KMP_BLOCKTIME")
# mbexp's defaults against the plain loop, steady-state tokens/s, by the precision precision=auto resolves to:
# 1.3x where bf16 runs natively; without it never below the plain loop (issue 24: compiled fp32 was 0.91x)
SPEED_BAR = {"bf16": 1.3, "fp32": 1.0}
WHOLE_RUN_STEPS = 2000  # ... and the whole run of this many steps, compile included
# precision_auto before speed_bar: each writes the record (mbexp.speed) that the later sections' `auto` reads
SECTIONS = ("peak", "precision_auto", "speed_bar", "throughput", "variants", "norm_micro", "omp")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_slug(device: torch.device) -> str:
    """'cpu', or the GPU's name as a file name (e.g. nvidia-h100-80gb-hbm3)."""
    if device.type != "cuda":
        return device.type
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


def machine_info(device: torch.device) -> dict:
    cpuinfo = speed.cpuinfo()
    isa = speed.isa_flags(cpuinfo)
    info = {"device": str(device), "cpu": speed.cpu_model(cpuinfo) or platform.processor(), "cpu_isa": isa,
            "cpu_bf16": speed.native_bf16(isa), "machine_key": speed.machine_key(device), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "load_avg_start": os.getloadavg()[0],
            "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ}}
    if device.type == "cuda":
        info |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    return info


def summarize(rates: list[float]) -> dict:
    return {"best": max(rates), "median": statistics.median(rates), "n": len(rates), "all": rates}


def flops_per_token(model: DecoderLM) -> dict:
    """Training FLOPs per token, by the formula the run summaries record (mbexp.model.flops_per_token)."""
    s = model.spec
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return {"formula": FLOPS_FORMULA, "n_matmul_note": N_MATMUL, "n_matmul": n_matmul,
            "attention": 12 * s.n_layers * s.d_model * s.seq_len, "flops_per_token": model_flops_per_token(model)}


def matmul_peak(device: torch.device, sizes: tuple[int, ...], inner: int, reps: int) -> dict:
    """Best FLOP/s of square matmuls per precision; precisions and sizes alternate in every repetition."""
    mats = {(p, n): (torch.randn(n, n, device=device, dtype=DTYPES[p]), torch.randn(n, n, device=device,
                                                                                    dtype=DTYPES[p]))
            for n in sizes for p in PRECISIONS}
    best = dict.fromkeys(mats, 0.0)
    for _ in range(reps):  # the first repetition doubles as the warm-up: only the best counts
        for key, (a, b) in mats.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                torch.matmul(a, b)
            sync(device)
            best[key] = max(best[key], inner * 2 * key[1] ** 3 / (time.perf_counter() - t0))
    return {p: {"flops": max(best[p, n] for n in sizes), "by_size": {str(n): best[p, n] for n in sizes}}
            for p in PRECISIONS}


class BareLoop:
    """The trainer's train_step and nothing else: its model init, batches, AdamW, lr schedule and
    gradient clipping, without logging, checkpoints or evaluation. At precision=fp32 and eager this
    is the plain nanoGPT loop on a CPU (nanoGPT's AdamW groups, fused only on CUDA, fp32, no compile)."""

    def __init__(self, cfg: Config, data: TokenData, device: torch.device, precision: str, *, compile: bool = False):
        torch.manual_seed(cfg.seed)  # as the trainer does, so both train the same model on the same batches
        self.cfg, self.device, self.compiled = cfg, device, compile
        model = DecoderLM(model_spec(cfg, data.vocab_size)).to(device)
        self.learner = Learner(model, make_optimizer(model, cfg.optim, device),
                               Batches(data, seq_len=cfg.model.seq_len, batch_size=cfg.train.batch_size,
                                       seed=cfg.seed, val_windows=cfg.data.val_windows),
                               device, precision, compile_model(model) if compile else None)
        self.model, self.step = model, 0

    def train(self, steps: int, *, window: int) -> list[float]:
        """Train `steps` more steps; the tokens/s of each run of `window` steps."""
        o, total = self.cfg.optim, self.cfg.train.steps
        tokens = window * self.cfg.train.batch_size * self.cfg.model.seq_len
        rates = []
        sync(self.device)
        t_last = time.perf_counter()
        for i in range(steps):
            lr = lr_at(self.step, lr=o.lr, warmup_steps=o.warmup_steps, total_steps=total, schedule=o.schedule,
                       min_lr_ratio=o.min_lr_ratio)
            loss, _ = train_step(self.learner, lr, o.grad_clip)
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
        lines = (run_dir(to_object(dcfg)) / "metrics.jsonl").read_text().splitlines()
        rates = [r["tokens_per_s"] for r in map(json.loads, lines) if "tokens_per_s" in r]
        return summary, rates[1:]

    def bare(self, precision: str) -> tuple[BareLoop, list[float]]:
        """The bare loop on the default config: the loop and its tokens/s, first window skipped."""
        loop = BareLoop(self.default, self.data, self.device, precision)
        return loop, loop.train(self.args.steps, window=self.args.window)[1:]


def throughput(bench: Bench) -> dict:
    """Bare loop and trainer, alternately (bare first in even rounds, trainer first in odd ones)."""
    args = bench.args
    rates = {p: {"bare": [], "trainer": []} for p in PRECISIONS}
    val = {}
    for r in range(args.rounds):
        for p in PRECISIONS:
            for mode in ("bare", "trainer")[:: 1 if r % 2 == 0 else -1]:
                if mode == "bare":
                    loop, got = bench.bare(p)
                    if r == 0:  # outside the timing: the same work as the trainer gives the same val loss
                        val[p, "bare"] = loop.val_loss()
                else:
                    summary, got = bench.trainer(p, args.steps)
                    val.setdefault((p, "trainer"), summary["final_val_loss"])
                rates[p][mode] += got
                log(f"  round {r + 1}/{args.rounds} {p:4} {mode:7} best {max(got):9,.0f} tok/s, "
                    f"median {statistics.median(got):9,.0f}")
    out = {}
    for p in PRECISIONS:
        bare, trainer = summarize(rates[p]["bare"]), summarize(rates[p]["trainer"])
        out[p] = {"bare": bare | {"val_loss": val[p, "bare"]}, "trainer": trainer | {"val_loss": val[p, "trainer"]},
                  "trainer_over_bare": trainer[ESTIMATE] / bare[ESTIMATE],
                  "trainer_over_bare_median": trainer["median"] / bare["median"]}
    return out


def speed_bar(bench: Bench) -> dict:
    """mbexp's defaults for a WHOLE_RUN_STEPS-step run against the plain loop (fp32, eager). Measures eager and
    compiled at each precision precision=auto may pick here (fp32; bf16 where it runs natively), alternating
    every round, records them (mbexp.speed) and takes the defaults, at precision=auto and at precision=fp32,
    to be what compile=auto decides from that record: steady tokens/s, compile time, the whole run
    extrapolated, the step counts after which compiling pays."""
    args, window, device = bench.args, bench.args.window, bench.device
    precisions = ("fp32", "bf16") if speed.has_native_bf16(device) or bench.auto == "bf16" else ("fp32",)
    # "plain" is the fp32 eager loop: nanoGPT's, and mbexp's own at precision=fp32, compile=false
    specs = {"plain": ("fp32", False)} | {f"{p}_compiled": (p, True) for p in precisions} | {
        f"{p}_eager": (p, False) for p in precisions if p != "fp32"}
    loops, first_s = {}, {}
    for name, (precision, comp) in specs.items():
        loops[name] = BareLoop(bench.default, bench.data, device, precision, compile=comp)
        first_s[name] = loops[name].first_step_s()
        log(f"  {name:14} first step {first_s[name]:.1f} s")
    again = {p: BareLoop(bench.default, bench.data, device, p, compile=True).first_step_s() for p in precisions}
    rates = {name: [] for name in loops}
    for r in range(args.rounds):
        for name in list(loops)[:: 1 if r % 2 == 0 else -1]:
            rates[name] += loops[name].train(2 * window, window=window)[1:]
    out = {name: summarize(rates[name]) | {"precision": specs[name][0], "compiled": specs[name][1],
                                            "first_step_s": first_s[name]} for name in loops}
    tokens = bench.default.train.batch_size * bench.default.model.seq_len
    step_s = {name: tokens / out[name][ESTIMATE] for name in loops}
    eager = {p: "plain" if p == "fp32" else f"{p}_eager" for p in precisions}
    timing = {p: {"eager_step_s": step_s[eager[p]], "compiled_step_s": step_s[f"{p}_compiled"],
                  "compile_s": max(0.0, first_s[f"{p}_compiled"] - step_s[f"{p}_compiled"]),
                  "compile_again_s": max(0.0, again[p] - step_s[f"{p}_compiled"]),
                  "at": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": args.rounds} for p in precisions}
    bench.record(compile=timing)
    found = bench.found
    whole = {name: first_s[name] + (WHOLE_RUN_STEPS - 1) * step_s[name] for name in loops}

    def default(precision: str) -> dict:  # what compile=auto runs at this precision, against the plain loop
        compiled = speed.resolve_compile("auto", device, WHOLE_RUN_STEPS, precision, found)
        name = f"{precision}_compiled" if compiled else eager[precision]
        return {"loop": name, "precision": precision, "compiled": compiled,
                "steady_ratio": out[name][ESTIMATE] / out["plain"][ESTIMATE],
                "steady_ratio_median": out[name]["median"] / out["plain"]["median"],
                "whole_run_ratio": whole["plain"] / whole[name]}

    def break_even(p: str) -> float | None:  # steps after which compiling has caught up with eager
        saved = timing[p]["eager_step_s"] - timing[p]["compiled_step_s"]
        return timing[p]["compile_s"] / saved if saved > 0 else None

    res = {"loops": out, "whole_run_s": whole, "whole_run_steps": WHOLE_RUN_STEPS, "compile": timing,
           "break_even_steps_vs_eager": {p: break_even(p) for p in precisions},
           "defaults": {"auto": default(bench.auto), "fp32": default("fp32")}, "bar": SPEED_BAR[bench.auto],
           "whole_run_note": "extrapolated: first step (the compile) + (steps - 1) x the steady step time"}
    for name in loops:
        log(f"  {name:14} best {out[name]['best']:9,.0f} tok/s, median {out[name]['median']:9,.0f}")
    return res


def omp_child(args) -> dict:
    """In a child process: steady tokens/s of mbexp's eager step at precision=auto under this process's policy."""
    cfg = to_object(compose_config([f"data.cache_dir={ROOT / 'data_cache'}", "logger=none"]))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    found = speed.measured(cfg.data.cache_dir, args.device, model_spec(cfg, data.vocab_size), cfg.train.batch_size)
    loop = BareLoop(cfg, data, args.device, speed.resolve_precision("auto", args.device, found))
    loop.train(args.window, window=args.window)  # warm-up
    rates = loop.train(args.omp_steps, window=args.window)
    return {"tokens_per_s": statistics.median(rates), "best": max(rates), "load_avg": os.getloadavg()[0]}


def omp_policy(bench: Bench) -> dict:
    """OMP_WAIT_POLICY=PASSIVE (mbexp's default) against OpenMP's own default, in child processes (the
    policy is read when torch loads OpenMP): alone, and two jobs side by side, alternating every round."""
    policies = {"PASSIVE": "PASSIVE", "openmp_default": None}
    out = {p: {"alone": [], "beside_second_job": []} for p in policies}
    for r in range(bench.args.rounds):
        for policy, value in list(policies.items())[:: 1 if r % 2 == 0 else -1]:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | (
                {"OMP_WAIT_POLICY": value} if value else {})
            # torch first: OpenMP reads its policy before mbexp could set its own default
            code = ("import torch, runpy, sys; sys.argv = ['bench.py', '--omp-child', '--omp-steps', "
                    f"'{bench.args.omp_steps}']; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')")
            for scenario, n in (("alone", 1), ("beside_second_job", 2)):
                procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(n)]
                got = [json.loads(proc.communicate()[0].strip().splitlines()[-1]) for proc in procs]
                out[policy][scenario].append(statistics.mean(g["tokens_per_s"] for g in got))
                log(f"  round {r + 1} {policy:15} {scenario:18} {out[policy][scenario][-1]:9,.0f} tok/s per job")
    res = {p: {sc: summarize(v) for sc, v in d.items()} for p, d in out.items()}
    for scenario in ("alone", "beside_second_job"):
        res[f"passive_over_default_{scenario}"] = (res["PASSIVE"][scenario]["median"]
                                                   / res["openmp_default"][scenario]["median"])
    return res | {"note": "tokens/s per job: the median over rounds of each child's median window"}


def variants(bench: Bench) -> dict:
    """Step time of each FFN variant (LayerNorm) and of RMSNorm (ReLU FFN), bare loop at precision=auto."""
    args = bench.args
    names = {f"ffn={f}": ("norm=layer", f"ffn={f}") for f in FFNS} | {"norm=rms": ("norm=rms", "ffn=relu")}
    loops = {}
    for name, overrides in names.items():
        loops[name] = BareLoop(bench.cfg(*overrides), bench.data, bench.device, bench.auto)
        loops[name].train(2, window=2)  # warm-up
    step_ms = {name: [] for name in names}
    tokens = bench.default.train.batch_size * bench.default.model.seq_len
    for r in range(args.rounds):
        for name in list(loops)[:: 1 if r % 2 == 0 else -1]:
            rates = loops[name].train(args.variant_steps, window=args.variant_window)
            step_ms[name] += [1000 * tokens / rate for rate in rates]
    out = {}
    for name, loop in loops.items():
        ms = step_ms[name]
        out[name] = {"step_ms_best": min(ms), "step_ms_median": statistics.median(ms), "all": ms,
                     "d_ff": loop.model.spec.d_ff, "params": param_counts(loop.model)["total"]}
    return out


def norm_micro(bench: Bench, reps: int = 15, inner: int = 20) -> dict:
    """Forward + backward of the norm alone on a (B, T, D) fp32 residual stream, microseconds per call."""
    spec, device = model_spec(bench.default, bench.data.vocab_size), bench.device
    shape = (bench.default.train.batch_size, spec.seq_len, spec.d_model)
    x = torch.randn(shape, device=device, requires_grad=True)
    grad = torch.randn(shape, device=device)
    norms = {n: build_norm(n, spec.d_model, eps=spec.norm_eps).to(device) for n in NORMS}
    times = {n: [] for n in NORMS}
    for _ in range(reps):
        for name, norm in norms.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                with autocast(device, bench.auto):
                    y = norm(x)
                y.backward(grad)
            sync(device)
            times[name].append(1e6 * (time.perf_counter() - t0) / inner)
    return {n: {"us_best": min(t), "us_median": statistics.median(t)} for n, t in times.items()}


def precision_check(bench: Bench) -> dict:
    """precision=fp32 against bf16 autocast: the trainer (eager), same seed and budget; recorded (mbexp.speed),
    so precision=auto picks bf16 from here on only if it was measurably faster at equal loss. Measured where
    bf16 runs natively (CUDA, a CPU with AVX512-BF16 or AMX); elsewhere precision=auto is fp32 unmeasured."""
    if not speed.has_native_bf16(bench.device):
        log("  no native bf16 here: precision=auto stays fp32, not measured")
        return {"measured": False, "auto": bench.auto}
    steps = bench.args.val_steps
    out = {}
    for precision in ("fp32", "bf16"):
        summary, rates = bench.trainer(precision, steps)
        out[precision] = summarize(rates) | {"final_val_loss": summary["final_val_loss"]}
        log(f"  precision={precision}: val loss {summary['final_val_loss']:.5f}, "
            f"best {out[precision]['best']:,.0f} tok/s")
    fp32, bf16 = out["fp32"], out["bf16"]
    res = out | {"measured": True, "steps": steps, "speedup": bf16[ESTIMATE] / fp32[ESTIMATE],
                 "speedup_median": bf16["median"] / fp32["median"],
                 "val_loss_rel_diff": (bf16["final_val_loss"] - fp32["final_val_loss"]) / fp32["final_val_loss"]}
    bench.record(precision={"fp32_tokens_s": fp32[ESTIMATE], "bf16_tokens_s": bf16[ESTIMATE],
                            "val_loss_rel_diff": res["val_loss_rel_diff"], "steps": steps,
                            "at": time.strftime("%Y-%m-%d %H:%M:%S")})
    return res | {"auto": bench.auto}


def checks(res: dict) -> dict[str, bool]:
    out = {}
    if tp := res.get("throughput"):
        out |= {f"trainer reaches {TRAINER_MIN_RATIO} of the bare loop's tokens/s at {p} "
                f"({tp[p]['trainer_over_bare']:.3f})": tp[p]["trainer_over_bare"] >= TRAINER_MIN_RATIO
                for p in PRECISIONS}
    if sb := res.get("speed_bar"):
        bar = {"auto": sb["bar"], "fp32": SPEED_BAR["fp32"]}
        for key, d in sb["defaults"].items():
            what = (f"precision={key} -> {d['precision']}, compile=auto -> {'compiled' if d['compiled'] else 'eager'}"
                    if key == "auto" else f"precision=fp32, compile=auto -> {'compiled' if d['compiled'] else 'eager'}")
            out |= {f"mbexp's defaults ({what}) reach {bar[key]}x the plain loop's steady tokens/s "
                    f"({d['steady_ratio']:.2f}x)": d["steady_ratio"] >= bar[key],
                    f"a whole {sb['whole_run_steps']:,}-step run with them ({what}) is not slower than the plain "
                    f"loop's, compile included ({d['whole_run_ratio']:.2f}x, extrapolated)": d["whole_run_ratio"] >= 1}
    return out


def table(res: dict) -> str:
    """The side-by-side summary printed at the end; sections not measured are left out."""
    m, fl, cfg = res["machine"], res["flops"]["flops_per_token"], res["config"]

    def row(label, *cells):
        return f"{label:<38}" + "".join(f"{c:>16}" for c in cells)

    lines = [
        f"mbexp bench on {res['device']}: {m.get('gpu', m['cpu'])}, {m['torch_threads']} threads, torch {m['torch']}, "
        f"load average {m['load_avg_start']:.1f} -> {m['load_avg_end']:.1f}",
        f"model={cfg['model']} ({cfg['params']:,} params), batch {cfg['batch_size']} x seq_len {cfg['seq_len']}; "
        f"every loop calls mbexp.trainer.train_step; compared loops alternate in {cfg['rounds']} rounds;",
        f"tokens/s: the best {cfg['window']}-step window (median beside it), first window of each run skipped",
        f"FLOPs/token = {FLOPS_FORMULA} = 6*{res['flops']['n_matmul']:,} + {res['flops']['attention']:,} "
        f"= {fl / 1e6:.2f} MFLOP",
        f"  {N_MATMUL}",
    ]
    if sb := res.get("speed_bar"):
        loops, n = sb["loops"], sb["whole_run_steps"]
        plain = loops["plain"]
        lines += [
            "",
            f"speed bar: eager and compiled at each precision precision=auto may pick, against a plain nanoGPT-style "
            f"loop (fp32, eager); whole {n:,}-step runs extrapolated",
            row("", *(f"{loops[k]['precision']} {'compiled' if loops[k]['compiled'] else 'eager'}" for k in loops)),
            row("steady tokens/s (best window)", *(f"{d['best']:,.0f}" for d in loops.values())),
            row("  median tokens/s", *(f"{d['median']:,.0f}" for d in loops.values())),
            row("  / plain loop (fp32 eager)", *(f"{d['best'] / plain['best']:.2f}x" for d in loops.values())),
            row("first step s (compile, cold cache)", *(f"{d['first_step_s']:.1f}" for d in loops.values())),
            row(f"whole {n:,}-step run s", *(f"{sb['whole_run_s'][k]:.0f}" for k in loops)),
        ]
        for p, t in sb["compile"].items():
            lines.append(f"{p}: compile {t['compile_s']:.1f} s (again in one process {t['compile_again_s']:.2f} s), "
                         f"{1000 * t['eager_step_s']:.1f} ms/step eager, {1000 * t['compiled_step_s']:.1f} compiled; "
                         f"compiling {_pays(sb['break_even_steps_vs_eager'][p])}")
        for key, d in sb["defaults"].items():
            lines.append(f"defaults at precision={key}: {d['precision']}, compile=auto -> "
                         f"{'compiled' if d['compiled'] else 'eager'} (from the record): {d['steady_ratio']:.2f}x the "
                         f"plain loop steady, {d['whole_run_ratio']:.2f}x over a whole {n:,}-step run")
    if (tp := res.get("throughput")) and (peak := res.get("peak_flops")):
        def mfu(tok_s, p):
            return f"{100 * tok_s * fl / peak[p]['flops']:.1f}%"

        lines += ["", "MFU = tokens/s x FLOPs/token / the measured matmul peak at the same precision",
                  row("", "fp32", "bf16 autocast", "bf16/fp32"),
                  row("peak matmul GFLOP/s", f"{peak['fp32']['flops'] / 1e9:,.0f}",
                      f"{peak['bf16']['flops'] / 1e9:,.0f}", f"{peak['bf16']['flops'] / peak['fp32']['flops']:.2f}x")]
        for mode, label in (("bare", "bare train_step loop"), ("trainer", "mbexp trainer")):
            a, b = tp["fp32"][mode], tp["bf16"][mode]
            lines += [row(f"{label} tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}",
                          f"{b['best'] / a['best']:.2f}x"),
                      row("  median tokens/s", f"{a['median']:,.0f}", f"{b['median']:,.0f}",
                          f"{b['median'] / a['median']:.2f}x"),
                      row("  MFU", mfu(a["best"], "fp32"), mfu(b["best"], "bf16")),
                      row("  val loss after the run", f"{a['val_loss']:.5f}", f"{b['val_loss']:.5f}")]
        lines += [row("trainer / bare", *(f"{tp[p]['trainer_over_bare']:.3f}" for p in PRECISIONS)),
                  row("  (medians)", *(f"{tp[p]['trainer_over_bare_median']:.3f}" for p in PRECISIONS))]
    if (pc := res.get("precision_auto")) and pc["measured"]:
        a, b = pc["fp32"], pc["bf16"]
        lines += [
            "",
            f"precision=fp32 against bf16 autocast: the trainer, eager, seed 0, {pc['steps']} steps each; "
            f"precision=auto -> {pc['auto']} (bf16 where >= {MIN_SPEEDUP}x, val loss within "
            f"{VAL_LOSS_TOLERANCE:.0%})",
            row("", "fp32", "bf16", "bf16/fp32"),
            row("trainer tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}", f"{pc['speedup']:.2f}x"),
            row("  median tokens/s", f"{a['median']:,.0f}", f"{b['median']:,.0f}", f"{pc['speedup_median']:.2f}x"),
            row("final val loss (nats/token)", f"{a['final_val_loss']:.5f}", f"{b['final_val_loss']:.5f}",
                f"{100 * pc['val_loss_rel_diff']:+.2f}%"),
        ]
    if v := res.get("variants"):
        lines += [
            "",
            f"step time at precision=auto ({res['auto_precision']}), bare loop, {cfg['rounds']} alternating rounds of "
            f"{cfg['variant_steps']} steps, timed every {cfg['variant_window']} step(s):",
            f"{'variant':<20}{'d_ff':>6}{'params':>12}{'best ms/step':>14}{'median':>10}{'vs relu':>10}",
        ]
        ref = v["ffn=relu"]["step_ms_best"]
        for name, d in v.items():
            label = "norm=rms, ffn=relu" if name == "norm=rms" else name
            lines.append(f"{label:<20}{d['d_ff']:>6}{d['params']:>12,}{d['step_ms_best']:>14.1f}"
                         f"{d['step_ms_median']:>10.1f}{d['step_ms_best'] / ref:>9.3f}x")
        if nm := res.get("norm_micro"):
            rms = v["norm=rms"]["step_ms_best"]
            lines.append(f"LayerNorm vs RMSNorm: whole step (ffn=relu) {ref:.1f} vs {rms:.1f} ms (rms/layer "
                         f"{rms / ref:.3f}); the norm alone, fwd+bwd on ({cfg['batch_size']}, {cfg['seq_len']}, "
                         f"d_model): {nm['layer']['us_best']:.0f} vs {nm['rms']['us_best']:.0f} us "
                         f"(rms/layer {nm['rms']['us_best'] / nm['layer']['us_best']:.2f})")
    if om := res.get("omp"):
        lines += ["", "OMP_WAIT_POLICY (child processes, mbexp eager step, tokens/s per job, median over rounds)",
                  row("", "alone", "beside a 2nd job")]
        for policy in ("PASSIVE", "openmp_default"):
            lines.append(row(policy, *(f"{om[policy][sc]['median']:,.0f}" for sc in ("alone", "beside_second_job"))))
        lines.append(row("PASSIVE / default", *(f"{om[f'passive_over_default_{sc}']:.2f}x"
                                                 for sc in ("alone", "beside_second_job"))))
    lines += ["", *(f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in res["checks"].items())]
    return "\n".join(lines)


def verdict(res: dict) -> str:
    """The speed bar's verdict in one line."""
    sb, m = res["speed_bar"], res["machine"]
    where = m.get("gpu") or f"{m['cpu']} [{' '.join(m['cpu_isa']) or 'no AVX2/AVX512/AMX'}]"
    ok = all(v for k, v in res["checks"].items() if k.startswith(("mbexp's defaults", "a whole")))
    parts = [f"precision={k} -> {d['precision']} {'compiled' if d['compiled'] else 'eager'} "
             f"{d['steady_ratio']:.2f}x steady, {d['whole_run_ratio']:.2f}x whole run"
             for k, d in sb["defaults"].items()]
    return (f"speed bar {'PASS' if ok else 'FAIL'} on {where}: {'; '.join(parts)} "
            f"(bar {sb['bar']}x at precision=auto, 1.0x at fp32)")


def _pays(steps: float | None) -> str:
    return "never pays" if steps is None else f"pays after {steps:,.0f} steps"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int, help="steps of each throughput run (default: 40 on CPU, 200 on GPU)")
    parser.add_argument("--rounds", type=int, help="alternating rounds of every measurement (default 3)")
    parser.add_argument("--val-steps", type=int, help="the precision=auto check's budget (default 150)")
    parser.add_argument("--omp-steps", type=int, default=20, help="timed steps of each OMP_WAIT_POLICY child")
    parser.add_argument("--only", help=f"comma-separated sections to run and merge into --out: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="one short round of everything (a smoke test)")
    parser.add_argument("--out", type=Path, help="output JSON (default: results/bench/<device>.json)")
    parser.add_argument("--omp-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="config overrides of the measured run (e.g. model=ladder128 "
                        "train.batch_size=32): the shape the record says compile=auto and precision=auto for")
    args = parser.parse_args(argv)
    args.device = resolve_device(args.device)
    d = DEFAULTS[args.device.type]
    args.window, args.variant_window, args.variant_steps = d["window"], d["variant_window"], d["variant_steps"]
    args.sizes, args.inner = d["sizes"], d["inner"]
    args.rounds = args.rounds or (1 if args.quick else 3)
    steps = args.steps or (2 * args.window if args.quick else d["steps"])
    args.steps = max(2, -(-steps // args.window)) * args.window  # whole windows; the first one is warm-up
    args.val_steps = args.val_steps or (4 * args.window if args.quick else 150)
    args.out = args.out or ROOT / "results" / "bench" / f"{device_slug(args.device)}.json"
    args.merge = args.only is not None  # --only: merge into the existing JSON
    # OpenMP's wait policy is a CPU matter
    args.only = args.only.split(",") if args.only else [s for s in SECTIONS if s != "omp" or args.device.type == "cpu"]
    if unknown := set(args.only) - set(SECTIONS):
        parser.error(f"--only {','.join(sorted(unknown))}: choose from {', '.join(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.omp_child:
        print(json.dumps(omp_child(args)))
        return 0
    t_start = time.perf_counter()
    load = os.getloadavg()[0]
    if args.device.type == "cpu" and load >= 0.5 * os.cpu_count():
        log(f"warning: load average {load:.1f} on {os.cpu_count()} cores: other jobs will slow some windows down "
            f"(the best window is reported; ratios come from alternating runs)")
    res = json.loads(args.out.read_text()) if args.merge and args.out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="mbexp-bench-") as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{tmp}/inductor"  # compile times from an empty cache
        bench = Bench(args, args.device, tmp)
        model = DecoderLM(model_spec(bench.default, bench.data.vocab_size))
        res |= {"device": device_slug(args.device), "machine": machine_info(args.device), "auto_precision": bench.auto,
                "estimate": ESTIMATE,
                "config": {"model": bench.default.model.name, "params": param_counts(model)["total"],
                           "batch_size": bench.default.train.batch_size, "seq_len": bench.default.model.seq_len,
                           "steps": args.steps, "window": args.window, "rounds": args.rounds,
                           "variant_steps": args.variant_steps, "variant_window": args.variant_window,
                           "val_steps": args.val_steps, "omp_steps": args.omp_steps},
                "flops": flops_per_token(model)}
        res.pop("compile", None)  # measured by the speed bar since v0.2
        sections = {
            "peak": ("matmul peak", lambda: matmul_peak(args.device, args.sizes, args.inner, reps=10)),
            "speed_bar": ("mbexp's defaults against the plain loop, compile included", lambda: speed_bar(bench)),
            "throughput": ("bare train_step loop against mbexp's trainer, fp32 and bf16", lambda: throughput(bench)),
            "variants": ("FFN variants and norms (bare loop)", lambda: variants(bench)),
            "norm_micro": ("the norms alone", lambda: norm_micro(bench)),
            "precision_auto": (f"fp32 against bf16 autocast, trainer, {args.val_steps} steps",
                               lambda: precision_check(bench)),
            "omp": ("OMP_WAIT_POLICY=PASSIVE against OpenMP's default, child processes", lambda: omp_policy(bench)),
        }
        chosen = [name for name in SECTIONS if name in args.only]
        for i, name in enumerate(chosen):
            label, run = sections[name]
            log(f"[{i + 1}/{len(chosen)}] {label}")
            when = {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "load_avg_before": os.getloadavg()[0],
                    "rounds": args.rounds}
            res["peak_flops" if name == "peak" else name] = run()
            res.setdefault("measured", {})[name] = when | {"load_avg_after": os.getloadavg()[0]}
            write_json(args.out, res)  # a later section's failure keeps the earlier ones
    res["auto_precision"] = bench.auto  # as the record now says
    res["checks"] = checks(res)
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t_start
    write_json(args.out, res)
    print(table(res))
    print(f"\nwrote {args.out} ({res['wall_s']:.0f} s)")
    if "speed_bar" in res:
        print(verdict(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
