"""One experiment's runs reduced to its table (docs/columns.md): rows, the tuned key, the column axis, Δ and marks.
Over 300 lines: one reduction whose steps share one Table; its rendering, figures, claims, ladders live apart."""

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.collect import AXES, collect_runs, is_off, order_key
from mbexp.analysis.ladder.sizes import PER_RUNG, is_ladder, variant_and_size
from mbexp.claims.vocabulary import BASELINE, DEFAULT_MARGIN, MARGIN_RULE, valid_margin
from mbexp.io import FINISHED
from mbexp.run.migrate import identity_values

TUNE = "optim.lr"  # the tuned key by default, when a row has runs at several of its values
COLUMN_AXES = ("optim.warmup_steps", "train.steps", "optim.lr")  # a swept key outside the row identity, in priority
SHORT = {"optim.warmup_steps": "wu", "train.steps": "steps", "optim.lr": "lr"}
SENSITIVITY_AXES = ("optim.warmup_steps",)  # least setting minus the best: meaningful for warm-up
SHAZEER = {"ffn": "relu", "norm": "layer", "placement": "pre"}  # the default baseline, hidden=matched breaks ties


@dataclass
class Table:
    """An experiment's table: `rows` is the numeric table (the CSV); the rest says how it was made."""

    experiment: str
    rows: pd.DataFrame
    runs: pd.DataFrame  # the finished runs, with label, _col, _tv and `chosen` (its tuned value is the row's choice)
    split: str  # "test" or "validation": the split the numbers report
    margin: float
    column: str | None = None  # the column axis key
    columns: list = field(default_factory=list)  # its values, ascending
    reference: object = None  # the column value where Δ and the marks are computed
    tuned: str | None = None
    baseline: str = ""
    baselines: dict = field(default_factory=dict)  # label -> its own baseline row (a ladder: the same size), or None
    seed_deltas: dict = field(default_factory=dict)  # label -> per-seed Δ vs the baseline (Series by seed)
    notes: list = field(default_factory=list)  # lines under the table: precision, device or compile mixed
    regime: str = ""  # its corpus's n-gram baselines and its scale (analysis.regime), under the caption

    @property
    def report(self) -> str:
        """The summary field the table reports."""
        return "final_test_loss" if self.split == "test" else "final_val_loss"


def short(key: str) -> str:
    return SHORT.get(key, key.rsplit(".", 1)[-1])


def setting(value) -> str:
    """A config value as a column name: 0.003, 30, 300."""
    return format(value, "g") if isinstance(value, float) else str(value)


def build_tables(results_dir, baselines: dict | None = None, *, tune: str = TUNE, margin: float = DEFAULT_MARGIN,
                 strict: bool = False) -> dict[str, Table]:
    """Tables per experiment, straight from the run files."""
    return tables_for(collect_runs(results_dir, strict), baselines, tune=tune, margin=margin)


def tables_for(runs: pd.DataFrame, baselines: dict | None = None, *, tune: str = TUNE,
               margin: float = DEFAULT_MARGIN) -> dict[str, Table]:
    """Tables per experiment with finished runs; `baselines` maps an experiment to its baseline row label."""
    baselines = baselines or {}
    finished = runs[runs["status"].isin(FINISHED)]
    unknown = sorted(set(baselines) - set(finished["experiment"]))
    if unknown:
        raise ValueError(f"--baseline names experiments without finished runs: {', '.join(unknown)}")
    keys = sorted({k for identity in finished["identity"] for k in identity})
    if tune != TUNE and keys and tune not in keys:
        raise ValueError(f"--tune {tune!r} is not a config key of any run; keys: {', '.join(keys)}")
    if not valid_margin(margin):
        raise ValueError(f"--margin must be {MARGIN_RULE}, got {margin}")
    return {exp: summarize(group, baselines.get(exp), tune=tune, margin=margin)
            for exp, group in finished.groupby("experiment")}


def _hashable(value):
    """A config value as a pandas cell that groups and sorts: a list as a tuple, an object as its JSON."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _axes(ident: pd.DataFrame, swept: list[str], tune: str) -> tuple[str | None, str | None]:
    """(column axis, tuned key): the tuned key must take several values within some row."""
    def column_besides(key):
        return next((k for k in COLUMN_AXES if k in swept and k != key), None)

    if tune in swept:
        column = column_besides(tune)
        rest = [k for k in swept if k not in (column, tune)]
        values = ident.groupby(rest, dropna=False)[tune] if rest else ident[tune]
        per_row = values.nunique(dropna=False)  # an option off (None) is one of the settings tried
        if np.max(per_row) > 1:
            return column, tune
    return column_besides(None), None


def summarize(runs: pd.DataFrame, baseline: str | None = None, *, tune: str = TUNE,
              margin: float = DEFAULT_MARGIN) -> Table:
    """One experiment's finished runs reduced to one row per variant, in registry order, with Δ vs the baseline."""
    runs = runs[runs["status"].isin(FINISHED)].copy()
    ident = pd.DataFrame([{k: _hashable(v) for k, v in identity_values(i).items()} for i in runs["identity"]],
                         index=runs.index)
    ident = ident.astype(object).where(ident.notna(), None)  # an option off stays None beside numbers: NaN != NaN
    swept = [k for k in ident.columns if ident[k].nunique(dropna=False) > 1]
    column, tuned = _axes(ident, swept, tune)
    row_keys = [k for k in swept if k not in (column, tuned)]
    runs["_row"] = [tuple(r) for r in ident[row_keys].itertuples(index=False)] if row_keys else [()] * len(runs)
    runs["_col"] = ident[column] if column else None
    runs["_tv"] = ident[tuned] if tuned else None
    runs["label"] = _labels(runs, ident, row_keys)
    completed = runs[runs["status"] == "completed"]
    split = "test" if len(completed) and completed["final_test_loss"].notna().all() else "validation"
    columns = sorted(runs["_col"].unique(), key=order_key) if column else [None]
    table = Table(runs["experiment"].iloc[0], pd.DataFrame(), runs, split, margin, column, columns if column else [],
                  _reference(runs, column), tuned)
    runs["chosen"] = _chosen(runs)
    rows = sorted((_row_stats(table, group) for _, group in runs.groupby("label", sort=False)), key=_order)
    table.rows = pd.DataFrame(rows)
    table.notes = mixed_numerics(runs)
    _compare(table, baseline)
    return table


def mixed_numerics(runs: pd.DataFrame) -> list[str]:
    """One line when the table's rows differ in precision, and one per row whose runs mixed devices or compiling
    (a run that did not record one is left out)."""
    notes = []
    precisions = sorted(set(runs["precision"].dropna().map(str)))
    if len(precisions) > 1:
        notes.append(f"Precision differs between rows ({', '.join(precisions)}): compare rows of one precision.")
    for label, group in runs.groupby("label", sort=False):
        for key in ("device", "compiled"):
            counts = Counter(group[key].dropna())
            if len(counts) > 1:
                shown = ", ".join(f"{n} {key}={setting(v)}" for v, n in sorted(counts.items(), key=str))
                notes.append(f"Row {label} mixes runs: {shown}.")
    return notes


def _labels(runs: pd.DataFrame, ident: pd.DataFrame, row_keys: list[str]) -> list[str]:
    """The summary's `row`, plus the distinguishing key=value pairs when two rows share it."""
    labels = {}
    for name, group in runs.groupby("row", sort=False):
        keys = sorted(set(group["_row"]), key=order_key)
        differ = [k for i, k in enumerate(row_keys) if len({key[i] for key in keys}) > 1]
        for key in keys:
            extra = ", ".join(f"{k}={setting(key[row_keys.index(k)])}" for k in differ)
            labels[(name, key)] = f"{name} ({extra})" if extra else name
    return [labels[(r, k)] for r, k in zip(runs["row"], runs["_row"])]


def _reference(runs: pd.DataFrame, column: str | None):
    """Where Δ is computed: the largest budget for train.steps, else the most common value (ties: the largest)."""
    if column is None:
        return None
    if column == "train.steps":
        return max(runs["_col"], key=order_key)
    counts = Counter(runs["_col"])
    return max(counts, key=lambda v: (counts[v], order_key(v)))


def _val_means(runs: pd.DataFrame) -> dict:
    """Mean final validation loss per tuned value (inf when every run at that value diverged)."""
    groups = sorted(runs.groupby("_tv", dropna=False, sort=False), key=lambda item: order_key(item[0]))
    return {tv: _mean(group, "final_val_loss") for tv, group in groups}


def _mean(runs: pd.DataFrame, key: str) -> float:
    """Mean of `key` over the completed runs; inf when every run diverged, NaN when there are none."""
    if runs.empty:
        return math.nan
    values = runs.loc[runs["status"] == "completed", key]
    return values.mean() if len(values) else math.inf


def _chosen(runs: pd.DataFrame) -> pd.Series:
    """Whether each run has its (row, column value)'s tuned value chosen on validation (all, if all diverged)."""
    chosen = pd.Series(True, index=runs.index)
    if runs["_tv"].isna().all():
        return chosen
    for _, cell in runs.groupby(["label", "_col"], dropna=False):
        means = _val_means(cell)
        if any(math.isfinite(v) for v in means.values()):  # else every setting diverged: all stay chosen
            best = stats.choose(means)
            chosen[cell.index] = [v == best or is_off(v) and is_off(best) for v in cell["_tv"]]
    return chosen


def _per_seed(runs: pd.DataFrame, key: str) -> pd.Series:
    return runs[runs["status"] == "completed"].set_index("seed")[key].astype(float)


def cell_runs(table: Table, label: str, value=None) -> pd.DataFrame:
    """The runs of row `label` at column value `value` (the reference when None) and at the row's chosen tuned
    value: the runs every number of that cell is made of."""
    runs = table.runs[(table.runs["label"] == label) & table.runs["chosen"]]
    if table.column:
        runs = runs[runs["_col"] == (table.reference if value is None else value)]
    return runs


def losses_at(table: Table, label: str, value=None) -> pd.Series:
    """Reported final loss per seed of a row's completed runs at a column value (see `cell_runs`)."""
    return _per_seed(cell_runs(table, label, value), table.report)


def slow_start_seeds(runs: pd.DataFrame) -> list:
    """The seeds of a cell's completed runs flagged as slow starters by their early validation loss."""
    return stats.slow_starts(_per_seed(runs, "early_val_loss"))


def _row_stats(table: Table, runs: pd.DataFrame) -> dict:
    """One row: its cells at the chosen tuned values, and its statistics at the reference column."""
    first = runs.iloc[0]
    ref_runs = runs[runs["_col"] == table.reference] if table.column else runs
    at = ref_runs[ref_runs["chosen"]]
    done = at[at["status"] == "completed"]
    bpb = "final_test_bpb" if table.split == "test" else "final_val_bpb"
    early_tokens = done["early_tokens"].fillna(done["early_step"] * done["tokens_seen"] / done["step"])
    row = {
        "label": first["label"], "experiment": first["experiment"], "row": first["row"],
        **{axis: first[axis] for axis in AXES},
        "tuned": done["_tv"].iloc[0] if table.tuned and len(done) else None,
        "tried": ref_runs["_tv"].nunique(dropna=False) if table.tuned else None,
        **{key: _first(at if len(at) else runs, key) for key in
           ("params", "params_non_embedding", "d_ff", "flops_per_token", "early_step")},
        "early_tokens": early_tokens.iloc[0] if len(early_tokens) else math.nan,
        "early_log_ppl": done["early_val_loss"].mean(),
        "final_mean": done[table.report].mean() if len(done) else _mean(at, table.report),
        "final_std": done[table.report].std(ddof=1),
        "n": len(done),
        "final_bpb": done[bpb].mean(),
        "steps": _first(done, "steps"),
        "tokens_seen": done["tokens_seen"].mean(),
        "epochs": done["epochs"].mean(),
        "generalization_gap": done["generalization_gap"].mean(),
        "diverged": int((runs["status"] == "diverged").sum()),
        "finished": len(runs),
        "tokens_per_s": done["tokens_per_s_median"].median(),
    }
    for value in table.columns:
        cell = runs[(runs["_col"] == value) & runs["chosen"]]
        row[f"{short(table.column)}={setting(value)}"] = _mean(cell, table.report)
        row[f"{short(table.column)}={setting(value)} n"] = int((cell["status"] == "completed").sum())
    if table.column in SENSITIVITY_AXES and len(table.columns) > 1:
        cells = {v: runs[(runs["_col"] == v) & runs["chosen"]] for v in table.columns if (runs["_col"] == v).any()}
        sens = stats.sensitivity({v: _per_seed(c, "final_val_loss") for v, c in cells.items()},
                                 {v: _per_seed(c, table.report) for v, c in cells.items()})
        row |= {"sensitivity": sens.delta, "sensitivity_low": sens.low, "sensitivity_high": sens.high}
    row["slow_start"] = " ".join(map(str, slow_start_seeds(at)))
    row["_losses"] = _per_seed(at, table.report)
    return row


def _first(runs: pd.DataFrame, key: str) -> float:
    return next(iter(runs[key].dropna()), math.nan)


def _order(row: dict) -> tuple:
    """Sort key: each axis in registry order (unknown values last, by name), then the size (a ladder's rungs
    smallest first), then the label."""
    ranks = []
    for axis, names in AXES.items():
        value = row[axis]
        ranks.append((names.index(value), "") if value in names else (len(names), str(value)))
    size = row["params_non_embedding"]
    return (*ranks, size if size == size else 0, row["label"])  # size != size: NaN, a summary without a size


def pick_baseline(rows: pd.DataFrame, choice: str | None = None) -> int:
    """Index of the baseline row: `choice` (a label or row), else the row closest to Shazeer's ReLU FFN."""
    if choice is not None:
        hits = rows.index[rows["label"] == choice].tolist() or rows.index[rows["row"] == choice].tolist()
        if len(hits) != 1:
            exp = rows["experiment"].iloc[0]
            raise ValueError(f"baseline {choice!r} is not one row of {exp}; rows: {', '.join(rows['label'])}")
        return hits[0]
    matches = sum(rows[axis] == value for axis, value in SHAZEER.items())
    scores = list(zip(matches, rows["hidden"] == "matched"))
    return scores.index(max(scores))


def seed_text(deltas: pd.Series) -> str:
    """Per-seed Δ as `seed:Δ` pairs, space-separated (the CSV's one cell for them)."""
    return " ".join(f"{seed}:{value:+.4f}" for seed, value in deltas.items())


def own_baselines(table: Table, base: str) -> dict[str, str | None]:
    """Each row's baseline: `base`; in a ladder the baseline variant's row at its size and LR (docs/ladders.md)."""
    if not is_ladder(table):
        return dict.fromkeys(table.rows["label"], base)
    first = table.runs.drop_duplicates("label").set_index("label").loc[table.rows["label"], "identity"]
    keys = {label: (*variant_and_size(i, {*PER_RUNG, table.column, table.tuned}), [i.get(k) for k in PER_RUNG])
            for label, i in first.items()}
    at = {label: [b for b in keys if keys[b][:2] == (keys[base][0], keys[label][1])] for label in keys}
    return {label: next((b for b in c if keys[b][2] == keys[label][2]), (c or [None])[0]) for label, c in at.items()}


def _compare(table: Table, baseline: str | None) -> None:
    """Δ vs each row's baseline (paired and Welch), Holm-adjusted p and TOST p over the table's comparisons, marks."""
    rows = table.rows
    base = pick_baseline(rows, baseline)
    table.baseline = rows.at[base, "label"]
    table.baselines = own_baselines(table, table.baseline)
    losses_of = dict(zip(rows["label"], rows["_losses"]))
    found = []
    for label, losses in zip(rows["label"], rows["_losses"]):
        base_losses = losses_of[table.baselines[label] or label]  # no baseline at its size: NaN below
        both = {"paired": stats.paired(losses, base_losses), "welch": stats.welch(losses, base_losses)}
        chosen = both["paired"] if both["paired"].method == "paired" else both["welch"]
        narrow = stats.compare(losses, base_losses, level=stats.LEVEL90)
        per_seed = stats.seed_deltas(losses, base_losses)
        table.seed_deltas[label] = per_seed
        found.append({
            "delta": chosen.delta, "ci_low": chosen.low, "ci_high": chosen.high, "ci_method": chosen.method,
            "ci90_low": narrow.low, "ci90_high": narrow.high,
            "p": chosen.p, "tost_p": stats.tost(chosen, table.margin),
            **{f"{m}_{k}": getattr(iv, k) for m, iv in both.items() for k in ("delta", "low", "high")},
            "seed_deltas": seed_text(per_seed),
            "seeds_needed": stats.seeds_needed(chosen.delta, per_seed.std(ddof=1))
            if chosen.method == "paired" else math.nan,
        })
    delta = pd.DataFrame(found, index=rows.index)
    own = rows["label"].map(table.baselines)
    is_base, orphan = (own == rows["label"]).to_numpy(), own.isna().to_numpy()
    delta.loc[is_base | orphan] = math.nan
    delta.loc[is_base, ["ci_method", "seed_deltas"]] = ["baseline", ""]
    delta.loc[orphan, ["ci_method", "seed_deltas"]] = ["no baseline", ""]
    for label in rows["label"][is_base | orphan]:
        table.seed_deltas.pop(label, None)
    delta["p_holm"] = stats.holm(delta["p"])
    delta["tost_p_holm"] = stats.holm(delta["tost_p"])
    delta["mark"] = [stats.mark(d, p, t) for d, p, t in zip(delta["delta"], delta["p_holm"], delta["tost_p_holm"])]
    delta.loc[is_base, "mark"] = BASELINE
    rows = pd.concat([rows.drop(columns="_losses"), delta], axis=1)
    rows["baseline"] = is_base
    if own.nunique() > 1:
        rows.insert(rows.columns.get_loc("baseline") + 1, "baseline_row", own.fillna(""))
    rows["split"] = table.split
    rows["column"] = table.column
    rows["reference"] = table.reference
    table.rows = rows.astype({"params": "Int64", "d_ff": "Int64"})
