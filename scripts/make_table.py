"""Write the results tables and figures (docs/columns.md), log them to a W&B run of job type `table`, and print each
experiment's markdown table."""

import argparse
import errno
import logging
import math
import os
import re
import shlex
import sys
from pathlib import Path

from mbexp import INTERRUPTED, RESULTS_DIR, Parser

SKIPPED = 4  # tables written, but some file was left out (each named in a `warning:` line)


def baseline_arg(text: str) -> tuple[str, str]:
    """Parse EXPERIMENT=ROW."""
    experiment, _, row = text.partition("=")
    if not experiment or not row:
        raise argparse.ArgumentTypeError(f"expected EXPERIMENT=ROW, got {text!r}")
    return experiment, row


def margin_arg(text: str) -> float:
    """Parse an equivalence margin (vocabulary.MARGIN_RULE)."""
    from mbexp.claims.vocabulary import MARGIN_RULE, valid_margin

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not valid_margin(value):
        raise argparse.ArgumentTypeError(f"expected {MARGIN_RULE}, got {text!r}")
    return value


def refits(text: str) -> int:
    """Parse a number of bootstrap refits: an integer of at least 20."""
    if not text.isdigit() or int(text) < 20:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 20, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Exit 0: tables written (or no runs at all); 1: a malformed input, nothing finished but some runs left
    unfinished, or a folder that takes no writes; 2: bad arguments (argparse's code), a missing --results, an
    --only naming no experiment, a bad claims file or a bad $WANDB_MODE; 4: tables written, some files left out;
    130: interrupted."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted: tables and figures already written are whole (each is replaced in one step); "
              "rerun make table", file=sys.stderr)
        return INTERRUPTED
    except OSError as err:  # results/ or wandb/ read-only or full, a file that cannot be read: one line
        from mbexp.io import write_error

        line = write_error(err) or (f"cannot use {err.filename or '?'}: {err.strerror} "
                                    f"({errno.errorcode.get(err.errno, err.errno)}); check the path and rerun")
        print(f"error: {line}", file=sys.stderr)
        return 1


def resume_command(command: str | None, results: Path) -> str:
    """A run's recorded command, pointed at the results folder it now lies in (a copied folder resumes the copy)."""
    if not command:
        return "rerun the command that started it"
    from mbexp.config import hydra_override

    args = shlex.split(command)
    here = hydra_override("results_dir", str(results))
    given = [re.match(r"\+?results_dir=", a) is not None for a in args]
    moved = [here if g else a for a, g in zip(args, given)]
    if not any(given) and results != Path(RESULTS_DIR):  # the command relied on the default results_dir
        moved.append(here)
    return shlex.join(moved)


def unfinished(runs, results: Path) -> list[str]:
    """Each run that did not finish (running, interrupted, failed), with where it stopped and the command that
    resumes it."""
    from mbexp.io import FINISHED, read_summary

    named = []
    for run in runs[~runs["status"].isin(FINISHED)].itertuples():
        command = resume_command((read_summary(run.path) or {}).get("command"), results)
        steps = f" of {int(run.steps)}" if run.steps == run.steps else ""  # NaN: a summary older than `steps`
        named.append(f"{run.path} ({run.status} at step {int(run.step)}{steps}): {command}")
    return named


def unfinished_line(runs, results: Path) -> str:
    """The error for results holding only unfinished runs: each, and the command that resumes it."""
    named = unfinished(runs, results)
    return (f"no finished runs under {results / 'runs'}; {len(named)} left unfinished, each resumed by its "
            f"command: {'; '.join(named)}")


def read_for(results: Path, only: str | None) -> list[str] | None:
    """The experiments whose runs are read: all (None), or `only` and the scans its declared studies read."""
    from mbexp.study.spec import load_studies

    if not only:
        return None
    scans = {s.scan_experiment for s in load_studies(results).values() if only in (s.experiment, s.scan_experiment)}
    return sorted({only} | scans)


class _Counter(logging.Handler):
    """Counts the warnings of the reading of runs: each is a file left out."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _main(argv: list[str] | None) -> int:
    from mbexp.analysis import table
    from mbexp.analysis.ladder.draws import RESAMPLES

    parser = Parser(prog="python scripts/make_table.py", description=__doc__)
    parser.add_argument("--results", type=Path, default=Path(RESULTS_DIR),
                        help=f"results directory (default: {RESULTS_DIR})")
    parser.add_argument("--strict", action="store_true", help="fail on a malformed summary.json instead of skipping")
    parser.add_argument("--baseline", type=baseline_arg, nargs="+", action="extend", default=[],
                        metavar="EXPERIMENT=ROW", help="baseline row")
    parser.add_argument("--tune", default=table.TUNE, metavar="KEY",
                        help=f"config key chosen per row on validation when swept (default: {table.TUNE})")
    parser.add_argument("--margin", type=margin_arg, default=table.DEFAULT_MARGIN,
                        help=f"equivalence margin in nats for the TOST mark (default: {table.DEFAULT_MARGIN})")
    parser.add_argument("--resamples", type=refits, default=RESAMPLES, metavar="N",
                        help=f"bootstrap refits of a size ladder's fit (default: {RESAMPLES}, as the committed tables)")
    parser.add_argument("--only", metavar="EXPERIMENT",
                        help="this experiment only: its tables, figures and W&B run (other files untouched)")
    parser.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=True,
                        help="log the tables and figures to a W&B run of job type `table` (default: on, offline)")
    parser.add_argument("--wandb-dir", default=os.environ.get("WANDB_DIR", "."),
                        help="where wandb/ goes (default: $WANDB_DIR or .)")
    args = parser.parse_args(argv)
    if args.only is not None and not args.only.strip():
        parser.error("argument --only: expected an experiment's name, got ''")
    if twice := next((e for e, _ in args.baseline if [b for b, _ in args.baseline].count(e) > 1), None):
        parser.error(f"argument --baseline: {twice} is given twice; give each experiment one baseline row")
    if args.only and (other := next((e for e, _ in args.baseline if e != args.only), None)):
        parser.error(f"argument --baseline: {other} is not the --only experiment {args.only}; leave it out")
    logging.addLevelName(logging.WARNING, "warning")
    logging.basicConfig(format="%(levelname)s: %(message)s")
    if not args.results.is_dir():
        print(f"error: --results {args.results} is not a folder (it should hold runs/)", file=sys.stderr)
        return 2
    from mbexp.logger import wandb_mode_problem

    if args.wandb and (problem := wandb_mode_problem()):
        print(f"error: {problem} (or --no-wandb)", file=sys.stderr)
        return 2
    from mbexp.analysis.collect import log

    skipped = _Counter()  # the warnings of this call alone: main can run twice in one process
    log.addHandler(skipped)
    try:
        return _tables(args, skipped)
    finally:
        log.removeHandler(skipped)


def _tables(args, skipped: _Counter) -> int:
    from mbexp.analysis import equivalent, files, outputs, regime, render, report, studies, table
    from mbexp.analysis.collect import collect_runs
    from mbexp.claims import ClaimsError
    from mbexp.claims.evaluate import evaluate_file
    from mbexp.claims.parse import check
    from mbexp.claims.provenance import orphans
    from mbexp.run.identity import experiments_in, linked_outside

    try:
        check(args.results)  # every mode refuses a bad claims file, as the trainer does
        found = experiments_in(args.results)
        if args.only and args.only not in found:
            print(f"error: --only {args.only}: no such experiment under {args.results / 'runs'}; experiments: "
                  f"{', '.join(found) or 'none'}", file=sys.stderr)
            return 2
        read = read_for(args.results, args.only) or found
        for link, target in linked_outside(args.results, read):  # read all the same: mbexp.train writes there
            print(f"warning: {link} leads outside {args.results}, to {target}; its runs are read as if they were "
                  "here", file=sys.stderr)
        runs = collect_runs(args.results, strict=args.strict, experiments=read)
        if args.only:
            named = sorted(set(runs.loc[runs["path"].map(lambda p: Path(p).parts[-3] == args.only), "experiment"]))
            runs = runs[runs["experiment"] == args.only]
            if runs.empty and named:  # a copied or renamed folder: its summaries keep their experiment's name
                print(f"error: --only {args.only}: its runs record experiment {', '.join(named)} (each summary's "
                      f"`experiment`, by which tables group runs); keep them under runs/{named[0]}", file=sys.stderr)
                return 2
        tables = table.tables_for(runs, dict(args.baseline), tune=args.tune, margin=args.margin)
        studies.annotate(tables, args.results)  # a declared study's rows: the LR its scan chose
        regime.annotate(tables, args.results)  # each caption's n-gram baselines and scale
        equivalent.annotate(tables)  # with several budgets: the compute-equivalent multiplier per row
        # claims compare experiments: --only leaves them, and their files, alone
        verdicts = [] if args.only else evaluate_file(args.results, tables)
    except ClaimsError as err:  # a bad claims file: one line naming it and the claim, nothing written
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not tables and len(runs):
        print(f"error: {unfinished_line(runs, args.results)}", file=sys.stderr)
        return 1
    if not tables:
        only = f" of experiment {args.only}" if args.only else ""
        if (args.results / "runs").is_dir() or not any(args.results.glob("*/*/seed=*/summary.json")):
            print(f"no finished runs{only} under {args.results / 'runs'} — run python -m mbexp.train first")
            return 0
        print(f"error: {args.results} holds experiments' run folders itself: it is a runs/ folder; give "
              f"--results its parent, {args.results.resolve().parent}", file=sys.stderr)
        return 2
    written = outputs.write_outputs(args.results, tables, args.resamples)
    for experiment, paths in written.items():
        print(f"## {experiment} → {', '.join(map(str, paths))}\n")
        print(render.to_markdown(tables[experiment]))
        fit = [p for p in paths if p == files.table_path(args.results, experiment + files.FIT)]  # a ladder's fit
        if fit:
            print(fit[0].read_text(encoding="utf-8"))
    for study, paths in outputs.write_scans(args.results, args.only).items():  # each declared study's LR scan
        print(f"## {study}: LR scan → {', '.join(map(str, paths))}\n")
        print(paths[0].read_text(encoding="utf-8"))
    claims_paths = outputs.write_claims(args.results, verdicts)
    if claims_paths:
        print(f"## claims → {', '.join(map(str, claims_paths))}\n")
        print(report.claims_markdown(verdicts))
    if verdicts and (gone := orphans(runs, [r.claim for r in verdicts])):
        print("runs launched under claims no longer declared: " + ", ".join(f"{c} ({n} runs)" for c, n in gone.items()))
    if not args.only and (costs := studies.cost_lines(args.results)):
        print("## declared studies: compute (docs/studies.md)\n\n" + "\n".join(costs) + "\n")
    if args.wandb:
        from mbexp.analysis.wandb_run import log_tables

        run_dir = log_tables(tables, written, wandb_dir=args.wandb_dir,
                             claims=report.claims_display(verdicts) if verdicts else None)
        print(f"W&B run of job type `table`: {run_dir}")
    if left := unfinished(runs, args.results):  # not a damaged file: a run to resume, or one still training
        more = f"; and {len(left) - 6} more" if len(left) > 6 else ""
        print(f"note: {len(left)} run(s) unfinished, not in the tables; each resumes with its command: "
              f"{'; '.join(left[:6])}{more}", file=sys.stderr)
    if skipped.count:
        print(f"warning: {skipped.count} run file(s) left out or counted as diverged (each named above); the "
              "tables hold the other runs", file=sys.stderr)
        return SKIPPED
    return 0


if __name__ == "__main__":
    sys.exit(main())
