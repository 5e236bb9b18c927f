"""optim=muon against Muon's equations (Jordan et al. 2024; Liu et al. 2025's update scale), its AdamW group against
optim=adamw, and train.z_loss against PaLM's formula."""

import dataclasses
import math

import pytest
import torch

from mbexp.config import Config, OptimConfig, model_spec
from mbexp.model import DecoderLM
from mbexp.optim import Optimizers, make_optimizer, muon_params
from mbexp.trainer import Learner, train_step, z_loss_term

pytestmark = pytest.mark.usefixtures("one_thread")

V, T, B = 64, 16, 4
SMALL = dict(vocab_size=V, d_model=32, n_layers=2, n_heads=4, seq_len=T)
CPU = torch.device("cpu")
MUON = OptimConfig(name="muon", lr=0.02, adjust_lr_fn="match_rms_adamw")


class FixedBatches:
    """One fixed training batch, returned every time: both learners of a comparison see the same data."""

    def __init__(self, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        self.x, self.y = torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)

    def next_train(self):
        return self.x, self.y


def model(**kw) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(dataclasses.replace(model_spec(Config(), V), **{**SMALL, **kw}))


def learner(optim: OptimConfig, z_loss: float = 0.0, **kw) -> Learner:
    m = model(**kw)
    return Learner(m, make_optimizer(m, optim, CPU), FixedBatches(), CPU, "fp32", z_loss=z_loss)


def newton_schulz(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Jordan et al. 2024: X <- aX + (bA + cA^2)X, A = XX^T, from X = G/||G||_F, on the wide orientation."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.double() / g.double().norm()
    wide = x.shape[0] <= x.shape[1]
    x = x if wide else x.T
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x if wide else x.T).float()


def muon_reference(w0: torch.Tensor, grads: list[torch.Tensor], lr: float, weight_decay: float,
                   momentum: float = 0.95) -> torch.Tensor:
    """Muon with Nesterov momentum, decoupled weight decay and Moonlight's scale 0.2 sqrt(max(A, B)) (Liu et al.)."""
    w, buf = w0.clone(), torch.zeros_like(w0)
    for g in grads:
        buf = momentum * buf + g
        update = newton_schulz(g + momentum * buf)
        w = w * (1 - lr * weight_decay) - lr * 0.2 * math.sqrt(max(w.shape)) * update
    return w


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    m = model(tie_embeddings=False)
    opt = make_optimizer(m, MUON, CPU)
    assert isinstance(opt, Optimizers)
    hidden = {id(p) for p in muon_params(m)}
    want = {id(p) for b in m.blocks for p in (b.attn.qkv.weight, b.attn.proj.weight, b.ffn.w.weight, b.ffn.w2.weight)}
    assert hidden == want
    muon_ids = {id(p) for g in opt.optimizers["muon"].param_groups for p in g["params"]}
    adamw_ids = {id(p) for g in opt.optimizers["adamw"].param_groups for p in g["params"]}
    assert muon_ids == want and not muon_ids & adamw_ids
    assert muon_ids | adamw_ids == {id(p) for p in m.parameters()}
    assert {id(m.tok_emb.weight), id(m.head.weight), id(m.final_norm.weight)} <= adamw_ids


def test_three_muon_steps_equal_newton_schulz_with_nesterov_momentum():
    """Random gradients, three steps, a weight decay large enough to see: each Muon matrix moves as the equations
    say. Torch runs Newton-Schulz in bf16 (as Jordan et al. do), so the tolerance is bf16's: 2.5% of the
    update's norm; 4 or 6 Newton-Schulz steps, no Nesterov, momentum 0.9, no decay or the original scale miss by
    more."""
    optim = dataclasses.replace(MUON, weight_decay=1.0)
    m = model()
    opt = make_optimizer(m, optim, CPU)
    gen = torch.Generator().manual_seed(1)
    hidden = muon_params(m)
    before = [p.detach().clone() for p in hidden]
    grads = [[torch.randn(p.shape, generator=gen) for p in hidden] for _ in range(3)]
    for step_grads in grads:
        for p, g in zip(hidden, step_grads):
            p.grad = g.clone()
        opt.step()
    for p, w0, gs in zip(hidden, before, zip(*grads)):
        want = muon_reference(w0, list(gs), optim.lr, optim.weight_decay)
        err = (p.detach() - want).norm() / (want - w0).norm()
        assert err < 0.025, (tuple(p.shape), err.item())


def test_the_adamw_group_steps_as_optim_adamw_does():
    """One train_step each: every parameter outside the blocks' matrices ends where optim=adamw puts it."""
    adamw, muon = OptimConfig(lr=0.02), dataclasses.replace(MUON)
    a, b = learner(adamw), learner(muon)
    train_step(a, 0.02, 1.0)
    train_step(b, 0.02, 1.0)
    hidden = {id(p) for p in muon_params(b.model)}
    moved = 0
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        if id(pb) in hidden:
            assert not torch.equal(pa, pb), name
        else:
            assert torch.equal(pa, pb), name
            moved += 1
    assert moved > 0


def test_optim_adamw_lr_sets_the_adamw_groups_lr_through_lr_scale():
    t = learner(dataclasses.replace(MUON, adamw_lr=0.005))
    train_step(t, 0.01, 1.0)
    assert [g["lr"] for g in t.optimizer.optimizers["muon"].param_groups] == [0.01]
    assert [g["lr"] for g in t.optimizer.optimizers["adamw"].param_groups] == pytest.approx([0.0025, 0.0025])


def test_the_composite_state_round_trips():
    t = learner(MUON)
    train_step(t, 0.02, 1.0)
    fresh = make_optimizer(t.model, MUON, CPU)
    fresh.load_state_dict(t.optimizer.state_dict())
    for name, opt in t.optimizer.optimizers.items():
        for p in (p for g in opt.param_groups for p in g["params"]):
            for key, value in opt.state[p].items():
                assert torch.equal(torch.as_tensor(fresh.optimizers[name].state[p][key]), torch.as_tensor(value))


def test_z_loss_term_is_the_mean_squared_log_partition():
    logits = torch.randn(2, 3, 7) * 4
    want = 1e-3 * sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits.reshape(-1, 7).tolist()) / 6
    assert z_loss_term(logits, 1e-3).item() == pytest.approx(want, rel=1e-5)


def test_z_loss_joins_the_training_loss_only():
    """train_step returns the cross-entropy as its loss and the z term apart; the step follows their sum."""
    plain, zl = learner(OptimConfig(lr=0.02)), learner(OptimConfig(lr=0.02), z_loss=0.5)
    x, y = zl.batches.next_train()
    with torch.no_grad():
        logits, ce = zl.model(x, y)
    loss, _, z = train_step(zl, 0.02, 0.0)
    assert loss.item() == pytest.approx(ce.item(), rel=1e-6)
    assert z.item() == pytest.approx(0.5 * torch.logsumexp(logits, -1).square().mean().item(), rel=1e-5)
    _, _, z_off = train_step(plain, 0.02, 0.0)
    assert z_off.item() == 0.0
    assert not torch.equal(plain.model.tok_emb.weight, zl.model.tok_emb.weight), "the z term moved the weights"


def test_muon_under_ddp_stops_with_one_line_before_any_run_file(tmp_path, monkeypatch):
    from mbexp import distributed, trainer
    from mbexp.config import compose_config
    from mbexp.config.rules import ConfigError

    monkeypatch.setattr(trainer.distributed, "init", lambda device_type: distributed.Dist(0, 2, 0))
    cfg = compose_config(["optim=muon", f"results_dir={tmp_path}", "logger=none", "device=cpu"])
    with pytest.raises(ConfigError, match="optim=muon runs on one process only"):
        trainer.train(cfg)
    assert not list(tmp_path.rglob("summary.json"))
