"""`make gpu-check`: what a CUDA machine should show, in one command, written to results/bench/cuda.json.

1. the test suite's fast tier (`pytest -m "not slow"`): on a CUDA machine its runs train on the GPU
   (device=auto), so this is every test that can run there;
2. `scripts/bench.py --device cuda --full` (what `make bench-full` runs there: bf16, compile, MFU against the peak);
3. 200 steps of each GPU-sized experiment preset on data=bigtxt (embedded, so no network is needed),
   one run each at the preset's default axes, in a temporary results folder.

Every step runs even if an earlier one failed; the exit status is 1 if any failed. Without CUDA it
says so in one line and exits 0. On a node without network, install from a wheelhouse first
(docs/gpu.md, "offline GPU nodes").

    python scripts/gpu_check.py [--steps N] [--out PATH] [--skip tests,bench,presets]
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_PRESETS = ("shazeer_ffn", "norm_placement", "warmup_sensitivity")  # conf/experiment, sized for a GPU
STEPS = ("tests", "bench", "presets")
SUMMARY_KEYS = ("status", "steps", "final_val_loss", "final_test_loss", "tokens_per_s", "tokens_per_s_median",
                "params", "wall_time_s", "compiled", "compile_s", "precision", "device")


def log(msg: str) -> None:
    print(f"gpu-check: {msg}", file=sys.stderr, flush=True)


def cuda_status() -> str | None:
    """None when a CUDA device is usable, else the one-line reason why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        return f"no CUDA device visible (torch {torch.__version__}, {build})"
    return None


def run(cmd: list[str], timeout: float, **kw) -> dict:
    """Run `cmd` from the repository root; its exit code, wall time and the tail of its output."""
    log("$ " + " ".join(cmd))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:  # its captured output is bytes, whatever text= says
        partial = b"".join(x if isinstance(x, bytes) else x.encode() for x in (exc.stdout, exc.stderr) if x)
        rc, out = 124, partial.decode(errors="replace") + f"\ntimed out after {timeout:.0f} s"
    return {"cmd": " ".join(cmd), "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "tail": out[-3000:]}


def tests() -> dict:
    res = run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"], timeout=1800)
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", res["tail"]))
    return res | {"counts": counts}


def bench(tmp: Path) -> dict:
    out = tmp / "bench.json"
    res = run([sys.executable, "scripts/bench.py", "--device", "cuda", "--full", "--out", str(out)], timeout=3600)
    if out.is_file():
        res["result"] = json.loads(out.read_text())
    return res


def presets(tmp: Path, steps: int) -> dict:
    results = {}
    for name in GPU_PRESETS:
        res = run([sys.executable, "-m", "mbexp.train", f"+experiment={name}", "data=bigtxt", "device=cuda",
                   f"train.steps={steps}", f"train.eval_every={max(1, steps // 2)}", "train.progress=false",
                   "compile=true",  # as the presets' own 4,000-step runs do (compile=auto), not the short check's
                   "logger=none", f"results_dir={tmp / name}"], timeout=1800)
        found = sorted((tmp / name).glob("runs/**/summary.json"))
        if found:
            summary = json.loads(found[0].read_text())
            res["summary"] = {k: summary.get(k) for k in SUMMARY_KEYS if k in summary}
            res["summary"]["variant"] = summary.get("variant")
            if summary.get("status") != "completed":
                res["rc"] = res["rc"] or 1
        results[name] = res
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="steps of each preset's run (default 200)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "cuda.json")
    parser.add_argument("--skip", default="", help=f"comma-separated steps to leave out: {', '.join(STEPS)}")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    if unknown := skip - set(STEPS):
        parser.error(f"--skip {','.join(sorted(unknown))}: valid steps are {', '.join(STEPS)}")
    if reason := cuda_status():
        print(f"gpu-check: {reason}; nothing to check on this machine (run it where CUDA is)")
        return 0

    import torch

    from mbexp.io import write_json

    report = {"machine": {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
                          "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                          "host": platform.node(), "cpu_count": os.cpu_count()},
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with tempfile.TemporaryDirectory(prefix="mbexp-gpu-check-") as tmp:
        if "tests" not in skip:
            report["tests"] = tests()
        if "bench" not in skip:
            report["bench"] = bench(Path(tmp))
        if "presets" not in skip:
            report["presets"] = presets(Path(tmp), args.steps)
    failed = [name for name in ("tests", "bench") if report.get(name, {}).get("rc")]
    failed += [f"presets/{n}" for n, r in report.get("presets", {}).items() if r["rc"]]
    report["ok"], report["failed"] = not failed, failed
    write_json(args.out, report)
    for name, res in report.get("presets", {}).items():
        s = res.get("summary", {})
        print(f"{name:20s} {s.get('status', 'no summary'):10s} val log-ppl {s.get('final_val_loss')}  "
              f"tokens/s {s.get('tokens_per_s')}")
    print(f"gpu-check: {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}; wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
