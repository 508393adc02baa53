"""The decode step on a GPU as CUDA graphs, and the net under them.

Each model that decodes through graphs has a `Graphs` (`graphs_for`): static decoder states
whose buffers are shaped by bucket (sources, source length, positions: `bucket`) and reused by
every batch of that bucket, the step recorded once per bucket and cache read length (a power
of 2, `DecoderState.read_length`) and replayed, and under autocast low-precision copies of the
step's weights made once (and refreshed in place when training changes the weights) rather than
cast at every replay.

The net: the first batch a model decodes through graphs is decoded by eager steps too, on the
same buffers, and must give the same tokens; a capture that fails or other tokens send that
model back to eager steps for good, with one warning. An out-of-memory error stays one, so
that the caller's batch-halving retry still works.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..messages import say
from ..model import DecoderState, Transformer

# shapes whose buffers and graphs are kept, the least recently used dropped: each takes about
# a batch's memory, and a validation inside training or a test set sorted by length meets a few
SHAPES = 3

DecodeStep = Callable[[Tensor], Tensor]  # tokens (R,) -> logits (R, V)
Run = Callable[[], Tensor]
# record(run, pool) -> (replay, the tensor replays write, the pool for the next capture)
Record = Callable[[Run, Any], tuple[Callable[[], None], Tensor, Any]]
T = TypeVar("T")


def bucket(n: int, least: int = 1) -> int:
    """The smallest size of the form 2^k or 3 * 2^(k-1), at least n and `least`: sizes
    rounded up by at most a half, so that a few shapes (of CUDA graphs) serve them all."""
    n = max(n, least)
    power = 1 << (n - 1).bit_length()  # the least power of 2 >= n
    return power * 3 // 4 if power >= 4 and power * 3 // 4 >= n else power


class GraphError(RuntimeError):
    """The decode step could not be captured as a CUDA graph."""


def out_of_memory_in(error: BaseException | None) -> torch.OutOfMemoryError | None:
    """The out-of-memory error that `error` is or was raised while handling: torch.cuda.graph
    ends the capture on the way out, which fails after an error inside it and hides that."""
    while error is not None and not isinstance(error, torch.OutOfMemoryError):
        error = error.__context__
    return error


def cuda_graph(run: Run, pool: Any) -> tuple[Callable[[], None], Tensor, Any]:
    """`run` recorded as a CUDA graph in memory pool `pool` (None: a new one), after a warm-up
    on a side stream as torch.cuda.graph asks. The graphs of one shape share a pool: they
    never run at once, and each one's output stays referenced."""
    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    with torch.cuda.stream(side):
        run()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        # the outer context puts the stream back where a failed capture_end leaves it on
        with (
            torch.cuda.stream(current),
            torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"),
        ):
            out = run()  # thread_local: loader threads' CUDA calls are theirs
    except Exception as error:
        oom = out_of_memory_in(error)
        if oom is None:
            raise
        raise oom from None
    return graph.replay, out, graph.pool()


class _Step(nn.Module):
    """model.decode_step as a module's forward, for torch.func.functional_call."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, state: DecoderState) -> Tensor:
        return self.model.decode_step(tokens, state)


@dataclass
class _Shape:
    state: DecoderState  # the buffers of a bucket
    tokens: Tensor  # (R,) the step's input
    # by cache read length: replay, and the logits it writes
    graphs: dict[int, tuple[Callable[[], None], Tensor]] = field(default_factory=dict)
    pool: Any = None  # the graphs' memory pool


def _version(tensor: Tensor) -> int:
    return 0 if tensor.is_inference() else tensor._version  # inference tensors keep none


class Graphs:
    """The static decoding buffers and CUDA graphs of one model, by shape; one decoding at
    a time, which holds `lock` (`mt serve` decodes the two directions of one model in two
    threads). `record` captures a graph (`cuda_graph`; tests give a stand-in that records and
    replays on the CPU)."""

    def __init__(self, record: Record = cuda_graph):
        self.record = record
        self.lock = threading.Lock()
        self.shapes: OrderedDict[tuple, _Shape] = OrderedDict()  # least recently used first
        self.dtype: torch.dtype | None = None  # autocast's, for which `weights` are cast
        self.weights: dict[str, Tensor] = {}  # those of model.decode_step_weights, cast
        self.versions: list[int] = []  # of the weights they were cast from
        self.tensors: tuple[int, ...] = ()  # where the model's tensors were: graphs read there
        self.checked = self.failed = False
        self.captures = 0  # graphs captured so far, for benchmarks

    def start(
        self,
        model: Transformer,
        memory: Tensor,
        src_keep: Tensor,
        steps: int,
        beam: int,
        graph: bool,
    ) -> tuple[DecoderState, DecodeStep]:
        """A static state for `beam` rows per source over memory (N, S, D), `steps` positions,
        in the buffers of its bucket, and its step: by graphs, or eagerly on the same buffers.
        """
        self._follow(model, memory.device)
        memory_kv = model.memory_kv(memory)
        n, s = src_keep.size(0), src_keep.size(-1)
        key = (bucket(n), beam, bucket(s, least=8), bucket(steps, least=16), memory_kv.dtype)
        shape = self.shapes.pop(key, None)
        if shape is None:
            while len(self.shapes) >= SHAPES:
                self.shapes.popitem(last=False)
            shape = self._new(model, memory, key)
        self.shapes[key] = shape
        shape.state.load(memory_kv, src_keep)
        shape.tokens.fill_(model.cfg.bos_id)  # padding rows step on from BOS
        return shape.state, self._stepper(model, shape, n * beam, graph)

    def guard(self, search: Callable[[bool], T], tokens: Callable[[T], Any]) -> T:
        """search(graph) through graphs, checked against eager steps the first time; after a
        capture error or a mismatch, and from then on, by eager steps. `tokens`: the part of
        a result that must match."""
        try:
            if not self.failed:
                try:
                    found = search(True)
                except GraphError as error:
                    self._give_up(f"a capture failed ({error})")
                else:
                    if self.checked:
                        return found
                    expected = search(False)
                    if tokens(found) == tokens(expected):
                        self.checked = True
                        return found
                    self._give_up("replays gave other tokens than eager steps")
                    return expected
            return search(False)
        except torch.OutOfMemoryError:
            self.shapes.clear()  # their memory, for the smaller batches the caller tries
            raise

    def _give_up(self, why: str) -> None:
        say(f"warning: CUDA graphs of the decode step: {why}; decoding without")
        self.failed = True
        self.shapes.clear()

    def _follow(self, model: Transformer, device: torch.device) -> None:
        # graphs read the model's tensors where they were at capture, and the cast weights
        tensors = tuple(t.data_ptr() for t in chain(model.parameters(), model.buffers()))
        on = torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(device.type)
        dtype = torch.get_autocast_dtype(device.type) if on else None
        if tensors != self.tensors or dtype != self.dtype:
            self.shapes.clear()
            self.tensors, self.dtype, self.weights, self.versions = tensors, dtype, {}, []
        if dtype is None:
            return
        weights = model.decode_step_weights()
        versions = [_version(w) for w in weights.values()]
        if not self.weights:
            self.weights = {f"model.{k}": w.to(dtype) for k, w in weights.items()}
        elif versions != self.versions:  # in place: the graphs read these copies
            for copy, w in zip(self.weights.values(), weights.values()):
                copy.copy_(w)
        self.versions = versions

    def _new(self, model: Transformer, memory: Tensor, key: tuple) -> _Shape:
        n, beam, s, steps, _ = key
        zeros, keep = memory.new_zeros(n, s, memory.size(2)), memory.new_ones(n, 1, 1, s).bool()
        state = model.start_decoding(zeros, keep, steps, beam, static=True)
        return _Shape(state, torch.full((n * beam,), model.cfg.bos_id, device=memory.device))

    def _stepper(self, model: Transformer, shape: _Shape, rows: int, graph: bool) -> DecodeStep:
        state, tokens, module = shape.state, shape.tokens, _Step(model)
        device = state.self_kv.device.type

        def run() -> Tensor:  # no autocast cache: what it cast would be freed under a graph
            step = state.step  # counted by the caller: a replay runs no Python
            cast = torch.autocast(device, self.dtype, cache_enabled=False) if self.dtype else None
            with cast or nullcontext():
                logits = functional_call(
                    module, self.weights, (tokens, state), tie_weights=False, strict=False
                )
            state.step = step
            return logits

        def step(new: Tensor) -> Tensor:
            tokens[:rows].copy_(new)
            if not graph:
                logits = run()
            else:
                replay, logits = shape.graphs.get(state.read_length()) or self._capture(run, shape)
                replay()
            state.step += 1
            return logits[:rows]

        return step

    def _capture(self, run: Run, shape: _Shape) -> tuple[Callable[[], None], Tensor]:
        position = shape.state.position.clone()
        try:
            replay, logits, shape.pool = self.record(run, shape.pool)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:
            first = error  # what failed in the capture, before the capture's end failed
            while first.__context__ is not None:
                first = first.__context__
            raise GraphError(f"{type(first).__name__}: {first}") from error
        shape.state.position.copy_(position)  # the warm-up took this step: the replay retakes it
        shape.graphs[shape.state.read_length()] = replay, logits
        self.captures += 1
        return replay, logits


GRAPHS: weakref.WeakKeyDictionary[Transformer, Graphs] = weakref.WeakKeyDictionary()


def graphs_for(model: Transformer) -> Graphs:
    """The model's Graphs, made on first use; they go when the model goes."""
    return GRAPHS.setdefault(model, Graphs())
