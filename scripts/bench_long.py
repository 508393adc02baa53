"""Long sentences: pieces the model can carry and the coverage guard (issue 43), against
today's policy (pieces only where a sentence passes the model's positions, no guard), in one
run on the same model. Prints one JSON object.

  joined   Tatoeba test sentences joined 1, 2, 4, 8 and 16 a line by commas and a last "and"
           ("y" in the references), each after the first starting with its first word as
           the training corpus writes it inside a sentence ("the", but "Tom" and "I";
           --capitals kept: as written, capitalized): BLEU and output/reference length
           ratio per length, for the sentences one by one (their translations joined
           alike), today, pieces of data.max_length, pieces of the length the model carries
           (mt.decoding.trained), each also with the guard (the default: the latter); on how
           many sentences the guard fires. --policies picks among those, and adds pN: pieces
           of the length N% of the training sources are within (mt.decoding.trained), with
           the guard
  longest  one line of test sentences joined until it has 409 words (the issue's): words out
           per word in
  flores   FLORES devtest, beam 5: each line whole as today against split (its sentences,
           pieces, guard: the default), time (medians of --repeats runs in turns) and BLEU
  tatoeba  the Tatoeba test today and by default: BLEU, and how often the guard fires

"today" is as before issue 43: no connectives either (mt.decoding.trained).
--split valid takes the Tatoeba valid sentences instead of the test's (joined, longest,
tatoeba), to choose a rule on them and report it on the test.

    python scripts/bench_long.py runs/recipe --data ../shared/data [--beam 5] [--repeats 3]
        [--split valid] [--policies today,guard,p90] [--capitals kept]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from mt.data.corpus import read_pairs_jsonl
from mt.decoding.evaluate import bleu_chrf
from mt.decoding.trained import carried_length, train_source_offsets
from mt.model import max_sentence_tokens
from mt.text import Layouts

PER_LINE = (1, 2, 4, 8, 16)
LONGEST = 409  # words in the longest line
FINAL = ".!?"
POLICIES = ("today", "max_length", "max_length_guard", "carried", "guard")


WORD = re.compile(r"\w+")
FIRST_WORD = re.compile(r"^(\W*)(\w+)")


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


def kept(sentence: str) -> str:
    return sentence


def joined(sentences: Sequence[str], conjunction: str, inside: Callable = kept) -> str:
    """One sentence of many: each but the last without its final stop, joined by commas,
    the last after `conjunction` ("and", "y"); each but the first as `inside` starts it."""
    bare = [s.rstrip(FINAL) for s in sentences[:-1]] + [sentences[-1]]
    bare = bare[:1] + [inside(s) for s in bare[1:]]
    if len(bare) == 1:
        return bare[0]
    return ", ".join(bare[:-1]) + f", {conjunction} " + bare[-1]


def lines_of(
    pairs: Sequence[tuple[str, str]], per_line: int, inside: Sequence[Callable] = (kept, kept)
) -> tuple[list[str], list[str]]:
    """The pairs joined `per_line` a line: (sources, references); `inside`: each side's."""
    groups = [pairs[i : i + per_line] for i in range(0, len(pairs) - per_line + 1, per_line)]
    return (
        [joined([s for s, _ in g], "and", inside[0]) for g in groups],
        [joined([t for _, t in g], "y", inside[1]) for g in groups],
    )


def length_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Words out per reference word."""
    return sum(len(h.split()) for h in hypotheses) / sum(len(r.split()) for r in references)


def scored(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    return {
        "bleu": round(bleu_chrf(hypotheses, references)["bleu"], 2),
        "length": round(length_ratio(hypotheses, references), 3),
    }


def percentile_of(policy: str) -> float | None:
    """N of a policy pN (None for the others)."""
    found = re.fullmatch(r"p(\d+(?:\.\d+)?)", policy)
    return float(found[1]) if found else None


class Policies:
    """The translator under each policy: today (pieces only past the model's positions, no
    guard), pieces of data.max_length, pieces of the length the model carries (without the
    guard), and the default (those, with the guard); and each pN of `chosen` (the policies
    the joined and longest steps compare, POLICIES where not given)."""

    def __init__(self, translator, beam: int, chosen: Sequence[str] = POLICIES) -> None:
        self.translator = translator
        self.before = copy.copy(translator)  # today's: no connectives
        self.before.trained = dataclasses.replace(translator.trained, connectives={})
        self.chosen = list(chosen)
        decode = dataclasses.replace(translator.config.decode, beam=beam)
        config = translator.config
        pieces = {
            "today": max_sentence_tokens(config.model),
            "max_length": config.data.max_length,
            "carried": 0,  # the translator's own
        }
        self.decode = {
            policy: dataclasses.replace(decode, piece_tokens=tokens, coverage=0)
            for policy, tokens in pieces.items()
        }
        self.decode["max_length_guard"] = dataclasses.replace(
            decode, piece_tokens=config.data.max_length
        )
        self.decode["guard"] = decode
        offsets = train_source_offsets(translator.run_dir)
        for policy in self.chosen:
            if (percentile := percentile_of(policy)) is not None:
                tokens = carried_length(offsets, config.data.max_length, percentile)
                self.decode[policy] = dataclasses.replace(decode, piece_tokens=tokens)
        unknown = set(self.chosen) - set(self.decode)
        if unknown:
            raise SystemExit(f"--policies: unknown {', '.join(sorted(unknown))}")

    def piece_tokens(self) -> dict[str, int]:
        """The pieces' tokens of each pN policy chosen."""
        return {p: self.decode[p].piece_tokens for p in self.chosen if percentile_of(p) is not None}

    def translate(
        self, policy: str, texts: Sequence[str], split: bool = True
    ) -> tuple[list[str], int]:
        """Each text's translation, as mt translate makes it, and on how many of their
        sentences the guard fires (with it: is still short after its second try, as the
        translator says)."""
        layouts = Layouts(texts, split)
        decode = self.decode[policy]
        translator = self.before if policy == "today" else self.translator
        found = translator.translate_nbest(layouts.sentences, decode)
        short = found.short
        if not decode.coverage:  # no guard: where it would fire
            coverage, best = self.translator.coverage, [hyps[0][0] for hyps in found.nbest]
            fraction = self.decode["guard"].coverage
            short = coverage.short(coverage.source_lengths(layouts.sentences), best, fraction)
        return [hyps[0][0] for hyps in layouts.joined(found.nbest)], sum(short)


def bench_joined(policies: Policies, pairs: list, inside: Sequence[Callable]) -> list[dict]:
    """The joined-sentences table over `pairs`, each side's sentences joined as `inside`
    starts them."""
    one_by_one, _ = policies.translate("guard", [s for s, _ in pairs])
    rows = []
    for per_line in PER_LINE:
        sources, references = lines_of(pairs, per_line, inside)
        used = len(sources) * per_line
        singles = [
            joined(one_by_one[i : i + per_line], "y", inside[1]) for i in range(0, used, per_line)
        ]
        row = {"per_line": per_line, "lines": len(sources)}
        row["one_by_one"] = scored(singles, references)
        for policy in policies.chosen:
            found, short = policies.translate(policy, sources)
            row[policy] = scored(found, references)
            row[f"short_{policy}"] = short
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_longest(policies: Policies, pairs: list, seed: int, inside: Callable) -> dict:
    shuffled = random.Random(seed).sample(pairs, len(pairs))
    count = 1
    while len(joined([s for s, _ in shuffled[:count]], "and", inside).split()) < LONGEST:
        count += 1
    source = joined([s for s, _ in shuffled[:count]], "and", inside)
    out = {"sentences": count, "words": len(source.split())}
    for policy in policies.chosen:
        (found,), _ = policies.translate(policy, [source])
        out[policy] = round(len(found.split()) / out["words"], 3)
    return out


def bench_flores(policies: Policies, pairs: list, repeats: int) -> dict:
    """Each line whole as today against split by default: seconds (in turns) and BLEU."""
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    runs = {"whole": ("today", False), "split": ("guard", True)}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    found = {}
    for _ in range(repeats):
        for name, (policy, split) in runs.items():
            started = time.perf_counter()
            found[name], _ = policies.translate(policy, sources, split)
            seconds[name].append(time.perf_counter() - started)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    words = {name: sum(len(t.split()) for t in found[name]) for name in runs}
    return {
        "lines": len(sources),
        "seconds": seconds,
        "time_ratio": round(median["split"] / median["whole"], 3),
        "time_per_word_ratio": round(
            median["split"] / words["split"] / (median["whole"] / words["whole"]), 3
        ),
        **{f"length_{name}": round(length_ratio(found[name], references), 3) for name in runs},
        **{f"bleu_{name}": round(bleu_chrf(found[name], references)["bleu"], 2) for name in runs},
    }


def bench_tatoeba(policies: Policies, pairs: list) -> dict:
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    today, fires = policies.translate("today", sources)
    default, _ = policies.translate("guard", sources)  # the guard's second tries said
    return {
        "lines": len(sources),
        "bleu_today": round(bleu_chrf(today, references)["bleu"], 2),
        "bleu_default": round(bleu_chrf(default, references)["bleu"], 2),
        "same": sum(a == b for a, b in zip(today, default)),
        "fires": fires,
    }


def policy_names(r: dict) -> dict[str, str]:
    """The column of each policy the result compares, one by one first."""
    fixed = {
        "today": "today",
        "max_length": f"pieces of {r['max_length']}",
        "max_length_guard": f"pieces of {r['max_length']} + guard",
        "carried": f"pieces of {r['carried']}",
        "guard": f"pieces of {r['carried']} + guard",
    }
    pieces = r.get("piece_tokens", {})
    names = {p: fixed.get(p) or f"pieces of {pieces[p]} ({p}) + guard" for p in r["policies"]}
    return {"one_by_one": "one by one", **names}


def fires_columns(r: dict) -> dict[str, tuple[str, str]]:
    """The firing the table shows: its header, and the policies without and with the guard."""
    pairs = {
        f"fires (still short) at {r['max_length']}": ("max_length", "max_length_guard"),
        f"fires (still short) at {r['carried']}": ("carried", "guard"),
    }
    return {header: pair for header, pair in pairs.items() if set(pair) <= set(r["policies"])}


def render(r: dict) -> list[str]:
    """The result as the lines of docs/benchmarks.md."""
    r = {"policies": POLICIES, "split": "test", **r}
    names = policy_names(r)
    fires = fires_columns(r)
    lines = [
        "## Long sentences: pieces the model carries, and the coverage guard",
        "",
        f'Tatoeba {r["split"]} sentences joined 1 to 16 a line by commas and a last "and", beam '
        f"{r['beam']}, model {r['model']} (length ratio {r['length_ratio']}, data.max_length "
        f"{r['max_length']}, carried length {r['carried']} tokens; scripts/bench_long.py). BLEU "
        'and output/reference words; "fires": sentences on which the guard fires (on the '
        "pieces without it; in brackets, with it: still short after its second try).",
        "",
        "| per line | lines | " + " | ".join([*names.values(), *fires]) + " |",
        "|---:|---:|" + "---:|" * (len(names) + len(fires)),
    ]
    for row in r.get("joined", []):
        cells = [f"{row[k]['bleu']:.2f} ({row[k]['length']:.2f})" for k in names]
        cells += [f"{row['short_' + a]} ({row['short_' + b]})" for a, b in fires.values()]
        lines.append(f"| {row['per_line']} | {row['lines']} | {' | '.join(cells)} |")
    lines.append("")
    if "longest" in r:
        x = r["longest"]
        words = ", ".join(f"{names[k]} {x[k]:.2f}" for k in r["policies"])
        lines += [f"One line of {x['sentences']} sentences, {x['words']} words: words out per "
                  f"word in: {words}.", ""]  # fmt: skip
    if "tatoeba" in r:
        t = r["tatoeba"]
        lines += [
            f"Tatoeba {r['split']} ({t['lines']} lines): BLEU today {t['bleu_today']:.2f}, by "
            f"default {t['bleu_default']:.2f}; {t['same']} translations the same; the guard "
            f"fires on {t['fires']}.",
            "",
        ]
    if "flores" in r:
        f = r["flores"]
        lines += [
            f"FLORES devtest ({f['lines']} lines), each line whole as today against split by "
            f"default (sentences, pieces, guard), medians of {len(f['seconds']['whole'])} runs "
            f"in turns: time {f['time_ratio']:.2f}x ({f['time_per_word_ratio']:.2f}x per word "
            f"out), BLEU {f['bleu_whole']:.2f} -> {f['bleu_split']:.2f}, output/reference "
            f"words {f['length_whole']:.2f} -> {f['length_split']:.2f}.",
            "",
        ]
    return lines


def main() -> None:
    from mt.decoding.engine import open_translator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--pairs", type=int, default=320, help="pairs joined")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="joined,longest,flores,tatoeba")
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--capitals", choices=("inside", "kept"), default="inside")
    args = parser.parse_args()
    translator = open_translator(args.model, device="cpu")
    policies = Policies(translator, args.beam, args.policies.split(","))
    test = read_pairs_jsonl(args.data / f"tatoeba_en_es.{args.split}.jsonl.gz", "en", "es")
    result = {"model": args.model, "beam": args.beam, "seed": args.seed, "split": args.split}
    result["policies"] = policies.chosen
    result["piece_tokens"] = policies.piece_tokens()
    result["length_ratio"] = round(translator.trained.ratio, 4)
    result["carried"] = translator.trained.carried
    result["max_length"] = translator.config.data.max_length
    result["capitals"] = args.capitals
    result["connectives"] = translator.trained.connectives
    inside: Sequence[Callable] = (kept, kept)
    if args.capitals == "inside":
        train = read_pairs_jsonl(args.data / "tatoeba_en_es.train.jsonl.gz", "en", "es")
        inside = tuple(Inside(side) for side in zip(*train))
    steps = args.only.split(",")
    if "joined" in steps:
        chosen = random.Random(args.seed).sample(test, args.pairs)
        result["joined"] = bench_joined(policies, chosen, inside)
    if "longest" in steps:
        result["longest"] = bench_longest(policies, test, args.seed, inside[0])
        print(json.dumps(result["longest"]), flush=True)
    if "tatoeba" in steps:
        result["tatoeba"] = bench_tatoeba(policies, test)
        print(json.dumps(result["tatoeba"]), flush=True)
    if "flores" in steps:
        flores = read_pairs_jsonl(args.data / "flores200_devtest_en_es.jsonl.gz", "en", "es")
        result["flores"] = bench_flores(policies, flores, args.repeats)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
