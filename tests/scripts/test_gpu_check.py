"""scripts/gpu_check.py runs only by hand on a GPU machine; its FLOP count is tested here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mt.config import ModelConfig
from mt.model import Transformer

_spec = importlib.util.spec_from_file_location(
    "gpu_check", Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def test_forward_flops_match_what_torch_counts_for_the_model():
    cfg = ModelConfig(d_model=32, heads=4, encoder_layers=2, decoder_layers=3, d_ff=48)
    model = Transformer(cfg, 50, 60).train()  # as trained: no rows padded (mt.row_linear)
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


def test_pairs_of_a_packed_batch_are_counted_as_padded_ones_are():
    from helpers.models import packed_batches, packed_corpus
    from mt.data.batches import collate

    split = packed_corpus()
    packed = packed_batches(split)
    src, tgt = (np.concatenate(x) for x in zip(*map(gpu_check.pair_lengths, packed)))
    padded = gpu_check.pair_lengths(collate(split, np.arange(len(split))))
    assert sorted(zip(src, tgt)) == sorted(zip(*padded))  # every pair once, as long


def test_steady_speed_and_the_time_to_reach_it():
    # 30 updates of 1,000 tokens: the first 5 take 1 s each (warming up), then 0.1 s each
    ends = np.cumsum([1.0] * 5 + [0.1] * 25)
    figures = gpu_check.speed(0.0, ends, [1000] * 30, [1e9] * 30)
    assert figures["tokens_per_s"] == pytest.approx(10_000)  # after the 10 warm-up updates
    assert figures["flops_per_s"] == pytest.approx(1e10)
    # updates 5..14 are the first window at 90% of steady (4..13 took 1.9 s): reached at 14
    assert figures["to_steady_s"] == pytest.approx(ends[14])
    assert figures["first_100"] == pytest.approx(30_000 / ends[-1] / 10_000)


def test_all_figures_quick_on_the_cpu_end_to_end(tmp_path):
    """`--all --device cpu --quick`: every part of the script runs (a tiny model, a slice of
    the Tatoeba files) and lands in the record and the table, or says why it could not."""
    import json
    import subprocess
    import sys

    data = Path(__file__).resolve().parents[2] / "../shared/data"
    if not (data / "tatoeba_en_es.train.jsonl.gz").is_file():
        pytest.skip("no Tatoeba files in ../shared/data")
    script = Path(gpu_check.__file__)
    out = tmp_path / "gpu"
    command = [sys.executable, str(script), "--all", "--device", "cpu", "--quick"]
    command += ["--data", str(data), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.with_suffix(".json").read_text())
    speed = record["one_device"]
    assert speed["tokens_per_s"] > 0 and speed["identical_weights"]
    assert speed["attention"] == "padded batches (bool masks)"  # the CPU's: no packing
    assert speed["graph_breaks"] == 0 and speed["recompiles"] == 0
    assert record["all_gpus"] == "skipped: 0 GPUs"
    assert record["ours_vs_torch_transformer_bf16"]["ours_over_reference"] > 0
    bleu = record["bleu"]
    assert bleu["beam5"]["sentences"] == bleu["greedy"]["sentences"] == 60
    assert bleu["updates"] >= 1
    table = out.with_suffix(".md").read_text()
    assert "| one_device.attention | padded batches (bool masks) |" in table
    assert table in done.stdout
