"""`make bench`'s report (mbexp.bench.report): the speed bar's checks and verdict from measurements written as
scripts/bench.py writes them, and which sections it runs; nothing is timed here."""


from tiny import script

from mbexp.bench.report import checks, ratios, table, verdict
from mbexp.bench.speed_bar import SPEED_BAR


def measured(auto_steady: float, auto_whole: float, fp32_steady: float = 1.1, fp32_whole: float = 1.05) -> dict:
    """A bench result with only the speed bar measured: mbexp's defaults at precision=auto (bf16, compiled) and
    at precision=fp32 (eager), as ratios to the plain loop."""
    defaults = {"auto": {"precision": "bf16", "compiled": True, "steady_ratio": auto_steady,
                         "whole_run_ratio": auto_whole},
                "fp32": {"precision": "fp32", "compiled": False, "steady_ratio": fp32_steady,
                         "whole_run_ratio": fp32_whole}}
    res = {"speed_bar": {"bar": SPEED_BAR["bf16"], "whole_run_steps": 2000, "defaults": defaults},
           "machine": {"cpu": "a CPU", "cpu_isa": ["avx512_bf16"]}}
    return res | {"checks": checks(res)}


def test_the_speed_bar_passes_only_when_every_default_reaches_its_bar_steady_and_over_a_whole_run():
    ok = measured(1.52, 1.49)
    assert len(ok["checks"]) == 4 and all(ok["checks"].values())
    assert verdict(ok).startswith("speed bar PASS on a CPU [avx512_bf16]: precision=auto -> bf16 compiled 1.52x")
    slow = measured(1.25, 1.2)  # bf16 below its 1.3x bar, whole run still faster than the plain loop
    assert [ok for name, ok in slow["checks"].items() if "precision=auto" in name] == [False, True]
    assert verdict(slow).startswith("speed bar FAIL")
    fp32_slower = measured(1.52, 1.49, fp32_steady=0.91, fp32_whole=0.85)  # compiled fp32 on a CPU without bf16
    assert sum(not ok for ok in fp32_slower["checks"].values()) == 2 and "FAIL" in verdict(fp32_slower)
    assert verdict(slow | {"checks": {}}).startswith("speed bar FAIL")  # read from the measurements, not the texts


def test_without_a_speed_bar_or_throughput_there_is_nothing_to_check():
    assert checks({"precision_auto": {"measured": False, "auto": "fp32"}}) == {}


def fp32_only(trainer_over_bare: float = 0.98) -> dict:
    """A bench result from a CPU without native bf16: the trainer against the bare loop at fp32 only, and the
    one short bf16 glance that precision_auto takes there."""
    rate = {"best": 6000.0, "median": 5900.0, "val_loss": 7.1}
    return {"machine": {"cpu": "a CPU", "cpu_isa": ["avx2"], "torch_threads": 2, "torch": "2.13.0",
                        "load_avg_start": 0.5, "load_avg_end": 0.6},
            "device": "cpu", "flops": {"flops_per_token": 8e6, "n_matmul": 1_000_000, "attention": 6000},
            "config": {"model": "tiny", "params": 1_300_000, "batch_size": 16, "seq_len": 128, "rounds": 3,
                       "window": 5},
            "throughput": {"fp32": {"bare": rate, "trainer": rate, "trainer_over_bare": trainer_over_bare,
                                    "trainer_over_bare_median": 1.0}},
            "precision_auto": {"measured": False, "auto": "fp32", "without_native_bf16": {
                "fp32_tokens_s": 6129.0, "bf16_tokens_s": 424.0, "bf16_over_fp32": 424 / 6129, "steps": 5}}}


def test_without_native_bf16_the_report_shows_fp32_and_the_one_bf16_glance():
    res = fp32_only()
    res["checks"] = checks(res)
    assert list(res["checks"].values()) == [True] and "at fp32 (0.980)" in next(iter(res["checks"]))
    text = table(res)
    assert "bf16/fp32" not in text and "MFU" not in text
    assert "no native bf16: bf16 autocast 424 tokens/s against fp32 6,129 (0.07x, bare loop, 5 steps each)" in text
    assert [line.split() for line in text.splitlines() if line.startswith("trainer / bare")] == [
        ["trainer", "/", "bare", "0.980"]]
    assert ratios(res) == "trainer / bare loop fp32 0.98x"
    slow = checks(fp32_only(0.9))
    assert slow and not any(slow.values())


def bench_args(*argv: str):
    cli = script("bench")
    return cli, cli.parse_args(["--device", "cpu", *argv])


def test_make_bench_runs_the_deciding_sections_and_merges_bench_full_runs_them_all():
    cli, args = bench_args()
    assert list(args.only) == ["precision_auto", "speed_bar", "throughput", "axes", "omp"] and args.merge
    assert args.omp_rounds == 2 and args.omp_seconds == 2
    _, full = bench_args("--full")
    assert list(full.only) == list(cli.SECTIONS) and not full.merge
    _, some = bench_args("--only", "peak")
    assert some.only == ["peak"] and some.merge


def test_the_wait_policy_section_shows_each_policy_against_the_best_and_mbexp_against_the_plain_loop():
    def cell(median: float, over_best: float) -> dict:
        return {"median": median, "over_best": over_best}

    policies = {"OMP_WAIT_POLICY=PASSIVE": (cell(6000, 0.64), cell(3700, 1.0)),
                "OpenMP's default": (cell(9300, 1.0), cell(860, 0.23))}
    om = {"runtime": "GNU libgomp", "rule_alone": "OpenMP's default", "rule_shared": "OMP_WAIT_POLICY=PASSIVE",
          "by_precision": {"bf16": {name: {"alone": a, "beside_second_job": b} for name, (a, b) in policies.items()}},
          "versus_plain_loop": {"plain_loop": {"median": 9000.0, "precision": "fp32", "compiled": False,
                                               "policy": "OpenMP's default"},
                                "mbexp_default": {"median": 13500.0, "precision": "bf16", "compiled": True,
                                                  "policy": "OpenMP's default"}},
          "mbexp_default_over_plain_loop_alone": 1.5}
    text = table(fp32_only() | {"omp": om, "checks": {}})
    assert "OpenMP wait policy (GNU libgomp;" in text
    assert [line.split()[-4:] for line in text.splitlines() if line.startswith("  OMP_WAIT_POLICY=PASSIVE")] == [
        ["6,000", "0.64x", "3,700", "1.00x"]]
    assert "the plain loop (fp32 eager, OpenMP's default) 9,000: 1.50x" in text
    assert ratios({"omp": om}) == "defaults / plain loop under OpenMP's default, alone 1.50x"
