"""A run's progress: a tqdm bar on a terminal, plain periodic lines otherwise (a log file gets no carriage
returns)."""

import sys
import time

from tqdm.auto import tqdm

PLAIN_EVERY_S = 30.0  # off a terminal: one line at most this often


class PlainProgress:
    """The part of tqdm's interface the trainer uses, written as a plain line every `every_s` seconds."""

    def __init__(self, total: int, *, initial: int = 0, desc: str = "", every_s: float = PLAIN_EVERY_S,
                 file=None):
        self.total, self.n, self.desc, self.every_s = total, initial, desc, every_s
        self.file = sys.stderr if file is None else file
        self.postfix: dict = {}
        self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            self.file.write(self.line() + "\n")
            self.file.flush()

    def set_postfix(self, **values) -> None:
        self.postfix = values

    def line(self) -> str:
        """`<desc>: step n/total loss ... tok_s ...` from the last values given."""
        return f"{self.desc}: step {self.n}/{self.total}" + "".join(f" {k} {v}" for k, v in self.postfix.items())

    def close(self) -> None:
        pass


def progress_bar(total: int, *, initial: int, desc: str, enabled: bool, file=None):
    """A tqdm bar when `file` (stderr by default) is a terminal, else a PlainProgress; a silent one if not enabled."""
    file = sys.stderr if file is None else file
    if enabled and not file.isatty():
        return PlainProgress(total, initial=initial, desc=desc, file=file)
    return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=1.0, file=file,
                disable=not enabled)
