"""The files `make table` writes: tables/<exp>.{md,csv,tex}, figures/<exp>_<figure>.png, a ladder's fit and decision
accuracy (tables/<exp>_fit.*, tables/<exp>_decision.*), tables/claims.{md,csv},
and per declared study with scan runs tables/<study>_lr_scan.{md,csv} and figures/<study>_lr_scan.png."""

from pathlib import Path

from mbexp.analysis import figures, lr_scan, render, report
from mbexp.analysis.files import DECISION, FIT, SCAN, figure_path, table_path
from mbexp.analysis.ladder import decision, scaling
from mbexp.analysis.ladder import render as ladder_render
from mbexp.analysis.table import Table
from mbexp.claims.parse import no_trend_read
from mbexp.claims.result import Result
from mbexp.io import atomic_write, write_text
from mbexp.study.spec import load_studies


def write_outputs(results_dir, tables: dict[str, Table], resamples: int = scaling.RESAMPLES) -> dict[str, list[Path]]:
    """Write every experiment's tables and figures (`resamples`: a ladder fit's bootstrap refits); returns the paths
    per experiment (tables first)."""
    written = {}
    no_panel = no_trend_read(results_dir)
    for exp, table in tables.items():
        texts = {"md": render.to_markdown(table), "csv": render.to_csv(table), "tex": render.to_latex(table)}
        paths = []
        for ext, text in texts.items():
            paths.append(table_path(results_dir, exp, ext))
            write_text(paths[-1], text)
        for name, fig in figures.figures(table).items():
            paths.append(figure_path(results_dir, f"{exp}_{name}"))
            atomic_write(paths[-1], lambda tmp, fig=fig: figures.save(fig, tmp))
        # a ladder: tables/<exp>_fit.*, figures/<exp>_ladder.png; no panel where no trend of the runs is read
        paths += write_ladder(results_dir, table, resamples, panel=exp not in no_panel)
        paths += write_decision(results_dir, table)  # and tables/<exp>_decision.*, figures/<exp>_decision.png
        _remove_stale(results_dir, exp, paths)
        written[exp] = paths
    return written


def _remove_stale(results_dir, experiment: str, written: list[Path]) -> None:
    """Delete the experiment's ladder fit and decision outputs this pass did not write (a rung lost, a scan not yet
    whole): an earlier pass's numbers must not stand beside runs that no longer give them."""
    names = [table_path(results_dir, experiment + suffix, ext) for suffix in (FIT, DECISION) for ext in ("md", "csv")]
    names += [figure_path(results_dir, experiment + DECISION), figure_path(results_dir, f"{experiment}_ladder")]
    for path in names:
        if path not in written and path.is_file():
            path.unlink()


def write_ladder(results_dir, table: Table, resamples: int = scaling.RESAMPLES, panel: bool = True) -> list[Path]:
    """For a ladder: tables/<exp>_fit.md (and .csv) and figures/<exp>_ladder.png (with the robustness panel unless
    `panel` is False); nothing otherwise. Too few points to fit: the .md holds one line saying so, and nothing else."""
    ladder = scaling.analyse(table, resamples, panel)
    if ladder is None:
        return []
    paths = [table_path(results_dir, ladder.experiment + FIT)]
    write_text(paths[0], ladder_render.to_markdown(ladder))
    if ladder.message:
        return paths
    paths.append(table_path(results_dir, ladder.experiment + FIT, "csv"))
    write_text(paths[-1], ladder_render.to_csv(ladder))
    paths.append(figure_path(results_dir, f"{ladder.experiment}_ladder"))
    fig = ladder_render.plot(ladder)
    atomic_write(paths[-1], lambda tmp: figures.save(fig, tmp))
    return paths


def write_decision(results_dir, table: Table) -> list[Path]:
    """For a ladder with two rungs to compare: tables/<exp>_decision.{md,csv} and figures/<exp>_decision.png."""
    found = decision.decisions_of(table)
    if found is None:
        return []
    name = table.experiment + DECISION
    paths = [table_path(results_dir, name, ext) for ext in ("md", "csv")]
    write_text(paths[0], decision.to_markdown(table.experiment, found))
    write_text(paths[1], decision.to_csv(found))
    paths.append(figure_path(results_dir, name))
    fig = decision.plot(table.experiment, found)
    atomic_write(paths[-1], lambda tmp: figures.save(fig, tmp))
    return paths


def write_scans(results_dir, only: str | None = None) -> dict[str, list[Path]]:
    """Each declared study's LR scan (lr_scan) that has a finished scan run: its table and figure; with `only`, just
    the study whose experiment or scan experiment that is. Returns the paths per study (the .md first)."""
    written = {}
    for study in load_studies(results_dir).values():
        if study.scan_of or only and only not in (study.experiment, study.scan_experiment):
            continue  # a study reusing another's scan: that study's files show it
        frame = lr_scan.scan_frame(study, results_dir)
        if not frame["n"].any():
            continue
        paths = [table_path(results_dir, study.name + SCAN, ext) for ext in ("md", "csv")]
        write_text(paths[0], lr_scan.to_markdown(study, frame, lr_scan.halving(study, results_dir)))
        write_text(paths[1], lr_scan.to_csv(frame))
        paths.append(figure_path(results_dir, study.name + SCAN))
        fig = lr_scan.plot(study, frame)
        atomic_write(paths[-1], lambda tmp, fig=fig: figures.save(fig, tmp))
        written[study.name] = paths
    return written


def write_claims(results_dir, results: list[Result]) -> list[Path]:
    """tables/claims.{md,csv} from the claims' verdicts; nothing when there are no claims."""
    if not results:
        return []
    paths = [table_path(results_dir, "claims", ext) for ext in ("md", "csv")]
    for path, text in zip(paths, (report.claims_markdown(results), report.claims_csv(results))):
        write_text(path, text)
    return paths
