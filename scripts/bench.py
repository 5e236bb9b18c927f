"""Benchmark training on this machine (`make bench`) and write results/bench/<device>.json.

One process measures, for the default model (or the run the overrides describe): fp32 against bf16 autocast
(trainer speed and validation loss where bf16 runs natively; elsewhere a few steps that show how slow it
is, and every other section times fp32 only); the speed bar, i.e. eager and compiled at each precision
against a plain nanoGPT-style loop (fp32, eager) on the same model and batches, at steady state and over a
whole 2,000-step run with the compile time; tokens/s of the bare step against mbexp's trainer. In child
processes, OpenMP's wait policies (PASSIVE, OpenMP's default, two bounded spins) alone and beside a second
job, and mbexp under its defaults against the plain loop under OpenMP's default, alone. With --full also the
matmul peak (for MFU) and the step time of every FFN variant and of LayerNorm against RMSNorm.
Every loop calls the trainer's own mbexp.trainer.train_step; compared loops alternate.

The precision and compile measurements go into mbexp.speed's record (<data_cache>/speed.json), keyed by
this machine and the run's shape: precision=auto and compile=auto follow it in every later run of that
shape here. It ends with the trainer / bare loop ratio, the defaults' ratio to the plain loop and the
speed bar's verdict.

    python scripts/bench.py [--full | --only SECTION,...] [--quick] [--steps N] [--rounds R] [--out PATH] [OVERRIDE ...]

By default (`make bench`) it runs the sections whose measurements decide the defaults (precision_auto,
speed_bar, throughput) and merges them into the existing JSON; --full (`make bench-full`) runs every
section and writes the JSON afresh; --only runs some sections and merges them. Compile times are
measured with an empty inductor cache (the first compile of a shape on a machine).
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import mbexp

# an entry point: its environment defaults, before torch loads; an --omp-child keeps the policy it was given
if __name__ == "__main__" and "--omp-child" not in sys.argv:  # said by main once the arguments are known good
    POLICY = mbexp.set_entry_defaults([])

from mbexp import Parser, speed
from mbexp.bench.harness import ESTIMATE, ROOT, Bench, log
from mbexp.bench.omp import omp_child, omp_policy
from mbexp.bench.parts import axes, matmul_peak, norm_micro, variants
from mbexp.bench.precision import GLANCE_STEPS, precision_check, throughput
from mbexp.bench.report import checks, device_slug, flops_per_token, machine_info, ratios, table, verdict
from mbexp.bench.speed_bar import speed_bar
from mbexp.config import model_spec
from mbexp.io import write_json
from mbexp.model import DecoderLM, param_counts
from mbexp.trainer import resolve_device

# Per device type (the loops, sections and report are mbexp/bench/): throughput steps and timing window
# (train.log_every); steps per variant and round, and their window; matmul sizes and matmuls per timing.
DEFAULTS = {
    "cpu": dict(steps=40, window=5, variant_steps=6, variant_window=1, sizes=(512, 1024, 2048), inner=1),
    "cuda": dict(steps=200, window=20, variant_steps=50, variant_window=10, sizes=(2048, 4096, 8192), inner=10),
}
# precision_auto before speed_bar: each writes the record (mbexp.speed) that the later sections' `auto` reads
SECTIONS = ("peak", "precision_auto", "speed_bar", "throughput", "variants", "axes", "norm_micro", "omp")
# `make bench`: what mbexp's defaults follow (precision=auto, compile=auto, the wait policy), the cost of the
# optional axes (Muon, the attention soft-cap), and their ratios
DECIDING = ("precision_auto", "speed_bar", "throughput", "axes", "omp")
RESULT_KEY = {"peak": "peak_flops"}  # a section's key in the JSON, where it is not the section's name


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python scripts/bench.py", description=__doc__)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int, help="steps of each throughput run (default: 40 on CPU, 200 on GPU)")
    parser.add_argument("--rounds", type=int, help="alternating rounds of every measurement (default 3)")
    parser.add_argument("--val-steps", type=int, help="the precision=auto check's budget (default 150)")
    parser.add_argument("--omp-seconds", type=float, help="seconds each wait-policy child times (default 2)")
    parser.add_argument("--omp-rounds", type=int, help="alternating rounds of the wait-policy children (default 2; "
                        "--full: --rounds)")
    parser.add_argument("--omp-precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--omp-compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--omp-jobs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--omp-barrier", help=argparse.SUPPRESS)
    parser.add_argument("--only", help=f"comma-separated sections to run and merge into --out: {', '.join(SECTIONS)}")
    parser.add_argument("--full", action="store_true", help=f"every section ({', '.join(SECTIONS)}), not only "
                        f"those that decide the defaults ({', '.join(DECIDING)})")
    parser.add_argument("--quick", action="store_true", help="one short round of each section (a smoke test)")
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
    args.omp_seconds = args.omp_seconds or (1.0 if args.quick else 2.0)
    args.omp_rounds = args.omp_rounds or (args.rounds if args.full or args.quick else 2)
    args.out = args.out or ROOT / "results" / "bench" / f"{device_slug(args.device)}.json"
    if args.full and args.only:
        parser.error("--full runs every section: leave out --only")
    args.merge = not args.full  # the default and --only merge into the existing JSON
    if args.only:
        args.only = args.only.split(",")
    else:  # OpenMP's wait policy is a CPU matter
        args.only = [s for s in (SECTIONS if args.full else DECIDING) if s != "omp" or args.device.type == "cpu"]
    if unknown := set(args.only) - set(SECTIONS):
        parser.error(f"--only {','.join(sorted(unknown))}: choose from {', '.join(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if policy := globals().get("POLICY"):  # a bad argument gets its error line alone
        print(policy, file=sys.stderr, flush=True)
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
                           "val_steps": args.val_steps, "omp_seconds": args.omp_seconds, "omp_rounds": args.omp_rounds},
                "flops": flops_per_token(model)}
        res.pop("compile", None)  # compile is the speed bar's to measure
        native_bf16 = speed.has_native_bf16(args.device)
        sections = {
            "peak": ("matmul peak", lambda: matmul_peak(args.device, args.sizes, args.inner, reps=10)),
            "speed_bar": ("mbexp's defaults against the plain loop, compile included", lambda: speed_bar(bench)),
            "throughput": (f"bare train_step loop against mbexp's trainer, {' and '.join(bench.precisions)}",
                           lambda: throughput(bench)),
            "variants": ("FFN variants and norms (bare loop)", lambda: variants(bench)),
            "axes": ("optim=muon vs adamw, attention soft-cap vs SDPA (bare loop)", lambda: axes(bench)),
            "norm_micro": ("the norms alone", lambda: norm_micro(bench)),
            "precision_auto": (f"fp32 against bf16 autocast, trainer, {args.val_steps} steps" if native_bf16 else
                               f"fp32 against bf16 autocast without native bf16, bare loop, {GLANCE_STEPS} steps",
                               lambda: precision_check(bench)),
            "omp": (f"OpenMP wait policies alone and beside a second job, and mbexp against the plain loop alone, "
                    f"child processes, {args.omp_rounds} rounds", lambda: omp_policy(bench)),
        }
        chosen = [name for name in SECTIONS if name in args.only]
        for i, name in enumerate(chosen):
            label, run = sections[name]
            log(f"[{i + 1}/{len(chosen)}] {name}: {label} ({time.perf_counter() - t_start:.0f} s so far)")
            t_section = time.perf_counter()
            when = {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "load_avg_before": os.getloadavg()[0],
                    "rounds": args.rounds}
            res[RESULT_KEY.get(name, name)] = run()
            res.setdefault("measured", {})[name] = when | {"load_avg_after": os.getloadavg()[0],
                                                           "wall_s": time.perf_counter() - t_section}
            write_json(args.out, res)  # a later section's failure keeps the earlier ones
            log(f"    {name} done in {time.perf_counter() - t_section:.0f} s")
    res["auto_precision"] = bench.auto  # as the record now says
    res["checks"] = checks(res)
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t_start
    write_json(args.out, res)
    # the printout shows this run's sections only; the JSON keeps earlier runs' others
    stale = {RESULT_KEY.get(name, name) for name in SECTIONS if name not in chosen}
    this_run = {k: v for k, v in res.items() if k not in stale}
    print(table(this_run | {"checks": checks(this_run)}))
    print(f"\nwrote {args.out} ({res['wall_s']:.0f} s)")
    if line := ratios(this_run):
        print(line)
    if "speed_bar" in this_run:
        print(verdict(this_run | {"checks": checks(this_run)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
