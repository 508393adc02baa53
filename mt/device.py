"""Where a process computes, and in what precision."""

from __future__ import annotations

import torch

from .errors import ConfigError


def pick_device(
    name: str,
    local_rank: int = 0,
    cuda_devices: int | None = None,
    mps: bool | None = None,
) -> torch.device:
    """The device of the process with `local_rank` on its machine (LOCAL_RANK under torchrun).

    Each process of a machine gets its own GPU, whatever the spelling: `auto` and `cuda` take
    GPU `local_rank`, `cuda:N` takes GPU N + `local_rank` (so `cuda:4` with 4 processes uses
    GPUs 4 to 7). `cuda_devices` (the GPUs present) and `mps` default to what torch sees; the
    choice is a pure function of the arguments given.
    """
    if cuda_devices is None:
        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if mps is None:
        mps = torch.backends.mps.is_available()
    if name == "auto" and not cuda_devices:
        return torch.device("mps" if mps else "cpu")
    if name in ("auto", "cuda") or name.startswith("cuda:"):
        if not cuda_devices:
            raise ConfigError(f"run.device: {name} requested but CUDA is not available")
        index = int(name.partition(":")[2] or 0) + local_rank
        if index >= cuda_devices:
            raise ConfigError(
                f"run.device: {name} for local rank {local_rank} needs GPU {index}, but this "
                f"machine has {cuda_devices}; start fewer processes per node"
            )
        return torch.device("cuda", index)
    return torch.device(name)


def precision_for(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain float32."""
    if name == "fp32" or (name == "auto" and device.type != "cuda"):
        return None
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]
