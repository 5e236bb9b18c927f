"""Progress output: a bar on a terminal, plain lines in a log file."""

import io
import os
import signal
import subprocess
import sys
from functools import partial

import pytest
from tiny import REPO, clean, during_step, metrics, overrides

from mbexp import progress
from mbexp.config import compose_config, to_object
from mbexp.progress import PlainProgress, progress_bar
from mbexp.run.identity import run_dir
from mbexp.trainer import train

SHORT = ["train.steps=4", "train.log_every=2", "train.eval_every=4", "device=cpu"]


def test_off_a_terminal_the_progress_is_plain_lines():
    out = io.StringIO()
    assert isinstance(progress_bar(10, initial=0, desc="v", enabled=True, file=out), PlainProgress)
    bar = PlainProgress(10, initial=2, desc="v", every_s=0.0, file=out)
    bar.update()
    bar.set_postfix(loss="5.000", tok_s="1,234")
    bar.update()
    bar.close()
    assert out.getvalue() == "v: step 3/10\nv: step 4/10 loss 5.000 tok_s 1,234\n"


@pytest.mark.parametrize("corpus", ["bigtxt", "text"])
def test_a_run_logged_to_a_file_writes_no_carriage_returns(tmp_path, cache, corpus):
    text_corpus = tmp_path / "corpus.txt"  # datasets' text loader draws a bar of its own
    text_corpus.write_text("\n\n".join(f"Paragraph {i} talks about the number {i}." for i in range(600)))
    extra = ["data=text", f"data.path={text_corpus}"] if corpus == "text" else []
    args = clean(overrides(tmp_path, cache, "train.progress=true", *extra))
    log = tmp_path / "log"
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "mbexp.train", *args], cwd=REPO, stdout=f,
                              stderr=subprocess.STDOUT, timeout=300)
    text = log.read_bytes()  # bytes: reading text would turn each \r into \n
    assert proc.returncode == 0, text
    assert b"completed at step 30" in text
    assert b"\r" not in text


def progress_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": step " in line]


def test_a_runs_progress_counts_its_steps_under_its_variant_with_the_last_timed_log_values(tmp_path, cache, capsys,
                                                                                          monkeypatch):
    """Each step reads `<variant>: step n/steps`, then the loss, lr and tokens/s of the last log line that timed a
    step (a process's first step is warm-up: the log line at step 2 is the first with tokens/s)."""
    monkeypatch.setattr(progress, "PlainProgress", partial(PlainProgress, every_s=0.0))  # a line every step
    cfg = compose_config(clean(overrides(tmp_path, cache, *SHORT, "train.progress=true")))
    variant = train(cfg)["variant"]
    at_2 = next(r for r in metrics(run_dir(to_object(cfg))) if "train_loss" in r)
    values = f" loss {at_2['train_loss']:.3f} lr {at_2['lr']:.2e} tok_s {at_2['tokens_per_s']:,.0f}"
    assert progress_lines(capsys.readouterr().err) == [
        f"{variant}: step 1/4", f"{variant}: step 2/4", f"{variant}: step 3/4{values}", f"{variant}: step 4/4{values}"]


def test_progress_false_shows_none_and_a_resumed_run_counts_on_from_its_step(tmp_path, cache, capsys, monkeypatch):
    """train.progress=false writes no progress line; a run resumed at step 2 of 4 shows steps 3/4 and 4/4."""
    monkeypatch.setattr(progress, "PlainProgress", partial(PlainProgress, every_s=0.0))
    args = clean(overrides(tmp_path, cache, *SHORT, "train.checkpoint_every=100"))
    with during_step(2, lambda: os.kill(os.getpid(), signal.SIGTERM)), pytest.raises(KeyboardInterrupt):
        train(compose_config([*args, "train.progress=false"]))
    assert progress_lines(capsys.readouterr().err) == []
    variant = train(compose_config([*args, "train.progress=true"]))["variant"]
    assert progress_lines(capsys.readouterr().err) == [f"{variant}: step 3/4", f"{variant}: step 4/4"]
