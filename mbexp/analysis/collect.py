"""Run summaries read from disk: one record per run, validated, deduplicated, with its identity."""

import errno
import functools
import json
import logging
import math
import numbers
from pathlib import Path

import pandas as pd

from mbexp.io import CONFIG, METRICS, STATUSES, SummaryError, is_int, is_number, read_regular, read_summary, read_yaml
from mbexp.names import AXES
from mbexp.run.identity import experiments_in, summaries_of
from mbexp.run.migrate import identity_values, legacy_identity, upgrade
from mbexp.run.summary import NUMBERS as SUMMARY_NUMBERS
from mbexp.run.summary import lr_problem

log = logging.getLogger(__name__)

# RunSummary's fields: the text ones, the numbers a table cannot do without, and how the run computed
STRINGS = ("status", "experiment", "variant", "row", "row_id")
REQUIRED_NUMBERS = ("params", "d_ff", "early_val_loss", "final_val_loss", "final_val_bpb", "tokens_per_s", "step")
# the other numbers: a summary without them (some came later) still tables, with "—" where they would be shown
NUMBERS = REQUIRED_NUMBERS + tuple(k for k in SUMMARY_NUMBERS if k not in REQUIRED_NUMBERS)
NUMERICS = ("precision", "device", "compiled")  # how a run computed: precision is also in its identity
CURVE = ("step", "tokens", "val_loss")  # what a run's curve is drawn from, in its metrics.jsonl
PROVENANCE = ("git_commit", "git_clean", "git_resumed")  # what the provenance rule reads (mbexp.claims.provenance)
RUN_COLUMNS = ("path", *STRINGS, "seed", *AXES, "warmup_steps", *NUMBERS, *NUMERICS, "identity", "config",
               "declarations", *PROVENANCE)


def collect_runs(results_dir, strict: bool = False, experiments=None) -> pd.DataFrame:
    """One row per run from `results_dir/runs/<experiment>/<variant>/seed=<seed>/summary.json` (with
    `experiments`, only those experiments'); bad files are logged and skipped, or raise if strict."""
    rows = []
    names = experiments_in(results_dir) if experiments is None else experiments
    for path in sorted(p for name in names for p in summaries_of(results_dir, name)):
        try:
            rows.append(read_record(path, strict=strict))
        except SummaryError as err:
            if strict:
                raise
            log.warning("skipping %s", err)
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    runs[list(NUMBERS)] = runs[list(NUMBERS)].apply(pd.to_numeric).astype(float)
    return dedupe(runs)


def read_record(path: Path, *, strict: bool = False) -> dict:
    """The flat record of one summary.json; raises SummaryError naming the path when it is malformed, or when
    its run's metrics.jsonl is not UTF-8. A completed run with a non-finite final loss counts as diverged
    (with a warning; strict: a SummaryError)."""
    summary = upgrade("summary", read_summary(path, strict=True))
    problem = _problem(summary)
    if problem:
        raise SummaryError(f"{path}: {problem}")
    _check_metrics(path.parent / METRICS)
    bad = {key: summary[key] for key in ("final_val_loss", "final_test_loss")
           if is_number(summary.get(key)) and not math.isfinite(summary[key])}
    if summary["status"] == "completed" and bad:
        message = f"{path}: status completed with {', '.join(f'{k}={v}' for k, v in bad.items())}"
        if strict:
            raise SummaryError(f"{message}: a diverged run, not a number to table")
        log.warning("counting as diverged %s", message)
        summary = {**summary, "status": "diverged"}
    axes = summary["axes"]
    identity = summary.get("identity") or legacy_identity(summary)
    return {
        "path": str(path.parent),
        **{key: summary[key] for key in (*STRINGS, "seed")},
        **{key: summary.get(key) for key in (*NUMBERS, *NUMERICS)},
        **{axis: axes.get(axis) for axis in AXES},
        "warmup_steps": axes["warmup_steps"],
        "identity": identity,
        "config": config_key(identity),
        "declarations": summary.get("declarations") or {},  # claim id -> digest at launch (mbexp.claims.parse.covering)
        **{key: summary.get(key) for key in PROVENANCE},
    }


def _check_metrics(path: Path) -> None:
    """A run's metrics.jsonl must be a UTF-8 file whose records give numbers where its curve is drawn from (a line
    cut short by an interrupted run is fine); a missing one is fine."""
    try:
        lines = read_regular(path).decode("utf-8").splitlines()
    except FileNotFoundError:
        return
    except UnicodeDecodeError as err:
        raise SummaryError(f"{path}: not UTF-8 (byte {err.object[err.start]:#04x} at byte offset {err.start}); "
                           "the run is left out") from None
    except OSError as err:
        code = errno.errorcode.get(err.errno, err.errno)
        raise SummaryError(f"{path}: unreadable ({err.strerror}, {code})") from None
    for number, line in enumerate(lines, 1):
        record = _curve_record(line)
        if record is None and number < len(lines):  # a resume rewrites the file: only its last line can be torn
            raise SummaryError(f"{path}: line {number} is not a JSON record (only the last line may be cut short, by "
                               "a kill); the run is left out")
        if wrong := _wrong_curve_value(record or {}):
            raise SummaryError(f"{path}: line {number}: {wrong}, not a number; the run is left out")


def _curve_record(line: str) -> dict | None:
    """The record of one metrics.jsonl line, or None for a line cut short or one that is not an object."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _wrong_curve_value(record: dict) -> str | None:
    """`KEY is VALUE` for the first curve value (step, tokens, val_loss) of `record` that is not a number."""
    for key in CURVE:
        value = record.get(key)
        if value is not None and not is_number(value):
            return f"{key} is {json.dumps(value)[:40]}"
    return None


def is_off(value) -> bool:
    """A missing or switched-off setting: None in an identity, NaN once pandas has grouped it."""
    return value is None or isinstance(value, float) and math.isnan(value)


def order_key(value) -> tuple:
    """A sort key for config values of any types, never comparing two types: numbers, then text, then lists,
    then missing values (None, NaN), as pandas sorts them."""
    if isinstance(value, tuple):
        return (2, tuple(order_key(v) for v in value))
    if is_off(value):
        return (3, 0)
    if isinstance(value, numbers.Real):
        return (0, value)
    return (1, str(value))


def config_key(identity: dict) -> str:
    """A hashable, order-free key of an identity dict (list values such as betas included)."""
    return json.dumps(identity, sort_keys=True)


def _problem(summary: dict) -> str | None:
    """What makes `summary` unusable, or None."""
    missing = [key for key in (*STRINGS, "seed", "axes", *REQUIRED_NUMBERS) if key not in summary]
    if missing:
        return f"missing keys {missing}"
    wrong = [key for key in STRINGS if not isinstance(summary[key], str)]
    wrong += [key for key in NUMBERS if summary.get(key) is not None and not is_number(summary[key])]
    wrong += [] if is_int(summary["seed"]) else ["seed"]
    wrong += [] if isinstance(summary["axes"], dict) and is_int(summary["axes"].get("warmup_steps")) else ["axes"]
    wrong += [key for key in ("identity", "declarations") if not isinstance(summary.get(key, {}), dict)]
    if wrong:
        return f"wrong types for {wrong}"
    identity = summary.get("identity") or {}  # none: a summary older than `identity`
    if identity and (why := lr_problem(identity) or _mistyped(identity)):
        return why
    if any(summary.get(key) is not None and summary[key] < 0 for key in ("steps", "step")):
        return f"negative steps ({summary.get('step')} of {summary.get('steps')})"
    if summary["status"] not in STATUSES:
        return f"unknown status {summary['status']!r}"
    if summary["status"] == "completed" and summary["final_val_loss"] is None:
        return "completed without final_val_loss"
    if summary["status"] == "completed" and summary.get("final_test_loss") is None and \
            identity_values(identity)["data.test_fraction"]:  # its table would read validation for every run
        return "completed without final_test_loss, though its identity holds a test split"
    return None


def _mistyped(identity: dict) -> str:
    """Why an identity value is not of its config key's type (text where a number goes), or ''."""
    for key, value in identity.items():
        default = _schema_defaults().get(key)
        if default is None or value is None:
            continue
        kind, ok = ("true/false", isinstance(value, bool)) if isinstance(default, bool) else \
            ("a number", is_number(value)) if is_number(default) else \
            (f"a {type(default).__name__}", isinstance(value, type(default)))
        if not ok:
            return f"identity {key}={json.dumps(value)[:40]} is not {kind}"
    return ""


@functools.cache
def _schema_defaults() -> dict:
    from dataclasses import asdict

    from mbexp.config import Config
    from mbexp.run.migrate import flat

    return flat(asdict(Config()))


def dedupe(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per (experiment, config, seed): the best status, then the most steps, then the last path."""
    rank = runs["status"].map(STATUSES.index)
    order = runs.assign(_rank=rank, _step=runs["step"].fillna(-1)).sort_values(["_rank", "_step", "path"])
    kept = order.drop_duplicates(["experiment", "config", "seed"], keep="last")
    return kept.drop(columns=["_rank", "_step"]).sort_values("path").reset_index(drop=True)


def load_curves(run_dirs) -> pd.DataFrame:
    """Eval records (run_dir, step, tokens, val_loss) from each run's metrics.jsonl; the last one per step wins."""
    records = []
    for run_dir in run_dirs:
        path = Path(run_dir, METRICS)
        try:
            lines = read_regular(path).decode("utf-8").splitlines()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as err:  # collect_runs leaves such a run out; a file changed since
            log.warning("skipping the curve of %s (%s)", path, err)
            continue
        for line in lines:
            record = _curve_record(line)  # a line cut short by an interrupted run: None
            if record is not None and "val_loss" in record and not _wrong_curve_value(record):
                records.append({"run_dir": str(run_dir), **{k: record.get(k) for k in CURVE}})
    curves = pd.DataFrame(records, columns=["run_dir", *CURVE])
    return curves.drop_duplicates(["run_dir", "step"], keep="last").reset_index(drop=True)


def run_settings(run_dirs, section: str) -> dict:
    """The `section` of the first readable config.yaml among `run_dirs` (e.g. the runs' logger settings)."""
    import yaml

    for run_dir in run_dirs:
        try:
            config = read_yaml(read_regular(Path(run_dir, CONFIG)).decode("utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(config, dict) and isinstance(config.get(section), dict):
            return config[section]
    return {}
