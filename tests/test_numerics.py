"""What a run computed with is its identity: fp32 and bf16 runs of one config are two runs and two table rows."""

import json

import torch
from tiny import clean, model_forwards, overrides

from mbexp.analysis import render, table
from mbexp.config import compose_config
from mbexp.data import Batches
from mbexp.run.summary import FIELDS
from mbexp.trainer import evaluate, train

SHORT = ["train.steps=6", "train.eval_every=3", "train.log_every=3", "device=cpu", "compile=false"]


def test_fp32_and_bf16_runs_of_one_config_are_two_directories_and_two_rows(tmp_path, cache):
    dirs = {}
    for precision in ("fp32", "bf16"):
        summary = train(compose_config(clean(overrides(tmp_path, cache, *SHORT, f"precision={precision}"))))
        assert summary["status"] == "completed" and summary["precision"] == precision
        assert summary["identity"]["precision"] == precision
        assert list(summary) == list(FIELDS), "the summary is a RunSummary"
        dirs[precision] = summary["variant"]
        on_disk = json.loads(next((tmp_path / "results/runs").rglob(f"{summary['variant']}/*/summary.json"))
                             .read_text())
        assert on_disk["row_id"] == summary["row_id"]
    assert dirs["fp32"] != dirs["bf16"]
    built = table.build_tables(tmp_path / "results")["default"]
    assert sorted(built.rows["label"]) == ["layer-pre-relu-matched (precision=bf16)",
                                           "layer-pre-relu-matched (precision=fp32)"]
    text = render.to_markdown(built)
    assert "Precision differs between rows (bf16, fp32): compare rows of one precision." in text


def test_a_rerun_under_precision_auto_finds_the_run_of_what_auto_resolves_to(tmp_path, cache, caplog):
    first = train(compose_config(clean(overrides(tmp_path, cache, *SHORT, "precision=bf16"))))
    caplog.set_level("INFO", logger="mbexp")
    again = train(compose_config(clean(overrides(tmp_path, cache, *SHORT, "precision=auto"))))
    resolved = again["precision"]
    assert again["identity"]["precision"] == resolved != "auto"
    assert (again == first) == (resolved == "bf16"), "skipped only where auto resolves to the precision it ran"


def test_a_bf16_run_scores_validation_and_test_under_bf16_as_it_trains(tmp_path, cache, bigtxt_tokens):
    """A bf16 run's validation and test losses are its model's under bf16 autocast, not the fp32 losses of the same
    weights."""
    models = []
    with model_forwards(lambda model, inputs: models.append(model) if not models else None):
        summary = train(compose_config(clean(overrides(tmp_path, cache, *SHORT, "precision=bf16"))))
    batches = Batches(bigtxt_tokens, seq_len=32, batch_size=8, seed=0, val_windows=16)  # the smoke run's windows
    for split in ("val", "test"):
        bf16, fp32 = (evaluate(models[0], batches, torch.device("cpu"), p, 8, split) for p in ("bf16", "fp32"))
        assert (summary[f"final_{split}_loss"], summary[f"final_{split}_bpb"]) == bf16 != fp32, split
