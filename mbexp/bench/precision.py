"""The trainer at fp32 and at bf16 autocast: against the bare loop (throughput), and against each other at one
seed and budget (precision_check, which writes precision=auto's measurement into the record)."""
import statistics
import time

from mbexp import speed
from mbexp.bench.harness import ESTIMATE, PRECISIONS, BareLoop, Bench, log, summarize

GLANCE_STEPS = 2  # timed steps of each precision where bf16 is not native (there it is an order of magnitude slower)


def throughput(bench: Bench) -> dict:
    """Bare loop and trainer, alternately (bare first in even rounds, trainer first in odd ones), at each
    precision worth timing here (Bench.precisions)."""
    args, precisions = bench.args, bench.precisions
    rates = {p: {"bare": [], "trainer": []} for p in precisions}
    val = {}
    for r in range(args.rounds):
        for p in precisions:
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
    for p in precisions:
        bare, trainer = summarize(rates[p]["bare"]), summarize(rates[p]["trainer"])
        out[p] = {"bare": bare | {"val_loss": val[p, "bare"]}, "trainer": trainer | {"val_loss": val[p, "trainer"]},
                  "trainer_over_bare": trainer[ESTIMATE] / bare[ESTIMATE],
                  "trainer_over_bare_median": trainer["median"] / bare["median"]}
    return out


def precision_check(bench: Bench) -> dict:
    """precision=fp32 against bf16 autocast: the trainer (eager), same seed and budget; recorded (mbexp.speed),
    so precision=auto picks bf16 from here on only if it was measurably faster at equal loss. Measured where
    bf16 runs natively (CUDA, a CPU with AVX512-BF16 or AMX); elsewhere precision=auto is fp32 unmeasured."""
    if not speed.has_native_bf16(bench.device):
        return {"measured": False, "auto": bench.auto, "without_native_bf16": bf16_glance(bench)}
    steps = bench.args.val_steps
    out = {}
    for precision in ("fp32", "bf16"):
        summary, rates = bench.trainer(precision, steps)
        out[precision] = summarize(rates) | {"final_val_loss": summary["final_val_loss"]}
        log(f"  precision={precision}: val loss {summary['final_val_loss']:.5f}, "
            f"best {out[precision]['best']:,.0f} tok/s")
    fp32, bf16 = out["fp32"], out["bf16"]
    res = out | {"measured": True, "steps": steps, "speedup": bf16[ESTIMATE] / fp32[ESTIMATE],
                 "speedup_median": bf16["median"] / fp32["median"],
                 "val_loss_rel_diff": (bf16["final_val_loss"] - fp32["final_val_loss"]) / fp32["final_val_loss"]}
    bench.record(precision={"fp32_tokens_s": fp32[ESTIMATE], "bf16_tokens_s": bf16[ESTIMATE],
                            "val_loss_rel_diff": res["val_loss_rel_diff"], "steps": steps,
                            "at": time.strftime("%Y-%m-%d %H:%M:%S")})
    return res | {"auto": bench.auto}


def bf16_glance(bench: Bench, steps: int = GLANCE_STEPS) -> dict:
    """A few steps of the bare loop at fp32 and at bf16 autocast, after a warm-up step each: enough to show how
    much slower bf16 is without native support, which is why the other sections time fp32 only there."""
    rates = {}
    for p in PRECISIONS:
        loop = BareLoop(bench.default, bench.data, bench.device, p)
        loop.first_step_s()
        rates[p] = loop.train(steps, window=steps)[0]
    ratio = rates["bf16"] / rates["fp32"]
    log(f"  no native bf16 here: bf16 autocast {rates['bf16']:,.0f} tok/s against fp32 {rates['fp32']:,.0f} "
        f"({ratio:.2f}x, {steps} steps each); precision=auto stays fp32, the other sections time fp32 only")
    return {"fp32_tokens_s": rates["fp32"], "bf16_tokens_s": rates["bf16"], "bf16_over_fp32": ratio, "steps": steps}
