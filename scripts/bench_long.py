"""Real text that nothing was tuned to (issue 51), on one model, in one run: sentences joined
into long lines in four constructions, the longest line, spans to carry over, the split
whole, FLORES. Prints one JSON object a step, then the whole result.

  joined   Tatoeba sentences joined 1, 2, 4, 8 and 16 a line, both sides alike, in each
           construction (CONSTRUCTIONS): one after another (spaces); where a sentence and the
           next both end in a full stop on both sides, as clauses with a conjunction or a
           linking adverb that training never joins with (HELD_OUT: the model has not seen
           them as junctions), the next sentence's first word as the corpus writes it inside
           a sentence; likewise with a semicolon alone; and with the junctions that training
           teaches (TAUGHT: how far the model carries clauses whose words it was shown, the
           sentences held out as in the others). BLEU (cased and lowercased), output/reference
           words and the capitals after a semicolon of the lines, against the same sentences
           translated one by one (their translations joined alike: the reference's junction
           words put in) and, where junctions have words,
           clause by clause (each clause after a junction given as a sentence opened by the
           junction's words, "In fact, it's late.", its translation put after the junction's
           comma or semicolon: what the model says of those words when not joined), and one by
           one with each junction said otherwise (HELD_OUT's third: as right, not the
           reference's words), for each policy
  longest  one line of clauses joined as above until it has LONGEST words: words out per word
  spans    sentences with spans put in (numbers, times, dates, URLs, e-mail addresses,
           {{templates}}, {0}, %s, %d, `code`; SPAN_KINDS): the share of spans that come back
           verbatim exactly once, and BLEU against the sentences' references (the spans put in
           alike where the reference has them)
  whole    the split's sentences, one a line: BLEU
  flores   FLORES devtest: BLEU, output/reference words

Policies: `model`, the translator as mt translate opens it; `rules`, where the translator
still has them, the decoding rules of issue 43 (connectives mined from the training store,
pieces of the 98th percentile of its sources, each given as a sentence).

    python scripts/bench_long.py runs/recipe --data ../shared/data [--split valid] [--beam 5]
        [--only joined,longest,spans,whole,flores] [--pairs 320] [--set decode.KEY=VALUE]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from mt.data.corpus import read_pairs_jsonl
from mt.data.joins import CLAUSES, LANGUAGES, Join
from mt.decoding.evaluate import bleu_chrf
from mt.text import translate_texts

PER_LINE = (1, 2, 4, 8, 16)
LONGEST = 409  # words in the longest line
# (English, Spanish as the references say it, Spanish said otherwise) junctions of clauses that
# mt.data.joins does not train with, of words the Tatoeba corpus has (12 to 95 times each: a
# model can know them), none that asks another mood of the clause after it (", unless", ", so
# that": the sentence as it stands would be wrong); the third, as right as the second, tells
# what one by one owes to the reference's own words
HELD_OUT = (
    (", even though", ", aunque", ", a pesar de que"),
    ("; that's why", "; por eso", "; por esa razón"),
    ("; after all,", "; después de todo,", "; al fin y al cabo,"),
    ("; of course,", "; por supuesto,", "; claro,"),
    ("; anyway,", "; de todos modos,", "; de todas formas,"),
    (", and so", ", y así", ", y por eso"),
    ("; actually,", "; en realidad,", "; de hecho,"),
    ("; in fact,", "; de hecho,", "; en realidad,"),
    ("; instead,", "; en cambio,", "; en su lugar,"),
    (", though", ", aunque", ", si bien"),
)
# the junctions training teaches (mt.data.joins), the sentences held out as in every other
TAUGHT = tuple(junction for junction in CLAUSES if junction[0].strip(",; "))
CONSTRUCTIONS = {
    "spaces": (),
    "conjunctions": HELD_OUT,
    "semicolons": ((";", ";"),),
    "junctions taught": TAUGHT,
}
WORD = re.compile(r"\w+")
FIRST_WORD = re.compile(r"^(\W*)(\w+)")
AFTER_SEMICOLON = re.compile(r";\s+[¿¡«\"'(]*([^\W\d_])")  # the first letter of what follows


class Inside:
    """A sentence as it starts inside another: its first word lowercased where `sentences`
    (a corpus) write it lowercase at least as often as it is, past their first words."""

    def __init__(self, sentences: Iterable[str]) -> None:
        self.counts = Counter(w for s in sentences for w in WORD.findall(s)[1:])

    def __call__(self, sentence: str) -> str:
        found = FIRST_WORD.match(sentence)
        if not found or (word := found[2]).islower():
            return sentence
        if self.counts[word.lower()] < self.counts[word]:
            return sentence
        return sentence[: found.start(2)] + word[0].lower() + sentence[found.start(2) + 1 :]


def junctions_of(
    pairs: Sequence[tuple[str, str]], junctions: Sequence[tuple[str, str]], draw: random.Random
) -> list[tuple[str, str] | None]:
    """The junction before each pair but the first: one of `junctions` (drawn) where the
    pair before ends in a full stop on both sides, else None (a space)."""
    return [
        draw.choice(junctions)
        if junctions and all(s.endswith(".") and not s.endswith("..") for s in before)
        else None
        for before in pairs[:-1]
    ]


def joined(
    sentences: Sequence[str], junctions: Sequence, side: int, inside: Callable[[str], str]
) -> str:
    """`sentences` as one line: each junction's `side` between two (the full stop before it
    off, the sentence after it starting as `inside` says; Spanish "y" and "o" as it asks,
    mt.data.joins), a space where there is none."""
    out = sentences[0]
    for junction, sentence in zip(junctions, sentences[1:]):
        if junction:
            after = inside(sentence)
            said = Join(tuple(junction[:2]), LANGUAGES, 1.0).said(side, after)
            out = out.removesuffix(".") + said + " " + after
        else:
            out += " " + sentence
    return out


def joined_lines(
    pairs: Sequence[tuple[str, str]],
    per_line: int,
    junctions: Sequence[tuple[str, str]],
    inside: Sequence[Callable[[str], str]],
    seed: int,
) -> list[tuple[str, str, list]]:
    """The pairs joined `per_line` a line: (source, reference, the junctions drawn)."""
    draw = random.Random(seed)
    lines = []
    for start in range(0, len(pairs) - per_line + 1, per_line):
        group = pairs[start : start + per_line]
        chosen = junctions_of(group, junctions, draw)
        sides = [joined([p[k] for p in group], chosen, k, inside[k]) for k in (0, 1)]
        lines.append((sides[0], sides[1], chosen))
    return lines


def clause_sentences(
    sentences: Sequence[str], junctions: Sequence, inside: Callable[[str], str]
) -> list[str]:
    """Each sentence of a line as the clause it is there, given as a sentence: after a
    junction, opened by the junction's English words ("In fact, it's late.")."""
    out = [sentences[0]]
    for junction, sentence in zip(junctions, sentences[1:]):
        words = junction[0].lstrip(",;").strip() if junction else ""
        clause = f"{words} {inside(sentence)}" if words else sentence
        out.append(clause[:1].upper() + clause[1:])
    return out


def lines_of(
    translations: Sequence[str], per_line: int, chosen: Sequence, inside: Callable[[str], str]
) -> list[str]:
    """Sentences translated one by one, joined `per_line` a line in Spanish as `chosen` (each
    line's junctions) says."""
    return [
        joined(translations[i * per_line : (i + 1) * per_line], junctions, 1, inside)
        for i, junctions in enumerate(chosen)
    ]


def said_otherwise(chosen: Sequence[Sequence]) -> list[list]:
    """Each line's junctions (`chosen`) with their Spanish said otherwise (HELD_OUT's third)."""
    return [[j and (j[0], j[2]) for j in junctions] for junctions in chosen]


def punctuation_of(junctions: Sequence) -> list:
    """`junctions` with their Spanish side cut to its comma or semicolon."""
    return [j and (j[0], j[1][:1]) for j in junctions]


def words_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Words out per reference word."""
    return sum(len(h.split()) for h in hypotheses) / max(sum(len(r.split()) for r in references), 1)


def capitals_after_semicolons(texts: Sequence[str]) -> int:
    """How many semicolons in `texts` a capitalised word follows: where a line cut into
    pieces at its semicolons gets a piece's translation opened as a sentence."""
    return sum(word.isupper() for text in texts for word in AFTER_SEMICOLON.findall(text))


def scored(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """BLEU, BLEU of the lowercased text (what is left without capitals), words out per
    reference word, and capitals after a semicolon."""
    return {
        "bleu": round(bleu_chrf(hypotheses, references)["bleu"], 2),
        "bleu_lowercased": round(
            bleu_chrf([h.lower() for h in hypotheses], [r.lower() for r in references])["bleu"], 2
        ),
        "length": round(words_ratio(hypotheses, references), 3),
        "capitals_after_semicolons": capitals_after_semicolons(hypotheses),
    }


class Policies:
    """The translator as mt translate opens it (`model`), and with the decoding rules of
    issue 43 where it still has them (`rules`)."""

    def __init__(self, translator, beam: int, names: Sequence[str]) -> None:
        decode = dataclasses.replace(translator.config.decode, beam=beam)
        self.translators, self.decode = {}, decode
        if "model" in names:
            self.translators["model"] = without_rules(translator)
        if "rules" in names:
            if not hasattr(translator, "trained") or not translator.trained.connectives:
                raise SystemExit("--policies rules: this translator has no decoding rules")
            self.translators["rules"] = translator

    def translate(self, policy: str, texts: Sequence[str]) -> list[str]:
        """Each text as mt translate translates it (cut into sentences, each translated)."""
        return translate_texts(self.translators[policy], texts, self.decode)


def without_rules(translator):
    """`translator` without issue 43's rules where it has them: no connectives, pieces of
    data.max_length (what training joins up to)."""
    trained = getattr(translator, "trained", None)
    if trained is None or not hasattr(trained, "connectives"):
        return translator
    plain = copy.copy(translator)
    carried = translator.config.data.max_length
    plain.trained = dataclasses.replace(trained, connectives={}, carried=carried)
    return plain


def bench_joined(policies: Policies, pairs: list, inside: Sequence[Callable], seed: int) -> dict:
    """Per construction, per line count: BLEU and words of the lines by each policy and of
    their sentences one by one."""
    one_by_one = policies.translate("model", [s for s, _ in pairs])
    out: dict[str, list] = {}
    for name, junctions in CONSTRUCTIONS.items():
        rows = []
        for per_line in PER_LINE:
            lines = joined_lines(pairs, per_line, junctions, inside, seed)
            sources, references, chosen = zip(*lines)
            singles = lines_of(one_by_one, per_line, chosen, inside[1])
            row = {
                "per_line": per_line,
                "lines": len(lines),
                "one_by_one": scored(singles, references),
            }
            if any(junction[0].strip(",; ") for junction in junctions):
                row["clause_by_clause"] = scored(
                    clause_by_clause(policies, pairs, per_line, chosen, inside), references
                )
            if junctions and all(len(junction) == 3 for junction in junctions):
                otherwise = lines_of(one_by_one, per_line, said_otherwise(chosen), inside[1])
                row["one_by_one_said_otherwise"] = scored(otherwise, references)
            for policy in policies.translators:
                row[policy] = scored(policies.translate(policy, sources), references)
            rows.append(row)
            print(json.dumps({"construction": name, **row}), flush=True)
        out[name] = rows
    return out


def clause_by_clause(
    policies: Policies, pairs: list, per_line: int, chosen: Sequence, inside: Sequence[Callable]
) -> list[str]:
    """The lines of `pairs` (`chosen`: each line's junctions) translated clause by clause."""
    clauses = [
        clause_sentences([s for s, _ in pairs[i * per_line : (i + 1) * per_line]], js, inside[0])
        for i, js in enumerate(chosen)
    ]
    found = iter(policies.translate("model", [c for line in clauses for c in line]))
    return [
        joined([next(found) for _ in line], punctuation_of(js), 1, inside[1])
        for line, js in zip(clauses, chosen)
    ]


def bench_longest(policies: Policies, pairs: list, inside: Sequence[Callable], seed: int) -> dict:
    """One line of clauses of LONGEST words or more: words out per word in, each policy."""
    shuffled = random.Random(seed).sample(pairs, len(pairs))
    count = 2
    while True:
        ((source, _, _),) = joined_lines(shuffled[:count], count, HELD_OUT, inside, seed)
        if len(source.split()) >= LONGEST or count == len(shuffled):
            break
        count += 1
    out = {"sentences": count, "words": len(source.split())}
    for policy in policies.translators:
        (found,) = policies.translate(policy, [source])
        out[policy] = round(len(found.split()) / out["words"], 3)
    return out


# spans put in a sentence: (kind, English, Spanish), {x} the span, {s} the sentence (its
# final stop off, or its first word as inside a sentence where the template starts)
SPAN_KINDS = (
    ("time", "At {x}, {s}.", "A las {x}, {s}."),
    ("date", "On {x}, {s}.", "El {x}, {s}."),
    ("url", "{s} (see {x}).", "{s} (ver {x})."),
    ("email", "{s}: write to {x}.", "{s}: escribe a {x}."),
    ("number", "{s}, {x} times.", "{s}, {x} veces."),
    ("template", "{{{{name}}}}: {s}.", "{{{{name}}}}: {s}."),
    ("index", "{s} ({x}).", "{s} ({x})."),
    ("printf", "{s}: %d.", "{s}: %d."),
    ("code", "Run {x}, then {s}.", "Ejecuta {x}, luego {s}."),
)


def span_value(kind: str, draw: random.Random) -> str:
    """A span of `kind` (SPAN_KINDS): a time, date, URL, ... drawn with `draw`."""
    n = draw.randrange(1, 100)
    return {
        "time": f"{draw.randrange(24)}:{draw.randrange(60):02d}",
        "date": "-".join((f"20{n % 30:02d}", f"{n % 12 + 1:02d}", f"{n % 28 + 1:02d}")),
        "url": f"https://example.org/p{n}?id={draw.randrange(1000)}",
        "email": f"{draw.choice(['ana', 'bob', 'li'])}.{n}@example.com",
        "number": str(draw.choice([n, n * 1000 + 7, f"{n},{draw.randrange(100, 999)}"])),
        "template": "{{name}}",
        "index": "{" + str(n % 10) + "}",
        "printf": "%d",
        "code": f"`make test{n}`",
    }[kind]


def span_lines(
    pairs: Sequence[tuple[str, str]], inside: Sequence[Callable], seed: int
) -> list[tuple[str, str, str]]:
    """Each pair with a span put in: (source, reference, the span), the kinds in turn."""
    draw = random.Random(seed)
    out = []
    for i, (src, tgt) in enumerate(pairs):
        kind, english, spanish = SPAN_KINDS[i % len(SPAN_KINDS)]
        x = span_value(kind, draw)
        sides = []
        for template, sentence, into in ((english, src, inside[0]), (spanish, tgt, inside[1])):
            bare = sentence[:-1] if sentence[-1:] in ".!?" else sentence
            sides.append(template.format(x=x, s=into(bare) if template[0] != "{" else bare))
        out.append((sides[0], sides[1], x))
    return out


def carried_once(span: str, text: str) -> bool:
    """Whether `span` is in `text` exactly once, verbatim, not inside a longer word."""
    return len(re.findall(rf"(?<![\w]){re.escape(span)}(?![\w])", text)) == 1


def bench_spans(policies: Policies, pairs: list, inside: Sequence[Callable], seed: int) -> dict:
    lines = span_lines(pairs, inside, seed)
    sources, references, found = zip(*lines)
    out: dict = {"sentences": len(lines)}
    for policy in policies.translators:
        translated = policies.translate(policy, sources)
        kept = [carried_once(x, t) for x, t in zip(found, translated)]
        by_kind: dict[str, list[bool]] = {}
        for (kind, *_), ok in zip(
            [SPAN_KINDS[i % len(SPAN_KINDS)] for i in range(len(kept))], kept
        ):
            by_kind.setdefault(kind, []).append(ok)
        out[policy] = {
            "kept": round(sum(kept) / len(kept), 4),
            "by_kind": {k: round(sum(v) / len(v), 3) for k, v in by_kind.items()},
            "bleu": round(bleu_chrf(translated, references)["bleu"], 2),
            "lost": [t for ok, t in zip(kept, translated) if not ok][:5],
        }
    return out


def bench_whole(policies: Policies, pairs: list) -> dict:
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    return {
        "lines": len(sources),
        **{p: scored(policies.translate(p, sources), references) for p in policies.translators},
    }


def main() -> None:
    from mt.decoding.engine import open_translator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--pairs", type=int, default=320, help="pairs joined")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--only", default="joined,longest,spans,whole,flores")
    parser.add_argument("--policies", default="model")
    parser.add_argument("--set", action="append", default=[], help="decode.KEY=VALUE")
    args = parser.parse_args()
    translator = open_translator(args.model, device="cpu", decode=args.set)
    policies = Policies(translator, args.beam, args.policies.split(","))
    pairs = read_pairs_jsonl(args.data / f"tatoeba_en_es.{args.split}.jsonl.gz", "en", "es")
    train = read_pairs_jsonl(args.data / "tatoeba_en_es.train.jsonl.gz", "en", "es")
    inside = tuple(Inside(side) for side in zip(*train))
    result: dict = {"model": args.model, "beam": args.beam, "split": args.split}
    steps = args.only.split(",")
    chosen = random.Random(args.seed).sample(pairs, args.pairs)
    if "joined" in steps:
        result["joined"] = bench_joined(policies, chosen, inside, args.seed)
    if "longest" in steps:
        result["longest"] = bench_longest(policies, pairs, inside, args.seed)
        print(json.dumps(result["longest"]), flush=True)
    if "spans" in steps:
        result["spans"] = bench_spans(policies, chosen, inside, args.seed)
        print(json.dumps(result["spans"]), flush=True)
    if "whole" in steps:
        result["whole"] = bench_whole(policies, pairs)
        print(json.dumps(result["whole"]), flush=True)
    if "flores" in steps:
        flores = read_pairs_jsonl(args.data / "flores200_devtest_en_es.jsonl.gz", "en", "es")
        result["flores"] = bench_whole(policies, flores)
    print(json.dumps(result))


def render(r: dict) -> list[str]:
    """The result as the lines of docs/benchmarks.md."""
    lines = [
        "## Real text: joined sentences, the longest line, spans (scripts/bench_long.py)",
        "",
        f"Model {r['model']}, beam {r['beam']}, the Tatoeba {r['split']} split.",
        "",
    ]
    for construction, rows in r.get("joined", {}).items():
        columns = [p for p in rows[-1] if p not in ("per_line", "lines")]
        lines += [
            f"Joined by {construction}: BLEU of the lines",
            "",
            "| per line | " + " | ".join(c.replace("_", " ") for c in columns) + " |",
            "|---:|" + "---:|" * len(columns),
            *(
                f"| {row['per_line']} | "
                + " | ".join(f"{row[c]['bleu']:.2f}" if c in row else "" for c in columns)
                + " |"
                for row in rows
            ),
            "",
        ]
    if "longest" in r:
        longest = r["longest"]
        ratios = ", ".join(
            f"{k} {v:.3f}" for k, v in longest.items() if k not in ("sentences", "words")
        )
        lines += [f"The {longest['words']}-word line: words out per word in: {ratios}.", ""]
    if "spans" in r:
        for policy, found in r["spans"].items():
            if isinstance(found, dict):
                lines += [
                    f"Spans ({policy}): {100 * found['kept']:.2f}% kept verbatim exactly once, "
                    f"BLEU {found['bleu']:.2f}.",
                    "",
                ]
    for name in ("whole", "flores"):
        if name in r:
            found = ", ".join(
                f"{p} {v['bleu']:.2f}" for p, v in r[name].items() if isinstance(v, dict)
            )
            lines += [f"{name}: {r[name]['lines']} lines, BLEU {found}.", ""]
    return lines


if __name__ == "__main__":
    main()
