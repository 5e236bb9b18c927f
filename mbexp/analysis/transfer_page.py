"""The transfer claims' studies side by side (docs/studies.md, "The declared studies"): per value of the other
row keys and per width, the LR each study's scan chose and its grid steps from the base width's choice, read from
the scans' tables (tables/<study>_lr_scan.csv), so SP and μP are compared on one page."""

import math
from pathlib import Path

import pandas as pd

from mbexp.analysis.files import SCAN
from mbexp.claims.result import Result
from mbexp.io import read_summary
from mbexp.run.identity import summaries_of
from mbexp.study.spec import load_studies

WIDTH = "model"  # the scans' row key whose values are the widths (mbexp.claims.transfer)
TRANSFER_INTRO = (
    "The transfer claims' studies side by side: per row, the learning rate each study's scan chose at its selection "
    "budget and, in brackets, the grid steps from the base width's choice in the same study (0: the base width's "
    "LR serves this width; within ±1 the claims read it as the same LR). Loss against LR per width: each study's "
    "figure under [LR scans of the declared studies](#lr-scans-of-the-declared-studies).")


def chosen_lrs(results_dir, study: str) -> pd.DataFrame | None:
    """The study's scan table as `make table` wrote it, its chosen lines only (None: no scan table yet)."""
    path = Path(results_dir, "tables", f"{study}{SCAN}.csv")
    if not path.is_file():
        return None
    frame = pd.read_csv(path, dtype={WIDTH: str})
    return frame.assign(grid=frame["lr"].rank(method="dense").astype(int) - 1)[frame["chosen"]]


def transfer_markdown(results: list[Result], results_dir) -> str:
    """One line per (other row values, width) over every transfer claim's study: the chosen LR and, after it, the
    signed grid steps from the base width's chosen LR in the same study (— where a scan is unfinished)."""
    claims = {r.claim.study: r.claim for r in results if r.claim.statistic == "transfer"}
    scans = {study: chosen_lrs(results_dir, study) for study in claims}
    if not claims or all(s is None for s in scans.values()):
        return ""
    rows = list(dict.fromkeys(
        (tuple(str(v) for k, v in values.items() if k != WIDTH), str(values[WIDTH]))
        for c in claims.values() for values in _row_values(c.protocol)))
    groups = list(dict.fromkeys(g for g, _ in rows))
    rows.sort(key=lambda r: groups.index(r[0]))  # each group's widths together, in declared order
    others = [k for k in next(iter(claims.values())).protocol["rows"] if k != WIDTH]
    lines = ["| " + " | ".join([*others, "width", *(f"`{s}` ({parametrisation(results_dir, s)}): chosen LR (grid "
                                                    f"steps from {c.pairs[0][1]})" for s, c in claims.items())])
             + " |",
             "|" + ":---|" * (len(others) + 1) + "---:|" * len(claims)]
    for group, width in rows:
        cells = [_cell(scans[s], group, width, c.pairs[0][1], others) for s, c in claims.items()]
        lines.append("| " + " | ".join([*group, width, *cells]) + " |")
    return "\n".join(lines)


def parametrisation(results_dir, study: str) -> str:
    """`μP` or `SP`: model.param of the study's scan runs (a run that predates the key: SP, its default)."""
    runs = summaries_of(results_dir, load_studies(results_dir)[study].scan_experiment)
    found = {(read_summary(path) or {}).get("identity", {}).get("model.param", "sp") for path in runs}
    if len(found) != 1:
        return "mixed" if found else "no scan runs yet"
    return {"mup": "μP", "sp": "SP"}.get(found.pop(), "?")


def _row_values(protocol: dict) -> list[dict]:
    """Every row of a study's declaration, as {key: value}, in its declared order."""
    keys = list(protocol["rows"])
    return [dict(zip(keys, values)) for values in pd.MultiIndex.from_product(
        [protocol["rows"][k] for k in keys]).tolist()]


def _cell(chosen: pd.DataFrame | None, group: tuple, width: str, base: str, others: list[str]) -> str:
    if chosen is None:
        return "—"
    mine = chosen[(chosen[WIDTH] == width) & _in_group(chosen, group, others)]
    at_base = chosen[(chosen[WIDTH] == base) & _in_group(chosen, group, others)]
    if mine.empty:
        return "—"
    lr = f"{mine['lr'].iloc[0]:.3g}"
    if at_base.empty or math.isnan(float(at_base["grid"].iloc[0])):
        return lr
    return f"{lr} ({int(mine['grid'].iloc[0] - at_base['grid'].iloc[0]):+d})"


def _in_group(frame: pd.DataFrame, group: tuple, others: list[str]) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in zip(others, group):
        mask &= frame[key].astype(str) == value
    return mask
