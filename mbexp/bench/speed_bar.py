"""The speed bar: mbexp's defaults (eager or compiled, as compile=auto decides from the record) against a plain
nanoGPT-style loop, steady and over a whole run with the compile time; the compile timings go into the record."""
import time

from mbexp import speed
from mbexp.bench.harness import ESTIMATE, BareLoop, Bench, log, summarize
from mbexp.run.state import tokens_per_step

# mbexp's defaults against the plain loop, steady-state tokens/s, by the precision precision=auto resolves to:
# 1.3x where bf16 runs natively; without it never below the plain loop
SPEED_BAR = {"bf16": 1.3, "fp32": 1.0}
WHOLE_RUN_STEPS = 2000  # ... and the whole run of this many steps, compile included


def speed_bar(bench: Bench) -> dict:
    """mbexp's defaults for a WHOLE_RUN_STEPS-step run against the plain loop (fp32, eager). Measures eager and
    compiled at each precision precision=auto may pick here (fp32; bf16 where it runs natively), alternating
    every round, records them (mbexp.speed) and takes the defaults, at precision=auto and at precision=fp32,
    to be what compile=auto decides from that record: steady tokens/s, compile time, the whole run
    extrapolated, the step counts after which compiling pays."""
    args, window, device = bench.args, bench.args.window, bench.device
    precisions = bench.precisions
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
    tokens = tokens_per_step(bench.default)
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
