"""The `table` W&B run: each experiment's table (a W&B Table) and figures, beside the runs it came from."""

from dataclasses import replace
from pathlib import Path

from mbexp.analysis import render
from mbexp.analysis.collect import log, run_settings
from mbexp.analysis.table import Table
from mbexp.config import LoggerConfig
from mbexp.logger import WANDB_MODES, wandb_mode, wandb_settings


def log_tables(tables: dict[str, Table], written: dict[str, list[Path]], *, wandb_dir: str, claims=None) -> str:
    """Log one run of job type `table` (offline unless WANDB_MODE or the runs' logger.mode say otherwise) in the
    runs' project, with the claims table (report.claims_display: verdicts and their labels) when given; returns its
    directory."""
    import wandb

    paths = [p for t in tables.values() for p in t.runs["path"]]
    found = run_settings(paths, "logger")  # the runs' own settings, else the defaults
    settings = replace(LoggerConfig(), **{k: v for k, v in found.items() if k in LoggerConfig.__dataclass_fields__})
    if (mode := wandb_mode(settings)) not in WANDB_MODES:  # $WANDB_MODE was checked: the runs' own setting
        log.warning("the runs' logger.mode=%r (their config.yaml) is not one of %s; the table run logs offline", mode,
                    ", ".join(WANDB_MODES))
        mode = "offline"
    Path(wandb_dir, "wandb").mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=settings.project, entity=settings.entity, mode=mode, dir=wandb_dir, job_type="table",
                     name="table", config={"experiments": sorted(tables)}, settings=wandb_settings())
    try:
        for exp, table in tables.items():
            shown = render.display(table)
            record = {
                f"{exp}/table": wandb.Table(dataframe=shown.astype(str)),
                f"{exp}/numbers": wandb.Table(dataframe=table.rows.astype(str)),
                **{f"{exp}/{p.stem.removeprefix(exp + '_')}": wandb.Image(str(p)) for p in written[exp]
                   if p.suffix == ".png"},
            }
            run.log(record)
            run.summary[f"{exp}/caption"] = render.caption(table)
            run.summary[f"{exp}/legend"] = render.legend(table)
        if claims is not None:
            run.log({"claims/table": wandb.Table(dataframe=claims.astype(str))})
        return str(Path(run.dir).parent)
    finally:
        run.finish()
