"""LayerNorm, RMSNorm and DyT against the worked example, torch's reference ops, their formulas (docs/model.md)
and their invariances."""

import inspect

import pytest
import torch
from torch.nn import functional as F

from mbexp.config import NormConfig, compose_config, model_spec, to_object
from mbexp.model import DecoderLM
from mbexp.model.norms import NORMS, DyT, LayerNorm, RMSNorm, build_norm
from mbexp.names import NORM_DEFAULTS

X = torch.tensor([2.0, -1.0, 0.0, 3.0])


def _randomise(norm: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        norm.weight.copy_(torch.randn(norm.weight.shape, generator=gen))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(torch.randn(norm.bias.shape, generator=gen))


def test_worked_example_layernorm():
    out = LayerNorm(4, eps=1e-5)(X)
    assert torch.allclose(out, torch.tensor([0.6325, -1.2649, -0.6325, 1.2649]), atol=5e-5)


def test_worked_example_rmsnorm():
    out = RMSNorm(4, eps=1e-5)(X)
    assert torch.allclose(out, torch.tensor([1.0690, -0.5345, 0.0000, 1.6036]), atol=5e-5)


def _by_hand(x: torch.Tensor, norm: torch.nn.Module, *, centre: bool) -> torch.Tensor:
    """docs/model.md's formula in float64, written out: (x − mean) / sqrt(var + eps) · g (+ b); RMS: no mean."""
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True) if centre else 0.0
    var = (x64 - mean).pow(2).mean(-1, keepdim=True)
    bias = norm.bias.double() if getattr(norm, "bias", None) is not None else 0.0
    return (x64 - mean) / torch.sqrt(var + norm.eps) * norm.weight.double() + bias


# a spread of 1e-3 (variance 1e-6, against eps 1e-5): dropping eps changes the output about threefold
@pytest.mark.parametrize("scale", [2.0, 1e-3])
@pytest.mark.parametrize("bias", [False, True])
def test_layernorm_matches_torch(bias, scale):
    gen = torch.Generator().manual_seed(0)
    norm = LayerNorm(48, eps=1e-5, bias=bias)
    _randomise(norm, gen)
    x = (torch.randn(3, 7, 48, generator=gen) + 0.25) * scale  # an offset, so that centring matters
    assert torch.allclose(norm(x).double(), _by_hand(x, norm, centre=True), rtol=1e-4, atol=1e-5)
    ref = torch.nn.LayerNorm(48, eps=1e-5, bias=bias)
    ref.load_state_dict(norm.state_dict())
    assert torch.allclose(norm(x), ref(x), atol=1e-5)


def test_layernorm_bias_is_used():
    norm = LayerNorm(8, bias=True)
    with torch.no_grad():
        norm.bias.fill_(0.25)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(norm(x) - LayerNorm(8)(x), torch.full((2, 8), 0.25), atol=1e-6)
    assert LayerNorm(8).bias is None  # no bias by default (Llama/T5 convention)


@pytest.mark.parametrize("scale", [2.0, 1e-3])
def test_rmsnorm_matches_torch(scale):
    gen = torch.Generator().manual_seed(2)
    norm = RMSNorm(48, eps=1e-5)
    _randomise(norm, gen)
    x = torch.randn(3, 7, 48, generator=gen) * scale
    assert torch.allclose(norm(x).double(), _by_hand(x, norm, centre=False), rtol=1e-4, atol=1e-6)
    assert torch.allclose(norm(x), F.rms_norm(x, (48,), norm.weight, 1e-5), rtol=1e-4, atol=1e-6)


def test_rms_equals_layer_on_zero_mean_input():
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(3))
    x = x - x.mean(-1, keepdim=True)
    assert torch.allclose(RMSNorm(32)(x), LayerNorm(32)(x), atol=1e-5)


@pytest.mark.parametrize("name", ["layer", "rms"])  # DyT has no statistics: not scale invariant
def test_scale_invariance(name):
    gen = torch.Generator().manual_seed(4)
    norm = build_norm(name, 32, eps=1e-10)
    _randomise(norm, gen)
    x = torch.randn(4, 32, generator=gen)
    assert torch.allclose(norm(x), norm(3.7 * x), atol=1e-5)
    noise = torch.randn(4, 32, generator=gen)
    assert not torch.allclose(norm(x), norm(x + 0.5 * noise), atol=1e-2)  # the check can tell inputs apart


def test_only_layernorm_is_shift_invariant():
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(5))
    layer, rms = LayerNorm(32), RMSNorm(32)
    assert torch.allclose(layer(x), layer(x + 5), atol=1e-4)
    assert (rms(x) - rms(x + 5)).abs().max() > 0.5


def test_build_norm_registry():
    assert tuple(NORMS) == ("layer", "rms", "dyt")
    assert isinstance(build_norm("dyt", 8, alpha_init=0.8), DyT)
    assert isinstance(build_norm("layer", 8), LayerNorm)
    assert isinstance(build_norm("rms", 8), RMSNorm)
    assert build_norm("layer", 8, eps=1e-3).eps == 1e-3
    assert build_norm("layer", 8, bias=True).bias.shape == (8,)


def test_unknown_norm_lists_valid_names():
    with pytest.raises(ValueError, match="batch") as err:
        build_norm("batch", 8)
    assert "layer" in str(err.value) and "rms" in str(err.value)


def test_unknown_norm_message_is_one_line_with_every_valid_name():
    with pytest.raises(ValueError) as err:
        build_norm("batch", 8)
    assert str(err.value) == "unknown norm 'batch'; valid: layer, rms, dyt"


def test_an_option_the_norm_cannot_take_raises():
    with pytest.raises(ValueError, match=r"norm\.bias=True does not apply to norm=rms; norm=rms takes: norm\.eps"):
        build_norm("rms", 8, bias=True)
    with pytest.raises(ValueError, match=r"norm\.bias.*norm=dyt; norm=dyt takes: norm\.alpha_init"):
        build_norm("dyt", 8, bias=True)
    with pytest.raises(ValueError, match=r"norm\.alpha_init.*norm=layer"):
        build_norm("layer", 8, alpha_init=1.0)
    assert build_norm("dyt", 8, eps=1e-5, bias=False).alpha.item() == 0.5  # defaults pass through


def test_the_norms_defaults_are_the_configs():
    """Each norm class's option defaults and NormConfig's are names.NORM_DEFAULTS, so build_norm and config
    validation accept the same settings."""
    declared = {key: p.default for norm in NORMS.values() for key, p in inspect.signature(norm).parameters.items()
                if p.default is not p.empty}
    assert declared == NORM_DEFAULTS == {key: getattr(NormConfig, key) for key in NORM_DEFAULTS}


def test_dyt_formula_and_its_learnable_alpha():
    """g * tanh(alpha * x) + b (Zhu et al. 2025), alpha one scalar starting at norm.alpha_init."""
    gen = torch.Generator().manual_seed(6)
    norm = DyT(16, alpha_init=0.8)
    assert norm.alpha.shape == () and norm.alpha.item() == pytest.approx(0.8)
    assert torch.equal(norm.weight, torch.ones(16)) and torch.equal(norm.bias, torch.zeros(16))
    _randomise(norm, gen)
    x = 3 * torch.randn(4, 16, generator=gen)
    assert torch.allclose(norm(x), norm.weight * torch.tanh(0.8 * x) + norm.bias, atol=1e-6)
    norm(x).sum().backward()
    assert norm.alpha.grad is not None and norm.alpha.grad.abs() > 0
    assert norm(1e4 * x).abs().max() <= (norm.weight.abs() + norm.bias.abs()).max() + 1e-5, "tanh squashes"


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_norm_eps_reaches_every_norm_of_the_model(norm):
    cfg = to_object(compose_config([f"norm={norm}", "norm.eps=0.125", "model.d_model=16", "model.n_layers=2",
                                    "model.n_heads=2"]))
    norms = [m for m in DecoderLM(model_spec(cfg, 64)).modules() if isinstance(m, NORMS[norm])]
    assert len(norms) >= 2 * 2 and {m.eps for m in norms} == {0.125}
    x = torch.full((1, 16), 0.01) + torch.arange(16) * 1e-3  # variance far below eps: eps decides the output
    assert torch.allclose(norms[0](x).double(), _by_hand(x, norms[0], centre=norm == "layer"), rtol=1e-4, atol=1e-6)
