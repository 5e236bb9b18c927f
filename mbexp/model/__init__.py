"""The model: norms (norms.py), FFNs and the width rule (ffn.py), attention (attention.py), μP's width rules
(mup.py), and the block and decoder-only LM they build (decoder.py), whose public names are importable from here
(docs/model.md)."""

from mbexp.model.decoder import (
    FINAL_NORM,
    PLACEMENTS,
    POSITIONS,
    Block,
    DecoderLM,
    ModelSpec,
    deepnorm_alpha,
    deepnorm_beta,
    deepnorm_init_,
    flops_per_token,
    flops_terms,
    param_counts,
)

__all__ = ["FINAL_NORM", "PLACEMENTS", "POSITIONS", "Block", "DecoderLM", "ModelSpec",
           "deepnorm_alpha", "deepnorm_beta", "deepnorm_init_", "flops_per_token", "flops_terms",
           "param_counts"]
