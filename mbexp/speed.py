"""precision=auto and compile=auto: what was measured faster on this machine for this shape of run, else a rule
from the measurements below. Pure rules; the record is a JSON file `make bench` writes (scripts/bench.py).

The record, `<data.cache_dir>/speed.json` (beside inductor's cache), is keyed by the machine (device, CPU model
and ISA flags or GPU name, torch version, threads) and then by the run's shape (the ModelSpec and batch size):
    {machine: {shape: {"about": {...}, "precision": {...}, "compile": {"fp32": {...}, "bf16": {...}}}}}
"""

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path

import torch

from mbexp.io import is_number, write_json

RECORD_FILE = "speed.json"
PRECISION_KEYS = ("fp32_tokens_s", "bf16_tokens_s", "val_loss_rel_diff")  # what a precision measurement holds
COMPILE_KEYS = ("eager_step_s", "compiled_step_s", "compile_s")  # ... and a compile measurement, per precision
# The ISA flags (of /proc/cpuinfo) that decide CPU speed here: bf16 matmuls need AVX512-BF16 or AMX.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
MIN_SPEEDUP = 1.05  # "measurably faster": beyond the few-% spread of identical runs on a shared machine
VAL_LOSS_TOLERANCE = 0.01  # bf16 autocast counts as "equal loss" within 1% of fp32's final val loss
# compile=auto with a record: compile when the run pays the (cold-cache) compile time back PAYBACK times over,
# so a noisy break-even estimate cannot make a run slower than eager.
PAYBACK = 1.5
# compile=auto without a record: the run length from which compiling paid, by device type and precision (None:
# never), as `make bench` measured it (docs/speed.md for the CPUs, docs/gpu.md for CUDA; fp32 CUDA follows bf16).
COMPILE_MIN_STEPS = {("cpu", "bf16"): 1000, ("cpu", "fp32"): None, ("cuda", "bf16"): 3500, ("cuda", "fp32"): 3500}


def cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_model(info: str) -> str:
    """The CPU's model name in /proc/cpuinfo text ('' when it has none)."""
    found = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    return found.group(1).strip() if found else ""


def isa_flags(info: str) -> list[str]:
    """The ISA_FLAGS this CPU has, from /proc/cpuinfo text."""
    found = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    have = set(found.group(1).split()) if found else set()
    return [f for f in ISA_FLAGS if f in have]


def cpu_isa() -> list[str]:
    """This CPU's ISA_FLAGS that torch's kernels may use: none of AVX512 or AMX unless torch's CPU capability (which
    ATEN_CPU_CAPABILITY can lower) is AVX512, as its bf16 kernels then refuse to run."""
    flags = isa_flags(cpuinfo())
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        flags = [f for f in flags if not f.startswith(("avx512", "amx"))]
    return flags


def native_bf16(flags: list[str]) -> bool:
    """Whether a CPU with these ISA flags has bf16 matmul instructions (AVX512-BF16 or AMX)."""
    return "avx512_bf16" in flags or "amx_bf16" in flags


def has_native_bf16(device: torch.device) -> bool:
    """Whether this device runs bf16 matmuls natively: a GPU that supports bf16, a CPU with AVX512-BF16 or AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return native_bf16(cpu_isa())


def machine_key(device: torch.device) -> str:
    """What the speed of a step depends on besides the run: e.g. 'cpu AMD EPYC [avx2 avx512f avx512_bf16],
    torch 2.13.0+cpu, 2 threads'."""
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return (f"{device.type} {cpu_model(cpuinfo()) or 'unknown CPU'} [{' '.join(cpu_isa())}], "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def shape_key(spec, batch_size: int) -> str:
    """A run's shape, the other half of the key: its ModelSpec and batch size, hashed (12 hex digits)."""
    text = json.dumps(asdict(spec) | {"batch_size": batch_size}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def record_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / RECORD_FILE


def load_record(cache_dir: str | Path) -> dict:
    """The whole record, every machine's ({} when there is none or it is unreadable)."""
    try:
        whole = json.loads(record_path(cache_dir).read_text())
    except (OSError, ValueError):
        return {}
    return whole if isinstance(whole, dict) else {}


def measured(cache_dir: str | Path, device: torch.device, spec, batch_size: int) -> dict:
    """What the record holds for this machine and shape: its well-formed measurements only ({} when none, or
    when the file is unreadable), so a damaged record leaves the decision to the rules instead of failing runs."""
    entry = load_record(cache_dir).get(machine_key(device))
    entry = entry.get(shape_key(spec, batch_size)) if isinstance(entry, dict) else None
    if not isinstance(entry, dict):
        return {}
    found = {}
    if _numbers(entry.get("precision"), PRECISION_KEYS):
        found["precision"] = entry["precision"]
    compile_ = entry.get("compile") if isinstance(entry.get("compile"), dict) else {}
    if timings := {p: m for p, m in compile_.items() if _numbers(m, COMPILE_KEYS)}:
        found["compile"] = timings
    return found


def _numbers(m, keys: tuple[str, ...]) -> bool:
    return isinstance(m, dict) and all(is_number(m.get(k)) for k in keys)  # true is no measurement


def record(cache_dir: str | Path, device: torch.device, spec, batch_size: int, about: dict, **found) -> None:
    """Merge measurements (precision={...} or compile={precision: {...}}) into this machine's record of a shape."""
    whole = load_record(cache_dir)
    entry = whole.setdefault(machine_key(device), {}).setdefault(shape_key(spec, batch_size), {})
    entry["about"] = about
    if "precision" in found:
        entry["precision"] = found["precision"]
    if "compile" in found:  # one precision's measurement leaves the other's
        entry["compile"] = entry.get("compile", {}) | found["compile"]
    write_json(record_path(cache_dir), whole)


def bf16_pays(m: dict) -> bool:
    """A precision measurement {fp32_tokens_s, bf16_tokens_s, val_loss_rel_diff}: bf16 measurably faster at
    equal loss."""
    return (m["bf16_tokens_s"] >= MIN_SPEEDUP * m["fp32_tokens_s"]
            and abs(m["val_loss_rel_diff"]) <= VAL_LOSS_TOLERANCE)


def compile_pays(m: dict, steps: int) -> bool:
    """A compile measurement {eager_step_s, compiled_step_s, compile_s}: a run of `steps` steps is measurably
    faster per step compiled and pays the compile time back PAYBACK times over."""
    saved = m["eager_step_s"] - m["compiled_step_s"]
    return (m["eager_step_s"] >= MIN_SPEEDUP * m["compiled_step_s"]
            and (steps - 1) * saved >= PAYBACK * m["compile_s"])


def resolve_precision(setting: str, device: torch.device, found: dict | None = None) -> str:
    """precision=auto: bf16 autocast where the record measured it faster at equal loss; without a record, where
    the hardware runs it natively (a CPU with AVX512-BF16 or AMX, docs/speed.md), else fp32."""
    if setting != "auto":
        return setting
    if found and "precision" in found:
        return "bf16" if bf16_pays(found["precision"]) else "fp32"
    return "bf16" if has_native_bf16(device) else "fp32"


def resolve_compile(setting: str, device: torch.device, steps: int, precision: str,
                    found: dict | None = None) -> bool:
    """compile=auto: where the record measured compiling to pay for a run this long at this precision; without
    a record, by COMPILE_MIN_STEPS."""
    if setting != "auto":
        return setting == "true"
    if found and precision in found.get("compile", {}):
        return compile_pays(found["compile"][precision], steps)
    min_steps = COMPILE_MIN_STEPS.get((device.type, precision))
    return min_steps is not None and steps >= min_steps
