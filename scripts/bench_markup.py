"""How inline tags are carried into a translation: four ways compared on real sentences.

Each English sentence of a held-out file (seeded sample) gets one or two of its words wrapped
in <b>...</b>, as a page would have them, and is translated four ways:

  nodes         each text node alone (Argos Translate's translatehtml, LibreTranslate #806)
  placeholders  the tags left in the text for the model to copy
  alignment     the sentence whole, the tag put around the target words the source words are
                aligned to by the model's cross-attention (decoder layer `--layer`, heads
                averaged, argmax; Bergamot moves tags by alignments, from a trained head)
  anchors       the sentence whole, the bold words translated alone in the same batch and
                looked for in it (mt.formats, what mt ships)

For each: BLEU of the translation with its tags taken out against the reference (quality), the
share of outputs whose <b>...</b> is kept well formed around some text (tags kept), and the
share whose bold text is the bold words' own translation, compared without case or end
punctuation (placement; a proxy that favours anchors, which use that translation to place the
tag: read it with `alignment`'s number, which does not).

    python scripts/bench_markup.py --checkpoint /work/runs/recipe --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import sacrebleu
import torch

from mt.data.corpus import read_pairs_jsonl
from mt.data.tokenizer import BOS, EOS
from mt.decoding.engine import open_translator
from mt.formats import read_markup, translate_documents

TAG = re.compile(r"</?b>")
END = ".!?,;:"


def sample(path: Path, count: int, seed: int) -> list[tuple[str, str, str]]:
    """(the sentence with one or two words in <b>, its plain text, its reference)."""
    pairs = [
        (en, es) for en, es in read_pairs_jsonl(path, "en", "es") if 3 <= len(en.split()) <= 20
    ]
    rng = random.Random(seed)
    found = []
    for en, es in rng.sample(pairs, count):
        words = en.split()
        size = rng.choice((1, 2))
        start = rng.randrange(0, len(words) - size + 1)
        marked = [*words[:start], "<b>" + " ".join(words[start : start + size]) + "</b>"]
        found.append((" ".join([*marked, *words[start + size :]]), en, es))
    return found


def bold(text: str) -> str | None:
    """The text inside the one <b>...</b>, or None if the tags are not kept well formed."""
    if text.count("<b>") != 1 or text.count("</b>") != 1:
        return None
    inside = text.partition("<b>")[2].partition("</b>")
    return inside[0] if inside[1] else None


def same(a: str, b: str) -> bool:
    return a.strip().strip(END).lower() == b.strip().strip(END).lower() != ""


def by_nodes(translate, marked: list[str]) -> list[str]:
    pieces = [re.split(r"(</?b>)", text) for text in marked]
    todo = sorted({p.strip() for ps in pieces for p in ps if p.strip() and not TAG.fullmatch(p)})
    found = dict(zip(todo, translate(todo)))
    return [
        "".join(
            p if TAG.fullmatch(p) or not p.strip() else _spaced(p, found[p.strip()]) for p in ps
        )
        for ps in pieces
    ]


def _spaced(source: str, text: str) -> str:
    lead = source[: len(source) - len(source.lstrip())]
    return lead + text + source[len(source.rstrip()) :]


def by_anchors(translate, marked: list[str]) -> list[str]:
    documents = [read_markup(text, "q") for text in marked]
    return [out.decode() for out in translate_documents(documents, translate)]


def by_alignment(translator, translate, marked: list[str], layer: int) -> list[str]:
    plain = [TAG.sub("", text) for text in marked]
    out = []
    for text, source, target in zip(marked, plain, translate(plain)):
        start = text.index("<b>")
        end = text.index("</b>") - len("<b>")
        out.append(_aligned(translator, source, target, (start, end), layer))
    return out


def _aligned(translator, source: str, target: str, span: tuple[int, int], layer: int) -> str:
    """`target` with <b> around the target tokens whose most attended source token lies in
    `span` (character offsets of the source); no tag if none is."""
    src_ids, src_offsets = _tokens(translator.src_tokenizer, source)
    tgt_ids, tgt_offsets = _tokens(translator.tgt_tokenizer, target)
    model, device = translator.model, translator.device
    ids = torch.tensor([[*src_ids, EOS]], device=device)
    tgt_in = torch.tensor([[BOS, *tgt_ids]], device=device)
    cross = model.attention_weights(ids, tgt_in)[layer][1][0].float().mean(0)  # (T, S)
    inside = [i for i, (a, b) in enumerate(src_offsets) if a < span[1] and b > span[0]]
    aligned = [j for j in range(len(tgt_ids)) if int(cross[j, : len(src_ids)].argmax()) in inside]
    if not aligned:
        return target
    a, b = tgt_offsets[min(aligned)][0], tgt_offsets[max(aligned)][1]
    while a > 0 and not target[a - 1].isspace():  # whole words
        a -= 1
    while b < len(target) and target[b].isalnum():
        b += 1
    while a < b and target[a].isspace():
        a += 1
    return f"{target[:a]}<b>{target[a:b]}</b>{target[b:]}"


def _tokens(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """A text's token ids and character offsets, without the EOS the tokenizer appends."""
    found = tokenizer.encode(text)
    kept = [k for k, i in enumerate(found.ids) if i not in (BOS, EOS)]
    return [found.ids[k] for k in kept], [found.offsets[k] for k in kept]


def measure(name: str, outputs: list[str], items: list, spans: dict[str, str], seconds: float):
    refs = [es for _, _, es in items]
    stripped = [" ".join(TAG.sub("", out).split()) for out in outputs]
    kept = [bold(out) for out in outputs]
    words = [spans[bold(text)] for text, _, _ in items]
    return {
        "method": name,
        "bleu": round(sacrebleu.corpus_bleu(stripped, [refs]).score, 2),
        "tags_kept": round(sum(k is not None and k.strip() != "" for k in kept) / len(items), 4),
        "placed": round(
            sum(k is not None and same(k, w) for k, w in zip(kept, words)) / len(items), 4
        ),
        "seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--split", default="tatoeba_en_es.test.jsonl.gz")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--layer", type=int, default=-2, help="decoder layer of the alignment")
    args = parser.parse_args()
    translator = open_translator(args.checkpoint, device="cpu", decode=[f"decode.beam={args.beam}"])
    items = sample(Path(args.data) / args.split, args.count, args.seed)

    def translate(texts: list[str]) -> list[str]:
        return [hyps[0][0] for hyps in translator.translate_nbest(texts).nbest]

    marked = [text for text, _, _ in items]
    bolds = sorted({bold(text) for text in marked})
    spans = dict(zip(bolds, translate(bolds)))
    methods = {
        "nodes": lambda: by_nodes(translate, marked),
        "placeholders": lambda: translate(marked),
        "alignment": lambda: by_alignment(translator, translate, marked, args.layer),
        "anchors": lambda: by_anchors(translate, marked),
    }
    rows = []
    for name, run in methods.items():
        started = time.perf_counter()
        outputs = run()
        rows.append(measure(name, outputs, items, spans, time.perf_counter() - started))
        for (text, _, _), out in list(zip(items, outputs))[:3]:
            print(f"{name}: {text} -> {out}", flush=True)
    plain = translate([en for _, en, _ in items])
    bleu = sacrebleu.corpus_bleu(plain, [[es for _, _, es in items]]).score
    setting = {"split": args.split, "count": args.count, "seed": args.seed, "beam": args.beam}
    print(json.dumps({**setting, "layer": args.layer, "plain_bleu": round(bleu, 2), "rows": rows}))


def render(result: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    lines = [
        "## Inline tags: how a tag is carried into the translation",
        "",
        f"{result['count']} sentences of {result['split']} (seed {result['seed']}), one or two "
        f"words of each in `<b>`, beam {result['beam']} (scripts/bench_markup.py): BLEU of the "
        "output with its tags taken out; tags kept well formed around some text; placed: the "
        "bold text is the bold words' own translation (a proxy that favours anchors). "
        f"The same sentences without tags: BLEU {result['plain_bleu']:.2f}.",
        "",
        "| method | BLEU | tags kept | placed |",
        "|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['method']} | {row['bleu']:.2f} | {row['tags_kept']:.1%} | "
            f"{row['placed']:.1%} |"
        )
    return [*lines, ""]


if __name__ == "__main__":
    main()
