"""The package's imports run one way: the graph of imports between mbexp's modules has no circle, the analysis
never reaches the study command or a docs fixture, the ladder subpackage never reaches the writers that import it,
ClaimsError has one home; and the command line's pre-flight (and the claims file it reads) runs without torch."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mbexp

PACKAGE = Path(mbexp.__file__).resolve().parent


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package under `root` -> the package's modules it imports, at module level or inside a
    function (a deferred import that closes a circle is still one: config -> model -> norms -> config can run
    through a function's import); `from a import b` counts the module a.b where there is one, else a."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = node.module if not node.level else ".".join(  # from ..a import b: relative to the package
                    package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search; 1: on the path, 2: done)."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt, [*path, nxt])):
                return circle
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (circle := visit(node, [node])):
            return circle
    return None


def test_mbexp_imports_run_one_way():
    graph = import_graph(PACKAGE)
    assert find_circle(graph) is None, " -> ".join(find_circle(graph))
    # the model is a subpackage that the config feeds and that never reads the config
    assert {"mbexp.model.norms", "mbexp.model.ffn", "mbexp.model.attention"} <= graph["mbexp.model.decoder"]
    assert "mbexp.names" in graph["mbexp.config.rules"] and "mbexp.names" in graph["mbexp.model.norms"]
    assert not any(t.startswith("mbexp.config") for m in graph if m.startswith("mbexp.model") for t in graph[m])
    # compose reads the schema and the rules; neither of those reads another module of the config package
    assert {"mbexp.config.rules", "mbexp.config.schema"} <= graph["mbexp.config.compose"]
    assert not {t for m in ("rules", "schema") for t in graph[f"mbexp.config.{m}"] if t.startswith("mbexp.config")}


def test_the_check_finds_a_circle_deferred_imports_included(tmp_path):
    files = {"__init__.py": "", "names.py": "", "config.py": "def spec():\n    from pkg.model import Spec\n",
             "model/__init__.py": "from pkg.model.norms import build\n",
             "model/norms.py": "from ..config import rule\n"}
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.model.norms"] == {"pkg.config"} and graph["pkg.config"] == {"pkg.model"}
    assert find_circle(graph) == ["pkg.config", "pkg.model", "pkg.model.norms", "pkg.config"]
    (tmp_path / "pkg/model/norms.py").write_text("from pkg import names\n")  # the rule moved to names: one way
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.model.norms"] == {"pkg.names"} and find_circle(graph) is None


def imported(stderr: str) -> set[str]:
    """The modules a `python -X importtime` process loaded, read from its stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_bad_value_is_refused_before_torch_loads():
    # the pre-flight needs no torch: a typo costs a fraction of a second, not torch's import
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "mbexp.train", "optim.lr=nan"],
                          cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "error: optim.lr=nan must be a finite number" in proc.stderr, proc.stderr[-2000:]
    loaded = imported(proc.stderr)
    assert {"hydra", "mbexp.preflight"} <= loaded and "torch" not in loaded


@pytest.mark.parametrize("flag", [["--help"], ["--cfg", "job"]])
def test_help_and_the_printed_config_load_no_torch(flag):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "mbexp.train", *flag, "norm=rms"],
                          cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("norm:\n  name: rms" in proc.stdout) if flag[0] == "--cfg" else ("== Config ==" in proc.stdout)
    loaded = imported(proc.stderr)
    assert "hydra" in loaded and "torch" not in loaded


def test_no_module_touches_the_environment_at_import_and_an_entry_point_sets_its_defaults():
    code = """if True:
        import importlib, os, pkgutil, runpy, sys
        os.environ.pop("PYTHONWARNINGS", None)
        before = dict(os.environ)
        import mbexp
        for module in pkgutil.walk_packages(mbexp.__path__, "mbexp."):
            importlib.import_module(module.name)
        print(sorted(set(os.environ.items()) ^ set(before.items())))
        sys.argv = ["mbexp.train", "--help"]
        try:
            runpy.run_module("mbexp.train", run_name="__main__")
        except SystemExit:
            print(os.environ.get("PYTHONWARNINGS"))
    """
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=PACKAGE.parent, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    # the wait policy it sets: tests/test_wait_policy.py
    assert lines[0] == "[]" and "resource_tracker" in lines[-1], proc.stdout[-2000:]


HISTORY = re.compile(r"\bissue\s*#?\d+|\bv\d+\.\d+\b", re.IGNORECASE)  # an issue number, a version name


def test_the_code_carries_no_issue_numbers_or_version_history():
    # history lives in git (docs/contributing.md); the code says what is, and why
    paths = [p for d in ("mbexp", "scripts", "tests", "conf") for p in (PACKAGE.parent / d).rglob("*")
             if p.suffix in (".py", ".yaml", ".sh")]
    found = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}" for p in paths
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if HISTORY.search(line)]
    assert len(paths) > 100 and not found, "\n".join(found)


def test_command_lines_are_the_user_commands_and_scripts_only():
    # docs/contributing.md: python -m mbexp.train / study / data are typed by users; every other command is a script
    found = {module_name(p, PACKAGE).removesuffix(".__main__") for p in PACKAGE.rglob("*.py")
             if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8")}
    assert found == {"mbexp.train", "mbexp.study", "mbexp.data"}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_analysis_never_reaches_the_study_command_or_a_docs_fixture():
    # a table is read from disk: it never runs sweeps (the study's protocol is pure functions, mbexp.study.protocol)
    graph = import_graph(PACKAGE)
    assert "mbexp.study.command" in graph and "mbexp.study.protocol" in reachable(graph, "mbexp.analysis.studies")
    found = {m: "mbexp.study.command" for m in graph if m.startswith("mbexp.analysis")
             and "mbexp.study.command" in reachable(graph, m)}
    assert not found, found
    # the docs' worked example is a fixture of scripts/ (scripts/worked_example.py): no module of the package loads it
    fixture = [f"{p.relative_to(PACKAGE.parent)}" for p in PACKAGE.rglob("*.py")
               for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(node, ast.Import | ast.ImportFrom) and "worked_example" in ast.unparse(node)]
    assert not fixture and not list(PACKAGE.rglob("example.py")), fixture


def test_the_ladder_subpackage_never_reaches_the_writers_of_files_and_pages():
    # mbexp/analysis/ladder computes and renders a ladder; outputs, report and readme import it, never the reverse
    graph = import_graph(PACKAGE)
    writers = {"mbexp.analysis.outputs", "mbexp.analysis.report", "mbexp.analysis.readme"}
    found = {m: reachable(graph, m) & writers for m in graph if m.startswith("mbexp.analysis.ladder")}
    assert "mbexp.analysis.ladder.scaling" in found and not any(found.values()), found
    assert "mbexp.analysis.ladder.render" in reachable(graph, "mbexp.analysis.outputs")


def test_claims_error_has_one_home_and_every_import_names_it():
    # one exception for a claims file that does not validate, defined in mbexp/claims/__init__.py, imported from there
    roots = [PACKAGE.parent / d for d in ("mbexp", "scripts", "tests")]
    defined, imported = [], []
    for path in (p for root in roots for p in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == "ClaimsError":
                defined.append(path.relative_to(PACKAGE.parent).as_posix())
            elif isinstance(node, ast.ImportFrom) and any(a.name == "ClaimsError" for a in node.names):
                imported.append(node.module)
    assert defined == ["mbexp/claims/__init__.py"] and set(imported) == {"mbexp.claims"}, (defined, imported)


def test_reading_the_claims_file_loads_neither_torch_nor_pandas():
    # the trainer reads it at every launch, before torch; a statistic imports the analysis inside its methods
    code = "from mbexp.claims.parse import covering; print(len(covering('results', 'ffn_wsd_cpu')))"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=PACKAGE.parent, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and int(proc.stdout) > 0, proc.stderr[-2000:]
    loaded = imported(proc.stderr)
    assert "mbexp.claims.statistics" in loaded and not loaded & {"torch", "pandas", "scipy", "mbexp.analysis"}


@pytest.mark.source
def test_modules_stay_short_and_long_ones_say_why():
    # docs/contributing.md: about 300 lines, 350 at most; a module over 300 states why in its docstring
    texts = {p.relative_to(PACKAGE.parent): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    sizes = {p: len(text.splitlines()) for p, text in texts.items()}
    too_long = {p: n for p, n in sizes.items() if n > 350}
    unexplained = [p for p, n in sizes.items() if n > 300 and "Over 300 lines:" not in texts[p].split('"""')[1]]
    assert len(sizes) > 30 and not too_long and not unexplained, (too_long, unexplained)


def test_comments_are_two_lines_at_most():
    # docs/contributing.md: a comment says what and why in two lines; more belongs in a docstring or the docs
    found = []
    for path in (p for d in ("mbexp", "scripts", "tests") for p in (PACKAGE.parent / d).rglob("*.py")):
        run = 0
        for n, line in enumerate([*path.read_text(encoding="utf-8").splitlines(), ""], 1):
            run = run + 1 if line.lstrip().startswith("#") else 0
            if run == 3:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{n - 2}")
    assert not found, found
