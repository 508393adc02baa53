"""The encoder–decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Reads in the order of the paper: positional encodings (3.5), attention (3.2), the layers with
their feed-forward networks and residual connections (3.1, 3.3), then the whole model with its
embeddings (3.4), and last the cache for decoding one token at a time.

Shapes: B batch, S source length, T target length, D d_model, H heads, K = D / H per head,
V vocabulary, L decoder layers. Masks are bool and True where attention is allowed:
`src_keep` (B, 1, 1, S), as `encode` returns it, is True at real (non-PAD) source tokens.
Packed rows (mt.data.packing) hold several sentences each: their masks keep every sentence to
itself (mt.packed_attention), as bool tensors or, compiled, as FlexAttention block masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from .config import ModelConfig
from .data.batch import Packing
from .data.tokenizer import Specials
from .packed_attention import document_masks, use_flex
from .row_linear import RowLinear

__all__ = ["DecoderState", "Transformer", "max_sentence_tokens"]


def max_sentence_tokens(cfg: ModelConfig) -> int:
    """The most tokens a sentence may have, and a translation before its EOS: every position
    but one, left for EOS (source, labels, output) or BOS (decoder input)."""
    return cfg.max_positions - 1


def sinusoids(length: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(...) (3.5) -> (length, D).
    "halves": sines then cosines, in float64 as in transformers' Marian: its exact table."""
    if layout == "halves":
        freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        angle = torch.arange(length, dtype=torch.float64).unsqueeze(1) * freq
        return torch.cat((angle.sin(), angle.cos()), dim=-1).float()
    freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (D/2,)
    angle = torch.arange(length).unsqueeze(1) * freq  # (length, D/2)
    return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)  # sin, cos interleaved


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


class Dropout(nn.Dropout):
    """nn.Dropout with a cheaper mask on the CPU, where `bernoulli_` draws a 32-bit random
    number per element and took a tenth of a training step. This takes 16 random bits per
    element from the same generator (so a seed, or a resume, gives the same masks): the keep
    probability is exact to 2^-16. Elsewhere (CUDA's fused kernel) it is nn.Dropout.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        n = x.numel()
        bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
        # each int16 is uniform on [-2^15, 2^15): keep those above the lowest p * 2^16
        keep = bits.view(torch.int16)[:n].view(x.shape) >= round(self.p * 2**16) - 2**15
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))


def explicit_attention(device_type: str, dtype: torch.dtype) -> bool:
    """Whether attention on `device_type` in `dtype` is faster as explicit matmuls and softmax
    than by SDPA's fused kernels: bf16 and fp16 on the CPU, where SDPA's flash kernel took a
    large share of a training step on Xeons with and without bf16 units, while in float32
    SDPA is faster. On GPUs SDPA has fused flash kernels for every precision.
    scripts/bench_train_speed.py measures this rule on any machine."""
    return device_type == "cpu" and dtype in (torch.bfloat16, torch.float16)


class Attention(nn.Module):
    """Multi-head scaled dot-product attention (3.2.1, 3.2.2), by SDPA or explicitly (see
    `explicit_attention`).

    Subclasses project queries, keys and values; this class splits heads, attends and applies
    the output projection W^O. With `need_weights` set (by `Transformer.attention_weights`)
    it takes the explicit path and keeps the weights in `self.weights`.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.d_head = cfg.heads, cfg.d_model // cfg.heads
        self.dropout = cfg.attention_dropout
        self.out = RowLinear(cfg.d_model, cfg.d_model)
        self.need_weights, self.weights = False, None

    def split_heads(self, x: Tensor) -> Tensor:
        # (B, L, n*D) -> (n, B, H, L, K): the n fused projections, each split into heads
        return x.unflatten(-1, (-1, self.heads, self.d_head)).permute(2, 0, 3, 1, 4)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask=None, causal=False) -> Tensor:
        # q (B, H, T, K); k, v (B, H, Lk, K); mask broadcasts to (B, H, T, Lk), or is a
        # BlockMask (then causal already, where it must be) -> (B, T, D)
        dropout = self.dropout if self.training else 0.0
        if isinstance(mask, BlockMask):
            if q.device.type == "cpu":  # inductor's CPU template fails on strided q, k, v
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            y = flex_attention(q, k, v, block_mask=mask)
        elif self.need_weights or explicit_attention(q.device.type, q.dtype):
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T, Lk)
            if causal:
                mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(-1)
            if self.need_weights:
                self.weights = weights
            y = F.dropout(weights, dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, mask, dropout, is_causal=causal)
        return self.out(y.transpose(1, 2).flatten(2))  # concatenate the heads: (B, T, D)


class SelfAttention(Attention):
    """Queries, keys and values from the same sequence, by one fused Linear."""

    def __init__(self, cfg: ModelConfig, causal: bool):
        super().__init__(cfg)
        self.qkv = RowLinear(cfg.d_model, 3 * cfg.d_model)
        self.causal = causal  # the decoder's: position t sees positions <= t only

    def forward(
        self, x: Tensor, mask=None, cache: Tensor | None = None, step: int | Tensor = 0
    ) -> Tensor:
        # x (B, T, D). Decoding step by step, x is position `step` alone (T = 1) and
        # cache (max_len, 2, B, H, K) holds the keys and values of the positions before it.
        q, k, v = self.split_heads(self.qkv(x))  # 3 x (B, H, T, K)
        if cache is None:  # a mask of packed rows is causal itself where it must be
            return self.attend(q, k, v, mask, self.causal and mask is None)
        kv = torch.stack((k, v)).squeeze(3)  # (2, B, H, K)
        if isinstance(step, int):
            cache[step] = kv
            k, v = cache[: step + 1].permute(1, 2, 3, 0, 4)  # the positions so far: no mask
            return self.attend(q, k, v)
        # a static cache: step (1,) on the device, the positions of a length bucket read
        # (DecoderState.read_length) and those after step masked, so that the steps of a
        # bucket have the same shapes (and can be one CUDA graph)
        cache.index_copy_(0, step, kv.unsqueeze(0))
        k, v = cache.permute(1, 2, 3, 0, 4)
        seen = torch.arange(len(cache), device=step.device).unsqueeze(0) <= step  # (1, read)
        return self.attend(q, k, v, seen)


class CrossAttention(Attention):
    """Decoder queries over the encoder output; keys and values by one fused Linear."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.q = RowLinear(cfg.d_model, cfg.d_model)
        self.kv = RowLinear(cfg.d_model, 2 * cfg.d_model)

    def memory_kv(self, memory: Tensor) -> Tensor:
        return self.split_heads(self.kv(memory))  # (B, S, D) -> (2, B, H, S, K)

    def forward(self, x: Tensor, memory_kv: Tensor, src_keep: Tensor) -> Tensor:
        # x (B, T, D), memory_kv (2, B, H, S, K) -> (B, T, D)
        (q,) = self.split_heads(self.q(x))
        k, v = memory_kv
        return self.attend(q, k, v, src_keep)


class Layer(nn.Module):
    """What encoder and decoder layers share: the position-wise feed-forward network (3.3)
    and the residual connection around every sub-layer."""

    def __init__(self, cfg: ModelConfig, sublayers: int):
        super().__init__()
        self.ff = nn.Sequential(
            RowLinear(cfg.d_model, cfg.d_ff),
            ACTIVATIONS[cfg.activation](),
            RowLinear(cfg.d_ff, cfg.d_model),
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(sublayers))
        self.drop = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def residual(self, x: Tensor, i: int, sublayer) -> Tensor:
        if self.norm_first:  # pre-norm: more stable to train deep or without warmup
            return x + self.drop(sublayer(self.norms[i](x)))
        return self.norms[i](x + self.drop(sublayer(x)))  # the paper: LayerNorm(x + Sublayer(x))


class EncoderLayer(Layer):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, sublayers=2)
        self.self_attn = SelfAttention(cfg, causal=False)

    def forward(self, x: Tensor, src_keep: Tensor) -> Tensor:  # x (B, S, D) -> (B, S, D)
        x = self.residual(x, 0, lambda h: self.self_attn(h, src_keep))
        return self.residual(x, 1, self.ff)


class DecoderLayer(Layer):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, sublayers=3)
        self.self_attn = SelfAttention(cfg, causal=True)
        self.cross_attn = CrossAttention(cfg)

    def forward(self, x, memory_kv, src_keep, cache=None, step=0, self_mask=None) -> Tensor:
        # x (B, T, D) -> (B, T, D); cache and step as in SelfAttention; src_keep is the
        # cross-attention mask, self_mask that of packed rows. Decoding, B may be k times the
        # N sources in memory_kv: rows i*k .. i*k+k-1 (beams) share source i, and attend to it
        # as k query positions of one row, with no copies of the source.
        def cross(h: Tensor) -> Tensor:
            queries = h.view(memory_kv.size(1), -1, h.size(-1))  # (N, k * T, D)
            return self.cross_attn(queries, memory_kv, src_keep).view(h.shape)

        x = self.residual(x, 0, lambda h: self.self_attn(h, self_mask, cache=cache, step=step))
        x = self.residual(x, 1, cross)
        return self.residual(x, 2, self.ff)


class Transformer(nn.Module):
    """Encoder–decoder Transformer. `forward` returns logits; callers apply log_softmax.

    Embeddings (3.4): with `share_embeddings`, the target embedding and the output projection
    are one matrix, and with a joint vocabulary the source embedding is that matrix too.
    `joint` defaults to "the vocabularies have the same size"; pass it to say so exactly.
    """

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, joint: bool | None = None):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=cfg.pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, d, padding_idx=cfg.pad_id)
        self.out = RowLinear(d, tgt_vocab, bias=False)
        joint = src_vocab == tgt_vocab if joint is None else joint
        if joint and src_vocab != tgt_vocab:
            raise ValueError(f"a joint vocabulary has one size, not {src_vocab} and {tgt_vocab}")
        if cfg.share_embeddings:
            self.out.weight = self.tgt_embed.weight
            if joint:
                self.src_embed.weight = self.tgt_embed.weight
        self.register_buffer("pe", sinusoids(cfg.max_positions, d, cfg.positions), persistent=False)
        if cfg.logits_bias:  # a buffer: saved and loaded, never trained
            self.register_buffer("logits_bias", torch.zeros(tgt_vocab))
        self.drop = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # pre-norm leaves the residual stream unnormalised: normalise the stack's output
        self.encoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.attention = ""  # how the last packed batch attended: "flex" or "sdpa"
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        # as fairseq: scaled by sqrt(D) in `embed`, embeddings start at unit variance
        for table in {self.src_embed.weight, self.tgt_embed.weight, self.out.weight}:
            nn.init.normal_(table, 0.0, self.cfg.d_model**-0.5)
        with torch.no_grad():
            pad = self.cfg.pad_id
            self.src_embed.weight[pad] = self.tgt_embed.weight[pad] = 0.0

    @property
    def specials(self) -> Specials:
        """The pad, BOS and EOS ids this model reads and writes."""
        return Specials(self.cfg.pad_id, self.cfg.bos_id, self.cfg.eos_id)

    def embed(
        self, table: nn.Embedding, tokens: Tensor, start: int | Tensor = 0, positions=None
    ) -> Tensor:
        # tokens (B, L) at positions start.. (start (1,) on the device: L = 1), or at
        # `positions` (B, L), those of packed rows -> (B, L, D)
        if positions is not None:
            pe = self.pe[positions]
        elif isinstance(start, Tensor):  # a static cache's step, not read by the host
            pe = self.pe.index_select(0, start)
        else:
            end = start + tokens.size(1)
            if end > len(self.pe):
                raise ValueError(
                    f"sequence of {end} tokens is longer than max_positions ({len(self.pe)})"
                )
            pe = self.pe[start:end]
        return self.drop(table(tokens) * math.sqrt(self.cfg.d_model) + pe)

    def encode(self, src: Tensor, mask=None, positions=None) -> tuple[Tensor, Tensor]:
        # src (B, S) -> memory (B, S, D), src_keep (B, 1, 1, S); mask and positions: those of
        # packed rows, where src_keep is not the cross-attention mask (see `forward`)
        src_keep = (src != self.cfg.pad_id)[:, None, None, :]
        x = self.embed(self.src_embed, src, positions=positions)
        for layer in self.encoder:
            x = layer(x, src_keep if mask is None else mask)
        return self.encoder_norm(x), src_keep

    def decoder_logits(self, tgt_in, memory, src_keep, self_mask=None, positions=None) -> Tensor:
        # tgt_in (B, T), starting with BOS; padding only at the end, which the causal mask
        # already hides from real positions -> logits (B, T, V). src_keep: the cross-attention
        # mask; self_mask and positions: those of packed rows
        x = self.embed(self.tgt_embed, tgt_in, positions=positions)
        for layer in self.decoder:
            x = layer(x, layer.cross_attn.memory_kv(memory), src_keep, self_mask=self_mask)
        return self.logits(x)

    def logits(self, x: Tensor) -> Tensor:
        # the decoder stack's output (..., D) -> logits (..., V)
        logits = self.out(self.decoder_norm(x))
        return logits + self.logits_bias.to(logits.dtype) if self.cfg.logits_bias else logits

    def forward(self, src: Tensor, tgt_in: Tensor, packed: Packing | None = None) -> Tensor:
        # src (B, S), tgt_in (B, T) -> logits (B, T, V). With `packed` (tensors), the rows
        # hold several sentences: attention stays inside each, positions restart at each.
        if packed is None:
            return self.decoder_logits(tgt_in, *self.encode(src))
        flex = use_flex(self.cfg, src.device.type, self.training)
        self.attention = "flex" if flex else "sdpa"  # the path taken, for gpu_check to report
        encoder, decoder, cross = document_masks(packed.src_doc, packed.tgt_doc, flex)
        memory, _ = self.encode(src, encoder, packed.src_pos)
        return self.decoder_logits(tgt_in, memory, cross, decoder, packed.tgt_pos)

    @torch.no_grad()
    def attention_weights(self, src: Tensor, tgt_in: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per decoder layer: self-attention (B, H, T, T) and cross-attention (B, H, T, S)
        weights of the teacher-forced pass, from the explicit-softmax path (slow)."""
        attns = [attn for layer in self.decoder for attn in (layer.self_attn, layer.cross_attn)]
        for attn in attns:
            attn.need_weights = True
        try:
            self(src, tgt_in)
            return [(layer.self_attn.weights, layer.cross_attn.weights) for layer in self.decoder]
        finally:
            for attn in attns:
                attn.need_weights, attn.weights = False, None

    def start_decoding(
        self,
        memory: Tensor,
        src_keep: Tensor,
        max_len: int,
        rows_per_source: int = 1,
        static: bool = False,
    ) -> DecoderState:
        """The cache for decoding up to `max_len` positions (BOS included) one at a time,
        `rows_per_source` rows (beams) per source sentence, rows of a source together.
        `static`: the step count lives on the device and the cache is read by length buckets,
        masked, so that few shapes serve all steps and no step needs the host."""
        memory_kv = self.memory_kv(memory)
        _, _, n, h, _, k = memory_kv.shape  # (L, 2, N, H, S, K)
        # position-major, so that appending a position and reordering the rows of the
        # positions so far both touch one contiguous block
        shape = (max_len, len(self.decoder), 2, n * rows_per_source, h, k)
        if not static:
            return DecoderState(src_keep, memory_kv, memory_kv.new_empty(shape))
        # zeros: masked positions get no weight, but NaN garbage times 0 would still be NaN
        position = torch.zeros(1, dtype=torch.long, device=memory.device)
        return DecoderState(src_keep, memory_kv, memory_kv.new_zeros(shape), position=position)

    def memory_kv(self, memory: Tensor) -> Tensor:
        # memory (N, S, D) -> the decoder's cross-attention keys and values (L, 2, N, H, S, K)
        return torch.stack([layer.cross_attn.memory_kv(memory) for layer in self.decoder])

    def decode_step_weights(self) -> dict[str, Tensor]:
        """The weights and biases of the Linear layers a decode step multiplies by, by name:
        those autocast casts at every step (the cross-attention keys and values are made
        once, by start_decoding)."""
        return {
            f"{name}.{key}": tensor
            for name, module in self.named_modules()
            if isinstance(module, nn.Linear)
            and (name == "out" or (name.startswith("decoder.") and not name.endswith(".kv")))
            for key, tensor in module.named_parameters(recurse=False)
        }

    def decode_step(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """tokens (B,): the previous output token (BOS first) -> logits (B, V) for the next
        one. Appends this position's self-attention keys and values to `state`."""
        step = state.step if state.position is None else state.position
        if state.position is None and state.step == len(state.self_kv):
            raise ValueError(f"decoding past max_len ({state.step}) given to start_decoding")
        x = self.embed(self.tgt_embed, tokens.unsqueeze(1), start=step)  # (B, 1, D)
        cache = state.self_kv if state.position is None else state.self_kv[: state.read_length()]
        for i, layer in enumerate(self.decoder):  # index: unbind's views can't be written
            x = layer(x, state.memory_kv[i], state.src_keep, cache[:, i], step)
        state.step += 1
        if state.position is not None:
            state.position += 1
        return self.logits(x.squeeze(1))


@dataclass
class DecoderState:
    """The cache that incremental decoding carries from step to step, for R rows (sentences,
    or sentences x beams) over N sources, R a multiple of N."""

    src_keep: Tensor  # (N, 1, 1, S)
    memory_kv: Tensor  # (L, 2, N, H, S, K): cross-attention keys and values, computed once
    self_kv: Tensor  # (max_len, L, 2, R, H, K): self-attention keys and values, by position
    step: int = 0  # positions decoded so far
    position: Tensor | None = None  # (1,) `step` on the device, for a static cache

    def select(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep rows `rows` (R',) in that order, and sources `sources` (N',) (None: all of
        them): reorders beams, drops finished sentences. Row r' of the new state must belong
        to source r' // (R' / N'), as rows do in start_decoding. A static cache is reordered
        in place (a CUDA graph reads it where it is), so sources is None there, and `rows`
        reorders its first R' rows: any after them (a bucket's padding) are left as they are.
        """
        so_far = self.self_kv[: self.step]
        if self.position is not None:
            so_far[:, :, :, : len(rows)].copy_(so_far.index_select(3, rows))
            return
        if sources is not None:
            self.src_keep = self.src_keep.index_select(0, sources)
            self.memory_kv = self.memory_kv.index_select(2, sources)
        # copy only the positions decoded so far, into a buffer that keeps room for the rest
        self_kv = self.self_kv.new_empty(
            len(self.self_kv), *self.self_kv.shape[1:3], len(rows), *self.self_kv.shape[4:]
        )
        torch.index_select(so_far, 3, rows, out=self_kv[: self.step])
        self.self_kv = self_kv

    def read_length(self) -> int:
        """The positions a step of a static cache reads: those so far and this one, rounded up
        to a power of 2 (at least 16) so that few shapes (CUDA graphs) serve all steps; those
        after this one are masked."""
        return min(len(self.self_kv), max(16, 1 << self.step.bit_length()))

    def load(self, memory_kv: Tensor, src_keep: Tensor) -> None:
        """A static state of at least these sizes, restarted on other sources: memory_kv
        (L, 2, N, H, S, K) and src_keep (N, 1, 1, S) copied into its first N sources and S
        positions, its cache emptied. Sources after N (a bucket's padding) see position 0 of a
        zero memory: finite outputs, which nobody reads."""
        _, _, n, _, s, _ = memory_kv.shape
        self.memory_kv.zero_()
        self.memory_kv[:, :, :n, :, :s] = memory_kv
        self.src_keep.zero_()
        self.src_keep[:n, :, :, :s] = src_keep
        self.src_keep[n:, :, :, 0] = True
        self.self_kv.zero_()  # masked positions get no weight, but NaN times 0 is NaN
        self.position.zero_()
        self.step = 0
