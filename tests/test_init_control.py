"""The init-only control's reading (mbexp/analysis/init_control.py, docs/results.md): the gated FFN's paired Δ
against ReLU with the init scaled beside its SP twin, matched on size, LR, budget and seed."""

import json
from pathlib import Path

import pytest

from mbexp.analysis import init_control
from mbexp.claims.vocabulary import NOT_RESOLVED


def write(results: Path, experiment: str, losses: dict, *, lr=3e-3, steps=600) -> None:
    """losses: (model, ffn) -> {seed: final test loss}."""
    for (model, ffn), by_seed in losses.items():
        for seed, loss in by_seed.items():
            variant = f"layer-pre-{ffn}-matched-{model}-{lr}-{steps}"
            run = results / "runs" / experiment / variant / f"seed={seed}"
            run.mkdir(parents=True)
            identity = {"ffn.name": ffn, "norm.name": "layer", "placement.name": "pre", "hidden.name": "matched",
                        "model.name": model, "model.d_model": 64, "optim.lr": lr, "train.steps": steps}
            (run / "summary.json").write_text(json.dumps({
                "status": "completed", "experiment": experiment, "variant": variant,
                "row": f"layer-pre-{ffn}-matched-{model}", "row_id": f"{ffn}{model}", "seed": seed,
                "axes": {"norm": "layer", "placement": "pre", "ffn": ffn, "hidden": "matched", "warmup_steps": 30},
                "identity": identity, "steps": steps, "step": steps, "params": 10**6,
                "params_non_embedding": 10**5, "d_ff": 256, "flops_per_token": 10**6, "tokens_seen": steps * 2048,
                "early_val_loss": 6.0, "final_val_loss": loss, "final_val_bpb": loss / 3, "final_test_loss": loss,
                "tokens_per_s": 1000.0}))


SP = {("ladder160", "relu"): {201: 5.00, 202: 5.10, 203: 4.90},
      ("ladder160", "geglu"): {201: 5.20, 202: 5.31, 203: 5.09}}  # deficit +0.2 (±0.01)


def test_the_change_is_paired_by_seed_against_the_sp_twin(tmp_path):
    write(tmp_path, "ladder_wsd_cpu", SP)
    write(tmp_path, "ladder_wsd_cpu", SP, lr=2e-3)  # another LR of the twin: not the control's cell
    write(tmp_path, "init_control_cpu", {("ladder160", "relu"): {201: 5.0, 202: 5.1, 203: 4.9},
                                         ("ladder160", "geglu"): {201: 5.05, 202: 5.16, 203: 4.94}})
    [row] = init_control.control_rows(tmp_path)
    assert (row["model"], row["steps"], row["ffn"], row["seeds"]) == ("ladder160", 600, "geglu", [201, 202, 203])
    assert row["delta_sp"] == pytest.approx(0.20)
    assert row["delta_scaled"] == pytest.approx(0.05)
    iv = row["change"]
    assert iv.method == "paired" and iv.delta == pytest.approx(-0.15) and iv.high < 0
    assert "the deficit shrinks" in init_control.control_markdown([row])


def test_a_change_within_seed_noise_is_not_resolved_and_no_control_no_section(tmp_path):
    assert init_control.control_rows(tmp_path) == []
    write(tmp_path, "ladder_wsd_cpu", SP)
    write(tmp_path, "init_control_cpu", {("ladder160", "relu"): {201: 5.0, 202: 5.1, 203: 4.9},
                                         ("ladder160", "geglu"): {201: 5.25, 202: 5.25, 203: 5.11}})
    [row] = init_control.control_rows(tmp_path)
    assert row["change"].low < 0 < row["change"].high
    assert f"| {NOT_RESOLVED} |" in init_control.control_markdown([row])
