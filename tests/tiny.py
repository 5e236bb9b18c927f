"""Shared settings for tests that train: the smoke experiment (seconds on a CPU) in a test's own folders."""

import contextlib
import functools
import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SMOKE = ["+experiment=smoke"]  # conf/experiment/smoke.yaml: the model and budget users run as a smoke test


def overrides(tmp: Path, cache: Path, *extra: str, logger: str = "none") -> list[str]:
    """SMOKE plus the folders of one test: results under tmp, the shared token cache."""
    return [*SMOKE, f"results_dir={tmp}/results", f"data.cache_dir={cache}", f"logger={logger}",
            f"logger.dir={tmp}" if logger == "wandb" else "", *extra]


def clean(args: list[str]) -> list[str]:
    """`args` without empty strings, and a key given twice only at its last value (a test's extra override
    replaces SMOKE's; the command line itself refuses a key given twice)."""
    args = [a for a in args if a]
    last = {a.partition("=")[0].lstrip("+"): i for i, a in enumerate(args) if "=" in a}
    return [a for i, a in enumerate(args) if "=" not in a or last[a.partition("=")[0].lstrip("+")] == i]


def mbexp_train(args: list[str], *, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m mbexp.train ARGS` as a user types it, from the repository root."""
    return subprocess.run([sys.executable, "-m", "mbexp.train", *clean(args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@functools.cache
def script(name: str):
    """scripts/<name>.py as a module, loaded once per test process."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_table_here(results: Path, *args: str) -> subprocess.CompletedProcess:
    """`python scripts/make_table.py --results RESULTS ARGS` run by its main in this process (its imports paid
    once): the exit code and what it prints, its log lines included, as a process of its own would give them."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    kept = root.handlers, root.level
    root.handlers = []  # so that the script's logging.basicConfig writes to this call's stderr, as in a process
    root.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = script("make_table").main(["--results", str(results), *args])
            except SystemExit as stop:  # argparse's usage errors
                code = stop.code
    finally:
        root.handlers, root.level = kept
        logging.addLevelName(logging.WARNING, "WARNING")
    return subprocess.CompletedProcess(["make_table.py", *args], code, out.getvalue(), err.getvalue())


def summaries(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(results).glob("runs/**/summary.json"))]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> tuple[list, list]:
    recs = metrics(run_dir)
    return ([(r["step"], r["train_loss"]) for r in recs if "train_loss" in r],
            [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r])


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (zombies count as ended), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after the command, which may hold spaces
        except OSError:  # a process that ended while we looked
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process is in process group `pgid`."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


@functools.cache
def committed_runs():
    """The committed runs under results/, read once per test process."""
    from mbexp.analysis.collect import collect_runs

    return collect_runs(REPO / "results")


def committed_tables(*experiments: str) -> dict:
    """Fresh tables of the committed runs of `experiments`."""
    from mbexp.analysis.table import tables_for

    runs = committed_runs()
    return tables_for(runs[runs["experiment"].isin(experiments)].copy())
