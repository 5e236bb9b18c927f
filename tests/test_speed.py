"""precision=auto and compile=auto follow what was measured on this machine (mbexp.speed's record), else the
measured rules; no test times anything: the measurements are written as `make bench` would write them."""

import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import torch
from tiny import REPO, clean, compile_capturing, overrides

from mbexp import speed, trainer
from mbexp.config import compose_config, model_spec, to_object
from mbexp.data import prepare
from mbexp.trainer import train

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
EAGER_FASTER = {"eager_step_s": 0.100, "compiled_step_s": 0.110, "compile_s": 30.0}  # fp32 on a CPU without bf16
COMPILE_PAYS = {"eager_step_s": 0.144, "compiled_step_s": 0.104, "compile_s": 28.5}  # the bf16 host: 700 steps


def test_a_recorded_eager_faster_keeps_a_2000_step_run_eager_where_the_rule_would_compile():
    assert speed.resolve_compile("auto", CPU, 2000, "bf16")  # no record: the bf16 CPU rule compiles
    assert not speed.resolve_compile("auto", CPU, 2000, "bf16", {"compile": {"bf16": EAGER_FASTER}})
    assert not speed.resolve_compile("auto", CUDA, 10**6, "bf16", {"compile": {"bf16": EAGER_FASTER}})


def test_a_recorded_payback_compiles_only_runs_that_pay_it_back_with_margin():
    found = {"compile": {"bf16": COMPILE_PAYS, "fp32": EAGER_FASTER}}
    break_even = COMPILE_PAYS["compile_s"] / (COMPILE_PAYS["eager_step_s"] - COMPILE_PAYS["compiled_step_s"])
    assert speed.resolve_compile("auto", CPU, 2000, "bf16", found)
    assert not speed.resolve_compile("auto", CPU, round(break_even) + 1, "bf16", found)  # pays, but not 1.5x over
    assert speed.resolve_compile("auto", CPU, round(speed.PAYBACK * break_even) + 2, "bf16", found)
    assert not speed.resolve_compile("auto", CPU, 2000, "fp32", found)  # the record is per precision
    # compiled, but not measurably faster per step (within MIN_SPEEDUP): stays eager however long the run
    close = {"eager_step_s": 0.102, "compiled_step_s": 0.100, "compile_s": 0.01}
    assert not speed.resolve_compile("auto", CPU, 10**6, "fp32", {"compile": {"fp32": close}})
    assert speed.resolve_compile("true", CPU, 1, "fp32", found) and not speed.resolve_compile("false", CPU, 10**6,
                                                                                               "bf16", found)


def test_without_a_record_the_measured_rules_decide():
    # a CPU without bf16 ran compiled fp32 slower than eager (docs/speed.md): never compiled by default
    assert not speed.resolve_compile("auto", CPU, 10**6, "fp32")
    # a bf16 CPU: the default 300-step run stays eager, the 2,000-step budgets compile (docs/speed.md)
    assert not speed.resolve_compile("auto", CPU, 300, "bf16") and speed.resolve_compile("auto", CPU, 1000, "bf16")
    # CUDA: 2,000-step runs stay eager, the presets' 4,000-step runs compile (docs/gpu.md)
    assert not speed.resolve_compile("auto", CUDA, 3417, "bf16") and speed.resolve_compile("auto", CUDA, 3500, "bf16")
    preset = to_object(compose_config(["+experiment=shazeer_ffn"]))
    assert speed.resolve_compile(preset.compile, CUDA, preset.train.steps, "bf16")


def test_precision_auto_picks_bf16_only_where_recorded_faster_at_equal_loss():
    faster = {"fp32_tokens_s": 11_601, "bf16_tokens_s": 14_505, "val_loss_rel_diff": 0.0012}  # docs/speed.md
    slower = {"fp32_tokens_s": 11_601, "bf16_tokens_s": 9_600, "val_loss_rel_diff": 0.0012}  # like the H200's 0.83x
    worse = {"fp32_tokens_s": 11_601, "bf16_tokens_s": 14_505, "val_loss_rel_diff": 0.02}
    for device in (CPU, CUDA):
        assert speed.resolve_precision("auto", device, {"precision": faster}) == "bf16"
        assert speed.resolve_precision("auto", device, {"precision": slower}) == "fp32"
        assert speed.resolve_precision("auto", device, {"precision": worse}) == "fp32"
        assert speed.resolve_precision("bf16", device, {"precision": slower}) == "bf16"  # a setting wins
    assert speed.resolve_precision("auto", CPU, {}) == ("bf16" if speed.has_native_bf16(CPU) else "fp32")


def test_the_cpu_isa_is_read_from_cpuinfo():
    text = "processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni\n"
    assert speed.cpu_model(text) == "AMD EPYC 9654"
    assert speed.isa_flags(text) == ["avx2", "avx512f", "avx512_bf16"]
    assert speed.native_bf16(speed.isa_flags(text))
    amx = "flags\t: avx2 avx512f amx_tile amx_bf16 amx_int8\n"
    assert speed.isa_flags(amx) == ["avx2", "avx512f", "amx_tile", "amx_bf16"] and speed.native_bf16(["amx_bf16"])
    assert not speed.native_bf16(speed.isa_flags("model name\t: AMD EPYC\nflags\t: fpu sse avx2 fma\n"))
    assert speed.cpu_model("") == "" and speed.isa_flags("") == []
    key = speed.machine_key(CPU)  # this machine: its CPU, ISA flags, torch and threads
    assert key.startswith("cpu ") and torch.__version__ in key and f"{torch.get_num_threads()} threads" in key


def test_a_torch_capability_below_avx512_leaves_bf16_to_fp32():
    # ATEN_CPU_CAPABILITY=avx2 on an AVX512-BF16 CPU: torch's bf16 attention kernels refuse to run there
    code = ("import torch; from mbexp import speed; cpu = torch.device('cpu'); "
            "print(speed.cpu_isa(), speed.resolve_precision('auto', cpu), speed.machine_key(cpu))")
    env = os.environ | {"ATEN_CPU_CAPABILITY": "avx2", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "avx512" not in out and "amx" not in out and " fp32 cpu " in out


def test_the_record_is_per_machine_and_shape_and_keeps_each_precisions_measurement(tmp_path):
    cfg = to_object(compose_config([]))
    spec = model_spec(cfg, 4096)
    about = {"model": "tiny", "by": "test"}
    assert speed.measured(tmp_path, CPU, spec, 16) == {}  # no record yet
    speed.record(tmp_path, CPU, spec, 16, about, compile={"bf16": COMPILE_PAYS})
    speed.record(tmp_path, CPU, spec, 16, about, compile={"fp32": EAGER_FASTER})
    found = speed.measured(tmp_path, CPU, spec, 16)
    assert found == {"compile": {"bf16": COMPILE_PAYS, "fp32": EAGER_FASTER}}
    assert speed.load_record(tmp_path)[speed.machine_key(CPU)][speed.shape_key(spec, 16)]["about"] == about
    assert speed.measured(tmp_path, CPU, spec, 32) == {}  # another batch size is another shape
    assert speed.measured(tmp_path, CPU, model_spec(to_object(compose_config(["ffn=swiglu"])), 4096), 16) == {}
    # a measurement missing a number is left out, the rest kept; an unreadable record leaves it to the rules
    speed.record(tmp_path, CPU, spec, 16, about, precision={"fp32_tokens_s": 1.0}, compile={"fp32": {"x": 1}})
    assert speed.measured(tmp_path, CPU, spec, 16) == {"compile": {"bf16": COMPILE_PAYS}}
    for damaged in ("{not json", "[]", json.dumps({speed.machine_key(CPU): 3})):
        speed.record_path(tmp_path).write_text(damaged)
        assert speed.measured(tmp_path, CPU, spec, 16) == {}


def test_a_run_follows_the_record_for_its_shape(tmp_path, cache, monkeypatch):
    """The trainer looks the record up under the key the bench writes: a record that says the opposite of the
    rule (bf16 slower here, or faster on a CPU without native bf16) decides precision=auto in a real run, and a
    record of eager faster keeps compile=auto eager where the step-count rule alone would compile."""
    monkeypatch.setattr(speed, "COMPILE_MIN_STEPS", {("cpu", "fp32"): 1, ("cpu", "bf16"): 1})
    args = clean(overrides(tmp_path, cache, "precision=auto", "compile=auto", "train.steps=2", "train.eval_every=2",
                           "device=cpu"))
    cfg = to_object(compose_config(args))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    own = tmp_path / "cache"  # a copy of the shared token cache: the record stays out of other tests' way
    shutil.copytree(cache, own, ignore=shutil.ignore_patterns("inductor"))
    rule = speed.resolve_precision("auto", CPU)
    bf16_tokens_s = 9_000 if rule == "bf16" else 15_000
    speed.record(own, CPU, model_spec(cfg, data.vocab_size), cfg.train.batch_size, {"by": "test"},
                 precision={"fp32_tokens_s": 11_000, "bf16_tokens_s": bf16_tokens_s, "val_loss_rel_diff": 0.001},
                 compile={"fp32": EAGER_FASTER, "bf16": EAGER_FASTER})
    summary = train(compose_config([*args, f"data.cache_dir={own}"]))
    assert summary["status"] == "completed"
    assert summary["precision"] == ("fp32" if rule == "bf16" else "bf16") and summary["compiled"] is False


def test_compile_auto_in_a_run_compiles_where_the_record_says_its_length_pays_it_back(tmp_path, cache, monkeypatch):
    """The trainer asks the record about the run's own length and precision: at fp32, where compiling saves 0.2 s a
    step for 0.5 s of compile (paid back 1.5 times over from 5 steps), a 3-step run stays eager, a 5-step run
    compiles and steps through the compiled model."""
    runs = Counter()
    monkeypatch.setattr(trainer, "compile_model", compile_capturing(runs))
    args = clean(overrides(tmp_path, cache, "precision=fp32", "compile=auto", "device=cpu"))
    cfg = to_object(compose_config(args))
    data = prepare(cfg.data, seq_len=cfg.model.seq_len)
    own = tmp_path / "cache"  # a copy of the shared token cache: the record stays out of other tests' way
    shutil.copytree(cache, own, ignore=shutil.ignore_patterns("inductor"))
    pays_from_5 = {"eager_step_s": 0.3, "compiled_step_s": 0.1, "compile_s": 0.5}
    speed.record(own, CPU, model_spec(cfg, data.vocab_size), cfg.train.batch_size, {"by": "test"},
                 compile={"fp32": pays_from_5, "bf16": EAGER_FASTER})
    for steps, compiled in ((3, False), (5, True)):
        summary = train(compose_config([*args, f"data.cache_dir={own}", f"train.steps={steps}",
                                        f"train.eval_every={steps}"]))
        assert summary["status"] == "completed" and summary["compiled"] is compiled, steps
    assert runs and all(n % 5 == 0 for n in runs.values())  # each captured graph, alike in each of the 5 steps
