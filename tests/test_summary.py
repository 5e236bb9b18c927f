"""The run summary contract: one dataclass that the run writes and `make table` reads."""

import json
from dataclasses import asdict, fields
from pathlib import Path

from mbexp.analysis import collect
from mbexp.run.migrate import SCHEMA, upgrade
from mbexp.run.summary import FIELDS, NUMBERS, RunSummary

REPO = Path(__file__).resolve().parent.parent


def test_the_reader_names_only_fields_of_the_summary():
    assert set(collect.STRINGS + collect.NUMBERS + collect.NUMERICS) <= set(FIELDS)
    assert set(NUMBERS) <= set(collect.NUMBERS), "every number of the summary reaches the table's records"


def test_a_new_summary_carries_its_schema_and_empty_declarations():
    s = asdict(RunSummary(status="running", experiment="e", variant="v", row="r", row_id="x", seed=0,
                          config_hash="h", axes={}))
    assert s["schema"] == SCHEMA and s["declarations"] == {} and list(s) == [f.name for f in fields(RunSummary)]
    assert upgrade("summary", s) == s


def test_every_committed_summary_reads_as_a_run_summary():
    paths = sorted((REPO / "results" / "runs").rglob("summary.json"))
    assert len(paths) > 100
    for path in paths:
        summary = RunSummary(**upgrade("summary", json.loads(path.read_text())))
        # runs launched before any claim was declared record none; a declared study's runs record its claims'
        assert summary.schema == SCHEMA and isinstance(summary.declarations, dict), path
        assert all(isinstance(d, str) and len(d) == 12 for d in summary.declarations.values()), path


def test_declarations_are_kept_through_a_checkpoint(tmp_path):
    import torch

    from mbexp.config import Config
    from mbexp.distributed import Dist
    from mbexp.run import checkpoint
    from mbexp.run.state import RunState

    class Batches:
        def state(self):
            return {"position": 3}

    cfg = Config(precision="fp32")
    run = RunState(cfg, tmp_path, "h", Dist())
    run.declarations = {"claim-a": "sha256:0123"}
    model = torch.nn.Linear(2, 2)
    run.checkpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), Batches())
    resumed = RunState(cfg, tmp_path, "h", Dist())
    resumed.restore(checkpoint.load(tmp_path, config_hash="h"))
    assert resumed.declarations == {"claim-a": "sha256:0123"}
    assert resumed.write_summary("interrupted")["declarations"] == {"claim-a": "sha256:0123"}
