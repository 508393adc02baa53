"""The first update rehearsed on the first batch, before training: it compiles the training
step (timed; uncompiled, with a warning, where compiling fails) and learns whether a batch
fits the GPU, so that one too big is refused before the first update, with the largest that
fits, never in the middle of a run. On a CPU, `train.precision: auto` is measured there too:
a few passes in float32 and in bf16, interleaved (`measure_precision`). The rehearsal leaves
no trace: its gradients are dropped and the generators restored, so the run computes what it
would have computed without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..config import TrainConfig
from ..data.batch import Batch
from ..device import BF16_FLAGS, DTYPES, cpu_bf16_emulated, dtype_name, precision_for
from ..errors import DoesNotFit, MtError, one_line
from ..messages import say
from ..packed_attention import flex_refusal
from .ranks import Ranks, rng_state, set_rng_state
from .update import Loss

HEADROOM = 0.95  # of the memory a process may take: the allocator's fragmentation
# bf16 is kept on a CPU only when its passes are this much faster than float32's: what bf16
# pays for depends on the CPU's bf16 units (AMX, AVX-512 bf16) and the shapes, and no rule on
# CPU flags knows it (Zen 4 without AMX: bf16 1.5x fp32; a Xeon with AVX-512 bf16: 0.6x)
FASTER = 1.1
TIMED = 3  # passes timed in each precision, after an untimed one (allocations, kernels)
# bf16 is timed no further once its passes have taken this many times fp32's: emulated (no
# bf16 instructions: an AVX2 Zen 3) a pass takes 30x fp32's, and four would cost minutes of a
# short run. x86 flags say so beforehand (bf16 is then not timed at all); this bounds what
# flags do not tell. Checked from bf16's second pass on, when fp32 has had two: a bf16 that
# pays would need a first pass (its kernel plans) of 6 fp32 passes to be stopped
BOUND = 3.0


MEASURED = ("fp32", "bf16")  # what train.precision auto measures on a CPU


@dataclass
class UpdatePlan:
    """How every update of a session computes, decided on its first batch before the update
    is built: the precision (`train.precision`, measured where auto on a CPU) and whether the
    loss is compiled; the `Updater` is built with these values."""

    dtype: torch.dtype | None  # autocast's (None: plain float32)
    why: str  # one line: the precision and why
    compiled: bool
    seconds: float  # of the rehearsed first update: compiling, mostly, when compiled
    rates: dict[str, float]  # what train.precision auto measured, per precision (or none)

    @property
    def precision(self) -> str:
        return dtype_name(self.dtype)


def plan_update(
    loss_in: Callable[[torch.dtype | None], Loss],
    batch: Batch,
    model: torch.nn.Module,
    t: TrainConfig,
    ranks: Ranks,
    packed: bool,
    measured: str,
    state_bytes: int,
) -> UpdatePlan:
    """The session's `UpdatePlan`, on its first `batch` (on the device): `loss_in(dtype)` is the
    loss of a batch in a precision. On a CPU, train.precision auto is measured (`measured`: what
    an earlier session of the run chose, kept; rank 0's choice on every rank); the pass is
    compiled where that pays (`compiles`) and, on a GPU, a batch too big for it is refused
    (`rehearse`). `state_bytes`: GPU memory the optimiser will take at its first step."""
    device = batch.src.device
    dtype, why = precision_for(t.precision, device)
    rates: dict[str, float] = {}
    model.train()
    if t.precision == "auto" and device.type == "cpu":
        if measured:  # a resumed run computes as it did
            dtype, why = DTYPES[measured], f"auto: {measured}, as measured when the run started"
        else:
            emulated = cpu_bf16_emulated()  # bf16 not worth a pass: fp32's speed alone
            losses = {n: loss_in(DTYPES[n]) for n in MEASURED if not (emulated and n == "bf16")}
            done = measure_precision(
                losses, batch, model, int((batch.labels != model.cfg.pad_id).sum())
            )
            choice = int(ranks.broadcast([float(MEASURED.index(dtype_name(done.dtype)))])[0])
            dtype, why, rates = DTYPES[MEASURED[choice]], done.why, done.rates
    loss = loss_in(dtype)
    compile = compiles(t.compile, device.type, packed)
    if not compile and device.type != "cuda":
        return UpdatePlan(dtype, why, False, 0.0, rates)
    refusal = flex_refusal(model.cfg, device.type, training=True)
    if compile and packed and refusal and ranks.main:
        say(f"packed rows attend by SDPA with dense masks, not FlexAttention: {refusal}")
    done = on_every_rank(
        lambda: rehearse(loss, batch, model, compile, t.max_tokens, say, state_bytes),
        ranks.world,
    )
    return UpdatePlan(dtype, why, done.compiled, done.seconds, rates)


def compiles(setting: bool | str, device_type: str, packed: bool) -> bool:
    """Whether the training step is compiled (`train.compile`). auto: on CUDA with packed
    batches, whose one shape compiles once; padded batches change shape from batch to batch,
    each a recompile, and on a CPU compiling costs more of a short run than it saves."""
    return device_type == "cuda" and packed if setting == "auto" else bool(setting)


@dataclass
class Rehearsal:
    forward: Loss  # what to train with: compiled, or not where compiling failed
    compiled: bool
    seconds: float  # of the first update: compiling, mostly, when compiled
    peak_bytes: int  # GPU memory at its peak (0 off CUDA)


def rehearse(
    forward: Loss,
    batch: Any,
    model: torch.nn.Module,
    compile: bool,
    max_tokens: int,
    say: Callable[[str], None],
    state_bytes: int = 0,
) -> Rehearsal:
    """Run `forward` and its backward pass on `batch` (tensors, rows first),
    compiled if `compile`. `state_bytes`: GPU memory the optimiser will take at its first
    step, on top of what the rehearsal measured. Raises ConfigError, naming
    train.max_tokens (a batch's budget) and the largest that fits, when it does not fit."""
    device = batch.src.device
    states = rng_state(device)
    if device.type == "cuda":  # what this process may take: free, and what it holds already
        free, total = torch.cuda.mem_get_info(device)
        budget = int(HEADROOM * (free + torch.cuda.memory_reserved(device))) - state_bytes
    run = torch.compile(forward, dynamic=False) if compile else forward
    seconds, peak = 0.0, None
    try:
        try:
            seconds, peak = _measure(run, batch, model, states)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # the compiler, or what only compiled steps do (block masks)
            if not compile:
                raise
            say(f"warning: compiling the training step failed; training uncompiled: {one_line(e)}")
            run, compile = forward, False
            seconds, peak = _measure(run, batch, model, states)
    except torch.OutOfMemoryError:
        pass  # peak None: refused below
    if device.type == "cuda" and (peak is None or peak > budget):
        fits = _rows_that_fit(forward, batch, model, states, budget)
        rows = len(batch.src)
        raise DoesNotFit(
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
    mine = failure and (
        type(failure) if isinstance(failure, MtError) else MtError,
        one_line(failure),
    )
    outcomes: list[Any] = [None] * world
    dist.all_gather_object(outcomes, mine)
    if failure:  # its own words, as with one process (a bug keeps its traceback)
        raise failure
    for rank, outcome in enumerate(outcomes):
        if outcome:
            kind, message = outcome  # the class of the error, so its exit status too
            raise kind(f"rank {rank} failed its rehearsal of the first update: {message}")
    return done


@dataclass
class Measured:
    dtype: torch.dtype | None  # the autocast dtype chosen (None: plain float32)
    why: str  # one line: the choice and both rates
    rates: dict[str, float]  # target tokens/s of a forward and backward pass, per precision


def measure_precision(
    forwards: dict[str, Loss],
    batch: Any,
    model: torch.nn.Module,
    tokens: int,
    clock: Callable[[], float] = time.perf_counter,
) -> Measured:
    """Time `forwards` ("fp32", "bf16": the same pass in each precision) on `batch`, of
    `tokens` target tokens, interleaved so a machine shared with other work slows both
    alike; each the fastest of TIMED passes, after an untimed one. bf16 is stopped once its
    passes have cost BOUND times fp32's, so that it costs one pass where it is far slower
    (its rate then that of that first pass, which later passes would beat a little); without
    bf16 in `forwards` (a CPU that would emulate it), fp32 is timed alone and chosen.
    Leaves no trace, as `rehearse`."""
    states = rng_state(batch.src.device)
    seconds: dict[str, list[float]] = {name: [] for name in forwards}
    stopped = False
    for _ in range(TIMED + 1):
        for name, forward in forwards.items():
            if name == "bf16" and sum(seconds[name]) > BOUND * sum(seconds["fp32"]):
                stopped = True
                break
            start = clock()
            _measure(forward, batch, model, states)
            seconds[name].append(clock() - start)
        if stopped:
            break
    rates = {name: tokens / max(min(s[1:] or s), 1e-9) for name, s in seconds.items()}
    fp32 = rates["fp32"]
    if "bf16" not in rates:
        why = (
            f"auto: fp32, {fp32:,.0f} target tokens/s; bf16 not measured: this CPU has no "
            f"bf16 instructions ({', '.join(BF16_FLAGS)}), bf16 would be emulated"
        )
        return Measured(None, why, rates)
    bf16 = rates["bf16"]
    if bf16 >= FASTER * fp32:
        why = f"auto: bf16, {bf16:,.0f} vs {fp32:,.0f} target tokens/s in fp32"
        return Measured(torch.bfloat16, why, rates)
    bf16_said = f"{bf16:,.0f} (one pass: far slower)" if stopped else f"{bf16:,.0f}"
    why = f"auto: fp32, {fp32:,.0f} vs {bf16_said} target tokens/s in bf16, not {FASTER:g}x"
    return Measured(None, why, rates)


def _measure(run: Loss, batch, model, states) -> tuple[float, int]:
    """Seconds and peak GPU memory of one forward and backward pass, which leaves no trace."""
    device = batch.src.device
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


def _rows_that_fit(forward: Loss, batch, model, states, budget: int) -> int:
    """Rows of `batch` that fit `budget` bytes, estimated from uncompiled passes over halves,
    quarters, ... of it: memory grows linearly with the rows (0: not even one fits)."""
    rows, measured = len(batch.src), []
    part = rows // 2
    while part >= 1 and len(measured) < 2:
        try:
            rows_of = batch.map(lambda x, part=part: x[:part])
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
