"""Mixed precision: the choice per device, bf16 and fp16 training on the CPU, loss-scaling
skips, float32 checkpoints, and decoding in reduced precision."""

from __future__ import annotations

import functools

import pytest
import torch

import mt.device
import mt.training.rehearsal
from helpers.models import (
    packed_batches,
    packed_corpus,
    packed_model,
    packed_tensors,
    trained_model,
)
from helpers.runs import metric_lines, tiny_config, weights
from mt import checkpoint
from mt.config import DecodeConfig
from mt.decoding.translate import translate_ids
from mt.device import precision_for
from mt.training.loss import smoothed_loss
from mt.training.rehearsal import measure_precision
from mt.training.schedule import learning_rate
from mt.training.trainer import train

CPU, CUDA, MPS = torch.device("cpu"), torch.device("cuda", 0), torch.device("mps")


@pytest.mark.parametrize(
    "name, device, facts, dtype, why",
    [
        ("auto", CUDA, {"capability": (8, 0)}, torch.bfloat16, "native on this GPU"),
        ("auto", CUDA, {"capability": (9, 0)}, torch.bfloat16, "capability 9.0"),
        ("auto", CUDA, {"capability": (7, 5)}, torch.float16, "loss scaling"),
        ("auto", CPU, {}, None, "fp32 on a CPU"),
        ("auto", MPS, {}, None, "fp32 on mps"),
        ("fp32", CUDA, {"capability": (9, 0)}, None, "as configured"),
        ("bf16", CPU, {}, torch.bfloat16, "as configured"),
        ("fp16", CPU, {}, torch.float16, "as configured"),
    ],
)
def test_auto_precision_picks_what_pays(name, device, facts, dtype, why):
    chosen, reason = precision_for(name, device, **facts)
    assert chosen == dtype and why in reason


@pytest.mark.parametrize(
    "amx_usable, flags, expected",
    [
        (True, {"avx512f", "amx_tile", "amx_bf16"}, True),
        (True, {"avx512f", "amx_tile"}, False),  # tiles without bf16 units
        (False, {"avx512f", "amx_tile", "amx_bf16"}, False),  # the OS does not allow the tiles
        (True, set(), True),  # no /proc/cpuinfo: torch's word alone
        (False, {"avx512f", "avx512_bf16"}, False),  # AVX-512 bf16 alone: not worth it
    ],
)
def test_amx_bf16_is_detected_from_torch_and_cpu_flags(monkeypatch, amx_usable, flags, expected):
    monkeypatch.setattr(torch._C._cpu, "_init_amx", lambda: amx_usable, raising=False)
    monkeypatch.setattr(mt.device, "cpu_flags", lambda: flags)
    assert mt.device.cpu_amx_bf16() is expected


@pytest.mark.parametrize(
    "fp32_s, bf16_s, chosen, said",
    [
        (1.5, 1.0, torch.bfloat16, "auto: bf16, 800 vs 533 target tokens/s in fp32"),
        (1.0, 0.95, None, "auto: fp32, 800 vs 842 target tokens/s in bf16, not 1.1x"),
        (1.0, 2.0, None, "auto: fp32, 800 vs 400 target tokens/s in bf16, not 1.1x"),
    ],
)
def test_auto_precision_on_a_cpu_is_measured_by_the_clock(fp32_s, bf16_s, chosen, said):
    # each pass moves a mocked clock by its seconds, the first (untimed) ones by 100
    model, batch = packed_model(dropout=0.3), packed_tensors(packed_batches(packed_corpus())[0])
    now, passes = [0.0], []

    def forward_in(dtype, seconds):
        def forward(b):
            now[0] += 100.0 if len(passes) < 2 else seconds
            passes.append(dtype)
            with mt.device.autocast(CPU, dtype):
                return smoothed_loss(model(b.src, b.tgt_in, b.packed), b.labels, 0.1)

        return forward

    forwards = {"fp32": forward_in(None, fp32_s), "bf16": forward_in(torch.bfloat16, bf16_s)}
    before = torch.get_rng_state()
    done = measure_precision(forwards, batch, model, tokens=800, clock=lambda: now[0])
    assert done.dtype == chosen and done.why == said and "\n" not in done.why
    assert done.rates == pytest.approx({"fp32": 800 / fp32_s, "bf16": 800 / bf16_s})
    assert passes == [None, torch.bfloat16] * 4  # interleaved, an untimed pass each first
    assert all(p.grad is None for p in model.parameters())  # no trace of the passes
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize(
    "bf16_first_s, bf16_s, passes, chosen, said",
    [  # bf16 emulated: stopped after one pass, what it cost 3x what fp32's two did
        (30.0, 30.0, 3, None, "800 vs 27 (one pass: far slower) target tokens/s in bf16"),
        # a first pass 5x an fp32 one (kernel plans), then faster: measured whole, chosen
        (5.0, 0.5, 8, torch.bfloat16, "auto: bf16, 1,600 vs 800 target tokens/s in fp32"),
    ],
)
def test_measuring_bf16_stops_once_it_is_far_slower(bf16_first_s, bf16_s, passes, chosen, said):
    model, batch = packed_model(), packed_tensors(packed_batches(packed_corpus())[0])
    now, done_passes = [0.0], []

    def forward_in(dtype, first_s, seconds):
        def forward(b):
            now[0] += seconds if dtype in done_passes else first_s
            done_passes.append(dtype)
            with mt.device.autocast(CPU, dtype):
                return smoothed_loss(model(b.src, b.tgt_in, b.packed), b.labels, 0.1)

        return forward

    forwards = {
        "fp32": forward_in(None, 1.0, 1.0),
        "bf16": forward_in(torch.bfloat16, bf16_first_s, bf16_s),
    }
    done = measure_precision(forwards, batch, model, tokens=800, clock=lambda: now[0])
    assert len(done_passes) == passes and done.dtype == chosen and said in done.why
    assert done.rates["bf16"] == pytest.approx(800 / bf16_s)


@pytest.mark.parametrize(
    "flags, emulated",
    [
        ({"avx2", "fma"}, True),  # an AVX2 Zen 3
        ({"avx2", "avx512f"}, True),  # a Skylake: AVX-512 without bf16
        ({"avx512f", "avx512_bf16"}, False),  # a Zen 4
        ({"avx512f", "amx_tile", "amx_bf16"}, False),
        (set(), False),  # no flags to read (an Arm CPU's are `Features`): unknown
    ],
)
def test_a_cpu_without_bf16_instructions_is_known_to_emulate_it(monkeypatch, flags, emulated):
    monkeypatch.setattr(mt.device, "cpu_flags", lambda: flags)
    assert mt.device.cpu_bf16_emulated() is emulated


def test_fp32_is_timed_alone_where_bf16_is_not_measured():
    model, batch = packed_model(), packed_tensors(packed_batches(packed_corpus())[0])
    now, passes = [0.0], []

    def forward(b):
        now[0] += 0.5
        passes.append(None)
        return smoothed_loss(model(b.src, b.tgt_in, b.packed), b.labels, 0.1)

    done = measure_precision({"fp32": forward}, batch, model, tokens=800, clock=lambda: now[0])
    assert done.dtype is None and done.rates == {"fp32": 1600.0} and len(passes) == 4
    assert done.why.startswith("auto: fp32, 1,600 target tokens/s; bf16 not measured: this ")
    assert "no bf16 instructions (avx512_bf16, amx_bf16)" in done.why


@pytest.mark.parametrize(
    "faster, emulated, chosen",
    [  # bf16 wins whatever / never; and where the CPU would emulate it, is not tried
        (0.0, False, "bf16"),
        (1e9, False, "fp32"),
        (0.0, True, "fp32"),
    ],
)
def test_a_run_records_what_auto_measured_and_a_resume_keeps_it(
    corpus_file, tmp_path, capsys, monkeypatch, faster, emulated, chosen
):
    monkeypatch.setattr(mt.training.rehearsal, "FASTER", faster)
    monkeypatch.setattr(mt.training.rehearsal, "cpu_bf16_emulated", lambda: emulated)
    run = tmp_path / "run"
    common = ("train.precision=auto", "train.save_every=3", "train.eval_every=100")
    train(tiny_config(corpus_file, run, "train.max_steps=3", *common))
    said = capsys.readouterr().err
    assert f"precision: auto: {chosen}, " in said and " target tokens/s" in said
    assert ("bf16 not measured" in said) is emulated
    (record,) = [m for m in metric_lines(run) if m["kind"] == "precision"]
    assert record["precision"] == chosen and record["step"] == 0
    assert record["fp32_tokens_per_s"] > 0
    assert ("bf16_tokens_per_s" in record) is not emulated
    monkeypatch.setattr(
        mt.training.rehearsal, "FASTER", 1e9 - faster
    )  # the other way now: not asked
    train(tiny_config(corpus_file, run, "train.max_steps=5", *common))
    assert f"precision: auto: {chosen}, as measured when the run started" in (
        capsys.readouterr().err
    )
    assert len([m for m in metric_lines(run) if m["kind"] == "precision"]) == 1
    state = checkpoint.load_trainer_state((run / "checkpoints" / "last").resolve())
    assert state["state"]["precision"] == chosen


def train_losses(corpus, run, precision: str, steps: int = 20) -> list[float]:
    result = train(
        tiny_config(corpus, run, f"train.precision={precision}", f"train.max_steps={steps}")
    )
    assert result["step"] == steps
    return [m["loss"] for m in metric_lines(run) if m["kind"] == "train"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_tiny_run_learns_in_reduced_precision_with_float32_checkpoints(
    corpus_file, tmp_path, capsys, precision
):
    run = tmp_path / "run"
    losses = train_losses(corpus_file, run, precision)
    assert f"precision: {precision} as configured" in capsys.readouterr().err
    assert losses[-1] < losses[0] - 0.5
    assert {t.dtype for t in weights(run).values()} == {torch.float32}
    state = checkpoint.load_trainer_state((run / "checkpoints" / "last").resolve())
    exp_avgs = [s["exp_avg"] for s in state["optimizer"]["state"].values()]
    assert {t.dtype for t in exp_avgs} == {torch.float32}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_resume_is_exact_within_a_precision(corpus_file, tmp_path, precision):
    common = (f"train.precision={precision}", "train.save_every=100", "train.eval_every=100")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny_config(corpus_file, straight, "train.max_steps=6", *common))
    train(tiny_config(corpus_file, resumed, "train.max_steps=3", *common))
    train(tiny_config(corpus_file, resumed, "train.max_steps=6", *common))
    a, b = weights(straight), weights(resumed)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_fp16_overflow_skips_the_update_without_advancing_count_or_schedule(
    corpus_file, tmp_path, monkeypatch, capsys
):
    # a loss scale far too large: fp16 gradients overflow until the scaler has lowered it
    monkeypatch.setattr(
        torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=2.0**28)
    )
    run = tmp_path / "run"
    config = tiny_config(
        corpus_file, run, "train.precision=fp16", "train.max_steps=3", "train.log_every=1"
    )
    result = train(config)
    skipped = capsys.readouterr().err.count("gradients overflowed")
    assert skipped >= 2 and result["step"] == 3
    logged = [m for m in metric_lines(run) if m["kind"] == "train"]
    assert [m["step"] for m in logged] == [1, 2, 3]
    assert [m["lr"] for m in logged] == [learning_rate(s, config) for s in (1, 2, 3)]
    state = checkpoint.load_trainer_state((run / "checkpoints" / "last").resolve())
    adam_steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    assert adam_steps == {3.0}  # the optimiser took the three counted updates, no more
    assert state["scaler"]["scale"] < 2.0**28


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize(
    "precision, device",
    [("fp32", "cpu"), ("bf16", "cpu"), pytest.param("fp32", "cuda", marks=GPU)],
)
def test_gradients_not_finite_under_a_finite_loss_skip_the_update(
    corpus_file, tmp_path, monkeypatch, capsys, precision, device
):
    """Skipped as a non-finite loss is (on a GPU by a gradient scaler at scale 1, on the
    device): the weights and the optimiser's state stay, the step count does not advance."""
    import mt.training.loss as mt_loss

    run = tmp_path / "run"
    common = (f"train.precision={precision}", f"run.device={device}", "train.log_every=1")
    train(tiny_config(corpus_file, run, "train.max_steps=2", *common))
    real, calls = mt_loss.smoothed_loss, []

    def nan_gradients(logits, target, epsilon, pad):
        loss, nll = real(logits, target, epsilon, pad)
        calls.append(1)
        if len(calls) == 1:  # its value unchanged, its gradient 0 * inf: NaN
            loss = loss + torch.sqrt(logits.float().sum() * 0.0) * 0.0
        return loss, nll

    monkeypatch.setattr(mt_loss, "smoothed_loss", nan_gradients)
    result = train(tiny_config(corpus_file, run, "train.max_steps=4", *common))
    assert result["step"] == 4
    assert "non-finite gradients at step 3; update skipped" in capsys.readouterr().err
    state = checkpoint.load_trainer_state((run / "checkpoints" / "last").resolve())
    assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {4.0}
    assert all(torch.isfinite(w).all() for w in weights(run).values())


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_decoding_in_reduced_precision_finds_the_float32_translations(precision):
    model, sources, _, _ = trained_model()
    exact = translate_ids(model, sources, DecodeConfig(beam=2, precision="fp32"))
    reduced = translate_ids(model, sources, DecodeConfig(beam=2, precision=precision))
    assert [h[0].tokens for h in reduced] == [h[0].tokens for h in exact]
    scores = [[h[0].score for h in found] for found in (exact, reduced)]
    assert scores[1] == pytest.approx(scores[0], abs=0.05)
    assert scores[1] != scores[0]  # computed in `precision`, not float32
