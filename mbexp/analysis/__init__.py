"""`make table`: run summaries -> tables, figures and a W&B run (docs/columns.md defines every column).

collect: summaries read and deduplicated; table: rows, tuned key, column axis, Δ and marks;
stats: pure statistics over arrays; render: md/csv/tex; figures; wandb_run: the `table` W&B run;
ladder/: a size ladder's trend, power-law fits, their checks and decision accuracy.
Torch-free, like everything `make table` imports.
"""
