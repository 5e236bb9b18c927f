"""make mutants-full's ledger: a fresh clone resumes the mutation run from results/mutation/ledger.json, keeping
each result only while its function's source (mutmut's hash) and the test selection are unchanged."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("mutmut")
ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("mutation_score", ROOT / "scripts" / "mutation_score.py")
ms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ms)

KEYS = ["mbexp.schedule.x_lr_at__mutmut_1", "mbexp.schedule.x_lr_at__mutmut_2", "mbexp.schedule.x_f__mutmut_1"]


def write_meta(path: Path, codes: dict, hashes: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": hashes,
                                "type_check_error_by_key": {}, "durations_by_key": {},
                                "estimated_durations_by_key": {}}))


def test_ledger_round_trip_keeps_only_unchanged_functions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    meta = ms.STORE / "mbexp" / "schedule.py.meta"
    write_meta(meta, {KEYS[0]: 1, KEYS[1]: 0, KEYS[2]: None}, {"x_lr_at": "aaa", "x_f": "bbb"})
    ms.save_ledger("tests -m fast")
    ledger = json.loads(ms.LEDGER.read_text())
    assert ledger["tests"] == "tests -m fast"
    assert ledger["modules"]["mbexp/schedule.py"]["exit_code_by_key"] == {KEYS[0]: 1, KEYS[1]: 0}

    # a fresh store that mutmut generated again: x_lr_at unchanged, x_f edited since
    write_meta(meta, dict.fromkeys(KEYS), {"x_lr_at": "aaa", "x_f": "ccc"})
    assert ms.restore_ledger("tests -m other") == 0  # results of other tests are not reused
    assert json.loads(meta.read_text())["exit_code_by_key"] == dict.fromkeys(KEYS)
    ledger = json.loads(ms.LEDGER.read_text())
    ledger["modules"]["mbexp/schedule.py"]["exit_code_by_key"][KEYS[2]] = 1  # x_f's old result must not come back
    ledger["modules"]["mbexp/schedule.py"]["hash_by_function_name"]["x_f"] = "bbb"
    ms.LEDGER.write_text(json.dumps(ledger))
    assert ms.restore_ledger("tests -m fast") == 2
    assert json.loads(meta.read_text())["exit_code_by_key"] == {KEYS[0]: 1, KEYS[1]: 0, KEYS[2]: None}


def test_a_store_without_a_module_gets_the_ledgers_meta_and_keeps_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ms.LEDGER.parent.mkdir(parents=True)
    saved = {"hash_by_function_name": {"x_lr_at": "aaa"}, "exit_code_by_key": {KEYS[0]: 1}}
    ms.LEDGER.write_text(json.dumps({"tests": "t", "modules": {"mbexp/schedule.py": saved}}))
    assert ms.restore_ledger("t") == 1
    meta = json.loads((ms.STORE / "mbexp" / "schedule.py.meta").read_text())
    assert meta["exit_code_by_key"] == {KEYS[0]: 1} and meta["hash_by_function_name"] == {"x_lr_at": "aaa"}

    # a later run over another module only: the ledger keeps schedule.py's result
    (ms.STORE / "mbexp" / "schedule.py.meta").unlink()
    write_meta(ms.STORE / "mbexp" / "data.py.meta", {"mbexp.data.x_g__mutmut_1": 0}, {"x_g": "ddd"})
    ms.save_ledger("t")
    modules = json.loads(ms.LEDGER.read_text())["modules"]
    assert modules["mbexp/schedule.py"] == saved
    assert modules["mbexp/data.py"]["exit_code_by_key"] == {"mbexp.data.x_g__mutmut_1": 0}


def test_again_reruns_the_survivors_and_timeouts_reruns_the_timed_out_of_the_selected_modules():
    codes = {"mbexp.schedule.x_f__mutmut_1": 0, "mbexp.schedule.x_f__mutmut_2": 1, "mbexp.schedule.x_f__mutmut_3": -24,
             "mbexp.schedule.x_f__mutmut_4": 33, "mbexp.schedule.x_f__mutmut_5": None}
    store = {"mbexp/schedule.py": {"exit_code_by_key": codes},
             "mbexp/data.py": {"exit_code_by_key": {"mbexp.data.x_g__mutmut_1": 0, "mbexp.data.x_g__mutmut_2": -24}}}
    assert ms.rerun_names(store, ["mbexp/schedule.py"], ms.UNCAUGHT) == [
        "mbexp.schedule.x_f__mutmut_1", "mbexp.schedule.x_f__mutmut_4"]  # survived, no tests
    assert ms.rerun_names(store, None, ("timeout",)) == ["mbexp.schedule.x_f__mutmut_3", "mbexp.data.x_g__mutmut_2"]
    assert ms.rerun_names(store, None, ()) == []  # a plain run: the mutants not yet run, chosen by mutmut


def test_mutants_by_name_are_rerun_only_if_the_store_holds_each():
    store = {"mbexp/schedule.py": {"exit_code_by_key": {"mbexp.schedule.x_f__mutmut_1": 0,
                                                         "mbexp.schedule.x_f__mutmut_2": 1}}}
    assert ms.check_names(store, ["mbexp.schedule.x_f__mutmut_2"]) == ["mbexp.schedule.x_f__mutmut_2"]
    with pytest.raises(SystemExit, match=r"--mutants: not in mutants/ .*: mbexp\.schedule\.x_f__mutmut_3$"):
        ms.check_names(store, ["mbexp.schedule.x_f__mutmut_1", "mbexp.schedule.x_f__mutmut_3"])


def test_every_mutants_tests_share_one_token_cache_except_a_mutant_of_the_code_that_builds_it(tmp_path):
    from conftest import TOKEN_BUILDERS, shared_token_cache

    env = {"MBEXP_TEST_TOKEN_CACHE": str(tmp_path / "c")}
    assert shared_token_cache(env | {"MUTANT_UNDER_TEST": "mbexp.trainer.x_train__mutmut_3"}) == tmp_path / "c"
    assert shared_token_cache(env | {"MUTANT_UNDER_TEST": "mbexp.data.x_prepare__mutmut_3"}) is None
    assert shared_token_cache(env | {"MUTANT_UNDER_TEST": "mbexp.corpus.x_split_of__mutmut_1"}) is None
    assert shared_token_cache({"MUTANT_UNDER_TEST": "mbexp.trainer.x_train__mutmut_3"}) is None  # a plain session
    assert {f"mbexp.{f.removesuffix('.py')}." for f in ms.TOKEN_CODE} == set(TOKEN_BUILDERS)
    assert ms.shared_token_cache().parent == ms.STORE and ms.shared_token_cache().name.startswith("token_cache-")


def test_a_run_over_some_modules_reports_every_module_and_report_reports_the_chosen(tmp_path, monkeypatch):
    # a run stopped part-way through a few modules must not leave a report of those modules only
    monkeypatch.setattr(ms, "ROOT", tmp_path)
    monkeypatch.setattr(ms, "run", lambda *args: None)
    monkeypatch.chdir(tmp_path)
    write_meta(ms.STORE / "mbexp" / "schedule.py.meta", {KEYS[0]: 1, KEYS[1]: None}, {"x_lr_at": "aaa"})
    write_meta(ms.STORE / "mbexp" / "data.py.meta", {"mbexp.data.x_g__mutmut_1": 1}, {"x_g": "ddd"})
    ms.main(["run", "--modules", "mbexp/schedule.py"])
    rep = json.loads((ms.OUT / "report.json").read_text())
    assert rep["modules"] == "all" and [r["module"] for r in rep["rows"]] == ["mbexp.data", "mbexp.schedule"]
    assert rep["not_run"] == 1 and rep["partial"]
    ms.main(["report", "--modules", "mbexp/data.py"])
    rep = json.loads((ms.OUT / "report.json").read_text())
    assert rep["modules"] == ["mbexp/data.py"] and [r["module"] for r in rep["rows"]] == ["mbexp.data"]


def test_a_mutants_tests_start_with_the_fork_servers_objects_frozen(monkeypatch):
    # statsmodels' Holm calls gc.collect(): unfrozen, each call would scan all the fork server loaded
    import gc

    from mutmut.runners.harness import PytestRunner

    seen = []
    monkeypatch.setattr(PytestRunner, "run_tests",
                        lambda self, *, mutant_name, tests: seen.append((mutant_name, tests, gc.get_freeze_count())))
    ms.freeze_before_tests()
    try:
        PytestRunner.run_tests(None, mutant_name="mbexp.schedule.x_f__mutmut_1", tests=["t"])
    finally:
        gc.unfreeze()
    assert seen[0][:2] == ("mbexp.schedule.x_f__mutmut_1", ["t"]) and seen[0][2] > 0
