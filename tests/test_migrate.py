"""Legacy compatibility: the identity's hash rules and `upgrade` of schema-1 summaries and checkpoints."""

import json
from pathlib import Path

import pytest

from mbexp.run import migrate

REPO = Path(__file__).resolve().parent.parent


def test_a_key_added_later_leaves_the_identity_at_its_old_value_only():
    old = migrate.recorded_identity({"compile": "true", "data": {"test_fraction": 0.0}, "model": {"bias": False}})
    assert old == {"data": {}, "model": {}}, "compile and the legacy values are not recorded"
    new = migrate.recorded_identity({"data": {"test_fraction": 0.05}, "model": {"bias": True}})
    assert new == {"data": {"test_fraction": 0.05}, "model": {"bias": True}}


def test_bf16_hashes_as_the_auto_of_schema_1_and_auto_is_refused():
    assert migrate.hashed_identity({"precision": "bf16"}) == {"precision": "auto", "compile": False}
    assert migrate.hashed_identity({"precision": "fp32"}) == {"precision": "fp32", "compile": False}
    with pytest.raises(ValueError, match="must be resolved"):
        migrate.hashed_identity({"precision": "auto"})


def test_a_schema_1_summary_records_the_precision_it_computed_with():
    old = {"precision": "bf16", "identity": {"precision": "auto", "optim.lr": 0.003}, "status": "completed"}
    new = migrate.upgrade("summary", old)
    assert new["identity"] == {"precision": "bf16", "optim.lr": 0.003}
    assert new["schema"] == migrate.SCHEMA and new["declarations"] == {}
    assert old["identity"]["precision"] == "auto", "the caller's dict is left alone"
    assert migrate.upgrade("summary", new) == new, "a current summary is unchanged"
    legacy = migrate.upgrade("summary", {"precision": "bf16", "row_id": "abc"})  # before identity existed
    assert "identity" not in legacy


def test_a_schema_1_checkpoint_timed_every_step():
    state = migrate.upgrade("checkpoint", {"step": 40, "metrics": []})
    assert (state["timed_steps"], state["warmup_steps"], state["warmup_s"]) == (40, 0, 0.0)
    assert state["declarations"] == {} and state["schema"] == migrate.SCHEMA
    kept = migrate.upgrade("checkpoint", {"step": 40, "timed_steps": 39, "warmup_steps": 1, "warmup_s": 2.0})
    assert (kept["timed_steps"], kept["warmup_steps"], kept["warmup_s"]) == (39, 1, 2.0)
    with pytest.raises(ValueError, match="unknown run file kind"):
        migrate.upgrade("config", {})


def test_no_committed_summary_hashes_precision_auto():
    paths = sorted((REPO / "results" / "runs").rglob("summary.json"))
    assert paths
    for path in paths:
        summary = json.loads(path.read_text())
        assert summary.get("identity", {}).get("precision") != "auto", path
        assert summary == migrate.upgrade("summary", summary), f"{path} is not at schema {migrate.SCHEMA}"


def test_a_recorded_value_beats_the_legacy_default():
    assert migrate.identity_values({"model.bias": True})["model.bias"] is True
    assert migrate.identity_values({})["model.bias"] is False
