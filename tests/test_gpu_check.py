"""scripts/gpu_check.py runs only by hand on a GPU machine; its FLOP count is tested here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mt.config import ModelConfig
from mt.model import Transformer

_spec = importlib.util.spec_from_file_location(
    "gpu_check", Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def test_forward_flops_match_what_torch_counts_for_the_model():
    cfg = ModelConfig(d_model=32, heads=4, encoder_layers=2, decoder_layers=3, d_ff=48)
    model = Transformer(cfg, 50, 60).eval()
    for s, t in ((7, 5), (3, 11)):  # one pair: no padding, every FLOP is the model's
        # the math backend: its attention matmuls are ops the counter sees
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(torch.ones(1, s, dtype=torch.long), torch.ones(1, t, dtype=torch.long))
        assert gpu_check.forward_flops(cfg, 60, s, t) == counter.get_total_flops()
    pairs = gpu_check.forward_flops(cfg, 60, np.array([7, 3]), np.array([5, 11]))
    assert pairs.tolist() == [
        gpu_check.forward_flops(cfg, 60, 7, 5),
        gpu_check.forward_flops(cfg, 60, 3, 11),
    ]


def test_peak_of_known_gpus():
    assert gpu_check.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_check.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_check.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_check.peak_flops("Some Future GPU") is None
