"""Claims as text: results/tables/claims.{md,csv}, the README's headline block and docs/results.md, all generated
(scripts/make_report.py, `make report`, writes the last two; scripts/worked_example.py renders
docs/claims-example.md with the same functions). Over 300 lines: one renderer per generated text, each reading the
same Results."""

import math
from pathlib import Path

import pandas as pd

from mbexp.analysis import equivalent, regime, replication, stats
from mbexp.analysis.files import FIT, SCAN, found
from mbexp.analysis.init_control import control_markdown, control_rows
from mbexp.analysis.ladder.render import LADDERS_INTRO, ladder_markdown, ladder_trends, lr_ladders_markdown
from mbexp.analysis.readme import read_at, readme_block
from mbexp.analysis.render import CI, fmt
from mbexp.analysis.studies import annotate, cost_lines, run_hours
from mbexp.analysis.table import build_tables, seed_text
from mbexp.analysis.transfer_page import TRANSFER_INTRO, transfer_markdown
from mbexp.claims.evaluate import evaluate
from mbexp.claims.parse import load_claims
from mbexp.claims.provenance import History
from mbexp.claims.result import Comparison, Result, seed_range, short
from mbexp.claims.vocabulary import (
    AGREES,
    BETTER,
    CONFIRMATORY,
    DISAGREES,
    EQUIVALENT,
    EXPLORATORY,
    NOT_AS_DECLARED,
    NOT_RESOLVED,
    NOT_TESTED,
    UNRESOLVED,
    VERDICTS,
    WORSE,
)
from mbexp.run.identity import summaries_of
from mbexp.study.spec import scan_experiments

CLAIMS_BEGIN, CLAIMS_END = "<!-- claims:begin -->", "<!-- claims:end -->"
RESULTS_BEGIN, RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"
HYPOTHESIS_TEXT = {BETTER: "better than {b}", WORSE: "worse than {b}", EQUIVALENT: "within ±{m} of {b}",
                   "ordering": "in the stated order"}
SENSITIVITY_TEXT = {WORSE: "worse without warm-up by more than {m}", BETTER: "better without warm-up by more "
                    "than {m}", EQUIVALENT: "within ±{m} without warm-up"}
DIFF_TEXT = {WORSE: "needs warm-up more than {b}", BETTER: "needs warm-up less than {b}",
             EQUIVALENT: "warm-up sensitivity within ±{m} of {b}"}

TRANSFER_TEXT = {EQUIVALENT: "every width's chosen LR within one grid step of {b}'s, per value of the other rows",
                 WORSE: "some width's chosen LR more than one grid step from {b}'s, per value of the other rows"}


def _interval(low: float, high: float) -> str:
    return "—" if pd.isna(low) else f"[{low:+.4f}, {high:+.4f}]"


def _seeds_needed(n: float) -> str:
    return "—" if pd.isna(n) else f"> {stats.MAX_SEEDS}" if math.isinf(n) else f"{n:.0f}"


def hypothesis(result: Result) -> str:
    claim = result.claim
    bases = sorted({b for _, b in claim.pairs if b})
    base = ", ".join(short(b, [p[0] for p in claim.pairs] + bases) if len(bases) > 1 else b for b in bases)
    texts = {"sensitivity": SENSITIVITY_TEXT, "sensitivity_diff": DIFF_TEXT, "transfer": TRANSFER_TEXT}.get(
        claim.statistic, HYPOTHESIS_TEXT)
    text = texts[claim.hypothesis]
    return text.format(b=f"`{base}`", m=f"{claim.margin:g}")


def _labels(result: Result) -> list[str]:
    return sorted({label for pair in result.claim.pairs for label in pair if label})


def name(result: Result, c: Comparison) -> str:
    """A comparison's short name within its claim: `geglu`, `geglu vs swiglu`, `post`."""
    labels = _labels(result)
    row = short(c.row, labels)
    shared = len({b for _, b in result.claim.pairs}) == 1 and result.claim.hypothesis != "ordering"
    return row if shared or c.baseline is None else f"{row} vs {short(c.baseline, labels)}"


def marks(result: Result) -> str:
    return ", ".join(f"{name(result, c)} {c.mark}" for c in result.comparisons) or "—"


def seeds_text(result: Result) -> str:
    present = sorted(set().union(*result.present.values())) if result.present else []
    return f"{seed_range(result.claim.seeds)} / {seed_range(present)}"


def added_text(result: Result) -> str:
    """The marks on every seed present, when seeds beyond the plan exist: shown apart from the verdict."""
    if not result.added:
        return "—"
    extra = set().union(*result.present.values()) - set(result.claim.seeds)
    return f"seeds {seed_range(extra)} added: " + ", ".join(f"{name(result, c)} {c.mark}" for c in result.added)


def verdict_text(result: Result) -> str:
    """The verdict in bold, its standing beside it; a replication's: pooled with the claim it repeats, first."""
    if (pooled := result.pooled) is not None:
        return (f"**{pooled.verdict}** ({pooled.standing}) pooled with `{pooled.first.claim.id}` "
                f"({replication.CORRECTION}); this study alone: {result.verdict}")
    return f"**{result.verdict}** ({result.standing})"


def claims_display(results: list[Result]) -> pd.DataFrame:
    """One line per claim as text: claims.md and the W&B `table` run's claims table."""
    return pd.DataFrame([{
        "claim": f"{r.claim.claim} (`{r.claim.id}`)", "paper": r.claim.paper, "read at": read_at(r),
        "hypothesis": hypothesis(r), "marks on the planned seeds": marks(r), "verdict": verdict_text(r),
        "seeds planned / present": seeds_text(r), "with seeds added after the plan": added_text(r),
        "qualifiers": "; ".join(r.qualifiers) or "—"} for r in results])


def claims_markdown(results: list[Result]) -> str:
    """results/tables/claims.md: one line per claim, then the rules it was made by."""
    caption = "**Claims** — every verdict computed from `claims.yaml` beside `runs/` by `make table` (docs/claims.md)."
    return "\n".join([caption, "", standing_line(results), "", *markdown_rows(claims_display(results)), "",
                      LEGEND]) + "\n"


def markdown_rows(shown: pd.DataFrame) -> list[str]:
    return ["| " + " | ".join(shown.columns) + " |", "|" + "|".join(":---" for _ in shown.columns) + "|",
            *("| " + " | ".join(row) + " |" for row in shown.itertuples(index=False))]


def standing_line(results: list[Result]) -> str:
    """How many verdicts are confirmatory (counted apart) and how many exploratory."""
    def count(standing: str) -> str:
        found = [r.verdict for r in results if r.standing == standing]
        kinds = ", ".join(f"{v} {found.count(v)}" for v in VERDICTS if v in found)
        return f"{len(found)}" + (f" ({kinds})" if kinds else "")

    exploratory = sum(r.standing == EXPLORATORY for r in results)
    head = f"All {len(results)} claims are exploratory" if exploratory == len(results) else \
        f"Confirmatory: {count(CONFIRMATORY)}. Exploratory: {count(EXPLORATORY)}"
    return (f"{head}: a verdict is confirmatory only when every run it reads, its study's scan runs included, was "
            "launched under the claim's current declaration (its digest, recorded in each run's summary.json), from "
            "a clean tree, at a commit that descends from the one that declared the claim as it now reads; runs "
            "launched before the claim was declared, under an edited declaration, or from uncommitted code make it "
            "exploratory: computed and shown, never counted as confirmatory.")


LEGEND = (
    f"marks: {BETTER} / {WORSE} / equiv. / {UNRESOLVED} on the planned seeds, Holm over the claim's own comparisons "
    f"(its family), alpha {stats.ALPHA:g}. verdict (planned seeds): {AGREES} when every comparison supports the "
    f"hypothesis; {DISAGREES} when any contradicts it (resolved the other way, or beyond the margin by the two-sided "
    f"test for equivalence); a sensitivity claim of {WORSE} needs the sensitivity resolved beyond its margin; "
    f"{NOT_TESTED} without an interval; {NOT_AS_DECLARED} when a declared condition is unmet (planned runs missing "
    f"or diverged, past max_epochs or epochs not recorded, a row not at its own tuned LR); {NOT_RESOLVED} otherwise. "
    f"{CONFIRMATORY}: every run read was launched under the claim's current digest; {EXPLORATORY} otherwise. Added "
    "seeds are shown apart and never change the verdict. An ordering is tested pair by adjacent pair. docs/claims.md "
    "has every rule.")


CSV_COLUMNS = ["claim", "digest", "standing", "runs_read", "runs_declared", "experiment", "read_at", "hypothesis",
               "statistic", "margin", "row", "baseline", "n", "delta", "ci_low", "ci_high", "ci90_low", "ci90_high",
               "ci_method", "p", "p_holm", "p_permutation", "p_permutation_holm", "tost_p_holm", "beyond_p_holm",
               "mark", "p_holm_study", "mark_study", "outcome", "seeds_needed", "seed_deltas", "slow_start",
               "ceq", "ceq_low", "ceq_high", "ceq_extrapolated", "ceq_steps",
               "verdict", "conditions_unmet", "seeds_planned", "seeds_present", "n_all_seeds", "delta_all_seeds",
               "ci_low_all_seeds", "ci_high_all_seeds", "p_holm_all_seeds", "mark_all_seeds",
               *replication.CSV_COLUMNS, "qualifiers"]


def claims_csv(results: list[Result]) -> str:
    """results/tables/claims.csv: one line per comparison (a claim without comparisons gets one empty line)."""
    records = []
    for r in results:
        claim = {"claim": r.claim.id, "digest": r.claim.digest, "standing": r.standing, "runs_read": r.runs_read,
                 "runs_declared": r.runs_declared, "experiment": r.claim.experiment, "read_at": read_at(r),
                 "hypothesis": r.claim.hypothesis, "statistic": r.claim.statistic, "margin": r.claim.margin,
                 "verdict": r.verdict, "conditions_unmet": "; ".join(r.unmet),
                 "seeds_planned": " ".join(map(str, r.claim.seeds)),
                 "seeds_present": " ".join(map(str, sorted(set().union(*r.present.values())))) if r.present else "",
                 "qualifiers": "; ".join(r.qualifiers)}
        for i, c in enumerate(r.comparisons or [None]):
            added = r.added[i] if r.added else None
            records.append(claim | ({} if c is None else _comparison_record(c)) | ({} if added is None else {
                "n_all_seeds": added.n, "delta_all_seeds": added.interval.delta,
                "ci_low_all_seeds": added.interval.low, "ci_high_all_seeds": added.interval.high,
                "p_holm_all_seeds": added.p_holm, "mark_all_seeds": added.mark}) | replication.csv_fields(r, i))
    frame = pd.DataFrame(records, columns=CSV_COLUMNS)
    return frame.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def _comparison_record(c: Comparison) -> dict:
    iv, iv90 = c.interval, c.interval90
    return {"row": c.row, "baseline": c.baseline or "", "n": c.n, "delta": iv.delta, "ci_low": iv.low,
            "ci_high": iv.high, "ci90_low": iv90.low, "ci90_high": iv90.high, "ci_method": iv.method, "p": iv.p,
            "p_holm": c.p_holm, "p_permutation": c.p_permutation, "p_permutation_holm": c.p_permutation_holm,
            "tost_p_holm": c.tost_holm, "beyond_p_holm": c.beyond_holm, "mark": c.mark,
            "p_holm_study": c.p_holm_study, "mark_study": c.mark_study,
            "outcome": c.outcome, "seeds_needed": c.seeds_needed,
            "seed_deltas": seed_text(c.deltas),
            "slow_start": "; ".join(f"{label} {' '.join(map(str, s))}" for label, s in c.slow.items() if s),
            **{key: c.ceq.get(key, "" if key == "ceq_extrapolated" else math.nan)
               for key in ("ceq", "ceq_low", "ceq_high", "ceq_extrapolated", "ceq_steps")}}


def results_page(results: list[Result], results_dir, trends: list[dict] = (), costs: list[str] = (),
                 scans: list[str] = ()) -> str:
    """docs/results.md's generated part: the claims table, per claim its family with every statistic, the ladders."""
    out = ["## Claims", "", claims_markdown(results)]
    for r in results:
        out += claim_section(r)
    if trends:
        out += ["## Size ladders", "",
                "Compute multiplier m vs the baseline (> 1: the baseline needs m times the compute to match), with "
                f"its {CI} bootstrap interval over seeds, at the smallest and the largest size of each ladder; its "
                "trend along the ladder and the crossover, as the ladder's fit table computes them "
                "([ladder-fits.md](ladder-fits.md#compute-multiplier)).", "", ladder_markdown(trends), ""]
        out += [f"- `{exp}`: [fit table](../results/tables/{exp}{FIT}.md), "
                f"[figure](../results/figures/{exp}_ladder.png)" for exp in sorted({t["experiment"] for t in trends})]
        out += [""]
    if side := lr_ladders_markdown(results, results_dir):
        out += ["## Size ladders at one LR, at each size's own LR, and under μP", "", LADDERS_INTRO, "", side, ""]
    if across := transfer_markdown(results, results_dir):  # the transfer claims' studies: SP beside μP
        out += ["## LR transfer across width", "", TRANSFER_INTRO, "", across, ""]
    if control := control_rows(results_dir):  # exploratory: does the gated deficit move when only the init scales?
        out += ["## Init-only control (exploratory)", "",
                "`init_control_cpu` against its SP twins in `ladder_wsd_cpu` (same seeds, LR and budget): the gated "
                "FFN's mean paired Δ against ReLU on test (< 0: ahead) with the SP init (std 0.02) and with the hidden "
                "init scaled with width (`model.init=fan_in`, base 64), and the change the init alone makes, paired "
                "by seed ([studies.md](studies.md)). At the base width both inits are the same computation, so the "
                "change there measures only what differs between the two arms' runs (bf16 numerics differ between "
                "CPUs; the twins may have run on another).", "", control_markdown(control), ""]
    if costs:  # the declared studies' compute against the naive grid of separate runs
        out += ["## Declared studies: compute", "", *costs, "", "([studies.md](studies.md#cost))", ""]
    if scans:  # each study's scan as `make table` wrote it: loss against LR per row, and the LR chosen
        out += ["## LR scans of the declared studies", ""]
    for study in scans:
        table = Path(results_dir, "tables", f"{study}{SCAN}.md").read_text(encoding="utf-8").strip()
        out += [f"### `{study}`", "", table, "", f"![{study}: loss against LR per row]"
                f"(../results/figures/{study}{SCAN}.png)", ""]
    experiments = sorted({r.claim.experiment for r in results if r.present}  # those with runs, and the scans
                         | {s for s in scan_experiments(results_dir) if summaries_of(results_dir, s)})
    out += ["## Tables and figures", "", "Each experiment's runs and their summed run time (one thread each, from "
            "their summaries; a budget branch without its trunk; two jobs side by side take about half):", ""]
    out += [f"- `{exp}`: {n} runs, {hours:.1f} run-hours: [table](../results/tables/{exp}.md)"
            + (f", [forest plot](../results/figures/{exp}_forest.png)"  # none without a comparison yet
               if Path(results_dir, "figures", f"{exp}_forest.png").is_file() else "")
            for exp in experiments if Path(results_dir, "tables", f"{exp}.md").is_file()  # a study: maybe its scan only
            for n, hours in [run_hours(results_dir, exp)]]
    return "\n".join(out).rstrip() + "\n"


def scan_tables(results_dir) -> list[str]:
    """The declared studies whose LR scan `make table` wrote (tables/<study>_lr_scan.md)."""
    return [study for study, _ in found(results_dir, SCAN, "md")]


def claim_section(r: Result) -> list[str]:
    claim = r.claim
    conditions = [f"at most {claim.max_epochs:g} epoch(s)"] if claim.max_epochs is not None else []
    conditions += ["each row at its own tuned learning rate"] if claim.own_lr else []
    lines = [f"### {claim.claim} — `{claim.id}`", "",
             f"- paper: {claim.paper}" + (f" — {claim.paper_numbers}" if claim.paper_numbers else ""),
             f"- read at: {read_at(r)}; hypothesis: {hypothesis(r)}; Holm family: {len(claim.pairs)} "
             f"comparison{'s' if len(claim.pairs) > 1 else ''}",
             f"- conditions: {', '.join(conditions) or 'none'}; seeds planned / present: {seeds_text(r)}"]
    lines += [f"- study `{claim.study}`: " + ", ".join(f"{k} {v}" for k, v in claim.protocol.items())] \
        if claim.study else []
    lines += [f"- note: {claim.note}"] if claim.note else []
    lines += [f"- regime: {r.regime}"] if r.regime else []
    lines += [f"- **verdict: {r.verdict}** ({r.standing}: {r.runs_declared} of {r.runs_read} runs read launched "
              f"under digest `{claim.digest}`)",
              f"- conditions not met: {'; '.join(r.unmet) or 'none'}",
              f"- qualifiers: {'; '.join(r.qualifiers) or 'none'}", ""]
    if not r.comparisons:
        return lines
    equivalence = claim.hypothesis == EQUIVALENT or claim.statistic == "sensitivity"  # margins read
    trend = claim.statistic == "trend"  # its p: the larger of the slope t-test's and the permutation test's
    head = ["comparison", "n", f"Δ ({CI} CI)", f"{stats.LEVEL90:.0%} CI", "p (Holm, family)"]
    head += ["TOST p (Holm)", f"beyond ±{claim.margin:g} p (Holm)"] if equivalence else []
    head += ["mark", "says", "seeds needed", "per-seed Δ"]
    head += ["p (Holm, study) and mark"] if claim.study else []
    multiplier = any(c.ceq for c in r.comparisons)  # budget branches: the baseline's compute to match the row
    head += [f"baseline's compute to match ({CI} CI; its steps)"] if multiplier else []
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
    for c in r.comparisons:
        iv = c.interval
        cells = [name(r, c), str(c.n), f"{fmt(iv.delta, '+.4f')} {_interval(iv.low, iv.high)}".strip(),
                 _interval(c.interval90.low, c.interval90.high),
                 fmt(c.p_holm, ".3f") + (f" (permutation {fmt(c.p_permutation_holm, '.2g')})" if trend else "")]
        cells += [fmt(c.tost_holm, ".3f"), fmt(c.beyond_holm, ".3f")] if equivalence else []
        slow = set().union(*c.slow.values())  # a trend's: the seeds slow at any size of its row or baseline
        deltas = " ".join(f"{s}: {d:+.3f}" + ("*" if s in slow else "") for s, d in c.deltas.items())
        cells += [c.mark, c.outcome, _seeds_needed(c.seeds_needed), deltas or "—"]
        cells += [f"{fmt(c.p_holm_study, '.3f')} {c.mark_study}"] if claim.study else []
        cells += [_multiplier(c.ceq)] if multiplier else []
        lines.append("| " + " | ".join(cells) + " |")
    if multiplier:
        lines += ["", "Compute to match: the compute at which the baseline, interpolated in log compute between its "
                  "budget branches, reaches the row's loss, over the row's compute "
                  "([columns.md](columns.md#compute-equivalent-multiplier)); > or <: beyond its budgets."]
    if claim.study:
        lines += ["", f"p (Holm, study): Holm over every comparison of study `{claim.study}`, all its claims and "
                  "budgets (the verdict reads the claim's own family)."]
    if trend:
        lines += ["", "Δ: the mean per-seed slope of Δ over ln N; p: the larger of the slope t-test's and the "
                  "permutation test's, each Holm-adjusted over the family (the permutation p in brackets)."]
    if r.added:
        lines += ["", f"With {added_text(r).partition(':')[0]} (shown apart; the verdict reads the planned seeds):",
                  "", f"| comparison | n | Δ ({CI} CI) | p (Holm, family) | mark |", "|:---|---:|---:|---:|:---|"]
        lines += [f"| {name(r, c)} | {c.n} | {fmt(c.interval.delta, '+.4f')} "
                  f"{_interval(c.interval.low, c.interval.high)} | {fmt(c.p_holm, '.3f')} | {c.mark} |"
                  for c in r.added]
    return lines + [""] + replication.section(r, lambda c: name(r, c), fmt)


def _multiplier(ceq: dict) -> str:
    """A comparison's compute-equivalent multiplier and the baseline's steps at that compute; — without one."""
    if not ceq or pd.isna(ceq["ceq"]):
        return "—"
    return f"{equivalent.text(ceq)}; {ceq['ceq_steps']:,.0f} steps"


def splice(text: str, begin: str, end: str, block: str) -> str:
    """`text` with everything between the markers replaced by `block`; ValueError when the markers are missing."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"markers {begin} ... {end} not found")
    return text[:start + len(begin)] + "\n" + block.rstrip("\n") + "\n" + text[stop:]


def generate(results_dir, claims_path) -> list[Result]:
    tables = build_tables(results_dir)
    annotate(tables, results_dir)  # a declared study's rows: the LR its scan chose
    regime.annotate(tables, results_dir)  # each table's n-gram baselines and scale
    results = evaluate(load_claims(claims_path), tables, History(claims_path))
    for r in results:  # the regime of the runs each verdict reads, stated beside it
        r.regime = getattr(tables.get(r.claim.experiment), "regime", "")
    return results


def blocks(results_dir, claims_path) -> dict[str, tuple[str, str, str]]:
    """What `make report` splices into each text (readme, page): its two markers and the block."""
    results, trends = generate(results_dir, claims_path), ladder_trends(results_dir)
    page = results_page(results, results_dir, trends, cost_lines(results_dir), scan_tables(results_dir))
    return {"readme": (CLAIMS_BEGIN, CLAIMS_END, readme_block(results, trends)),
            "page": (RESULTS_BEGIN, RESULTS_END, page)}
