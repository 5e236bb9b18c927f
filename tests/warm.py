"""A warm interpreter for the tests' `python -m mbexp.train` commands (tests/tiny.py: mbexp_train): torch, the
compiler front end torch.optim loads, and Hydra are imported once, then each command runs in a process forked from
here, as `python -m mbexp.train` runs it, in its own folder, environment and output files.

Requests come one per line on stdin (JSON: args, cwd, env, out, err, and session to start a session of its own);
for each, this process writes the child's pid and, when it ends, its exit code (minus the signal that ended it),
one line each."""

import atexit
import contextlib
import gc
import json
import os
import random
import runpy
import signal
import sys
import threading

import hydra  # noqa: F401 - the imports every run pays before its first step
import numpy as np
import torch  # noqa: F401
import torch._dynamo  # noqa: F401 - what torch.optim's first optimizer imports


def serve() -> dict:
    """Forks one child per request and reports its pid and exit; returns the request in the child."""
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        gc.freeze()  # the imports' objects: the child's collections skip them (no copy of every page they touch)
        pid = os.fork()
        if pid == 0:
            return request
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    sys.exit(0)


def become(request: dict) -> None:
    """The child: the command's folder, environment, streams, fresh random states, then the module as `-m` runs it
    (an exception or exit code ends this interpreter as it would end that one)."""
    if request.get("session"):  # as Popen(start_new_session=True): os.killpg(pid, ...) reaches the command alone
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["out"], os.O_WRONLY),
                            (2, request["err"], os.O_WRONLY)):
        if fd == 2 and path == request["out"]:  # stderr into the same file as stdout, as stderr=STDOUT
            os.dup2(1, 2)
            continue
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    random.seed()  # a new process's generators are seeded from the OS, not shared with its siblings
    np.random.seed()
    sys.path[0] = request["cwd"]
    sys.argv = ["-m", *request["args"]]
    runpy.run_module("mbexp.train", run_name="__main__", alter_sys=True)


def end(code) -> None:
    """The child's exit as the interpreter's own, less tearing down the modules it shares with the warm interpreter
    (slow with torch loaded): threading's exit hooks and a join, atexit's functions, the streams flushed."""
    threading._shutdown()  # what the interpreter runs first: threading's exit hooks, then a join of other threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    if code == "SIGINT":  # an uncaught Ctrl-C: the interpreter ends by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


if __name__ == "__main__":
    request = serve()
    try:
        become(request)
        code = 0
    except SystemExit as stop:  # sys.exit's code: None is 0, a number is itself, anything else printed and 1
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException as exc:  # uncaught: its traceback, exit 1 (Ctrl-C: killed by SIGINT)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = "SIGINT" if isinstance(exc, KeyboardInterrupt) else 1
    end(code)
