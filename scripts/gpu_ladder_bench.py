"""`make gpu-ladder-bench`: how best to run a sweep of small models on one GPU (docs/gpu.md).

The same sweep (RUNS runs: seeds 0 .. RUNS-1 of the ReLU FFN, STEPS steps each, batch 128, data=bigtxt so no
network is needed, logger=none, compile off so every recipe runs the same eager kernels) is launched per model
size and recipe:

- sequential: Hydra's basic launcher, one process, one run after the other;
- joblib-N: `hydra/launcher=joblib hydra.launcher.n_jobs=N`, N runs sharing the GPU at once (N = 2, 4, 8).

Per (model, recipe) it records the sweep's wall time, the total throughput (every run's tokens over the
sweep's wall time, start-up and evaluation included: what a sweep costs) and the per-run throughput (each
run's median tokens/s over its log intervals, as summary.json has it), into results/bench/cuda.json under
"ladder_bench", and prints the fastest recipe per model. The JSON is rewritten after every sweep, so a run
stopped by a time limit keeps what it measured. Without CUDA (and --device cuda) it says so and exits 0;
`--device cpu` with a tiny budget checks the whole path on a laptop:

    python scripts/gpu_ladder_bench.py --device cpu --models tiny --jobs 2 --runs 2 --steps 5 --batch-size 4 \\
        --out /tmp/ladder_bench.json
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("tiny", "ladder192", "ladder384")  # the default model and two rungs of the GPU ladder (conf/model)
JOBS = (2, 4, 8)
KEY = "ladder_bench"


def log(msg: str) -> None:
    print(f"gpu-ladder-bench: {msg}", file=sys.stderr, flush=True)


def recipe_args(jobs: int) -> list[str]:
    """Hydra overrides of a recipe: 0 jobs is the basic (sequential) launcher."""
    return [] if jobs == 0 else ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]


def recipe_name(jobs: int) -> str:
    return "sequential" if jobs == 0 else f"joblib-{jobs}"


def sweep(model: str, jobs: int, args, tmp: Path) -> dict:
    """One sweep of args.runs runs of `model` under a recipe; its wall time and throughputs."""
    out = tmp / f"{model}-{recipe_name(jobs)}"
    cmd = [sys.executable, "-m", "mbexp.train", "-m", f"model={model}", "ffn=relu", "hidden=matched",
           f"seed={','.join(map(str, range(args.runs)))}", f"device={args.device}", f"train.steps={args.steps}",
           f"train.batch_size={args.batch_size}", f"train.eval_every={args.steps}",
           f"train.checkpoint_every={args.steps}", "train.progress=false", "compile=false", "optim.lr=1e-3",
           "optim.warmup_steps=0", "logger=none", "name=ladder_bench", f"data.cache_dir={args.cache_dir}",
           f"results_dir={out}", f"hydra.sweep.dir={out}/multirun", *recipe_args(jobs)]
    log("$ python " + " ".join(cmd[1:]))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        rc, tail = 124, f"timed out after {args.timeout} s"
    wall = time.perf_counter() - t0
    done = [json.loads(p.read_text()) for p in sorted(out.glob("runs/**/summary.json"))]
    done = [s for s in done if s.get("status") == "completed"]
    tokens = sum(s["tokens_seen"] for s in done)
    per_run = [s["tokens_per_s_median"] for s in done if s.get("tokens_per_s_median")]
    result = {"recipe": recipe_name(jobs), "jobs": max(jobs, 1), "rc": rc, "runs_completed": len(done),
              "wall_s": round(wall, 1), "tokens": tokens, "tokens_per_s_total": round(tokens / wall),
              "tokens_per_s_per_run": round(statistics.median(per_run)) if per_run else None,
              "params_non_embedding": done[0]["params_non_embedding"] if done else None}
    if rc or len(done) < args.runs:
        result["tail"] = tail
    log(f"{model} {result['recipe']}: {len(done)}/{args.runs} runs, {result['wall_s']} s, "
        f"{result['tokens_per_s_total']:,} tokens/s in total, {result['tokens_per_s_per_run']} per run")
    return result


def fastest(results: dict) -> dict:
    """Per model, the recipe with the most tokens/s in total among sweeps that completed every run."""
    best = {}
    for model, measured in results.items():
        sweeps = measured["recipes"]
        whole = [s for s in sweeps if not s["rc"] and "tail" not in s]
        if whole:
            top = max(whole, key=lambda s: s["tokens_per_s_total"])
            best[model] = {"recipe": top["recipe"], "tokens_per_s_total": top["tokens_per_s_total"],
                           "speedup_vs_sequential": _speedup(top, sweeps)}
    return best


def _speedup(top: dict, sweeps: list[dict]) -> float | None:
    seq = next((s for s in sweeps if s["recipe"] == "sequential" and s["tokens_per_s_total"]), None)
    return round(top["tokens_per_s_total"] / seq["tokens_per_s_total"], 2) if seq else None


def read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def write(path: Path, report: dict) -> None:
    """Put `report` into the JSON at `path` under KEY, keeping its other keys (make gpu-check's)."""
    from mbexp.io import write_json

    write_json(path, read(path) | {KEY: report})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--models", default=",".join(MODELS), help=f"model presets (default {','.join(MODELS)})")
    parser.add_argument("--jobs", default=",".join(map(str, JOBS)),
                        help="joblib job counts besides the sequential sweep (default 2,4,8)")
    parser.add_argument("--runs", type=int, default=8, help="runs per sweep (default 8: one each for 8 jobs)")
    parser.add_argument("--steps", type=int, default=150, help="steps per run (default 150)")
    parser.add_argument("--batch-size", type=int, default=128, help="sequences per step (default 128)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per sweep (default 600)")
    parser.add_argument("--cache-dir", default="data_cache", help="token cache (default data_cache)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "cuda.json")
    args = parser.parse_args(argv)
    try:
        jobs = [0, *(int(j) for j in args.jobs.split(",") if j)]
    except ValueError:
        print(f"error: --jobs takes comma-separated integers, got {args.jobs!r}", file=sys.stderr)
        return 2
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if not (ROOT / "conf" / "model" / f"{m}.yaml").is_file()]
    if unknown or min(jobs[1:], default=1) < 1 or args.runs < 1 or args.steps < 1:
        print(f"error: unknown model presets {unknown}" if unknown else
              "error: --jobs, --runs and --steps must be positive", file=sys.stderr)
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu-ladder-bench: no CUDA device visible; nothing to measure on this machine "
                  "(--device cpu checks the path)")
            return 0
        device = torch.cuda.get_device_name(0)
    else:
        device = "cpu"
    report = read(args.out).get(KEY, {"results": {}})  # a call per model adds to the models measured before
    how = f"python scripts/gpu_ladder_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    with tempfile.TemporaryDirectory(prefix="mbexp-ladder-bench-") as tmp:
        for model in models:
            report["results"][model] = {
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": device, "how": how,
                "sweep": {"runs": args.runs, "steps": args.steps, "batch_size": args.batch_size, "compile": False},
                "recipes": []}
            for j in jobs:
                report["results"][model]["recipes"].append(sweep(model, j, args, Path(tmp)))
                report["fastest"] = fastest(report["results"])
                write(args.out, report)
    for model, best in report["fastest"].items():
        if model not in models:
            continue
        print(f"{model:12s} fastest: {best['recipe']:12s} {best['tokens_per_s_total']:>12,} tokens/s in total "
              f"({best['speedup_vs_sequential']}x sequential)")
    failed = [f"{m}/{s['recipe']}" for m in models for s in report["results"][m]["recipes"] if s["rc"]]
    print(f"gpu-ladder-bench: {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}; wrote {args.out} [{KEY}]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
