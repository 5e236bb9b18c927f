"""The provenance rule (docs/claims.md#declarations-confirmatory-or-exploratory): a run read by a claim counts
as launched under it only when it recorded the claim's current digest, ran from a clean tree, at a commit in the
history of the repository that holds the claims file, descending from the commit that declared the claim as it
now reads; a verdict is confirmatory when every run it reads was (`standing`). Git answers the history questions;
each answer is asked once."""

import subprocess
from pathlib import Path

import pandas as pd
import yaml

from mbexp import CONF_DIR
from mbexp.claims import ClaimsError
from mbexp.claims.claim import Claim
from mbexp.claims.parse import parse_claims
from mbexp.claims.vocabulary import CONFIRMATORY, EXPLORATORY
from mbexp.io import read_yaml

CONF_EXPERIMENTS = f"{CONF_DIR.name}/experiment"  # an experiment's config file, from the repository's top


def _git(top: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(top), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


class History:
    """The git history of the repository holding a claims file: which commits it has, which descends from which,
    and which commit declared each claim as it now reads."""

    def __init__(self, claims_file: Path):
        self.file = Path(claims_file).resolve()
        out = _git(self.file.parent, "rev-parse", "--show-toplevel")
        self.top = Path(out.stdout.strip()) if out and out.returncode == 0 else None
        self.rel = self.file.relative_to(self.top).as_posix() if self.top else ""
        tracked = self.top and _git(self.top, "ls-files", "--error-unmatch", self.rel)
        if not tracked or tracked.returncode != 0:
            self.top = None  # a claims file git does not track has no declaring commit
        self._memo: dict = {}

    def _once(self, key: tuple, compute):
        """compute() the first time `key` is asked, the same answer after: git's history does not change here."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def descends(self, commit: str, ancestor: str = "HEAD") -> bool:
        """Whether `ancestor` is `commit` or one of its ancestors (both known to this repository)."""
        out = self._once(("descends", commit, ancestor),
                         lambda: _git(self.top, "merge-base", "--is-ancestor", ancestor, commit))
        return bool(out) and out.returncode == 0

    def known(self, commit: str) -> bool:
        """Whether `commit` is in the history of the checked-out branch."""
        return self.descends("HEAD", commit)

    def _show(self, commit: str, path: str) -> str | None:
        out = self._once(("show", commit, path), lambda: _git(self.top, "show", f"{commit}:{path}"))
        return out.stdout if out and out.returncode == 0 else None

    def _digests(self, commit: str) -> dict:
        """claim id -> digest as the claims file and the experiment configs read at `commit` ({} if unreadable)."""
        return self._once(("digests", commit), lambda: self._read_digests(commit))

    def _read_digests(self, commit: str) -> dict:
        text = self._show(commit, self.rel)

        def configs(experiment: str):
            found = self._show(commit, f"{CONF_EXPERIMENTS}/{experiment}.yaml")
            return None if found is None else read_yaml(found)

        try:
            return {c.id: c.digest for c in parse_claims(read_yaml(text or ""), "history", configs)}
        except (ClaimsError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
            return {}  # a file an older parser wrote differently: no digest of today's form

    def _changes(self, experiment: str) -> tuple:
        """The commits, newest first, that touched the claims file or the experiment's config."""
        out = self._once(("log", experiment), lambda: _git(
            self.top, "log", "--format=%H", "--", self.rel, f"{CONF_EXPERIMENTS}/{experiment}.yaml"))
        return tuple(out.stdout.split()) if out and out.returncode == 0 else ()

    def declared(self, claim: Claim) -> str | None:
        """The commit from which the claim has read as it does now (None: not committed as it now reads)."""
        if self.top is None or self._digests("HEAD").get(claim.id) != claim.digest:
            return None
        found = None
        for commit in self._changes(claim.experiment):
            if self._digests(commit).get(claim.id) != claim.digest:
                break
            found = commit
        return found


def problem(run: dict, claim: Claim, history: History | None, declared: str | None) -> str | None:
    """Why a run read by `claim` does not count as launched under it (None: it does). `run` holds the summary's
    declarations, git_commit, git_clean and git_resumed."""
    if (run.get("declarations") or {}).get(claim.id) != claim.digest:
        return "not launched under this declaration"
    if history is None or history.top is None:
        return "the claims file is not tracked by git, so no commit declared it"
    if declared is None:
        return "its current declaration is not committed"
    if run.get("git_clean") is not True:
        return "not launched from a clean tree"
    for commit in (run.get("git_commit"), *(run.get("git_resumed") or ())):
        if not isinstance(commit, str) or not history.known(commit):
            return f"its commit {str(commit)[:10]} is not in this repository's history"
        if not history.descends(commit, declared):
            return f"its commit {commit[:10]} does not descend from the declaring commit {declared[:10]}"
    return None


def orphans(runs, claims: list[Claim]) -> dict[str, int]:
    """claim id -> how many runs recorded a digest of it at launch, for ids no longer declared (a claim deleted or
    renamed after its runs: `make table` lists them, so no claim disappears without a trace)."""
    declared, found = {c.id for c in claims}, {}
    for recorded in runs["declarations"] if len(runs) else ():
        for claim_id in set(recorded or {}) - declared:
            found[claim_id] = found.get(claim_id, 0) + 1
    return dict(sorted(found.items()))


def standing(claim: Claim, read: pd.DataFrame, texts: list[str], history: History | None = None,
             scan: pd.DataFrame | None = None) -> tuple[str, int, int]:
    """(standing, runs launched under the declaration, runs read): confirmatory when every run read, the scan's
    runs of the rows read included, was by the provenance rule; else exploratory, with a line added to `texts`
    saying how many were not and why."""
    if scan is not None and len(read):
        read = pd.concat([read, scan[scan["label"].isin(set(read["label"]))]])
    declared = history.declared(claim) if history is not None and history.top is not None else None
    problems = [problem(run, claim, history, declared) for run in read.to_dict("records")]
    launched = sum(p is None for p in problems)
    if len(read) and launched == len(read):
        return CONFIRMATORY, launched, len(read)
    reasons = sorted({p for p in problems if p}, key=lambda p: -problems.count(p))
    why = f" ({'; '.join(reasons[:2])}{'; ...' if len(reasons) > 2 else ''})" if reasons else ""
    texts.append(f"exploratory: {len(read) - launched} of {len(read)} runs read were not launched under this "
                 f"declaration{why}")
    return EXPLORATORY, launched, len(read)
