"""`python -m mbexp.study NAME`: a declared study, end to end. Its scan runs every row at every value of the
tuned key's grid (the LR unless declared otherwise) on the scan seeds, each row's value is chosen on validation
(mbexp.study.protocol), then the planned seeds run at it (docs/studies.md). Every phase is an ordinary
`mbexp.train` sweep, so a stopped study resumes by rerunning."""

import argparse
import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable

from mbexp import INTERRUPTED, RERUN_ENV, RESULTS_DIR, Parser
from mbexp.claims import ClaimsError
from mbexp.claims.parse import check as check_claims
from mbexp.config import hydra_override
from mbexp.study.protocol import StudyError, choose, load_study, spelled
from mbexp.study.spec import LR, Study

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _sweep(study: Study, name: str, seeds, values, rows: list[str], jobs: int, results_dir: str) -> list[str]:
    budgets = ",".join(str(b) for b in study.budgets)
    # rows first: the sweep's outer loop, so each row's scan completes (and can be read) before the next starts
    argv = [sys.executable, "-m", "mbexp.train", "-m", f"+experiment={study.experiment}", f"name={name}", *rows,
            "optim.schedule=wsd", f"train.budgets=[{budgets}]", f"train.steps={study.budgets[-1]}",
            f"{study.tune}={','.join(spelled(v) for v in values)}", f"seed={','.join(str(s) for s in seeds)}",
            hydra_override("results_dir", str(results_dir)), *study.overrides]
    if jobs > 1:
        argv += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    return argv


def scan_command(study: Study, *, jobs: int = 1, results_dir: str = RESULTS_DIR) -> list[str]:
    """The scan: every scanned row x every value of the grid x the scan seeds, each at every budget (WSD branches)."""
    rows = [f"{key}={','.join(str(v) for v in values)}" for key, values in study.scanned_rows.items()]
    return _sweep(study, study.scan_experiment, study.scan_seeds, study.grid, rows, jobs, results_dir)


def confirm_commands(study: Study, choices: dict, *, jobs: int = 1, results_dir: str = RESULTS_DIR
                     ) -> list[list[str]]:
    """One sweep per row: its planned seeds at its chosen value."""
    return [_sweep(study, study.experiment, study.seeds, [choices[values].value], study.row_overrides(values), jobs,
                   results_dir) for values in study.row_values()]


def _with_study() -> Callable[[], None] | None:
    """A preexec_fn by which the sweep gets a SIGTERM when the study dies, of a SIGKILL too, and so stops at a
    checkpoint instead of training on unseen (Linux's PR_SET_PDEATHSIG; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl, study = ctypes.CDLL(None).prctl, os.getpid()  # looked up before the fork

    def set_up() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != study:  # the study died before the line above: no signal will come, so no sweep
            os._exit(INTERRUPTED)  # (a SIGTERM to itself would reach _run's handler, inherited by this fork)

    return set_up


def _run(argv: list[str], rerun: str) -> None:
    """One sweep in its own process group, waited for through a Ctrl-C or a SIGTERM, which the study passes on to
    that whole group (its joblib workers too): the runs stop at a checkpoint and say so (exit 130). A study
    killed outright takes its sweep down the same way (_with_study)."""
    print("$", shlex.join(["python", *argv[1:]]), flush=True)
    interrupted, sweep = [], None

    def forward(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the sweep has just ended
            os.killpg(sweep.pid, signum)

    def stop(signum, frame):
        interrupted.append(signum)
        if sweep is not None:
            forward(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        # its Ctrl-C line names the study; its own group, so that each signal reaches it once, from here
        sweep = subprocess.Popen(argv, env=os.environ | {RERUN_ENV: rerun}, process_group=0,
                                 preexec_fn=_with_study())
        for signum in interrupted:  # a signal before the sweep existed
            forward(signum)
        code = sweep.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if interrupted and code != INTERRUPTED:
        raise KeyboardInterrupt
    if code:
        sys.exit(code)


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of runs >= 1, got {text!r}")
    return jobs


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m mbexp.study", description=__doc__)
    parser.add_argument("name", help="a study declared under `studies:` in <results>/claims.yaml")
    parser.add_argument("--results", default=RESULTS_DIR)
    parser.add_argument("--jobs", type=_jobs, default=1, help="runs side by side (joblib launcher)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    rerun = shlex.join(["python", "-m", "mbexp.study", *argv])
    try:
        check_claims(args.results)  # the whole file, its claims too: mbexp.train would refuse it at the first sweep
        study = load_study(args.results, args.name)
        reuse = f" (the scan of {study.scan_of})" if study.scan_of else ""
        reuse += "".join(f", scanned at {k}={v} only" for k, v in study.transfer_from)
        tried = f"{len(study.grid)} LRs" if study.tune == LR else f"{len(study.grid)} values of {study.tune}"
        print(f"study {study.name}: {len(study.row_values())} rows x {tried} x "
              f"{len(study.scan_seeds)} scan seed(s){reuse}, then {len(study.seeds)} planned seeds; budgets "
              f"{list(study.budgets)}", flush=True)
        # a study reusing another's scan runs that scan's own command: its finished runs are skipped
        scan = scan_command(load_study(args.results, study.scan_of) if study.scan_of else study, jobs=args.jobs,
                            results_dir=args.results)
        if args.dry_run:  # the scan's pre-flight, as mbexp.train runs it: every row, value and seed checked
            from mbexp.config import ConfigError
            from mbexp.corpus import CorpusError
            from mbexp.train import normalize_argv, preflight

            try:
                preflight(normalize_argv(scan[2:])[1:], skip=False)
            except (ConfigError, CorpusError) as exc:
                raise StudyError(f"the scan cannot run: {exc}") from None
            print(shlex.join(["python", *scan[1:]]))
            print(f"then, per row, its planned seeds at the {study.tuned} the scan chose")
            return
        print(f"[1/3] scan -> {args.results}/runs/{study.scan_experiment}", flush=True)
        _run(scan, rerun)
        choices = choose(study, args.results)
        print("[2/3] chosen on validation at", study.select_at, "steps:", flush=True)
        for values, c in choices.items():
            edge = f" (at the {c.edge} edge of the grid)" if c.edge else ""
            print(f"  {' '.join(study.row_overrides(values))}: {study.tune}={c.value:g}{edge}")
        print(f"[3/3] planned seeds -> {args.results}/runs/{study.experiment}", flush=True)
        for command in confirm_commands(study, choices, jobs=args.jobs, results_dir=args.results):
            _run(command, rerun)
    except (StudyError, ClaimsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C between sweeps (a sweep interrupted says so itself, and exits 130)
        print(f"interrupted: rerun {rerun} to resume", file=sys.stderr)
        sys.exit(INTERRUPTED)
