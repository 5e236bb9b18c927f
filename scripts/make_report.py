"""`make report`: the README's claims block, docs/results.md below its marker and docs/claims-example.md's worked
example, rewritten from the committed runs and results/claims.yaml (mbexp/analysis/report.py; the worked example's
fixture: scripts/worked_example.py); `--check` only compares.

    python scripts/make_report.py [--results DIR] [--claims FILE] [--readme F] [--page F] [--example-doc F] [--check]

Exit 0: written, or up to date; 1: with --check, a text differs, or a text that takes no writes; 2: bad arguments,
a text that cannot be read, or a claims file that does not validate.
"""
import errno
import sys
from pathlib import Path

from worked_example import EXAMPLE_BEGIN, EXAMPLE_END, example_block

from mbexp import INTERRUPTED, RESULTS_DIR, Parser
from mbexp.analysis.report import blocks, splice
from mbexp.claims import ClaimsError
from mbexp.claims.file import CLAIMS_FILE
from mbexp.io import write_text

FLAGS = {"readme": "--readme", "page": "--page", "example_doc": "--example-doc"}


def oserror(err: OSError) -> str:
    return f"{err.filename or '?'}: {err.strerror} ({errno.errorcode.get(err.errno, '?')})"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python scripts/make_report.py", description=__doc__)
    parser.add_argument("--results", type=Path, default=Path(RESULTS_DIR))
    parser.add_argument("--claims", type=Path, help="claims file (default: RESULTS/claims.yaml)")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"))
    parser.add_argument("--example-doc", type=Path, default=Path("docs/claims-example.md"),
                        help="where the worked example of the claims rules goes")
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed text differs; write nothing")
    args = parser.parse_args(argv)
    paths = {key: getattr(args, key) for key in FLAGS}
    old = {}
    for key, path in paths.items():  # a wrong path fails before the tables are built
        try:
            old[key] = path.read_text(encoding="utf-8")
        except OSError as err:
            print(f"error: cannot read {oserror(err)}; give {FLAGS[key]} an existing file (the defaults are "
                  "relative to the current folder: run make report from the repository root)", file=sys.stderr)
            return 2
        except UnicodeDecodeError as err:
            print(f"error: {path} is not UTF-8 ({err.reason} at byte {err.start}); save it as UTF-8", file=sys.stderr)
            return 2
    try:
        found = blocks(args.results, args.claims or args.results / CLAIMS_FILE)
        found["example_doc"] = (EXAMPLE_BEGIN, EXAMPLE_END, example_block())
    except (ClaimsError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    texts = {}
    for key, block in found.items():
        try:
            texts[key] = splice(old[key], *block)
        except ValueError as err:  # its markers are missing: the generated block has nowhere to go
            print(f"error: {paths[key]} ({FLAGS[key]}): {err}; give {FLAGS[key]} the file that holds them",
                  file=sys.stderr)
            return 2
    stale = [key for key in FLAGS if old[key] != texts[key]]
    if args.check:
        for key in stale:
            print(f"{paths[key]} differs from what `make report` writes", file=sys.stderr)
        return 1 if stale else 0
    for key in stale:
        try:
            write_text(paths[key], texts[key])  # whole or not at all
        except OSError as err:
            print(f"error: cannot write {oserror(err)}; make it writable (or free space) and rerun make report",
                  file=sys.stderr)
            return 1
    print(f"wrote {', '.join(str(paths[key]) for key in stale) or 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: each text is replaced in one step, so none is half written; rerun make report",
              file=sys.stderr)
        sys.exit(INTERRUPTED)
