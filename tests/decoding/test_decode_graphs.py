"""The decode step's CUDA graphs (mt.decoding.graphs), proven on the CPU: the step meets capture's
preconditions (no host reads, no CPU tensors: run on the meta device), reads the cache by
length bucket; the graph branch of the search loop, with a stand-in that records a step's
operations and replays them, gives the eager plan's results and captures once per bucket;
bf16 weights are cast once and follow the model's; the net: a capture that fails, replays
that give other tokens, an out-of-memory error in a capture."""

import gc
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

import mt.decoding.translate
from helpers.models import HostSyncs, mixed_batch, random_batch, random_model, trained
from mt.config import DecodeConfig
from mt.data.tokenizer import PAD
from mt.decoding.beam import beam_search
from mt.decoding.graphs import GRAPHS, Graphs, bucket, out_of_memory_in
from mt.decoding.search import Plan, greedy, max_output_lengths
from mt.decoding.translate import translate_ids

GRAPH = Plan(check_every=8, static=True, buckets=True, graph=True)  # plan_for's on CUDA
EAGER = Plan(check_every=8, static=True, buckets=True)
BEAMS = [DecodeConfig(beam=4, nbest=3), DecodeConfig(beam=3, alpha=0, no_repeat_ngram=2)]


class Recorder(TorchDispatchMode):
    """The operations a function runs, as a CUDA graph records kernels; a host read fails, as
    it does in a capture."""

    def __init__(self):
        super().__init__()
        self.ops, self.reads = [], HostSyncs()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        before = self.reads.count
        out = self.reads.__torch_dispatch__(func, types, args, kwargs)
        if self.reads.count > before:
            raise RuntimeError(f"{func} reads the device from the host during a capture")
        self.ops.append((func, args, kwargs, out))
        return out


class FakeGraphs:
    """A stand-in for mt.decoding.graphs.cuda_graph: warm-up, then the step's operations
    recorded and, on replay, run again on the same inputs: what the Python around them did at
    capture is frozen, as in a CUDA graph. `corrupt` alters what replays write."""

    def __init__(self, corrupt=None):
        self.captures, self.replays, self.corrupt = 0, 0, corrupt
        self.recorded = []  # every operation of every capture

    def __call__(self, run, pool):
        run()  # the warm-up
        with Recorder() as recorder:
            out = run()
        self.captures += 1
        self.recorded += recorder.ops

        def replay():
            made = {}  # id of a tensor an operation made at capture -> its value now

            def now(x):
                return made.get(id(x), x) if isinstance(x, torch.Tensor) else x

            for func, args, kwargs, result in recorder.ops:
                new = func(*tree_map(now, args), **tree_map(now, kwargs))
                made.update(zip(map(id, tree_leaves(result)), tree_leaves(new)))
            out.copy_(made[id(out)])
            if self.corrupt:
                self.corrupt(out)
            self.replays += 1

        return replay, out, pool


def use_graphs(model, record):
    """The model's graphs, recorded by `record` (returned)."""
    GRAPHS[model] = Graphs(record)
    return record


def tokens(found):
    return [[h.tokens for h in hyps] for hyps in found]


def test_buckets_round_up_by_at_most_a_half():
    sizes = sorted({bucket(n) for n in range(1, 300)})
    assert sizes[:12] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert all(n <= bucket(n) <= max(2, 1.5 * n) for n in range(1, 3000))
    assert bucket(5, least=16) == 16 and bucket(17, least=16) == 24


def test_the_step_meets_capture_preconditions_and_reads_by_length_bucket(monkeypatch):
    """On the meta device any host read fails and a CPU tensor shows; the mode checks both."""
    model = random_model().to("meta")
    src = mixed_batch().to("meta")
    reads = []  # the cache length each self-attention of layer 0 reads
    attend = model.decoder[0].self_attn.attend
    monkeypatch.setattr(
        model.decoder[0].self_attn,
        "attend",
        lambda q, k, v, *a: reads.append(k.size(2)) or attend(q, k, v, *a),
    )

    class OnlyMeta(HostSyncs):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            assert all(x.device.type == "meta" for x in tensors), func
            return super().__torch_dispatch__(func, types, args, kwargs)

    with torch.inference_mode():
        memory, src_keep = model.encode(src)
        own = model.start_decoding(memory, src_keep, 40, 3, static=True)
        starts = [(own, lambda tokens: model.decode_step(tokens, own))]
        starts.append(Graphs().start(model, memory, src_keep, 40, 3, graph=False))  # a bucket's
        for state, step in starts:
            reads.clear()
            with OnlyMeta() as mode:
                for _ in range(40):
                    logits = step(torch.full((18,), 2, device="meta"))
            assert mode.count == 0 and logits.shape == (18, model.out.out_features)
            assert reads == [16] * 16 + [32] * 16 + [min(64, len(state.self_kv))] * 8


@pytest.mark.parametrize("which", ["random", "trained"])
def test_graph_replays_give_the_eager_plans_results(which):
    model, src = (random_model(), mixed_batch()) if which == "random" else trained()[:2]
    fake = use_graphs(model, FakeGraphs())
    limits = max_output_lengths(src, 1.5, 10)
    assert greedy(model, src, limits, GRAPH) == greedy(model, src, limits)
    for cfg in BEAMS:
        expected, found = beam_search(model, src, cfg), beam_search(model, src, cfg, GRAPH)
        assert tokens(found) == tokens(expected)
        for x, y in zip(found, expected):
            assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-5)
            assert [h.logprob for h in x] == pytest.approx([h.logprob for h in y], abs=1e-5)
    assert fake.replays > 0 and GRAPHS[model].checked and not GRAPHS[model].failed


def test_graphs_are_captured_once_per_bucket_and_reused():
    model = random_model()
    fake = use_graphs(model, FakeGraphs())
    first, second = random_batch([9, 3, 6, 5, 8], seed=1), random_batch([8, 9, 4, 2, 7], seed=2)
    cfg = DecodeConfig(beam=3, nbest=2)
    expected = [beam_search(model, src, cfg) for src in (first, second)]
    assert tokens(beam_search(model, first, cfg, GRAPH)) == tokens(expected[0])
    (shape,) = GRAPHS[model].shapes.values()
    reads, captures = sorted(shape.graphs), fake.captures
    assert reads == [16, 24] and captures == 2  # 24 positions: steps 1-16, then 17-24
    assert tokens(beam_search(model, second, cfg, GRAPH)) == tokens(
        expected[1]
    )  # 5 sources, 9 long
    assert fake.captures == captures and fake.replays > 0


def test_bf16_weights_are_cast_once_and_follow_the_models():
    model, src = random_model(), mixed_batch()
    fake = use_graphs(model, FakeGraphs())
    limits = max_output_lengths(src, 1.5, 10)
    with torch.autocast("cpu", torch.bfloat16):
        expected = greedy(model, src, limits, EAGER)  # the same buffers, eager steps
        assert greedy(model, src, limits, GRAPH) == expected
    graphs = GRAPHS[model]
    weights = list(graphs.weights.values())
    assert weights and all(w.dtype == torch.bfloat16 for w in weights)
    fp32 = {id(w) for w in model.decode_step_weights().values()}
    casts = [op for op in fake.recorded if op[0].overloadpacket.__name__ in ("to", "_to_copy")]
    assert casts and not any(id(op[1][0]) in fp32 for op in casts)  # what replays cast: no weight
    with torch.no_grad():
        model.out.weight.mul_(1.5)  # as an optimizer step would, in place
    with torch.autocast("cpu", torch.bfloat16):
        expected = greedy(model, src, limits, EAGER)
        assert greedy(model, src, limits, GRAPH) == expected
    assert list(map(id, graphs.weights.values())) == list(map(id, weights))  # graphs read them
    assert torch.equal(graphs.weights["model.out.weight"], model.out.weight.bfloat16())


def test_a_failed_capture_falls_back_to_eager_steps_with_one_warning(capsys):
    model, src = random_model(), mixed_batch()
    calls = []

    def failing(run, pool):
        calls.append(1)
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        finally:  # as torch.cuda.graph's exit ends a capture that an error broke
            raise RuntimeError("CUDA error: operation failed due to a previous error")

    use_graphs(model, failing)
    cfg = DecodeConfig(beam=3, nbest=2)
    for _ in range(2):
        assert tokens(beam_search(model, src, cfg, GRAPH)) == tokens(beam_search(model, src, cfg))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a capture failed (RuntimeError: CUDA error: operation " in err
    assert "not permitted when stream is capturing" in err  # the first error, not the last
    assert len(calls) == 1  # not tried again


def test_replays_that_give_other_tokens_fall_back_with_one_warning(capsys):
    model, src = random_model(), mixed_batch()
    fake = use_graphs(model, FakeGraphs(corrupt=lambda logits: logits.copy_(logits.roll(1, -1))))
    limits = max_output_lengths(src, 1.5, 10)
    for _ in range(2):
        assert greedy(model, src, limits, GRAPH) == greedy(model, src, limits)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "replays gave other tokens than eager steps" in err
    assert fake.captures == 2 and GRAPHS[model].failed  # the first batch only


def test_out_of_memory_in_a_capture_halves_the_batch(monkeypatch, capsys):
    model = random_model()
    # six sources of one length: one batch of 6 (a CPU's batches hold one length)
    ids = [([w for w in row if w != PAD] * 9)[:9] for row in mixed_batch().tolist()]
    cfg = DecodeConfig(beam=2, nbest=2, batch_tokens=1000)
    expected, fake = translate_ids(model, ids, cfg), FakeGraphs()

    def small_memory(run, pool):
        if len(run()) > 6:  # rows: 6 sources x 2 beams do not fit, 3 x 2 do
            raise torch.OutOfMemoryError("CUDA out of memory")
        return fake(run, pool)

    use_graphs(model, small_memory)
    monkeypatch.setattr(mt.decoding.translate, "plan_for", lambda device: GRAPH)
    found = translate_ids(model, ids, cfg)
    assert tokens(found) == tokens(expected)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a batch of 6 sentences did not fit in the memory" in err
    assert fake.captures > 0 and not GRAPHS[model].failed


def test_an_out_of_memory_error_is_found_behind_the_capture_error():
    def capture():
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        finally:  # as torch.cuda.graph's exit ends a capture that an error broke
            raise RuntimeError(
                "CUDA error: operation failed due to a previous error during capture"
            )

    with pytest.raises(RuntimeError) as raised:
        capture()
    assert isinstance(out_of_memory_in(raised.value), torch.OutOfMemoryError)
    assert out_of_memory_in(RuntimeError("other")) is None


def test_plans_that_cannot_be_are_refused():
    with pytest.raises(ValueError, match="graph needs buckets"):
        Plan(static=True, graph=True)
    with pytest.raises(ValueError, match="graph needs buckets"):
        Plan(buckets=True)


def test_graphs_follow_the_model_to_new_memory_and_go_with_it():
    model, src = random_model(), mixed_batch()
    fake = use_graphs(model, FakeGraphs())
    limits = max_output_lengths(src, 1.5, 10)
    expected = greedy(model, src, limits)
    assert greedy(model, src, limits, GRAPH) == expected
    captures = fake.captures
    model.double().float()  # every tensor in new memory, where old graphs do not read
    assert greedy(model, src, limits, GRAPH) == expected
    assert fake.captures == 2 * captures
    held, count = weakref.ref(model), len(GRAPHS)
    del model
    gc.collect()
    assert held() is None and len(GRAPHS) == count - 1  # its graphs did not keep it alive
