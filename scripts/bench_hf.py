"""mt against its `--format hf` export in transformers and its CTranslate2 export: BLEU,
sentences/s, and the share of sentences each engine translates exactly as each other does,
greedy and beam.

One process: the engines decode the same test sentences in turns, `--repeats` times, and the
speeds are medians, so that a loaded machine weighs on all alike; compare ratios. mt decodes
in float32 (on a CPU with AMX its default is bf16) so that the exports, float32, can match
it exactly. mt and CT2 search with the run's rules (`mt translate --beam 1`, `mt evaluate
--beam 5`); transformers with what the export's generation_config.json says (the nearest
transformers' options come to those rules, mt.export.to_marian), num_beams aside. Greedy
also runs mt with the export's single length limit (decode.max_len_a 0, max_len_b its
max_length less EOS and the decoder's start), which isolates what our per-source limit
changes. `--transformers4 PATH`:
also the greedy search through `pipeline("translation")` (removed in transformers 5) with
transformers 4 installed in PATH (`pip install --no-deps --target PATH transformers==4.57.6`
and the tokenizers / huggingface_hub it needs), in a subprocess. Prints one JSON.

    python scripts/bench_hf.py runs/bench/tatoeba_cpu \\
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz [--threads 1] [--repeats 3] \\
        [--transformers4 /tmp/tf4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH = 32  # sentences a transformers batch


def transformers_translate(folder: Path, beam: int):
    """A function that translates texts with generate() and the folder's generation config
    (num_beams aside): tokenizer, generate, batch_decode(skip_special_tokens)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()

    def translate(texts: list[str]) -> list[str]:
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), BATCH):
                inputs = tokenizer(texts[i : i + BATCH], return_tensors="pt", padding=True)
                out += tokenizer.batch_decode(
                    model.generate(**inputs, num_beams=beam), skip_special_tokens=True
                )
        return out

    return translate


def pipeline_worker(folder: str, threads: int) -> None:
    """In the transformers-4 subprocess: texts (a JSON list on stdin) through
    pipeline("translation"), greedy -> {"outputs", "seconds", "version"} on stdout."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    texts = json.load(sys.stdin)
    translate = transformers.pipeline("translation", model=folder, device="cpu")
    translate(texts[:16], num_beams=1, batch_size=BATCH)  # warm-up
    started = time.perf_counter()
    found = translate(texts, num_beams=1, batch_size=BATCH)
    seconds = time.perf_counter() - started
    outputs = [r["translation_text"] for r in found]
    json.dump(
        {"outputs": outputs, "seconds": seconds, "version": transformers.__version__}, sys.stdout
    )


def pipeline_translate(folder: Path, site: str, threads: int, versions: dict):
    """A function that translates texts greedily through pipeline("translation") with the
    transformers installed in `site`; its own decoding time, not the subprocess's start."""

    def translate(texts: list[str]) -> tuple[list[str], float]:
        env = {**os.environ, "PYTHONPATH": site}
        command = [sys.executable, __file__, "--pipeline-worker", str(folder)]
        done = subprocess.run(
            [*command, "--threads", str(threads)],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode:
            sys.exit(f"pipeline('translation') under {site} failed:\n{done.stderr[-3000:]}")
        answer = json.loads(done.stdout)
        versions["pipeline"] = answer["version"]
        return answer["outputs"], answer["seconds"]

    return translate


def timed(translate):
    """`translate` made to give (outputs, seconds)."""

    def run(texts: list[str]) -> tuple[list[str], float]:
        translate(texts[:16])  # warm-up
        started = time.perf_counter()
        outputs = translate(texts)
        return outputs, time.perf_counter() - started

    return run


def same(a: list[str], b: list[str]) -> float:
    """The share of sentences translated to the same string."""
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs")
    parser.add_argument("--sentences", type=int, default=0, help="0: all")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--transformers4", metavar="PATH", help="site folder of transformers 4")
    parser.add_argument("--pipeline-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pipeline_worker:
        return pipeline_worker(args.checkpoint, args.threads)
    if not args.pairs:
        parser.error("--pairs is required")

    import torch
    import transformers

    from mt import checkpoint
    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.engine import open_translator
    from mt.decoding.evaluate import bleu_chrf
    from mt.export.to_ctranslate2 import to_ctranslate2
    from mt.export.to_marian import to_marian

    torch.set_num_threads(args.threads)
    config = checkpoint.read_config(args.checkpoint)
    pairs = read_pairs_jsonl(args.pairs, "en", "es")[: args.sentences or None]
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    tmp = Path(tempfile.mkdtemp(prefix="bench-hf-"))
    hf = to_marian(args.checkpoint, tmp / "hf")
    ct2 = to_ctranslate2(args.checkpoint, tmp / "ct2")
    generation = json.loads((hf / "generation_config.json").read_text())
    versions = {"transformers": transformers.__version__}

    def mt(path, *decode):
        options = ["decode.precision=fp32", *decode]
        translator = open_translator(path, "auto", "cpu", args.threads, options)
        return timed(lambda texts: translator.translate(texts))

    # the export's one limit for all sentences: its tokens before EOS and the decoder's start
    one_limit = ["decode.max_len_a=0", f"decode.max_len_b={generation['max_length'] - 2}"]
    greedy = {
        "mt": mt(args.checkpoint, "decode.beam=1"),
        "mt, the export's limit": mt(args.checkpoint, "decode.beam=1", *one_limit),
        "transformers": timed(transformers_translate(hf, 1)),
        "ct2": mt(ct2, "decode.beam=1"),
    }
    if args.transformers4:
        greedy["transformers 4 pipeline"] = pipeline_translate(
            hf, args.transformers4, args.threads, versions
        )
    engines = {
        "greedy": greedy,
        f"beam{args.beam}": {
            "mt": mt(args.checkpoint, f"decode.beam={args.beam}"),
            "transformers": timed(transformers_translate(hf, args.beam)),
            "ct2": mt(ct2, f"decode.beam={args.beam}"),
        },
    }
    results = {
        "sentences": len(sources),
        "alpha": config.decode.alpha,
        "generation_config": {
            k: generation.get(k) for k in ("length_penalty", "early_stopping", "max_length")
        },
        "threads": args.threads,
        "versions": versions,
    }
    for search, translators in engines.items():
        times = {name: [] for name in translators}
        outputs = {}
        for _ in range(args.repeats):
            for name, translate in translators.items():  # in turns: the same load on each
                outputs[name], seconds = translate(sources)
                times[name].append(seconds)
                print(f"{search} {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
        results[search] = {
            name: {
                "bleu": bleu_chrf(outputs[name], references)["bleu"],
                "sentences_per_s": len(sources) / statistics.median(times[name]),
                "same_as": {
                    other: same(outputs[other], outputs[name])
                    for other in translators
                    if other != name
                },
            }
            for name in translators
        }
    print(json.dumps(results))
    shutil.rmtree(tmp)  # the two exports


if __name__ == "__main__":
    main()
