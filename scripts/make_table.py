"""Write the results tables and figures (DESIGN.md §7) and print each experiment's markdown table."""

import argparse
import logging
import sys
from pathlib import Path

from mbexp import table


def baseline_arg(text: str) -> tuple[str, str]:
    """Parse EXPERIMENT=ROW."""
    experiment, _, row = text.partition("=")
    if not experiment or not row:
        raise argparse.ArgumentTypeError(f"expected EXPERIMENT=ROW, got {text!r}")
    return experiment, row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("results"), help="results directory (default: results)")
    parser.add_argument("--strict", action="store_true", help="fail on a malformed summary.json instead of skipping")
    parser.add_argument(
        "--baseline",
        type=baseline_arg,
        nargs="+",
        action="extend",
        default=[],
        metavar="EXPERIMENT=ROW",
        help="baseline row",
    )
    parser.add_argument("--only", metavar="EXPERIMENT", help="print only this experiment's table (all are written)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s")
    try:
        runs = table.collect_runs(args.results, strict=args.strict)
        tables = table.tables_for(runs, dict(args.baseline))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not tables:
        print(f"no finished runs under {args.results / 'runs'} — run python -m mbexp.train first")
        return 0
    for experiment, paths in table.write_outputs(args.results, tables, runs).items():
        if args.only and experiment != args.only:
            continue
        print(f"## {experiment} → {', '.join(map(str, paths))}\n")
        print(table.to_markdown(tables[experiment]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
