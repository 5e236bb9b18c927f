"""A study as the claims file declares it under `studies:` (docs/studies.md): rows crossed, the key its scan tunes
and that key's grid, scan seeds, planned seeds, budgets; validated strictly (ClaimsError) and resolved through
`scan_of`. Torch- and pandas-free: the claims file is read at every launch."""

from dataclasses import dataclass
from itertools import product

from mbexp.claims import ClaimsError
from mbexp.claims.file import SEED_LIST, claims_path, finite_number, int_list, read_file, seed_list
from mbexp.io import is_int
from mbexp.schedule import BUDGETS_RULE, valid_budgets

LR = "optim.lr"  # the key a study tunes unless it declares another (`tune: {key: ...}`)
STUDY_KEYS = ("experiment", "rows", "lr_grid", "tune", "scan_seeds", "seeds", "budgets", "select_at", "overrides",
              "note", "scan_of", "family", "transfer_from")
# the Holm family a verdict reads: its claim's comparisons (default) or all of the study's, claims and budgets
FAMILIES = ("claim", "study")
# what a study reusing a scan (scan_of) inherits
SCANNED = ("lr_grid", "tune", "scan_seeds", "budgets", "select_at", "overrides", "transfer_from")
SCAN_SUFFIX = "_scan"  # a study's scan runs live in their own experiment: its seeds never join the planned rows
# set by the study command on every run, the tuned key among them: no row key or override may set them again
PROTOCOL_KEYS = ("experiment", "name", "optim.schedule", "seed", "train.steps", "train.budgets", "results_dir",
                 "hydra/launcher", "hydra.launcher")


def protocol_keys(tuned: str = LR) -> tuple:
    """The keys the study command sets on every run of a study that tunes `tuned`."""
    return (*PROTOCOL_KEYS[:3], tuned, *PROTOCOL_KEYS[3:])


def identity_key(key: str) -> str:
    """The key a run's identity records for a row key: a config group (ffn, model, data) by its name."""
    from mbexp.config import SCHEMA_KEYS  # hydra's config loads only where rows are read

    return f"{key}.name" if f"{key}.name" in SCHEMA_KEYS else key


def _in_identity(key: str) -> bool:
    """Whether a run's identity records `key`'s value: the study finds a run's row by it."""
    from mbexp.config import SCHEMA_KEYS
    from mbexp.run.identity import NOT_IDENTITY

    ident = identity_key(key)
    return ident in SCHEMA_KEYS and not any(ident == k or ident.startswith(f"{k}.") for k in NOT_IDENTITY)


def _not_recorded(key: str) -> str:
    """' (why)' when `key` is no config key at all, with the closest ones; '' when it is one."""
    from mbexp.config import GROUPS, SCHEMA_KEYS, unknown_key

    known = identity_key(key) in SCHEMA_KEYS or key in GROUPS  # arch: a group, not recorded
    return "" if known else f" ({unknown_key(key)})"


def _owned(key: str, rows=(), tuned: str = LR) -> bool:
    """Whether the study command sets `key` itself (or it is one of the study's row keys)."""
    key = key.lstrip("+~")
    return key in rows or any(key == k or key.startswith(f"{k}.") for k in protocol_keys(tuned))


def _not_one_value(override: str, exact: bool) -> str:
    """Why Hydra would read `override` (key=value) as a sweep, a list or (`exact`) not as the value written; ''
    when it reads one value."""
    from mbexp.config import parsed as hydra_reading

    parsed = hydra_reading(override)
    if parsed is None:
        return "Hydra cannot parse it"
    value, written = parsed.value(), override.partition("=")[2]
    if parsed.is_sweep_override():
        return "Hydra reads it as a sweep of several values"
    if exact and (isinstance(value, list | dict) or str(value) != written):
        return f"Hydra reads it as {value!r}"
    return ""


def _check_rows(rows, here: str, tuned: str) -> None:
    """Each row key one the study does not set itself, each value listed once and read by Hydra as written: the
    scan joins the values with commas, and a run's identity must give the value back to be found."""
    if not isinstance(rows, dict) or not rows or not all(isinstance(k, str) and isinstance(v, list) and v
                                                        for k, v in rows.items()):
        raise ClaimsError(f"{here}: rows must map each key to a non-empty list of values, got {rows!r}")
    for key, values in rows.items():
        if _owned(key, tuned=tuned):
            raise ClaimsError(f"{here}: rows key {key!r} is set by the study command itself ("
                              f"{', '.join(protocol_keys(tuned))}); a row varies another key")
        if not _in_identity(key):
            raise ClaimsError(f"{here}: rows key {key!r} is not recorded in a run's identity{_not_recorded(key)}, so "
                              "the study could not tell its rows apart; vary a config key that decides the numbers "
                              "(ffn, model.d_model)")
        if len({str(v) for v in values}) < len(values):
            raise ClaimsError(f"{here}: rows {key}: {values!r} lists a value twice; list each value once")
        for value in values:
            why = _not_one_value(f"{key}={value}", exact=True) if isinstance(value, str | int | float) else \
                "not text or a number"
            if why:
                raise ClaimsError(f"{here}: rows value {key}={value!r} is not one value ({why}); list each value of "
                                  f"a row key on its own, e.g. {key}: [a, b]")


def _check_overrides(overrides, rows, here: str, tuned: str) -> None:
    """A list of key=value overrides, none a sweep or a key the study sets (the protocol's, or a row key)."""
    if not isinstance(overrides, list) or not all(isinstance(o, str) and o.partition("=")[0].lstrip("+~") and
                                                  "=" in o for o in overrides):
        raise ClaimsError(f"{here}: overrides must be a list of key=value strings, e.g. [logger=none], got "
                          f"{overrides!r}")
    for override in overrides:
        key = override.partition("=")[0]
        if _owned(key, rows, tuned):
            raise ClaimsError(f"{here}: overrides item {override!r} sets {key}, which the study sets itself ("
                              f"{', '.join(protocol_keys(tuned))}) or varies as a row; drop it")
        if why := _not_one_value(override, exact=False):
            raise ClaimsError(f"{here}: overrides item {override!r} is not one key=value ({why}); every run of "
                              "the study takes the same overrides")


def parse_studies(studies, where: str) -> dict:
    """`studies:` name -> declared protocol (with what it inherits through `scan_of`), each validated as a Study
    (docs/studies.md)."""
    if not isinstance(studies, dict):
        raise ClaimsError(f"{where}: `studies` must be a mapping of study name to its protocol")
    resolved = {name: _inherit(name, spec, studies, where) for name, spec in studies.items()}
    for name, spec in sorted(resolved.items(), key=lambda item: isinstance(item[1], dict) and "scan_of" in item[1]):
        parse_study(name, spec, where, resolved)  # a scan's own study first: the studies reusing it read its rows
    return resolved


def _inherit(name: str, spec, studies: dict, where: str):
    """A study with `scan_of: OTHER` reuses OTHER's scan: it takes OTHER's grid, scan seeds, budgets, selection
    budget and overrides, which it must not restate, so that one declaration owns them."""
    if not isinstance(spec, dict) or "scan_of" not in spec:
        return spec
    here, of = f"{where}, study {name}", spec["scan_of"]
    source = studies.get(of) if isinstance(of, str) and of != name else None
    if not isinstance(source, dict) or "scan_of" in source:
        raise ClaimsError(f"{here}: scan_of must name another study declared with its own scan, got {of!r}")
    if spec.get("experiment") == source.get("experiment"):
        raise ClaimsError(f"{here}: its runs need an experiment of their own, not {of}'s {source['experiment']!r}")
    if restated := [k for k in SCANNED if k in spec]:
        raise ClaimsError(f"{here}: {', '.join(restated)} come from the study whose scan it reuses "
                          f"({of}); do not restate them")
    return {**spec, **{k: source[k] for k in SCANNED if k in source}}


@dataclass(frozen=True)
class Study:
    """A declared protocol: rows (key -> values, crossed), the tuned key's grid, scan seeds, planned seeds,
    budgets."""

    name: str
    experiment: str
    rows: dict
    grid: tuple  # the values of the tuned key the scan tries, sorted
    scan_seeds: tuple
    seeds: tuple
    budgets: tuple
    select_at: int
    overrides: tuple = ()
    scan_of: str = ""  # the study whose scan chose this one's values (its own scan when empty)
    scanned: str = ""  # the experiment whose scan that is
    tune: str = LR  # the key the scan tunes, each row's value chosen on validation
    transfer_from: tuple = ()  # ((row key, base value),): only base rows are scanned, every row takes its base's choice

    @property
    def scan_experiment(self) -> str:
        return (self.scanned or self.experiment) + SCAN_SUFFIX

    @property
    def tuned(self) -> str:
        """The tuned key as text names it: LR, or the key itself."""
        return "LR" if self.tune == LR else self.tune

    @property
    def own_scan_seeds(self) -> tuple:
        """The scan seeds this study trains itself: none when it reuses another study's scan."""
        return () if self.scan_of else self.scan_seeds

    def row_values(self) -> list[tuple]:
        return list(product(*self.rows.values()))

    @property
    def scanned_rows(self) -> dict:
        """The rows the scan trains: every row, or with `transfer_from` only those at its base value."""
        base = dict(self.transfer_from)
        return {k: [v for v in values if k not in base or str(v) == str(base[k])] for k, values in self.rows.items()}

    def scan_row_values(self) -> list[tuple]:
        return list(product(*self.scanned_rows.values()))

    def row_overrides(self, values: tuple) -> list[str]:
        return [f"{key}={value}" for key, value in zip(self.rows, values)]


def _yaml_text_number(values) -> str:
    """': YAML reads 1e-3 as text ...' for the first of `values` that is a number PyYAML read as text (YAML 1.1
    needs a dot in the mantissa and a sign in the exponent: 1.0e-3, 1.0e+2), else ''."""
    for value in values if isinstance(values, list) else []:
        mantissa, e, power = str(value).lower().partition("e") if isinstance(value, str) else ("", "", "")
        if e and finite_number(_float(value)):
            spelled = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{'' if power[:1] in '+-' else '+'}{power}"
            return f": YAML reads {value} as text, not a number; write {spelled}"
    return ""


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _tuned(spec: dict, here: str) -> tuple[str, list, str]:
    """(key, grid, how the file names the grid): `tune: {key: KEY, grid: [...]}` (key optim.lr when left out), or
    `lr_grid: [...]`, which tunes optim.lr."""
    if "lr_grid" in spec:
        if "tune" in spec:
            raise ClaimsError(f"{here}: give tune or lr_grid, not both (lr_grid: [...] is tune: {{grid: [...]}})")
        return LR, spec["lr_grid"], "lr_grid"
    tune = spec["tune"]
    if not isinstance(tune, dict) or "grid" not in tune or set(tune) - {"key", "grid"} or \
            not isinstance(tune.get("key", LR), str):
        raise ClaimsError(f"{here}: tune must map key (a config key; {LR} when left out) and grid (its values), "
                          f"got {tune!r}")
    key = tune.get("key", LR)
    if _owned(key) and key != LR or not _in_identity(key):
        raise ClaimsError(f"{here}: tune key {key!r} is not a key a run's identity records{_not_recorded(key)} or is "
                          f"set by the study command itself; tune a config key that decides the numbers "
                          "(optim.lr, optim.warmup_steps)")
    return key, tune["grid"], "tune grid"


def _check_grid(grid, key: str, field: str, here: str) -> None:
    """At least two numbers, each once; learning rates positive."""
    what = "positive learning rates" if key == LR else f"numbers (values of {key})"
    if not isinstance(grid, list) or len(grid) < 2 or not all(finite_number(v) and (v > 0 or key != LR)
                                                              for v in grid) \
            or len({float(v) for v in grid}) < len(grid):
        raise ClaimsError(f"{here}: {field} must list at least two {what}, each once, got {grid!r}"
                          f"{_yaml_text_number(grid)}")


def parse_study(name: str, spec, where: str, studies: dict | None = None) -> Study:
    """A `studies:` entry (as parse_studies resolved it) as a Study; ClaimsError names the file, the study and the
    key on a bad entry."""
    here = f"{where}, study {name}"
    if not isinstance(spec, dict) or not isinstance(spec.get("experiment"), str):
        raise ClaimsError(f"{here}: expected a mapping with an `experiment` name")
    unknown = sorted(set(spec) - set(STUDY_KEYS))
    missing = sorted({"rows", "scan_seeds", "seeds", "budgets"} - set(spec)) + \
        ([] if "lr_grid" in spec or "tune" in spec else ["tune (or lr_grid)"])
    if unknown or missing:
        raise ClaimsError(f"{here}: " + (f"unknown keys {unknown}; allowed: {', '.join(STUDY_KEYS)}" if unknown
                                          else f"missing {', '.join(missing)}"))
    (tuned, grid, field), rows, budgets = _tuned(spec, here), spec["rows"], spec["budgets"]
    _check_rows(rows, here, tuned)
    _check_grid(grid, tuned, field, here)
    if not int_list(budgets) or not valid_budgets(budgets):
        raise ClaimsError(f"{here}: budgets must be {BUDGETS_RULE}, got {budgets!r}")
    for key in ("scan_seeds", "seeds"):
        if not seed_list(spec[key]):
            raise ClaimsError(f"{here}: {key} must be {SEED_LIST}, got {spec[key]!r}")
    if shared := sorted(set(spec["scan_seeds"]) & set(spec["seeds"])):
        raise ClaimsError(f"{here}: seeds {shared} are both scan and planned seeds: a value chosen on a seed would "
                          "flatter that seed's rows")
    select_at = spec.get("select_at", max(budgets))
    if not is_int(select_at) or select_at not in budgets:
        raise ClaimsError(f"{here}: select_at={select_at!r} is not one of the budgets {sorted(budgets)} (a step "
                          "count)")
    _check_overrides(spec.get("overrides", []), rows, here, tuned)
    if spec.get("family", FAMILIES[0]) not in FAMILIES:
        raise ClaimsError(f"{here}: family must be one of {', '.join(FAMILIES)} (the Holm family its verdicts "
                          f"read), got {spec['family']!r}")
    if not isinstance(transfer := spec.get("transfer_from", {}), dict) or len(transfer) > 1 or any(
            k not in rows or str(v) not in map(str, rows[k]) for k, v in transfer.items()):
        raise ClaimsError(f"{here}: transfer_from must map one row key to one of its values (the base row the scan "
                          f"tries, whose choice every row takes), e.g. {{model: width64}}, got {transfer!r}")
    scan_of = spec.get("scan_of", "")
    source = (studies or {}).get(scan_of, {}) if scan_of else {}
    if scan_of and (set(rows) != set(source["rows"]) or any(not set(v) <= set(source["rows"][k])
                                                           for k, v in rows.items())):
        raise ClaimsError(f"{here}: rows {rows!r} must be among the rows of {scan_of}, whose scan chooses their "
                          "values")
    return Study(name, spec["experiment"], {str(k): list(v) for k, v in rows.items()},
                 tuple(sorted(float(v) if tuned == LR else v for v in grid)), tuple(spec["scan_seeds"]),
                 tuple(spec["seeds"]), tuple(sorted(budgets)), int(select_at), tuple(spec.get("overrides", ())),
                 scan_of, source.get("experiment", ""), tuned, tuple(transfer.items()))


def load_studies(results_dir) -> dict[str, Study]:
    """The studies declared in <results_dir>/claims.yaml ({} without the file)."""
    if (path := claims_path(results_dir)) is None:
        return {}
    data, where = read_file(path), f"claims file {path}"
    resolved = parse_studies((data or {}).get("studies", {}) if isinstance(data, dict) else {}, where)
    return {name: parse_study(name, spec, where, resolved) for name, spec in resolved.items()}


def scan_experiments(results_dir) -> set[str]:
    """The experiments that hold the declared studies' scan runs: they choose values, no trend of theirs is read."""
    return {study.scan_experiment for study in load_studies(results_dir).values()}
