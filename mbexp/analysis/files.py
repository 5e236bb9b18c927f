"""Where `make table` writes under a results folder (tables/, figures/): one naming for outputs.py, which writes
the files, and for the readers that find or link them (report.py, ladder/render.py, scripts/make_table.py)."""

from pathlib import Path

TABLES, FIGURES = "tables", "figures"
# a ladder's fit table and decision accuracy, a declared study's LR scan: suffixes of their names
FIT, DECISION, SCAN = "_fit", "_decision", "_lr_scan"


def table_path(results_dir, name: str, ext: str = "md") -> Path:
    return Path(results_dir, TABLES, f"{name}.{ext}")


def figure_path(results_dir, name: str) -> Path:
    return Path(results_dir, FIGURES, f"{name}.png")


def found(results_dir, suffix: str, ext: str) -> list[tuple[str, Path]]:
    """(the experiment or study, path) of every table named <name><suffix>.<ext>, sorted by path."""
    return [(p.name.removesuffix(f"{suffix}.{ext}"), p)
            for p in sorted(Path(results_dir, TABLES).glob(f"*{suffix}.{ext}"))]
