"""Shared settings for tests that train: the smoke experiment (seconds on a CPU) in a test's own folders."""

import atexit
import collections
import contextlib
import functools
import importlib.util
import io
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
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


def compile_capturing(runs: collections.Counter):
    """A stand-in for mbexp.trainer.compile_model: torch.compile with fixed shapes, as it compiles, but each graph
    dynamo captures runs as captured (no inductor: a cold inductor compile is too slow for a fast test), its calls
    counted in `runs` by the graph's index."""
    import torch

    def backend(graph, example_inputs):
        index = len(runs)
        runs[index] = 0

        def run(*args):
            runs[index] += 1
            return graph.forward(*args)

        return run

    def compile_model(model):
        torch._dynamo.reset()  # no earlier test's graphs: their recompile limit would send this model to eager
        return torch.compile(model, backend=backend, dynamic=False)

    return compile_model


def mbexp_train(args: list[str], *, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m mbexp.train ARGS` as a user types it, from the repository root: in a process forked from a warm
    interpreter (tests/warm.py) where nothing it imported reads a variable that differs, else in a new one."""
    command, env = [sys.executable, "-m", "mbexp.train", *clean(args)], {**os.environ, **(env or {})}
    if _warm_reads_the_same(env):
        return _run_warm(command, env, timeout)
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


# the variables read while a command runs, not when torch or Hydra is imported: these may differ from the warm
# interpreter's; any other difference (OpenMP's, torch's, Python's own settings) gets a new interpreter
RUN_TIME_ENV = ("PYTEST_CURRENT_TEST", "WANDB_", "MBEXP_", "GIT_", "TORCHINDUCTOR_CACHE_DIR")


def _warm_reads_the_same(env: dict) -> bool:
    """Whether `env` differs from the warm interpreter's environment in run-time variables only."""
    started = _warm()[1] if _warm.cache_info().currsize else os.environ  # one not started yet would get os.environ
    differ = (set(env) ^ set(started)) | {k for k in env.keys() & started.keys() if env[k] != started[k]}
    return all(k.startswith(RUN_TIME_ENV) for k in differ)


@functools.cache
def _warm() -> tuple[subprocess.Popen, dict]:
    """The warm interpreter of this test process, started on first use, and the environment it started with."""
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "warm.py")], cwd=REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    atexit.register(_stop, proc)
    return proc, env


def _stop(proc: subprocess.Popen) -> None:
    """The warm interpreter ends at the end of its input; its exit is waited for (no process outlives the tests)."""
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def popen_train(args: list[str], *, warm: bool = True) -> "subprocess.Popen | WarmProcess":
    """`python -m mbexp.train ARGS` started as Popen(start_new_session=True, stderr=STDOUT) starts it, for a test
    that signals it: a child of the warm interpreter where mbexp_train would use one (one at a time; `warm` False
    for commands that must run side by side), else a new process. Either has pid, poll(), wait(timeout),
    stdout.read() and communicate(timeout)."""
    command, env = [sys.executable, "-m", "mbexp.train", *clean(args)], dict(os.environ)
    if warm and _warm_reads_the_same(env):
        return WarmProcess(command, env)
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


class WarmProcess:
    """A command run by a child of the warm interpreter in a session of its own, its stdout and stderr in one file;
    the warm interpreter serves nothing else until it ends (a later request first kills it: _end_started)."""

    def __init__(self, command: list[str], env: dict):
        self.args, self.returncode, self._folder = command, None, tempfile.TemporaryDirectory()
        self._out = Path(self._folder.name, "out")
        self._out.touch()
        self._fd = _warm()[0].stdout.fileno()
        self.pid = _start_warm(command, env, self._out, self._out, session=True)
        _started.append(self)

    @property
    def stdout(self) -> io.StringIO:
        return io.StringIO(self._out.read_text())

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is not None or _readable(self._fd) else None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = _line(self._fd, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(code)
            _started.remove(self)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self._out.read_text(), None


_started: list[WarmProcess] = []  # the warm interpreter's command still running, if any


def _end_started() -> None:
    """A command a failed test left running is killed, and its exit read, before the next request."""
    for proc in list(_started):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _start_warm(command: list[str], env: dict, out: Path, err: Path, session: bool = False) -> int:
    """`command` handed to the warm interpreter (once a command a failed test left running has ended); its pid."""
    _end_started()
    proc = _warm()[0]
    request = {"args": command[3:], "cwd": str(REPO), "env": env, "out": str(out), "err": str(err),
               "session": session}
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    return int(_line(proc.stdout.fileno(), None))


def _run_warm(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`command` run by a child of the warm interpreter, with subprocess.run's result and its timeout."""
    proc = _warm()[0]
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder, "out"), Path(folder, "err")
        out.touch(), err.touch()
        pid = _start_warm(command, env, out, err)
        code = _line(proc.stdout.fileno(), timeout)
        if code is None:  # as subprocess.run: the command killed, what it wrote kept with the error
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _line(proc.stdout.fileno(), None)
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(command, int(code), out.read_text(), err.read_text())


def _line(fd: int, timeout: float | None) -> str | None:
    """One line from the warm interpreter, read unbuffered (its next line stays unread); None after `timeout`."""
    got = b""
    while not got.endswith(b"\n"):
        if not select.select([fd], [], [], timeout)[0]:
            return None
        byte = os.read(fd, 1)
        if not byte:
            raise RuntimeError("the warm interpreter (tests/warm.py) ended")
        got += byte
    return got.decode()


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


@contextlib.contextmanager
def model_forwards(call):
    """Call call(model, inputs) at each forward of a DecoderLM run in the block, training or evaluating: what a test
    sees of the model a run in this process builds and steps."""
    import torch

    from mbexp.model import DecoderLM

    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: call(module, args[0]) if isinstance(module, DecoderLM) else None)
    try:
        yield
    finally:
        handle.remove()


def during_step(step: int, action):
    """Call action() in the forward pass of training step `step` of the run trained in the block: a signal or a
    fault that arrives mid-step, in this process."""
    started = 0

    def count(model, inputs):
        nonlocal started
        if model.training:  # a training step's forward, not an evaluation's
            started += 1
            if started == step:
                action()

    return model_forwards(count)


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
