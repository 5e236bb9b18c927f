"""Every bad input, fault or outage ends in one true line; every input a run depends on is in its identity.

Each case runs `python -m mbexp.train` as a user types it and checks the exit code, the one `error:`/`warning:`
line on stderr, no traceback, and what is left under results/ (nothing, or the resumable run)."""

import contextlib
import errno
import json
import math
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny import (
    REPO,
    children,
    clean,
    during_step,
    make_table_here,
    mbexp_train,
    metrics,
    overrides,
    popen_train,
    summaries,
)

from mbexp import corpus, data
from mbexp.analysis.collect import collect_runs
from mbexp.analysis.table import tables_for
from mbexp.config import DataConfig, compose_config, model_spec, to_object
from mbexp.io import finite, json_line
from mbexp.model import DecoderLM
from mbexp.preflight import SKIP_ENV, check_multirun
from mbexp.run.identity import RunBusy, RunLock, run_dir
from mbexp.trainer import Learner, make_optimizer, train, train_step

SHORT = ["train.steps=2", "train.eval_every=2", "train.log_every=1", "train.checkpoint_every=100"]
TEXT = "\n\n".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog, then naps." for i in range(300))


def flagged(stderr: str) -> list[str]:
    """The lines a user reads as the outcome: `error: ...` and `warning: ...`."""
    return [line for line in stderr.splitlines() if line.startswith(("error:", "warning:"))]


def run_cli(tmp: Path, cache: Path, *extra: str, env: dict | None = None, logger: str = "none"):
    return mbexp_train(clean(overrides(tmp, cache, *SHORT, *extra, logger=logger)), env=env)


def the_run_dir(tmp: Path, cache: Path, *extra: str) -> Path:
    return run_dir(to_object(compose_config(clean(overrides(tmp, cache, *SHORT, *extra)))))


def text_file(tmp: Path, text: str = TEXT) -> Path:
    path = tmp / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return path


def latin1(tmp: Path) -> list[str]:
    path = tmp / "latin1.txt"
    path.write_bytes("a café\n".encode("latin-1"))
    return ["data=text", f"data.path={path}"]


def binary_in_folder(tmp: Path) -> list[str]:
    folder = tmp / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text(TEXT, encoding="utf-8")
    (folder / "b.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    return ["data=text", f"data.path={folder}"]


def latin1_in_a_swept_path(tmp: Path) -> list[str]:
    return ["-m", "data=text", f"data.path={text_file(tmp)},{latin1(tmp)[1].partition('=')[2]}"]


# (id, the overrides given a test's folder, what the one line says)
BAD_INPUTS = [
    ("unknown +key", lambda tmp: ["+model.n_layer=8"], ["model.n_layer is not a config key", "model.n_layers"]),
    ("unknown key", lambda tmp: ["model.foo=1"], ["model.foo is not a config key"]),
    ("grad_clip -1", lambda tmp: ["optim.grad_clip=-1"], ["optim.grad_clip=-1.0 must be >= 0"]),
    ("grad_clip nan", lambda tmp: ["optim.grad_clip=nan"], ["optim.grad_clip=nan must be a finite number"]),
    ("grad_clip inf", lambda tmp: ["optim.grad_clip=inf"], ["optim.grad_clip=inf must be a finite number"]),
    ("lr nan", lambda tmp: ["optim.lr=nan"], ["optim.lr=nan must be a finite number"]),
    ("lr -inf", lambda tmp: ["optim.lr=-inf"], ["optim.lr=-inf must be a finite number"]),
    ("impossible combination", lambda tmp: ["-m", "model.n_heads=2,4", "model.n_kv_heads=2,4"],
     ["error: 1 of 4 combinations of this sweep cannot run: model.n_heads=2 model.n_kv_heads=4 (model.n_kv_heads=4 "
      "must divide model.n_heads=2; choose one of: 1, 2); leave them out"]),
    ("latin-1 text", latin1, ["latin1.txt is not UTF-8 text: byte 0xe9 at byte offset 5"]),
    ("binary file in a folder", binary_in_folder, ["b.bin is not text: a NUL byte at byte offset 7"]),
    ("latin-1 text in a sweep", latin1_in_a_swept_path, ["latin1.txt is not UTF-8 text: byte 0xe9 at byte offset 5"]),
    ("unquoted path", lambda tmp: ["data=text", "data.path=/tmp/café corpus.txt"],
     ["quotes", "'data.path=\"/tmp/café corpus.txt\"'"]),
]



@pytest.mark.parametrize(("extra", "says"), [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_a_bad_input_stops_before_any_job_with_one_line_and_exit_2(tmp_path, cache, extra, says):
    proc = run_cli(tmp_path, cache, *extra(tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert line.startswith("error: ") and all(s in line for s in says), line
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_valid_sweep_is_never_refused_for_another_lists_value(tmp_path, cache):
    # every combination valid (d_model 64: 8 and 16 heads of 8 and 4 dims); each value checked beside the others'
    # defaults would pair n_kv_heads=8 with the default n_heads=2
    proc = run_cli(tmp_path, cache, "-m", "model.d_model=64", "model.n_heads=8,16", "model.n_kv_heads=4,8",
                   "train.steps=1", "train.eval_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted((s["identity"]["model.n_heads"], s["identity"]["model.n_kv_heads"])
                  for s in summaries(tmp_path / "results")) == [(8, 4), (8, 8), (16, 4), (16, 8)]


@pytest.fixture
def listening_port():
    """A local TCP port that accepts connections and never answers: a reachable server without W&B behind it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest.mark.parametrize("server", ["unreachable", "reachable"])
def test_wandb_online_without_key_or_network_falls_back_to_offline_in_seconds(tmp_path, cache, server, request):
    port = request.getfixturevalue("listening_port") if server == "reachable" else 1  # port 1: refused at once
    # WANDB_ERROR_REPORTING: wandb reports the failed online start to the server; this one never answers, and
    # waiting for that answer would hold the process at exit until the report's own timeout
    env = {"WANDB_MODE": "online", "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_API_KEY": "",
           "WANDB_DIR": str(tmp_path / "wb"), "WANDB_ERROR_REPORTING": "false"}
    started = time.monotonic()
    args = clean(overrides(tmp_path, cache, *SHORT, "logger.init_timeout=2", logger="wandb"))
    proc = mbexp_train([a for a in args if "logger.dir" not in a], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - started < 30  # logger.init_timeout, not wandb's 90 s
    (line,) = flagged(proc.stderr)
    reason = "is unreachable" if server == "unreachable" else "No API key"
    assert line.startswith("warning: W&B online is not possible") and reason in line, line
    assert f"wandb sync {tmp_path / 'wb' / 'wandb'}/offline-run-*" in line
    assert "Traceback" not in proc.stderr
    assert [s["status"] for s in summaries(tmp_path / "results")] == ["completed"]
    assert len(list((tmp_path / "wb" / "wandb").glob("offline-run-*"))) == 1, "WANDB_DIR honoured"


def test_a_run_held_by_another_process_exits_3_naming_it(tmp_path, cache):
    directory = the_run_dir(tmp_path, cache)
    with RunLock(directory):
        proc = run_cli(tmp_path, cache)
    assert proc.returncode == 3, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert line == (f"error: run {directory} is being trained by another process: left to it; rerun the same "
                    "command once that process ends (finished runs are skipped)")
    assert [p.name for p in directory.iterdir()] == [".lock"]


def test_a_run_lock_names_its_holder_and_refuses_a_second_one_at_once(tmp_path):
    """The lock file says which host and process train the run; a second lock on it (its own open file, as another
    process has) is refused at once, not waited for."""
    with RunLock(tmp_path):
        assert (tmp_path / ".lock").read_text() == f"{platform.node()} {os.getpid()}\n"
        with pytest.raises(RunBusy, match="is being trained by another process"):
            RunLock(tmp_path).__enter__()
    with RunLock(tmp_path):  # released on exit
        pass


def mount_tmpfs(path: Path, *options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=1m", *options)), "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs root and mount; skipped elsewhere, where test_write_errors_* below still run)."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
    return filler


@pytest.mark.slow
def test_a_full_disk_ends_in_one_line_and_the_rerun_trains(small_disk, cache):
    filler = fill(small_disk)
    proc = run_cli(small_disk, cache)
    assert proc.returncode == 1, proc.stderr[-2000:]
    directory = the_run_dir(small_disk, cache)
    (line,) = flagged(proc.stderr)
    assert line == (f"error: run {directory} failed before it wrote its summary.json (cannot write {directory}/.lock: "
                    "No space left on device (ENOSPC)); rerun the same command to resume once the disk takes writes")
    assert "Logging error" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert not (small_disk / "results" / "hydra").exists(), "Hydra's log folder went elsewhere"
    filler.unlink()
    again = run_cli(small_disk, cache)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [s["status"] for s in summaries(small_disk / "results")] == ["completed"]


@pytest.mark.slow
def test_a_read_only_results_folder_skips_finished_runs_and_fails_new_ones_in_one_line(small_disk, cache):
    assert run_cli(small_disk, cache).returncode == 0
    before = sorted(p.relative_to(small_disk) for p in small_disk.rglob("*"))
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    skipped = run_cli(small_disk, cache)
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    assert not flagged(skipped.stderr) and "already completed" in skipped.stdout
    new = run_cli(small_disk, cache, "seed=1")
    assert new.returncode == 1, new.stderr[-2000:]
    (line,) = flagged(new.stderr)
    assert "cannot write" in line and "Read-only file system (EROFS)" in line and "Traceback" not in new.stderr
    assert sorted(p.relative_to(small_disk) for p in small_disk.rglob("*")) == before
    table = make_table_here(small_disk / "results", "--no-wandb")
    assert table.returncode == 1 and "Traceback" not in table.stderr
    (line,) = flagged(table.stderr)
    assert line.startswith(f"error: cannot write {small_disk / 'results'}") and "(EROFS)" in line


def test_a_disk_that_fills_mid_run_stops_it_with_that_write_error_though_no_summary_says_failed(small_disk, cache):
    """The disk fills during step 1: the run raises the write error that names the file and ENOSPC (what the one
    error line reports), not an error of the `failed` summary the full disk refuses as well."""
    cfg = compose_config(clean(overrides(small_disk, cache, *SHORT)))
    directory = run_dir(to_object(cfg))
    with during_step(1, lambda: fill(small_disk)), pytest.raises(OSError) as raised:
        train(cfg)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(directory / "metrics.jsonl")
    assert json.loads((directory / "summary.json").read_text())["status"] == "running"  # the last one it took


def test_write_errors_name_the_path_and_errno_and_the_summary_says_failed(tmp_path, cache, monkeypatch):
    # a disk that fills at the first checkpoint: torch.save's OSError names no file; the run's does
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full)
    cfg = compose_config(clean(overrides(tmp_path, cache, "train.steps=4", "train.checkpoint_every=2")))
    directory = run_dir(to_object(cfg))
    with pytest.raises(OSError) as raised:
        train(cfg)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(directory / "checkpoint.pt")
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["step"] == 2
    assert summary["error"] == f"cannot write {directory / 'checkpoint.pt'}: No space left on device (ENOSPC)"
    assert not list(directory.glob(".*.tmp"))
    monkeypatch.undo()
    assert train(cfg)["status"] == "completed"


@pytest.mark.slow
def test_an_interrupted_run_is_named_by_make_table_with_the_command_that_resumes_it(tmp_path, cache):
    args = clean(overrides(tmp_path, cache, "train.steps=100000", "train.log_every=1", "train.checkpoint_every=5"))
    proc = popen_train(args)
    deadline = time.monotonic() + 120
    found = []
    while time.monotonic() < deadline and not found:  # wait for training, not for a time
        found = [p for p in (tmp_path / "results").glob("runs/**/metrics.jsonl") if p.read_text().count("\n") >= 2]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    err, _ = proc.communicate(timeout=120)  # stdout and stderr together
    assert found and proc.returncode == 130, err
    table = make_table_here(tmp_path / "results", "--no-wandb")
    assert table.returncode == 1
    (line,) = flagged(table.stderr)
    directory = found[0].parent
    assert line.startswith(f"error: no finished runs under {tmp_path / 'results' / 'runs'}; 1 left unfinished")
    assert f"{directory} (interrupted at step " in line and " of 100000): python -m mbexp.train " in line
    assert line.endswith(" ".join(args)), "the command repeats the run's overrides"


def test_an_edited_text_corpus_is_a_new_run_in_its_own_row_and_the_old_one_still_skips(tmp_path, cache):
    path = text_file(tmp_path)
    base = ["data=text", f"data.path={path}", "data.vocab_size=300", "train.steps=3", "train.eval_every=3"]

    def run(*extra):
        cfg = compose_config(clean(overrides(tmp_path, cache, *base, *extra)))
        return train(cfg)

    first = run()
    (summary_file,) = (tmp_path / "results").glob("runs/**/summary.json")
    written = summary_file.read_bytes()
    path.write_text(TEXT + "\n\nA new paragraph the first run never saw.", encoding="utf-8")
    edited = run()
    assert edited["status"] == "completed" and edited["config_hash"] != first["config_hash"]
    assert edited["identity"]["data.fingerprint"] != first["identity"]["data.fingerprint"]
    assert run("seed=1")["config_hash"] == edited["config_hash"]
    (table,) = tables_for(collect_runs(tmp_path / "results")).values()
    assert sorted(table.rows["n"]) == [1, 2], "two rows: the old corpus (seed 0), the edited one (seeds 0 and 1)"
    path.write_text(TEXT, encoding="utf-8")
    assert run() == first and summary_file.read_bytes() == written, "the original run is skipped, not rerun"


def test_bigtxt_runs_keep_their_identity():
    cfg = to_object(compose_config([]))
    assert corpus.fingerprint(cfg.data.name) is None  # pinned by its md5: GOLDEN_RUN_DIRS keep their directories


def test_grad_clip_0_trains_unclipped_and_logs_the_norm(tmp_path, cache, bigtxt_tokens):
    summary = train(compose_config(clean(overrides(tmp_path, cache, "optim.grad_clip=0"))))
    directory = run_dir(to_object(compose_config(clean(overrides(tmp_path, cache, "optim.grad_clip=0")))))
    trains = [r for r in metrics(directory) if "train_loss" in r]
    assert summary["status"] == "completed" and trains[-1]["train_loss"] < trains[0]["train_loss"] - 0.5
    assert all(r["grad_norm"] > 0 for r in trains)

    def one_step(grad_clip: float | None):
        cfg = to_object(compose_config(["+experiment=smoke", "data.vocab_size=512", "model.seq_len=32"]))
        torch.manual_seed(0)
        model = DecoderLM(model_spec(cfg, bigtxt_tokens.vocab_size))
        batches = data.Batches(bigtxt_tokens, seq_len=32, batch_size=4, seed=0, val_windows=2)
        learner = Learner(model, make_optimizer(model, cfg.optim, torch.device("cpu")), batches,
                          torch.device("cpu"), "fp32")
        if grad_clip is not None:
            train_step(learner, 1e-3, grad_clip)
        else:  # the reference: the same step with no clipping call at all
            for group in learner.optimizer.param_groups:
                group["lr"] = 1e-3
            x, y = batches.next_train()
            model(x, y)[1].backward()
            learner.optimizer.step()
        return [p.detach().clone() for p in model.parameters()]

    reference = one_step(None)
    assert all(torch.equal(a, b) for a, b in zip(one_step(0.0), reference))
    assert not all(torch.equal(a, b) for a, b in zip(one_step(1e-3), reference)), "a real clip changes the step"


def test_strict_json_writes_null_and_says_why():
    assert finite({"loss": math.nan, "norm": math.inf, "ok": 1.0}) == {
        "loss": None, "norm": None, "ok": 1.0, "nonfinite": {"loss": "nan", "norm": "inf"}}
    assert json.loads(json_line({"train_loss": -math.inf})) == {"train_loss": None, "nonfinite": {"train_loss": "-inf"}}


def test_a_diverged_run_writes_strict_json(tmp_path, cache):
    summary = train(compose_config(clean(overrides(tmp_path, cache, "optim.lr=1e6", "optim.warmup_steps=0",
                                                   "train.steps=6", "train.log_every=1"))))
    assert summary["status"] == "diverged"
    directory = run_dir(to_object(compose_config(clean(overrides(tmp_path, cache, "optim.lr=1e6",
                                                                  "optim.warmup_steps=0", "train.steps=6",
                                                                  "train.log_every=1")))))
    for text in [(directory / "summary.json").read_text(), *(directory / "metrics.jsonl").read_text().splitlines()]:
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))


# a cache build that stalls after its first chunk of train.bin, the temporary file open: the test SIGKILLs it there
STALLED_BUILD = """
import sys, time
from mbexp import data
from mbexp.config import DataConfig
batches = data._batches
def stalled(docs, chunk):
    for batch in batches(docs, chunk):
        yield batch
        time.sleep(600)
data._batches = stalled
data.prepare(DataConfig(name="text", path=sys.argv[1], vocab_size=300, cache_dir=sys.argv[2]), seq_len=16)
"""


def test_a_cache_build_killed_mid_write_leaves_no_temporary_file(tmp_path, capsys):
    cfg = DataConfig(name="text", path=str(text_file(tmp_path)), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", STALLED_BUILD, cfg.path, cfg.cache_dir], cwd=REPO,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(Path(cfg.cache_dir).glob("**/.train.bin.*.tmp")):
        assert proc.poll() is None and time.time() < deadline, "the build never reached train.bin"
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=60)
    [orphan] = Path(cfg.cache_dir).glob("**/.train.bin.*.tmp")
    assert not (orphan.parent / "meta.json").exists()  # an incomplete cache: no meta.json
    built = data.prepare(cfg, seq_len=16)
    assert built.path == orphan.parent and not list(built.path.glob(".*.tmp"))
    clean = data.prepare(DataConfig(**{**vars(cfg), "cache_dir": str(tmp_path / "clean")}), seq_len=16)
    assert (built.path / "train.bin").read_bytes() == (clean.path / "train.bin").read_bytes()
    (built.path / "train.bin").write_bytes(b"damaged")
    capsys.readouterr()
    data.prepare(cfg, seq_len=16)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "is damaged" in warnings[0], "the damage is reported once"


def test_a_hub_corpus_fingerprint_follows_its_content(tmp_path, monkeypatch):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")
    monkeypatch.setitem(corpus.HUB, "tinystories", (str(tmp_path / "TinyStories"), None))
    train_file = tmp_path / "TinyStories" / "data" / "train-00000-of-00001.parquet"
    train_file.parent.mkdir(parents=True)

    def stories(*texts: str) -> str:
        pq.write_table(pa.table({"text": list(texts)}), train_file)
        return corpus.fingerprint("tinystories")

    first = stories("Once upon a time.", "The end.")
    assert corpus.fingerprint("tinystories") == first  # the same files, read again
    assert stories("Once upon a time.", "A different end.") != first


# ---- every value checked before any job: (id, the overrides given a test's folder, environment, the one line) ----
def results_dir_is_a_file(tmp: Path) -> list[str]:
    (tmp / "afile").write_text("not a folder\n")
    return [f"results_dir={tmp / 'afile'}"]


def symlink_loop(tmp: Path) -> list[str]:
    (tmp / "loop").symlink_to(tmp / "loop")
    return ["data=text", f"data.path={tmp / 'loop'}"]


def a_file(tmp: Path) -> Path:
    (tmp / "afile").write_text("not a folder\n")
    return tmp / "afile"


def one_line_text(tmp: Path) -> list[str]:
    return ["data=text", f"data.path={text_file(tmp, 'one line, one document')}"]


PREFLIGHT = [
    ("n_heads 0", ["model.n_heads=0"], {}, "model.n_heads=0 must be >= 1"),
    ("n_heads -2", ["model.n_heads=-2"], {}, "model.n_heads=-2 must be >= 1"),
    ("d_model 0", ["model.d_model=0"], {}, "model.d_model=0 must be >= 1"),
    ("d_model -32", ["model.d_model=-32"], {}, "model.d_model=-32 must be >= 1"),
    ("betas 1.5", ["optim.betas=[1.5,0.9]"], {}, "optim.betas=[1.5, 0.9] must be two numbers in [0, 1)"),
    ("betas one", ["optim.betas=[0.9]"], {}, "optim.betas=[0.9] must be two numbers in [0, 1)"),
    ("betas none", ["optim.betas=[]"], {}, "optim.betas=[] must be two numbers in [0, 1)"),
    ("norm.eps -1", ["norm.eps=-1"], {}, "norm.eps=-1.0 must be > 0"),
    ("diverge_factor -1", ["train.diverge_factor=-1"], {}, "train.diverge_factor=-1.0 must be > 1"),
    ("max_docs 0", ["data.max_docs=0"], {}, "data.max_docs=0 must be >= 1, or null for every document"),
    ("max_docs -5", ["data.max_docs=-5"], {}, "data.max_docs=-5 must be >= 1"),
    ("min_lr_ratio 5", ["optim.min_lr_ratio=5"], {}, "optim.min_lr_ratio=5.0 must lie between 0 and 1"),
    ("lr 0", ["optim.lr=0"], {}, "optim.lr=0.0 must be > 0"),
    ("init_timeout 0", ["logger=wandb", "logger.init_timeout=0"], {}, "logger.init_timeout=0.0 must be > 0"),
    ("name escapes", ["name=../../escape"], {}, "name='../../escape' is not valid; use letters, digits"),
    ("name empty", ["name="], {}, "name='' is not valid"),
    ("WANDB_MODE typo", ["logger=wandb"], {"WANDB_MODE": "ofline"},
     "WANDB_MODE='ofline' (environment) is not valid; choose one of: offline, online, disabled"),
    ("results_dir a file", results_dir_is_a_file, {}, "cannot be a folder:"),
    ("double =", ["optim.lr==3"], {}, "(key optim.lr: one '=' between key and value): write it as optim.lr=3"),
    ("no =", ["optim.lr"], {}, "the override 'optim.lr' has no value: write optim.lr=VALUE"),
    ("open interpolation", ["name=${oops"], {}, "(key name: '${' opens an interpolation that is never closed)"),
    ("open bracket", ["optim.betas=[0.9,0.95"], {}, "(key optim.betas: an unclosed '['): write it as "
                                                     "'optim.betas=[0.9,0.95]'"),
    ("symlink loop", symlink_loop, {}, "loop is a symlink loop"),
    ("/dev/null", ["data=text", "data.path=/dev/null"], {}, "data.path=/dev/null is not a regular file or folder"),
    ("data.path beside bigtxt", ["data.path=README.md"], {}, "data.path=README.md applies only to data=text; with "
                                                           "data=bigtxt leave it out"),
    ("n_jobs without joblib", ["-m", "seed=0,1", "hydra.launcher.n_jobs=2"], {},
     "hydra.launcher.n_jobs=2 sets an option of a launcher the command does not choose; add hydra/launcher=joblib"),
    ("n_jobs 0", ["-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"], {},
     "hydra.launcher.n_jobs=0 is not valid; give a positive number of jobs"),
    ("n_jobs -2", ["-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=-2"], {},
     "hydra.launcher.n_jobs=-2 is not valid; give a positive number of jobs (or -1: one per CPU)"),
    ("torchrun batch", ["train.batch_size=3"], {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"},
     "train.batch_size=3 does not divide among WORLD_SIZE=2 ranks"),
    ("slurm without SLURM", ["-m", "seed=0,1", "hydra/launcher=slurm"], {"PATH": str(Path(sys.executable).parent)},
     "hydra/launcher=slurm needs SLURM (no sbatch on PATH)"),
    ("an experiment file's grid", ["-m", "+experiment=ladder_cpu", "model.n_kv_heads=2", "seed=0"], {},
     "error: 6 of 12 combinations of this sweep cannot run: model=ladder96 ffn=relu (model.n_kv_heads=2 must divide "
     "model.n_heads=3; choose one of: 1, 3)"),
    ("cool-down without wsd", ["-m", "optim.cooldown_shape=linear,sqrt", "optim.cooldown_fraction=0.2,0.5", "seed=0,1"],
     {}, "optim.cooldown_fraction=0.5 applies only to optim.schedule=wsd; with optim.schedule=cosine leave it at 0.2"),
    ("steps beside budgets", ["optim.schedule=wsd", "train.budgets=[20,10]"], {},
     "train.steps=2 is not used with train.budgets=[20, 10]: each budget is the train.steps of its own run"),
    ("a sweep of lists", ["-m", "optim.betas=[0.9,0.95],[1.5,0.9]"], {}, "optim.betas=[1.5, 0.9] must be two numbers"),
    ("a sweep of budgets", ["-m", "optim.schedule=wsd", "train.steps=16", "train.budgets=[8,16],[8,8]"], {},
     "error: train.budgets=[8, 8] must be distinct positive step counts"),
    ("choice()", ["-m", "optim.lr=choice(0.001,0)"], {}, "error: optim.lr=0.0 must be > 0"),
    ("force=yes", ["force=yes"], {}, "error: force=yes is not valid; choose one of: true, false"),
    ("a bool sweep with 2", ["-m", "model.bias=true,2"], {}, "error: model.bias=2 is not valid; choose one of: true, "
                                                             "false"),
    ("an empty range()", ["-m", "seed=range(3,0)"], {}, "error: the sweep of seed holds no values (an empty range()"),
    ("a value twice", ["-m", "optim.lr=1e-3,0.001"], {}, "error: the sweep of optim.lr lists 0.001 twice "
                                                         "(optim.lr=0.001,0.001): each value would run twice"),
    ("--cfg without a value", ["--cfg"], {}, "error: argument --cfg/-c: expected one argument; see python -m "
                                             "mbexp.train --help"),
    ("--multirun=true", ["--multirun=true"], {}, "error: argument --multirun/-m: ignored explicit argument 'true'"),
    ("-m with --cfg", ["-m", "seed=0,1", "--cfg", "job"], {}, "error: Only one of --run, --multirun, --cfg, --info "
                                                             "and --shell_completion can be specified (-m runs"),
    ("range()", ["-m", "seed=range(-1,1)"], {}, "error: seed=-1 must be >= 0"),
    ("an inherited skip variable", ["-m", "seed=range(-1,1)"], {SKIP_ENV: "1"}, "error: seed=-1 must be >= 0"),
    ("results_dir empty", ["results_dir="], {}, "results_dir='' is not valid"),
    ("budgets nested first", ["optim.schedule=wsd", "train.budgets=[[10],20]"], {},
     "train.budgets=[[10], 20] must be a flat list of whole numbers, e.g. train.budgets=[10,20]"),
    ("budgets nested whole", ["optim.schedule=wsd", "train.budgets=[[10,20]]"], {}, "train.budgets=[[10, 20]] must be"),
    ("budgets nested last", ["optim.schedule=wsd", "train.budgets=[10,[20]]"], {}, "train.budgets=[10, [20]] must be"),
    ("betas nested", ["optim.betas=[[0.9],0.95]"], {},
     "optim.betas=[[0.9], 0.95] must be a flat list of numbers, e.g. optim.betas=[0.9,0.95]"),
    ("unknown interpolation", ["optim.lr=${oops}"], {},
     "optim.lr=${oops} cannot be resolved (Interpolation key 'oops' not found): an interpolation names"),
    ("recursive interpolation", ["train.steps=${train.steps}"], {},
     "train.steps=${train.steps} cannot be resolved (Recursive interpolation detected)"),
    ("unset variable", ["optim.lr=${oc.env:MBEXP_TEST_NOT_SET}"], {},
     "optim.lr=${oc.env:MBEXP_TEST_NOT_SET} cannot be resolved (Environment variable 'MBEXP_TEST_NOT_SET' not found)"),
    ("seed 1e20", ["seed=100000000000000000000"], {}, "seed=100000000000000000000 must be < 2**32 (4294967296)"),
    ("WANDB_DIR a file", ["logger=wandb", "logger.dir=."], lambda tmp: {"WANDB_DIR": str(a_file(tmp))},
     "/afile cannot hold the folder wandb/: "),
    ("logger.dir a file", lambda tmp: ["logger=wandb", f"logger.dir={a_file(tmp)}"], {},
     "/afile is a file, not a folder (ENOTDIR); choose another logger.dir"),
    ("experiment without +", ["experiment=smoke"], {},
     "error: experiment is not chosen by default, so it cannot be overridden: add it with +experiment=smoke"),
    ("misspelt flag", ["--skip-impossibel"], {},
     "error: unknown flag --skip-impossibel (did you mean --skip-impossible?); python -m mbexp.train takes -m"),
    ("a sweep without -m", ["seed=0,1"], {}, "error: seed=0,1 is a sweep (one job per value): add -m to run it"),
    ("seq_len beyond the corpus", ["model.seq_len=2000000"], {},
     "data=bigtxt: the validation split holds at most 312861 tokens (311790 bytes in 1071 documents), too few for "
     "model.seq_len=2000000"),
    ("a one-document text", one_line_text, {}, "data=text: 1 documents are too few for data.val_fraction=0.05"),
    ("chdir", ["hydra.job.chdir=true"], {}, "error: hydra.job.chdir=true runs each job in Hydra's dated folder"),
    ("run dir under a file", lambda tmp: [f"hydra.run.dir={a_file(tmp)}/x"], {},
     "/afile is a file, not a folder (ENOTDIR); choose another hydra.run.dir"),
    ("cache_dir a file", lambda tmp: [f"data.cache_dir={a_file(tmp)}"], {},
     "/afile is a file, not a folder (ENOTDIR); choose another data.cache_dir"),
    ("cache_dir empty", ["data.cache_dir="], {}, "data.cache_dir='' is not valid; give the folder for the token"),
    ("min_frequency -1", ["data.min_frequency=-1"], {}, "error: data.min_frequency=-1 must be >= 0"),
    ("project with /", ["logger=wandb", "logger.project=a/b"], {}, "logger.project='a/b' is not valid; W&B takes"),
    ("WORLD_SIZE abc", [], {"WORLD_SIZE": "abc"}, "error: WORLD_SIZE='abc' (environment) needs a whole number"),
    ("WORLD_SIZE without RANK", [], {"WORLD_SIZE": "2"}, "each rank's RANK: launch with torchrun"),
    ("a sweep of sweeping experiments", ["-m", "+experiment=quickstart,smoke"], {},
     "error: +experiment=quickstart,smoke sweeps experiments that sweep themselves (quickstart: hydra.sweeper"),
    ("skip leaving nothing", ["-m", "--skip-impossible", "optim.lr=0,-1"], {},
     "error: --skip-impossible leaves nothing to run: 2 of 2 combinations"),
    ("interval()", ["-m", "optim.lr=interval(0.001,0.01)"], {},
     "error: optim.lr=interval(0.001,0.01) samples a range, which Hydra's basic sweeper cannot run"),
    ("unknown launcher option", ["-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_job=1"], {},
     "error: hydra.launcher.n_job is not an option of hydra/launcher=joblib; its options: n_jobs, backend"),
    ("unknown launcher", ["-m", "seed=0,1", "hydra/launcher=nope"], {},
     "error: hydra/launcher='nope' is not valid; choose one of: basic, joblib, slurm"),
    ("+ on a key that exists", ["+seed=5"], {}, "error: Could not append to config. An item is already at 'seed'. "
                                               "Either remove + prefix"),
]


@pytest.mark.parametrize(("extra", "env", "says"), [c[1:] for c in PREFLIGHT], ids=[c[0] for c in PREFLIGHT])
def test_every_value_is_checked_before_any_file(tmp_path, cache, extra, env, says):
    args = extra(tmp_path) if callable(extra) else extra
    env = env(tmp_path) if callable(env) else env
    before = sorted(tmp_path.rglob("*"))
    proc = run_cli(tmp_path, cache, *args, env=env, logger="wandb" if "logger=wandb" in args else "none")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line
    assert "Traceback" not in proc.stderr + proc.stdout and "Error executing job" not in proc.stderr
    assert sorted(tmp_path.rglob("*")) == before, "no file written"


def test_a_refused_sweep_prints_the_commands_that_run_the_rest(tmp_path, cache):
    proc = run_cli(tmp_path, cache, "-m", "model.n_heads=2,4", "model.n_kv_heads=2,4")
    assert proc.returncode == 2 and len(flagged(proc.stderr)) == 1
    commands = [line for line in proc.stdout.splitlines() if line.startswith("python -m mbexp.train")]
    assert [c.split()[-2:] for c in commands] == [["model.n_heads=2", "model.n_kv_heads=2"],
                                                  ["model.n_heads=4", "model.n_kv_heads=2,4"]]
    assert "--skip-impossible" in proc.stdout and not (tmp_path / "results").exists()


def test_skip_impossible_runs_the_rest_and_records_the_skipped(tmp_path, cache):
    proc = run_cli(tmp_path, cache, "-m", "model.n_heads=2,4", "model.n_kv_heads=2,4", "--skip-impossible",
                   "train.steps=1", "train.eval_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert line.startswith("warning: skipping 1 of 4 combinations that cannot run") and "model.n_heads=2 " \
        "model.n_kv_heads=4 (model.n_kv_heads=4 must divide model.n_heads=2" in line
    assert sorted((s["identity"]["model.n_heads"], s["identity"].get("model.n_kv_heads"))
                  for s in summaries(tmp_path / "results")) == [(2, 2), (4, 2), (4, 4)]
    (record,) = (tmp_path / "results" / "runs").glob("*/skipped.txt")
    assert record.read_text().splitlines() == ["model.n_heads=2 model.n_kv_heads=4  # model.n_kv_heads=4 must "
                                               "divide model.n_heads=2; choose one of: 1, 2"]


def test_skip_impossible_skips_the_impossible_values_of_a_sweep_function(tmp_path, cache):
    proc = run_cli(tmp_path, cache, "-m", "seed=range(-1,1)", "--skip-impossible", "train.steps=1",
                   "train.eval_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert line.startswith("warning: skipping 1 of 2 combinations that cannot run") and "seed=-1 (seed=-1 must be " \
        ">= 0)" in line and "Traceback" not in proc.stderr
    assert [s["seed"] for s in summaries(tmp_path / "results")] == [0]
    (record,) = (tmp_path / "results" / "runs").glob("*/skipped.txt")
    assert record.read_text().splitlines() == ["seed=-1  # seed=-1 must be >= 0"]


# a sweep checked value by value, as one over MAX_COMBINATIONS is: only its job sees n_heads=2 beside n_kv_heads=4
VALUE_BY_VALUE = """
import runpy, sys
from mbexp import preflight
preflight.MAX_COMBINATIONS = 1
sys.argv = ["mbexp.train", *sys.argv[1:]]
runpy.run_module("mbexp.train", run_name="__main__")
"""


def test_an_inherited_skip_variable_skips_no_job(tmp_path, cache):
    args = clean(overrides(tmp_path, cache, *SHORT, "-m", "model.n_heads=4,2", "model.n_kv_heads=2,4"))
    proc = subprocess.run([sys.executable, "-c", VALUE_BY_VALUE, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, SKIP_ENV: "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert line == ("error: model.n_kv_heads=4 must divide model.n_heads=2; choose one of: 1, 2; the sweep ran its "
                    "other runs (any other failure is in the log)")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert sorted((s["identity"]["model.n_heads"], s["identity"].get("model.n_kv_heads"))
                  for s in summaries(tmp_path / "results")) == [(2, 2), (4, 2), (4, 4)]
    assert not list((tmp_path / "results").rglob("skipped.txt"))


@pytest.mark.parametrize("twice", [["-m", "seed=0,1", "seed=2"], ["norm=rms", "norm=dyt"]])
def test_a_key_given_twice_is_refused(tmp_path, cache, twice):
    # mbexp_train's clean() keeps a key's last value: this command line goes to the CLI as typed
    proc = subprocess.run([sys.executable, "-m", "mbexp.train", *clean(overrides(tmp_path, cache, *SHORT)), *twice],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    key = twice[-1].partition("=")[0]
    assert line == (f"error: {key} is given twice ({twice[-2]} and {twice[-1]}): give each key once; a sweep lists "
                    f"its values in one override ({key}=a,b,c)")
    assert not (tmp_path / "results").exists()


def test_a_full_disk_while_building_the_token_cache_names_the_file_and_errno(tmp_path):
    import resource

    def small_files():  # files over 64 kB fail with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    cache = tmp_path / "cache"
    args = clean(overrides(tmp_path, cache, *SHORT, "data.vocab_size=300"))
    proc = subprocess.run([sys.executable, "-m", "mbexp.train", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, preexec_fn=small_files)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert "/train.bin: File too large (EFBIG)); rerun the same command to resume once the disk takes writes" in line
    assert str(cache) in line and "Traceback" not in proc.stderr
    assert not list(cache.rglob("*.tmp")) and not list(cache.rglob("meta.json"))


def test_a_token_cache_on_a_full_disk_names_the_file_and_enospc(small_disk, tmp_path):
    """The same fault on a real 1 MiB disk: ENOSPC, the file named, nothing half-written left behind."""
    cache = small_disk / "cache"
    args = clean(overrides(tmp_path, cache, *SHORT, "data.vocab_size=300"))
    proc = subprocess.run([sys.executable, "-m", "mbexp.train", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert ": No space left on device (ENOSPC)); rerun the same command to resume once the disk takes writes" in line
    assert str(cache) in line and "Traceback" not in proc.stderr
    assert not list(cache.rglob("*.tmp")) and not list(cache.rglob("meta.json"))


def test_a_failed_job_of_a_sweep_prints_no_hydra_line(tmp_path, cache):
    not_a_dir = tmp_path / "link"  # a dangling link where the token cache should be: each job fails to make it
    not_a_dir.symlink_to(tmp_path / "gone" / "cache")
    proc = run_cli(tmp_path, cache, "-m", "seed=0,1", f"data.cache_dir={not_a_dir}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = flagged(proc.stderr)
    assert "failed before it wrote any run file" in line and "Error executing job" not in proc.stderr


def garbage_checkpoint(directory: Path) -> None:
    (directory / "checkpoint.pt").write_bytes(b"not a checkpoint, not a zip" * 50)


def leftover_tmp(directory: Path) -> None:
    for name in (".summary.json.abc.tmp", ".checkpoint.pt.def.tmp"):
        (directory / name).write_bytes(b"half")


@pytest.mark.parametrize("damage", [garbage_checkpoint, leftover_tmp], ids=["garbage checkpoint", "leftover .tmp"])
def test_a_damaged_run_directory_trains_with_at_most_one_line(tmp_path, cache, damage):
    directory = the_run_dir(tmp_path, cache)
    directory.mkdir(parents=True)
    damage(directory)
    proc = run_cli(tmp_path, cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    said = [line for line in out.splitlines() if "checkpoint" in line and "unreadable" in line]
    assert len(said) == (damage is garbage_checkpoint) and "weights_only" not in out and "Traceback" not in out
    assert [s["status"] for s in summaries(tmp_path / "results")] == ["completed"]
    assert not list(directory.glob(".*.tmp"))


# ---- make table: a bad file is named and left out, the rest tabled; a fault is one line ----
def test_make_table_only_writes_that_experiment_and_nothing_else(tmp_path):
    from test_table import write_run

    for seed in range(2):
        write_run(tmp_path, seed=seed, experiment="quick", curve=[7.0, 6.0])
        write_run(tmp_path, seed=seed, experiment="other", curve=[7.0, 6.0])
    first = make_table_here(tmp_path, "--only", "quick", "--no-wandb")
    assert first.returncode == 0, first.stderr
    written = [p.name for p in tmp_path.glob("*/*") if p.parent.name in ("tables", "figures")]
    assert written and all(name.startswith("quick") for name in written), written
    assert make_table_here(tmp_path, "--no-wandb").returncode == 0
    (tmp_path / "tables" / "other.md").write_text("untouched\n")
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and "quick" not in p.name}
    again = make_table_here(tmp_path, "--only", "quick", "--no-wandb")
    assert again.returncode == 0 and "## other" not in again.stdout
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert (tmp_path / "tables" / "other.md").read_text() == "untouched\n"


def non_utf8_metrics(results: Path) -> tuple[Path, str]:
    from test_table import write_run

    write_run(results, seed=0, curve=[7.0, 6.0])
    bad = write_run(results, seed=1, curve=[7.0, 6.0]) / "metrics.jsonl"
    bad.write_bytes(bad.read_bytes() + b'{"val_loss": "caf\xe9"}\n')
    write_run(results, experiment="other", curve=[7.0, 6.0])
    return bad, "not UTF-8 (byte 0xe9"


def nan_final_loss(results: Path) -> tuple[Path, str]:
    from test_table import write_run

    write_run(results, seed=0, final=5.0)
    write_run(results, seed=2, final=5.2)
    bad = write_run(results, seed=1, final=math.nan) / "summary.json"
    return bad, "status completed with final_val_loss=nan"


@pytest.mark.parametrize("bad_file", [non_utf8_metrics, nan_final_loss], ids=["non-UTF-8 metrics", "NaN final loss"])
def test_make_table_names_a_bad_file_tables_the_rest_and_strict_refuses(tmp_path, bad_file):
    bad, says = bad_file(tmp_path)
    done = make_table_here(tmp_path, "--no-wandb")
    assert done.returncode == 4, done.stderr[-2000:]
    warnings = flagged(done.stderr)
    assert len(warnings) == 2 and str(bad) in warnings[0] and says in warnings[0], warnings
    assert warnings[1].startswith("warning: 1 run file(s) left out or counted as diverged")
    quick = (tmp_path / "tables" / "quick.md").read_text()
    assert "nan" not in quick.lower() and "Traceback" not in done.stderr
    strict = make_table_here(tmp_path, "--no-wandb", "--strict")
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    (line,) = flagged(strict.stderr)
    assert line.startswith(f"error: {bad}: ")


def copied_unfinished_run(tmp: Path) -> tuple[list[str], dict, str]:
    from test_table import write_run

    write_run(tmp / "copy", status="interrupted", command="python -m mbexp.train +experiment=smoke "
              "results_dir=/elsewhere/results seed=0")
    return [], {}, f"python -m mbexp.train +experiment=smoke results_dir={tmp / 'copy'} seed=0"


def interrupted_while_reading(tmp: Path) -> tuple[list[str], dict, str]:
    (tmp / "copy" / "runs").mkdir(parents=True)
    return ["-c", "import runpy, sys\nfrom mbexp.analysis import collect\n"
            "def stop(*a, **k):\n    raise KeyboardInterrupt\ncollect.collect_runs = stop\n"
            f"sys.argv = ['make_table.py', '--results', {str(tmp / 'copy')!r}]\n"
            "runpy.run_path('scripts/make_table.py', run_name='__main__')\n"], {}, "interrupted: "


def wandb_mode_typo(tmp: Path) -> tuple[list[str], dict, str]:
    (tmp / "copy" / "runs").mkdir(parents=True)
    return [], {"WANDB_MODE": "ofline"}, "error: WANDB_MODE='ofline' (environment) is not valid"


@pytest.mark.parametrize(("case", "code"), [(copied_unfinished_run, 1), (interrupted_while_reading, 130),
                                            (wandb_mode_typo, 2)], ids=["copied run", "Ctrl-C", "WANDB_MODE"])
def test_make_table_faults_end_in_one_line(tmp_path, case, code):
    script, env, says = case(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    cmd = [sys.executable, *script] if script else [sys.executable, "scripts/make_table.py", "--results",
                                                    str(tmp_path / "copy")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == code, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr, lines
    assert sorted(tmp_path.rglob("*")) == before, "no file written"


def test_an_experiment_files_sweep_without_m_is_one_job_with_a_warning():
    assert check_multirun(["+experiment=quickstart"]) == (
        "warning: +experiment=quickstart sweeps ffn, placement, seed (hydra.sweeper.params); without -m this runs "
        "one job, each of them at its default: add -m to run the sweep")
    assert check_multirun(["+experiment=quickstart", "ffn=relu", "placement=pre", "seed=0"]) is None  # a rerun's
    assert check_multirun(["--multirun", "+experiment=quickstart"]) is None
    assert check_multirun(["+experiment=smoke"]) is None


# ---- probes: a link, an alias bomb, a bad claims file under --only, a killed mutation check, a random checkpoint ----
@pytest.mark.parametrize("linked", ["experiment", "variant", "experiment inside"])
def test_a_linked_experiment_or_variant_folder_is_read_by_every_make_table(tmp_path, linked):
    from test_table import write_run

    results = tmp_path / "results"
    target = results / "archive" if linked == "experiment inside" else tmp_path / "elsewhere"
    for seed in range(2):
        write_run(results, seed=seed, experiment="other", curve=[7.0, 6.0])
        write_run(target, seed=seed, experiment="quick", curve=[7.0, 6.0])
    source = target / "runs" / "quick"
    if linked == "variant":
        (results / "runs" / "quick").mkdir()
        (variant,) = source.iterdir()
        link = results / "runs" / "quick" / variant.name
        link.symlink_to(variant)
    else:
        link = results / "runs" / "quick"
        link.symlink_to(source)
    says = [] if linked == "experiment inside" else [
        f"warning: {link} leads outside {results}, to {link.resolve()}; its runs are read as if they were here"]
    for args in ([], ["--only", "quick"]):
        done = make_table_here(results, "--no-wandb", *args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "## quick" in done.stdout and flagged(done.stderr) == says, (args, done.stderr)
        assert "(2) | baseline" in (results / "tables" / "quick.md").read_text()  # both seeds


# billion laughs: nine aliases of nine aliases, ten levels deep, in a study's note
BOMB = "{" + ", ".join(["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]", *(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10))]) + "}"


@pytest.mark.parametrize("command", ["train", "study", "table"])
def test_a_yaml_alias_bomb_in_the_claims_file_is_refused_in_one_line(tmp_path, cache, command):
    from test_study import STUDY

    results = tmp_path / "results"
    results.mkdir()
    path = results / "claims.yaml"
    path.write_text(STUDY.format(cache=cache).replace("[8, 16]\n", f"[8, 16]\n    note: {BOMB}\n"))
    argv = {"train": ["-m", "mbexp.train", *clean(overrides(tmp_path, cache, *SHORT))],
            "study": ["-m", "mbexp.study", "tiny", "--results", str(results)],
            "table": ["scripts/make_table.py", "--results", str(results), "--no-wandb"]}[command]
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)))
    assert done.returncode == 2, done.stderr[-2000:]  # the bomb expanded: a MemoryError under this limit
    assert flagged(done.stderr) == [f"error: claims file {path}: line 22 uses the YAML alias *l0; aliases "
                                    "are refused here: write each value out"]
    assert not (results / "runs").exists()


def test_make_table_only_refuses_a_bad_claims_file_as_the_full_run_does(tmp_path):
    from test_table import write_run

    write_run(tmp_path, seed=0, experiment="quick", curve=[7.0, 6.0])
    path = tmp_path / "claims.yaml"
    path.write_text("margin: -1\nclaims:\n  - {id: a, claim: c, paper: p, experiment: quick, baseline: b, rows: [r], "
                    "hypothesis: better, seeds: [0]}\n")
    says = f"error: claims file {path}: margin must be a positive, finite number of nats, got -1"
    for args in ([], ["--only", "quick"]):
        done = make_table_here(tmp_path, "--no-wandb", *args)
        assert done.returncode == 2 and done.stderr.splitlines() == [says], (args, done.stderr)
        assert not (tmp_path / "tables").exists()


def mutants(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "scripts/mutants.py", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.source
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_a_stopped_mutation_check_removes_its_copy_ends_its_tests_and_says_so(tmp_path, how):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = mutants("--only", "warmup_off_by_one", "--no-baseline", env={**os.environ, "TMPDIR": str(tmp)},
                   start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tests := children(proc.pid)) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    try:
        assert tests, "the mutant's pytest never started"
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)  # a kill reaches the script alone
        else:
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches its whole process group
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err[-2000:]
        assert err.splitlines() == ["interrupted: the mutation check stopped; its copy of the repository is removed"]
        assert list(tmp.iterdir()) == []
        assert not [pid for pid in tests if pid in children(proc.pid) or Path(f"/proc/{pid}/cmdline").exists()
                    and b"pytest" in Path(f"/proc/{pid}/cmdline").read_bytes()], "its pytest still runs"
    finally:  # never leave a test run behind
        for pid in [proc.pid, *tests]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_an_empty_mutant_selection_is_refused_in_one_line():
    proc = mutants("--only", "", "--list")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err.splitlines() == ["error: --only '': name at least one mutant (comma-separated); see --list"]


def test_a_checkpoint_of_random_bytes_is_named_not_a_checkpoint(tmp_path, caplog):
    import random

    from mbexp.run import checkpoint

    for seed in range(20):  # torch calls most such files a refused pickle, some a bad key or a short file
        caplog.clear()
        (tmp_path / checkpoint.LATEST).write_bytes(random.Random(seed).randbytes(4096))
        with caplog.at_level("WARNING"):
            assert checkpoint.load(tmp_path, config_hash="abc") is None
        (line,) = [r.getMessage() for r in caplog.records]
        assert "(unreadable: checkpoint.pt: not a checkpoint (corrupt or another kind of file" in line, line
        assert "safe" not in line and "weights" not in line.lower(), line


class Pickled:
    """An object torch's safe (weights-only) load refuses to rebuild from a checkpoint."""


def test_each_kind_of_unreadable_checkpoint_gets_its_own_reason_in_one_line(tmp_path, caplog):
    from mbexp.run import checkpoint

    torch.save({"config_hash": "abc", "step": 3, "obj": Pickled()}, tmp_path / checkpoint.LATEST)
    with caplog.at_level("WARNING"):
        assert checkpoint.load(tmp_path, config_hash="abc") is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.endswith("(unreadable: checkpoint.pt: it holds objects a safe (weights-only) load refuses; "
                         "delete it): training again from step 0"), line
    # torch's refusal of plain bytes says nothing a user can act on; any other failure names its first line
    not_one = "not a checkpoint (corrupt or another kind of file{}); delete it"
    assert checkpoint._reason(RuntimeError("Weights only load failed. Bad magic.")) == not_one.format("")
    assert checkpoint._reason(ValueError("bad key\nmore")) == not_one.format(": ValueError: bad key")
    assert checkpoint._reason(EOFError()) == not_one.format(": EOFError: ?")
    assert checkpoint._reason(OSError("x" * 300)) == not_one.format((": OSError: " + "x" * 300)[:120])
