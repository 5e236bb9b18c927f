"""The model's parts timed: the matmul peak per precision, the step of each FFN variant and norm, the norms alone,
Muon and the attention soft-cap against what they replace."""
import statistics
import time

import torch

from mbexp.bench.harness import PRECISIONS, BareLoop, Bench, sync
from mbexp.config import model_spec
from mbexp.model import param_counts
from mbexp.model.ffn import FFNS
from mbexp.model.norms import NORMS, build_norm
from mbexp.run.state import tokens_per_step
from mbexp.trainer import autocast

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


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


def step_times(bench: Bench, names: dict[str, tuple[str, ...]]) -> dict[str, tuple[BareLoop, list[float]]]:
    """Each named override set's bare loop at precision=auto and its ms per step; the loops alternate in every
    round (the order reversed every other round), so a load that comes and goes weighs on each alike."""
    args = bench.args
    loops = {}
    for name, overrides in names.items():
        loops[name] = BareLoop(bench.cfg(*overrides), bench.data, bench.device, bench.auto)
        loops[name].train(2, window=2)  # warm-up
    step_ms = {name: [] for name in names}
    tokens = tokens_per_step(bench.default)
    for r in range(args.rounds):
        for name in list(loops)[:: 1 if r % 2 == 0 else -1]:
            rates = loops[name].train(args.variant_steps, window=args.variant_window)
            step_ms[name] += [1000 * tokens / rate for rate in rates]
    return {name: (loops[name], step_ms[name]) for name in names}


def variants(bench: Bench) -> dict:
    """Step time of each FFN variant (LayerNorm) and of RMSNorm (ReLU FFN), bare loop at precision=auto."""
    names = {f"ffn={f}": ("norm=layer", f"ffn={f}") for f in FFNS} | {"norm=rms": ("norm=rms", "ffn=relu")}
    return {name: {"step_ms_best": min(ms), "step_ms_median": statistics.median(ms), "all": ms,
                   "d_ff": loop.model.spec.d_ff, "params": param_counts(loop.model)["total"]}
            for name, (loop, ms) in step_times(bench, names).items()}


# each ratio's two override sets, measured side by side: the new option over what it replaces
AXES_RATIOS = {"muon_over_adamw": (("optim=muon",), ()),
               "attn_softcap_over_sdpa": (("model.attn_softcap=50",), ())}


def axes(bench: Bench) -> dict:
    """Step time of optim=muon against adamw and of soft-capped attention against SDPA, and their ratios (best
    and median ms per step), every loop alternating with the others."""
    names = {" ".join(o) or "default": o for pair in AXES_RATIOS.values() for o in pair}
    times = {name: ms for name, (_, ms) in step_times(bench, names).items()}
    out = {name: {"step_ms_best": min(ms), "step_ms_median": statistics.median(ms), "all": ms}
           for name, ms in times.items()}
    for ratio, (new, old) in AXES_RATIOS.items():
        a, b = out[" ".join(new) or "default"], out[" ".join(old) or "default"]
        out[ratio] = {"best": a["step_ms_best"] / b["step_ms_best"],
                      "median": a["step_ms_median"] / b["step_ms_median"]}
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
