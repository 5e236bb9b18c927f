"""docs/claims-example.md's worked example, computed from a fixed fixture: made-up runs of three small studies and
the claims declared on them. `make report` (scripts/make_report.py) writes it (example_block) between
EXAMPLE_BEGIN/EXAMPLE_END; tests check its numbers. A docs fixture, kept out of the package."""

import pandas as pd

from mbexp.analysis.collect import NUMBERS, RUN_COLUMNS, config_key
from mbexp.analysis.report import claim_section, claims_display, markdown_rows, standing_line
from mbexp.analysis.table import tables_for
from mbexp.claims.evaluate import evaluate
from mbexp.claims.parse import load_claims_text
from mbexp.claims.result import Result

EXAMPLE_BEGIN, EXAMPLE_END = "<!-- example:begin -->", "<!-- example:end -->"
CLAIMS = """\
margin: 0.02
claims:
  - id: geglu-planned      # unresolved on the planned seeds; seeds 3-6 were added after looking
    claim: GEGLU beats ReLU
    paper: example
    experiment: ffn_example
    baseline: layer-pre-relu-matched
    rows: [layer-pre-geglu-matched]
    hypothesis: better
    seeds: [0, 1, 2]
    conditions: {own_lr: true, max_epochs: 1}
  - id: geglu-edited       # its runs were launched under margin 0.05
    claim: GEGLU matches ReLU
    paper: example
    experiment: ffn_example
    baseline: layer-pre-relu-matched
    rows: [layer-pre-geglu-matched]
    hypothesis: equivalent
    seeds: [0, 1, 2]
    conditions: {own_lr: true, max_epochs: 1}
  - id: post-needs-warmup-more
    claim: Post-LN needs warm-up more than Pre-LN
    paper: example
    experiment: warmup_example
    pairs: [[layer-post-relu-matched, layer-pre-relu-matched]]
    statistic: sensitivity_diff
    hypothesis: worse
    seeds: [0, 1, 2]
  - id: pre-needs-warmup
    claim: Pre-LN needs warm-up
    paper: example
    experiment: warmup_example
    rows: [layer-pre-relu-matched]
    statistic: sensitivity
    hypothesis: worse
    seeds: [0, 1, 2]
  - id: swiglu-one-lr      # declared after its runs, on one learning rate
    claim: SwiGLU beats ReLU, each at its own tuned LR
    paper: example
    experiment: lr_example
    baseline: layer-pre-relu-matched
    rows: [layer-pre-swiglu-matched]
    hypothesis: better
    seeds: [0, 1, 2]
    conditions: {own_lr: true, max_epochs: 1}
"""
DECLARED, LAUNCHED = "d" * 40, "e" * 40  # the fixture's commits: the claims file's, then the runs' (a descendant)


class FixtureHistory:
    """The git history the fixture's runs come from, as mbexp.claims.provenance.History answers it: every claim
    declared at DECLARED, every run launched cleanly at LAUNCHED, which descends from it."""

    top = "fixture"

    def declared(self, claim) -> str:
        return DECLARED

    def known(self, commit: str) -> bool:
        return commit in (DECLARED, LAUNCHED)

    def descends(self, commit: str, ancestor: str = "HEAD") -> bool:
        return (commit, ancestor) in ((LAUNCHED, DECLARED), (DECLARED, DECLARED), (LAUNCHED, LAUNCHED))


# per-seed Δ (row minus baseline, nats) of each fixture study
GEGLU = [-0.02, -0.25, -0.06, -0.11, -0.12, -0.10, -0.12]  # seeds 0-2 planned, 3-6 added
SENSITIVITY = {"post": [0.40, 0.35, 0.45], "pre": [0.03, 0.02, 0.04]}  # warm-up 0 minus warm-up 100, per seed
SWIGLU = [-0.05, -0.06, -0.04]


def _run(experiment: str, ffn: str, seed: int, loss: float, *, norm="layer", placement="pre", lr=0.003,
         warmup=30, declarations=None) -> dict:
    identity = {"norm.name": norm, "placement.name": placement, "ffn.name": ffn, "hidden.name": "matched",
                "optim.lr": lr, "optim.warmup_steps": warmup}
    row = f"{norm}-{placement}-{ffn}-matched"
    return {"path": f"{experiment}/{row}-lr{lr}-wu{warmup}/seed={seed}", "status": "completed",
            "experiment": experiment, "variant": f"{row}-lr{lr}-wu{warmup}", "row": row, "row_id": row, "seed": seed,
            "norm": norm, "placement": placement, "ffn": ffn, "hidden": "matched", "warmup_steps": warmup,
            "params": 10**6, "d_ff": 512, "early_val_loss": loss + 1, "final_val_loss": loss, "final_val_bpb": loss / 3,
            "final_test_loss": loss, "final_test_bpb": loss / 3, "tokens_per_s": 1e4, "step": 300, "steps": 300,
            "epochs": 0.1, "identity": identity, "config": config_key(identity), "declarations": declarations or {},
            "git_commit": LAUNCHED, "git_clean": True, "git_resumed": []}


def fixture() -> tuple[list, pd.DataFrame]:
    """The declared claims and the runs: ffn_example's under each claim's digest, except geglu-edited's (launched
    under margin 0.05); warmup_example's under both digests; lr_example's before any declaration."""
    claims = load_claims_text(CLAIMS)
    digest = {c.id: c.digest for c in claims}
    edited = load_claims_text(CLAIMS.replace("    hypothesis: equivalent\n", "    hypothesis: equivalent\n"
                                             "    margin: 0.05\n"))
    ffn = {"geglu-planned": digest["geglu-planned"], "geglu-edited": edited[1].digest}
    warm = {k: digest[k] for k in ("post-needs-warmup-more", "pre-needs-warmup")}
    runs = []
    for seed, delta in enumerate(GEGLU):
        base = 5.0 + 0.01 * seed
        for lr, worse in ((0.003, 0.0), (0.01, 0.1)):  # two learning rates per row: 0.003 chosen on validation
            runs += [_run("ffn_example", "relu", seed, base + worse, lr=lr, declarations=ffn),
                     _run("ffn_example", "geglu", seed, base + delta + worse, lr=lr, declarations=ffn)]
    for seed in range(3):
        base = 5.0 + 0.01 * seed
        for placement, sens in SENSITIVITY.items():  # warm-up 100 is best: the largest tried
            for warmup, loss in ((0, base + sens[seed]), (25, base + sens[seed] / 2), (100, base)):
                runs.append(_run("warmup_example", "relu", seed, loss, placement=placement, warmup=warmup,
                                 declarations=warm))
        runs += [_run("lr_example", "relu", seed, base), _run("lr_example", "swiglu", seed, base + SWIGLU[seed])]
    frame = pd.DataFrame(runs, columns=RUN_COLUMNS)
    frame[list(NUMBERS)] = frame[list(NUMBERS)].apply(pd.to_numeric).astype(float)
    return claims, frame


def results() -> list[Result]:
    claims, runs = fixture()
    return evaluate(claims, tables_for(runs), FixtureHistory())


def example_block() -> str:
    """docs/claims-example.md: the fixture's claims file, its claims table and each claim's numbers."""
    found = results()
    out = ["Generated by `make report` from the fixture in `scripts/worked_example.py` (tests check its numbers).",
           "", "```yaml", CLAIMS.rstrip(), "```", "", standing_line(found), "",
           *markdown_rows(claims_display(found).drop(columns=["paper"])), ""]
    out += [line.replace("### ", "## ", 1) for r in found for line in claim_section(r)]
    return "\n".join(out).rstrip() + "\n"
