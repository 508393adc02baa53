"""Back-translation on Tatoeba at the recipe's budget: half of the Tatoeba train pairs (a seeded
shuffle) as the parallel corpus, the other half's Spanish side as monolingual text. The reverse
model (es→en) is trained on the parallel half; it translates the monolingual Spanish once with
beam search and once by sampling; then three forward runs from scratch: the half-data baseline,
+ beam back-translation, + sampled back-translation tagged `<bt>` (Caswell et al., 2019). Each
synthetic corpus is weighted 1 (half of each epoch's pairs). BLEU and chrF with beam 5 on the
Tatoeba test and FLORES-200 devtest. Prints a Markdown table with the machine line, then one
JSON record.

The reverse model and the tagged run are docs/train.md's three back-translation commands, run as
written there (paths aside). Four 20-minute trainings, two translations of 56k sentences and
six decodings of the test sets: several hours on a 2-core CPU. A smoke run of its plumbing:

    python scripts/bench_backtranslation.py --data ../shared/data [--out runs/bench/bt]
    python scripts/bench_backtranslation.py --config tiny.yaml --minutes 0.2 --limit 200 \
        --out /tmp/bt
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
from pathlib import Path

from benchkit import FLORES, bleu, budget, cut, mt, options, record, report, tatoeba, train

from mt.data.corpus import read_pairs_jsonl

TAG = "<bt>"


def halves(train_file: Path, work: Path, seed: int) -> tuple[Path, Path]:
    """The train pairs shuffled with `seed`: the first half as parallel.jsonl, the second
    half's Spanish as mono.es (a sentence a line)."""
    pairs = read_pairs_jsonl(train_file, "en", "es")
    random.Random(seed).shuffle(pairs)
    middle = len(pairs) // 2
    parallel, mono = work / "parallel.jsonl", work / "mono.es"
    rows = (json.dumps({"en": en, "es": es}, ensure_ascii=False) for en, es in pairs[:middle])
    parallel.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    # normalised: no line break inside a sentence
    mono.write_text("".join(es + "\n" for _, es in pairs[middle:]), encoding="utf-8")
    return parallel, mono


def back_translate(reverse: Path, mono: Path, out: Path, *options: str) -> str:
    """`mt translate --checkpoint REVERSE --file MONO OPTIONS > OUT`, a line for a line; the
    command."""
    args = ["translate", "--checkpoint", str(reverse), "--file", str(mono), *options]
    out.write_text(mt(*args), encoding="utf-8")
    lines = len(mono.read_text(encoding="utf-8").splitlines())
    if len(out.read_text(encoding="utf-8").splitlines()) != lines:
        raise SystemExit(f"{out}: not one line for each of the {lines} lines of {mono}")
    return "mt " + shlex.join(args) + f" > {out.name}"


def run(args: argparse.Namespace) -> dict:
    work = args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    files = tatoeba(data, work, args.limit)
    flores = cut(data / FLORES, work / "data" / "flores.jsonl", args.limit)
    parallel, mono = halves(files["train"], work, args.seed)
    held_out = {"valid": files["valid"], "test": files["test"]}
    reverse = work / "es-en"
    langs = ("data.src_lang=es", "data.tgt_lang=en")
    commands = [
        train(
            reverse,
            args.config,
            args.minutes,
            {"train": parallel, **held_out},
            *langs,
            *args.overrides,
        )
    ]
    synthetic = {"beam": work / "mono.beam.en", "sampled": work / "mono.sampled.en"}
    commands.append(back_translate(reverse, mono, synthetic["beam"], "--beam", "5"))
    commands.append(back_translate(
        reverse, mono, synthetic["sampled"], "--seed", "1",
        "--set", "decode.sampling=true", "--set", "decode.top_k=10",
    ))  # fmt: skip
    beam_bt = {"en": str(synthetic["beam"]), "es": str(mono), "weight": 1}
    sampled_bt = {"en": str(synthetic["sampled"]), "es": str(mono), "weight": 1, "tag": TAG}
    forward = {
        "half-data baseline": parallel,
        "+ beam back-translation": f"[{parallel}, {json.dumps(beam_bt)}]",
        f"+ sampled back-translation, tagged {TAG}": f"[{parallel}, {json.dumps(sampled_bt)}]",
    }
    rows = {}
    for i, (name, corpus) in enumerate(forward.items()):
        folder = work / f"forward-{i}"
        commands.append(
            train(folder, args.config, args.minutes, {"train": corpus, **held_out}, *args.overrides)
        )
        rows[name] = {"tatoeba": bleu(folder, files["test"]), "flores": bleu(folder, flores)}
    return record(
        args,
        parallel_pairs=len(parallel.read_text(encoding="utf-8").splitlines()),
        mono_sentences=len(mono.read_text(encoding="utf-8").splitlines()),
        commands=commands,
        rows=rows,
    )


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    lines = [
        "## Back-translation: half of Tatoeba parallel, the other half's Spanish (issue 36)",
        "",
        f"`{r['config']}`, each training {budget(r)}: the reverse model (es→en) on "
        f"{r['parallel_pairs']:,} parallel pairs, its translations of {r['mono_sentences']:,} "
        "monolingual Spanish sentences (beam 5; sampled, top-k 10, seed 1), and three forward "
        "runs from scratch; BLEU and chrF with beam 5"
        + (f" (every file cut to its first {r['limit']} pairs)" if r["limit"] else "")
        + f". Machine: {r['machine']}. Command: `{r['command']}`.",
        "",
        "| forward model | Tatoeba BLEU | chrF | FLORES BLEU | chrF |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, x in r["rows"].items():
        t, f = x["tatoeba"], x["flores"]
        lines.append(
            f"| {name} | {t['bleu']:.2f} | {t['chrf']:.2f} | {f['bleu']:.2f} | {f['chrf']:.2f} |"
        )
    return [*lines, "", "The commands, in order:", "", "```sh", *r["commands"], "```", ""]


def main() -> None:
    parser = options(__doc__, "runs/bench/backtranslation")
    parser.add_argument("--seed", type=int, default=1234, help="of the split into halves")
    report(run(parser.parse_args()), render)


if __name__ == "__main__":
    main()
