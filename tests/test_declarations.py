"""Declared claims: the digests a run records at launch, confirmatory vs exploratory verdicts on real runs, and the
claims file's validation (one line naming the file and the claim)."""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from tiny import REPO, SMOKE, clean, make_table_here, mbexp_train, overrides

from mbexp.claims import ClaimsError, parse
from mbexp.config import compose_config, to_object
from mbexp.distributed import Dist
from mbexp.run.identity import config_hash, run_dir
from mbexp.run.state import RunState
from mbexp.trainer import train

RELU, SWIGLU = "layer-pre-relu-matched", "layer-pre-swiglu-matched"
CLAIM = ("claims:\n  - {{id: glu, claim: {words}, paper: Shazeer 2020, experiment: decl, hypothesis: {hypothesis},\n"
         "     baseline: {relu}, rows: [{swiglu}], seeds: [0, 1]}}\n")


def declare(results, words="SwiGLU beats ReLU", hypothesis="better") -> None:
    results.mkdir(parents=True, exist_ok=True)
    text = CLAIM.format(words=words, hypothesis=hypothesis, relu=RELU, swiglu=SWIGLU)
    (results / "claims.yaml").write_text(text, encoding="utf-8")


def launch(tmp, cache) -> list[dict]:
    """The claim's planned runs, trained for real: two rows, two seeds, ten steps each."""
    return [train(compose_config(clean(overrides(tmp, cache, f"ffn={ffn}", f"seed={seed}", "name=decl",
                                                 "train.steps=10"))))
            for ffn in ("relu", "swiglu") for seed in (0, 1)]


def standing(results) -> list[str]:
    """`make table` (its main, in this process) on the results, then claims.csv's confirmatory/exploratory column."""
    done = make_table_here(results, "--no-wandb")
    assert done.returncode == 0, done.stderr
    return pd.read_csv(results / "tables" / "claims.csv")["standing"].tolist()


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo, *args) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                         env={**os.environ, **GIT_ENV})
    return out.stdout.strip()


def checkout(tmp) -> Path:
    """A repository of this code alone (no runs): what a user clones, so runs launched from it record its commits."""
    repo = tmp / "repo"
    for part in ("mbexp", "conf", "scripts"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "code")
    return repo


def launch_from(repo, cache) -> None:
    """The claim's planned runs, launched from the checkout as a user types it: two rows, two seeds, ten steps."""
    out = subprocess.run([sys.executable, "-m", "mbexp.train", "-m", *SMOKE, "ffn=relu,swiglu", "seed=0,1",
                          "name=decl", "train.steps=10", "results_dir=results", f"data.cache_dir={cache}",
                          "logger=none"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.slow
def test_confirmatory_needs_a_clean_launch_after_the_committed_declaration(tmp_path, cache, one_thread):
    repo = checkout(tmp_path)
    results = repo / "results"
    declare(results)
    git(repo, "add", "results/claims.yaml")
    git(repo, "commit", "-q", "-m", "declare")
    launch_from(repo, cache)
    summaries = [json.loads(p.read_text()) for p in sorted(results.glob("runs/decl/*/seed=*/summary.json"))]
    assert len(summaries) == 4 and {s["git_commit"] for s in summaries} == {git(repo, "rev-parse", "HEAD")}
    assert all(s["git_clean"] is True and s["declarations"] == parse.covering(results, "decl")
               for s in summaries)
    assert standing(results) == ["confirmatory"]
    from mbexp.analysis import readme, table
    from mbexp.claims.evaluate import evaluate_file

    block = readme.readme_block(evaluate_file(results, table.build_tables(results)))
    assert "the 1 confirmatory verdicts: every run each reads was launched under its claim's current declaration " \
        "([rules]" in block  # and no count of exploratory ones, there being none
    declare(results, words="SwiGLU beats ReLU (reworded)")  # prose is not part of the digest
    assert standing(results) == ["confirmatory"]
    declare(results, hypothesis="worse")  # the test changed after the runs, not yet committed
    assert standing(results) == ["exploratory"]
    csv = pd.read_csv(results / "tables" / "claims.csv")
    assert csv["runs_read"].tolist() == [4] and csv["runs_declared"].tolist() == [0]
    # the forgery: the edit committed, and every summary's digest rewritten in place to the new one
    git(repo, "add", "results/claims.yaml")
    git(repo, "commit", "-q", "-m", "edit the claim after its runs")
    new = parse.covering(results, "decl")
    for path in results.glob("runs/decl/*/seed=*/summary.json"):
        path.write_text(json.dumps(json.loads(path.read_text()) | {"declarations": new}))
    assert standing(results) == ["exploratory"]
    why = pd.read_csv(results / "tables" / "claims.csv")["qualifiers"].iloc[0]
    assert "does not descend from the declaring commit" in why
    # the same runs launched cleanly after the edit are confirmatory again
    subprocess.run(["rm", "-rf", str(results / "runs")], check=True)
    launch_from(repo, cache)
    assert standing(results) == ["confirmatory"]


@pytest.mark.slow
def test_runs_launched_before_the_declaration_are_exploratory(tmp_path, cache, one_thread):
    results = tmp_path / "results"
    assert [s["declarations"] for s in launch(tmp_path, cache)] == [{}] * 4
    declare(results)
    assert standing(results) == ["exploratory"]


def test_a_resumed_run_keeps_the_declarations_of_its_launch(tmp_path, cache):
    declare(tmp_path / "results")
    cfg = to_object(compose_config(clean(overrides(tmp_path, cache, "name=decl"))))
    run = RunState(cfg, run_dir(cfg), config_hash(cfg), Dist())
    assert run.declarations == parse.covering(tmp_path / "results", "decl") != {}
    state = {"step": 5, "metrics": [], "train_time": 1.0, "wall_time": 1.0, "wandb_id": "w", "early": {},
             "loss_sum": 0.0, "n_losses": 0, "declarations": {"glu": "launchdigest"}}
    run.restore(state)
    assert run.declarations == {"glu": "launchdigest"}
    run.restore({k: v for k, v in state.items() if k != "declarations"})  # a checkpoint from before declarations
    assert run.declarations == {}


def test_digest_covers_the_test_not_the_prose(tmp_path):
    entry = {"id": "a", "claim": "x", "paper": "p", "experiment": "e", "hypothesis": "better", "baseline": "b",
             "rows": ["r"], "seeds": [0, 1, 2]}
    base = parse.parse_claim(entry, 0.02, "t").digest
    assert parse.parse_claim(entry | {"claim": "y", "note": "n"}, 0.02, "t").digest == base
    assert parse.parse_claim(entry | {"conditions": {"max_epochs": 1}}, 0.02, "t").digest == base  # default
    for change in ({"seeds": [0, 1]}, {"margin": 0.03}, {"rows": ["s"]}, {"at": {"train.steps": 300}},
                   {"conditions": {"own_lr": True}}, {"hypothesis": "worse"}):
        assert parse.parse_claim(entry | change, 0.02, "t").digest != base, change
    assert parse.parse_claim(entry, 0.05, "t").digest != base  # the file's default margin decides it too
    # the experiment's config file as parsed: its LR, steps or sweep edited after the runs changes the digest
    lr = {lr: parse.parse_claim(entry, 0.02, "t", None, lambda e, lr=lr: {"optim": {"lr": lr}}).digest
          for lr in (1e-3, 2e-3)}
    assert len({base, *lr.values()}) == 3
    studies = {"s": {"experiment": "e", "lr_grid": [0.001, 0.003], "seeds": [0, 1, 2]}}
    with_study = parse.parse_claim(entry | {"study": "s"}, 0.02, "t", studies).digest
    studies["s"]["lr_grid"] = [0.001]
    assert parse.parse_claim(entry | {"study": "s"}, 0.02, "t", studies).digest not in (base, with_study)


BAD = {  # what the claims file holds -> what the one error line must say
    "margin: -1\nclaims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], "
    "seeds: [0]}]\n": "margin must be a positive, finite number of nats, got -1",
    "claims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "margin: .nan}]\n": "claim 0 (a): margin must be a positive, finite number of nats, got nan",
    "claims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, pairs: [[a]], seeds: [0]}]\n":
        "claim 0 (a): pairs must be a list of [row, baseline] label pairs, got [['a']]",
    "claims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "colour: red}]\n": "claim 0 (a): unknown keys ['colour']",
    "claims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "study: s}]\n": "claim 0 (a): study 's' is not a study of e declared under `studies`",
    "claims:\n- {id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "conditions: {own_lr: true}}\n- {id: b, claim: x, paper: p, experiment: e, hypothesis: worse, baseline: b, "
    "rows: [r], seeds: [0], conditions: {own_lr: false}}\n":
        "claims on the same runs (e) declare different conditions (a: own_lr true, max_epochs 1.0; b: own_lr false",
    "claims:\n- {id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "conditions: {own_lr: true}}\n- {id: b, claim: x, paper: p, experiment: e, hypothesis: worse, baseline: b, "
    "rows: [r], seeds: [0], at: {train.steps: 300}, conditions: {own_lr: false}}\n":  # no column: it may be 300
        "claims on the same runs (e, train.steps=300) declare different conditions (a: own_lr true, max_epochs 1.0; "
        "b: own_lr false",
    "claims:\n- {id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
    "at: {train.steps: 300}, conditions: {own_lr: false}}\n- {id: b, claim: x, paper: p, experiment: e, "
    "hypothesis: worse, baseline: b, rows: [r], seeds: [0], conditions: {own_lr: true}}\n":  # the same, in turn
        "claims on the same runs (e, train.steps=300) declare different conditions (a: own_lr false, max_epochs 1.0; "
        "b: own_lr true",
    "claims: [{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [-1, 0]}]"
    "\n": "claim 0 (a): seeds must be a non-empty list of distinct integers in [0, 2**32), got [-1, 0]",
    **{f"claims: [{{id: a, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
       f"study: s, at: {{train.steps: {steps}}}}}]\nstudies: {{s: {{experiment: e, rows: {{ffn: [relu]}}, "
       "lr_grid: [0.001, 0.01], scan_seeds: [9], seeds: [0], budgets: [8, 16]}}\n":
       f"claim 0 (a): at train.steps={shown} is not one of study s's budgets [8, 16]"
       for steps, shown in (("999", "999"), ("true", "True"), ("16.0", "16.0"))},
}


@pytest.mark.parametrize("text", BAD)
def test_a_bad_claims_file_is_one_line_naming_the_file_and_the_claim(tmp_path, text):
    path = tmp_path / "claims.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ClaimsError) as err:
        parse.load_claims(path)
    assert str(err.value).startswith(f"claims file {path}") and BAD[text] in str(err.value)
    assert "\n" not in str(err.value)


def test_claims_on_different_columns_may_declare_different_conditions(tmp_path):
    """Two budgets are two sets of runs: only claims that can read the same runs must agree."""
    path = tmp_path / "claims.yaml"
    path.write_text("claims:\n" + "".join(
        f"- {{id: {i}, claim: x, paper: p, experiment: e, hypothesis: better, baseline: b, rows: [r], seeds: [0], "
        f"at: {{train.steps: {steps}}}, conditions: {{own_lr: {own}}}}}\n"
        for i, steps, own in (("a", 300, "true"), ("b", 600, "false"))), encoding="utf-8")
    assert [c.own_lr for c in parse.load_claims(path)] == [True, False]


def test_a_latin1_byte_is_named_with_its_line_and_claim(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_bytes(b"claims:\n  - id: first\n    claim: ok\n  - id: second\n    claim: caf\xe9\n")
    with pytest.raises(ClaimsError, match=r"byte 0xe9 on line 5 \(claim second\) is not UTF-8"):
        parse.load_claims(path)


def test_a_broken_claims_file_warns_at_launch_and_records_nothing(tmp_path, caplog):
    (tmp_path / "claims.yaml").write_text("claims: [{id: a}]\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert parse.covering(tmp_path, "e") == {}
    assert "missing keys" in caplog.text and "exploratory" in caplog.text
    assert parse.covering(tmp_path / "none", "e") == {}  # no claims file: nothing declared


@pytest.mark.parametrize("tool", ["make_table", "report", "train"])
def test_tools_refuse_a_bad_claims_file_with_exit_2(tmp_path, tool):
    results = tmp_path / "results"
    results.mkdir()
    (results / "claims.yaml").write_text("margin: -1\nclaims: [{id: a}]\n", encoding="utf-8")
    if tool == "train":
        done = mbexp_train([f"results_dir={results}", "+experiment=smoke", "logger=none"], timeout=120)
    else:
        script = [str(REPO / "scripts" / "make_table.py"), "--no-wandb"] if tool == "make_table" else \
            ["scripts/make_report.py", "--check"]
        done = subprocess.run([sys.executable, *script, "--results", str(results)], capture_output=True, text=True,
                              cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: claims file {results / 'claims.yaml'}: margin must be")
    assert "Traceback" not in done.stderr and sorted(p.name for p in results.iterdir()) == ["claims.yaml"]


def test_tokens_per_s_median_is_a_true_median(tmp_path, cache):
    cfg = to_object(compose_config(clean(overrides(tmp_path, cache))))
    run = RunState(cfg, tmp_path, config_hash(cfg), Dist())
    run.records = [{"step": i, "train_loss": 5.0, "tokens_per_s": r} for i, r in enumerate([1.0, 10.0, 3.0, 2.0])]
    assert run.write_summary("running")["tokens_per_s_median"] == 2.5  # not the upper median, 3.0


def test_the_documented_claims_file_is_one_the_loader_accepts():
    # docs/claims.md#the-claims-file: the example a user copies must load as written
    doc = (REPO / "docs" / "claims.md").read_text(encoding="utf-8")
    text = doc.split("## The claims file\n\n```yaml\n", 1)[1].split("```", 1)[0]
    claim, = parse.load_claims_text(text)
    assert claim.id == "shazeer-gelu-swish-2000" and claim.study == "ffn-grid" and claim.protocol["rows"] == {
        "ffn": ["relu", "gelu", "swish"]}


def test_a_claims_file_that_is_a_folder_stops_a_run_before_any_job(tmp_path):
    (tmp_path / "claims.yaml").mkdir()
    with pytest.raises(ClaimsError, match="claims.yaml: Is a directory"):
        parse.check(tmp_path)
    parse.check(tmp_path / "elsewhere")  # no claims file: nothing to check


def test_a_broken_link_as_the_claims_file_is_refused_by_every_reader(tmp_path):
    from mbexp.claims.evaluate import evaluate_file
    from mbexp.study import protocol
    from mbexp.study.spec import load_studies

    (tmp_path / "claims.yaml").symlink_to(tmp_path / "gone.yaml")
    readers = (parse.check, load_studies, lambda d: evaluate_file(d, {}),
               lambda d: protocol.load_study(d, "any"))
    for read in readers:
        with pytest.raises(ClaimsError, match="claims.yaml: No such file"):
            read(tmp_path)


def test_a_claims_digest_does_not_depend_on_the_order_of_its_seeds():
    text = CLAIM.format(words="SwiGLU beats ReLU", hypothesis="better", relu=RELU, swiglu=SWIGLU)
    (ordered,), (reversed_,) = (parse.load_claims_text(t) for t in (text, text.replace("[0, 1]", "[1, 0]")))
    assert ordered.digest == reversed_.digest


def test_exactly_the_declared_epochs_meets_the_condition():
    from types import SimpleNamespace

    from mbexp.claims.rules import past_epochs

    one = SimpleNamespace(max_epochs=1)
    assert past_epochs(one, 1.0) is None and past_epochs(one, 1.01)[1] == "past 1 epoch (1.01 epochs)"


def test_tokens_per_s_counts_the_timed_steps_only(tmp_path, cache):
    # a process's first step compiles or warms up: it is left out of the steps and the time tokens/s divides
    cfg = to_object(compose_config(clean(overrides(tmp_path, cache))))
    run = RunState(cfg, tmp_path, config_hash(cfg), Dist())
    run.step, run.timed_steps, run.train_time = 10, 9, 3.0
    per_step = cfg.train.batch_size * cfg.model.seq_len
    assert run.write_summary("running")["tokens_per_s"] == pytest.approx(round(9 * per_step / 3.0, 1))


def test_the_provenance_rule_names_why_a_run_does_not_count(tmp_path):
    from mbexp.claims.provenance import History, problem, standing

    repo = tmp_path / "repo"
    declare(repo / "results")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "declare")
    declared_at = git(repo, "rev-parse", "HEAD")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "code")
    later = git(repo, "rev-parse", "HEAD")
    path = repo / "results" / "claims.yaml"
    claim, history = parse.load_claims(path)[0], History(path)
    assert history.declared(claim) == declared_at
    ok = {"declarations": {"glu": claim.digest}, "git_commit": later, "git_clean": True, "git_resumed": []}
    assert problem(ok, claim, history, declared_at) is None
    mixed = pd.DataFrame([ok, ok | {"git_clean": False}]).assign(label="r")
    assert standing(claim, mixed, [], history) == ("exploratory", 1, 2)  # one run that does not count is enough
    assert standing(claim, mixed.iloc[:1], [], history) == ("confirmatory", 1, 1)
    for change, why in [({"declarations": {"glu": "0" * 12}}, "not launched under this declaration"),
                        ({"git_clean": False}, "not launched from a clean tree"),
                        ({"git_clean": None}, "not launched from a clean tree"),
                        ({"git_commit": "f" * 40}, "is not in this repository's history"),
                        ({"git_resumed": ["e" * 40]}, "is not in this repository's history")]:
        assert why in problem(ok | change, claim, history, declared_at), change
    declare(repo / "results", hypothesis="worse")  # edited and committed after the run's launch
    git(repo, "commit", "-q", "-am", "edit")
    edited, history = parse.load_claims(path)[0], History(path)
    assert history.declared(edited) == git(repo, "rev-parse", "HEAD")
    run = ok | {"declarations": {"glu": edited.digest}}  # a digest rewritten in place
    assert "does not descend from the declaring commit" in problem(run, edited, history, history.declared(edited))
    declare(repo / "results", hypothesis="better")  # back to the first text, not committed
    assert History(path).declared(parse.load_claims(path)[0]) is None
    texts = []
    read = pd.DataFrame([ok, ok | {"git_clean": False}]).assign(label="r")
    assert standing(claim, read, texts, History(tmp_path)) == ("exploratory", 0, 2)  # no git: nothing counts
    assert standing(claim, read.iloc[:1], [], history) == ("exploratory", 0, 1)
    assert texts == ["exploratory: 2 of 2 runs read were not launched under this declaration (the claims file is not "
                     "tracked by git, so no commit declared it)"]


def test_a_results_folder_without_claims_has_no_verdicts(tmp_path):
    from mbexp.claims.evaluate import evaluate_file

    assert evaluate_file(tmp_path, {}) == []  # not an error: a user's own results folder needs no claims file


def test_verdicts_of_a_claims_file_read_its_git_history(tmp_path):
    # runs recording the committed declaration's digest, launched clean from its commit: confirmatory only because
    # evaluate_file reads the claims file's history (without it, no commit declared anything)
    from test_table import write_run

    from mbexp.analysis import table
    from mbexp.claims.evaluate import evaluate_file

    results = tmp_path / "results"
    declare(results)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "results/claims.yaml")
    git(tmp_path, "commit", "-q", "-m", "declare")
    launched = {"declarations": parse.covering(results, "decl"), "git_commit": git(tmp_path, "rev-parse", "HEAD"),
                "git_clean": True}
    for seed, (relu, swiglu) in enumerate([(5.0, 4.8), (5.2, 4.9)]):
        write_run(results, RELU, seed=seed, final=relu, test=relu, experiment="decl", **launched)
        write_run(results, SWIGLU, seed=seed, final=swiglu, test=swiglu, experiment="decl", **launched)
    [result] = evaluate_file(results, table.build_tables(results))
    assert (result.standing, result.runs_declared, result.runs_read) == ("confirmatory", 4, 4)
