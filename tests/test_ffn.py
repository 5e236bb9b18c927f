"""The FFN variants against their formulas (Shazeer 2020; So et al. 2021 for relu2), and the hidden-width rule."""

import math

import pytest
import torch

from mbexp.model.ffn import FFN, FFNS, GATED, HIDDEN_RULES, ffn_hidden_dim

TWO_MATRIX = ("relu", "gelu", "swish", "relu2")
ALL = TWO_MATRIX + ("glu", "bilinear", "reglu", "geglu", "swiglu")


pytestmark = pytest.mark.usefixtures("one_thread")


def _gelu(z):  # exact GELU: z * Phi(z)
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


def _swish(z):  # Swish_1 = SiLU
    return z * torch.sigmoid(z)


def reference(name: str, ffn: FFN, x: torch.Tensor) -> torch.Tensor:
    """docs/model.md, written out from the module's own weights (nn.Linear stores W as (out, in))."""
    xw = x @ ffn.w.weight.T
    xv = x @ ffn.v.weight.T if ffn.v is not None else None
    w2 = ffn.w2.weight.T
    if name == "relu":
        return torch.clamp(xw, min=0) @ w2
    if name == "gelu":
        return _gelu(xw) @ w2
    if name == "swish":
        return _swish(xw) @ w2
    if name == "relu2":  # Primer: W2 relu(W1 x)^2
        return torch.clamp(xw, min=0) ** 2 @ w2
    if name == "glu":
        return (torch.sigmoid(xw) * xv) @ w2
    if name == "bilinear":
        return (xw * xv) @ w2
    if name == "reglu":
        return (torch.clamp(xw, min=0) * xv) @ w2
    if name == "geglu":
        return (_gelu(xw) * xv) @ w2
    if name == "swiglu":
        return (_swish(xw) * xv) @ w2
    raise AssertionError(name)


def test_registry_is_the_nine_variants():
    assert set(FFNS) == set(ALL)
    assert GATED == set(ALL) - set(TWO_MATRIX)


@pytest.mark.parametrize("name", ALL)
def test_shape_and_finite_gradients(name):
    torch.manual_seed(0)
    ffn = FFN(name, 64, 96)
    x = torch.randn(2, 8, 64, requires_grad=True)
    out = ffn(x)
    assert out.shape == (2, 8, 64)
    out.pow(2).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for pname, p in ffn.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", ALL)
def test_matches_formula(name):
    torch.manual_seed(1)
    ffn = FFN(name, 16, 40)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        assert torch.allclose(ffn(x), reference(name, ffn, x), atol=1e-6)


def test_formulas_tell_variants_apart():
    """Each variant's module output differs from every other variant's formula on the same weights."""
    torch.manual_seed(2)
    x = torch.randn(2, 4, 16)
    for group in (GATED, set(TWO_MATRIX)):
        for name in group:
            ffn = FFN(name, 16, 24)
            with torch.no_grad():
                out = ffn(x)
                for other in group - {name}:
                    assert not torch.allclose(out, reference(other, ffn, x), atol=1e-4), (name, other)


@pytest.mark.parametrize("name", ALL)
def test_no_biases_and_exact_param_count(name):
    D, d_ff = 24, 40
    ffn = FFN(name, D, d_ff)
    names = {n for n, _ in ffn.named_parameters()}
    gated = name in GATED
    assert names == ({"w.weight", "v.weight", "w2.weight"} if gated else {"w.weight", "w2.weight"})
    for module in ffn.modules():
        if isinstance(module, torch.nn.Linear):
            assert module.bias is None
    assert ffn.w.weight.shape == (d_ff, D) and ffn.w2.weight.shape == (D, d_ff)
    assert sum(p.numel() for p in ffn.parameters()) == (3 if gated else 2) * D * d_ff


@pytest.mark.parametrize("D", [64, 96, 128, 512])
@pytest.mark.parametrize("name", ALL)
def test_matched_width_gives_8_d_squared(name, D):
    d_ff = ffn_hidden_dim(D, ffn=name, rule="matched", multiple_of=1)
    assert d_ff == (round(8 * D / 3) if name in GATED else 4 * D)
    n = sum(p.numel() for p in FFN(name, D, d_ff).parameters())
    assert abs(n - 8 * D * D) <= 0.01 * 8 * D * D


@pytest.mark.parametrize("name", sorted(GATED))
def test_4d_gated_is_12_d_squared(name):
    D = 48
    d_ff = ffn_hidden_dim(D, ffn=name, rule="4d")
    assert d_ff == 4 * D
    assert sum(p.numel() for p in FFN(name, D, d_ff).parameters()) == 12 * D * D


@pytest.mark.parametrize("name", TWO_MATRIX)
def test_4d_two_matrix(name):
    assert ffn_hidden_dim(100, ffn=name, rule="4d") == 400


@pytest.mark.parametrize("D", [32, 64, 100, 128, 257])
@pytest.mark.parametrize("name", ALL)
def test_8_3d(name, D):
    assert ffn_hidden_dim(D, ffn=name, rule="8_3d") == round(8 * D / 3)


@pytest.mark.parametrize(
    "D, name, multiple_of, expected",
    [
        (64, "swiglu", 64, 192),  # 171 -> 192
        (64, "swiglu", 8, 176),  # 171 -> 176
        (96, "swiglu", 256, 256),  # already a multiple
        (100, "relu", 64, 448),  # 400 -> 448
        (128, "geglu", 32, 352),  # 341 -> 352
        (4096, "swiglu", 256, 11008),  # Llama 2 7B and OLMo 2 7B's intermediate_size
        (5120, "swiglu", 256, 13824),  # Llama 2 13B and OLMo 2 13B's
    ],
)
def test_multiple_of_rounds_up(D, name, multiple_of, expected):
    assert ffn_hidden_dim(D, ffn=name, rule="matched", multiple_of=multiple_of) == expected


@pytest.mark.parametrize("multiple_of", [1, 3, 16, 100])
@pytest.mark.parametrize("rule", HIDDEN_RULES)
def test_multiple_of_is_the_smallest_multiple_above(rule, multiple_of):
    raw = ffn_hidden_dim(80, ffn="swiglu", rule=rule)
    d_ff = ffn_hidden_dim(80, ffn="swiglu", rule=rule, multiple_of=multiple_of)
    assert d_ff % multiple_of == 0 and raw <= d_ff < raw + multiple_of


def test_bad_rule_lists_rules():
    with pytest.raises(ValueError, match="2d") as err:
        ffn_hidden_dim(64, ffn="relu", rule="2d")
    assert str(err.value) == "unknown hidden rule '2d'; valid: matched, 4d, 8_3d"


def test_bad_name_lists_variants():
    for call in (lambda: ffn_hidden_dim(64, ffn="mish"), lambda: FFN("mish", 8, 16)):
        with pytest.raises(ValueError, match="mish") as err:
            call()
        assert all(name in str(err.value) for name in ALL)
        assert str(err.value) == f"unknown ffn 'mish'; valid: {', '.join(FFNS)}"  # one list, read as one


@pytest.mark.parametrize("multiple_of", [0, -8])
def test_bad_multiple_of(multiple_of):
    with pytest.raises(ValueError, match=r"multiple_of.*>= 1"):
        ffn_hidden_dim(64, ffn="relu", multiple_of=multiple_of)


@pytest.mark.parametrize(("name", "gelu"), [("relu", "tanh"), ("swiglu", "tanh"), ("gelu", "sigmoid"),
                                            ("geglu", "none")])
def test_a_gelu_setting_an_ffn_cannot_use_is_refused_when_the_ffn_is_built(name, gelu):
    """tanh only for the FFNs with a GELU (never silently ignored), and only exact or tanh there."""
    with pytest.raises(ValueError) as err:
        FFN(name, 8, 16, gelu=gelu)
    assert str(err.value) == f"ffn.gelu={gelu} is not valid for ffn={name}; valid: exact, or tanh for ffn=gelu or geglu"
    assert FFN(name, 8, 16, gelu="exact").name == name
