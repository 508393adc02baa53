"""One optimiser update, `Updater.__call__`: each batch's loss (mt.training.loss.batch_loss,
in the precision the rehearsal chose, compiled where it found that pays) and its backward
pass, accumulated over batches and over ranks, then clipping and AdamW's step (with fp16's
gradient scaler); each update's typed result."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from ..config import TrainConfig
from ..data.batch import Batch
from ..device import autocast, precision_for
from .loss import batch_loss
from .ranks import Ranks

Loss = Callable[[Batch], tuple[torch.Tensor, torch.Tensor]]  # batch -> (loss, nll) sums


@dataclass
class Update:
    """What one optimiser update did, for the log and the checks."""

    loss: float  # label-smoothed, per target token of all ranks; not finite: skipped
    nll: float
    tokens: int  # target tokens of this rank
    lr: float
    # before clipping, where train.clip_norm is set; on the device: reading it waits for the GPU
    grad_norm: torch.Tensor | None = None
    # gradients not finite though the loss was: the scaler skipped the update; in fp16 they
    # overflowed (and the scale backs off), in bf16 and fp32 the run is in trouble
    overflow: bool = False
    padded: int = 0  # padding cells among the `cells` of sources and labels
    cells: int = 0
    fp16: bool = False  # in fp16, with its gradient scaler

    @property
    def counted(self) -> bool:
        """Whether the update moved the weights, and so the step count and the schedule."""
        return not self.overflow and math.isfinite(self.loss)


def build_optimizer(model: torch.nn.Module, t: TrainConfig, device: torch.device):
    """AdamW with the paper's betas and epsilon; weight decay only on matrices, as nanoGPT
    does: decaying LayerNorm gains and biases pulls them towards 0, which is no prior."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=0.0,  # set before every update by the schedule
        betas=(0.9, 0.98),
        eps=1e-9,
        fused=device.type in ("cuda", "cpu"),  # one kernel, not a loop over tensors
    )


def loss_in(
    net: torch.nn.Module, dtype: torch.dtype | None, t: TrainConfig, pad: int, compiled: bool
) -> Loss:
    """`batch_loss` of `net` under `dtype`'s autocast (None: float32), labels of id `pad`
    (the model's) not counted, compiled where `compiled`: what an update runs on a batch, and
    what the rehearsal times and tries to compile (mt.training.rehearsal)."""

    def loss(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(batch.src.device, dtype):
            return batch_loss(net, batch, t.label_smoothing, pad)

    return torch.compile(loss, dynamic=False) if compiled else loss


class Optimiser:
    """AdamW and fp16's gradient scaler: what updates change besides the weights, saved with
    every checkpoint."""

    def __init__(self, model: torch.nn.Module, t: TrainConfig, device: torch.device) -> None:
        self.adamw = build_optimizer(model, t, device)
        fp16 = precision_for(t.precision, device)[0] == torch.float16
        self.scaler = torch.amp.GradScaler(device.type, enabled=fp16)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.adamw.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.adamw.load_state_dict(saved["optimizer"])
        self.scaler.load_state_dict(saved["scaler"])


class Updater:
    """Updates `model` on this rank's batches with `optimiser`, each batch's loss computed by
    `net` (the model, or DDP's wrapper of it) in `dtype` (None: float32), compiled where
    `compiled`: what the rehearsal decided (`rehearsal.plan_update`)."""

    def __init__(
        self,
        model: torch.nn.Module,
        net: torch.nn.Module,
        optimiser: Optimiser,
        t: TrainConfig,
        ranks: Ranks,
        dtype: torch.dtype | None,
        compiled: bool,
    ) -> None:
        self.model, self.net, self.t, self.ranks = model, net, t, ranks
        self.device = ranks.device
        self.pad = model.cfg.pad_id  # labels of this id are padding, not targets
        self.optimizer, self.scaler = optimiser.adamw, optimiser.scaler
        self.fp16 = self.scaler.is_enabled()
        if not self.fp16 and self.device.type == "cuda":
            # a scaler at a constant scale of 1 (saved nowhere): the public way a fused
            # optimiser is told on the GPU to skip its step, the gradients unchanged
            self.scaler = torch.amp.GradScaler(self.device.type, init_scale=1.0)
        self.loss = loss_in(net, dtype, t, self.pad, compiled)

    def __call__(self, batches: list[Batch], lr: float) -> Update:
        """One update at rate `lr` over `batches`; losses normalised by target tokens.

        On a GPU nothing waits for the device until the update is enqueued whole: whether it
        is skipped (a non-finite loss or gradient, fp16 gradients that overflowed) is decided
        on the device, where the fused optimiser skips its step, and the host reads its few
        numbers once, at the end, for the step count and the schedule."""
        tokens = sum(int((b.labels != self.pad).sum()) for b in batches)  # on the host
        global_tokens = self._total_tokens(tokens)
        norm = global_tokens / self.ranks.world  # DDP averages gradients: per-token mean
        self.model.train()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, nll
        for i, batch in enumerate(batches):
            batch = batch.map(lambda x: x.to(self.device, non_blocking=True))
            skip_sync = i < len(batches) - 1 and hasattr(self.net, "no_sync")
            with self.net.no_sync() if skip_sync else nullcontext():
                loss, nll = self.loss(batch)
                self.scaler.scale(loss / norm).backward()
            sums += torch.stack((loss.detach(), nll)).double()
        sums = self.ranks.sum_(sums) / global_tokens
        grad_norm, overflow = self._step(torch.isfinite(sums[0]), lr)
        loss, nll, overflowed = torch.cat((sums, overflow.double().view(1))).tolist()
        if not math.isfinite(loss):
            return Update(loss, nll, tokens, lr)
        if overflowed:  # the scaler skipped the step
            return Update(loss, nll, tokens, lr, grad_norm, overflow=True, fp16=self.fp16)
        pad = self.pad
        padded = sum(int((b.src == pad).sum() + (b.labels == pad).sum()) for b in batches)
        cells = sum(b.src.numel() + b.labels.numel() for b in batches)
        return Update(loss, nll, tokens, lr, grad_norm, False, padded, cells)

    def _total_tokens(self, tokens: int) -> float | torch.Tensor:
        """This update's target tokens on every rank: a number with one rank, else summed
        on the device, which the host does not wait for."""
        if self.ranks.world == 1:
            return float(tokens)
        mine = torch.tensor([float(tokens)], dtype=torch.float64)
        return self.ranks.sum_(mine.to(self.device, non_blocking=True))[0]

    def _step(self, finite: torch.Tensor, lr: float) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The optimiser's step, skipped where the loss is not `finite` or a gradient is not;
        the gradient norm before clipping (where measured) and whether the gradients were not
        finite though the loss was (fp16: they overflowed), both on the device.

        On a GPU the step is skipped on the device by a gradient scaler (fp16's, or one at a
        constant scale of 1), so that the host does not wait; on a CPU nothing runs ahead of
        the host, which reads whether to step (so does MPS's unfused optimiser): the scaler's
        pass over the gradients would cost more there than the step itself."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        scaled = self.scaler.is_enabled()
        if scaled:  # a non-finite loss makes the gradients so: the scaler skips (and backs off)
            torch._foreach_mul_(grads, torch.where(finite, 1.0, math.nan))
        self.scaler.unscale_(self.optimizer)
        grad_norm = None
        if self.t.clip_norm:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.clip_norm)
        norm = torch.nn.utils.get_total_norm(grads) if grad_norm is None else grad_norm
        overflow = finite & ~torch.isfinite(norm)
        if scaled:
            self.scaler.step(self.optimizer)  # skipped on the device where not finite
            self.scaler.update(None if self.fp16 else 1.0)  # fp16's scale grows or backs off
        elif finite & ~overflow:  # the host reads
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, overflow
