"""Optimiser updates: AdamW, mixed precision (with fp16's gradient scaler), gradient
accumulation over batches and over ranks, clipping; each update's typed result."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from .batches import Batch
from .config import TrainConfig
from .device import autocast, precision_for
from .loss import smoothed_loss
from .model import PAD
from .packing import PackedBatch, each
from .progress import say
from .ranks import Ranks
from .warmup import compiles, measure_precision, rehearse

BY_NAME = {"fp32": None, "bf16": torch.bfloat16}  # what train.precision auto measures on a CPU


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
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.autocast]

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and NLL sums of a batch on the device, in the run's precision: what
        `rehearse` compiles, model and loss in one graph."""
        return self.forward_in(self.autocast, batch)

    def forward_in(self, dtype: torch.dtype | None, batch: Batch) -> tuple[torch.Tensor, ...]:
        packed = batch if isinstance(batch, PackedBatch) else None
        with autocast(self.device, dtype):
            logits = self.net(batch[0], batch[1], packed)
            return smoothed_loss(logits, batch[2], self.t.label_smoothing)

    def rehearse(self, batch: Batch, packed: bool, measured: str = "") -> None:
        """Before the first update, on its first batch: on a CPU, measure train.precision
        auto (`measured`: what an earlier session of the run chose, kept); compile where that
        pays (`warmup.compiles`) and, on a GPU, refuse a batch too big for it (`rehearse`)."""
        self.model.train()
        batch = each(lambda x: x.to(self.device), batch)
        if self.t.precision == "auto" and self.device.type == "cpu":
            self._measure_precision(batch, measured)
        compile = compiles(self.t.compile, self.device.type, packed)
        if not compile and self.device.type != "cuda":
            return
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        moments = 0 if self.optimizer.state else 2 * weights  # AdamW's, at its first step
        done = rehearse(self.forward, batch, self.model, compile, self.t.max_tokens, say, moments)
        self.step_forward, self.rehearsal_s = done.forward, done.seconds
        self.compiled = done.compiled

    def _measure_precision(self, batch: Batch, measured: str) -> None:
        if measured:  # a resumed run computes as it did
            self.autocast = torch.bfloat16 if measured == "bf16" else None
            self.precision_why = f"auto: {measured}, as measured when the run started"
            return
        forwards = {name: partial(self.forward_in, dtype) for name, dtype in BY_NAME.items()}
        tokens = int((batch[2] != PAD).sum())
        done = measure_precision(forwards, batch, self.model, tokens)
        self.autocast, self.precision_why, self.rates = done.dtype, done.why, done.rates

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scaler.load_state_dict(saved["scaler"])

    def __call__(self, batches: list[Batch], lr: float) -> Update:
        """One update at rate `lr` over `batches`; losses normalised by target tokens."""
        t, world = self.t, self.ranks.world
        tokens = sum(int((batch[2] != PAD).sum()) for batch in batches)  # labels, on the host
        global_tokens = self.ranks.total([float(tokens)])[0]
        norm = global_tokens / world  # DDP averages gradients: this makes the per-token mean
        self.model.train()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, nll
        for i, batch in enumerate(batches):
            batch = each(lambda x: x.to(self.device, non_blocking=True), batch)
            skip_sync = i < len(batches) - 1 and hasattr(self.net, "no_sync")
            with self.net.no_sync() if skip_sync else nullcontext():
                loss, nll = self.step_forward(batch)
                self.scaler.scale(loss / norm).backward()
            sums += torch.stack((loss.detach(), nll)).double()  # no host sync per batch
        loss_sum, nll_sum = self.ranks.total(sums.tolist())
        loss, nll = loss_sum / global_tokens, nll_sum / global_tokens
        if not math.isfinite(loss_sum):
            self.optimizer.zero_grad(set_to_none=True)
            return Update(loss, nll, tokens, lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.unscale_(self.optimizer)
        grad_norm = None
        if t.clip_norm:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.get_scale() < scale:  # fp16 gradients overflowed: the scaler skipped
            return Update(loss, nll, tokens, lr, grad_norm, overflow=True)  # the step
        padded = sum(int((b[0] == PAD).sum() + (b[2] == PAD).sum()) for b in batches)
        cells = sum(b[0].numel() + b[2].numel() for b in batches)
        return Update(loss, nll, tokens, lr, grad_norm, False, padded, cells)
