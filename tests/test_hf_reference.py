"""mbexp's presets against Hugging Face `transformers` reference models (dev extra only): random tiny configs,
built from their config classes (nothing is downloaded), weights redrawn large enough that attention is far from
uniform, copied with a strict state-dict load; the logits must agree to 1e-4 in fp32. HF's FFN widths come from
the papers' rules, not from mbexp, so a wrong width rule fails the strict load; and a negative control per
constant (one thing changed) must move the logits by more than 10 x the tolerance, so each comparison can tell."""

import pytest
import torch

from mbexp.config import compose_config, model_spec, to_object
from mbexp.model import DecoderLM

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

V, D, L, H, T = 128, 64, 2, 4, 16
TOL = 1e-4
MULTIPLE_OF = 16  # Llama's `multiple_of` is a size choice (256 for Llama 2): at D = 64, 16 tells 8/3 D from 4D


def llama_ffn_width(d_model: int, multiple_of: int) -> int:
    """Llama's reference FeedForward (also OLMo 2's widths): 2/3 of 4D, truncated, rounded up to multiple_of."""
    hidden = int(2 * 4 * d_model / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def mbexp_model(*overrides: str) -> DecoderLM:
    cfg = to_object(compose_config([f"model.d_model={D}", f"model.n_layers={L}", f"model.n_heads={H}",
                                    f"model.seq_len={T}", *overrides]))
    return DecoderLM(model_spec(cfg, V)).eval()


def redraw(model: torch.nn.Module, seed: int, gain: float = 1.0) -> None:
    """Matrices ~ N(0, 0.2^2) (attention logits of order 10, far from uniform), gains `gain` + N(0, 0.2^2)
    (Gemma's (1 + g) gains: gain 0), biases N(0, 0.2^2): every parameter matters and none is at its init."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(gain + noise if p.dim() == 1 and name.endswith("weight") else noise)  # gains vs the rest


def rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """HF rotates half-dims (j, j + hd/2) of each head, mbexp adjacent pairs (2j, 2j + 1): reorder q/k rows."""
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def far_from_uniform(reference, idx) -> None:
    """The check has teeth only when attention is peaked: the mean of each query's largest attention weight, for
    queries that see at least 5 keys, is above 0.35 in every layer (uniform attention: at most 1/5)."""
    out = reference(idx, output_attentions=True)
    top = torch.stack([a[..., 4:, :].amax(-1).mean() for a in out.attentions])
    assert (top > 0.35).all(), top


def compare(reference, model: DecoderLM, state: dict, idx: torch.Tensor) -> float:
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        want = reference(idx).logits
        got, _ = model(idx)
    print(f"{type(reference).__name__}: max |logit diff| {(got - want).abs().max().item():.2e}, "
          f"logit scale {want.abs().max().item():.1f}")
    return (got - want).abs().max().item()


def gpt2_state(ref) -> dict:
    sd, out = ref.state_dict(), {}
    out["tok_emb.weight"] = out["head.weight"] = sd["transformer.wte.weight"]
    out["pos_emb.weight"] = sd["transformer.wpe.weight"]
    for i in range(L):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        for src, dst in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[f"{b}{dst}.weight"], out[f"{b}{dst}.bias"] = sd[f"{h}{src}.weight"], sd[f"{h}{src}.bias"]
        for src, dst in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.proj"), ("mlp.c_fc", "ffn.w"),
                         ("mlp.c_proj", "ffn.w2")):  # GPT-2's Conv1D stores (in, out)
            out[f"{b}{dst}.weight"], out[f"{b}{dst}.bias"] = sd[f"{h}{src}.weight"].T, sd[f"{h}{src}.bias"]
    out["final_norm.weight"], out["final_norm.bias"] = sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"]
    return out


def head_order(n_heads: int, n_kv: int, grouping: str) -> list[int]:
    """The query heads in the order mbexp groups them (query head i reads k/v head i // g, g = n_heads / n_kv:
    repeat_interleave, HF's repeat_kv): "interleave" keeps them; "repeat" (query head i reads k/v head i % n_kv,
    the wrong grouping) collects the heads that order gives each k/v head, so mbexp computes that grouping."""
    g = n_heads // n_kv
    return list(range(n_heads)) if grouping == "interleave" else [j + n_kv * r for j in range(n_kv) for r in range(g)]


def llama_like_state(ref, n_kv: int, *, rotary_order: bool = True, grouping: str = "interleave",
                     tied: bool = True, olmo: bool = False) -> dict:
    """Llama and OLMo 2 share names; OLMo 2 normalises sublayer outputs and q/k projections."""
    sd, out = ref.state_dict(), {}
    rows = (lambda w, n: rope_rows(w, n)) if rotary_order else (lambda w, n: w)
    heads = head_order(H, n_kv, grouping)
    hd = D // H

    def by_head(w: torch.Tensor, dim: int) -> torch.Tensor:  # q rows (dim 0) or o_proj columns (dim 1) reordered
        return torch.cat([w.narrow(dim, h * hd, hd) for h in heads], dim=dim)

    out["tok_emb.weight"] = sd["model.embed_tokens.weight"]
    out["head.weight"] = sd["model.embed_tokens.weight" if tied else "lm_head.weight"]
    for i in range(L):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        out[f"{b}attn.qkv.weight"] = torch.cat([by_head(rows(sd[a + "q_proj.weight"], H), 0),
                                                rows(sd[a + "k_proj.weight"], n_kv), sd[a + "v_proj.weight"]])
        out[f"{b}attn.proj.weight"] = by_head(sd[a + "o_proj.weight"], 1)
        out[f"{b}ffn.w.weight"] = sd[h + "mlp.gate_proj.weight"]
        out[f"{b}ffn.v.weight"] = sd[h + "mlp.up_proj.weight"]
        out[f"{b}ffn.w2.weight"] = sd[h + "mlp.down_proj.weight"]
        if olmo:
            out[f"{b}norm1.weight"] = sd[h + "post_attention_layernorm.weight"]
            out[f"{b}norm2.weight"] = sd[h + "post_feedforward_layernorm.weight"]
            out[f"{b}attn.q_norm.weight"] = by_head(rows(sd[a + "q_norm.weight"], H), 0)
            out[f"{b}attn.k_norm.weight"] = rows(sd[a + "k_norm.weight"], n_kv)
        else:
            out[f"{b}norm1.weight"] = sd[h + "input_layernorm.weight"]
            out[f"{b}norm2.weight"] = sd[h + "post_attention_layernorm.weight"]
    out["final_norm.weight"] = sd["model.norm.weight"]
    return out


def gemma3_state(ref, n_kv: int, *, one_plus_gain: bool = True, emb_scale: bool = True,
                 placement: str = "peri", qk_norm: str = "head") -> dict:
    """Gemma 3's norms compute x_hat * (1 + w): mbexp's gain g is 1 + w. placement="output" keeps only the
    sublayer-output norms (OLMo 2's block) and qk_norm="proj" tiles the per-head q/k gains over the projection:
    negative controls."""
    sd, out = ref.state_dict(), {}
    gain = (lambda w: 1 + w) if one_plus_gain else (lambda w: w)
    out["tok_emb.weight"] = out["head.weight"] = sd["model.embed_tokens.weight"]  # Gemma ties its head
    if emb_scale:
        out["emb_scale"] = torch.tensor(D ** 0.5)  # HF: a constant buffer, mbexp: a learnable scalar at init
    norms = {"norm1": "input_layernorm", "norm1_out": "post_attention_layernorm",
             "norm2": "pre_feedforward_layernorm", "norm2_out": "post_feedforward_layernorm"}
    if placement == "output":
        norms = {"norm1": "post_attention_layernorm", "norm2": "post_feedforward_layernorm"}
    for i in range(L):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        out[f"{b}attn.qkv.weight"] = torch.cat([rope_rows(sd[a + "q_proj.weight"], H),
                                                rope_rows(sd[a + "k_proj.weight"], n_kv), sd[a + "v_proj.weight"]])
        out[f"{b}attn.proj.weight"] = sd[a + "o_proj.weight"]
        for src, n in (("q_norm", H), ("k_norm", n_kv)):  # one gain per head dim, shared by the heads
            w = gain(rope_rows(sd[f"{a}{src}.weight"], 1))
            out[f"{b}attn.{src}.weight"] = w.repeat(n) if qk_norm == "proj" else w
        out[f"{b}ffn.w.weight"] = sd[h + "mlp.gate_proj.weight"]
        out[f"{b}ffn.v.weight"] = sd[h + "mlp.up_proj.weight"]
        out[f"{b}ffn.w2.weight"] = sd[h + "mlp.down_proj.weight"]
        for dst, src in norms.items():
            out[f"{b}{dst}.weight"] = gain(sd[f"{h}{src}.weight"])
    out["final_norm.weight"] = gain(sd["model.norm.weight"])
    return out


def sharpen_qk_norms(ref, factor: float, *, one_plus_gain: bool = False) -> None:
    """QK-norm fixes |q| and |k|: larger q/k gains make attention peaked."""
    with torch.no_grad():
        for layer in ref.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                if one_plus_gain:  # multiply the effective gain 1 + w
                    norm.weight.copy_(factor * (1 + norm.weight) - 1)
                else:
                    norm.weight.mul_(factor)


def idx():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(7))


def test_llama_width_rule_is_mbexps_8_3d_at_the_checkpoints_and_here():
    """Llama 2 7B and 13B (and OLMo 2 7B, 13B): D 4096 -> 11008, D 5120 -> 13824 with multiple_of 256."""
    from mbexp.model.ffn import ffn_hidden_dim

    for d, want in ((4096, 11008), (5120, 13824)):
        assert llama_ffn_width(d, 256) == want == ffn_hidden_dim(d, ffn="swiglu", rule="8_3d", multiple_of=256)
    assert llama_ffn_width(D, MULTIPLE_OF) == 176 != 4 * D


def test_gpt2_preset_matches_gpt2lmheadmodel():
    config = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=D, n_layer=L, n_head=H, n_inner=4 * D,
                                     bos_token_id=0, eos_token_id=0, activation_function="gelu_new",
                                     resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, layer_norm_epsilon=1e-5, attn_implementation="eager")
    ref = transformers.GPT2LMHeadModel(config).eval()
    redraw(ref, 0)
    far_from_uniform(ref, idx())
    state = gpt2_state(ref)
    assert compare(ref, mbexp_model("+arch=gpt2"), state, idx()) < TOL
    # negative control: the exact GELU where GPT-2 uses its tanh approximation
    assert compare(ref, mbexp_model("+arch=gpt2", "ffn.gelu=exact"), state, idx()) > 10 * TOL


def test_llama_preset_with_gqa_matches_llamaforcausallm():
    """Llama 3's constants: RoPE base 500,000, an untied head, eps 1e-5; grouped-query attention."""
    config = transformers.LlamaConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      num_key_value_heads=2, intermediate_size=llama_ffn_width(D, MULTIPLE_OF),
                                      max_position_embeddings=T, rms_norm_eps=1e-5, rope_theta=500000.0,
                                      tie_word_embeddings=False, attn_implementation="eager")
    ref = transformers.LlamaForCausalLM(config).eval()
    redraw(ref, 1)
    far_from_uniform(ref, idx())
    preset = ("+arch=llama", "model.n_kv_heads=2", f"hidden.multiple_of={MULTIPLE_OF}")
    model = mbexp_model(*preset)
    assert model.blocks[0].attn.qkv.weight.shape == ((H + 2 * 2) * D // H, D)
    assert model.head.weight is not model.tok_emb.weight
    state = llama_like_state(ref, 2, tied=False)
    assert compare(ref, model, state, idx()) < TOL
    # negative controls: q/k rows left in HF's rotary order; RoPE's base at 10,000 (Llama 1/2); the embedding
    # as the head (a tied head); the query heads grouped the wrong way (i % n_kv_heads, not i // group)
    assert compare(ref, model, llama_like_state(ref, 2, rotary_order=False, tied=False), idx()) > 10 * TOL
    assert compare(ref, mbexp_model(*preset, "model.rope_base=10000"), state, idx()) > 10 * TOL
    assert compare(ref, model, llama_like_state(ref, 2, tied=True), idx()) > 10 * TOL
    assert compare(ref, model, llama_like_state(ref, 2, grouping="repeat", tied=False), idx()) > 10 * TOL


def test_olmo2_preset_matches_olmo2forcausallm():
    """OLMo 2's constants: RoPE base 500,000, an untied head, eps 1e-6."""
    config = transformers.Olmo2Config(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      num_key_value_heads=H, intermediate_size=llama_ffn_width(D, MULTIPLE_OF),
                                      max_position_embeddings=T, rms_norm_eps=1e-6, rope_theta=500000.0,
                                      tie_word_embeddings=False, eos_token_id=0, attn_implementation="eager")
    ref = transformers.Olmo2ForCausalLM(config).eval()
    redraw(ref, 2)
    sharpen_qk_norms(ref, 3)
    far_from_uniform(ref, idx())
    preset = ("+arch=olmo2", f"hidden.multiple_of={MULTIPLE_OF}")
    model = mbexp_model(*preset)
    state = llama_like_state(ref, H, tied=False, olmo=True)
    assert compare(ref, model, state, idx()) < TOL
    # negative controls: q/k rows (and their QK-norm gains) left in HF's rotary order; RoPE's base at 10,000;
    # the embedding as the head
    assert compare(ref, model, llama_like_state(ref, H, rotary_order=False, tied=False, olmo=True), idx()) > 10 * TOL
    assert compare(ref, mbexp_model(*preset, "model.rope_base=10000"), state, idx()) > 10 * TOL
    assert compare(ref, model, llama_like_state(ref, H, tied=True, olmo=True), idx()) > 10 * TOL


def test_gemma_preset_matches_gemma3forcausallm_global_layers():
    """Gemma 3 (4B-27B widths: 4D) with every layer global (sliding_window_pattern=1, RoPE base 1,000,000) and
    its head size D/H with scores scaled by 1/sqrt(D/H) (query_pre_attn_scalar = head_dim): what the preset
    models. Peri-LN, per-head QK-norm, (1 + w) gains, the sqrt(D) embedding scale, a tied head, GQA."""
    config = transformers.Gemma3TextConfig(vocab_size=V, hidden_size=D, intermediate_size=4 * D,
                                           num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=2,
                                           head_dim=D // H, query_pre_attn_scalar=D // H, sliding_window_pattern=1,
                                           rope_theta=1_000_000.0, max_position_embeddings=T, rms_norm_eps=1e-6,
                                           tie_word_embeddings=True, attn_implementation="eager")
    ref = transformers.Gemma3ForCausalLM(config).eval()
    assert all(layer.self_attn.sliding_window is None for layer in ref.model.layers), "every layer global"
    redraw(ref, 3, gain=0.0)
    sharpen_qk_norms(ref, 3, one_plus_gain=True)
    far_from_uniform(ref, idx())
    preset = ("+arch=gemma", "model.n_kv_heads=2")
    model = mbexp_model(*preset)
    state = gemma3_state(ref, 2)
    assert compare(ref, model, state, idx()) < TOL
    # negative controls: gains w as they are (not 1 + w); no sqrt(D) embedding scale; RoPE base 10,000 (Gemma's
    # local layers'); OLMo 2's output norms without input norms (not Peri-LN); QK-norm over whole projections
    assert compare(ref, model, gemma3_state(ref, 2, one_plus_gain=False), idx()) > 10 * TOL
    unscaled = mbexp_model(*preset, "model.emb_scale=false")
    assert compare(ref, unscaled, gemma3_state(ref, 2, emb_scale=False), idx()) > 10 * TOL
    assert compare(ref, mbexp_model(*preset, "model.rope_base=10000"), state, idx()) > 10 * TOL
    output = mbexp_model(*preset, "placement=output")
    assert compare(ref, output, gemma3_state(ref, 2, placement="output"), idx()) > 10 * TOL
    proj = mbexp_model(*preset, "model.qk_norm=proj")
    assert compare(ref, proj, gemma3_state(ref, 2, qk_norm="proj"), idx()) > 10 * TOL


def gemma2_state(ref) -> dict:
    """Gemma 2's names are Gemma 3's without QK-norm: its sandwich norms, (1 + w) gains, the sqrt(D) scale."""
    sd, out = ref.state_dict(), {}
    out["tok_emb.weight"] = out["head.weight"] = sd["model.embed_tokens.weight"]
    out["emb_scale"] = torch.tensor(D ** 0.5)
    norms = {"norm1": "input_layernorm", "norm1_out": "post_attention_layernorm",
             "norm2": "pre_feedforward_layernorm", "norm2_out": "post_feedforward_layernorm"}
    for i in range(L):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        out[f"{b}attn.qkv.weight"] = torch.cat([rope_rows(sd[a + "q_proj.weight"], H),
                                                rope_rows(sd[a + "k_proj.weight"], 2), sd[a + "v_proj.weight"]])
        out[f"{b}attn.proj.weight"] = sd[a + "o_proj.weight"]
        out[f"{b}ffn.w.weight"] = sd[h + "mlp.gate_proj.weight"]
        out[f"{b}ffn.v.weight"] = sd[h + "mlp.up_proj.weight"]
        out[f"{b}ffn.w2.weight"] = sd[h + "mlp.down_proj.weight"]
        for dst, src in norms.items():
            out[f"{b}{dst}.weight"] = 1 + sd[f"{h}{src}.weight"]
    out["final_norm.weight"] = 1 + sd["model.norm.weight"]
    return out


def test_softcaps_match_gemma2forcausallm():
    """Gemma 2's logit and attention soft-capping (model.logit_softcap, model.attn_softcap) on the gemma preset
    without QK-norm and with RoPE base 10,000: every layer global (the window spans the sequence), scores scaled
    by 1/sqrt(D/H) (query_pre_attn_scalar = head_dim). Caps small enough to bite on these logits."""
    logit_cap, attn_cap = 5.0, 4.0
    config = transformers.Gemma2Config(vocab_size=V, hidden_size=D, intermediate_size=4 * D, num_hidden_layers=L,
                                       num_attention_heads=H, num_key_value_heads=2, head_dim=D // H,
                                       query_pre_attn_scalar=D // H, sliding_window=T,
                                       layer_types=["full_attention"] * L, rope_theta=10000.0,
                                       max_position_embeddings=T, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                       final_logit_softcapping=logit_cap, attn_logit_softcapping=attn_cap,
                                       attn_implementation="eager")
    ref = transformers.Gemma2ForCausalLM(config).eval()
    redraw(ref, 4, gain=0.0)
    far_from_uniform(ref, idx())
    preset = ("+arch=gemma", "model.n_kv_heads=2", "model.qk_norm=none", "model.rope_base=10000",
              f"model.logit_softcap={logit_cap}", f"model.attn_softcap={attn_cap}")
    with torch.no_grad():
        raw = ref.model(idx()).last_hidden_state @ ref.lm_head.weight.T
    assert raw.abs().max() > 2 * logit_cap, "the logit cap bites"
    state = gemma2_state(ref)
    assert compare(ref, mbexp_model(*preset), state, idx()) < TOL
    # negative controls: each cap off in turn
    for off in ("model.logit_softcap=null", "model.attn_softcap=null"):
        assert compare(ref, mbexp_model(*preset, off), state, idx()) > 10 * TOL, off
