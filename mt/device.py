"""Where a process computes, and in what precision."""

from __future__ import annotations

import torch

from .errors import ConfigError


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank)
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"run.device: {name} requested but CUDA is not available")
    return torch.device(name)


def precision_for(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain float32."""
    if name == "fp32" or (name == "auto" and device.type != "cuda"):
        return None
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]
