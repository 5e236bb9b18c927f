"""The decoder block's equations, the residual highway, every variant's forward+backward, the LM's options."""

import dataclasses
import itertools
import math

import pytest
import torch
from torch import nn

from mbexp import config, names
from mbexp.config import Config, model_spec
from mbexp.model import FINAL_NORM, PLACEMENTS, Block, DecoderLM, ModelSpec, param_counts
from mbexp.model.attention import CausalSelfAttention, apply_rope, capped_attention
from mbexp.model.ffn import ACTIVATIONS, FFNS, GELUS, HIDDEN_RULES
from mbexp.model.norms import NORMS

SMALL = dict(vocab_size=256, d_model=32, n_layers=2, n_heads=2, seq_len=16)


pytestmark = pytest.mark.usefixtures("one_thread")


def spec(**kw) -> ModelSpec:
    """The config's defaults (config.model_spec), made small."""
    return dataclasses.replace(model_spec(Config(), SMALL["vocab_size"]), **{**SMALL, **kw})


def test_registries_are_keyed_by_the_option_names():
    assert tuple(NORMS) == names.NORMS and tuple(names.NORM_OPTIONS) == names.NORMS
    assert tuple(FINAL_NORM) == names.PLACEMENTS == PLACEMENTS
    assert tuple(ACTIVATIONS) == names.FFNS and tuple(GELUS) == names.GELUS
    assert set(names.GATED) <= set(names.FFNS) and set(names.GELU_FFNS) <= set(names.FFNS)


def test_model_spec_reads_every_model_option_of_the_config():
    """One source of defaults: each ModelSpec field is one config key, and every model-deciding key of the
    norm, placement, ffn, hidden and model groups is a ModelSpec field (model.name only labels a preset)."""
    assert list(config.SPEC_KEYS) == [f.name for f in dataclasses.fields(ModelSpec) if f.name != "vocab_size"]
    keys = set(config.SPEC_KEYS.values())
    groups = {"norm": config.NormConfig, "placement": config.PlacementConfig, "ffn": config.FFNConfig,
              "hidden": config.HiddenConfig, "model": config.ModelConfig}
    schema = {f"{g}.{f.name}" for g, cls in groups.items() for f in dataclasses.fields(cls)} - {"model.name"}
    assert keys == schema
    cfg = Config()
    cfg.norm.eps, cfg.hidden.multiple_of, cfg.model.n_kv_heads, cfg.ffn.name = 1e-6, 8, 2, "geglu"
    s = model_spec(cfg, 100)
    assert (s.vocab_size, s.norm_eps, s.hidden_multiple_of, s.n_kv_heads, s.ffn, s.d_model) == (
        100, 1e-6, 8, 2, "geglu", cfg.model.d_model)


def _silence_sublayers(block: Block) -> None:
    """attn.proj and ffn.w2 are the last maps of the two branches: zeroed, each branch outputs 0."""
    with torch.no_grad():
        block.attn.proj.weight.zero_()
        block.ffn.w2.weight.zero_()


def _random_gains(block: Block, gen: torch.Generator) -> None:
    # unit-gain LayerNorm is idempotent, so Norm2(Norm1(x)) = Norm1(x); random gains tell them apart
    with torch.no_grad():
        for norm in (block.norm1, block.norm2):
            norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=gen))


@pytest.mark.parametrize("norm", list(NORMS))
def test_pre_block_with_silent_sublayers_is_identity(norm):
    gen = torch.Generator().manual_seed(0)
    block = Block(spec(norm=norm, placement="pre"))
    _random_gains(block, gen)
    _silence_sublayers(block)
    x = torch.randn(2, 16, 32, generator=gen)
    assert torch.equal(block(x), x)


@pytest.mark.parametrize("norm", list(NORMS))
def test_post_block_with_silent_sublayers_is_two_norms(norm):
    gen = torch.Generator().manual_seed(1)
    block = Block(spec(norm=norm, placement="post"))
    _random_gains(block, gen)
    _silence_sublayers(block)
    x = torch.randn(2, 16, 32, generator=gen) * 3 + 1
    with torch.no_grad():
        out = block(x)
        assert torch.allclose(out, block.norm2(block.norm1(x)), atol=1e-6)
        assert not torch.allclose(out, block.norm1(x), atol=1e-3)


@pytest.mark.parametrize("placement", ["pre", "post"])  # the others: tests/test_placements.py
def test_block_follows_its_equations(placement):
    """With live sublayers, the block is exactly the docs/model.md equations for its placement."""
    torch.manual_seed(2)
    block = Block(spec(placement=placement, ffn="swiglu"))
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        if placement == "pre":
            h = x + block.attn(block.norm1(x))
            expected = h + block.ffn(block.norm2(h))
        else:
            h = block.norm1(x + block.attn(x))
            expected = block.norm2(h + block.ffn(h))
        assert torch.allclose(block(x), expected, atol=1e-6)


def _stack_input_grad(placement: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    blocks = nn.Sequential(*(Block(spec(placement=placement)) for _ in range(24)))
    for block in blocks:
        _random_gains(block, gen)
        _silence_sublayers(block)
    x = torch.randn(2, 16, 32, generator=gen, requires_grad=True)
    g = torch.randn(2, 16, 32, generator=gen)
    blocks(x).backward(g)
    return x.grad, g


def test_pre_ln_residual_highway_passes_gradient_unchanged():
    grad, g = _stack_input_grad("pre")
    assert torch.equal(grad, g)


def test_post_ln_stack_has_no_highway():
    grad, g = _stack_input_grad("post")
    assert not torch.allclose(grad, g, atol=1e-2)


# every norm x placement x FFN, and every width rule (the rule only changes d_ff)
COMBOS = [(*c, "matched") for c in itertools.product(NORMS, PLACEMENTS, FFNS)]
COMBOS += [("layer", "pre", ffn, hidden) for ffn in ("relu", "swiglu") for hidden in ("4d", "8_3d")]


def test_combo_grid_is_complete():
    assert len(COMBOS) == 3 * 5 * 9 + 4
    assert {c[3] for c in COMBOS} == set(HIDDEN_RULES)


@pytest.mark.parametrize("norm, placement, ffn, hidden", COMBOS)
def test_every_variant_trains_a_step_on_cpu(norm, placement, ffn, hidden):
    torch.manual_seed(0)
    model = DecoderLM(spec(norm=norm, placement=placement, ffn=ffn, hidden=hidden))
    idx = torch.randint(0, 256, (2, 16))
    targets = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx, targets)
    assert logits.shape == (2, 16, 256)
    assert abs(loss.item() - math.log(256)) < 0.1 * math.log(256)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.blocks[0].ffn.w.weight.shape[0] == model.spec.d_ff


def test_final_norm_only_where_the_stream_is_not_normalised():
    pre, post = DecoderLM(spec(placement="pre")), DecoderLM(spec(placement="post"))
    assert isinstance(pre.final_norm, NORMS["layer"])
    assert isinstance(post.final_norm, nn.Identity)
    assert isinstance(DecoderLM(spec(placement="pre", norm="rms")).final_norm, NORMS["rms"])
    assert isinstance(DecoderLM(spec(placement="peri", norm="dyt")).final_norm, NORMS["dyt"])
    assert FINAL_NORM == {"pre": True, "post": False, "peri": True, "output": True, "deepnorm": False}


def test_embeddings_tied_by_default_and_untied_on_request():
    tied = DecoderLM(spec())
    assert tied.head.weight is tied.tok_emb.weight
    untied = DecoderLM(spec(tie_embeddings=False))
    assert untied.head.weight is not untied.tok_emb.weight
    assert param_counts(untied)["total"] - param_counts(tied)["total"] == 256 * 32


def test_param_counts_by_hand():
    # pre, LayerNorm without bias, swiglu matched: d_ff = round(8 * 32 / 3) = 85; RoPE, tied
    model = DecoderLM(spec(ffn="swiglu"))
    D, V, L, d_ff = 32, 256, 2, 85
    assert model.spec.d_ff == d_ff
    ffn = 3 * D * d_ff
    block = 4 * D * D + ffn + 2 * D  # qkv + proj, FFN, two norm gains
    non_embedding = L * block + D  # + final norm
    counts = param_counts(model)
    assert counts == {"total": V * D + non_embedding, "non_embedding": non_embedding, "ffn": L * ffn}
    assert counts == {"total": 32864, "non_embedding": 24672, "ffn": 16320}


def test_param_counts_untied_learned_positions_with_bias():
    model = DecoderLM(spec(pos="learned", tie_embeddings=False, norm_bias=True, placement="post", ffn="relu"))
    D, V, L, T, d_ff = 32, 256, 2, 16, 128
    block = 4 * D * D + 2 * D * d_ff + 2 * 2 * D  # two norms with gain and bias
    counts = param_counts(model)
    assert counts["non_embedding"] == L * block  # post: no final norm
    assert counts["total"] == L * block + V * D + T * D + V * D
    assert counts["ffn"] == L * 2 * D * d_ff


def test_learned_positions():
    torch.manual_seed(0)
    model = DecoderLM(spec(pos="learned"))
    assert model.pos_emb is not None and model.pos_emb.weight.shape == (16, 32)
    assert not model.blocks[0].attn.rope
    assert DecoderLM(spec()).pos_emb is None
    idx = torch.randint(0, 256, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert model.pos_emb.weight.grad.abs().sum() > 0
    # positions matter: the same token at two positions gets two different logits
    same = torch.full((1, 16), 7)
    logits, _ = model(same)
    assert not torch.allclose(logits[0, 0], logits[0, 5], atol=1e-6)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rope_turns_pair_j_at_position_p_by_p_times_base_to_the_minus_2j_over_hd(base):
    attn = DecoderLM(spec(rope_base=base)).blocks[0].attn
    hd = attn.head_dim
    angles = [[p * base ** (-2 * j / hd) for j in range(hd // 2)] for p in range(16)]
    torch.testing.assert_close(attn.cos, torch.tensor(angles).cos())
    torch.testing.assert_close(attn.sin, torch.tensor(angles).sin())


def test_bad_head_split_names_both_keys():
    with pytest.raises(ValueError, match=r"model\.d_model.*model\.n_heads"):
        DecoderLM(spec(d_model=30, n_heads=4))


@pytest.mark.parametrize("pos", ["rope", "learned"])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_attention_is_causal(pos, placement):
    torch.manual_seed(0)
    model = DecoderLM(spec(pos=pos, placement=placement)).eval()
    idx = torch.randint(0, 256, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 256
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:], atol=1e-4)



def test_residual_projections_start_scaled_by_the_depth():
    # GPT-2's init: each block's output projections at 0.02 / sqrt(2 L), the other weights at 0.02
    torch.manual_seed(0)
    model = DecoderLM(spec(n_layers=8, d_model=128, n_heads=4))
    block = model.blocks[0]
    assert block.attn.proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
    assert block.ffn.w2.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_logit_softcap_is_cap_tanh_of_the_logits():
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    plain = DecoderLM(spec()).eval()
    capped = DecoderLM(spec(logit_softcap=0.05)).eval()  # below the logits' scale at init: the cap bites
    capped.load_state_dict(plain.state_dict())
    with torch.no_grad():
        raw, capped_logits = plain(idx)[0], capped(idx)[0]
    assert raw.abs().max() > 0.05
    torch.testing.assert_close(capped_logits, 0.05 * torch.tanh(raw / 0.05))


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_attn_softcap_caps_the_scores_before_the_causal_mask(n_kv_heads):
    """The attention output against softmax(mask(cap tanh(q k^T / sqrt(hd) / cap))) v, written out per head."""
    torch.manual_seed(0)
    cap, D, H, T = 0.5, 32, 4, 8
    attn = CausalSelfAttention(D, H, T, rope=True, rope_base=10000.0, n_kv_heads=n_kv_heads, softcap=cap)
    x = torch.randn(2, T, D)
    kv = (n_kv_heads or H) * D // H
    q, k, v = attn.qkv(x).split([D, kv, kv], dim=-1)
    heads = lambda t: t.view(2, T, -1, D // H).transpose(1, 2)  # noqa: E731
    q, k, v = apply_rope(heads(q), attn.cos, attn.sin), apply_rope(heads(k), attn.cos, attn.sin), heads(v)
    outs = []
    for h in range(H):
        j = h * k.shape[1] // H  # the k/v head that query head h reads
        scores = cap * torch.tanh(q[:, h] @ k[:, j].transpose(-1, -2) / math.sqrt(D // H) / cap)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        outs.append(scores.softmax(-1) @ v[:, j])
    want = attn.proj(torch.stack(outs, 1).transpose(1, 2).reshape(2, T, D))
    with torch.no_grad():
        torch.testing.assert_close(attn(x), want)
        attn.softcap = None  # SDPA without the cap: a different output
        assert not torch.allclose(attn(x), want, atol=1e-3)


def test_a_cap_far_above_the_scores_is_sdpa():
    torch.manual_seed(0)
    plain = DecoderLM(spec(n_kv_heads=1)).eval()
    capped = DecoderLM(spec(n_kv_heads=1, attn_softcap=1e6)).eval()
    capped.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(capped(idx)[0], plain(idx)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("placement", ["pre", "deepnorm"])
def test_zero_init_proj_starts_each_block_as_the_identity(placement):
    torch.manual_seed(0)
    model = DecoderLM(spec(zero_init_proj=True, placement=placement, norm="rms"))
    for block in model.blocks:
        assert not block.attn.proj.weight.any() and not block.ffn.w2.weight.any()
        assert block.attn.qkv.weight.std() > 0 and block.ffn.w.weight.std() > 0
    if placement == "pre":  # the residual stream passes untouched: logits = head(final_norm(embedding))
        idx = torch.randint(0, 256, (2, 16))
        with torch.no_grad():
            want = model.head(model.final_norm(model.tok_emb(idx)))
            torch.testing.assert_close(model(idx)[0], want)
    default = DecoderLM(spec(placement=placement, norm="rms"))
    assert default.blocks[0].attn.proj.weight.any() and default.blocks[0].ffn.w2.weight.any()


@pytest.mark.parametrize("scale", [None, 0.3])
def test_capped_attention_scales_by_the_head_width_or_the_given_scale(scale):
    """Windows of 5 tokens, heads 8 wide (T ≠ hd), 4 query heads on 2 k/v heads: the scores are q·k times 1/sqrt(hd)
    (or `scale`, μP's 1/hd), capped, masked and softmaxed, per head."""
    torch.manual_seed(0)
    cap, T, hd = 2.0, 5, 8
    q, k, v = torch.randn(2, 4, T, hd) * 3, torch.randn(2, 2, T, hd) * 3, torch.randn(2, 2, T, hd)
    factor = hd ** -0.5 if scale is None else scale
    outs = []
    for h in range(4):
        scores = cap * torch.tanh(q[:, h] @ k[:, h // 2].transpose(-1, -2) * factor / cap)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        outs.append(scores.softmax(-1) @ v[:, h // 2])
    torch.testing.assert_close(capped_attention(q, k, v, cap, scale), torch.stack(outs, 1))


def test_capped_attention_builds_its_mask_on_the_inputs_device():
    # the meta device stands in for a GPU: a mask left on the CPU would not mix with the scores
    q, kv = torch.randn(2, 4, 5, 8, device="meta"), torch.randn(2, 2, 5, 8, device="meta")
    out = capped_attention(q, kv, kv, 2.0)
    assert out.device.type == "meta" and out.shape == (2, 4, 5, 8)


@pytest.mark.parametrize("cap", [None, 0.5])
def test_attention_scores_use_the_given_scale_on_sdpas_path_and_the_capped_one(cap):
    """μP's q·k scale, 1/hd (mbexp.model.mup.attention_scale), reaches the scores whichever path computes them."""
    torch.manual_seed(0)
    D, H, T = 32, 2, 8
    attn = CausalSelfAttention(D, H, T, rope=True, rope_base=10000.0, scale=1 / (D // H), softcap=cap)
    x = torch.randn(2, T, D) * 3  # scores of order 1: 1/hd and 1/sqrt(hd) give visibly different weights
    with torch.no_grad():
        q, k, v = attn.heads(x)
        scores = q @ k.transpose(-1, -2) / (D // H)
        scores = scores if cap is None else cap * torch.tanh(scores / cap)
        weights = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        want = attn.proj((weights @ v).transpose(1, 2).reshape(2, T, D))
        torch.testing.assert_close(attn(x), want)
        attn.scale = None
        assert not torch.allclose(attn(x), want, atol=1e-3)


def test_flops_per_token_is_six_per_matmul_weight_plus_the_attention_term():
    """FLOPS_FORMULA, 6·N_matmul + 12·n_layers·d_model·seq_len, on a model whose matmul weights are counted by hand."""
    from mbexp.model import flops_per_token, flops_terms

    model = DecoderLM(spec(ffn="relu", hidden="4d", n_layers=3, d_model=32, seq_len=16))
    per_block = 32 * 3 * 32 + 32 * 32 + 2 * 32 * 128  # qkv, proj, the FFN's two matrices
    n_matmul = 3 * per_block + 256 * 32  # and the LM head (tied: the embedding is not a matmul)
    assert flops_terms(model) == {"n_matmul": n_matmul, "attention": 12 * 3 * 32 * 16}
    assert flops_per_token(model) == 6 * n_matmul + 12 * 3 * 32 * 16


def test_rope_keeps_the_activations_dtype_under_bfloat16_autocast():
    # the float32 cos/sin tables are cast to q's and k's dtype: the rotation does not promote them to float32
    attn = CausalSelfAttention(32, 2, 8, rope=True, rope_base=10000.0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        q, k, v = attn.heads(torch.randn(2, 8, 32))
    assert attn.cos.dtype == torch.float32 and q.dtype == k.dtype == v.dtype == torch.bfloat16


def test_learned_positions_are_indexed_on_the_inputs_device():
    # the meta device stands in for a GPU: positions made on the CPU would not index a GPU's embedding table
    model = DecoderLM(spec(pos="learned")).to("meta")
    seen = []
    model.pos_emb.register_forward_pre_hook(lambda module, args: seen.append(args[0].device.type))
    model(torch.randint(0, 256, (2, 16)).to("meta"))
    assert seen == ["meta"]


def test_an_unknown_position_scheme_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"^unknown model.pos 'alibi'; valid: rope, learned, sinusoidal$"):
        DecoderLM(spec(pos="alibi"))


def test_kv_heads_that_do_not_divide_the_heads_are_refused_in_words():
    with pytest.raises(ValueError, match=r"^model\.n_kv_heads=3 must divide model\.n_heads=4$"):
        CausalSelfAttention(32, 4, 8, rope=True, rope_base=10000.0, n_kv_heads=3)


def test_an_unknown_placement_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"^unknown placement 'sandwich'; valid: pre, post, peri, output, deepnorm$"):
        Block(spec(placement="sandwich"))


def test_every_norm_of_a_model_takes_the_specs_norm_options():
    """norm.alpha_init reaches DyT's every instance (a default left in place would hide a dropped option)."""
    model = DecoderLM(spec(norm="dyt", placement="peri", norm_alpha_init=0.3))
    alphas = [m.alpha.item() for m in model.modules() if isinstance(m, NORMS["dyt"])]
    assert len(alphas) == 4 * model.spec.n_layers + 1 and alphas == [pytest.approx(0.3)] * len(alphas)
