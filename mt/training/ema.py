"""An exponential moving average of the weights (`train.ema`): after each optimiser update,
ema = decay * ema + (1 - decay) * weights, kept in a copy of the model that validation decodes
and every checkpoint saves as the model's weights, while training goes on from its own.

torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn averages alike, but its decay
is fixed, so a warm-up would need an averaging function of our own anyway; it also names the
weights `module.*`, counts updates again in a tensor of its own, and copies the weights at
its first update instead of averaging them in. A copy of the model and a lerp a tensor
(public API; the recipe's model has about 60 tensors) are simpler.
"""

from __future__ import annotations

import copy

import torch


class Ema:
    """A copy of `model` (float32, as training keeps its weights) that follows its weights at
    `decay`, its buffers copied as they are."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        # the copy keeps tied parameters tied: parameters() lists each once, as the model's
        self.model = copy.deepcopy(model).requires_grad_(False).eval()
        self.decay = decay

    def decay_at(self, step: int) -> float:
        """The decay of update `step` (1 for the first): at most (1 + step) / (10 + step), as
        TensorFlow's ExponentialMovingAverage with num_updates. Without that warm-up the
        average of a run of a few thousand updates would still hold much of the random
        initial weights (0.999 ** 1410 = 24% after the 20-minute recipe's 1,410 updates),
        and validate and save a model worse than the one training has."""
        return min(self.decay, (1 + step) / (10 + step))

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        """Average in the weights of `model` after its update `step`."""
        weight = 1.0 - self.decay_at(step)
        for mine, theirs in zip(self.model.parameters(), model.parameters(), strict=True):
            mine.lerp_(theirs, weight)
        for mine, theirs in zip(self.model.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)
