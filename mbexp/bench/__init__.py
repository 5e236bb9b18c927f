"""`make bench`: the bench's harness, its measurement sections and its report (the CLI is scripts/bench.py)."""
