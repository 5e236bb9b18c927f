"""OpenMP's wait policy, in child processes (scripts/bench.py --omp-child) that each time the bare loop under
one policy, read when the child's torch loads OpenMP: every policy alone and beside a second identical job, at
each precision; and mbexp under its defaults against the plain loop under OpenMP's default, alone."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mbexp import speed, wait_policy
from mbexp.bench.harness import ROOT, BareLoop, Bench, log, summarize
from mbexp.bench.report import maps
from mbexp.bench.speed_bar import WHOLE_RUN_STEPS
from mbexp.config import compose_config, to_object
from mbexp.data import prepare

SCRIPT = ROOT / "scripts" / "bench.py"  # each child is the CLI, run with --omp-child
SCENARIOS = {"alone": 1, "beside_second_job": 2}  # identical jobs started together
WINDOW = 2  # steps per timing window: short, so that a child stalled beside another still ends soon


def omp_child(args) -> dict:
    """In a child process: tokens/s of the bare loop at --omp-precision (compiled with --omp-compile) under the
    policy this process started with, in WINDOW-step windows for --omp-seconds, timed from when all --omp-jobs
    children started together have warmed up (the barrier folder --omp-barrier), so that they overlap."""
    cfg = to_object(compose_config([f"data.cache_dir={ROOT / 'data_cache'}", "logger=none", *args.overrides]))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    loop = BareLoop(cfg, data, args.device, args.omp_precision, compile=args.omp_compile)
    loop.train(WINDOW, window=WINDOW)  # warm-up (the compile, when compiled)
    barrier = Path(args.omp_barrier)
    (barrier / str(os.getpid())).touch()
    while len(list(barrier.iterdir())) < args.omp_jobs:
        time.sleep(0.01)
    rates, t0 = [], time.perf_counter()
    while not rates or time.perf_counter() - t0 < args.omp_seconds:
        rates += loop.train(WINDOW, window=WINDOW)
    return {"tokens_per_s": statistics.median(rates), "best": max(rates), "windows": len(rates),
            "load_avg": os.getloadavg()[0], "policy": wait_policy.in_force()}


def run_children(bench: Bench, env: dict, n: int, precision: str, compiled: bool = False) -> float:
    """Start n identical children under the wait policy `env` (nothing else of POLICY_ENV inherited): their
    mean tokens/s per job."""
    args = bench.args
    child_env = {k: v for k, v in os.environ.items() if k not in wait_policy.POLICY_ENV} | env
    with tempfile.TemporaryDirectory(prefix="mbexp-omp-") as barrier:
        argv = [sys.executable, str(SCRIPT), "--omp-child", "--device", bench.device.type, "--omp-seconds",
                str(args.omp_seconds), "--omp-precision", precision, "--omp-jobs", str(n), "--omp-barrier", barrier,
                *(["--omp-compile"] if compiled else []), *args.overrides]
        procs = [subprocess.Popen(argv, env=child_env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(n)]
        got = []
        for proc in procs:
            out, err = proc.communicate()
            if proc.returncode:
                raise RuntimeError(f"an --omp-child failed (exit {proc.returncode}): {err.strip()[-2000:]}")
            got.append(json.loads(out.strip().splitlines()[-1]))
    return statistics.mean(g["tokens_per_s"] for g in got)


def omp_policy(bench: Bench) -> dict:
    """Each wait policy (PASSIVE, OpenMP's default, two bounded spins in this runtime's variable) alone and
    beside a second job, at each precision precision=auto may pick; then mbexp's defaults (precision=auto,
    compile=auto, the wait policy it chooses alone) against the plain loop (fp32 eager, no policy set), alone.
    Every comparison alternates its order every round."""
    runtime = wait_policy.runtime(maps())
    envs = [wait_policy.PASSIVE, wait_policy.OPENMP_DEFAULT, *wait_policy.bounded_spins(runtime)]
    policies = {wait_policy.describe(env): env for env in envs}
    compiled = speed.resolve_compile("auto", bench.device, WHOLE_RUN_STEPS, bench.auto, bench.found)
    versus = {"plain_loop": (wait_policy.OPENMP_DEFAULT, "fp32", False),
              "mbexp_default": (wait_policy.ALONE, bench.auto, compiled)}
    rates = {p: {name: {sc: [] for sc in SCENARIOS} for name in policies} for p in bench.precisions}
    alone = {name: [] for name in versus}
    for r in range(bench.args.omp_rounds):
        turn = 1 if r % 2 == 0 else -1
        for precision in bench.precisions[::turn]:
            for name, env in list(policies.items())[::turn]:
                for scenario, n in SCENARIOS.items():
                    rates[precision][name][scenario].append(run_children(bench, env, n, precision))
                    log(f"  round {r + 1} {precision} {name:22} {scenario:18} "
                        f"{rates[precision][name][scenario][-1]:9,.0f} tok/s per job")
        for name, (env, precision, comp) in list(versus.items())[::turn]:
            alone[name].append(run_children(bench, env, 1, precision, comp))
            log(f"  round {r + 1} {name:15} alone {alone[name][-1]:9,.0f} tok/s")
    by_precision = {}
    for precision, table in rates.items():
        res = {name: {sc: summarize(v) for sc, v in d.items()} for name, d in table.items()}
        for sc in SCENARIOS:  # what each policy loses against the best one in this scenario
            best = max(res[name][sc]["median"] for name in policies)
            for name in policies:
                res[name][sc]["over_best"] = res[name][sc]["median"] / best
        by_precision[precision] = res
    versus_res = {name: summarize(alone[name]) | {"policy": wait_policy.describe(env), "precision": p,
                                                  "compiled": c} for name, (env, p, c) in versus.items()}
    return {"runtime": wait_policy.RUNTIMES.get(runtime, runtime), "window": WINDOW, "policies": policies,
            "machine_key": speed.machine_key(bench.device), "rule_alone": wait_policy.describe(wait_policy.ALONE),
            "rule_shared": wait_policy.describe(wait_policy.SHARED), "by_precision": by_precision,
            "versus_plain_loop": versus_res,
            "mbexp_default_over_plain_loop_alone": (versus_res["mbexp_default"]["median"]
                                                    / versus_res["plain_loop"]["median"]),
            "note": "tokens/s per job: the median over rounds of each child's median window; each child's first "
                    "window (the compile, when compiled) is warm-up, and side-by-side children time together"}

