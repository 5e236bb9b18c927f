"""Tool-generated mutation score: mutmut over the modules [tool.mutmut] names in pyproject.toml, against the fast
non-golden tests, and a report read from mutmut's own store (mutants/), so a partial or resumed run reports too.
The store's results are kept in results/mutation/ledger.json (committed): a fresh clone resumes from there.

    python scripts/mutation_score.py run [--modules mbexp/schedule.py ...]   # generate, run what is not yet run
    python scripts/mutation_score.py run --again | --timeouts [--modules ...]  # rerun the survivors | timeouts
    python scripts/mutation_score.py run --mutants NAME ...                  # rerun these mutants
    python scripts/mutation_score.py count                                   # generate only: mutants per module
    python scripts/mutation_score.py report [--modules ...]                  # results/mutation/report.{md,json}
"""

import argparse
import gc
import hashlib
import json
import os
import re
import shlex
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = Path("mutants")  # mutmut's working copy and result store, relative to ROOT
OUT = Path("results/mutation")
SELECTION = STORE / "mbexp-tests.txt"  # the pytest selection the stored results were run with
LEDGER = OUT / "ledger.json"  # each run mutant's exit code and each function's hash, from the store
EXPLAINED = OUT / "equivalent.md"  # reviewed survivors: `## <mutant>`, then `- kind:`, `- line:`, `- why:`
KINDS = ("equivalent", "harmless")  # no observable difference; a difference no user reads (a message's wording)
CAUGHT = ("killed", "timeout", "caught by type check")
UNCAUGHT = ("survived", "no tests")
TOKEN_CODE = ("data.py", "corpus.py", "corpus_check.py", "token_cache.py", "io.py")  # what writes a token cache


def module_of(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def selected(modules: list[str] | None, path: str) -> bool:
    return not modules or any(Path(path).match(m) or path == m or path.startswith(m.rstrip("/") + "/")
                              for m in modules)


def generate(jobs: int) -> None:
    """mutmut's own generation step: copy the repository into mutants/ and write each module's mutants there."""
    from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants, setup_source_paths
    from mutmut.mutation.trampoline import set_mutant_under_test

    set_mutant_under_test("mutant_generation")
    STORE.mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    create_mutants(jobs)


def run(modules: list[str] | None, jobs: int, tests: list[str] | None, again: tuple[str, ...] = (),
        new: bool = False, mutants: list[str] | None = None) -> None:
    """mutmut run over the mutants of `modules` not yet run, the others keeping their results (a resume); `again`:
    instead those of these statuses (the survivors after a test was added for them; the timeouts); `new` with
    `again`: those and the mutants not yet run, in one start; `mutants`: instead exactly these, by name."""
    import mutmut.__main__ as mm
    from mutmut.configuration import config

    if tests:  # a narrower test selection than pyproject's; mutmut resets its results when this changes
        config().pytest_add_cli_args_test_selection = tests
    STORE.mkdir(exist_ok=True)
    selection = shlex.join(config().pytest_add_cli_args_test_selection)
    SELECTION.write_text(selection + "\n")
    restored = restore_ledger(selection)
    if restored:
        print(f"{LEDGER}: {restored} results restored; mutmut keeps those whose function is unchanged")
    every = mm.collect_source_file_mutation_data

    def only_selected(*, mutant_names):
        mutants, by_path = every(mutant_names=mutant_names)
        keep = {p: m for p, m in by_path.items() if selected(modules, p)}
        return [t for t in mutants if str(t[0].path) in keep], keep

    mm.collect_source_file_mutation_data = only_selected
    every_tests = mm.tests_for_mutant_names

    def tests_of_selected(mutant_names):  # the clean run before the mutants: only the tests that reach them
        if mutant_names or not modules:
            return every_tests(mutant_names)
        return every_tests([f"{module_of(p)}.*" for p, meta in load_store().items()
                            if meta["exit_code_by_key"] and selected(modules, p)])

    mm.tests_for_mutant_names = tests_of_selected
    freeze_before_tests()
    explained = explanations()
    if mutants:
        names, again = check_names(load_store(), mutants), ()
    else:
        names = [n for n in rerun_names(load_store(), modules, again) if n not in explained]  # reviewed: not rerun
    if again and not names and not new:
        return
    if again and new:
        names += rerun_names(load_store(), modules, ("not checked",))
    os.environ["MBEXP_TEST_TOKEN_CACHE"] = str(ROOT / shared_token_cache())
    try:  # Ctrl-C stops mutmut between mutants; what it ran is saved all the same
        mm._run(names, jobs)
    finally:
        save_ledger(selection)


def freeze_before_tests() -> None:
    """Freeze what the fork server loaded (the whole test suite, torch) before a mutant's tests run: statsmodels'
    Holm calls gc.collect(), which would otherwise scan all of it at every call (most of a claims test's time)."""
    from mutmut.runners.harness import PytestRunner

    run_tests = PytestRunner.run_tests

    def frozen(self, *, mutant_name, tests):
        gc.freeze()
        return run_tests(self, mutant_name=mutant_name, tests=tests)

    PytestRunner.run_tests = frozen


def shared_token_cache() -> Path:
    """The token cache the tests of every mutant share (tests/conftest.py `cache`), one per version of the code that
    builds it, so a cache is not read by code that would have built it differently."""
    code = b"".join((ROOT / "mbexp" / f).read_bytes() for f in TOKEN_CODE)
    return STORE / f"token_cache-{hashlib.sha256(code).hexdigest()[:12]}"


def rerun_names(store: dict[str, dict], modules: list[str] | None, statuses: tuple[str, ...]) -> list[str]:
    """The stored mutants of `modules` whose result has one of `statuses` (mutmut's names for exit codes)."""
    from mutmut.stats import status_by_exit_code

    return [name for path, meta in store.items() if statuses and selected(modules, path)
            for name, code in meta["exit_code_by_key"].items() if status_by_exit_code[code] in statuses]


def check_names(store: dict[str, dict], names: list[str]) -> list[str]:
    """`names` if the store holds each of them, else a SystemExit naming those it lacks."""
    known = {name for meta in store.values() for name in meta["exit_code_by_key"]}
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"--mutants: not in {STORE}/ (names as results/mutation/report.md gives them): {', '.join(unknown)}")
    return list(names)


def save_ledger(selection: str) -> None:
    """The store's results -> LEDGER (written whole, then renamed), keeping the ledger's modules the store lacks:
    what a later clone resumes from."""
    old = json.loads(LEDGER.read_text()) if LEDGER.exists() else {}
    modules = old.get("modules", {}) if old.get("tests") == selection else {}
    for path, meta in load_store().items():
        codes = {k: c for k, c in meta["exit_code_by_key"].items() if c is not None}
        if codes:
            modules[path] = {"hash_by_function_name": meta["hash_by_function_name"], "exit_code_by_key": codes}
    LEDGER.parent.mkdir(parents=True, exist_ok=True)
    tmp = LEDGER.with_suffix(".tmp")
    tmp.write_text(json.dumps({"tests": selection, "modules": modules}, indent=0, sort_keys=True) + "\n")
    tmp.replace(LEDGER)


def restore_ledger(selection: str) -> int:
    """LEDGER -> the store, if it ran with the same tests: a module the store lacks gets the ledger's .meta (mutmut
    keeps the results of the functions whose hash is unchanged); a stored one, the ledger's result of each mutant
    not yet run whose function's hash is unchanged. Returns the results restored."""
    if not LEDGER.exists():
        return 0
    ledger = json.loads(LEDGER.read_text())
    if ledger.get("tests") != selection:
        print(f"{LEDGER} ran with other tests ({ledger.get('tests')!r}): not restored")
        return 0
    n = 0
    for path, saved in ledger["modules"].items():
        meta_file = STORE / f"{path}.meta"
        if not meta_file.exists():
            meta_file.parent.mkdir(parents=True, exist_ok=True)
            meta_file.write_text(json.dumps({**saved, "type_check_error_by_key": {}, "durations_by_key": {},
                                             "estimated_durations_by_key": {}}))
            n += len(saved["exit_code_by_key"])
            continue
        meta = json.loads(meta_file.read_text())
        hashes, old_hashes = meta["hash_by_function_name"], saved["hash_by_function_name"]
        for key, code in saved["exit_code_by_key"].items():
            func = key.rpartition("__mutmut_")[0].rpartition(".")[2]  # mbexp.m.xǁClassǁf__mutmut_3 -> xǁClassǁf
            if key in meta["exit_code_by_key"] and meta["exit_code_by_key"][key] is None \
                    and func in hashes and hashes[func] == old_hashes.get(func):
                meta["exit_code_by_key"][key] = code
                n += 1
        meta_file.write_text(json.dumps(meta))
    return n


def load_store() -> dict[str, dict]:
    """path -> mutmut's .meta of that module (exit code per mutant, None: not yet run)."""
    store = {}
    for meta in sorted((STORE / "mbexp").rglob("*.py.meta")):
        store[str(meta.relative_to(STORE)).removesuffix(".meta")] = json.loads(meta.read_text())
    return store


def explanations() -> dict[str, dict]:
    """The reviewed survivors of EXPLAINED, none when it does not exist."""
    return load_explanations(EXPLAINED.read_text()) if EXPLAINED.exists() else {}


def load_explanations(text: str) -> dict[str, dict]:
    """mutant -> {kind, line, why} from the reviewed explanations file."""
    out = {}
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        fields = dict(re.findall(r"^- (kind|line|why): (.*)$", body, re.M))
        fields["line"] = fields.get("line", "").strip().strip("`")
        out[name.strip()] = fields
    return out


def mutated_line(diff: str) -> str:
    """The first added line of a mutant's diff: what an explanation pins, so a renumbered mutant is not excused."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added[0] if added else ""


def diff_of(name: str, path: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    try:
        return get_diff_for_mutant(name, path=path)
    except Exception as e:  # a store older than the source: say so in the report rather than stop
        return f"(no diff: {e})"


def report(modules: list[str] | None) -> dict:
    from mutmut.stats import status_by_exit_code

    store = load_store()
    explained = explanations()
    rows, survivors, pending_elsewhere = [], [], 0
    for path, meta in store.items():
        codes = meta["exit_code_by_key"]
        if not codes:  # a module with nothing to mutate (an __init__ of imports)
            continue
        if not selected(modules, path):
            pending_elsewhere += sum(code is None for code in codes.values())
            continue
        counts = Counter(status_by_exit_code[code] for code in codes.values())
        for name, code in sorted(codes.items(), key=lambda kv: (kv[0].rpartition("__mutmut_")[0],
                                                                int(kv[0].rpartition("_")[2]))):
            if status_by_exit_code[code] in UNCAUGHT:
                diff = diff_of(name, path)
                note = explained.get(name)
                if note and note.get("line") != mutated_line(diff):
                    note = {**note, "kind": "stale", "why": f"explanation pins `{note.get('line')}`"}
                survivors.append({"module": module_of(path), "mutant": name, "status": status_by_exit_code[code],
                                  "diff": diff, "explained": note})
        ok = {s["mutant"] for s in survivors if s["module"] == module_of(path) and s["explained"]
              and s["explained"].get("kind") in KINDS}
        run_ = len(codes) - counts["not checked"] - counts["skipped"]
        caught = sum(counts[s] for s in CAUGHT)
        rows.append({"module": module_of(path), "generated": len(codes), "killed": counts["killed"],
                     "survived": counts["survived"], "timeout": counts["timeout"], "no_tests": counts["no tests"],
                     "other": run_ - caught - counts["survived"] - counts["no tests"],
                     "not_run": counts["not checked"], "explained": len(ok),
                     "score": caught / run_ if run_ else None,
                     "score_explained": (caught + len(ok)) / run_ if run_ else None})
    not_run = sum(r["not_run"] for r in rows)
    tests = SELECTION.read_text().strip() if SELECTION.exists() else "?"
    return {"modules": modules or "all", "tests": tests, "partial": bool(not_run or pending_elsewhere or modules),
            "not_run": not_run, "not_run_outside": pending_elsewhere, "rows": rows, "survivors": survivors}


def pct(x) -> str:
    return "–" if x is None else f"{x:.0%}"


def render(rep: dict) -> str:
    scope = "every module of [tool.mutmut]" if rep["modules"] == "all" else ", ".join(rep["modules"])
    lines = ["# Mutation score (mutmut)", "",
             f"Scope: {scope}. Tests: `{rep['tests']}`.", "",
             "Generated by `make mutants-full` (scripts/mutation_score.py) from mutmut's store, mutants/.", ""]
    if rep["partial"]:
        lines += [f"**Partial run**: {rep['not_run']} mutants of these modules not yet run, "
                  f"{rep['not_run_outside']} more in the store's other modules"
                  + (", and the report covers a subset of the modules." if rep["modules"] != "all" else "."), ""]
    lines += ["| module | generated | killed | survived | timeout | no tests | other | not run | explained "
              "| score | with explained |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rep["rows"]:
        lines.append(f"| {r['module']} | {r['generated']} | {r['killed']} | {r['survived']} | {r['timeout']} "
                     f"| {r['no_tests']} | {r['other']} | {r['not_run']} | {r['explained']} | {pct(r['score'])} "
                     f"| {pct(r['score_explained'])} |")
    lines += ["", "score: (killed + timed out) / mutants run; *with explained* also counts the survivors "
              f"{EXPLAINED} calls equivalent or harmless.", "", "## Survivors", ""]
    for s in rep["survivors"]:
        note = s["explained"]
        tag = f"{note['kind']}: {note.get('why', '')}" if note else "unexplained"
        lines += [f"### {s['mutant']} ({s['status']}; {tag})", "", "```diff", s["diff"].rstrip(), "```", ""]
    if not rep["survivors"]:
        lines.append("None.")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "count", "report"))
    parser.add_argument("--modules", nargs="*", help="paths or globs under mbexp/ (default: all of [tool.mutmut])")
    parser.add_argument("--again", action="store_true", help="run: rerun the survivors, not the mutants not yet run")
    parser.add_argument("--new", action="store_true", help="run --again: the mutants not yet run as well")
    parser.add_argument("--timeouts", action="store_true", help="run: rerun the timed-out mutants (their limit is "
                        "wall time, so a loaded machine can time out a mutant its tests would have caught or missed)")
    parser.add_argument("--mutants", nargs="+", help="run: rerun exactly these mutants, by name")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--tests", type=shlex.split, help="pytest arguments replacing pyproject's test selection, "
                        "one string (mutmut resets its results when it changes)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if args.command == "count":
        generate(args.jobs)
        counts = {module_of(p): len(m["exit_code_by_key"]) for p, m in load_store().items()}
        for module, n in counts.items():
            print(f"{n:6} {module}")
        print(f"{sum(counts.values()):6} mutants in {len(counts)} modules")
        return 0
    if args.command == "run":
        again = (UNCAUGHT if args.again else ()) + (("timeout",) if args.timeouts else ())
        run(args.modules, args.jobs, args.tests, again, args.new, args.mutants)
    rep = report(args.modules if args.command == "report" else None)  # a run's report: every module, not its own
    OUT.mkdir(parents=True, exist_ok=True)
    if SELECTION.exists():
        save_ledger(SELECTION.read_text().strip())
    (OUT / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    (OUT / "report.md").write_text(render(rep))
    print(f"{OUT}/report.md: " + ", ".join(f"{r['module']} {pct(r['score'])}" for r in rep["rows"])
          + (" (partial)" if rep["partial"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
