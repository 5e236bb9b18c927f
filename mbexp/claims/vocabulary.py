"""The one vocabulary of the tables and claims (docs/claims.md#marks-outcomes-and-the-verdict): a comparison's
mark (a claim's without an interval: fewer than 2 seeds), what it says for the hypothesis (its outcome), the
claim's verdict and whether that verdict is confirmatory (its standing); the margin; the qualifiers' short tags."""

from mbexp.claims.file import finite_number

MARKS = BETTER, WORSE, EQUIVALENT, UNRESOLVED, NO_INTERVAL = ("better", "worse", "equivalent", "not resolved",
                                                              "not tested")
BASELINE = "baseline"  # the mark of a table's baseline row
OUTCOMES = SUPPORTS, CONTRADICTS, OPEN, UNTESTED = ("supports", "contradicts", "open", "untested")
VERDICTS = AGREES, DISAGREES, NOT_RESOLVED, NOT_TESTED, NOT_AS_DECLARED = (
    "agrees", "disagrees", "not resolved", "not tested", "not tested as declared")
STANDINGS = CONFIRMATORY, EXPLORATORY = ("confirmatory", "exploratory")
HYPOTHESES = (BETTER, WORSE, EQUIVALENT, "ordering")

DEFAULT_MARGIN = 0.02
MARGIN_RULE = "a positive, finite number of nats"  # every margin: claims file, claim, make table --margin

# the README's qualifier tags that claims and ladder claims share
RUNS_MISSING, NOT_OWN_LR = "runs missing", "LR not tuned per row"
LR_EDGE, SLOW_STARTS = "LR at grid edge", "slow starts"


def valid_margin(value) -> bool:
    return finite_number(value) and value > 0
