"""The claims file (`<results_dir>/claims.yaml`) -> Claims: every entry validated strictly and digested
(docs/claims.md#the-claims-file).

A run records at launch the digests of the claims of its experiment, or of its study's scan (`covering`); a verdict
is confirmatory only when every run it reads recorded its claim's current digest (and the rest of docs/claims.md's
provenance rule holds). Torch- and pandas-free: the trainer imports it.
"""

import logging
from pathlib import Path

from mbexp import CONF_DIR
from mbexp.claims import ClaimsError
from mbexp.claims.claim import Claim, digest
from mbexp.claims.file import SEED_LIST, claims_path, finite_number, parse_yaml, read_file, seed_list
from mbexp.claims.statistics import STATISTICS
from mbexp.claims.vocabulary import DEFAULT_MARGIN, HYPOTHESES, MARGIN_RULE, valid_margin
from mbexp.io import is_int, read_yaml
from mbexp.study.spec import SCAN_SUFFIX, parse_studies, scan_experiments

log = logging.getLogger(__name__)

TOP_KEYS = ("margin", "claims", "studies")
PROSE = ("claim", "paper", "paper_numbers", "note")  # free text: not part of the digest
KEYS = ("id", *PROSE, "experiment", "at", "baseline", "rows", "pairs", "hypothesis", "statistic", "margin", "seeds",
        "conditions", "study", "replicates")
REQUIRED = ("id", "claim", "paper", "experiment", "hypothesis", "seeds")
CONDITIONS = ("own_lr", "max_epochs")


def experiment_config(experiment: str):
    """The experiment's config file as parsed (comments aside), or None without one: the LR, steps, schedule and
    sweep a claim reads, so that a claim's digest changes when they do."""
    path = CONF_DIR / "experiment" / f"{experiment}.yaml"
    return read_yaml(path.read_text(encoding="utf-8")) if path.is_file() else None


def load_claims(path) -> list[Claim]:
    """The claims of a YAML file; ClaimsError (one line naming the file and the claim) on anything not allowed."""
    path = Path(path)
    return parse_claims(read_file(path), f"claims file {path}")


def load_claims_text(text: str, where: str = "claims text") -> list[Claim]:
    """The claims of a YAML text (docs/claims-example.md)."""
    return parse_claims(parse_yaml(text, where), where)


def parse_claims(data, where: str, configs=experiment_config) -> list[Claim]:
    """A claims file's parsed YAML as claims, every one validated, their conditions checked for consistency;
    `configs(experiment)` reads an experiment's config (another commit's, for the claim's history)."""
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ClaimsError(f"{where}: expected a mapping with a non-empty list `claims`")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ClaimsError(f"{where}: unknown top-level keys {unknown}; allowed: {', '.join(TOP_KEYS)}")
    margin = _margin(data.get("margin", DEFAULT_MARGIN), f"{where}: margin")
    studies = parse_studies(data.get("studies", {}), where)
    claims = [parse_claim(entry, margin, f"{where}, claim {i}", studies, configs)
              for i, entry in enumerate(data["claims"])]
    ids = [c.id for c in claims]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ClaimsError(f"{where}: repeated ids {', '.join(repeated)}")
    check_consistent(claims, where)
    check_replications(claims, where)
    return claims


def _margin(value, where: str) -> float:
    if not valid_margin(value):
        raise ClaimsError(f"{where} must be {MARGIN_RULE}, got {value!r}")
    return float(value)


def parse_claim(entry, default_margin: float, where: str, studies: dict | None = None,
                configs=experiment_config) -> Claim:
    """One claims-file entry as a Claim, with its digest."""
    if not isinstance(entry, dict):
        raise ClaimsError(f"{where}: expected a mapping")
    where = f"{where} ({entry.get('id', '?')})"
    unknown = sorted(set(entry) - set(KEYS))
    missing = [k for k in REQUIRED if k not in entry]
    if unknown or missing:
        raise ClaimsError(f"{where}: unknown keys {unknown} / missing keys {missing}; allowed: {', '.join(KEYS)}")
    for key in ("id", *PROSE, "experiment", "baseline", "study", "replicates"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key] and key in REQUIRED):
            raise ClaimsError(f"{where}: {key} must be text, got {entry[key]!r}")
    hypothesis, statistic = entry["hypothesis"], entry.get("statistic", Claim.statistic)
    if hypothesis not in HYPOTHESES or not isinstance(statistic, str) or statistic not in STATISTICS:
        raise ClaimsError(f"{where}: hypothesis must be one of {', '.join(HYPOTHESES)} and statistic one of "
                          f"{', '.join(STATISTICS)}, got {hypothesis!r} and {statistic!r}")
    if hypothesis not in STATISTICS[statistic].hypotheses:
        raise ClaimsError(f"{where}: statistic {statistic} tests the hypotheses "
                          f"{', '.join(STATISTICS[statistic].hypotheses)}, got {hypothesis!r}")
    pairs = _pairs(entry, hypothesis, statistic, where)
    margin = _margin(entry.get("margin", default_margin), f"{where}: margin")
    seeds, at, conditions = entry["seeds"], entry.get("at") or {}, entry.get("conditions") or {}
    if not seed_list(seeds):
        raise ClaimsError(f"{where}: seeds must be {SEED_LIST}, got {seeds!r}")
    if not isinstance(at, dict) or len(at) > 1 or not all(isinstance(v, int | float | str) for v in at.values()):
        raise ClaimsError(f"{where}: at must map one column key to one value, got {at!r}")
    if not isinstance(conditions, dict) or set(conditions) - set(CONDITIONS):
        raise ClaimsError(f"{where}: conditions must be a mapping of {', '.join(CONDITIONS)}, got {conditions!r}")
    own_lr, max_epochs = conditions.get("own_lr", Claim.own_lr), conditions.get("max_epochs", Claim.max_epochs)
    if not isinstance(own_lr, bool) or not (max_epochs is None or finite_number(max_epochs) and max_epochs > 0):
        raise ClaimsError(f"{where}: conditions own_lr must be true/false and max_epochs a positive number or "
                          f"null, got {own_lr!r} and {max_epochs!r}")
    study = entry.get("study", "")
    protocol = (studies or {}).get(study) if study else {}
    if protocol is None or study and protocol["experiment"] != entry["experiment"]:
        raise ClaimsError(f"{where}: study {study!r} is not a study of {entry['experiment']} declared under "
                          f"`studies`")
    if why := STATISTICS[statistic].problem(pairs, protocol or {}):
        raise ClaimsError(f"{where}: {why}")
    steps = at.get("train.steps")
    if study and "train.steps" in at and not (is_int(steps) and steps in protocol["budgets"]):
        # the study's runs train its budgets only: any other step count reads no run
        raise ClaimsError(f"{where}: at train.steps={steps!r} is not one of study {study}'s budgets "
                          f"{sorted(protocol['budgets'])}")
    max_epochs = None if max_epochs is None else float(max_epochs)
    content = {"experiment": entry["experiment"], "at": at, "pairs": [list(p) for p in pairs],
               "hypothesis": hypothesis, "statistic": statistic, "margin": margin, "seeds": sorted(seeds),
               "conditions": {"own_lr": own_lr, "max_epochs": max_epochs},
               "study": {"name": study, **protocol} if study else None,
               "experiment_config": configs(entry["experiment"])}
    if entry.get("replicates"):  # only when set: a claim without it keeps the digest its runs recorded
        content["replicates"] = entry["replicates"]
    return Claim(
        id=entry["id"], claim=entry["claim"], paper=entry["paper"], paper_numbers=entry.get("paper_numbers", ""),
        experiment=entry["experiment"], hypothesis=hypothesis, pairs=pairs, seeds=tuple(sorted(seeds)),
        at=tuple(at.items()), statistic=statistic, margin=margin, own_lr=own_lr, max_epochs=max_epochs,
        note=entry.get("note", ""), study=study, protocol=dict(protocol), replicates=entry.get("replicates", ""),
        digest=digest(content))


def _pairs(entry: dict, hypothesis: str, name: str, where: str) -> tuple:
    """The claim's comparisons (row, baseline): its Holm family, as its statistic declares them."""
    rows, statistic = entry.get("rows", []), STATISTICS[name]
    if not isinstance(rows, list) or not all(isinstance(r, str) and r for r in rows):
        raise ClaimsError(f"{where}: rows must be a list of row labels, got {rows!r}")
    if "pairs" in entry:
        pairs = entry["pairs"]
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and
                                                  all(isinstance(x, str) and x for x in p) for p in pairs):
            raise ClaimsError(f"{where}: pairs must be a list of [row, baseline] label pairs, got {pairs!r}")
        if rows or "baseline" in entry or not statistic.baseline or hypothesis == "ordering":
            raise ClaimsError(f"{where}: pairs replace rows and baseline, and suit neither an ordering nor a "
                              "sensitivity")
        found = tuple((a, b) for a, b in pairs)
    elif hypothesis == "ordering":
        if len(rows) < 2 or not statistic.ordering:
            orders = ", ".join(n for n, s in STATISTICS.items() if s.ordering)
            raise ClaimsError(f"{where}: an ordering needs at least 2 rows, best first, and statistic {orders}")
        found = tuple(zip(rows[:-1], rows[1:]))
    elif not statistic.baseline:
        if "baseline" in entry:
            raise ClaimsError(f"{where}: a {name} takes rows and no baseline (sensitivity_diff compares two)")
        found = tuple((r, None) for r in rows)
    else:
        if "baseline" not in entry:
            raise ClaimsError(f"{where}: rows need a baseline (or give pairs)")
        found = tuple((r, entry["baseline"]) for r in rows)
    if not found:
        raise ClaimsError(f"{where}: no comparisons (rows or pairs)")
    return found


def check_consistent(claims: list[Claim], where: str) -> None:
    """Claims that can read the same runs (one experiment, columns that agree on every key both name; no column:
    the reference column or every one) must declare the same conditions."""
    for i, a in enumerate(claims):
        clash = [b for b in claims[i + 1:] if b.experiment == a.experiment and _overlap(a.at, b.at)
                 and (b.own_lr, b.max_epochs) != (a.own_lr, a.max_epochs)]
        if clash:
            said = "; ".join(f"{c.id}: own_lr {str(c.own_lr).lower()}, max_epochs {c.max_epochs}" for c in [a, *clash])
            column = ", ".join(f"{k}={v}" for k, v in (a.at or clash[0].at))
            raise ClaimsError(f"{where}: claims on the same runs ({a.experiment}{', ' if column else ''}{column}) "
                              f"declare different conditions ({said}); declare the same conditions for all of them")


def check_replications(claims: list[Claim], where: str) -> None:
    """A claim that `replicates` another names a claim of the file that is not itself a replication, on another
    experiment, asking the same question (statistic, hypothesis, comparisons, column) on seeds of its own."""
    by_id = {c.id: c for c in claims}
    for c in claims:
        if not c.replicates:
            continue
        first = by_id.get(c.replicates)
        same = ("statistic", "hypothesis", "pairs", "at", "margin")
        why = "names no claim of the file" if first is None else \
            "names a replication (replicate the first claim)" if first.replicates else \
            "is on the same experiment" if first.experiment == c.experiment else \
            "plans seeds the first claim planned" if set(first.seeds) & set(c.seeds) else \
            f"differs from it in {', '.join(k for k in same if getattr(first, k) != getattr(c, k))}" \
            if any(getattr(first, k) != getattr(c, k) for k in same) else ""
        if why:
            raise ClaimsError(f"{where}, claim {c.id}: replicates {c.replicates!r}, which {why}")


def _overlap(at: tuple, other: tuple) -> bool:
    """Whether two read-at columns can be the same runs: no key that both name has two values."""
    named = dict(other)
    return all(named.get(key, value) == value for key, value in at)


def check(results_dir) -> None:
    """Refuse a broken claims file before any job (ClaimsError); a results folder without one is fine."""
    if path := claims_path(results_dir):
        load_claims(path)


def covering(results_dir, experiment: str) -> dict[str, str]:
    """claim id -> digest for the declared claims of `experiment`: what a run records at launch. A missing file
    gives {}; a broken one (refused before any job by `python -m mbexp.train`) a warning and {}."""
    path = claims_path(results_dir)
    if path is None:
        return {}
    try:
        claims = load_claims(path)
    except ClaimsError as err:
        log.warning("%s; the run records no declaration, so its verdicts will be exploratory", err)
        return {}
    return {c.id: c.digest for c in claims if experiment in (c.experiment, scan_experiment(c))}


def scan_experiment(claim: Claim) -> str | None:
    """Where the scan that chooses a study claim's LRs runs, when the claim's own study runs it (not a study
    reusing another's scan, whose scan runs were launched under that study's claims)."""
    if not claim.study or claim.protocol.get("scan_of"):
        return None
    return claim.experiment + SCAN_SUFFIX


def no_trend_read(results_dir) -> set[str]:
    """The experiments whose runs no trend is read from: the declared studies' scans (they choose LRs) and the
    experiments of LR-transfer claims (statistic: transfer; the claim reads the scan, the planned runs confirm it)."""
    path = claims_path(results_dir)
    transfer = {c.experiment for c in load_claims(path) if STATISTICS[c.statistic].transfer} if path else set()
    return scan_experiments(results_dir) | transfer
