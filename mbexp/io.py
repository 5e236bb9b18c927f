"""Run files, torch-free: atomic writes (a reader sees the old file or the new one, never half of one),
run summaries and their finished statuses, and the file lock that keeps two processes apart."""

import errno
import fcntl
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) for a temporary file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    full = False
    with named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from the rest of a team
            os.replace(tmp, path)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            # torch.save on a full disk raises a RuntimeError ("unexpected pos 576 vs 534"): raised below, outside
            # this block, so that its traceback (whose frames hold the writer's open file, and so the space) goes
            full = isinstance(err, Exception) and not isinstance(err, OSError) and disk_full(path.parent, 0)
            if not full:
                raise
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def disk_full(folder: Path, room: int = 1 << 20) -> bool:
    """Whether the file system of `folder` has no more than `room` bytes left."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize <= room


# the errors of a disk that takes no more writes: full, over quota, read-only, not ours
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


@contextmanager
def named(path: str | Path):
    """Give an OSError raised in the block the file name `path` when it has none (a write() or fsync() on a full
    disk names no file), so the one line that reports it can say where."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise


def write_error(err: BaseException) -> str | None:
    """`cannot write PATH: STRERROR (ERRNO)` for an OSError of a disk that takes no more writes, also one that
    another error wraps (datasets' DatasetGenerationError), else None."""
    for _ in range(8):  # the chain of causes is short; never follow a cycle
        if err is None or isinstance(err, OSError) and err.errno in WRITE_ERRNOS:
            break
        err = err.__cause__ or err.__context__
    if err is None or not isinstance(err, OSError) or err.errno not in WRITE_ERRNOS:
        return None
    return f"cannot write {err.filename or '?'}: {err.strerror} ({errno.errorcode[err.errno]})"


def finite(obj):
    """`obj` for strict JSON: a NaN or infinite float becomes null, and its dict says why in `nonfinite`
    ({"early_val_loss": "nan"}); a float inside a list becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: finite(v) for k, v in obj.items()}
    why = {k: str(v) for k, v in obj.items() if isinstance(v, float) and not math.isfinite(v)}
    return out | {"nonfinite": why} if why else out


def json_line(record: dict) -> str:
    """One line of a .jsonl file, strict JSON."""
    return json.dumps(finite(record), allow_nan=False) + "\n"


def write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj) -> None:
    write_text(path, json.dumps(finite(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_yaml(text: str):
    """`text` as yaml.safe_load reads it, through libyaml where PyYAML was built with it: the same values in about a
    tenth of the time (make table and make report read every version of the claims file in git)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


# a run's statuses, in the order a table prefers them for one seed (the last wins); the finished ones a rerun
# skips and a table counts
STATUSES = ("running", "interrupted", "failed", "diverged", "completed")
# a run folder's files (docs/runs.md): its summary, its metrics records, its resolved config
SUMMARY, METRICS, CONFIG = "summary.json", "metrics.jsonl", "config.yaml"
FINISHED = STATUSES[-2:]


class SummaryError(ValueError):
    """A summary.json that cannot be read; the message names the path."""


def read_regular(path: str | Path) -> bytes:
    """The bytes of the regular file `path`, never waiting on a FIFO: it is opened without blocking and checked
    before the read. A folder raises EISDIR, a FIFO, socket or device EINVAL, each naming `path`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def read_summary(path: str | Path, *, strict: bool = False) -> dict | None:
    """The summary.json at `path` (the file or its run directory): None when it is missing or unreadable,
    or with strict=True a SummaryError that names the file."""
    path = Path(path)
    if path.name != SUMMARY and path.is_dir():
        path = path / SUMMARY
    try:
        summary = json.loads(read_regular(path).decode("utf-8"))
    except OSError as err:
        problem = f"unreadable ({err.strerror}, {errno.errorcode.get(err.errno, err.errno)})"
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = f"unreadable JSON ({err})"
    else:
        problem = None if isinstance(summary, dict) else "not a JSON object"
    if problem is None:
        return summary
    if strict:
        raise SummaryError(f"{path}: {problem}")
    return None


def is_number(value) -> bool:
    """An int or float, not a bool: a number as a run file records one."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value) -> bool:
    """An int, not a bool (YAML's and JSON's true is an int to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


@contextmanager
def file_lock(path: str | Path, *, wait: bool = True, note: str | None = None):
    """An exclusive lock on the file `path` (created if missing) for the with-block; the OS drops it when the
    process dies. wait=False raises BlockingIOError at once if another process holds it; `note` is written
    into the file once it is held (who holds it)."""
    path = Path(path)
    with named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")  # noqa: SIM115 - closed below, where a full disk's second failure is ignored
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        try:
            if note is not None:
                with named(path):  # a full disk fails this write with no file name
                    f.seek(0)
                    f.truncate()
                    f.write(note)
                    f.flush()
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        with suppress(OSError):  # a note the disk did not take fails its flush once more on close
            f.close()
