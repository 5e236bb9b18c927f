"""Benchmark training on this machine (`make bench`) and write results/bench/<device>.json.

One process measures, for the default model: the matmul peak (fp32, bf16); tokens/s and MFU
of a bare PyTorch loop against mbexp's trainer at each precision; eager against torch.compile;
the step time of every FFN variant and of LayerNorm against RMSNorm; and whether
precision=auto trains faster than fp32 to the same validation loss.

    python scripts/bench.py [--quick] [--steps N] [--rounds R] [--out PATH]

On a CPU that other jobs share, OpenMP's spin-waiting threads can stall every op (steps 20x
slower were seen on a 2-core machine next to one other training job); OMP_WAIT_POLICY=PASSIVE
avoids that. The JSON records the load average and the threading environment.
"""

import argparse
import json
import os
import platform
import re
import statistics
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
from mbexp.trainer import autocast, cpu_has_bf16, evaluate, make_optimizer, resolve_device, resolve_precision, train

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
    """The training step and nothing else: the trainer's model init, batches, AdamW, lr schedule and
    gradient clipping, without logging, checkpoints or evaluation."""

    def __init__(self, cfg: Config, data: TokenData, device: torch.device, precision: str, *, compile: bool = False):
        torch.manual_seed(cfg.seed)  # as the trainer does, so both train the same model on the same batches
        self.cfg, self.device, self.precision = cfg, device, precision
        self.model = DecoderLM(model_spec(cfg, data.vocab_size)).to(device)
        self.step_model = torch.compile(self.model) if compile else self.model
        self.optimizer = make_optimizer(self.model, cfg.optim, device)
        self.batches = Batches(data, seq_len=cfg.model.seq_len, batch_size=cfg.train.batch_size, seed=cfg.seed,
                               val_windows=cfg.data.val_windows)
        self.step = 0

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
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            x, y = self.batches.next_train()
            with autocast(self.device, self.precision):
                _, loss = self.step_model(x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            if (i + 1) % window == 0:
                sync(self.device)
                now = time.perf_counter()
                rates.append(tokens / (now - t_last))
                t_last = now
        return rates

    def val_loss(self) -> float:
        return evaluate(self.model, self.batches, self.device, self.precision, self.cfg.train.batch_size)[0]


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


def compile_vs_eager(bench: Bench) -> dict:
    """The bare loop eager and under torch.compile at each precision, alternating every round."""
    args, window = bench.args, bench.args.window
    loops, out = {}, {p: {} for p in PRECISIONS}
    for p in PRECISIONS:
        for mode in ("eager", "compiled"):
            t0 = time.perf_counter()
            try:
                loop = BareLoop(bench.default, bench.data, bench.device, p, compile=mode == "compiled")
                loop.train(2, window=2)  # warm-up; compiles the compiled one
            except Exception as exc:  # any compiler failure: report it and go on
                lines = str(exc).strip().splitlines()
                out[p][mode] = {"error": f"{type(exc).__name__}: {lines[0] if lines else ''}"}
                log(f"  torch.compile failed at {p}: {out[p][mode]['error']}")
                continue
            loops[p, mode] = (loop, time.perf_counter() - t0, [])
    for r in range(args.rounds):
        for loop, _, rates in list(loops.values())[:: 1 if r % 2 == 0 else -1]:
            rates += loop.train(2 * window, window=window)
    for (p, mode), (_, warmup_s, rates) in loops.items():
        out[p][mode] = summarize(rates) | {"warmup_s": warmup_s}
        log(f"  {p:4} {mode:8} best {max(rates):9,.0f} tok/s")
    for p in PRECISIONS:
        if ESTIMATE in out[p]["eager"] and ESTIMATE in out[p]["compiled"]:
            out[p]["compiled_over_eager"] = out[p]["compiled"][ESTIMATE] / out[p]["eager"][ESTIMATE]
    return out


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
    tp, pc = res["throughput"], res["precision_auto"]
    return {
        **{f"trainer reaches {TRAINER_MIN_RATIO} of the bare loop's tokens/s at {p} ({tp[p]['trainer_over_bare']:.3f})":
           tp[p]["trainer_over_bare"] >= TRAINER_MIN_RATIO for p in PRECISIONS},
        f"precision=auto ({pc['auto']['resolved']}) trains measurably faster than fp32 ({pc['speedup']:.2f}x "
        f">= {MIN_SPEEDUP})": pc["speedup"] >= MIN_SPEEDUP,
        f"precision=auto val loss within {VAL_LOSS_TOLERANCE:.0%} of fp32's ({100 * pc['val_loss_rel_diff']:+.2f}%)":
            abs(pc["val_loss_rel_diff"]) <= VAL_LOSS_TOLERANCE,
    }


def table(res: dict) -> str:
    """The side-by-side summary printed at the end."""
    m, peak, tp, fl = res["machine"], res["peak_flops"], res["throughput"], res["flops"]["flops_per_token"]
    cfg, comp, pc, v = res["config"], res["compile"], res["precision_auto"], res["variants"]

    def row(label, *cells):
        return f"{label:<38}" + "".join(f"{c:>16}" for c in cells)

    def mfu(tok_s, p):
        return f"{100 * tok_s * fl / peak[p]['flops']:.1f}%"

    lines = [
        f"mbexp bench on {res['device']}: {m.get('gpu', m['cpu'])}, {m['torch_threads']} threads, torch {m['torch']}, "
        f"load average {m['load_avg_start']:.1f} -> {m['load_avg_end']:.1f}",
        f"model={cfg['model']} ({cfg['params']:,} params), batch {cfg['batch_size']} x seq_len {cfg['seq_len']}; "
        f"{cfg['rounds']} rounds of {cfg['steps']}-step runs, bare loop and trainer alternating;",
        f"tokens/s: the best {cfg['window']}-step window (median beside it), first window of each run skipped",
        f"FLOPs/token = {FLOPS_FORMULA} = 6*{res['flops']['n_matmul']:,} + {res['flops']['attention']:,} "
        f"= {fl / 1e6:.2f} MFLOP",
        f"  {N_MATMUL}",
        "MFU = tokens/s x FLOPs/token / the measured matmul peak at the same precision",
        "",
        row("", "fp32", "bf16 autocast", "bf16/fp32"),
        row("peak matmul GFLOP/s", f"{peak['fp32']['flops'] / 1e9:,.0f}", f"{peak['bf16']['flops'] / 1e9:,.0f}",
            f"{peak['bf16']['flops'] / peak['fp32']['flops']:.2f}x"),
    ]
    for mode, label in (("bare", "bare PyTorch loop"), ("trainer", "mbexp trainer")):
        a, b = tp["fp32"][mode], tp["bf16"][mode]
        lines += [row(f"{label} tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}", f"{b['best'] / a['best']:.2f}x"),
                  row("  median tokens/s", f"{a['median']:,.0f}", f"{b['median']:,.0f}",
                      f"{b['median'] / a['median']:.2f}x"),
                  row("  MFU", mfu(a["best"], "fp32"), mfu(b["best"], "bf16")),
                  row("  val loss after the run", f"{a['val_loss']:.5f}", f"{b['val_loss']:.5f}")]
    lines += [row("trainer / bare", *(f"{tp[p]['trainer_over_bare']:.3f}" for p in PRECISIONS)),
              row("  (medians)", *(f"{tp[p]['trainer_over_bare_median']:.3f}" for p in PRECISIONS))]
    def cells(get, fmt):  # one cell per precision, "-" where compile failed
        return (format(get(comp[p]), fmt) if "error" not in comp[p]["compiled"] else "-" for p in PRECISIONS)

    lines += [row("bare loop eager tokens/s", *cells(lambda c: c["eager"]["best"], ",.0f")),
              row("bare loop compiled tokens/s", *cells(lambda c: c["compiled"]["best"], ",.0f")),
              row("  compile warm-up s (2 steps)", *cells(lambda c: c["compiled"]["warmup_s"], ".1f")),
              row("compiled / eager", *cells(lambda c: c["compiled_over_eager"], ".3f"))]
    lines += [f"  torch.compile failed at {p}: {comp[p]['compiled']['error']}" for p in PRECISIONS
              if "error" in comp[p]["compiled"]]
    a, b = pc["fp32"], pc["auto"]
    lines += [
        "",
        f"precision=auto against precision=fp32: the trainer, seed 0, {pc['steps']} steps each",
        row("", "fp32", f"auto ({b['resolved']})", "auto/fp32"),
        row("trainer tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}", f"{pc['speedup']:.2f}x"),
        row("  median tokens/s", f"{a['median']:,.0f}", f"{b['median']:,.0f}", f"{pc['speedup_median']:.2f}x"),
        row("final val loss (nats/token)", f"{a['final_val_loss']:.5f}", f"{b['final_val_loss']:.5f}",
            f"{100 * pc['val_loss_rel_diff']:+.2f}%"),
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
    nm, rms = res["norm_micro"], v["norm=rms"]["step_ms_best"]
    lines += [
        f"LayerNorm vs RMSNorm: whole step (ffn=relu) {ref:.1f} vs {rms:.1f} ms (rms/layer {rms / ref:.3f}); "
        f"the norm alone, fwd+bwd on ({cfg['batch_size']}, {cfg['seq_len']}, d_model): "
        f"{nm['layer']['us_best']:.0f} vs {nm['rms']['us_best']:.0f} us "
        f"(rms/layer {nm['rms']['us_best'] / nm['layer']['us_best']:.2f})",
        "",
        *(f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in res["checks"].items()),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int, help="steps of each throughput run (default: 40 on CPU, 200 on GPU)")
    parser.add_argument("--rounds", type=int, help="alternating rounds of every measurement (default 3)")
    parser.add_argument("--val-steps", type=int, help="the precision=auto check's budget (default 150)")
    parser.add_argument("--quick", action="store_true", help="one short round of everything (a smoke test)")
    parser.add_argument("--out", type=Path, help="output JSON (default: results/bench/<device>.json)")
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
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    load = os.getloadavg()[0]
    if args.device.type == "cpu" and load >= 0.5 * os.cpu_count():
        hint = "" if "OMP_WAIT_POLICY" in os.environ else "; consider OMP_WAIT_POLICY=PASSIVE (see --help)"
        log(f"warning: load average {load:.1f} on {os.cpu_count()} cores: other jobs will slow some windows down "
            f"(the best window is reported){hint}")
    with tempfile.TemporaryDirectory(prefix="mbexp-bench-") as tmp:
        bench = Bench(args, args.device, tmp)
        model = DecoderLM(model_spec(bench.default, bench.data.vocab_size))
        res = {"device": device_slug(args.device), "machine": machine_info(args.device), "auto_precision": bench.auto,
               "estimate": ESTIMATE,
               "config": {"model": bench.default.model.name, "params": param_counts(model)["total"],
                          "batch_size": bench.default.train.batch_size, "seq_len": bench.default.model.seq_len,
                          "steps": args.steps, "window": args.window, "rounds": args.rounds,
                          "variant_steps": args.variant_steps, "variant_window": args.variant_window,
                          "val_steps": args.val_steps},
               "flops": flops_per_token(model)}
        log(f"[1/6] matmul peak, sizes {args.sizes}")
        res["peak_flops"] = matmul_peak(args.device, args.sizes, args.inner, reps=10)
        log("[2/6] bare loop against mbexp trainer, fp32 and bf16")
        res["throughput"] = throughput(bench)
        log("[3/6] eager against torch.compile (bare loop)")
        res["compile"] = compile_vs_eager(bench)
        log("[4/6] FFN variants and norms (bare loop)")
        res["variants"] = variants(bench)
        log("[5/6] the norms alone")
        res["norm_micro"] = norm_micro(bench)
        log(f"[6/6] precision=auto against fp32, trainer, {args.val_steps} steps")
        res["precision_auto"] = precision_check(bench)
    res["checks"] = checks(res)
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t_start
    write_json(args.out, res)
    print(table(res))
    print(f"\nwrote {args.out} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
