"""`make bench`'s report (mbexp.bench.report): the speed bar's checks and verdict from measurements written as
scripts/bench.py writes them; nothing is timed here."""

from mbexp.bench.report import checks, verdict
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
    fp32_slower = measured(1.52, 1.49, fp32_steady=0.91, fp32_whole=0.85)  # issue 24's compiled fp32
    assert sum(not ok for ok in fp32_slower["checks"].values()) == 2 and "FAIL" in verdict(fp32_slower)


def test_without_a_speed_bar_or_throughput_there_is_nothing_to_check():
    assert checks({"precision_auto": {"measured": False, "auto": "fp32"}}) == {}
