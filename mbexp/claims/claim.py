"""A declared claim (one entry of the claims file, mbexp.claims.parse) and its digest: what a run records at launch,
so that a verdict can tell the runs launched under the claim as it now reads (mbexp.claims.provenance)."""

import hashlib
import json
from dataclasses import dataclass, field

from mbexp.claims.vocabulary import DEFAULT_MARGIN


@dataclass(frozen=True)
class Claim:
    """One declared claim: what a paper says, where we test it, and how (see results/claims.yaml)."""

    id: str
    claim: str
    paper: str
    paper_numbers: str
    experiment: str
    hypothesis: str
    pairs: tuple  # (row, baseline) per comparison: the claim's Holm family; baseline None for a sensitivity
    seeds: tuple  # the seeds planned before the runs
    at: tuple = ()  # ((column key, value),) or () when the experiment has no column axis
    statistic: str = "delta"  # its name in mbexp.claims.statistics.STATISTICS
    margin: float = DEFAULT_MARGIN
    own_lr: bool = False  # the claim needs every row at its own tuned learning rate
    max_epochs: float | None = 1.0  # the claim needs runs within this many epochs of the training split
    note: str = ""
    study: str = ""
    protocol: dict = field(default_factory=dict, compare=False)  # the study's declared protocol
    replicates: str = ""  # the id of the claim this one repeats on new seeds: read pooled with it (replication)
    digest: str = ""


def digest(content: dict) -> str:
    """Short sha256 of the canonical JSON of a claim's declared content."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]
