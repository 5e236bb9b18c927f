"""What the bench writes beside its measurements and prints at the end: the machine, the FLOPs per token, the
checks, the side-by-side table and the speed bar's one-line verdict."""
import os
import platform
import re
from pathlib import Path

import torch

from mbexp import speed, wait_policy
from mbexp.bench.harness import PRECISIONS
from mbexp.bench.speed_bar import SPEED_BAR
from mbexp.model import DecoderLM, flops_terms
from mbexp.model import flops_per_token as model_flops_per_token
from mbexp.run.summary import FLOPS_FORMULA, N_MATMUL
from mbexp.speed import MIN_SPEEDUP, VAL_LOSS_TOLERANCE

TRAINER_MIN_RATIO = 0.95  # the trainer must reach this share of the bare loop's tokens/s
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS", "KMP_BLOCKTIME")


def device_slug(device: torch.device) -> str:
    """'cpu', or the GPU's name as a file name (e.g. nvidia-h100-80gb-hbm3)."""
    if device.type != "cuda":
        return device.type
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


def machine_info(device: torch.device) -> dict:
    cpuinfo = speed.cpuinfo()
    isa = speed.cpu_isa()
    info = {"device": str(device), "cpu": speed.cpu_model(cpuinfo) or platform.processor(), "cpu_isa": isa,
            "cpu_bf16": speed.native_bf16(isa), "machine_key": speed.machine_key(device), "cpu_count": os.cpu_count(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "load_avg_start": os.getloadavg()[0],
            "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
            "wait_policy": wait_policy.in_force(), "openmp_runtime": wait_policy.runtime(maps())}
    if device.type == "cuda":
        info |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    return info


def flops_per_token(model: DecoderLM) -> dict:
    """Training FLOPs per token, by the formula the run summaries record (mbexp.model.flops_per_token)."""
    return {"formula": FLOPS_FORMULA, "n_matmul_note": N_MATMUL, **flops_terms(model),
            "flops_per_token": model_flops_per_token(model)}


def checks(res: dict) -> dict[str, bool]:
    out = {}
    if tp := res.get("throughput"):
        out |= {f"trainer reaches {TRAINER_MIN_RATIO} of the bare loop's tokens/s at {p} "
                f"({tp[p]['trainer_over_bare']:.3f})": tp[p]["trainer_over_bare"] >= TRAINER_MIN_RATIO
                for p in tp}
    if sb := res.get("speed_bar"):
        out |= bar_checks(sb)
    return out


def bar_checks(sb: dict) -> dict[str, bool]:
    """The speed bar's checks: each default precision reaches its bar steady, and a whole run is not slower."""
    out, bar = {}, {"auto": sb["bar"], "fp32": SPEED_BAR["fp32"]}
    for key, d in sb["defaults"].items():
        what = f"precision={key} -> {d['precision']}, compile=auto -> {'compiled' if d['compiled'] else 'eager'}"
        out |= {f"mbexp's defaults ({what}) reach {bar[key]}x the plain loop's steady tokens/s "
                f"({d['steady_ratio']:.2f}x)": d["steady_ratio"] >= bar[key],
                f"a whole {sb['whole_run_steps']:,}-step run with them ({what}) is not slower than the plain "
                f"loop's, compile included ({d['whole_run_ratio']:.2f}x, extrapolated)": d["whole_run_ratio"] >= 1}
    return out


def table(res: dict) -> str:
    """The side-by-side summary printed at the end; sections not measured are left out."""
    m, fl, cfg = res["machine"], res["flops"]["flops_per_token"], res["config"]

    def row(label, *cells):
        return f"{label:<38}" + "".join(f"{c:>16}" for c in cells)

    lines = [
        f"mbexp bench on {res['device']}: {m.get('gpu', m['cpu'])}, {m['torch_threads']} threads, torch {m['torch']}, "
        f"load average {m['load_avg_start']:.1f} -> {m['load_avg_end']:.1f}",
        f"model={cfg['model']} ({cfg['params']:,} params), batch {cfg['batch_size']} x seq_len {cfg['seq_len']}; "
        f"every loop calls mbexp.trainer.train_step; compared loops alternate in {cfg['rounds']} rounds;",
        f"tokens/s: the best {cfg['window']}-step window (median beside it), first window of each run skipped",
        f"FLOPs/token = {FLOPS_FORMULA} = 6*{res['flops']['n_matmul']:,} + {res['flops']['attention']:,} "
        f"= {fl / 1e6:.2f} MFLOP",
        f"  {N_MATMUL}",
    ]
    if sb := res.get("speed_bar"):
        loops, n = sb["loops"], sb["whole_run_steps"]
        plain = loops["plain"]
        lines += [
            "",
            f"speed bar: eager and compiled at each precision precision=auto may pick, against a plain nanoGPT-style "
            f"loop (fp32, eager); whole {n:,}-step runs extrapolated",
            row("", *(f"{loops[k]['precision']} {'compiled' if loops[k]['compiled'] else 'eager'}" for k in loops)),
            row("steady tokens/s (best window)", *(f"{d['best']:,.0f}" for d in loops.values())),
            row("  median tokens/s", *(f"{d['median']:,.0f}" for d in loops.values())),
            row("  / plain loop (fp32 eager)", *(f"{d['best'] / plain['best']:.2f}x" for d in loops.values())),
            row("first step s (compile, cold cache)", *(f"{d['first_step_s']:.1f}" for d in loops.values())),
            row(f"whole {n:,}-step run s", *(f"{sb['whole_run_s'][k]:.0f}" for k in loops)),
        ]
        for p, t in sb["compile"].items():
            lines.append(f"{p}: compile {t['compile_s']:.1f} s (again in one process {t['compile_again_s']:.2f} s), "
                         f"{1000 * t['eager_step_s']:.1f} ms/step eager, {1000 * t['compiled_step_s']:.1f} compiled; "
                         f"compiling {_pays(sb['break_even_steps_vs_eager'][p])}")
        for key, d in sb["defaults"].items():
            lines.append(f"defaults at precision={key}: {d['precision']}, compile=auto -> "
                         f"{'compiled' if d['compiled'] else 'eager'} (from the record): {d['steady_ratio']:.2f}x the "
                         f"plain loop steady, {d['whole_run_ratio']:.2f}x over a whole {n:,}-step run")
    if tp := res.get("throughput"):
        ps, peak = list(tp), res.get("peak_flops")
        both = ps == list(PRECISIONS)  # a bf16/fp32 column where both were timed

        def cells(values: dict, fmt: str) -> list[str]:
            return [format(values[p], fmt) for p in ps] + ([f"{values['bf16'] / values['fp32']:.2f}x"] if both else [])

        mfu = "; MFU = tokens/s x FLOPs/token / the measured matmul peak at the same precision" if peak else ""
        lines += ["", f"the bare train_step loop against mbexp's trainer{mfu}",
                  row("", *ps, *(["bf16/fp32"] if both else []))]
        if peak:
            lines.append(row("peak matmul GFLOP/s", *cells({p: peak[p]["flops"] / 1e9 for p in ps}, ",.0f")))
        for mode, label in (("bare", "bare train_step loop"), ("trainer", "mbexp trainer")):
            lines += [row(f"{label} tokens/s", *cells({p: tp[p][mode]["best"] for p in ps}, ",.0f")),
                      row("  median tokens/s", *cells({p: tp[p][mode]["median"] for p in ps}, ",.0f"))]
            if peak:
                lines.append(row("  MFU", *(f"{100 * tp[p][mode]['best'] * fl / peak[p]['flops']:.1f}%" for p in ps)))
            lines.append(row("  val loss after the run", *(f"{tp[p][mode]['val_loss']:.5f}" for p in ps)))
        lines += [row("trainer / bare", *(f"{tp[p]['trainer_over_bare']:.3f}" for p in ps)),
                  row("  (medians)", *(f"{tp[p]['trainer_over_bare_median']:.3f}" for p in ps))]
    if (pc := res.get("precision_auto")) and (glance := pc.get("without_native_bf16")):
        lines += ["", f"no native bf16: bf16 autocast {glance['bf16_tokens_s']:,.0f} tokens/s against fp32 "
                      f"{glance['fp32_tokens_s']:,.0f} ({glance['bf16_over_fp32']:.2f}x, bare loop, "
                      f"{glance['steps']} steps each): precision=auto stays fp32, bf16 is timed no further"]
    if (pc := res.get("precision_auto")) and pc["measured"]:
        a, b = pc["fp32"], pc["bf16"]
        lines += [
            "",
            f"precision=fp32 against bf16 autocast: the trainer, eager, seed 0, {pc['steps']} steps each; "
            f"precision=auto -> {pc['auto']} (bf16 where >= {MIN_SPEEDUP}x, val loss within "
            f"{VAL_LOSS_TOLERANCE:.0%})",
            row("", "fp32", "bf16", "bf16/fp32"),
            row("trainer tokens/s", f"{a['best']:,.0f}", f"{b['best']:,.0f}", f"{pc['speedup']:.2f}x"),
            row("  median tokens/s", f"{a['median']:,.0f}", f"{b['median']:,.0f}", f"{pc['speedup_median']:.2f}x"),
            row("final val loss (nats/token)", f"{a['final_val_loss']:.5f}", f"{b['final_val_loss']:.5f}",
                f"{100 * pc['val_loss_rel_diff']:+.2f}%"),
        ]
    if v := res.get("variants"):
        lines += [
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
        if nm := res.get("norm_micro"):
            rms = v["norm=rms"]["step_ms_best"]
            lines.append(f"LayerNorm vs RMSNorm: whole step (ffn=relu) {ref:.1f} vs {rms:.1f} ms (rms/layer "
                         f"{rms / ref:.3f}); the norm alone, fwd+bwd on ({cfg['batch_size']}, {cfg['seq_len']}, "
                         f"d_model): {nm['layer']['us_best']:.0f} vs {nm['rms']['us_best']:.0f} us "
                         f"(rms/layer {nm['rms']['us_best'] / nm['layer']['us_best']:.2f})")
    if ax := res.get("axes"):
        lines += ["", "per-step cost, bare loop, side by side: new / what it replaces (best, median)"]
        for ratio in ("muon_over_adamw", "attn_softcap_over_sdpa"):
            lines.append(f"{ratio:<24}{ax[ratio]['best']:>8.3f}x{ax[ratio]['median']:>8.3f}x")
    if om := res.get("omp"):
        lines += omp_lines(om)
    lines += ["", *(f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in res["checks"].items())]
    return "\n".join(lines)


def omp_lines(om: dict) -> list[str]:
    """The wait-policy section: tokens/s per job of each policy alone and beside a second job (and its share of
    the best policy's), then mbexp's defaults against the plain loop, alone."""
    lines = ["", f"OpenMP wait policy ({om['runtime']}; child processes, bare loop, tokens/s per job, median over "
                 f"rounds, / the best policy there); mbexp: {om['rule_alone']} alone, {om['rule_shared']} shared"]
    for precision, res in om["by_precision"].items():
        lines.append(f"{precision:<26}{'alone':>16}{'':>8}{'beside a 2nd job':>18}{'':>8}")
        for name, d in res.items():
            lines.append(f"  {name:<24}" + "".join(f"{d[sc]['median']:>16,.0f}{d[sc]['over_best']:>7.2f}x"
                                                   for sc in ("alone", "beside_second_job")))
    v = om["versus_plain_loop"]
    what = {k: f"{d['precision']} {'compiled' if d['compiled'] else 'eager'}, {d['policy']}" for k, d in v.items()}
    lines.append(f"alone: mbexp's defaults ({what['mbexp_default']}) {v['mbexp_default']['median']:,.0f} tokens/s, "
                 f"the plain loop ({what['plain_loop']}) {v['plain_loop']['median']:,.0f}: "
                 f"{om['mbexp_default_over_plain_loop_alone']:.2f}x")
    return lines


def maps() -> str:
    """This process's memory map: the shared libraries it has loaded (torch's OpenMP runtime among them)."""
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def verdict(res: dict) -> str:
    """The speed bar's verdict in one line."""
    sb, m = res["speed_bar"], res["machine"]
    where = m.get("gpu") or f"{m['cpu']} [{' '.join(m['cpu_isa']) or 'no AVX2/AVX512/AMX'}]"
    bar = bar_checks(sb)
    ok = bool(bar) and all(bar.values())
    parts = [f"precision={k} -> {d['precision']} {'compiled' if d['compiled'] else 'eager'} "
             f"{d['steady_ratio']:.2f}x steady, {d['whole_run_ratio']:.2f}x whole run"
             for k, d in sb["defaults"].items()]
    return (f"speed bar {'PASS' if ok else 'FAIL'} on {where}: {'; '.join(parts)} "
            f"(bar {sb['bar']}x at precision=auto, {SPEED_BAR['fp32']}x at fp32)")


def _pays(steps: float | None) -> str:
    return "never pays" if steps is None else f"pays after {steps:,.0f} steps"


def ratios(res: dict) -> str:
    """The two ratios `make bench` ends with: the trainer against the bare loop, the defaults against the plain loop."""
    parts = []
    if tp := res.get("throughput"):
        parts.append("trainer / bare loop " + ", ".join(f"{p} {tp[p]['trainer_over_bare']:.2f}x" for p in tp))
    if sb := res.get("speed_bar"):
        parts.append("defaults / plain loop " + ", ".join(
            f"precision={k} ({d['precision']} {'compiled' if d['compiled'] else 'eager'}) {d['steady_ratio']:.2f}x "
            f"steady" for k, d in sb["defaults"].items()) + " (one process, one environment)")
    if om := res.get("omp"):
        ratio = om["mbexp_default_over_plain_loop_alone"]
        parts.append(f"defaults / plain loop under OpenMP's default, alone {ratio:.2f}x")
    return "; ".join(parts)
