"""Run files, torch-free: atomic writes (a reader sees the old file or the new one, never half of one),
run summaries and their finished statuses, and the file lock that keeps two processes apart."""

import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) for a temporary file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from the rest of a team
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


FINISHED = ("completed", "diverged")  # run statuses that a rerun skips and that a table counts


class SummaryError(ValueError):
    """A summary.json that cannot be read; the message names the path."""


def read_summary(path: str | Path, *, strict: bool = False) -> dict | None:
    """The summary.json at `path` (the file or its run directory): None when it is missing or unreadable,
    or with strict=True a SummaryError that names the file."""
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        if strict:
            raise SummaryError(f"{path}: unreadable JSON ({err})") from None
        return None
    if not isinstance(summary, dict):
        if strict:
            raise SummaryError(f"{path}: not a JSON object")
        return None
    return summary


@contextmanager
def file_lock(path: str | Path, *, wait: bool = True, note: str | None = None):
    """An exclusive lock on the file `path` (created if missing) for the with-block; the OS drops it when the
    process dies. wait=False raises BlockingIOError at once if another process holds it; `note` is written
    into the file once it is held (who holds it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        try:
            if note is not None:
                f.seek(0)
                f.truncate()
                f.write(note)
                f.flush()
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
