"""Real training runs on the CPU: reproducibility, run files, W&B, divergence, interruption; and the rules a run
trains and scores by: where weight decay falls, bits per byte."""

import json
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import statistics
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tiny import (
    clean,
    compile_capturing,
    during_step,
    losses,
    mbexp_train,
    metrics,
    model_forwards,
    overrides,
    popen_train,
)
from wandb_files import offline_runs

from mbexp import distributed, trainer
from mbexp.config import compose_config, model_spec, to_object
from mbexp.data import Batches, prepare
from mbexp.model import DecoderLM
from mbexp.run import checkpoint
from mbexp.run.identity import run_dir
from mbexp.schedule import lr_at
from mbexp.trainer import evaluate, make_optimizer, train

SUMMARY_FIELDS = {
    "status", "experiment", "variant", "seed", "params", "params_non_embedding", "params_ffn", "d_ff",
    "early_step", "early_val_loss", "early_val_bpb", "final_val_loss", "final_val_bpb", "tokens_seen",
    "wall_time_s", "tokens_per_s", "git_commit", "versions", "config_hash", "axes", "row", "row_id",
    "final_test_loss", "final_test_bpb", "final_train_loss", "generalization_gap", "epochs", "train_tokens",
    "tokens_per_s_median", "flops_per_token", "early_tokens", "identity",
}


def run(tmp, cache, *extra, logger="none"):
    cfg = compose_config(clean(overrides(tmp, cache, *extra, logger=logger)))
    return train(cfg), run_dir(to_object(cfg))


def test_same_seed_same_losses_other_seed_differs(tmp_path, cache):
    # the promise is bit-exact on the CPU; CUDA kernels are not deterministic, so a GPU machine runs this on its CPU
    s1, d1 = run(tmp_path / "a", cache, "seed=3", "device=cpu")
    s2, d2 = run(tmp_path / "b", cache, "seed=3", "device=cpu")
    s3, d3 = run(tmp_path / "c", cache, "seed=4", "device=cpu")
    assert losses(d1) == losses(d2)
    assert s1["final_val_loss"] == s2["final_val_loss"]
    assert losses(d1)[0] != losses(d3)[0]
    assert s1["final_val_loss"] != s3["final_val_loss"]


def test_summary_matches_metrics(tmp_path, cache):
    summary, directory = run(tmp_path, cache, "ffn=swiglu", "norm=rms")
    on_disk = json.loads((directory / "summary.json").read_text())
    assert on_disk == summary
    assert SUMMARY_FIELDS <= set(summary)
    assert summary["status"] == "completed" and summary["step"] == summary["steps"] == 30
    evals = [r for r in metrics(directory) if "val_loss" in r]
    trains = [r for r in metrics(directory) if "train_loss" in r]
    assert [r["step"] for r in evals] == [3, 10, 20, 30]  # early = 30 // 8, then every eval_every
    assert summary["early_step"] == 3 and summary["early_val_loss"] == evals[0]["val_loss"]
    assert summary["final_val_loss"] == evals[-1]["val_loss"]
    assert summary["final_val_bpb"] == evals[-1]["val_bpb"]
    assert [r["step"] for r in trains] == [5, 10, 15, 20, 25, 30]
    assert summary["tokens_seen"] == 30 * 8 * 32 == trains[-1]["tokens"]
    assert summary["d_ff"] == round(8 * 32 / 3)  # gated FFN under hidden=matched
    assert summary["axes"] == {"norm": "rms", "placement": "pre", "ffn": "swiglu", "hidden": "matched",
                               "warmup_steps": 5}
    assert summary["final_val_loss"] < summary["early_val_loss"] < math.log(512) * 1.05
    assert directory.parts[-3:] == ("default", summary["variant"], "seed=0")
    assert (directory / "config.yaml").read_text().count("swiglu") == 1
    assert not list(directory.glob("checkpoint*")), "a completed run keeps no checkpoint"
    assert all(r["lr"] > 0 and math.isfinite(r["grad_norm"]) for r in trains)


def test_final_evaluation_scores_the_held_out_test_split_once(tmp_path, cache, caplog):
    caplog.set_level(logging.INFO)
    summary, directory = run(tmp_path, cache)
    assert (f"completed at step 30: val log-ppl {summary['final_val_loss']:.4f}, "
            f"test log-ppl {summary['final_test_loss']:.4f}") in caplog.text  # 4 decimals, not a full float
    tests = [r for r in metrics(directory) if "test_loss" in r]
    assert [r["step"] for r in tests] == [30]  # periodic evaluations stay on validation
    assert summary["final_test_loss"] == tests[0]["test_loss"] and summary["final_test_bpb"] == tests[0]["test_bpb"]
    assert summary["final_test_loss"] != summary["final_val_loss"]  # a different set of documents
    assert abs(summary["final_test_loss"] - summary["final_val_loss"]) < 0.5
    trains = [r for r in metrics(directory) if "train_loss" in r]
    assert summary["final_train_loss"] == trains[-1]["train_loss"]
    assert summary["generalization_gap"] == summary["final_train_loss"] - summary["final_val_loss"]
    data = prepare(to_object(compose_config(clean(overrides(tmp_path, cache)))).data, seq_len=32)
    assert summary["train_tokens"] == data.train.size
    assert summary["epochs"] == round(30 * 8 * 32 / data.train.size, 4)
    assert summary["early_tokens"] == 3 * 8 * 32
    assert summary["tokens_per_s_median"] == round(statistics.median(r["tokens_per_s"] for r in trains), 1)
    assert summary["declarations"] == {}  # no claims file in this results_dir
    assert summary["identity"]["data.test_fraction"] == 0.05 and "seed" not in summary["identity"]


def test_without_a_test_split_the_summary_has_no_test_numbers(tmp_path, cache, caplog):
    caplog.set_level(logging.INFO)
    summary, directory = run(tmp_path, cache, "data.test_fraction=0")
    assert summary["status"] == "completed" and summary["final_test_loss"] is None
    assert f"val log-ppl {summary['final_val_loss']:.4f}, test log-ppl —" in caplog.text
    assert not [r for r in metrics(directory) if "test_loss" in r]
    assert "data.test_fraction" not in summary["identity"]  # and so the run keeps its pre-test-split directory


def test_a_full_final_evaluation_without_a_test_split_scores_the_whole_validation_split_alone(tmp_path, cache):
    """train.final_eval=full where data.test_fraction=0: the whole validation split is scored, and no test split."""
    summary, directory = run(tmp_path, cache, "data.test_fraction=0", "train.final_eval=full", "train.steps=4",
                             "train.eval_every=4")
    last = metrics(directory)[-1]
    assert summary["status"] == "completed" and summary["final_val_loss"] == last["val_loss_full"]
    assert summary["final_val_bpb"] == last["val_bpb_full"] and summary["final_test_loss"] is None
    assert sorted(k for k in last if k.endswith("_full")) == ["val_bpb_full", "val_loss_full"]


def test_wandb_offline_run_read_back_from_disk(tmp_path, cache):
    summary, directory = run(tmp_path, cache, "ffn=geglu", "seed=7", logger="wandb")
    (wb,) = offline_runs(tmp_path)
    assert wb["config"]["ffn"] == {"name": "geglu", "gelu": "exact"} and wb["config"]["norm"]["name"] == "layer"
    assert wb["config"]["seed"] == 7
    assert wb["group"] == summary["variant"] and wb["job_type"] == "default"
    assert "ffn=geglu" in wb["tags"] and wb["name"] == f"{summary['variant']}/seed=7"
    assert wb["exit_code"] == 0
    train_rows = [h for h in wb["history"] if "train_loss" in h]
    val_rows = [h for h in wb["history"] if "val_loss" in h]
    assert [h["train_loss"] for h in train_rows] == [r["train_loss"] for r in metrics(directory) if "train_loss" in r]
    assert val_rows[-1]["val_loss"] == summary["final_val_loss"]


@pytest.mark.slow
def test_absurd_lr_diverges_and_the_sweep_goes_on(tmp_path, cache):
    proc = mbexp_train(["-m", "optim.lr=1000,0.003", *overrides(tmp_path, cache)])
    assert proc.returncode == 0, proc.stderr
    by_lr = {}
    for path in (tmp_path / "results").glob("runs/**/summary.json"):
        s = json.loads(path.read_text())
        cfg = (path.parent / "config.yaml").read_text()
        by_lr["1000" if "lr: 1000" in cfg else "0.003"] = s
    assert by_lr["1000"]["status"] == "diverged" and by_lr["1000"]["final_val_loss"] is None
    assert by_lr["1000"]["step"] < 30
    assert by_lr["0.003"]["status"] == "completed"


DIVERGING = ["optim.lr=3", "optim.warmup_steps=0", "train.steps=4", "train.log_every=1", "train.eval_every=4"]


def test_a_finite_train_loss_above_the_threshold_diverges_at_once_and_says_why(tmp_path, cache, caplog):
    """A logged train loss above diverge_factor · ln(vocab), finite or not, ends the run there, unevaluated; the
    warning gives the loss and the threshold."""
    caplog.set_level(logging.WARNING)
    summary, directory = run(tmp_path, cache, *DIVERGING)
    ((step, loss),) = [(r["step"], r["train_loss"]) for r in metrics(directory)[-1:]]
    assert math.isfinite(loss) and loss > 1.5 * math.log(512)  # train.diverge_factor's default: 1.5
    assert summary["status"] == "diverged" and summary["step"] == step == 2
    assert summary["final_val_loss"] is None and [r["step"] for r in metrics(directory) if "val_loss" in r] == [1]
    assert [r.getMessage() for r in caplog.records] == [
        f"{summary['variant']} diverged at step 2 (train loss {loss} > {1.5 * math.log(512):.2f})"]


def test_a_train_loss_exactly_at_the_threshold_is_not_divergence(tmp_path, cache):
    """The run diverges on a train loss strictly above diverge_factor · ln(vocab); one equal to it trains on."""
    diverged, directory = run(tmp_path / "a", cache, *DIVERGING)
    loss = metrics(directory)[-1]["train_loss"]  # the loss of step 2, above the default threshold
    factor = loss / math.log(512)
    while factor * math.log(512) < loss:  # the factor whose threshold is that loss to the last bit
        factor = math.nextafter(factor, math.inf)
    while factor * math.log(512) > loss:
        factor = math.nextafter(factor, 0.0)
    assert factor * math.log(512) == loss, "no factor gives this loss exactly: choose another lr"
    summary, _ = run(tmp_path / "b", cache, *DIVERGING, "train.steps=2", "train.eval_every=2",
                     f"train.diverge_factor={factor!r}")
    assert diverged["status"] == "diverged" and diverged["step"] == 2
    assert summary["status"] == "completed" and summary["step"] == 2


@pytest.mark.slow
def test_sigint_leaves_metrics_a_non_completed_summary_and_a_finished_wandb_run(tmp_path, cache):
    args = clean(overrides(tmp_path, cache, "train.steps=100000", "train.checkpoint_every=50", logger="wandb"))
    proc = popen_train(args)
    deadline = time.time() + 120
    found = []
    while time.time() < deadline and not found:
        found = [p for p in (tmp_path / "results").glob("runs/**/metrics.jsonl") if p.read_text().count("\n") >= 3]
        time.sleep(0.2)
    assert found, "training never started"
    os.kill(proc.pid, signal.SIGINT)
    err, _ = proc.communicate(timeout=120)  # stdout and stderr together
    assert proc.returncode == 130, err
    directory = found[0].parent
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 0 < summary["step"] < 100000
    assert len(metrics(directory)) >= 3
    assert (directory / "checkpoint.pt").exists()
    (wb,) = offline_runs(tmp_path)
    assert wb["exit_code"] == 1, "the W&B run must be finished (with an error exit code)"
    assert "rerun the same command to resume" in err


def test_a_stop_mid_step_checkpoints_that_step_and_the_same_run_resumes_there(tmp_path, cache, caplog):
    """SIGTERM mid-step: the run finishes the step, checkpoints it, writes an `interrupted` summary and raises
    KeyboardInterrupt naming the signal; started again, it resumes from that step to an unstopped run's losses."""
    caplog.set_level(logging.INFO)
    short = ["train.steps=4", "train.log_every=1", "train.eval_every=4", "train.checkpoint_every=100"]
    cfg = compose_config(clean(overrides(tmp_path / "stopped", cache, *short)))
    directory = run_dir(to_object(cfg))
    with during_step(2, lambda: os.kill(os.getpid(), signal.SIGTERM)), pytest.raises(KeyboardInterrupt) as stopped:
        train(cfg)
    assert stopped.value.args == ("SIGTERM",)
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["step"] == 2
    assert checkpoint.load(directory, config_hash=summary["config_hash"])["step"] == 2
    assert train(cfg)["status"] == "completed" and f"resuming {directory} from step 2" in caplog.text
    _, unstopped = run(tmp_path / "unstopped", cache, *short)
    assert losses(directory) == losses(unstopped)


def test_tokens_per_s_leaves_out_the_warm_up_step_and_a_short_run_stays_eager(tmp_path, cache):
    summary, directory = run(tmp_path, cache, "train.steps=4", "train.log_every=1", "train.eval_every=4", "device=cpu")
    trains = [r for r in metrics(directory) if "train_loss" in r]
    assert [r["step"] for r in trains] == [1, 2, 3, 4]
    assert "tokens_per_s" not in trains[0]  # the first step of a process is warm-up (the compile, when compiled)
    assert all(r["tokens_per_s"] > 0 for r in trains[1:])
    assert summary["tokens_per_s"] > 0 and summary["tokens_seen"] == 4 * 8 * 32
    assert summary["compiled"] is False and summary["compile_s"] is None  # compile=auto: 4 CPU steps stay eager


@pytest.mark.parametrize("log_every", [1, 2])
def test_a_checkpoint_times_every_step_after_a_processs_first_once_within_the_runs_wall_time(tmp_path, cache,
                                                                                           log_every):
    """Stopped at step 4: one warm-up step and three timed ones (steps 2 to 4, each counted once whatever the log
    interval), whose seconds together are part of the run's wall time; a resumed run's tokens/s counts them."""
    cfg = compose_config(clean(overrides(tmp_path, cache, "train.steps=6", f"train.log_every={log_every}",
                                         "train.eval_every=6", "train.checkpoint_every=100", "device=cpu")))
    with during_step(4, lambda: os.kill(os.getpid(), signal.SIGTERM)), pytest.raises(KeyboardInterrupt):
        train(cfg)
    directory = run_dir(to_object(cfg))
    state = checkpoint.load(directory, config_hash=json.loads((directory / "summary.json").read_text())["config_hash"])
    assert state["step"] == 4 and state["warmup_steps"] == 1 and state["timed_steps"] == 3
    warm_up, timed = state["warmup_s"], state["train_time"]
    assert 0 < warm_up and 0 < timed and warm_up + timed < state["wall_time"]


def test_the_summary_names_the_device_the_run_computed_on(tmp_path, cache):
    """device=auto is resolved before the run starts: the summary names the device it trained on, not the setting."""
    summary, _ = run(tmp_path, cache, "device=auto", "train.steps=2", "train.eval_every=2")
    assert summary["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


def test_every_logged_lr_follows_the_schedule_with_its_warmup_and_floor(tmp_path, cache):
    """Record k (after optimiser step k − 1) logs lr_at(k − 1): the warm-up ramp, the cosine, the floor."""
    _, directory = run(tmp_path, cache, "train.steps=12", "train.log_every=1", "train.eval_every=12",
                       "optim.warmup_steps=4", "optim.lr=0.01", "optim.min_lr_ratio=0.25", "optim.schedule=cosine")
    logged = [(r["step"], r["lr"]) for r in metrics(directory) if "lr" in r]
    assert [s for s, _ in logged] == list(range(1, 13))
    expected = [lr_at(s - 1, lr=0.01, warmup_steps=4, total_steps=12, min_lr_ratio=0.25) for s, _ in logged]
    assert [lr for _, lr in logged] == pytest.approx(expected, rel=1e-12)
    # and by hand: the ramp 1/4 .. 4/4 of the peak, then the cosine down to the floor 0.25 · 0.01 at the last step
    assert [lr for _, lr in logged[:4]] == pytest.approx([0.0025, 0.005, 0.0075, 0.01])
    assert logged[6][1] == pytest.approx(0.0025 + 0.0075 * 0.5 * (1 + math.cos(math.pi * 2 / 7)))
    assert logged[-1][1] == pytest.approx(0.0025)


def test_a_run_past_one_epoch_says_so_before_it_trains(tmp_path, cache, caplog):
    """A run that reads its training split more than once warns, with how many times, the split's tokens and the
    corpus; one that reads it exactly once is not past one epoch and says nothing."""
    caplog.set_level(logging.WARNING)
    small = ["data.max_docs=200", "optim.warmup_steps=0"]  # a small corpus, so that one step can read all of it
    n = prepare(to_object(compose_config(clean(overrides(tmp_path, cache, *small)))).data, seq_len=32).train.size
    seq_len = min(d for d in range(8, 1000) if n % d == 0)  # a step of n // seq_len windows reads n tokens
    whole = [*small, f"model.seq_len={seq_len}", f"train.batch_size={n // seq_len}"]
    once = train(compose_config(clean(overrides(tmp_path / "a", cache, *whole, "train.steps=1"))))
    assert once["epochs"] == 1 and not caplog.records
    twice = train(compose_config(clean(overrides(tmp_path / "b", cache, *whole, "train.steps=2"))))
    assert twice["epochs"] == 2 and [r.getMessage() for r in caplog.records] == [
        f"this run reads its training split 2.0 times ({n} training tokens in data=bigtxt): past one epoch"]


def test_full_final_evaluation_scores_every_token_of_both_splits(tmp_path, cache, bigtxt_tokens):
    summary, directory = run(tmp_path, cache, "train.final_eval=full")
    last = metrics(directory)[-1]
    # the summary's final losses are the whole splits'; the curve keeps the fixed windows
    assert summary["final_val_loss"] == last["val_loss_full"] != last["val_loss"]
    assert summary["final_test_loss"] == last["test_loss_full"] != last["test_loss"]
    assert summary["final_test_bpb"] == last["test_bpb_full"]
    assert summary["identity"]["train.final_eval"] == "full"
    # every window of 33 tokens at a stride of 32: each token after the first predicted once
    batches = Batches(bigtxt_tokens, seq_len=32, batch_size=8, seed=0, val_windows=4)
    ys = torch.cat([y.flatten() for _, y in batches.val_batches(64, "test", whole=True)])
    n = (bigtxt_tokens.test.size - 1) // 32
    assert ys.numel() == n * 32 and torch.equal(ys, torch.from_numpy(bigtxt_tokens.test[1:n * 32 + 1].astype("int64")))
    windows, _ = run(tmp_path / "w", cache)
    assert "train.final_eval" not in windows["identity"]  # the default keeps every committed run's directory
    assert abs(windows["final_test_loss"] - summary["final_test_loss"]) < 0.2


class Uniform(torch.nn.Module):
    """A model that spreads its probability evenly over the vocabulary: ln(vocab) nats on every token."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, x):
        return torch.zeros(*x.shape, self.vocab), None  # (B, T, vocab)


def test_bits_per_byte_is_the_loss_in_bits_over_the_bytes_the_tokens_stand_for():
    """Vocabulary 8 at 3 bits a token, 16 tokens of 2 bytes each: 1.5 bits per byte, log-ppl ln 8 nats."""
    y = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7]] * 2)
    batches = SimpleNamespace(val_batches=lambda size, split, whole=False: iter([(y, y)]),
                              bytes_per_token=np.full(8, 2))
    loss, bpb = evaluate(Uniform(8), batches, torch.device("cpu"), "fp32", batch_size=2)
    assert loss == pytest.approx(math.log(8)) and bpb == pytest.approx(1.5)


def test_weight_decay_falls_on_matrices_and_embeddings_never_on_norm_gains_or_biases():
    cfg = to_object(compose_config(["model.d_model=32", "model.n_layers=2", "model.bias=true", "norm.bias=true"]))
    model = DecoderLM(model_spec(cfg, 64))
    optim = SimpleNamespace(name="adamw", lr=1e-3, betas=[0.9, 0.95], weight_decay=0.1)
    decay = {id(p): g["weight_decay"] for g in make_optimizer(model, optim, torch.device("cpu")).param_groups
             for p in g["params"]}
    named = dict(model.named_parameters())
    exempt = {n for n in named if n.endswith(".bias") or "norm" in n}
    assert any(n.endswith("norm1.bias") for n in exempt) and any(n.endswith("qkv.bias") for n in exempt)
    assert {n: decay[id(p)] for n, p in named.items()} == {n: 0.0 if n in exempt else 0.1 for n in named}


def test_z_loss_is_logged_apart_and_train_loss_stays_the_cross_entropy(tmp_path, cache):
    """At the first log line log Z is still near ln(vocab): the logged z term is z * log^2 Z, and only there."""
    _, plain = run(tmp_path / "a", cache, "device=cpu")
    _, with_z = run(tmp_path / "b", cache, "device=cpu", "train.z_loss=1e-3")
    trains = [r for r in metrics(with_z) if "train_loss" in r]
    assert all("z_loss" not in r for r in metrics(plain))
    assert 0.5 < trains[0]["z_loss"] / (1e-3 * math.log(512) ** 2) < 2
    assert all(r["z_loss"] > 0 for r in trains)
    # the cross-entropy alone: within z_loss of the run without it at the first log line, not above it by z_loss
    first_plain = next(r for r in metrics(plain) if "train_loss" in r)
    assert abs(trains[0]["train_loss"] - first_plain["train_loss"]) < trains[0]["z_loss"] / 2


def test_a_learner_reads_its_ranks_shard_on_the_device_it_is_given(bigtxt_tokens, cache, tmp_path):
    """make_learner keeps the Dist it is given (a rank's own shard of the batches, not a fresh single-process one)
    and builds the model on the given device: the meta device stands in for a GPU."""
    from mbexp.distributed import Dist
    from mbexp.trainer import make_learner

    cfg = to_object(compose_config(clean(overrides(tmp_path, cache))))
    learner = make_learner(cfg, bigtxt_tokens, torch.device("cpu"), "fp32", Dist(rank=1, world_size=2))
    assert (learner.batches.rank, learner.batches.world_size) == (1, 2)
    assert make_learner(cfg, bigtxt_tokens, torch.device("cpu"), "fp32").batches.world_size == 1
    on_meta = make_learner(cfg, bigtxt_tokens, torch.device("meta"), "fp32")
    assert {p.device.type for p in on_meta.model.parameters()} == {"meta"}


@pytest.fixture
def rank_1_of_2(tmp_path):
    """Rank 1 of a 2-process DDP run, in a gloo group of this one process: what that rank computes and decides,
    without the other rank (its gradients are averaged over itself alone)."""
    import torch.distributed as dist

    from mbexp.distributed import Dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/gloo", rank=0, world_size=1)
    yield Dist(rank=1, world_size=2)
    dist.destroy_process_group()


def trained_rows(cfg, data, ddp) -> list[int]:
    """The run `cfg` trained by this rank (mbexp.trainer._train): the windows of each training forward pass."""
    from mbexp.run.identity import config_hash
    from mbexp.trainer import _train

    rows = []
    with model_forwards(lambda model, inputs: rows.append(len(inputs)) if model.training else None):
        summary = _train(cfg, data, run_dir(cfg), config_hash(cfg), torch.device("cpu"), ddp, {}, [])
    assert summary["status"] == "completed" and summary["step"] == cfg.train.steps
    return rows


def test_a_ddp_rank_computes_only_its_share_of_each_global_batch(tmp_path, cache, bigtxt_tokens, rank_1_of_2):
    """Rank 1 of 2 runs its model on batch_size / 2 windows a step, its slice of the global batch, not all of it."""
    cfg = to_object(compose_config(clean(overrides(tmp_path, cache, "train.steps=4"))))
    assert trained_rows(cfg, bigtxt_tokens, rank_1_of_2) == [cfg.train.batch_size // 2] * 4


def test_under_force_no_rank_resumes_the_checkpoint_rank_0_deletes(tmp_path, cache, bigtxt_tokens, rank_1_of_2):
    """force=true: rank 0 deletes the run's checkpoint, and rank 1, which may find it first, ignores it: it trains
    every step from step 0, as rank 0 does."""
    from mbexp.distributed import Dist
    from mbexp.run import checkpoint
    from mbexp.run.identity import config_hash
    from mbexp.run.state import RunState
    from mbexp.trainer import make_learner

    cfg = to_object(compose_config(clean(overrides(tmp_path, cache, "train.steps=4", "force=true"))))
    learner = make_learner(cfg, bigtxt_tokens, torch.device("cpu"), "fp32")
    stopped = RunState(cfg, run_dir(cfg), config_hash(cfg), Dist())
    stopped.step = 2  # the checkpoint of a run stopped at step 2
    checkpoint.save(run_dir(cfg), stopped.state(learner.model, learner.optimizer, learner.batches))
    assert len(trained_rows(cfg, bigtxt_tokens, rank_1_of_2)) == 4


def test_a_finished_run_is_skipped_without_waiting_for_its_lock(tmp_path, cache):
    # the first look needs no lock: a finished run held by another process's look is skipped, not reported busy
    from mbexp.distributed import Dist
    from mbexp.run.identity import RunLock, config_hash
    from mbexp.trainer import _run

    cfg = to_object(compose_config(clean(overrides(tmp_path, cache))))
    directory = run_dir(cfg)
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps({"status": "completed", "config_hash": config_hash(cfg)}))
    with RunLock(directory):
        done = _run(cfg, None, torch.device("cpu"), Dist(), {}, [])
    assert done == {"status": "completed", "config_hash": config_hash(cfg)}


def test_rank_0_alone_takes_the_runs_lock_and_clears_a_killed_writes_leftovers(tmp_path, cache, monkeypatch):
    """Rank 0 trains under the run's lock (busy while another process holds it) and first removes the temporary
    files a killed write left; the other ranks train under rank 0's lock and touch no file."""
    from mbexp import trainer
    from mbexp.distributed import Dist
    from mbexp.run.identity import RunLock

    monkeypatch.setattr(trainer, "_train", lambda *args: {"status": "trained"})
    cfg = to_object(compose_config(clean(overrides(tmp_path, cache))))
    directory = run_dir(cfg)
    directory.mkdir(parents=True)
    leftovers = [directory / ".summary.json.abc.tmp", directory / ".checkpoint.pt.def.tmp"]
    for path in leftovers:
        path.write_bytes(b"half")
    with RunLock(directory):
        assert trainer._run(cfg, None, torch.device("cpu"), Dist(1, 2), {}, []) == {"status": "trained"}
        assert all(path.exists() for path in leftovers)
        assert trainer._run(cfg, None, torch.device("cpu"), Dist(), {}, []) == {"status": "busy",
                                                                               "run_dir": str(directory)}
    assert trainer._run(cfg, None, torch.device("cpu"), Dist(), {}, []) == {"status": "trained"}
    assert not any(path.exists() for path in leftovers)


def _rank(rank: int, port: int, args: list[str]) -> None:
    """One rank of a two-process gloo run, as torchrun starts it: its place in the environment, then train."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2")
    try:
        train(compose_config(args))
    finally:
        distributed.shutdown()


def train_two_ranks(args: list[str], timeout: float = 60) -> list[int]:
    """`torchrun --nproc_per_node=2 -m mbexp.train ARGS` on the CPU, its two ranks forked from this process (no
    import paid; a rank that fails ends the other): their exit codes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = [multiprocessing.get_context("fork").Process(target=_rank, args=(r, port, args)) for r in (0, 1)]
    for p in ranks:
        p.start()
    deadline = time.monotonic() + timeout
    while (alive := [p for p in ranks if p.is_alive()]) and not any(p.exitcode for p in ranks):
        if not multiprocessing.connection.wait([p.sentinel for p in alive], deadline - time.monotonic()):
            break
    for p in ranks:
        p.kill()
        p.join()
    return [p.exitcode for p in ranks]


@pytest.mark.parametrize("compile_", ["false", "true"])
def test_two_ddp_ranks_train_as_one_process_on_the_whole_batch(tmp_path, cache, monkeypatch, compile_):
    """Under DDP each rank steps on its half of the global batch and the ranks' gradients are averaged, compiled
    or not (the compiled step is the DDP-wrapped model): two gloo ranks log the losses of one process."""
    monkeypatch.setattr(trainer, "compile_model", compile_capturing(Counter()))
    extra = ("train.steps=4", "train.eval_every=4", "train.log_every=1", "device=cpu", f"compile={compile_}")
    single, single_dir = run(tmp_path / "single", cache, *extra)  # first, so the ranks fork a warm compiler
    assert train_two_ranks(clean(overrides(tmp_path / "ddp", cache, *extra))) == [0, 0]
    (ddp_dir,) = (tmp_path / "ddp" / "results").glob("runs/*/*/seed=0")
    ddp = json.loads((ddp_dir / "summary.json").read_text())
    assert ddp["status"] == "completed" and ddp["compiled"] is (compile_ == "true")
    assert ddp["tokens_seen"] == single["tokens_seen"] == 4 * 8 * 32
    (ddp_train, ddp_val), (single_train, single_val) = losses(ddp_dir), losses(single_dir)
    assert [s for s, _ in ddp_train] == [s for s, _ in single_train] == [1, 2, 3, 4]
    assert [s for s, _ in ddp_val] == [s for s, _ in single_val]
    for (_, a), (_, b) in zip(ddp_train + ddp_val, single_train + single_val):
        assert abs(a - b) < 1e-4
