"""Write the results tables and figures (docs/table.md), log them to a W&B run of job type `table`, and print each
experiment's markdown table."""

import argparse
import logging
import os
import sys
from pathlib import Path

from mbexp.analysis import claims, outputs, render, report, table
from mbexp.analysis.collect import collect_runs
from mbexp.io import read_summary, write_error


def baseline_arg(text: str) -> tuple[str, str]:
    """Parse EXPERIMENT=ROW."""
    experiment, _, row = text.partition("=")
    if not experiment or not row:
        raise argparse.ArgumentTypeError(f"expected EXPERIMENT=ROW, got {text!r}")
    return experiment, row


def main(argv: list[str] | None = None) -> int:
    """Exit 0: tables written (or no runs at all); 1: a malformed input, nothing finished but some runs left
    unfinished, or a folder that takes no writes; 2: bad arguments (argparse's code), a missing --results, a bad
    claims file."""
    try:
        return _main(argv)
    except OSError as err:  # results/ or wandb/ read-only or full: one line, not a traceback
        if not write_error(err):
            raise
        print(f"error: {write_error(err)}", file=sys.stderr)
        return 1


def unfinished_line(runs, results: Path) -> str:
    """The error for results holding only unfinished runs: each, and the command that resumes it."""
    named = []
    for run in runs.itertuples():
        command = (read_summary(run.path) or {}).get("command") or "rerun the command that started it"
        steps = f" of {int(run.steps)}" if run.steps == run.steps else ""  # NaN: a summary older than `steps`
        named.append(f"{run.path} ({run.status} at step {int(run.step)}{steps}): {command}")
    return (f"no finished runs under {results / 'runs'}; {len(named)} left unfinished, each resumed by its "
            f"command: {'; '.join(named)}")


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("results"), help="results directory (default: results)")
    parser.add_argument("--strict", action="store_true", help="fail on a malformed summary.json instead of skipping")
    parser.add_argument("--baseline", type=baseline_arg, nargs="+", action="extend", default=[],
                        metavar="EXPERIMENT=ROW", help="baseline row")
    parser.add_argument("--tune", default=table.TUNE, metavar="KEY",
                        help=f"config key chosen per row on validation when swept (default: {table.TUNE})")
    parser.add_argument("--margin", type=float, default=table.MARGIN,
                        help=f"equivalence margin in nats for the TOST mark (default: {table.MARGIN})")
    parser.add_argument("--only", metavar="EXPERIMENT", help="print only this experiment's table (all are written)")
    parser.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=True,
                        help="log the tables and figures to a W&B run of job type `table` (default: on, offline)")
    parser.add_argument("--wandb-dir", default=os.environ.get("WANDB_DIR", "."),
                        help="where wandb/ goes (default: $WANDB_DIR or .)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s")
    if not args.results.is_dir():
        print(f"error: --results {args.results} is not a folder (it should hold runs/)", file=sys.stderr)
        return 2
    try:
        runs = collect_runs(args.results, strict=args.strict)
        tables = table.tables_for(runs, dict(args.baseline), tune=args.tune, margin=args.margin)
        verdicts = claims.evaluate_file(args.results / "claims.yaml", tables)  # none without a claims file
    except claims.ClaimsError as err:  # a bad claims file: one line naming it and the claim, nothing written
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not tables and len(runs):
        print(f"error: {unfinished_line(runs, args.results)}", file=sys.stderr)
        return 1
    if not tables:
        print(f"no finished runs under {args.results / 'runs'} — run python -m mbexp.train first")
        return 0
    written = outputs.write_outputs(args.results, tables)
    for experiment, paths in written.items():
        if args.only and experiment != args.only:
            continue
        print(f"## {experiment} → {', '.join(map(str, paths))}\n")
        print(render.to_markdown(tables[experiment]))
        fit = [p for p in paths if p.name == f"{experiment}_fit.md"]  # a size ladder's fit (outputs.write_ladder)
        if fit:
            print(fit[0].read_text(encoding="utf-8"))
    claims_paths = outputs.write_claims(args.results, verdicts)
    if claims_paths and not args.only:
        print(f"## claims → {', '.join(map(str, claims_paths))}\n")
        print(report.claims_markdown(verdicts))
    if args.wandb:
        from mbexp.analysis.wandb_run import log_tables

        run_dir = log_tables(tables, written, wandb_dir=args.wandb_dir,
                             claims=report.claims_display(verdicts) if verdicts else None)
        print(f"W&B run of job type `table`: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
