"""The model's Linear layers, whose every row is computed the same in any batch on a CPU.

MKL computes the rows of a float32 product in one of three orders of sums: a lone row (a
matrix-vector product), the rows of a short or ragged last block, and those of full blocks.
Which one a row gets depends on how many rows share its call, so a sentence's numbers would
depend on the sentences decoded with it, and now and then its translation (docs/translate.md,
"Decoding precision"). Outside training, a CPU's rows are padded with zeros to a multiple of
ROWS and cut off after: every row then lies in a full block, computed alike from 1 row to
thousands (measured on AVX2 and checked by tests/decoding/test_batch_invariance.py).
Training, and GPUs, multiply as nn.Linear does.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

ROWS = 16  # rows per call a multiple of this: every row in a full block of MKL's kernels


class RowLinear(nn.Linear):
    """nn.Linear (same parameters, same state dict) whose rows do not depend on their batch
    on a CPU outside training (see the module's doc)."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training or x.device.type != "cpu":
            return super().forward(x)
        rows = x.numel() // x.size(-1)
        # one contiguous (rows, in) matrix whatever x's layout, padded to full blocks
        padded = F.pad(x.reshape(rows, x.size(-1)), (0, 0, 0, -rows % ROWS))
        return super().forward(padded)[:rows].view(*x.shape[:-1], self.out_features)
