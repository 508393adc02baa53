"""Attention within packed rows: each sentence of a row sees only itself (document masks),
as bool masks or, compiled on a GPU, as FlexAttention block masks; and when FlexAttention
can be used."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import create_block_mask

from .config import ModelConfig

FLEX_MIN_HEAD = 16  # inductor's Triton FlexAttention refuses smaller head sizes


def flex_refusal(cfg: ModelConfig, device_type: str, training: bool) -> str:
    """Why packed rows of this model, compiled on `device_type`, cannot attend by
    FlexAttention ("" when they can): it runs on CUDA only (on a CPU it has no backward),
    compiles head sizes of FLEX_MIN_HEAD and more, and has no dropout on attention weights
    (dropping a probability and rescaling the rest comes after the softmax, where a
    score_mod cannot reach). Known from the config alone, so a run says it at start."""
    head = cfg.d_model // cfg.heads
    if device_type != "cuda":
        return f"FlexAttention trains on CUDA only, not on {device_type}"
    if head < FLEX_MIN_HEAD:
        return (
            f"model.d_model / model.heads = {head} per head; FlexAttention compiles "
            f"{FLEX_MIN_HEAD} or more"
        )
    if training and cfg.attention_dropout > 0:
        return f"model.attention_dropout is {cfg.attention_dropout:g}; FlexAttention has none"
    return ""


def use_flex(cfg: ModelConfig, device_type: str, training: bool) -> bool:
    """Whether packed rows attend by FlexAttention block masks: compiled (uncompiled it is a
    slow reference that materialises every score) and where `flex_refusal` finds nothing.
    Otherwise by dense bool masks, which SDPA's kernels take."""
    return torch.compiler.is_compiling() and not flex_refusal(cfg, device_type, training)


def document_masks(src_doc: Tensor, tgt_doc: Tensor, flex: bool):
    """The encoder, decoder and cross-attention masks of packed rows, from the sentence of
    every token in its row (src_doc (B, S), tgt_doc (B, T); -1 at padding): a token sees the
    tokens of its own sentence, in the decoder those up to itself. Padding sees everything and
    is seen by nothing: its outputs are discarded, and a query that sees nothing would make
    a row of -inf scores, NaN after softmax. BlockMasks with `flex`, else bool (B, 1, Lq, Lk).
    """

    def rule(q_doc: Tensor, k_doc: Tensor, causal: bool):
        def allowed(b, h, q, k):  # FlexAttention's mask_mod, and by broadcasting a bool mask
            same = (q_doc[b, q] == k_doc[b, k]) | (q_doc[b, q] < 0)
            return same & (q >= k) if causal else same

        if flex:
            lq, lk = q_doc.size(1), k_doc.size(1)
            return create_block_mask(allowed, len(q_doc), None, lq, lk, device=q_doc.device)
        b = torch.arange(len(q_doc), device=q_doc.device)[:, None, None]
        q = torch.arange(q_doc.size(1), device=q_doc.device)[:, None]
        return allowed(b, None, q, torch.arange(k_doc.size(1), device=q_doc.device)).unsqueeze(1)

    return (
        rule(src_doc, src_doc, False),
        rule(tgt_doc, tgt_doc, True),
        rule(tgt_doc, src_doc, False),
    )
