"""The first update rehearsed on the first batch, before training: it compiles the training
step (timed; uncompiled, with a warning, where compiling fails) and learns whether a batch
fits the GPU, so that one too big is refused before the first update, with the largest that
fits, never in the middle of a run. The rehearsal leaves no trace: its gradients are dropped
and the generators restored, so the run computes what it would have computed without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.exc import TorchDynamoException
from torch._inductor.exc import InductorError

from .config import one_line
from .errors import ConfigError, MtError
from .packing import each
from .ranks import rng_state, set_rng_state

HEADROOM = 0.95  # of the memory a process may take: the allocator's fragmentation
Forward = Callable[[Any], tuple[torch.Tensor, torch.Tensor]]  # batch -> (loss, nll)


def compiles(setting: bool | str, device_type: str, packed: bool) -> bool:
    """Whether the training step is compiled (`train.compile`). auto: on CUDA with packed
    batches, whose one shape compiles once; padded batches change shape from batch to batch,
    each a recompile, and on a CPU compiling costs more of a short run than it saves."""
    return device_type == "cuda" and packed if setting == "auto" else bool(setting)


@dataclass
class Rehearsal:
    forward: Forward  # what to train with: compiled, or not where compiling failed
    compiled: bool
    seconds: float  # of the first update: compiling, mostly, when compiled
    peak_bytes: int  # GPU memory at its peak (0 off CUDA)


def rehearse(
    forward: Forward,
    batch: Any,
    model: torch.nn.Module,
    compile: bool,
    max_tokens: int,
    say: Callable[[str], None],
    state_bytes: int = 0,
) -> Rehearsal:
    """Run `forward` and its backward pass on `batch` (a tuple of tensors, rows first),
    compiled if `compile`. `state_bytes`: GPU memory the optimiser will take at its first
    step, on top of what the rehearsal measured. Raises ConfigError, naming
    train.max_tokens (a batch's budget) and the largest that fits, when it does not fit."""
    device = batch[0].device
    states = rng_state(device)
    if device.type == "cuda":  # what this process may take: free, and what it holds already
        free, total = torch.cuda.mem_get_info(device)
        budget = int(HEADROOM * (free + torch.cuda.memory_reserved(device))) - state_bytes
    run = torch.compile(forward, dynamic=False) if compile else forward
    seconds, peak = 0.0, None
    try:
        try:
            seconds, peak = _measure(run, batch, model, states)
        except (TorchDynamoException, InductorError) as e:
            say(f"warning: compiling the training step failed; training uncompiled: {one_line(e)}")
            run, compile = forward, False
            seconds, peak = _measure(run, batch, model, states)
    except torch.OutOfMemoryError:
        pass  # peak None: refused below
    if device.type == "cuda" and (peak is None or peak > budget):
        fits = _rows_that_fit(forward, batch, model, states, budget)
        rows = len(batch[0])
        raise ConfigError(
            f"train.max_tokens: a batch of {max_tokens} tokens does not fit this GPU "
            f"({total / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free; tried before the first "
            "update); "
            + (
                f"about {max_tokens * fits // rows} do: set train.max_tokens to that or less"
                if fits
                else "not even a small part of one does: use a smaller model"
            )
        )
    return Rehearsal(run, compile, seconds, peak or 0)


def on_every_rank(rehearsal: Callable[[], Rehearsal], world: int) -> Rehearsal:
    """Run this rank's `rehearsal`, then learn every rank's outcome: where one failed (a
    batch too big for its GPU, a compiler that crashed), every rank stops with one line
    naming it, where the others would wait for it at their first update until a timeout."""
    try:
        done, failure = rehearsal(), None
    except Exception as e:  # told to the other ranks, then raised again
        done, failure = None, e
    if world == 1:
        if failure:
            raise failure
        return done
    mine = failure and (getattr(failure, "exit_code", 1), one_line(failure))
    outcomes: list[Any] = [None] * world
    dist.all_gather_object(outcomes, mine)
    if failure:  # its own words, as with one process (a bug keeps its traceback)
        raise failure
    for rank, outcome in enumerate(outcomes):
        if outcome:
            code, message = outcome
            kind = ConfigError if code == ConfigError.exit_code else MtError
            raise kind(f"rank {rank} failed its rehearsal of the first update: {message}")
    return done


def _measure(run: Forward, batch, model, states) -> tuple[float, int]:
    """Seconds and peak GPU memory of one forward and backward pass, which leaves no trace."""
    device = batch[0].device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    try:
        run(batch)[0].backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
        return time.perf_counter() - start, peak
    finally:
        model.zero_grad(set_to_none=True)
        set_rng_state(device, states)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _rows_that_fit(forward: Forward, batch, model, states, budget: int) -> int:
    """Rows of `batch` that fit `budget` bytes, estimated from uncompiled passes over halves,
    quarters, ... of it: memory grows linearly with the rows (0: not even one fits)."""
    rows, measured = len(batch[0]), []
    part = rows // 2
    while part >= 1 and len(measured) < 2:
        try:
            rows_of = each(lambda x, part=part: x[:part], batch)
            measured.append((part, _measure(forward, rows_of, model, states)[1]))
        except torch.OutOfMemoryError:
            pass
        part //= 2
    return fitting_rows(measured, budget, rows)


def fitting_rows(measured: list[tuple[int, int]], budget: int, rows: int) -> int:
    """The most rows (fewer than `rows`, which did not fit) within `budget` bytes, on the
    line through two (rows, peak bytes) measurements; with one, that many; with none, 0."""
    if len(measured) < 2:
        return measured[0][0] if measured else 0
    (r1, p1), (r2, p2) = measured
    per_row = max((p1 - p2) / (r1 - r2), 1.0)
    return max(r1, min(rows - 1, int((budget - (p1 - per_row * r1)) // per_row)))
