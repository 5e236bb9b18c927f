"""mbexp's presets against Hugging Face `transformers` reference models (dev extra only): random tiny configs,
weights redrawn large enough that attention is far from uniform, copied with a strict state-dict load; the
logits must agree to 1e-4 in fp32, and a negative control per model shows the comparison can tell."""

import pytest
import torch

from mbexp.config import compose_config, model_spec, to_object
from mbexp.model import DecoderLM

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

V, D, L, H, T = 128, 64, 2, 4, 16
TOL = 1e-4


def mbexp_model(*overrides: str) -> DecoderLM:
    cfg = to_object(compose_config([f"model.d_model={D}", f"model.n_layers={L}", f"model.n_heads={H}",
                                    f"model.seq_len={T}", *overrides]))
    return DecoderLM(model_spec(cfg, V)).eval()


def redraw(model: torch.nn.Module, seed: int) -> None:
    """Matrices ~ N(0, 0.2^2) (attention logits of order 10, far from uniform), gains 1 + N(0, 0.2^2),
    biases N(0, 0.2^2): every parameter matters and none is at its init value."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(1 + noise if p.dim() == 1 and name.endswith("weight") else noise)  # gains vs the rest


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


def llama_like_state(ref, n_kv: int, *, rotary_order: bool = True, olmo: bool = False) -> dict:
    """Llama and OLMo 2 share names; OLMo 2 normalises sublayer outputs and q/k projections."""
    sd, out = ref.state_dict(), {}
    rows = (lambda w, n: rope_rows(w, n)) if rotary_order else (lambda w, n: w)
    out["tok_emb.weight"] = out["head.weight"] = sd["model.embed_tokens.weight"]
    for i in range(L):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        out[f"{b}attn.qkv.weight"] = torch.cat([rows(sd[a + "q_proj.weight"], H), rows(sd[a + "k_proj.weight"], n_kv),
                                                sd[a + "v_proj.weight"]])
        out[f"{b}attn.proj.weight"] = sd[a + "o_proj.weight"]
        out[f"{b}ffn.w.weight"] = sd[h + "mlp.gate_proj.weight"]
        out[f"{b}ffn.v.weight"] = sd[h + "mlp.up_proj.weight"]
        out[f"{b}ffn.w2.weight"] = sd[h + "mlp.down_proj.weight"]
        if olmo:
            out[f"{b}norm1.weight"] = sd[h + "post_attention_layernorm.weight"]
            out[f"{b}norm2.weight"] = sd[h + "post_feedforward_layernorm.weight"]
            out[f"{b}attn.q_norm.weight"] = rows(sd[a + "q_norm.weight"], H)
            out[f"{b}attn.k_norm.weight"] = rows(sd[a + "k_norm.weight"], n_kv)
        else:
            out[f"{b}norm1.weight"] = sd[h + "input_layernorm.weight"]
            out[f"{b}norm2.weight"] = sd[h + "post_attention_layernorm.weight"]
    out["final_norm.weight"] = sd["model.norm.weight"]
    return out


def idx():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(7))


def test_gpt2_preset_matches_gpt2lmheadmodel():
    config = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=D, n_layer=L, n_head=H,
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
    config = transformers.LlamaConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      num_key_value_heads=2, intermediate_size=mbexp_model("+arch=llama").spec.d_ff,
                                      max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                      attn_implementation="eager")
    ref = transformers.LlamaForCausalLM(config).eval()
    redraw(ref, 1)
    far_from_uniform(ref, idx())
    model = mbexp_model("+arch=llama", "model.n_kv_heads=2")
    assert model.blocks[0].attn.qkv.weight.shape == ((H + 2 * 2) * D // H, D)
    assert compare(ref, model, llama_like_state(ref, 2), idx()) < TOL
    # negative control: q/k rows left in HF's rotary order
    assert compare(ref, model, llama_like_state(ref, 2, rotary_order=False), idx()) > 10 * TOL


def test_olmo2_preset_matches_olmo2forcausallm():
    config = transformers.Olmo2Config(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      num_key_value_heads=H, intermediate_size=mbexp_model("+arch=olmo2").spec.d_ff,
                                      max_position_embeddings=T, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                      attn_implementation="eager")
    ref = transformers.Olmo2ForCausalLM(config).eval()
    redraw(ref, 2)
    with torch.no_grad():  # QK-norm fixes |q| and |k|: larger q/k gains make attention peaked
        for layer in ref.model.layers:
            layer.self_attn.q_norm.weight.mul_(3)
            layer.self_attn.k_norm.weight.mul_(3)
    far_from_uniform(ref, idx())
    model = mbexp_model("+arch=olmo2")
    assert compare(ref, model, llama_like_state(ref, H, olmo=True), idx()) < TOL
    # negative control: q/k rows (and their QK-norm gains) left in HF's rotary order
    assert compare(ref, model, llama_like_state(ref, H, rotary_order=False, olmo=True), idx()) > 10 * TOL
