"""Paragraphs against sentences: --paragraphs seeded paragraphs of 4 Tatoeba test sentences,
translated one paragraph a line (`mt translate --file`, and `mt serve`'s /translate) and the
same sentences one a line, joined by fours afterwards: BLEU of each against the references
joined likewise. Also the paragraphs with --no-split-sentences (each line whole, as before
mt.text). Time: the paragraph file and the sentence file through `mt translate --file`,
taking turns --repeats times (medians; the ratio is what holds on a shared machine). Prints
one JSON object.

With --evaluate, instead: `mt evaluate`'s BLEU on the Tatoeba test and FLORES devtest with
each line whole and with its sentences split: the lines of one sentence translate the same
either way and are translated once, the others both ways. One JSON object a set.

    python scripts/bench_text.py runs/recipe --data ../shared/data [--beam 5] [--evaluate]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit import serving

from mt.data.corpus import read_pairs_jsonl
from mt.decoding.evaluate import bleu_chrf

SENTENCES_A_PARAGRAPH = 4


def paragraphs(data: Path, count: int, seed: int) -> tuple[list[list[str]], list[list[str]]]:
    """`count` paragraphs of distinct test pairs drawn with `seed`: (sources, references),
    each a list of its sentences."""
    pairs = read_pairs_jsonl(data / "tatoeba_en_es.test.jsonl.gz", "en", "es")
    chosen = random.Random(seed).sample(pairs, count * SENTENCES_A_PARAGRAPH)
    groups = [
        chosen[i : i + SENTENCES_A_PARAGRAPH] for i in range(0, len(chosen), SENTENCES_A_PARAGRAPH)
    ]
    return [[s for s, _ in g] for g in groups], [[t for _, t in g] for g in groups]


def translate_file(model: str, path: Path, beam: int, *options: str) -> tuple[list[str], float]:
    """`mt translate --file path`'s lines and its wall seconds."""
    command = [sys.executable, "-m", "mt", "translate", "--checkpoint", model, "--file", str(path)]
    started = time.perf_counter()
    out = subprocess.run(
        [*command, "--beam", str(beam), "--device", "cpu", *options],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split("\n")[:-1], time.perf_counter() - started


def post(address: str, texts: list[str], beam: int) -> list[str]:
    """/translate of `texts`, 64 (the default --max-texts) a request."""
    import http.client

    out = []
    for start in range(0, len(texts), 64):
        connection = http.client.HTTPConnection(address, timeout=600)
        body = json.dumps({"q": texts[start : start + 64], "beam": beam})
        connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
        answer = json.loads(connection.getresponse().read())
        connection.close()
        out += answer["translatedText"]
    return out


def evaluate_default(model: str, data: Path, beam: int) -> None:
    """--evaluate: BLEU with and without splitting, per test set (see the docstring)."""
    from mt.decoding.engine import open_translator
    from mt.text import Layouts, translate_texts

    translator = open_translator(model, device="cpu", decode=[f"decode.beam={beam}"])
    for name in ("tatoeba_en_es.test", "flores200_devtest_en_es"):
        pairs = read_pairs_jsonl(data / f"{name}.jsonl.gz", "en", "es")
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        several = [i for i, s in enumerate(sources) if len(Layouts([s]).sentences) > 1]
        whole = translator.translate(sources)
        split = list(whole)
        for i, text in zip(several, translate_texts(translator, [sources[i] for i in several])):
            split[i] = text
        row = {"set": name, "lines": len(sources), "several_sentences": len(several)}
        for key, hyps in (("whole", whole), ("split", split)):
            row[key] = bleu_chrf(hyps, refs)
            if several:
                row[f"{key}_several"] = bleu_chrf(
                    [hyps[i] for i in several], [refs[i] for i in several]
                )
        print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--paragraphs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--evaluate", action="store_true", help="mt evaluate's default")
    args = parser.parse_args()
    if args.evaluate:
        evaluate_default(args.model, args.data, args.beam)
        return
    sources, references = paragraphs(args.data, args.paragraphs, args.seed)
    refs = [" ".join(r) for r in references]
    with tempfile.TemporaryDirectory() as tmp:
        para_file, sent_file = Path(tmp, "paragraphs.txt"), Path(tmp, "sentences.txt")
        para_file.write_text("".join(" ".join(s) + "\n" for s in sources), encoding="utf-8")
        sent_file.write_text("".join(x + "\n" for s in sources for x in s), encoding="utf-8")
        times: dict[str, list[float]] = {"paragraphs": [], "sentences": []}
        for _ in range(args.repeats):  # in turns: the machine's load falls on both alike
            para_out, seconds = translate_file(args.model, para_file, args.beam)
            times["paragraphs"].append(seconds)
            sent_out, seconds = translate_file(args.model, sent_file, args.beam)
            times["sentences"].append(seconds)
        whole, _ = translate_file(args.model, para_file, args.beam, "--no-split-sentences")
    joined = [
        " ".join(sent_out[i : i + SENTENCES_A_PARAGRAPH])
        for i in range(0, len(sent_out), SENTENCES_A_PARAGRAPH)
    ]
    with serving(args.model, "--device", "cpu") as address:
        served = post(address, [" ".join(s) for s in sources], args.beam)
    median = {key: statistics.median(value) for key, value in times.items()}
    result = {
        "paragraphs": args.paragraphs,
        "beam": args.beam,
        "seed": args.seed,
        "bleu": {
            "sentence_by_sentence": bleu_chrf(joined, refs)["bleu"],
            "paragraphs_translate_file": bleu_chrf(para_out, refs)["bleu"],
            "paragraphs_serve": bleu_chrf(served, refs)["bleu"],
            "paragraphs_no_split": bleu_chrf(whole, refs)["bleu"],
        },
        "seconds": times,
        "time_ratio": median["paragraphs"] / median["sentences"],
        "length_ratio_no_split": sum(map(len, whole)) / sum(map(len, refs)),
    }
    print(json.dumps(result))


def render(r: dict) -> list[str]:
    """The result as the lines of docs/benchmarks.md."""
    b = r["bleu"]
    return [
        "## Paragraphs: text cut into sentences (mt.text)",
        "",
        f"{r['paragraphs']} paragraphs of {SENTENCES_A_PARAGRAPH} Tatoeba test sentences "
        f"(seed {r['seed']}), beam {r['beam']}, on the CPU: BLEU against the references "
        "joined likewise (scripts/bench_text.py).",
        "",
        "| translated as | BLEU |",
        "| --- | ---: |",
        f"| the sentences one a line, joined by fours | {b['sentence_by_sentence']:.2f} |",
        f"| one paragraph a line, `mt translate --file` | {b['paragraphs_translate_file']:.2f} |",
        f"| one paragraph a request, `/translate` | {b['paragraphs_serve']:.2f} |",
        f"| one paragraph a line, `--no-split-sentences` (before) | "
        f"{b['paragraphs_no_split']:.2f} |",
        "",
        f"Time of the paragraph file over the sentence file through `mt translate --file` "
        f"(medians of {len(r['seconds']['paragraphs'])} runs in turns): "
        f"{r['time_ratio']:.3f}x.",
        "",
    ]


if __name__ == "__main__":
    main()
