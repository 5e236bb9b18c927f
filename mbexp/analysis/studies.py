"""Declared studies in the tables (docs/studies.md): each row's LR as its study's scan chose it, whether every run
of the row sits at it, and the compute a study spent against the naive grid of separate runs."""

import contextlib
import math
from functools import cache

from mbexp.analysis.render import setting
from mbexp.analysis.table import Table
from mbexp.config import CONF_DIR, ConfigError, OptimConfig, compose_config
from mbexp.io import is_number, read_summary
from mbexp.run.identity import summaries_of
from mbexp.schedule import cooldown_start
from mbexp.study.protocol import StudyError, choose, row_of, tuned_value
from mbexp.study.spec import LR, Study, load_studies


def annotate(tables: dict[str, Table], results_dir) -> None:
    """Add to each declared study's table the columns lr_chosen, lr_edge and lr_own (every planned run of the row
    at its chosen LR), and a note saying how the LRs were chosen; a table whose scan is unfinished says so. A study
    that tunes another key says each row's choice in its note: the table's LR columns stay the LR's."""
    for study in load_studies(results_dir).values():
        table = tables.get(study.experiment)
        if table is None:
            continue
        try:
            choices = {tuple(map(str, values)): c for values, c in choose(study, results_dir).items()}
        except StudyError as exc:
            table.notes.append(f"each row's {study.tuned} is not known yet: {exc}")
            continue
        chosen, edge, own = {}, {}, {}
        for label, runs in table.runs.groupby("label"):
            c = choices.get(row_of(study, runs["identity"].iloc[0]))
            planned = runs[runs["seed"].isin(study.seeds)]
            chosen[label], edge[label] = (c.value, c.edge) if c else (math.nan, "")
            own[label] = bool(c) and len(planned) > 0 and all(
                is_number(v := tuned_value(study, i)) and math.isclose(v, c.value) for i in planned["identity"])
        how = (f"chosen by the declared study `{study.name}`"
               f"{f' (the scan of `{study.scan_of}`)' if study.scan_of else ''} on mean validation log-ppl at "
               f"{study.select_at} steps over scan seed(s) {', '.join(map(str, study.scan_seeds))} (runs in "
               f"`{study.scan_experiment}`) from {', '.join(setting(v) for v in study.grid)}")
        if study.tune != LR:
            table.notes.append(f"{study.tune} (scan): each row's {study.tune}, {how}: " + "; ".join(
                f"{label} {setting(v)}{f' (the {edge[label]} edge of the grid)' if edge[label] else ''}"
                f"{'' if own[label] else ', not every planned run at it'}" for label, v in chosen.items()))
            continue
        rows = table.rows
        rows["lr_chosen"], rows["lr_edge"] = rows["label"].map(chosen), rows["label"].map(edge).fillna("")
        rows["lr_own"] = rows["label"].map(own).fillna(False).astype(bool)
        table.notes.append(
            f"lr (scan): each row's LR, {how}; `edge`: the best LR is an end of the grid, so the optimum may lie "
            "beyond it; the scan seeds are not among the rows' seeds")


def _runs(study: Study, results_dir) -> list[dict]:
    """The summaries of every run the study made: its scan and its planned seeds, at its budgets."""
    out = []
    for experiment, seeds in ((study.scan_experiment, study.own_scan_seeds), (study.experiment, study.seeds)):
        if not seeds:
            continue  # a reused scan: counted by the study that ran it
        for path in summaries_of(results_dir, experiment):
            s = read_summary(path.parent)
            if s and s.get("seed") in seeds and s.get("steps") in study.budgets and s.get("step") and _counts(s):
                out.append(s)
    return out


def run_hours(results_dir, experiment: str) -> tuple[int, float]:
    """The experiment's runs and their run time in hours, from their summaries (a branch without its trunk)."""
    runs, seconds = 0, 0.0
    for path in summaries_of(results_dir, experiment):
        s = read_summary(path.parent)
        if s and s.get("step") and _counts(s):
            runs += 1
            seconds += _own(s)[1]
    return runs, seconds / 3600


def _own(summary: dict) -> tuple[float, float]:
    """(steps, seconds) the run itself trained: a budget branch without the trunk it resumed from."""
    branched = summary.get("branched") or {}
    return (summary["step"] - branched.get("step", 0),
            (summary.get("wall_time_s") or 0) - branched.get("wall_time_s", 0))


def _counts(summary: dict) -> bool:
    """Whether the numbers `cost` reads are numbers (collect_runs names a summary where they are not)."""
    branched = summary.get("branched") or {}
    return isinstance(branched, dict) and is_number(summary["step"]) and all(
        v is None or is_number(v) for v in (summary.get("tokens_seen"), summary.get("wall_time_s"),
                                            branched.get("step", 0), branched.get("wall_time_s", 0)))


def per_run_steps(study: Study) -> int:
    """Steps one (row, LR, seed) of the study trains: the largest budget, plus each smaller budget's cool-down."""
    top, fraction = study.budgets[-1], cooldown_fraction(study)
    return top + sum(b - cooldown_start(b, fraction) for b in study.budgets[:-1])


def cooldown_fraction(study: Study) -> float:
    """The cool-down fraction the study's runs train with: its experiment file with its overrides, as composed."""
    return _fraction(study.experiment, tuple(study.overrides))


@cache
def _fraction(experiment: str, overrides: tuple[str, ...]) -> float:
    if (CONF_DIR / "experiment" / f"{experiment}.yaml").is_file():
        with contextlib.suppress(ConfigError):  # overrides mbexp.train would refuse: the study's runs never ran
            return float(compose_config([f"+experiment={experiment}", *overrides]).optim.cooldown_fraction)
    return float(dict(o.split("=", 1) for o in overrides).get("optim.cooldown_fraction",
                                                              OptimConfig.cooldown_fraction))


def cost(study: Study, results_dir) -> dict:
    """Compute spent (steps, tokens, run-seconds: each run's own steps, a branch without its trunk) against the naive
    grid: every row x LR x seed (scan and planned) x budget trained from scratch; and the same ratio by design. A
    study reusing another's scan (`scan_of`) counts its planned seeds only: the scan is counted where it was run.
    `unbranched`: runs of a smaller budget trained from scratch instead of branched, and the steps that cost."""
    steps = tokens = seconds = 0.0
    unbranched, over = 0, 0
    for s in _runs(study, results_dir):
        own, own_seconds = _own(s)
        if not s.get("branched") and s["steps"] < study.budgets[-1]:
            unbranched += 1
            over += own - (s["steps"] - cooldown_start(s["steps"], cooldown_fraction(study)))
        steps += own
        tokens += own * (s.get("tokens_seen") or 0) / s["step"]
        seconds += own_seconds
    rows, scanned, grid = len(study.row_values()), len(study.scan_row_values()), len(study.grid)
    scan_seeds = study.own_scan_seeds
    naive = rows * grid * len(set(scan_seeds) | set(study.seeds)) * sum(study.budgets)
    design = per_run_steps(study) * (scanned * grid * len(scan_seeds) + rows * len(study.seeds))
    return {"study": study.name, "steps": int(steps), "tokens": int(tokens), "run_seconds": round(seconds),
            "naive_steps": naive, "design_steps": design, "design_ratio": design / naive,
            "done": steps / design, "unbranched": unbranched, "unbranched_steps": over}


def cost_lines(results_dir) -> list[str]:
    """One line per declared study: its compute so far, by design, and the naive grid's (markdown)."""
    out = []
    for study in load_studies(results_dir).values():
        c = cost(study, results_dir)
        reuse = f", its LRs from the scan of `{study.scan_of}` (counted there)" if study.scan_of else ""
        if c["unbranched"]:
            reuse += (f"; {c['unbranched']} run(s) of a smaller budget trained from scratch, not branched: "
                      f"{c['unbranched_steps']:,} steps beyond a branch")
        out.append(f"- `{c['study']}`: {c['steps']:,} steps spent ({c['tokens']:,} tokens, {c['run_seconds']:,} "
                   f"run-seconds; {c['done']:.0%} of its design{reuse}); by design {c['design_steps']:,} steps "
                   f"against {c['naive_steps']:,} for the naive grid, ratio **{c['design_ratio']:.2f}**")
    return out
