"""Benchmark training on this machine (`make bench`) and write results/bench/<device>.json.

One process measures, for the default model: the matmul peak (fp32, bf16); the speed bar, i.e.
mbexp's defaults (precision=auto, compile=auto for a 2,000-step run) against a plain nanoGPT-style
loop (fp32, eager) on the same model and batches, at steady state and over a whole run with the
compile time, and the compile break-even; tokens/s and MFU of the bare step against mbexp's
trainer at each precision; the step time of every FFN variant and of LayerNorm against RMSNorm;
whether precision=auto trains faster than fp32 to the same validation loss; and, in child
processes, OMP_WAIT_POLICY=PASSIVE against OpenMP's default wait policy, alone and beside a second job.
Every loop calls the trainer's own mbexp.trainer.train_step; compared loops alternate.

    python scripts/bench.py [--quick] [--only SECTION,...] [--steps N] [--rounds R] [--out PATH]

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

from mbexp.config import Config, compose_config, model_spec, to_object
from mbexp.data import Batches, TokenData, prepare
from mbexp.ffn import FFNS
from mbexp.io import write_json
from mbexp.model import FLOPS_FORMULA, DecoderLM, param_counts
from mbexp.model import flops_per_token as model_flops_per_token
from mbexp.norms import NORMS, build_norm
from mbexp.runs import run_dir
from mbexp.schedule import lr_at
from mbexp.trainer import (
    COMPILE_MIN_STEPS,
    Learner,
    autocast,
    compile_model,
    cpu_has_bf16,
    evaluate,
    make_optimizer,
    resolve_compile,
    resolve_device,
    resolve_precision,
    train,
    train_step,
)

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
MIN_SPEEDUP = 1.05  # "measurably faster": beyond the few-% spread of identical runs on a shared machine
VAL_LOSS_TOLERANCE = 0.01  # precision=auto: final val loss within 1% of fp32's
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS", "KMP_BLOCKTIME")
SPEED_BAR = 1.3  # mbexp's defaults against the plain loop, steady-state tokens/s
WHOLE_RUN_STEPS = 2000  # ... and the whole run of this many steps, compile included
SECTIONS = ("peak", "speed_bar", "throughput", "variants", "norm_micro", "precision_auto", "omp")


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
    cpu = platform.processor()
    try:
        cpu = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M).group(1)
    except (OSError, AttributeError):
        pass
    info = {"device": str(device), "cpu": cpu, "cpu_bf16": cpu_has_bf16(), "cpu_count": os.cpu_count(),
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
        self.base = ["logger=none", "train.progress=false", f"device={device.type}", "name=bench",
                     f"data.cache_dir={ROOT / 'data_cache'}", f"results_dir={results_dir}", "force=true",
                     f"train.log_every={args.window}"]
        self.default = self.cfg()
        self.data = prepare(self.default.data, seq_len=self.default.model.seq_len)
        self.auto = resolve_precision("auto", device)

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
    """mbexp's defaults for a WHOLE_RUN_STEPS-step run against the plain loop (fp32, eager) and against
    mbexp eager at the same precision: steady tokens/s, alternating every round; the compile time; the
    whole run extrapolated from them; the step counts after which compiling pays."""
    args, window = bench.args, bench.args.window
    compiled = resolve_compile("auto", bench.device, WHOLE_RUN_STEPS)
    specs = {"plain": ("fp32", False), "mbexp_eager": (bench.auto, False), "mbexp_default": (bench.auto, compiled)}
    loops, first_s = {}, {}
    for name, (precision, comp) in specs.items():
        loops[name] = BareLoop(bench.default, bench.data, bench.device, precision, compile=comp)
        first_s[name] = loops[name].first_step_s()
        log(f"  {name:14} first step {first_s[name]:.1f} s")
    again = BareLoop(bench.default, bench.data, bench.device, bench.auto, compile=compiled).first_step_s()
    rates = {name: [] for name in loops}
    for r in range(args.rounds):
        for name in list(loops)[:: 1 if r % 2 == 0 else -1]:
            rates[name] += loops[name].train(2 * window, window=window)[1:]
    out = {name: summarize(rates[name]) | {"precision": specs[name][0], "compiled": specs[name][1],
                                            "first_step_s": first_s[name]} for name in loops}
    tokens = bench.default.train.batch_size * bench.default.model.seq_len
    step_s = {name: tokens / out[name][ESTIMATE] for name in loops}
    compile_s = max(0.0, first_s["mbexp_default"] - step_s["mbexp_default"])
    whole = {name: first_s[name] + (WHOLE_RUN_STEPS - 1) * step_s[name] for name in loops}

    def break_even(slower: str) -> float | None:  # steps after which the compiled default has caught up
        saved = step_s[slower] - step_s["mbexp_default"]
        return compile_s / saved if saved > 0 else None

    res = out | {
        "steady_ratio": out["mbexp_default"][ESTIMATE] / out["plain"][ESTIMATE],
        "steady_ratio_median": out["mbexp_default"]["median"] / out["plain"]["median"],
        "eager_ratio": out["mbexp_eager"][ESTIMATE] / out["plain"][ESTIMATE],
        "compile_s": compile_s, "compile_again_s": max(0.0, again - step_s["mbexp_default"]),
        "whole_run_steps": WHOLE_RUN_STEPS, "whole_run_s": whole,
        "whole_run_ratio": whole["plain"] / whole["mbexp_default"],
        "break_even_steps_vs_eager": break_even("mbexp_eager"), "break_even_steps_vs_plain": break_even("plain"),
        "compile_auto_min_steps": COMPILE_MIN_STEPS[bench.device.type],
        "whole_run_note": "extrapolated: first step (the compile) + (steps - 1) x the steady step time",
    }
    for name in loops:
        log(f"  {name:14} best {out[name]['best']:9,.0f} tok/s, median {out[name]['median']:9,.0f}")
    return res


def omp_child(args) -> dict:
    """In a child process: steady tokens/s of mbexp's eager step at precision=auto under this process's policy."""
    cfg = to_object(compose_config([f"data.cache_dir={ROOT / 'data_cache'}", "logger=none"]))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    loop = BareLoop(cfg, data, args.device, resolve_precision("auto", args.device))
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
    """precision=fp32 against precision=auto: the trainer, same seed and budget."""
    steps = bench.args.val_steps
    out = {}
    for precision in ("fp32", "auto"):
        summary, rates = bench.trainer(precision, steps)
        out[precision] = summarize(rates) | {"final_val_loss": summary["final_val_loss"],
                                             "resolved": summary["precision"]}
        log(f"  precision={precision} ({summary['precision']}): val loss {summary['final_val_loss']:.5f}, "
            f"best {out[precision]['best']:,.0f} tok/s")
    fp32, auto = out["fp32"], out["auto"]
    return out | {"steps": steps, "speedup": auto[ESTIMATE] / fp32[ESTIMATE],
                  "speedup_median": auto["median"] / fp32["median"],
                  "val_loss_rel_diff": (auto["final_val_loss"] - fp32["final_val_loss"]) / fp32["final_val_loss"]}


def checks(res: dict) -> dict[str, bool]:
    out = {}
    if tp := res.get("throughput"):
        out |= {f"trainer reaches {TRAINER_MIN_RATIO} of the bare loop's tokens/s at {p} "
                f"({tp[p]['trainer_over_bare']:.3f})": tp[p]["trainer_over_bare"] >= TRAINER_MIN_RATIO
                for p in PRECISIONS}
    if pc := res.get("precision_auto"):
        out |= {f"precision=auto ({pc['auto']['resolved']}) trains measurably faster than fp32 ({pc['speedup']:.2f}x "
                f">= {MIN_SPEEDUP})": pc["speedup"] >= MIN_SPEEDUP,
                f"precision=auto val loss within {VAL_LOSS_TOLERANCE:.0%} of fp32's "
                f"({100 * pc['val_loss_rel_diff']:+.2f}%)": abs(pc["val_loss_rel_diff"]) <= VAL_LOSS_TOLERANCE}
    if sb := res.get("speed_bar"):
        out |= {f"mbexp's defaults reach {SPEED_BAR}x the plain loop's steady tokens/s ({sb['steady_ratio']:.2f}x)":
                sb["steady_ratio"] >= SPEED_BAR,
                f"a whole {sb['whole_run_steps']:,}-step run with the defaults beats the plain loop's, compile "
                f"included ({sb['whole_run_ratio']:.2f}x, extrapolated)": sb["whole_run_ratio"] > 1}
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
        pl, ea, de = sb["plain"], sb["mbexp_eager"], sb["mbexp_default"]
        lines += [
            "",
            f"speed bar: mbexp's defaults for a {sb['whole_run_steps']:,}-step run (precision=auto -> "
            f"{de['precision']}, compile=auto -> {de['compiled']}) against a plain nanoGPT-style loop (fp32, eager)",
            row("", "plain loop", "mbexp eager", "mbexp default"),
            row("steady tokens/s (best window)", *(f"{d['best']:,.0f}" for d in (pl, ea, de))),
            row("  median tokens/s", *(f"{d['median']:,.0f}" for d in (pl, ea, de))),
            row("  / plain loop", "1.00x", f"{sb['eager_ratio']:.2f}x", f"{sb['steady_ratio']:.2f}x"),
            row("first step s (compile, cold cache)", *(f"{d['first_step_s']:.1f}" for d in (pl, ea, de))),
            row(f"whole {sb['whole_run_steps']:,}-step run s (extrap.)",
                *(f"{sb['whole_run_s'][k]:.0f}" for k in ("plain", "mbexp_eager", "mbexp_default"))),
            f"compile {sb['compile_s']:.1f} s (the same shape again in one process: {sb['compile_again_s']:.2f} s); "
            f"it pays after {_steps(sb['break_even_steps_vs_eager'])} steps against mbexp eager and after "
            f"{_steps(sb['break_even_steps_vs_plain'])} against the plain loop; compile=auto compiles CPU runs of "
            f">= {sb['compile_auto_min_steps']} steps",
        ]
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
    if pc := res.get("precision_auto"):
        a, b = pc["fp32"], pc["auto"]
        lines += [
            "",
            f"precision=auto against precision=fp32: the trainer, seed 0, {pc['steps']} steps each",
            row("", "fp32", f"auto ({b['resolved']})", "auto/fp32"),
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


def _steps(n: float | None) -> str:
    return "never" if n is None else f"{n:,.0f}"


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
            "precision_auto": (f"precision=auto against fp32, trainer, {args.val_steps} steps",
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
    res["checks"] = checks(res)
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t_start
    write_json(args.out, res)
    print(table(res))
    print(f"\nwrote {args.out} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
