"""The label-smoothed loss taken in chunks of rows: the values and gradients of one piece."""

import pytest
import torch
import torch.nn.functional as F

import mt.training.loss
from mt.data.tokenizer import PAD
from mt.training.loss import smoothed_loss


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_the_loss_in_chunks_is_the_loss_in_one_piece(monkeypatch, dtype):
    torch.manual_seed(0)
    logits = torch.randn(7, 5, 11, dtype=torch.float64)
    target = torch.randint(4, 11, (7, 5))
    target[1, 2:] = PAD
    flat = logits.flatten(0, 1), target.flatten()
    expected = F.cross_entropy(*flat, ignore_index=PAD, label_smoothing=0.1, reduction="sum")
    plain = F.cross_entropy(*flat, ignore_index=PAD, reduction="sum")
    x = logits.clone().requires_grad_()
    (reference,) = torch.autograd.grad(
        F.cross_entropy(
            x.flatten(0, 1), flat[1], ignore_index=PAD, label_smoothing=0.1, reduction="sum"
        )
        * 3.0,
        x,
    )
    for chunk in (11 * 35, 11 * 3):  # one piece; chunks of 3 rows, the last one shorter
        monkeypatch.setattr(mt.training.loss, "CHUNK", chunk)
        x = logits.to(dtype).requires_grad_()
        loss, nll = smoothed_loss(x, target, 0.1)
        (grad,) = torch.autograd.grad(loss * 3.0, x)  # a scale, as 1 / tokens is
        assert loss.dtype == nll.dtype == torch.promote_types(dtype, torch.float32)
        assert grad.dtype == dtype
        tolerance = (
            dict(rtol=1e-12, atol=1e-10) if dtype == torch.float64 else dict(rtol=0.02, atol=0.01)
        )
        if dtype == torch.float64:
            torch.testing.assert_close(loss, expected, **tolerance)
            torch.testing.assert_close(nll, plain, **tolerance)
        torch.testing.assert_close(grad.double(), reference, **tolerance)
        assert grad[1, 2:].abs().max() == 0  # no gradient through padding
