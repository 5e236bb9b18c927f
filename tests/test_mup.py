"""μP (mbexp/model/mup.py): every init std and effective LR as the mup package gives them, the coordinate check
(scripts/coord_check.py), the init-only control, the width presets and a short μP run."""

import dataclasses

import pytest
import torch
from tiny import mbexp_train, overrides, script, summaries

from mbexp import names
from mbexp.config import Config, compose_config, model_spec, to_object
from mbexp.model import DecoderLM
from mbexp.model.mup import width_mults
from mbexp.run.identity import identity_flat, row_name
from mbexp.trainer import Learner, make_optimizer, train_step

try:
    import mup  # the reference implementation (the dev extra)
except ImportError:
    mup = None

pytestmark = pytest.mark.usefixtures("one_thread")
V, T, BASE = 97, 16, 64
CASES = {  # the tied head (MuSharedReadout) with a gated FFN, GQA, biases and QK-norm; an untied one (MuReadout)
    "tied": dict(tie_embeddings=True, ffn="swiglu", n_kv_heads=2, bias=True, qk_norm="proj", pos="learned"),
    "untied": dict(tie_embeddings=False, norm="rms", placement="post"),
}


def spec(d_model: int, param: str = "sp", **kw):
    s = model_spec(Config(), V)
    return dataclasses.replace(s, d_model=d_model, n_layers=2, n_heads=4, seq_len=T, param=param,
                               base_d_model=BASE if param != "sp" or kw.get("init") == "fan_in" else None, **kw)


def with_mu_readout(model: DecoderLM) -> DecoderLM:
    """The same model with mup's readout: MuSharedReadout on the embedding when tied, else MuReadout."""
    s = model.spec
    if s.tie_embeddings:
        model.head = mup.MuSharedReadout(model.tok_emb.weight, bias=False)
    else:
        head = mup.MuReadout(s.d_model, s.vocab_size, bias=False)
        with torch.no_grad():
            head.weight.copy_(model.head.weight)
        model.head = head
    return model


def reference(options: dict, width: int) -> DecoderLM:
    """An SP model with mup's readout, base shapes set at BASE (delta: 96); μP's 1/d_head attention set by hand,
    as the package leaves attention to the model."""
    model = with_mu_readout(DecoderLM(spec(width, **options)))
    base, delta = (with_mu_readout(DecoderLM(spec(w, **options))) for w in (BASE, 96))
    mup.set_base_shapes(model, base, delta=delta, rescale_params=False)
    for block in model.blocks:
        block.attn.scale = 1.0 / block.attn.head_dim
    return model


def mup_init_factor(p: torch.Tensor) -> float:
    """What mup.init.normal_ multiplies a base std by for parameter p (m^-1/2 for a hidden matrix, else 1)."""
    probe = torch.empty(p.shape)
    probe.infshape = p.infshape
    torch.manual_seed(1)
    mup.init.normal_(probe, std=1.0)
    torch.manual_seed(1)
    return (probe / torch.empty(p.shape).normal_(0.0, 1.0)).mean().item()


class OneBatch:
    def __init__(self):
        tokens = torch.randint(V, (2, T + 1), generator=torch.Generator().manual_seed(0))
        self.batch = tokens[:, :-1], tokens[:, 1:]

    def next_train(self):
        return self.batch


def per_param(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict[str, tuple[float, float]]:
    """Parameter name -> (learning rate, weight decay) of its optimiser group."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}


@pytest.mark.skipif(mup is None, reason="needs the mup package (pip install -e '.[dev]')")
@pytest.mark.parametrize("case", CASES)
def test_every_init_std_and_effective_lr_is_the_mup_packages(case):
    """At width 128 on base 64: each parameter's init (μP over SP draws) as mup.init.normal_ scales it, each
    group's LR and decay as MuAdamW sets them, the logits as MuReadout gives them, one AdamW step the same."""
    options, width, optim = CASES[case], 128, Config().optim
    torch.manual_seed(0)
    ours = DecoderLM(spec(width, "mup", **options))
    torch.manual_seed(0)
    ref = reference(options, width)  # the same draws, at SP's stds
    for name, p in ref.named_parameters():
        expected = dict(ref.named_parameters())[name].detach() * mup_init_factor(p)
        torch.testing.assert_close(dict(ours.named_parameters())[name].detach(), expected, rtol=1e-6, atol=0,
                                   msg=f"init of {name}")
    ref.load_state_dict(ours.state_dict())
    x, y = OneBatch().batch
    torch.testing.assert_close(ours(x)[0], ref(x)[0], rtol=1e-6, atol=1e-7)

    ours_opt = make_optimizer(ours, optim, torch.device("cpu"))
    groups = [{"params": [p for p in ref.parameters() if p.dim() >= 2], "weight_decay": optim.weight_decay},
              {"params": [p for p in ref.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    ref_opt = mup.MuAdamW(groups, lr=optim.lr, betas=tuple(optim.betas))
    train_step(Learner(ours, ours_opt, OneBatch(), torch.device("cpu"), "fp32"), optim.lr, optim.grad_clip)
    _, loss = ref(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), optim.grad_clip)
    ref_opt.step()
    ours_lr, ref_lr = per_param(ours_opt, ours), per_param(ref_opt, ref)
    assert ours_lr.keys() == ref_lr.keys()
    for name, (lr, decay) in ref_lr.items():
        assert ours_lr[name] == pytest.approx((lr, decay), rel=1e-12), name
    assert {name for name, (lr, _) in ref_lr.items() if lr != optim.lr} == set(width_mults(ours))
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8, msg=f"after one step: {name}")


def load_coord_check():
    return script("coord_check")


def test_coordinates_stay_flat_in_width_under_mup_and_grow_under_sp():
    """Widths 64 to 512, 3 Adam steps: under μP no coordinate grows faster than width^GROWS (each rule
    removed breaks this: scripts/mutants.py); under SP the block outputs and the logits grow."""
    cc = load_coord_check()
    ours, sp = cc.slopes(cc.check("mup")), cc.slopes(cc.check("sp"))
    slope, name, step = max((s, name, t) for name, values in ours.items() for t, s in enumerate(values))
    assert slope <= cc.GROWS, f"under μP {name} grows as width^{slope:.2f} after {step} steps"
    outputs = [name for name in sp if name.endswith((".attn", ".ffn")) or name == "logits"]
    assert all(sp[name][-1] >= 0.5 for name in outputs), {name: sp[name] for name in outputs}


@pytest.mark.parametrize("option", [*(dict(norm=n) for n in names.NORMS),
                                    *(dict(placement=p) for p in names.PLACEMENTS if p != "deepnorm"),
                                    *(dict(ffn=f) for f in names.FFNS), dict(n_kv_heads=1), dict(pos="sinusoidal")],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_block_variant_trains_under_mup(option):
    """Each matrix of attention and the FFN gets its own LR scale, and a step keeps the loss finite."""
    model = DecoderLM(spec(128, "mup", **option))
    optimizer = make_optimizer(model, Config().optim, torch.device("cpu"))
    scaled = {id(p) for g in optimizer.param_groups if g["lr_scale"] != 1.0 for p in g["params"]}
    params = dict(model.named_parameters())
    assert scaled == {id(params[name]) for name in width_mults(model)}
    assert len(width_mults(model)) == model.spec.n_layers * (5 if model.spec.ffn in names.GATED else 4)
    loss, _, _ = train_step(Learner(model, optimizer, OneBatch(), torch.device("cpu"), "fp32"), 3e-3, 1.0)
    assert torch.isfinite(loss) and torch.isfinite(model(OneBatch().batch[0])[0]).all()


def test_init_fan_in_scales_the_hidden_init_only():
    torch.manual_seed(0)
    gpt2 = DecoderLM(spec(128))
    torch.manual_seed(0)
    fan_in = DecoderLM(spec(128, init="fan_in"))
    qkv, w2 = "blocks.0.attn.qkv.weight", "blocks.1.ffn.w2.weight"
    params, plain = dict(fan_in.named_parameters()), dict(gpt2.named_parameters())
    torch.testing.assert_close(params[qkv], plain[qkv] * 0.5 ** 0.5, rtol=1e-6, atol=0)  # m = 128 / 64
    torch.testing.assert_close(params[w2], plain[w2] * (512 / 256) ** -0.5, rtol=1e-6, atol=0)  # d_ff ratio
    torch.testing.assert_close(params["tok_emb.weight"], plain["tok_emb.weight"], rtol=0, atol=0)
    assert fan_in.blocks[0].attn.scale is None and fan_in.readout_mult == 1.0
    groups = make_optimizer(fan_in, Config().optim, torch.device("cpu")).param_groups
    assert all(g["lr_scale"] == 1.0 for g in groups)  # the init alone: every LR as SP's


def test_width_presets_and_their_rows():
    for width in (64, 96, 128, 192, 256):
        cfg = to_object(compose_config([f"model=width{width}"]))
        assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.d_model // cfg.model.n_heads) == (width, 4, 32)
        assert row_name(cfg) == f"layer-pre-relu-matched-width{width}"
        assert not {"model.param", "model.init", "model.base_d_model"} & set(identity_flat(cfg))
    cfg = to_object(compose_config(["model=width128", "model.param=mup", "model.base_d_model=64"]))
    assert row_name(cfg) == "layer-pre-relu-matched-mup-base64-width128"
    assert (identity_flat(cfg)["model.param"], identity_flat(cfg)["model.base_d_model"]) == ("mup", 64)
    cfg = to_object(compose_config(["model=width128", "model.init=fan_in", "model.base_d_model=64"]))
    assert row_name(cfg) == "layer-pre-relu-matched-initfan_in-base64-width128"


def test_a_mup_run_trains(tmp_path, cache):
    proc = mbexp_train(overrides(tmp_path, cache, "model.d_model=64", "model.param=mup", "model.base_d_model=32",
                                 "train.steps=10"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (summary,) = summaries(tmp_path / "results")
    assert summary["status"] == "completed" and summary["row"].endswith("-mup-base32")


@pytest.mark.parametrize("hidden", [dict(hidden="4d"), dict(hidden_multiple_of=64)], ids=["4d", "multiple_of=64"])
def test_the_ffn_width_multiplier_uses_the_models_own_hidden_rule_at_the_base_width(hidden):
    """Twice the base width: every hidden matrix's m_W is 2, the FFN's output matrix (fan-in d_ff) too, with the
    base d_ff from the same hidden rule and rounding (gated at 4D: 256 at base 64; 8/3 D to a multiple of 64: 192)."""
    model = DecoderLM(spec(2 * BASE, "mup", ffn="swiglu", **hidden))
    mults = width_mults(model)
    assert model.spec.d_ff in (512, 384) and set(mults.values()) == {2.0}
    assert {name.split(".", 2)[2] for name in mults} == {"attn.qkv.weight", "attn.proj.weight", "ffn.w.weight",
                                                           "ffn.v.weight", "ffn.w2.weight"}
