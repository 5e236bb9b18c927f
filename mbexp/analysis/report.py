"""Claims as text: results/tables/claims.{md,csv}, the README's headline block and docs/results.md, all generated.

`python -m mbexp.analysis.report` (`make report`) rewrites the README block between CLAIMS_BEGIN/CLAIMS_END and
docs/results.md below RESULTS_BEGIN from the committed runs and results/claims.yaml; `--check` only compares.
"""

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from mbexp.analysis import stats
from mbexp.analysis.claims import ClaimsError, Comparison, Result, evaluate, load_claims, seed_range, short
from mbexp.analysis.ladder_render import multiplier_cell
from mbexp.analysis.render import fmt
from mbexp.analysis.table import setting

CLAIMS_BEGIN, CLAIMS_END = "<!-- claims:begin -->", "<!-- claims:end -->"
RESULTS_BEGIN, RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"
HYPOTHESIS_TEXT = {"better": "better than {b}", "worse": "worse than {b}", "equivalent": "within ±{m} of {b}",
                   "ordering": "in the stated order"}
SENSITIVITY_TEXT = {"worse": "worse without warm-up", "better": "better without warm-up",
                    "equivalent": "within ±{m} without warm-up"}


def _interval(low: float, high: float) -> str:
    return "—" if pd.isna(low) else f"[{low:+.4f}, {high:+.4f}]"


def _seeds_needed(n: float) -> str:
    return "—" if pd.isna(n) else f"> {stats.MAX_SEEDS}" if math.isinf(n) else f"{n:.0f}"


def read_at(result: Result) -> str:
    """Where the claim is read: the experiment and its column value."""
    claim = result.claim
    if claim.statistic == "sensitivity":
        return f"{claim.experiment}, warm-up sensitivity"
    where = ", ".join(f"{k}={setting(v)}" for k, v in claim.at)
    return f"{claim.experiment}, {where}" if where else claim.experiment


def hypothesis(result: Result) -> str:
    claim = result.claim
    bases = sorted({b for _, b in claim.pairs if b})
    base = ", ".join(short(b, [p[0] for p in claim.pairs] + bases) if len(bases) > 1 else b for b in bases)
    text = (SENSITIVITY_TEXT if claim.statistic == "sensitivity" else HYPOTHESIS_TEXT)[claim.hypothesis]
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


def claims_markdown(results: list[Result]) -> str:
    """results/tables/claims.md: one line per claim, then the rules it was made by."""
    head = ["claim", "paper", "read at", "hypothesis", "marks in the claim's family", "verdict",
            "on planned seeds", "seeds planned / present", "qualifiers"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(":---" for _ in head) + "|"]
    for r in results:
        cells = [f"{r.claim.claim} (`{r.claim.id}`)", r.claim.paper, read_at(r), hypothesis(r), marks(r),
                 f"**{r.verdict}**", r.planned_verdict, seeds_text(r), "; ".join(r.qualifiers) or "—"]
        lines.append("| " + " | ".join(cells) + " |")
    caption = "**Claims** — every verdict computed from `results/claims.yaml` by `make table` (docs/table.md)."
    return "\n".join([caption, "", *lines, "", LEGEND]) + "\n"


LEGEND = (
    "marks: better / worse / equiv. / not resolved, recomputed with Holm over the claim's own comparisons only "
    "(its family), at alpha 0.05; equivalence marks only in an equivalence claim. verdict: agrees when every "
    "comparison supports the hypothesis; disagrees when any contradicts it (a resolved difference the other way; "
    "for equivalence, a difference resolved beyond the margin); not tested when no comparison has an interval "
    "(fewer than 2 seeds, or rows missing); not resolved otherwise. An ordering is tested pair by adjacent pair. "
    "on planned seeds: the same verdict from the planned seeds alone. qualifiers: what the verdict does not show "
    "(seeds added after the plan, runs missing, past one epoch, rows not at their own tuned LR, the split, slow "
    "starts, divergence); they never change the verdict.")


CSV_COLUMNS = ["claim", "experiment", "read_at", "hypothesis", "statistic", "margin", "row", "baseline", "n",
               "delta", "ci_low", "ci_high", "ci90_low", "ci90_high", "ci_method", "p", "p_holm", "tost_p_holm",
               "beyond_p_holm", "mark", "outcome", "seeds_needed", "seed_deltas", "slow_start", "verdict",
               "verdict_planned", "seeds_planned", "seeds_present", "qualifiers"]


def claims_csv(results: list[Result]) -> str:
    """results/tables/claims.csv: one line per comparison (a claim without comparisons gets one empty line)."""
    records = []
    for r in results:
        claim = {"claim": r.claim.id, "experiment": r.claim.experiment, "read_at": read_at(r),
                 "hypothesis": r.claim.hypothesis, "statistic": r.claim.statistic, "margin": r.claim.margin,
                 "verdict": r.verdict, "verdict_planned": r.planned_verdict,
                 "seeds_planned": " ".join(map(str, r.claim.seeds)),
                 "seeds_present": " ".join(map(str, sorted(set().union(*r.present.values())))) if r.present else "",
                 "qualifiers": "; ".join(r.qualifiers)}
        for c in r.comparisons or [None]:
            records.append(claim | ({} if c is None else _comparison_record(c)))
    frame = pd.DataFrame(records, columns=CSV_COLUMNS)
    return frame.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def _comparison_record(c: Comparison) -> dict:
    iv, iv90 = c.interval, c.interval90
    return {"row": c.row, "baseline": c.baseline or "", "n": c.n, "delta": iv.delta, "ci_low": iv.low,
            "ci_high": iv.high, "ci90_low": iv90.low, "ci90_high": iv90.high, "ci_method": iv.method, "p": iv.p,
            "p_holm": c.p_holm, "tost_p_holm": c.tost_holm, "beyond_p_holm": c.beyond_holm, "mark": c.mark,
            "outcome": c.outcome, "seeds_needed": c.seeds_needed,
            "seed_deltas": " ".join(f"{s}:{d:+.4f}" for s, d in c.deltas.items()),
            "slow_start": "; ".join(f"{label} {' '.join(map(str, s))}" for label, s in c.slow.items() if s)}


def ladder_trends(results_dir) -> list[dict]:
    """Per ladder (results/tables/<exp>_fit.csv), variant and budget: the compute multiplier vs the baseline at the
    smallest and the largest size and its trend along the ladder, as `make table` computed them."""
    import pandas as pd

    found = []
    for path in sorted(Path(results_dir, "tables").glob("*_fit.csv")):
        fit = pd.read_csv(path)
        if "trend" not in fit:
            continue  # a ladder with too few sizes to fit: its file is one line
        for (variant, steps), rows in fit[~fit["baseline"].astype(bool)].groupby(["variant", "steps"], sort=False):
            first, last = rows.iloc[0], rows.iloc[-1]
            found.append({"experiment": path.stem.removesuffix("_fit"), "variant": variant, "steps": int(steps),
                          "baseline": fit.loc[fit["baseline"].astype(bool), "variant"].iloc[0],
                          "from": f"{first['size']}: {multiplier_cell(first)}",
                          "to": f"{last['size']}: {multiplier_cell(last)}",
                          "trend": str(last["trend"]),
                          "crossover": "none" if pd.isna(last["crossover"]) else
                          f"{last['crossover']:.2g} FLOPs ({last['crossover_where']} the data)"})
    return found


def ladder_markdown(trends: list[dict]) -> str:
    lines = ["| ladder | variant vs baseline | steps | multiplier, smallest size | multiplier, largest size | "
             "along the ladder | crossover |", "|:---|:---|---:|---:|---:|:---|:---|"]
    for t in trends:
        lines.append(f"| {t['experiment']} | {t['variant']} vs {t['baseline']} | {t['steps']} | {t['from']} | "
                     f"{t['to']} | **{t['trend']}** | {t['crossover']} |")
    return "\n".join(lines)


def readme_block(results: list[Result], trends: list[dict] = ()) -> str:
    """The README's headline: one line per claim, its verdict and what qualifies it; one per ladder trend."""
    lines = ["| claim | read at | verdict | qualified by |", "|:---|:---|:---|:---|"]
    for r in results:
        lines.append(f"| {r.claim.claim} | {read_at(r)} | **{r.verdict}** | {', '.join(r.tags) or '—'} |")
    for t in trends:
        if t["steps"] == max(u["steps"] for u in trends if u["experiment"] == t["experiment"]):
            lines.append(f"| compute multiplier of {t['variant']} over {t['baseline']} as the model grows | "
                         f"{t['experiment']}, train.steps={t['steps']} | **{t['trend']}** | size ladder fit |")
    return "\n".join([
        "Generated by `make report` from `results/claims.yaml` and the committed runs; each qualifier in full, the "
        "papers, every number and the figures are in [docs/results.md](docs/results.md).", "", *lines])


def results_page(results: list[Result], trends: list[dict] = ()) -> str:
    """docs/results.md's generated part: the claims table, per claim its family with every statistic, the ladders."""
    out = ["## Claims", "", claims_markdown(results)]
    for r in results:
        out += _claim_section(r)
    if trends:
        out += ["## Size ladders", "",
                "Compute multiplier m vs the baseline (> 1: the baseline needs m times the compute to match), with "
                "its 95% bootstrap interval over seeds, at the smallest and the largest size of each ladder; its "
                "trend along the ladder and the crossover, as the ladder's fit table computes them "
                "([table.md](table.md#ladders)).", "", ladder_markdown(trends), ""]
        out += [f"- `{exp}`: [fit table](../results/tables/{exp}_fit.md), "
                f"[figure](../results/figures/{exp}_ladder.png)" for exp in sorted({t["experiment"] for t in trends})]
        out += [""]
    experiments = sorted({r.claim.experiment for r in results})
    out += ["## Tables and figures", ""]
    out += [f"- `{exp}`: [table](../results/tables/{exp}.md), [forest plot](../results/figures/{exp}_forest.png)"
            for exp in experiments]
    return "\n".join(out).rstrip() + "\n"


def _claim_section(r: Result) -> list[str]:
    claim = r.claim
    conditions = [f"at most {claim.max_epochs:g} epoch(s)"] if claim.max_epochs is not None else []
    conditions += ["each row at its own tuned learning rate"] if claim.own_lr else []
    lines = [f"### {claim.claim} — `{claim.id}`", "",
             f"- paper: {claim.paper}" + (f" — {claim.paper_numbers}" if claim.paper_numbers else ""),
             f"- read at: {read_at(r)}; hypothesis: {hypothesis(r)}; Holm family: {len(claim.pairs)} "
             f"comparison{'s' if len(claim.pairs) > 1 else ''}",
             f"- conditions: {', '.join(conditions) or 'none'}; seeds planned / present: {seeds_text(r)}"]
    lines += [f"- note: {claim.note}"] if claim.note else []
    lines += [f"- **verdict: {r.verdict}** (on the planned seeds alone: {r.planned_verdict})",
              f"- qualifiers: {'; '.join(r.qualifiers) or 'none'}", ""]
    if not r.comparisons:
        return lines
    equivalence = claim.hypothesis == "equivalent"
    head = ["comparison", "n", "Δ (95% CI)", "90% CI", "p (Holm, family)"]
    head += ["TOST p (Holm)", f"beyond ±{claim.margin:g} p (Holm)"] if equivalence else []
    head += ["mark", "says", "seeds needed", "per-seed Δ"]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
    for c in r.comparisons:
        iv = c.interval
        cells = [name(r, c), str(c.n), f"{fmt(iv.delta, '+.4f')} {_interval(iv.low, iv.high)}".strip(),
                 _interval(c.interval90.low, c.interval90.high), fmt(c.p_holm, ".3f")]
        cells += [fmt(c.tost_holm, ".3f"), fmt(c.beyond_holm, ".3f")] if equivalence else []
        deltas = " ".join(f"{s}: {d:+.3f}" + ("*" if s in c.slow.get(c.row, []) + c.slow.get(c.baseline, [])
                                              else "") for s, d in c.deltas.items())
        cells += [c.mark, c.outcome, _seeds_needed(c.seeds_needed), deltas or "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def splice(text: str, begin: str, end: str, block: str) -> str:
    """`text` with everything between the markers replaced by `block`; ValueError when the markers are missing."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"markers {begin} ... {end} not found")
    return text[:start + len(begin)] + "\n" + block.rstrip("\n") + "\n" + text[stop:]


def generate(results_dir, claims_path) -> list[Result]:
    from mbexp.analysis.table import build_tables

    return evaluate(load_claims(claims_path), build_tables(results_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--claims", type=Path, help="claims file (default: RESULTS/claims.yaml)")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"))
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed text differs; write nothing")
    args = parser.parse_args(argv)
    try:
        results = generate(args.results, args.claims or args.results / "claims.yaml")
        trends = ladder_trends(args.results)
        texts = {path: splice(path.read_text(encoding="utf-8"), begin, end, block) for path, begin, end, block in
                 ((args.readme, CLAIMS_BEGIN, CLAIMS_END, readme_block(results, trends)),
                  (args.page, RESULTS_BEGIN, RESULTS_END, results_page(results, trends)))}
    except (ClaimsError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = [path for path, text in texts.items() if path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path} differs from what `make report` writes", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(texts[path], encoding="utf-8")
    print(f"wrote {', '.join(map(str, stale)) or 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
