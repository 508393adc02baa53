"""mt (PyTorch, float32) against its CTranslate2 export (float32 and int8): sentences/s and
BLEU with greedy search and beam 5, peak memory and size on disk.

Two models: a trained checkpoint (BLEU on the given test pairs), and a base.yaml-sized one
(d_model 512, 6+6) as initialised, with the trained one's tokenizers: speed only. Each engine
decodes in a process of its own, so that its peak resident memory is its own (mt's CT2 path
imports torch too, through mt.decoding.translate). Prints one JSON object.

    python scripts/bench_export.py runs/bench/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = ("torch", "ct2-float32", "ct2-int8")


def worker(
    engine: str, model: str, pairs: str, sentences: int, beam: int, threads: int, out: str
) -> None:
    """Decode in this process, write the translations to `out` (a JSON list), and print
    {sentences_per_s, bleu, peak_mib}."""
    import torch

    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.engine import open_translator
    from mt.decoding.evaluate import bleu_chrf

    torch.set_num_threads(threads)
    found = read_pairs_jsonl(pairs, "en", "es")[: sentences or None]
    sources, references = [s for s, _ in found], [r for _, r in found]
    decode = [f"decode.beam={beam}", "decode.nbest=1"]
    kind = "torch" if engine == "torch" else "ctranslate2"
    translator = open_translator(model, kind, "cpu", threads, decode)
    with torch.inference_mode():
        translator.translate(sources[:32])  # warm-up
        started = time.perf_counter()
        hypotheses = translator.translate(sources)
        seconds = time.perf_counter() - started
    # VmHWM: this process's peak resident memory (ru_maxrss would keep the parent's across exec)
    status = Path("/proc/self/status").read_text().split("VmHWM:")[1].split()
    result = {
        "sentences_per_s": len(sources) / seconds,
        "bleu": bleu_chrf(hypotheses, references)["bleu"],
        "peak_mib": int(status[0]) / 1024,
    }
    Path(out).write_text(json.dumps(hypotheses), encoding="utf-8")
    print(json.dumps(result))


def measure(
    engine: str, model: Path, args: argparse.Namespace, sentences: int, beam: int, out: Path
) -> dict:
    """Run `worker` in a child process of its own: its speed, BLEU and peak memory; its
    translations in `out`."""
    command = [sys.executable, __file__, "--worker", engine, str(model), "--pairs", args.pairs]
    command += ["--sentences", str(sentences), "--beam", str(beam), "--threads", str(args.threads)]
    command += ["--hypotheses", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))  # no idle threads spinning
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    out = child.stdout.read()
    if child.wait() != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    print(f"{model.name} {engine} beam {beam}: {out.strip()}", file=sys.stderr, flush=True)
    return json.loads(out)


def base_sized(trained: Path, folder: Path) -> Path:
    """A base.yaml-sized model as initialised, with `trained`'s tokenizers and decode keys."""
    import torch

    from mt import checkpoint
    from mt.config_file import load_config
    from mt.model import Transformer

    loaded = checkpoint.load(trained)
    cfg = load_config("base.yaml")
    cfg.tokenizer, cfg.decode = loaded.config.tokenizer, loaded.config.decode
    torch.manual_seed(0)
    src, tgt = loaded.src_tokenizer, loaded.tgt_tokenizer
    model = Transformer(cfg.model, src.get_vocab_size(), tgt.get_vocab_size(), cfg.tokenizer.joint)
    file = folder / "base" / checkpoint.WEIGHTS
    file.parent.mkdir(parents=True)
    checkpoint.save_weights(file, model.state_dict(), checkpoint.metadata(cfg, (src, tgt), 0))
    return file


def bench(name: str, file: Path, folder: Path, args: argparse.Namespace, sentences: int) -> dict:
    from mt.export.to_ctranslate2 import to_ctranslate2

    paths = {"torch": file}
    sizes = {"torch": file.stat().st_size}
    for quantization in ("float32", "int8"):
        out = to_ctranslate2(file, folder / f"{name}-{quantization}", quantization=quantization)
        paths[f"ct2-{quantization}"] = out
        sizes[f"ct2-{quantization}"] = (out / "model.bin").stat().st_size
    found = {
        engine: {
            "size_mib": sizes[engine] / 2**20,
            **{
                f"beam{beam}": measure(
                    engine, paths[engine], args, sentences, beam, folder / f"{name}-{engine}-{beam}"
                )
                for beam in (1, 5)
            },
        }
        for engine in ENGINES
    }
    # the share of sentences translated exactly as mt translates them, greedy and beam 5
    for beam in (1, 5):
        ours = json.loads((folder / f"{name}-torch-{beam}").read_text(encoding="utf-8"))
        for engine in ENGINES[1:]:
            theirs = json.loads((folder / f"{name}-{engine}-{beam}").read_text(encoding="utf-8"))
            same = sum(a == b for a, b in zip(ours, theirs)) / len(ours)
            found[engine][f"beam{beam}"]["same_as_torch"] = same
    return {"sentences": len(ours), **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--sentences", type=int, default=0, help="of the trained model; 0: all")
    parser.add_argument("--base-sentences", type=int, default=200, help="of the base-sized one")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--hypotheses", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(
            args.worker,
            args.checkpoint,
            args.pairs,
            args.sentences,
            args.beam,
            args.threads,
            args.hypotheses,
        )
        return

    import ctranslate2

    from mt import checkpoint
    from mt.device import cpu_description

    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        folder = Path(tmp)
        trained = checkpoint.resolve(args.checkpoint)
        results = {
            "cpu": cpu_description(),
            "threads": args.threads,
            "ctranslate2": ctranslate2.__version__,
            "pairs": args.pairs,
            "trained": {
                "checkpoint": str(trained),
                **bench("trained", trained, folder, args, args.sentences),
            },
            "base": bench("base", base_sized(trained, folder), folder, args, args.base_sentences),
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
