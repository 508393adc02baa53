"""What a batch costs: `batch_loss`, the model's label-smoothed cross-entropy (Szegedy et al.
2016; the paper's 5.4, epsilon_ls = 0.1) on a batch, summed over its target tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data.batch import Batch
from ..data.tokenizer import PAD

CHUNK = 2**25  # logits a chunk (128 MiB in float32): whole, (N, V) never is in float32


def batch_loss(
    model: torch.nn.Module, batch: Batch, label_smoothing: float, pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The label-smoothed loss and the NLL of `model` on `batch` (tensors on its device),
    both summed over its labels that are not `pad` (the model's pad id)."""
    logits = model(batch.src, batch.tgt_in, batch.packed)
    return smoothed_loss(logits, batch.labels, label_smoothing, pad)


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int = PAD):
    """Label-smoothed cross-entropy and plain NLL, both summed over targets that are not
    `pad` (the model's pad id).

    The loss is the cross-entropy against q = (1 - eps) on the reference + eps / V on every
    token. Both come from one log_softmax, and the gradient is written directly as
    softmax - q: autograd through log_softmax, gather and sum would make several more passes
    over the (N, V) matrix, the largest in the model.
    """
    return SmoothedLoss.apply(logits.flatten(0, -2), target.flatten(), epsilon, pad)


class SmoothedLoss(torch.autograd.Function):
    """Rows in chunks of at most CHUNK logits, each in float32 at least (bf16 log-probabilities
    are too coarse for a loss), the gradient made with the loss in place of each chunk's
    log-probabilities; the backward pass only scales it. One chunk stays in float32 until
    scaled (CHUNK bounds it); more go into a gradient in the logits' dtype: a GPU batch of
    64k tokens over 16k words would otherwise keep 4 GiB of float32 for the backward pass."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int):
        # logits (N, V), target (N,) -> loss, nll: scalars
        dtype = torch.promote_types(logits.dtype, torch.float32)
        keep = (target != pad).to(dtype)  # (N,): multiply, not index (no copy)
        nll = uniform = logits.new_zeros((), dtype=dtype)
        chunks, needs_grad = _chunks(logits), ctx.needs_input_grad[0]
        grad = torch.empty_like(logits) if needs_grad and len(chunks) > 1 else None
        for rows in chunks:
            lprobs = F.log_softmax(logits[rows].to(dtype), -1)  # (n, V)
            t, k = target[rows].unsqueeze(1), keep[rows].unsqueeze(1)
            nll = nll - (lprobs.gather(1, t) * k).sum()
            uniform = uniform - (lprobs.sum(-1, keepdim=True) * k).sum() / lprobs.size(-1)
            if needs_grad:  # softmax - q, the gradient at unmasked rows
                lprobs.exp_().sub_(epsilon / lprobs.size(-1))
                lprobs.scatter_add_(1, t, lprobs.new_full(t.shape, epsilon - 1.0))
                if grad is None:
                    grad = lprobs
                else:
                    grad[rows] = lprobs
        ctx.save_for_backward(grad, keep)
        ctx.dtype = logits.dtype
        ctx.mark_non_differentiable(nll)
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        grad, keep = ctx.saved_tensors
        # in place: a second backward through the same loss is refused (a version mismatch)
        return grad.mul_((keep * grad_loss).unsqueeze(1)).to(ctx.dtype), None, None, None


def _chunks(logits: torch.Tensor) -> list[slice]:
    rows = max(1, CHUNK // logits.size(-1))
    return [slice(i, i + rows) for i in range(0, len(logits), rows)]
