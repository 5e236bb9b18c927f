"""Claims as data (docs/claims.md): a paper's statement declared in the claims file, its digest, and its verdict
computed from the runs.

    file.py        the claims file read defensively: a regular UTF-8 file, YAML without aliases
    vocabulary.py  the words: marks, outcomes, verdicts, standings, hypotheses, margins, qualifier tags
    claim.py       Claim and its digest
    parse.py       the claims file -> Claims, validated; what a run records at launch (`covering`)
    statistics.py  one class per statistic (STATISTICS): how a claim declares it, what it reads, how it tests
    result.py      what a test yields: Comparison, Result
    rules.py       mark -> outcome -> verdict, and the rules behind the qualifiers
    family.py      a claim tested as a Holm family of paired comparisons, its qualifiers
    ladder.py      a ladder claim's trend over model size
    provenance.py  the provenance rule -> standing
    evaluate.py    every declared claim's Result

Reading a claims file loads neither torch nor pandas (the trainer reads it at launch); testing a claim does.
"""


class ClaimsError(ValueError):
    """A claims file (or a study declared in it) that does not validate: one line naming the file and the entry."""
