"""Decoding speed: batched greedy and beam search against one sentence at a time.

Same model, same sentences, one process. Batches are cut from the sentences sorted by
length, as `mt evaluate` and the peer toolkits decode a test set. Prints one JSON object with
sentences per second for each way, the batched / one-at-a-time ratios, and the training speed
of torch.nn.Transformer measured here before and after (`--data`), which tells how fast the
machine was during the run.

    python scripts/bench_decode.py CHECKPOINT --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
from bench_train_speed import reference_speed

from mt.data import tokenizer as tok
from mt.data.corpus import read_pairs_jsonl
from mt.decoding.engine import open_translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument(
        "--single",
        type=int,
        default=200,
        help="sentences decoded one at a time (a slice: it is slow)",
    )
    parser.add_argument(
        "--batch-sentences",
        type=int,
        default=64,
        help="sentences per batch, as the peers were measured",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--data", type=Path, help="the data folder: time torch.nn.Transformer before and after"
    )
    args = parser.parse_args()

    reference = [reference_speed(args.data)] if args.data else []
    translator = open_translator(args.checkpoint, "torch", args.device)
    sources = [src for src, _ in read_pairs_jsonl(args.pairs, "en", "es")]
    lengths = [len(ids) for ids in tok.encode(translator.src_tokenizer, sources)]
    sources = [sources[i] for i in sorted(range(len(sources)), key=lambda i: -lengths[i])]
    decode = translator.config.decode
    # batch_tokens large enough that --batch-sentences sentences fit, as in a fixed-size batch
    longest = max(lengths) + 1

    def rate(texts: list[str], beam: int, per_batch: int) -> float:
        started = time.perf_counter()
        for i in range(0, len(texts), per_batch):
            translator.translate(
                texts[i : i + per_batch],
                dataclasses.replace(decode, beam=beam, batch_tokens=per_batch * longest * beam),
            )
        return len(texts) / (time.perf_counter() - started)

    with torch.inference_mode():
        rate(sources[:64], 5, 64)  # warm-up
        results = {}
        for beam in (1, 5):
            batched = rate(sources, beam, args.batch_sentences)
            single = rate(sources[:: len(sources) // args.single][: args.single], beam, 1)
            results[f"beam{beam}"] = {
                "batched_sentences_per_s": batched,
                "single_sentences_per_s": single,
                "speedup": batched / single,
            }
    if args.data:
        reference.append(reference_speed(args.data))
    print(
        json.dumps(
            {
                "reference_tokens_per_s": reference,
                "sentences": len(sources),
                "single_sentences": args.single,
                "batch_sentences": args.batch_sentences,
                "threads": torch.get_num_threads(),
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
