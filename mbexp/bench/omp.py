"""OMP_WAIT_POLICY=PASSIVE against OpenMP's own default: child processes (scripts/bench.py --omp-child) that
each time mbexp's eager step, alone and two side by side."""
import json
import os
import statistics
import subprocess
import sys

from mbexp import speed
from mbexp.bench.harness import ROOT, BareLoop, Bench, log, summarize
from mbexp.config import compose_config, model_spec, to_object
from mbexp.data import prepare

SCRIPT = ROOT / "scripts" / "bench.py"  # each child is the CLI, run with --omp-child


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
                    f"'{bench.args.omp_steps}']; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
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
