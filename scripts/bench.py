"""Benchmark training on this machine (`make bench`) and write results/bench/<device>.json.

One process measures, for the default model: the matmul peak (fp32, bf16); tokens/s and MFU
of a bare PyTorch loop against mbexp's trainer at each precision; eager against torch.compile;
the step time of every FFN variant and of LayerNorm against RMSNorm; and whether
precision=auto trains faster than fp32 to the same validation loss.

    python scripts/bench.py [--quick] [--steps N] [--rounds R] [--out PATH]
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
from scipy.stats import mannwhitneyu

from mbexp.config import Config, compose_config, model_spec, to_object
from mbexp.data import Batches, TokenData, prepare
from mbexp.ffn import FFNS
from mbexp.io import write_json
from mbexp.model import DecoderLM, param_counts
from mbexp.norms import NORMS, build_norm
from mbexp.runs import run_dir
from mbexp.schedule import lr_at
from mbexp.trainer import autocast, cpu_has_bf16, evaluate, make_optimizer, resolve_device, resolve_precision, train

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FLOPS_FORMULA = "6*N_matmul + 12*n_layers*d_model*seq_len"
N_MATMUL = "N_matmul = every nn.Linear weight, the tied LM head included (embedding lookups and norm gains excluded)"
# Per device type: steps of one throughput run, the timing window (= trainer's train.log_every),
# steps per FFN/norm measurement, matmul sizes and matmuls per timing.
DEFAULTS = {
    "cpu": dict(steps=40, window=10, ffn_steps=5, sizes=(512, 1024, 2048), inner=1),
    "cuda": dict(steps=200, window=20, ffn_steps=50, sizes=(2048, 4096, 8192), inner=10),
}
TRAINER_MIN_RATIO = 0.95  # the trainer must reach this share of the bare loop's tokens/s
VAL_LOSS_TOLERANCE = 0.01  # precision=auto: final val loss within 1% of fp32's


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
            "python": platform.python_version(), "load_avg_start": os.getloadavg()[0]}
    if device.type == "cuda":
        info |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    return info


def summarize(rates: list[float]) -> dict:
    return {"median": statistics.median(rates), "best": max(rates), "n": len(rates), "all": rates}


def flops_per_token(model: DecoderLM) -> dict:
    """Training FLOPs per token: 6 per matmul weight (forward + backward) plus the attention scores."""
    s = model.spec
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 12 * s.n_layers * s.d_model * s.seq_len
    return {"formula": FLOPS_FORMULA, "n_matmul_note": N_MATMUL, "n_matmul": n_matmul, "attention": attention,
            "flops_per_token": 6 * n_matmul + attention}


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
        self.args, self.device, self.results_dir = args, device, results_dir
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

    def cfg(self, *extra: str, steps: int | None = None) -> Config:
        return to_object(compose_config(self.overrides(steps or self.args.steps, *extra)))

    def trainer(self, precision: str, steps: int) -> tuple[dict, list[float]]:
        """mbexp's trainer on the same config: its summary and the tokens/s it logged, first interval skipped."""
        dcfg = compose_config(self.overrides(steps, f"precision={precision}"))
        summary = train(dcfg)
        lines = (run_dir(to_object(dcfg)) / "metrics.jsonl").read_text().splitlines()
        rates = [r["tokens_per_s"] for r in map(json.loads, lines) if "tokens_per_s" in r]
        return summary, rates[1:]

    def bare(self, cfg: Config, precision: str, steps: int, *, compile: bool = False) -> tuple[BareLoop, list[float]]:
        loop = BareLoop(cfg, self.data, self.device, precision, compile=compile)
        return loop, loop.train(steps, window=self.args.window)[1:]


def throughput(bench: Bench) -> dict:
    """Bare loop and trainer, alternately (bare first in even rounds, trainer first in odd ones)."""
    args = bench.args
    rates = {p: {"bare": [], "trainer": []} for p in PRECISIONS}
    val = {}
    for r in range(args.rounds):
        for p in PRECISIONS:
            for mode in ("bare", "trainer")[:: 1 if r % 2 == 0 else -1]:
                if mode == "bare":
                    loop, got = bench.bare(bench.default, p, args.steps)
                    if r == 0:  # outside the timing: the same work as the trainer gives the same val loss
                        val[p, "bare"] = loop.val_loss()
                else:
                    summary, got = bench.trainer(p, args.steps)
                    val.setdefault((p, "trainer"), summary["final_val_loss"])
                rates[p][mode] += got
                log(f"  round {r + 1}/{args.rounds} {p:4} {mode:7} {statistics.median(got):9,.0f} tok/s")
    out = {}
    for p in PRECISIONS:
        bare, trainer = summarize(rates[p]["bare"]), summarize(rates[p]["trainer"])
        out[p] = {"bare": bare | {"val_loss": val[p, "bare"]}, "trainer": trainer | {"val_loss": val[p, "trainer"]},
                  "trainer_over_bare": trainer["median"] / bare["median"],
                  "trainer_over_bare_best": trainer["best"] / bare["best"]}
    return out


def compile_vs_eager(bench: Bench) -> dict:
    """The bare loop eager and under torch.compile at each precision, alternating every window."""
    args, window = bench.args, bench.args.window
    loops, out = {}, {}
    for p in PRECISIONS:
        for mode in ("eager", "compiled"):
            t0 = time.perf_counter()
            try:
                loop = BareLoop(bench.default, bench.data, bench.device, p, compile=mode == "compiled")
                loop.train(2, window=2)  # warm-up; compiles the compiled one
            except Exception as exc:  # any compiler failure: report it and go on
                reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                log(f"  torch.compile failed at {p}: {reason}")
                out[p, mode] = {"error": reason}
                continue
            loops[p, mode] = loop
            out[p, mode] = {"warmup_s": time.perf_counter() - t0, "rates": []}
    for r in range(args.rounds):
        for key in list(loops)[:: 1 if r % 2 == 0 else -1]:
            out[key]["rates"] += loops[key].train(window, window=window)
    result = {p: {} for p in PRECISIONS}
    for (p, mode), v in out.items():
        result[p][mode] = v if "error" in v else summarize(v.pop("rates")) | v
        log(f"  {p:4} {mode:8} " + (v["error"] if "error" in v else f"{result[p][mode]['median']:9,.0f} tok/s"))
    for p in PRECISIONS:
        if "median" in result[p]["eager"] and "median" in result[p].get("compiled", {}):
            result[p]["compiled_over_eager"] = result[p]["compiled"]["median"] / result[p]["eager"]["median"]
    return result


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
            (rate,) = loops[name].train(args.ffn_steps, window=args.ffn_steps)
            step_ms[name].append(1000 * tokens / rate)
    out = {}
    for name, loop in loops.items():
        ms = step_ms[name]
        out[name] = {"step_ms_median": statistics.median(ms), "step_ms_best": min(ms), "all": ms,
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
    return {n: {"us_median": statistics.median(t), "us_best": min(t)} for n, t in times.items()}


def precision_check(bench: Bench) -> dict:
    """precision=fp32 against precision=auto: the trainer, same seed and budget."""
    steps = bench.args.val_steps
    out = {}
    for precision in ("fp32", "auto"):
        summary, rates = bench.trainer(precision, steps)
        out[precision] = summarize(rates) | {"final_val_loss": summary["final_val_loss"],
                                             "resolved": summary["precision"]}
        log(f"  precision={precision} ({summary['precision']}): val loss {summary['final_val_loss']:.4f}, "
            f"{out[precision]['median']:,.0f} tok/s")
    fp32, auto = out["fp32"], out["auto"]
    out |= {"steps": steps, "speedup": auto["median"] / fp32["median"],
            "faster_p_value": float(mannwhitneyu(auto["all"], fp32["all"], alternative="greater").pvalue),
            "val_loss_rel_diff": (auto["final_val_loss"] - fp32["final_val_loss"]) / fp32["final_val_loss"]}
    return out


def table(res: dict) -> str:
    """The side-by-side summary printed at the end."""
    m, peak, tp, fl = res["machine"], res["peak_flops"], res["throughput"], res["flops"]["flops_per_token"]
    cfg, comp, pc = res["config"], res["compile"], res["precision_auto"]

    def mfu(tok_s, p):
        return f"{100 * tok_s * fl / peak[p]['flops']:.1f}%"

    def row(label, a, b, c=""):
        return f"{label:<40}{a:>16}{b:>16}{c:>14}"

    def tok(d):
        return f"{d['median']:,.0f}"

    lines = [
        f"mbexp bench on {res['device']}: {m.get('gpu', m['cpu'])}, {m['torch_threads']} threads, torch {m['torch']}",
        f"model=tiny {cfg['params']:,} params, batch {cfg['batch_size']} x seq_len {cfg['seq_len']}, "
        f"{cfg['steps']}-step runs x {cfg['rounds']} rounds, bare/trainer alternating; tokens/s = median of "
        f"{cfg['window']}-step windows, first window skipped",
        f"FLOPs/token = {FLOPS_FORMULA} = 6*{res['flops']['n_matmul']:,} + {res['flops']['attention']:,} "
        f"= {fl / 1e6:.2f} MFLOP;",
        f"  {N_MATMUL}; MFU = tokens/s x FLOPs/token / measured matmul peak of the same precision",
        "",
        row("", "fp32", "bf16 autocast", "bf16/fp32"),
        row("peak matmul GFLOP/s (best square)", f"{peak['fp32']['flops'] / 1e9:,.0f}",
            f"{peak['bf16']['flops'] / 1e9:,.0f}", f"{peak['bf16']['flops'] / peak['fp32']['flops']:.2f}x"),
    ]
    for mode, label in (("bare", "bare PyTorch loop"), ("trainer", "mbexp trainer")):
        a, b = tp["fp32"][mode], tp["bf16"][mode]
        lines += [row(f"{label} tokens/s", tok(a), tok(b), f"{b['median'] / a['median']:.2f}x"),
                  row("  best window tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}"),
                  row("  MFU", mfu(a["median"], "fp32"), mfu(b["median"], "bf16")),
                  row("  val loss after the run", f"{a['val_loss']:.5f}", f"{b['val_loss']:.5f}")]
    lines.append(row("trainer / bare (median; best)", *(f"{tp[p]['trainer_over_bare']:.3f}; "
                                                         f"{tp[p]['trainer_over_bare_best']:.3f}"
                                                         for p in PRECISIONS)))
    for mode in ("eager", "compiled"):
        cells = [comp[p][mode].get("error", "failed")[:14] if "median" not in comp[p][mode] else tok(comp[p][mode])
                 for p in PRECISIONS]
        lines.append(row(f"bare loop {mode} tokens/s (compile test)", *cells))
    lines.append(row("  torch.compile warm-up (compile) s",
                     *(f"{comp[p]['compiled']['warmup_s']:.1f}" if "warmup_s" in comp[p]["compiled"] else "-"
                       for p in PRECISIONS)))
    lines.append(row("compiled / eager", *(f"{comp[p]['compiled_over_eager']:.3f}" if "compiled_over_eager" in comp[p]
                                           else "-" for p in PRECISIONS)))
    a, b = pc["fp32"], pc["auto"]
    lines += [
        "",
        f"precision=auto (resolves to {b['resolved']} here) against fp32, trainer, seed 0, {pc['steps']} steps:",
        row("", "fp32", f"auto ({b['resolved']})", "auto/fp32"),
        row("trainer tokens/s", tok(a), tok(b), f"{pc['speedup']:.2f}x"),
        row("final val loss (nats/token)", f"{a['final_val_loss']:.5f}", f"{b['final_val_loss']:.5f}",
            f"{100 * pc['val_loss_rel_diff']:+.2f}%"),
        f"  one-sided Mann-Whitney p (auto faster than fp32, per window): {pc['faster_p_value']:.2g}",
        "",
        f"step time at precision=auto ({res['auto_precision']}), bare loop, {cfg['ffn_steps']}-step windows "
        f"x {cfg['rounds']} rounds, alternating:",
        f"{'variant':<18}{'d_ff':>6}{'params':>12}{'ms/step median':>16}{'best':>10}{'vs relu':>10}",
    ]
    v = res["variants"]
    ref = v["ffn=relu"]["step_ms_median"]
    for name, d in v.items():
        label = "norm=rms (relu)" if name == "norm=rms" else name
        lines.append(f"{label:<18}{d['d_ff']:>6}{d['params']:>12,}{d['step_ms_median']:>16.1f}"
                     f"{d['step_ms_best']:>10.1f}{d['step_ms_median'] / ref:>9.3f}x")
    nm = res["norm_micro"]
    lines += [
        f"LayerNorm vs RMSNorm, whole step (relu): {ref:.1f} vs {v['norm=rms']['step_ms_median']:.1f} ms "
        f"(rms/layer {v['norm=rms']['step_ms_median'] / ref:.3f}); norm alone fwd+bwd: "
        f"{nm['layer']['us_median']:.0f} vs {nm['rms']['us_median']:.0f} us "
        f"(rms/layer {nm['rms']['us_median'] / nm['layer']['us_median']:.2f})",
        "",
    ]
    for name, ok in res["checks"].items():
        lines.append(f"{'PASS' if ok else 'FAIL'}  {name}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int, help="steps of each throughput run (default: 40 on CPU, 200 on GPU)")
    parser.add_argument("--rounds", type=int, help="alternating rounds of every measurement (default 3)")
    parser.add_argument("--val-steps", type=int, help="the precision=auto check's budget (default 150)")
    parser.add_argument("--quick", action="store_true", help="one short round of everything (a smoke test)")
    parser.add_argument("--out", type=Path, help="output JSON (default: results/bench/<device>.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device)
    d = DEFAULTS[device.type]
    args.window = d["window"]
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (2 * d["window"] if args.quick else d["steps"])
    args.steps = max(2, -(-args.steps // args.window)) * args.window  # whole windows, the first is warm-up
    args.val_steps = args.val_steps or (2 * d["window"] if args.quick else 150)
    args.ffn_steps = d["ffn_steps"]
    out_path = args.out or ROOT / "results" / "bench" / f"{device_slug(device)}.json"
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mbexp-bench-") as tmp:
        bench = Bench(args, device, tmp)
        model = DecoderLM(model_spec(bench.default, bench.data.vocab_size))
        res = {"device": device_slug(device), "machine": machine_info(device), "auto_precision": bench.auto,
               "config": {"model": bench.default.model.name, "params": param_counts(model)["total"],
                          "batch_size": bench.default.train.batch_size, "seq_len": bench.default.model.seq_len,
                          "steps": args.steps, "window": args.window, "rounds": args.rounds,
                          "ffn_steps": args.ffn_steps, "val_steps": args.val_steps},
               "flops": flops_per_token(model)}
        log(f"[1/6] matmul peak {d['sizes']}")
        res["peak_flops"] = matmul_peak(device, d["sizes"], d["inner"], reps=10)
        log("[2/6] bare loop against mbexp trainer, fp32 and bf16")
        res["throughput"] = throughput(bench)
        log("[3/6] eager against torch.compile (bare loop)")
        res["compile"] = compile_vs_eager(bench)
        log("[4/6] FFN variants and norms (bare loop)")
        res["variants"] = variants(bench)
        log("[5/6] norms alone")
        res["norm_micro"] = norm_micro(bench)
        log(f"[6/6] precision=auto against fp32, trainer, {args.val_steps} steps")
        res["precision_auto"] = precision_check(bench)
    tp, pc = res["throughput"], res["precision_auto"]
    res["checks"] = {
        **{f"trainer reaches {TRAINER_MIN_RATIO} of the bare loop's tokens/s at {p} ({tp[p]['trainer_over_bare']:.3f})":
           tp[p]["trainer_over_bare"] >= TRAINER_MIN_RATIO for p in PRECISIONS},
        f"precision=auto trains faster than fp32 ({pc['speedup']:.2f}x, p={pc['faster_p_value']:.2g})":
            pc["speedup"] > 1 and pc["faster_p_value"] < 0.05,
        f"precision=auto val loss within {VAL_LOSS_TOLERANCE:.0%} of fp32's ({100 * pc['val_loss_rel_diff']:+.2f}%)":
            abs(pc["val_loss_rel_diff"]) <= VAL_LOSS_TOLERANCE,
    }
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t_start
    write_json(out_path, res)
    print(table(res))
    print(f"\nwrote {out_path} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
