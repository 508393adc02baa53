"""Decoding speed of this checkout's search, beside a reference checkout's: sentences/s and
target tokens/s (EOS counted), greedy and beam 5, decode time only (loading reported apart).

Each implementation decodes in processes of its own (PYTHONPATH: this repository, or the
reference, such as main's mt/ from `git archive`), alternating reference, ours, reference,
ours..., on the same sentences, device and threads; medians are reported, with the share of
sentences whose output is the reference's (same tokens; the largest score difference beside
it). Two models: the checkpoint given, and a base.yaml-sized one as initialised (seed 0:
its outputs run to the length limit, the longest decoding there is). Each search runs in
fp32 and in what `decode.precision: auto` picks, whose greedy outputs are compared with
fp32's and whose beam BLEU is given beside fp32's. Prints a Markdown table.

    git -C ../main archive HEAD mt | tar -x -C /tmp/mt-ref
    python scripts/bench_search.py runs/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz --reference /tmp/mt-ref
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(spec: dict) -> None:
    """Decode every (beam, precision) of `spec` with the `mt` on PYTHONPATH; print JSON."""
    import torch

    import mt
    from mt import checkpoint
    from mt.data import tokenizer as tok
    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.pieces import source_pieces
    from mt.decoding.translate import translate_ids
    from mt.device import precision_for
    from mt.model import max_sentence_tokens

    def synced_clock() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    started = synced_clock()
    loaded = checkpoint.load(spec["model"], device)
    load_s = synced_clock() - started
    pairs = read_pairs_jsonl(spec["pairs"], "en", "es")[: spec["sentences"] or None]
    ids = source_pieces(
        loaded.src_tokenizer, [s for s, _ in pairs], max_sentence_tokens(loaded.model.cfg)
    ).ids
    runs = []
    for beam, precision in spec["searches"]:
        default = type(loaded.config.decode)().batch_tokens  # the implementation's own
        cfg = dataclasses.replace(
            loaded.config.decode,
            beam=beam,
            nbest=1,
            precision=precision,
            batch_tokens=spec["batch_tokens"] or default,
        )
        batch_tokens = resolved_batch_tokens(cfg, loaded.model, device)
        with torch.inference_mode():
            translate_ids(loaded.model, ids[:64], cfg, device)  # warm-up
            started = synced_clock()
            found = translate_ids(loaded.model, ids, cfg, device)
            seconds = synced_clock() - started
        best = [hyps[0] if hyps else None for hyps in found]
        tokens = [h.tokens if h else [] for h in best]
        runs.append(
            {
                "beam": beam,
                "precision": precision_for(precision, device)[1],
                "seconds": seconds,
                "batch_tokens": batch_tokens,
                "target_tokens": sum(len(t) + 1 for t in tokens),
                "tokens": tokens,
                "scores": [h.score if h else None for h in best],
                "texts": tok.detokenize(loaded.tgt_tokenizer, tokens),
            }
        )
    print(json.dumps({"mt": mt.__file__, "load_s": load_s, "runs": runs}))


def resolved_batch_tokens(cfg, model, device) -> int:
    """decode.batch_tokens as the `mt` under test resolves it; a reference may be older."""
    import mt.decoding.translate

    if hasattr(mt.decoding.translate, "translation_batch_tokens"):
        return mt.decoding.translate.translation_batch_tokens(
            cfg, model.cfg, model.out.out_features, device
        )
    if hasattr(mt.decoding.translate, "batch_tokens_for"):  # before issue 27
        return mt.decoding.translate.batch_tokens_for(cfg, model, device)
    return cfg.batch_tokens  # before decode.batch_tokens 0


def measure(path: Path, spec: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS=str(spec["threads"]))
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=env, check=True)
    found = json.loads(done.stdout)
    if not found["mt"].startswith(str(path)):
        raise SystemExit(f"{path}: the worker imported {found['mt']}")
    print(f"{path}: {[round(r['seconds'], 2) for r in found['runs']]} s", file=sys.stderr)
    return found


def rows(name: str, spec: dict, found: dict[str, list[dict]], references: list[str]) -> list:
    from mt.decoding.evaluate import bleu_chrf

    out = []
    ours = found["ours"]
    for i, (beam, _) in enumerate(spec["searches"]):
        run = ours[0]["runs"][i]
        seconds = statistics.median(r["runs"][i]["seconds"] for r in ours)
        sentences = len(run["tokens"])
        row = {
            "model": name,
            "search": "greedy" if beam == 1 else f"beam {beam}",
            "precision": run["precision"].split(",")[0].replace(" as configured", ""),
            "batch_tokens": run["batch_tokens"],
            "sentences": sentences,
            "load_s": statistics.median(r["load_s"] for r in ours),
            "sentences_per_s": sentences / seconds,
            "target_tokens_per_s": run["target_tokens"] / seconds,
            "bleu": bleu_chrf(run["texts"], references[:sentences])["bleu"],
        }
        fp32 = ours[0]["runs"][[b for b, _ in spec["searches"]].index(beam)]
        row["same_as_fp32"] = statistics.mean(a == b for a, b in zip(run["tokens"], fp32["tokens"]))
        if "reference" in found:
            theirs = found["reference"]
            ref = theirs[0]["runs"][i]
            ref_seconds = statistics.median(r["runs"][i]["seconds"] for r in theirs)
            row["reference_sentences_per_s"] = sentences / ref_seconds
            row["speedup"] = ref_seconds / seconds
            row["same_as_reference"] = statistics.mean(
                a == b for a, b in zip(run["tokens"], ref["tokens"])
            )
            if beam > 1:
                row["largest_score_difference"] = max(
                    abs(a - b) for a, b in zip(run["scores"], ref["scores"]) if a is not None
                )
        out.append(row)
    return out


def table(found: list[dict]) -> str:
    head = "| model | search | precision | batch tokens | sentences | load s | sent/s |"
    head += " target tok/s | BLEU | same as fp32 |"
    line = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if "speedup" in found[0]:
        head += " reference sent/s | ours / reference | same as reference |"
        line += "---:|---:|---:|"
    out = [head, line]
    for r in found:
        cells = [r["model"], r["search"], r["precision"], f"{r['batch_tokens']:,}"]
        cells += [f"{r['sentences']:,}", f"{r['load_s']:.2f}", f"{r['sentences_per_s']:,.1f}"]
        cells += [f"{r['target_tokens_per_s']:,.0f}", f"{r['bleu']:.2f}"]
        cells.append(f"{r['same_as_fp32']:.1%}")
        if "speedup" in r:
            same = f"{r['same_as_reference']:.1%}"
            if "largest_score_difference" in r:
                same += f" (scores within {r['largest_score_difference']:.1e})"
            cells += [f"{r['reference_sentences_per_s']:,.1f}", f"{r['speedup']:.2f}x", same]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?")
    parser.add_argument("--pairs")
    parser.add_argument("--reference", type=Path, help="a folder holding the reference's mt/")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each implementation")
    parser.add_argument("--sentences", type=int, default=0, help="0: all")
    parser.add_argument("--base-sentences", type=int, default=200, help="0: all")
    parser.add_argument("--batch-tokens", type=int, default=0, help="0: each one's default")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    sys.path.insert(0, str(ROOT))
    from bench import machine
    from bench_export import base_sized

    from mt.data.corpus import read_pairs_jsonl

    references = [r for _, r in read_pairs_jsonl(args.pairs, "en", "es")]
    implementations = {"ours": ROOT}
    if args.reference:
        implementations = {"reference": args.reference.resolve(), **implementations}
    found = []
    with tempfile.TemporaryDirectory() as folder:
        models = {
            "trained": args.checkpoint,
            "base": str(base_sized(args.checkpoint, Path(folder))),
        }
        for name, model in models.items():
            spec = {
                "model": model,
                "pairs": args.pairs,
                "sentences": args.sentences if name == "trained" else args.base_sentences,
                "device": args.device,
                "threads": args.threads,
                "batch_tokens": args.batch_tokens,
                "searches": [(1, "fp32"), (5, "fp32"), (1, "auto"), (5, "auto")],
            }
            runs: dict[str, list[dict]] = {impl: [] for impl in implementations}
            for _ in range(args.repeats):  # interleaved: a slower spell hits both alike
                for impl, path in implementations.items():
                    runs[impl].append(measure(path, spec))
            found += rows(name, spec, runs, references)
    print(
        f"{machine()}; {args.device}, {args.threads} thread(s), {args.repeats} runs each, medians"
    )
    print()
    print(table(found))


if __name__ == "__main__":
    main()
