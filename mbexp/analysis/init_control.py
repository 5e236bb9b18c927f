"""The init-only control (experiment init_control_cpu, docs/studies.md): per size and budget, the gated FFN's paired
Δ against ReLU (same seed) with the hidden matrices' init scaled with width (model.init=fan_in) beside its SP twin in
ladder_wsd_cpu (same seeds, LR and budget), and what the init alone changes. Exploratory: no claim reads it."""

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.collect import collect_runs
from mbexp.analysis.render import CI
from mbexp.claims.vocabulary import NOT_RESOLVED

EXPERIMENT, TWIN = "init_control_cpu", "ladder_wsd_cpu"
BASELINE = "relu"
LOSS = "final_test_loss"  # what the ladder claims read


def _runs(results_dir) -> pd.DataFrame:
    runs = collect_runs(results_dir, experiments=[EXPERIMENT, TWIN])
    if runs.empty:
        return runs
    runs = runs[runs.status == "completed"].copy()
    for key in ("model.name", "optim.lr", "train.steps"):
        runs[key] = [identity.get(key) for identity in runs.identity]
    return runs


def _deltas(runs: pd.DataFrame, ffn: str) -> pd.Series:
    """Per seed: the gated FFN's loss minus ReLU's."""
    loss = runs.pivot_table(index="seed", columns="ffn", values=LOSS, aggfunc="first")
    return (loss[ffn] - loss[BASELINE]).dropna() if {ffn, BASELINE} <= set(loss.columns) else pd.Series(dtype=float)


def control_rows(results_dir) -> list[dict]:
    """One row per (size, budget, gated FFN) the control has run: Δ under SP, Δ with the init scaled, and the
    paired change (scaled − SP) over the seeds both have, with its interval."""
    runs = _runs(results_dir)
    if runs.empty or not (runs.experiment == EXPERIMENT).any():
        return []
    control, twin = runs[runs.experiment == EXPERIMENT], runs[runs.experiment == TWIN]
    rows = []
    for (model, lr, steps), cell in control.groupby(["model.name", "optim.lr", "train.steps"], sort=False):
        sp = twin[(twin["model.name"] == model) & (twin["optim.lr"] == lr) & (twin["train.steps"] == steps)
                  & twin.seed.isin(cell.seed)]
        for ffn in sorted(set(cell.ffn) - {BASELINE}):
            scaled, plain = _deltas(cell, ffn), _deltas(sp, ffn)
            change = stats.paired(scaled, plain)
            rows.append({"model": model, "steps": int(steps), "lr": lr, "ffn": ffn,
                         "delta_sp": plain.mean() if len(plain) else float("nan"),
                         "delta_scaled": scaled.mean() if len(scaled) else float("nan"),
                         "change": change, "seeds": sorted(scaled.index.intersection(plain.index))})
    return sorted(rows, key=lambda r: (r["steps"], int("".join(filter(str.isdigit, r["model"])) or 0), r["ffn"]))


def _reading(iv: stats.Interval) -> str:
    if pd.isna(iv.low):
        return "—"
    if iv.low <= 0 <= iv.high:
        return NOT_RESOLVED
    return "the deficit shrinks" if iv.high < 0 else "the deficit grows"


def control_markdown(rows: list[dict]) -> str:
    """docs/results.md's table of the control."""
    lines = [f"| size | steps | LR | FFN | Δ vs ReLU, SP init | Δ vs ReLU, init scaled | change ({CI} CI) | reading "
             "| seeds |", "|:---|---:|---:|:---|---:|---:|:---|:---|:---|"]
    for r in rows:
        iv = r["change"]
        change = "—" if pd.isna(iv.low) else f"{iv.delta:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"
        lines.append(f"| {r['model']} | {r['steps']} | {r['lr']:g} | {r['ffn']} | {r['delta_sp']:+.3f} "
                     f"| {r['delta_scaled']:+.3f} | {change} | {_reading(iv)} "
                     f"| {', '.join(map(str, r['seeds'])) or 'none shared'} |")
    return "\n".join(lines)
