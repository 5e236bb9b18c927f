"""`make table` on damaged or unusual inputs (docs/troubleshooting.md): each bad file is named and left out, the rest
tabled, exit 4 (1 with --strict); a bad argument is one line and exit 2; never a traceback, never a hang."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import REPO, make_table_here, mbexp_train, overrides

# the documented WSD sweep: the run at the default cool-down shape leaves the key out of its identity
WSD = ["train.steps=10", "train.eval_every=5", "train.log_every=5", "optim.warmup_steps=1", "name=wsd",
       "optim.schedule=wsd", "optim.cooldown_shape=linear,sqrt", "seed=0,1"]


@pytest.fixture(scope="session")  # once per test process: see test_table_sweep.py's `sweep`
def wsd_results(tmp_path_factory, cache) -> Path:
    """Four real smoke runs of the WSD sweep, trained once; each test works on its own copy."""
    tmp = tmp_path_factory.mktemp("wsd")
    proc = mbexp_train(["-m", *overrides(tmp, cache, *WSD)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp / "results"


def copied(results: Path, tmp: Path, *, shapes: tuple = ("linear",)) -> Path:
    """A copy of the sweep's runs at these cool-down shapes (one shape: no key left out sits beside a value)."""
    shutil.copytree(results, tmp / "results", symlinks=True)
    for run in run_dirs(tmp / "results"):
        shape = json.loads((run / "summary.json").read_text())["identity"].get("optim.cooldown_shape", "linear")
        if shape not in shapes:
            shutil.rmtree(run)
    return tmp / "results"


def run_dirs(results: Path, experiment: str = "wsd") -> list[Path]:
    return sorted(p.parent for p in (results / "runs" / experiment).glob("*/seed=*/summary.json"))


def make_table(results: Path, *args: str, timeout: int | None = None) -> subprocess.CompletedProcess:
    """make table in this process; with `timeout`, in a process of its own (a hang then fails, not stalls)."""
    if timeout is None:
        return make_table_here(results, "--no-wandb", *args)
    return subprocess.run([sys.executable, "scripts/make_table.py", "--results", str(results), "--no-wandb", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ})


def flagged(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error:", "warning:"))]


def assert_left_out(results: Path, bad: Path, says: str, **kwargs) -> None:
    """Exit 4, one warning naming `bad` and what is wrong with it, the other runs tabled; --strict: exit 1, one line."""
    done = make_table(results, **kwargs)
    assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr[-2000:]
    warnings = flagged(done.stderr)
    assert len(warnings) == 2 and warnings[0] == f"warning: skipping {bad}: {says}", warnings
    assert warnings[1].startswith("warning: 1 run file(s) left out")
    assert "## wsd" in done.stdout and (results / "tables" / "wsd.md").exists()
    strict = make_table(results, "--strict", **kwargs)
    assert strict.returncode == 1 and strict.stderr.splitlines() == [f"error: {bad}: {says}"], strict.stderr[-2000:]


def test_a_key_left_out_of_an_identity_tables_as_its_default(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path, shapes=("linear", "sqrt"))
    done = make_table(results)
    assert done.returncode == 0 and not flagged(done.stderr), done.stderr[-2000:]
    table = (results / "tables" / "wsd.md").read_text()
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| layer-pre-relu")}
    assert rows == {"layer-pre-relu-matched (optim.cooldown_shape=linear)",
                    "layer-pre-relu-matched (optim.cooldown_shape=sqrt)"}
    assert "nan" not in table


def test_a_list_in_an_identity_is_a_value_of_its_own(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    path = run_dirs(results)[0] / "summary.json"
    summary = json.loads(path.read_text())
    summary["identity"]["optim.betas"] = [0.8, 0.9]  # a list-valued key: unhashable until tabled as a tuple
    path.write_text(json.dumps(summary))
    done = make_table(results)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "| layer-pre-relu-matched (optim.betas=(0.8, 0.9)) |" in (results / "tables" / "wsd.md").read_text()
    summary["identity"]["optim.cooldown_shape"] = [1, 2]  # a list where text goes: named and left out
    path.write_text(json.dumps(summary))
    assert make_table(results).returncode == 4


def test_through_make_every_failure_exits_2_and_its_last_line_has_the_scripts_code(wsd_results, tmp_path):
    """docs/troubleshooting.md, "Through make": make's own exit code is 2 whatever the script returned; its last line
    carries the script's (2: no results folder; 4: a run file left out)."""
    results = copied(wsd_results, tmp_path)
    path = run_dirs(results)[0] / "summary.json"
    summary = json.loads(path.read_text())
    summary["identity"]["optim.cooldown_shape"] = [1, 2]
    path.write_text(json.dumps(summary))
    for where, code in ((tmp_path / "missing", 2), (results, 4)):
        assert make_table(where).returncode == code
        # this interpreter, and no set-up: the venv is what runs the tests
        make = ["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={Path(sys.executable).parent}"]
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under make test
        done = subprocess.run([*make, "table", f"RESULTS={where}"], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env=env | {"WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)})
        assert done.returncode == 2, done.stderr[-2000:]
        assert re.search(rf"make: \*\*\* \[Makefile:\d+: table\] Error {code}$", done.stderr.rstrip()), done.stderr


def test_config_values_of_any_types_sort_without_comparing_types():
    from mbexp.analysis.collect import order_key

    values = [math.nan, "sqrt", 3, (1, "a"), None, 0.5, "linear", (1, 2.0), True]
    assert sorted(values, key=order_key)[:6] == [0.5, True, 3, "linear", "sqrt", (1, 2.0)]


def test_a_wrongly_typed_metrics_record_leaves_its_run_out(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    bad = run_dirs(results)[0] / "metrics.jsonl"
    lines = len(bad.read_text().splitlines())
    with bad.open("a") as f:
        f.write('{"step": "x", "val_loss": "abc"}\n')
    assert_left_out(results, bad, f'line {lines + 1}: step is "x", not a number; the run is left out')


def test_a_garbled_metrics_line_before_the_last_leaves_its_run_out(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    bad = run_dirs(results)[0] / "metrics.jsonl"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join([lines[0], '{"step": 3, "val_lo', *lines[1:]]) + "\n")
    assert_left_out(results, bad, "line 2 is not a JSON record (only the last line may be cut short, by a kill); the "
                    "run is left out")


def test_a_last_metrics_line_cut_short_by_a_kill_is_read_past(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    with (run_dirs(results)[0] / "metrics.jsonl").open("a") as f:
        f.write('{"step": 12, "val_lo')
    done = make_table(results)
    assert done.returncode == 0 and not flagged(done.stderr), done.stderr[-2000:]


def scan_copy(tmp: Path) -> Path:
    """A copy of the committed declared study ffn_wsd_cpu: its runs, its scan's and the claims file."""
    results = tmp / "results"
    for experiment in ("ffn_wsd_cpu", "ffn_wsd_cpu_scan"):
        shutil.copytree(REPO / "results" / "runs" / experiment, results / "runs" / experiment)
    shutil.copy(REPO / "results" / "claims.yaml", results / "claims.yaml")
    return results


@pytest.mark.parametrize(("damage", "says"), [
    (lambda identity: identity.update({"optim.lr": "abc"}), "identity optim.lr='abc' is not a learning rate"),
    (lambda identity: identity.update({"optim.lr": -0.1}), "identity optim.lr=-0.1 is not a learning rate"),
    (lambda identity: identity.pop("optim.lr"), "its identity records no optim.lr"),
], ids=["lr is text", "lr is negative", "lr deleted"])
def test_a_damaged_scan_summary_is_named_and_the_scan_goes_on(tmp_path, damage, says):
    results = scan_copy(tmp_path)
    bad = sorted((results / "runs" / "ffn_wsd_cpu_scan").glob("*/seed=*/summary.json"))[0]
    summary = json.loads(bad.read_text())
    damage(summary["identity"])
    bad.write_text(json.dumps(summary))
    done = make_table(results, "--only", "ffn_wsd_cpu")  # a scan the selected study reads counts
    assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert flagged(done.stderr)[0] == f"warning: skipping {bad}: {says}"
    assert (results / "tables" / "ffn_wsd_cpu_lr_scan.md").exists() and "## ffn_wsd_cpu →" in done.stdout
    strict = make_table(results, "--only", "ffn_wsd_cpu", "--strict")
    assert strict.returncode == 1 and strict.stderr.splitlines() == [f"error: {bad}: {says}"]


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json"])
def test_a_fifo_is_never_opened_for_reading(wsd_results, tmp_path, name):
    results = copied(wsd_results, tmp_path)
    bad = run_dirs(results)[0] / name
    bad.unlink()
    os.mkfifo(bad)
    assert_left_out(results, bad, "unreadable (a FIFO, not a regular file, EINVAL)", timeout=120)


def test_a_fifo_as_the_claims_file_is_one_line_not_a_hang(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    os.mkfifo(results / "claims.yaml")
    done = make_table(results, timeout=120)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: claims file {results / 'claims.yaml'}: a FIFO, not a regular file"]


def test_a_summary_json_that_is_a_folder_is_named_as_it_is(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    bad = results / "runs" / "wsd" / "stray" / "seed=0" / "summary.json"
    bad.mkdir(parents=True)
    assert_left_out(results, bad, "unreadable (Is a directory, EISDIR)")


@pytest.mark.parametrize("margin", ["inf", "0", "-0.02", "nan", "abc"])
def test_a_bad_margin_is_one_line_and_exit_2(wsd_results, tmp_path, margin):
    results = copied(wsd_results, tmp_path)
    done = make_table(results, f"--margin={margin}")
    assert done.returncode == 2 and not done.stdout and done.stderr.splitlines() == [
        f"error: argument --margin: expected a positive, finite number of nats, got {margin!r}; "
        "see python scripts/make_table.py --help"]
    assert not (results / "tables").exists()


def test_only_with_an_unknown_experiment_lists_those_there(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    (results / "runs" / "other").mkdir()
    done = make_table(results, "--only", "wsdd")
    assert done.returncode == 2 and not done.stdout and done.stderr.splitlines() == [
        f"error: --only wsdd: no such experiment under {results / 'runs'}; experiments: other, wsd"]


def test_only_counts_the_files_of_the_selected_experiment_alone(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    broken = results / "runs" / "other" / "v" / "seed=0" / "summary.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{")
    for strict in ([], ["--strict"]):
        done = make_table(results, "--only", "wsd", *strict)
        assert done.returncode == 0 and not flagged(done.stderr), done.stderr[-2000:]
    everything = make_table(results)
    assert everything.returncode == 4 and str(broken) in flagged(everything.stderr)[0]


@pytest.mark.parametrize("command", [["scripts/make_report.py"], ["scripts/bench.py"], ["-m", "mbexp.study", "x"]])
def test_other_commands_refuse_a_bad_argument_in_one_line(command):
    done = subprocess.run([sys.executable, *command, "--bogus"], cwd=REPO, capture_output=True, text=True, timeout=300)
    prog = f"python {' '.join(command[:2]) if command[0] == '-m' else command[0]}"
    assert done.returncode == 2 and not done.stdout and done.stderr.splitlines() == [
        f"error: unrecognized arguments: --bogus; see {prog} --help"]


def test_report_with_a_missing_readme_says_so_in_one_line(tmp_path):
    (tmp_path / "runs").mkdir()
    missing = tmp_path / "nowhere" / "README.md"
    done = subprocess.run([sys.executable, "scripts/make_report.py", "--results", str(tmp_path), "--readme",
                           str(missing), "--check"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: cannot read {missing}: No such file or directory (ENOENT); give --readme an existing file (the "
        "defaults are relative to the current folder: run make report from the repository root)"]


def test_report_that_cannot_write_is_one_line_and_leaves_the_text_whole(tmp_path):
    import resource
    import signal

    def small_files():  # files over 16 bytes fail with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))

    (tmp_path / "runs").mkdir()
    (tmp_path / "claims.yaml").write_text("margin: 0.02\nclaims:\n  - {id: a, claim: c, paper: p, experiment: e, "
                                          "baseline: b, rows: [r], hypothesis: better, seeds: [0]}\n")
    texts = {name: f"<!-- {marks}:begin -->\nold\n<!-- {marks}:end -->\n" for name, marks in
             (("README.md", "claims"), ("results.md", "results"), ("claims-example.md", "example"))}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "scripts/make_report.py", "--results", str(tmp_path), "--readme",
                           str(tmp_path / "README.md"), "--page", str(tmp_path / "results.md"), "--example-doc",
                           str(tmp_path / "claims-example.md")], cwd=REPO, capture_output=True, text=True, timeout=300,
                          preexec_fn=small_files)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: cannot write {tmp_path / 'README.md'}: File too large (EFBIG); make it")
    assert {name: (tmp_path / name).read_text() for name in texts} == texts  # whole: the old text, no temporary
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["claims.yaml", "runs", *texts])


def test_an_unfinished_run_beside_finished_ones_is_named_with_its_command(wsd_results, tmp_path):
    # a results folder whose name Hydra would read as a sweep: the command must quote it
    (tmp_path / "a,b").mkdir()
    results = copied(wsd_results, tmp_path / "a,b")
    run = run_dirs(results)[0]
    summary = json.loads((run / "summary.json").read_text())
    summary["status"], summary["step"] = "interrupted", 5
    (run / "summary.json").write_text(json.dumps(summary))
    done = make_table(results)
    assert done.returncode == 0 and not flagged(done.stderr), done.stderr[-2000:]
    (note,) = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert note.startswith(f"note: 1 run(s) unfinished, not in the tables; each resumes with its command: {run} "
                           "(interrupted at step 5 of 10): python -m mbexp.train ")
    assert f"""'results_dir="{results}"'""" in note and "## wsd" in done.stdout


def test_only_names_the_experiment_a_renamed_folders_runs_record(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    (results / "runs" / "wsd").rename(results / "runs" / "renamed")
    done = make_table(results, "--only", "renamed")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "error: --only renamed: its runs record experiment wsd (each summary's `experiment`, by which tables group "
        "runs); keep them under runs/wsd"]


@pytest.mark.parametrize(("args", "says"), [
    (["--only="], "error: argument --only: expected an experiment's name, got ''"),
    (["--baseline", "wsd=a", "wsd=b"], "error: argument --baseline: wsd is given twice"),
    (["--only", "wsd", "--baseline", "other=a"], "error: argument --baseline: other is not the --only experiment wsd"),
])
def test_make_table_refuses_arguments_that_would_do_less_than_asked(wsd_results, tmp_path, args, says):
    results = copied(wsd_results, tmp_path)
    done = make_table(results, *args)
    assert done.returncode == 2 and not done.stdout and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(says) and not (results / "tables").exists()


def test_a_runs_folder_given_as_results_names_its_parent(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    done = make_table(results / "runs")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: {results / 'runs'} holds experiments' run folders itself: it is a runs/ folder; give --results its "
        f"parent, {results.resolve()}"]


def test_a_completed_run_without_its_test_loss_is_left_out(wsd_results, tmp_path):
    # a run with a test split that lost its test loss would turn its whole table to validation
    results = copied(wsd_results, tmp_path)
    bad = run_dirs(results)[0] / "summary.json"
    summary = json.loads(bad.read_text())
    assert summary["final_test_loss"] is not None and summary["identity"]["data.test_fraction"] > 0
    bad.write_text(json.dumps(summary | {"final_test_loss": None}))
    assert_left_out(results, bad, "completed without final_test_loss, though its identity holds a test split")


def test_report_names_the_file_whose_markers_are_missing(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "claims.yaml").write_text("margin: 0.02\nclaims:\n  - {id: a, claim: c, paper: p, experiment: e, "
                                          "baseline: b, rows: [r], hypothesis: better, seeds: [0]}\n")
    texts = {"README.md": "no markers here\n", "results.md": "<!-- results:begin -->\n<!-- results:end -->\n",
             "claims-example.md": "<!-- example:begin -->\n<!-- example:end -->\n"}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "scripts/make_report.py", "--results", str(tmp_path), "--readme",
                           str(tmp_path / "README.md"), "--page", str(tmp_path / "results.md"), "--example-doc",
                           str(tmp_path / "claims-example.md")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: {tmp_path / 'README.md'} (--readme): markers <!-- claims:begin --> ... <!-- claims:end --> not "
        "found; give --readme the file that holds them"]
    assert {name: (tmp_path / name).read_text() for name in texts} == texts


@pytest.mark.parametrize(("change", "says"), [
    ({"identity": {"model.d_model": "abc"}}, 'identity model.d_model="abc" is not a number'),
    ({"identity": {"ffn.name": 5}}, "identity ffn.name=5 is not a str"),
    ({"identity": {"model.bias": 1}}, "identity model.bias=1 is not true/false"),
    ({"steps": -5}, "negative steps (10 of -5)"),
])
def test_a_summary_with_a_mistyped_identity_or_negative_steps_is_left_out(wsd_results, tmp_path, change, says):
    # a wrongly typed identity value would split its row, or move the baseline, without a word
    results = copied(wsd_results, tmp_path)
    bad = run_dirs(results)[0] / "summary.json"
    summary = json.loads(bad.read_text())
    summary |= {"identity": summary["identity"] | change["identity"]} if "identity" in change else change
    bad.write_text(json.dumps(summary))
    assert_left_out(results, bad, says)


def test_a_table_mixing_runs_with_and_without_a_test_split_reports_validation(wsd_results, tmp_path):
    results = copied(wsd_results, tmp_path)
    path = run_dirs(results)[0] / "summary.json"
    summary = json.loads(path.read_text())
    summary["identity"]["data.test_fraction"], summary["final_test_loss"] = 0.0, None  # a run without a test split
    path.write_text(json.dumps(summary))
    done = make_table(results)
    assert done.returncode == 0 and not flagged(done.stderr), done.stderr[-2000:]
    assert "final log-ppl on the validation split" in (results / "tables" / "wsd.md").read_text()


def test_linked_outside_names_each_link_out_of_the_results_folder_and_no_link_inside(tmp_path):
    """An experiment folder that is a link out, and a variant folder that is one, are named with their targets; a
    link within the results folder, a plain folder and an experiment with no folder are not."""
    from mbexp.run.identity import linked_outside

    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    for folder in (elsewhere / "exp_a", elsewhere / "variant", results / "runs" / "exp_b" / "plain",
                   results / "kept" / "variant"):
        folder.mkdir(parents=True)
    (results / "runs" / "exp_a").symlink_to(elsewhere / "exp_a")
    (results / "runs" / "exp_b" / "out").symlink_to(elsewhere / "variant")
    (results / "runs" / "exp_b" / "in").symlink_to(results / "kept" / "variant")
    got = linked_outside(results, ["exp_a", "exp_b", "exp_c"])
    assert got == [(results / "runs" / "exp_a", elsewhere / "exp_a"),
                   (results / "runs" / "exp_b" / "out", elsewhere / "variant")]
    assert linked_outside(results, ["exp_b"]) == got[1:] and linked_outside(results, []) == []
