"""Optimiser updates: AdamW, mixed precision (with fp16's gradient scaler), gradient
accumulation over batches and over ranks, clipping; each update's typed result."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from ..config import TrainConfig
from ..data.batches import Batch
from ..data.packing import PackedBatch, each
from ..device import DTYPES, autocast, dtype_name, precision_for
from ..packed_attention import flex_refusal
from .loss import smoothed_loss
from .metrics import say
from .ranks import Ranks
from .rehearsal import compiles, measure_precision, on_every_rank, rehearse

MEASURED = ("fp32", "bf16")  # what train.precision auto measures on a CPU


@dataclass
class Update:
    """What one optimiser update did, for the log, the checks and the `on_update` hooks."""

    loss: float  # label-smoothed, per target token of all ranks; not finite: skipped
    nll: float
    tokens: int  # target tokens of this rank
    lr: float
    # before clipping, where train.clip_norm is set; on the device: reading it waits for the GPU
    grad_norm: torch.Tensor | None = None
    overflow: bool = False  # fp16 gradients overflowed: the scaler skipped the update
    padded: int = 0  # PAD cells among the `cells` of sources and labels
    cells: int = 0

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


class Updater:
    """Updates `model` on this rank's batches; its optimiser and scaler states are saved with
    every checkpoint. `net` is what computes: the model, or its DDP and compiled wrapping."""

    def __init__(self, model: torch.nn.Module, t: TrainConfig, ranks: Ranks) -> None:
        self.model, self.t, self.ranks, self.device = model, t, ranks, ranks.device
        self.pad = model.cfg.pad_id  # labels of this id are padding, not targets
        self.optimizer = build_optimizer(model, t, self.device)
        self.autocast, self.precision_why = precision_for(t.precision, self.device)
        fp16 = self.autocast == torch.float16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=fp16)
        self.net = model
        self.step_forward = self.forward  # compiled by `rehearse` where that pays
        self.rehearsal_s, self.compiled = 0.0, False
        self.rates: dict[str, float] = {}  # what train.precision auto measured, per precision

    def wrap(self) -> None:
        """Wrap the model once its weights are final (loaded, or as initialised)."""
        self.net = self.ranks.wrap(self.model)

    @property
    def precision(self) -> str:
        return dtype_name(self.autocast)

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and NLL sums of a batch on the device, in the run's precision: what
        `rehearse` compiles, model and loss in one graph."""
        return self.forward_in(self.autocast, batch)

    def forward_in(self, dtype: torch.dtype | None, batch: Batch) -> tuple[torch.Tensor, ...]:
        packed = batch if isinstance(batch, PackedBatch) else None
        with autocast(self.device, dtype):
            logits = self.net(batch[0], batch[1], packed)
            return smoothed_loss(logits, batch[2], self.t.label_smoothing, self.pad)

    def rehearse(self, batch: Batch, packed: bool, measured: str = "") -> None:
        """Before the first update, on its first batch: on a CPU, measure train.precision
        auto (`measured`: what an earlier session of the run chose, kept); compile where that
        pays (`rehearsal.compiles`) and, on a GPU, refuse a batch too big for it
        (`rehearsal.rehearse`)."""
        self.model.train()
        batch = each(lambda x: x.to(self.device), batch)
        if self.t.precision == "auto" and self.device.type == "cpu":
            self._measure_precision(batch, measured)
        compile = compiles(self.t.compile, self.device.type, packed)
        if not compile and self.device.type != "cuda":
            return
        why = flex_refusal(self.model.cfg, self.device.type, training=True)
        if compile and packed and why and self.ranks.main:
            say(f"packed rows attend by SDPA with dense masks, not FlexAttention: {why}")
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        moments = 0 if self.optimizer.state else 2 * weights  # AdamW's, at its first step
        done = on_every_rank(
            lambda: rehearse(
                self.forward, batch, self.model, compile, self.t.max_tokens, say, moments
            ),
            self.ranks.world,
        )
        self.step_forward, self.rehearsal_s = done.forward, done.seconds
        self.compiled = done.compiled

    def _measure_precision(self, batch: Batch, measured: str) -> None:
        if measured:  # a resumed run computes as it did
            self.autocast = DTYPES[measured]
            self.precision_why = f"auto: {measured}, as measured when the run started"
            return
        forwards = {name: partial(self.forward_in, DTYPES[name]) for name in MEASURED}
        tokens = int((batch[2] != self.pad).sum())
        done = measure_precision(forwards, batch, self.model, tokens)
        choice = MEASURED.index(dtype_name(done.dtype))
        # rank 0's choice on every rank, before the step is compiled and rehearsed in it
        choice = int(self.ranks.broadcast([float(choice)])[0])
        self.autocast, self.precision_why = DTYPES[MEASURED[choice]], done.why
        self.rates = done.rates

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scaler.load_state_dict(saved["scaler"])

    def __call__(self, batches: list[Batch], lr: float) -> Update:
        """One update at rate `lr` over `batches`; losses normalised by target tokens.

        Nothing waits for the device until the update is enqueued whole: whether it is
        skipped (a non-finite loss, fp16 gradients that overflowed) is decided on the device,
        where the fused optimiser skips its step, and the host reads its few numbers once,
        at the end, for the step count and the schedule."""
        tokens = sum(int((batch[2] != self.pad).sum()) for batch in batches)  # labels, on the host
        global_tokens = self._total_tokens(tokens)
        norm = global_tokens / self.ranks.world  # DDP averages gradients: per-token mean
        self.model.train()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, nll
        for i, batch in enumerate(batches):
            batch = each(lambda x: x.to(self.device, non_blocking=True), batch)
            skip_sync = i < len(batches) - 1 and hasattr(self.net, "no_sync")
            with self.net.no_sync() if skip_sync else nullcontext():
                loss, nll = self.step_forward(batch)
                self.scaler.scale(loss / norm).backward()
            sums += torch.stack((loss.detach(), nll)).double()
        sums = self.ranks.sum_(sums) / global_tokens
        grad_norm, overflow = self._step(torch.isfinite(sums[0]), lr)
        loss, nll, overflowed = torch.cat((sums, overflow.double().view(1))).tolist()
        if not math.isfinite(loss):
            return Update(loss, nll, tokens, lr)
        if overflowed:  # the scaler skipped the step
            return Update(loss, nll, tokens, lr, grad_norm, overflow=True)
        pad = self.pad
        padded = sum(int((b[0] == pad).sum() + (b[2] == pad).sum()) for b in batches)
        cells = sum(b[0].numel() + b[2].numel() for b in batches)
        return Update(loss, nll, tokens, lr, grad_norm, False, padded, cells)

    def _total_tokens(self, tokens: int) -> float | torch.Tensor:
        """This update's target tokens on every rank: a number with one rank, else summed
        on the device, which the host does not wait for."""
        if self.ranks.world == 1:
            return float(tokens)
        mine = torch.tensor([float(tokens)], dtype=torch.float64)
        return self.ranks.sum_(mine.to(self.device, non_blocking=True))[0]

    def _step(self, finite: torch.Tensor, lr: float) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The optimiser's step, skipped on the device where the loss is not `finite`; the
        gradient norm before clipping (where measured) and whether fp16 gradients overflowed
        (the scaler's own decision: a gradient not finite once unscaled), both on the device.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        fp16 = self.scaler.is_enabled()
        if fp16:  # a non-finite loss makes the gradients so: the scaler skips and backs off
            torch._foreach_mul_(grads, torch.where(finite, 1.0, math.nan))
        self.scaler.unscale_(self.optimizer)
        grad_norm = None
        if self.t.clip_norm:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.clip_norm)
        overflow = torch.zeros((), dtype=torch.bool, device=self.device)
        if fp16:
            norm = torch.nn.utils.get_total_norm(grads) if grad_norm is None else grad_norm
            overflow = finite & ~torch.isfinite(norm)
            self.scaler.step(self.optimizer)  # skipped by the scaler's found_inf, on the device
            self.scaler.update()
        elif self.optimizer.defaults.get("fused"):
            self.optimizer.found_inf = (~finite).float()  # the protocol GradScaler uses
            self.optimizer.grad_scale = None
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf, self.optimizer.grad_scale
        elif finite:  # an unfused optimiser (MPS) cannot skip on the device: the host reads
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, overflow
