"""Progress output: a bar on a terminal, plain lines in a log file."""

import io
import subprocess
import sys

import pytest
from tiny import REPO, clean, overrides

from mbexp.progress import PlainProgress, progress_bar


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
