"""mt against its `--format hf` export in transformers and its CTranslate2 export: BLEU,
sentences/s, and the share of sentences each translates exactly as mt does, greedy and beam.

One process: the three engines decode the same test sentences in turns (mt, transformers,
CT2, then again), `--repeats` times, and the speeds are medians, so that a loaded machine
weighs on all three alike; compare ratios. mt decodes in float32 (on a CPU with AMX its
default is bf16) so that the exports, float32, can match it exactly. Greedy: transformers'
max_length is the model's positions, so mt's limit is set to the same (decode.max_len_a 0,
max_len_b max_positions - 2). Beam: mt's own rules (decode.rules mt, GNMT penalty with the
run's alpha, as `mt evaluate --beam 5`) against generate(num_beams=5, length_penalty=alpha)
with transformers' rules, and mt with decode.rules transformers beside them. Prints one JSON.

    python scripts/bench_hf.py runs/bench/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def transformers_translate(folder: Path, beam: int, alpha: float):
    """A function that translates texts with generate(), as pipeline("translation") did
    (removed in transformers 5): tokenizer, generate, batch_decode(skip_special_tokens)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()

    def translate(texts: list[str], batch: int = 32) -> list[str]:
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch):
                inputs = tokenizer(texts[i : i + batch], return_tensors="pt", padding=True)
                ids = model.generate(**inputs, num_beams=beam, length_penalty=alpha)
                out += tokenizer.batch_decode(ids, skip_special_tokens=True)
        return out

    return translate


def same(a: list[str], b: list[str]) -> float:
    """The share of sentences translated to the same string."""
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--sentences", type=int, default=0, help="0: all")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    import torch

    from mt import checkpoint
    from mt.converters import ctranslate2 as ct2_export
    from mt.converters.marian import export_hf
    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.engine import open_translator
    from mt.decoding.evaluate import bleu_chrf

    torch.set_num_threads(args.threads)
    config = checkpoint.read_config(args.checkpoint)
    alpha, longest = config.decode.alpha, config.model.max_positions - 2
    pairs = read_pairs_jsonl(args.pairs, "en", "es")[: args.sentences or None]
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    tmp = Path(tempfile.mkdtemp(prefix="bench-hf-"))
    hf = export_hf(args.checkpoint, tmp / "hf")
    ct2 = ct2_export.export(args.checkpoint, tmp / "ct2")
    fp32 = ["decode.precision=fp32"]
    same_limit = ["decode.max_len_a=0", f"decode.max_len_b={longest}"]

    def mt(path, *decode):
        translator = open_translator(path, "auto", "cpu", args.threads, [*fp32, *decode])
        return lambda texts: translator.translate(texts)

    engines = {
        "greedy": {
            "mt": mt(args.checkpoint, "decode.beam=1", *same_limit),
            "transformers": transformers_translate(hf, 1, alpha),
            "ct2": mt(ct2, "decode.beam=1", *same_limit),
        },
        f"beam{args.beam}": {
            "mt": mt(args.checkpoint, f"decode.beam={args.beam}"),
            "mt, transformers' rules": mt(
                args.checkpoint,
                f"decode.beam={args.beam}",
                "decode.rules=transformers",
                *same_limit,
            ),
            "transformers": transformers_translate(hf, args.beam, alpha),
            "ct2": mt(ct2, f"decode.beam={args.beam}"),
        },
    }
    results = {"sentences": len(sources), "alpha": alpha, "threads": args.threads}
    for search, translators in engines.items():
        times = {name: [] for name in translators}
        outputs = {}
        for _ in range(args.repeats):
            for name, translate in translators.items():  # in turns: the same load on each
                translate(sources[:16])  # warm-up
                started = time.perf_counter()
                outputs[name] = translate(sources)
                times[name].append(time.perf_counter() - started)
                print(f"{search} {name}: {times[name][-1]:.1f} s", file=sys.stderr, flush=True)
        results[search] = {
            name: {
                "bleu": bleu_chrf(outputs[name], references)["bleu"],
                "sentences_per_s": len(sources) / statistics.median(times[name]),
                "same_as_mt": same(outputs["mt"], outputs[name]),
                "same_as_transformers": same(outputs["transformers"], outputs[name]),
            }
            for name in translators
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
