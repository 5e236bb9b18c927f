"""Read an offline W&B run back from disk: the .wandb file is a LevelDB-style log of protobuf records."""

import json
import struct
import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32 * 1024
HEADER = 7  # ':W&B', magic (2 bytes), version (1 byte)


def records(path: Path) -> list[pb.Record]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    out, pos, pending = [], HEADER, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # trailer too small for a header: skip to the next block
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        payload = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def read_run(run_dir: Path) -> dict:
    """The run record's id, group, job type, tags, config, history rows and exit code."""
    (log_file,) = Path(run_dir).glob("run-*.wandb")
    run = {"config": {}, "history": [], "exit_code": None}
    for record in records(log_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.update(id=r.run_id, group=r.run_group, job_type=r.job_type, tags=list(r.tags), name=r.display_name)
            run["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "config":
            run["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            items = record.history.item
            run["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run


def offline_runs(wandb_dir: Path, wait_s: float = 60.0, killed: int = 0) -> list[dict]:
    """Every offline run under `wandb_dir`, each read once its log holds the exit record: W&B's service process
    writes the log behind the run, and on a loaded machine a read right after `finish` can meet its unwritten end.
    `killed`: how many were killed (SIGKILL) and never get one."""
    deadline = time.monotonic() + wait_s
    while True:
        runs = [read_run(d) for d in sorted(Path(wandb_dir).glob("wandb/offline-run-*"))]
        if sum(r["exit_code"] is None for r in runs) <= killed or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)
