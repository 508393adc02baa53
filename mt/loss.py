"""Label-smoothed cross-entropy (Szegedy et al. 2016; the paper's 5.4, epsilon_ls = 0.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import PAD


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float):
    """Label-smoothed cross-entropy and plain NLL, both summed over non-PAD targets.

    The loss is the cross-entropy against q = (1 - eps) on the reference + eps / V on every
    token. Both come from one log_softmax, and the gradient is written directly as
    softmax - q: autograd through log_softmax, gather and sum would make several more passes
    over the (N, V) matrix, the largest in the model.
    """
    return SmoothedLoss.apply(logits.flatten(0, -2), target.flatten(), epsilon)


class SmoothedLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float):
        # logits (N, V), target (N,) -> loss, nll: scalars
        # at least float32: bf16/fp16 log-probabilities are too coarse for a loss
        lprobs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1)
        keep = (target != PAD).to(lprobs.dtype)  # (N,): multiply, not index (no copy)
        nll = -(lprobs.gather(1, target.unsqueeze(1)).squeeze(1) * keep).sum()
        uniform = -(lprobs.sum(-1) * keep).sum() / lprobs.size(-1)
        ctx.save_for_backward(lprobs, target, keep)
        ctx.epsilon, ctx.dtype = epsilon, logits.dtype
        ctx.mark_non_differentiable(nll)
        return (1.0 - epsilon) * nll + epsilon * uniform, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        lprobs, target, keep = ctx.saved_tensors
        eps = ctx.epsilon
        grad = lprobs.exp_()  # softmax, in place: the saved log-probs are used only here
        grad.sub_(eps / grad.size(-1))
        grad.scatter_add_(1, target.unsqueeze(1), grad.new_full((len(target), 1), eps - 1.0))
        grad.mul_((keep * grad_loss).unsqueeze(1))
        return grad.to(ctx.dtype), None, None
