"""Where a process computes, and in what precision."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch

from .errors import ConfigError

# the precisions a setting names: the autocast dtype of each (None: plain float32)
DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


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


def cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags from /proc/cpuinfo (empty where there is none to
    read): the one reader of that file, for precision choices and benchmark records."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return name, flags


# the flags that set a CPU's speed for us (vector width, bf16, AMX tiles): benchmark records
# name those present
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile")
SPEED_FLAGS += ("amx_bf16",)  # two lines, not one over 100 characters


def cpu_description() -> str:
    """The CPU as every benchmark record states it: model name, speed flags present, cores."""
    name, flags = cpu_info()
    present = " ".join(f for f in SPEED_FLAGS if f in flags) or "none of " + " ".join(SPEED_FLAGS)
    return f"{name or 'unknown CPU'} (flags: {present}), {os.cpu_count()} cores"


def cpu_flags() -> set[str]:
    return cpu_info()[1]


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # an x86 CPU's bf16 instructions


def cpu_bf16_emulated() -> bool:
    """Whether this CPU's flags say it has no bf16 instructions (an AVX2 Zen 3, a Skylake):
    bf16 products are then computed in float32 after conversions, tens of times slower than
    float32 itself. False where the flags cannot be read (no /proc/cpuinfo, an Arm CPU's
    `Features`): unknown, not emulated."""
    flags = cpu_flags()
    return bool(flags) and not any(f in flags for f in BF16_FLAGS)


def cpu_amx_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in AMX tiles the OS lets us use: torch's
    check (which also asks Linux for the tile state), and the amx_bf16 flag where readable.
    Benchmark records say it: no precision is chosen by it (`precision_for`)."""
    init_amx = getattr(torch._C._cpu, "_init_amx", None)
    flags = cpu_flags()
    return bool(init_amx and init_amx()) and (not flags or "amx_bf16" in flags)


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def precision_for(
    name: str,
    device: torch.device,
    capability: tuple[int, int] | None = None,
) -> tuple[torch.dtype | None, str]:
    """The autocast dtype (None: plain float32) for `train.precision` or `decode.precision`
    `name` on `device`, and why. `auto` picks bf16 on GPUs with native bf16 (compute
    capability 8.0 on), fp16 with a gradient scaler on older ones, and float32 elsewhere. On a
    CPU float32 is decoding's rule even with AMX bf16 units: only there does a text translate
    the same whatever it is batched with (docs/translate.md, "Decoding precision"); training
    measures instead (the rehearsal's `rehearsal.measure_precision`). `capability` (the CUDA
    device's) defaults to this machine's; the choice is a pure function of the arguments.
    """
    if name != "auto":
        return DTYPES[name], f"{name} as configured"
    if device.type == "cuda":
        major, minor = capability or cuda_capability(device)
        if major >= 8:
            return torch.bfloat16, f"auto: bf16, native on this GPU (capability {major}.{minor})"
        return torch.float16, (
            f"auto: fp16 with loss scaling, as this GPU (capability {major}.{minor}) has no "
            "native bf16"
        )
    if device.type == "cpu":
        return None, "auto: fp32 on a CPU, where a text's translation is batch-invariant"
    return None, f"auto: fp32 on {device.type}"


def dtype_name(dtype: torch.dtype | None) -> str:
    """The precision setting's name of an autocast dtype (None: plain float32)."""
    return next(name for name, named in DTYPES.items() if named == dtype)


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """Autocast to `dtype` on `device`; None: plain float32."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype)
