"""mbexp.study's process handling, in this process: the line it prints for each sweep, the sweep's environment and
exit code, the signal the sweep gets when the study dies, and the --jobs value it accepts. (The study killed
outright, and Ctrl-C, are tests/test_study.py's slow tests.)"""

import argparse
import io
import os
import shlex
import signal
import sys

import pytest

from mbexp import RERUN_ENV
from mbexp.study import command

# prints the rerun command the study hands its sweep, then the death signal the sweep would get (PR_GET_PDEATHSIG)
CHILD = ("import ctypes, os; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); "
         f"print(os.environ[{RERUN_ENV!r}], v.value, flush=True)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_is_announced_first_gets_the_rerun_command_and_a_sigterm_when_the_study_dies(capfd):
    command._run([sys.executable, "-c", CHILD], "python -m mbexp.study s")
    out = capfd.readouterr().out.splitlines()
    assert out == [f"$ {shlex.join(['python', '-c', CHILD])}", f"python -m mbexp.study s {int(signal.SIGTERM)}"]


def test_a_failed_sweep_exits_the_study_with_its_code():
    with pytest.raises(SystemExit) as err:
        command._run([sys.executable, "-c", "raise SystemExit(3)"], "x")
    assert err.value.code == 3


@pytest.mark.parametrize(("text", "jobs"), [("1", 1), ("2", 2), ("16", 16)])
def test_jobs_takes_any_whole_number_from_one(text, jobs):
    assert command._jobs(text) == jobs


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_jobs_refuses_the_rest_and_says_what_it_needs(text):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        command._jobs(text)
    assert str(err.value) == f"must be a whole number of runs >= 1, got {text!r}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_whose_study_died_before_it_started_never_runs(tmp_path):
    """The sweep's set-up finds its parent is no longer the study (here: a child of the study's fork) and ends,
    though the study's own SIGTERM handler, which _run installs, is still in place in the fork."""
    set_up, ran = command._with_study(), tmp_path / "ran"
    pid = os.fork()
    if pid == 0:  # stands in for the study's process after it died: the sweep's parent is not the study
        code = 1
        try:
            signal.signal(signal.SIGTERM, lambda signum, frame: None)
            sweep = os.fork()
            if sweep == 0:
                try:
                    set_up()
                    ran.write_text("the sweep ran")
                finally:
                    os._exit(0)
            _, status = os.waitpid(sweep, 0)
            code = os.waitstatus_to_exitcode(status)
        finally:
            os._exit(code & 0xFF)
    _, status = os.waitpid(pid, 0)
    assert not ran.exists()
    assert os.waitstatus_to_exitcode(status) == command.INTERRUPTED


def test_the_announce_line_is_out_before_the_sweep_writes(capfd, monkeypatch):
    """Under nohup or a pipe, stdout is block-buffered: the `$ python ...` line must still precede the sweep's own
    output, which reaches the same file directly."""
    buffered = io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.dup(1), "w"), buffer_size=1 << 16))
    monkeypatch.setattr(sys, "stdout", buffered)
    sweep = "print('the sweep')"
    command._run([sys.executable, "-c", sweep], "x")
    buffered.flush()
    assert capfd.readouterr().out.splitlines() == [f"$ {shlex.join(['python', '-c', sweep])}", "the sweep"]


def test_a_sigterm_before_the_sweep_exists_reaches_it_once_it_starts(monkeypatch):
    """The signal lands while the sweep is being set up (here: from the hook that builds its preexec_fn), so the
    study passes it on once the sweep's group exists: the sweep stops at once, and the study reports it."""
    monkeypatch.setattr(command, "_with_study", lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(KeyboardInterrupt):  # a sweep killed by the signal, not stopped at a checkpoint (130)
        command._run([sys.executable, "-c", "import time; time.sleep(60)"], "x")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
