"""A study's protocol as pure functions of its declaration and the runs on disk (docs/studies.md): read the scan's
validation losses, choose each row's value of the tuned key, flag a choice at an end of the grid. The study command
(mbexp.study.command) and the tables (mbexp.analysis.studies, lr_scan) both read it."""

import math
from dataclasses import dataclass
from pathlib import Path

from mbexp.claims.file import CLAIMS_FILE, claims_path, finite_number
from mbexp.io import FINISHED, SummaryError, is_number, read_summary
from mbexp.run.identity import summaries_of
from mbexp.run.migrate import identity_values
from mbexp.run.summary import lr_problem
from mbexp.study.spec import LR, Study, identity_key, load_studies


class StudyError(ValueError):
    pass


@dataclass(frozen=True)
class Choice:
    """A row's value of the tuned key, chosen on the scan's mean validation loss at the study's selection budget."""

    value: float
    edge: str  # "" inside the grid, "low"/"high" at an end of it: the optimum may lie beyond
    losses: dict  # value -> mean final validation loss over the scan seeds (inf: diverged or missing)


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


def spelled(value) -> str:
    """A value of the tuned key as a command line writes it: a float's repr (1e-3 -> 0.001), an integer as is."""
    return repr(float(value)) if isinstance(value, float) else str(value)


def row_of(study: Study, identity: dict) -> tuple[str, ...]:
    """The study row a run's identity belongs to: its values of the row keys, as text (a key added later and left
    out stands for its old value)."""
    ident = identity_values(identity)
    return tuple(str(ident.get(identity_key(k))) for k in study.rows)


def tuned_value(study: Study, identity: dict):
    """The run's value of the study's tuned key (a key added later and left out stands for its old value)."""
    return identity_values(identity).get(study.tune)


def _tuned_problem(study: Study, identity: dict) -> str:
    """Why a run's identity names no usable value of the tuned key ('' when it names one)."""
    if study.tune == LR:
        return lr_problem(identity)
    value = tuned_value(study, identity)
    return "" if finite_number(value) else f"identity {study.tune}={value!r} is not a number"


def _damage(study: Study, summary: dict) -> str:
    """What in a finished scan run's summary cannot be read (its tuned value, its loss), '' when nothing."""
    ident = summary.get("identity")
    if why := _tuned_problem(study, ident if isinstance(ident, dict) else {}):
        return why
    loss = summary.get("final_val_loss") if summary.get("status") == "completed" else None
    if loss is not None and not is_number(loss):
        return f"final_val_loss={loss!r} is not a number"
    return ""


def scan_losses(study: Study, results_dir, steps: int | None = None, damaged: list | None = None) -> dict:
    """(row values, tuned value) -> final validation losses of the scan's finished runs at budget `steps` (default:
    the selection budget). A run whose summary cannot be read counts as unfinished; `damaged` collects why."""
    steps = study.select_at if steps is None else steps
    damaged, readable = [] if damaged is None else damaged, []
    for path in summaries_of(results_dir, study.scan_experiment):
        try:
            s = read_summary(path, strict=True)
        except SummaryError as err:  # the message names the file
            damaged.append(str(err))
            continue
        if _counted(study, s, steps) and (why := _damage(study, s)):
            damaged.append(f"{path}: {why}")
            continue
        readable.append(s)
    return tally(study, readable, steps)


def _counted(study: Study, summary: dict, steps: int) -> bool:
    """Whether a summary is a finished scan run at `steps`: a run still training (or stopped) is missing, not
    diverged."""
    return summary.get("steps") == steps and summary.get("seed") in study.scan_seeds and \
        summary.get("status") in FINISHED


def tally(study: Study, summaries, steps: int) -> dict:
    """scan_losses at `steps` of readable scan-run summaries (or a table's run records, which hold the same keys)."""
    found: dict = {}
    for s in summaries:
        if not _counted(study, s, steps):
            continue
        loss = s.get("final_val_loss") if s.get("status") == "completed" else None
        found.setdefault((row_of(study, s["identity"]), float(tuned_value(study, s["identity"]))), []).append(
            math.inf if loss is None else loss)
    return found


def best_of(grid, losses: dict) -> Choice:
    """The grid value with the lowest mean loss (ties: the smaller), and whether it is an end of the grid."""
    best = min(grid, key=lambda v: (losses[v], v))
    return Choice(best, "low" if best == grid[0] else "high" if best == grid[-1] else "", losses)


def choices_of(study: Study, found: dict) -> tuple[dict, list]:
    """Each scanned row's Choice from the scan's losses `found` (scan_losses), for the rows whose scan is complete;
    and the scan runs missing, as the overrides that would train them."""
    choices, missing = {}, []
    for values in study.scan_row_values():
        row = tuple(str(v) for v in values)
        losses, gaps = {}, []
        for value in study.grid:
            runs = found.get((row, float(value)), [])
            if len(runs) < len(study.scan_seeds):
                gaps.append(" ".join(study.row_overrides(values)) + f" {study.tune}={spelled(value)}")
            losses[value] = sum(runs) / len(runs) if runs else math.inf
        missing += gaps
        if not gaps:
            choices[values] = best_of(study.grid, losses)
    return choices, missing


def choose(study: Study, results_dir) -> dict:
    """Each row's Choice: the grid value with the lowest mean validation loss over the scan seeds (ties: the
    smaller), a row of a `transfer_from` study its base row's; StudyError names the scan runs still missing."""
    damaged: list = []
    choices, missing = choices_of(study, scan_losses(study, results_dir, damaged=damaged))
    if missing:
        # a damaged finished run is skipped by the rerun too: only repairing or deleting it helps
        fix = f"{damaged[0]}; repair or delete that run folder, then rerun" if damaged else "rerun"
        raise StudyError(f"study {study.name!r}: {len(missing)} scan run(s) unfinished, e.g. {missing[0]}; {fix} "
                         "the study command")
    if lost := [values for values, c in choices.items() if math.isinf(c.losses[c.value])]:
        raise StudyError(f"study {study.name!r}: every {study.tuned} of the grid diverged in the scan for "
                         f"{' '.join(study.row_overrides(lost[0]))} ({len(lost)} row(s)); declare a grid that "
                         "reaches further")
    return {values: choices[source(study, values)] for values in study.row_values()}


def source(study: Study, values: tuple) -> tuple:
    """The scanned row whose choice a row takes: itself, or with `transfer_from` the row at the base value."""
    return next(v for v in study.scan_row_values() if all(a == b or k in dict(study.transfer_from)
                                                           for k, a, b in zip(study.rows, v, values)))
