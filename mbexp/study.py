"""`python -m mbexp.study NAME`: a declared LR protocol, end to end. The study's scan runs every row at every
LR of its grid on the scan seeds, each row's LR is chosen on validation, then the planned seeds run at it
(docs/studies.md). Every phase is an ordinary `mbexp.train` sweep, so a stopped study resumes by rerunning."""

import argparse
import contextlib
import ctypes
import math
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mbexp import INTERRUPTED, RERUN_ENV, RESULTS_DIR, Parser
from mbexp.claims_file import CLAIMS_FILE, ClaimsError, Study, claims_path, identity_key, load_studies
from mbexp.config import hydra_override
from mbexp.declarations import check as check_claims
from mbexp.io import FINISHED, SummaryError, is_number, read_summary
from mbexp.run.identity import summaries_of
from mbexp.run.migrate import identity_values
from mbexp.run.summary import lr_problem

MIN_SCAN_SEEDS = 2  # fewer: a row's LR choice cannot be told from seed noise (the scan table's `gap (noise)`)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class StudyError(ValueError):
    pass


@dataclass(frozen=True)
class Choice:
    """A row's LR, chosen on the scan's mean validation loss at the study's selection budget."""

    lr: float
    edge: str  # "" inside the grid, "low"/"high" at an end of it: the optimum may lie beyond
    losses: dict  # lr -> mean final validation loss over the scan seeds (inf: diverged or missing)


def load_study(results_dir, name: str) -> Study:
    """The study `name` declared in <results_dir>/claims.yaml."""
    if claims_path(results_dir) is None:
        raise StudyError(f"{Path(results_dir) / CLAIMS_FILE} does not exist: a study is declared under `studies:` "
                         "there (docs/studies.md); give --results the folder that holds it")
    studies = load_studies(results_dir)
    if name not in studies:
        raise StudyError(f"{Path(results_dir) / CLAIMS_FILE} declares no study {name!r}; declared: "
                         f"{', '.join(studies) or 'none'}")
    return studies[name]


def _sweep(study: Study, name: str, seeds, lrs, rows: list[str], jobs: int, results_dir: str) -> list[str]:
    budgets = ",".join(str(b) for b in study.budgets)
    # rows first: the sweep's outer loop, so each row's scan completes (and can be read) before the next starts
    argv = [sys.executable, "-m", "mbexp.train", "-m", f"+experiment={study.experiment}", f"name={name}", *rows,
            "optim.schedule=wsd", f"train.budgets=[{budgets}]", f"train.steps={study.budgets[-1]}",
            f"optim.lr={','.join(_lr(v) for v in lrs)}", f"seed={','.join(str(s) for s in seeds)}",
            hydra_override("results_dir", str(results_dir)), *study.overrides]
    if jobs > 1:
        argv += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    return argv


def _lr(value: float) -> str:
    return repr(float(value))


def scan_command(study: Study, *, jobs: int = 1, results_dir: str = RESULTS_DIR) -> list[str]:
    """The scan: every row x every LR of the grid x the scan seeds, each at every budget (WSD branches)."""
    rows = [f"{key}={','.join(str(v) for v in values)}" for key, values in study.rows.items()]
    return _sweep(study, study.scan_experiment, study.scan_seeds, study.lr_grid, rows, jobs, results_dir)


def confirm_commands(study: Study, choices: dict, *, jobs: int = 1, results_dir: str = RESULTS_DIR
                     ) -> list[list[str]]:
    """One sweep per row: its planned seeds at its chosen LR."""
    return [_sweep(study, study.experiment, study.seeds, [choices[values].lr], study.row_overrides(values), jobs,
                   results_dir) for values in study.row_values()]


def row_of(study: Study, identity: dict) -> tuple[str, ...]:
    """The study row a run's identity belongs to: its values of the row keys, as text (a key added later and left
    out stands for its old value)."""
    ident = identity_values(identity)
    return tuple(str(ident.get(identity_key(k))) for k in study.rows)


def _damage(summary: dict) -> str:
    """What in a finished scan run's summary cannot be read (its identity's LR, its loss), '' when nothing."""
    ident = summary.get("identity")
    if why := lr_problem(ident if isinstance(ident, dict) else {}):
        return why
    loss = summary.get("final_val_loss") if summary.get("status") == "completed" else None
    if loss is not None and not is_number(loss):
        return f"final_val_loss={loss!r} is not a number"
    return ""


def scan_losses(study: Study, results_dir, steps: int | None = None, damaged: list | None = None) -> dict:
    """(row values, lr) -> final validation losses of the scan's finished runs at budget `steps` (default: the
    selection budget). A run whose summary cannot be read counts as unfinished; `damaged` collects why."""
    steps = study.select_at if steps is None else steps
    found: dict = {}
    damaged = [] if damaged is None else damaged
    for path in summaries_of(results_dir, study.scan_experiment):
        try:
            s = read_summary(path, strict=True)
        except SummaryError as err:  # the message names the file
            damaged.append(str(err))
            continue
        if s.get("steps") != steps or s.get("seed") not in study.scan_seeds or s.get("status") not in FINISHED:
            continue  # a run still training (or stopped) is missing, not diverged
        if why := _damage(s):
            damaged.append(f"{path}: {why}")
            continue
        loss = s.get("final_val_loss") if s.get("status") == "completed" else None
        found.setdefault((row_of(study, s["identity"]), float(s["identity"]["optim.lr"])), []).append(
            math.inf if loss is None else loss)
    return found


def best_of(grid, losses: dict) -> Choice:
    """The grid LR with the lowest mean loss (ties: the smaller), and whether it is an end of the grid."""
    best = min(grid, key=lambda lr: (losses[lr], lr))
    return Choice(best, "low" if best == grid[0] else "high" if best == grid[-1] else "", losses)


def choose(study: Study, results_dir) -> dict:
    """Each row's Choice: the grid LR with the lowest mean validation loss over the scan seeds (ties: the
    smaller LR); StudyError names the scan runs still missing."""
    damaged: list = []
    found, choices, missing = scan_losses(study, results_dir, damaged=damaged), {}, []
    for values in study.row_values():
        row = tuple(str(v) for v in values)
        losses = {}
        for lr in study.lr_grid:
            runs = found.get((row, lr), [])
            if len(runs) < len(study.scan_seeds):
                missing.append(" ".join(study.row_overrides(values)) + f" optim.lr={_lr(lr)}")
            losses[lr] = sum(runs) / len(runs) if runs else math.inf
        choices[values] = best_of(study.lr_grid, losses)
    if missing:
        # a damaged finished run is skipped by the rerun too: only repairing or deleting it helps
        fix = f"{damaged[0]}; repair or delete that run folder, then rerun" if damaged else "rerun"
        raise StudyError(f"study {study.name!r}: {len(missing)} scan run(s) unfinished, e.g. {missing[0]}; {fix} "
                         "the study command")
    if lost := [values for values, c in choices.items() if math.isinf(c.losses[c.lr])]:
        raise StudyError(f"study {study.name!r}: every LR of the grid diverged in the scan for "
                         f"{' '.join(study.row_overrides(lost[0]))} ({len(lost)} row(s)); declare an lr_grid that "
                         "reaches lower")
    return choices


def _with_study() -> Callable[[], None] | None:
    """A preexec_fn by which the sweep gets a SIGTERM when the study dies, of a SIGKILL too, and so stops at a
    checkpoint instead of training on unseen (Linux's PR_SET_PDEATHSIG; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl, study = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()  # looked up before the fork

    def set_up() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != study:  # the study died before the line above: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)

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
        print(f"study {study.name}: {len(study.row_values())} rows x {len(study.lr_grid)} LRs x "
              f"{len(study.scan_seeds)} scan seed(s){reuse}, then {len(study.seeds)} planned seeds; budgets "
              f"{list(study.budgets)}", flush=True)
        # a study reusing another's scan runs that scan's own command: its finished runs are skipped
        scan = scan_command(load_study(args.results, study.scan_of) if study.scan_of else study, jobs=args.jobs,
                            results_dir=args.results)
        if args.dry_run:  # the scan's pre-flight, as mbexp.train runs it: every row, LR and seed checked
            from mbexp.config import ConfigError
            from mbexp.corpus import CorpusError
            from mbexp.train import normalize_argv, preflight

            try:
                preflight(normalize_argv(scan[2:])[1:], skip=False)
            except (ConfigError, CorpusError) as exc:
                raise StudyError(f"the scan cannot run: {exc}") from None
            print(shlex.join(["python", *scan[1:]]))
            print("then, per row, its planned seeds at the LR the scan chose")
            return
        print(f"[1/3] scan -> {args.results}/runs/{study.scan_experiment}", flush=True)
        _run(scan, rerun)
        choices = choose(study, args.results)
        print("[2/3] chosen on validation at", study.select_at, "steps:", flush=True)
        for values, c in choices.items():
            edge = f" (at the {c.edge} edge of the grid)" if c.edge else ""
            print(f"  {' '.join(study.row_overrides(values))}: lr {c.lr:g}{edge}")
        print(f"[3/3] planned seeds -> {args.results}/runs/{study.experiment}", flush=True)
        for command in confirm_commands(study, choices, jobs=args.jobs, results_dir=args.results):
            _run(command, rerun)
    except (StudyError, ClaimsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C between sweeps (a sweep interrupted says so itself, and exits 130)
        print(f"interrupted: rerun {rerun} to resume", file=sys.stderr)
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
