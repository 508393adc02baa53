"""The Tatoeba recipe's three files (`configs/tatoeba_cpu.yaml`) from the public Tatoeba/Anki
`spa-eng` download: https://www.manythings.org/anki/spa-eng.zip (data from tatoeba.org,
CC-BY 2.0; attribution "www.manythings.org/anki and tatoeba.org").

    python scripts/tatoeba_files.py spa-eng.zip ../shared/data

writes tatoeba_en_es.{train,valid,test}.jsonl.gz there, gzip JSON Lines {"en": ..., "es": ...},
split as ../shared/data's were (its SOURCES.md): the pairs grouped by their English side
(lowercased, white space collapsed), each group whole in one part chosen by a hash of that key
(about 1% valid, 1.5% test), so no English sentence of valid or test is in train; each part in
the download's order. The parts are of that kind and size, not byte for byte the shared
ones (whose hash is not recorded), and the download grows over the years: BLEU on them is
comparable in kind, not to the decimal.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import zipfile
from pathlib import Path

PARTS = (("valid", 0.010), ("test", 0.015))  # the rest is train


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """The (English, Spanish) pairs of spa.txt, or of the zip that holds it, in order; each
    line is ENGLISH<TAB>SPANISH, then an attribution column in newer downloads."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("spa.txt"))
            text = io.TextIOWrapper(archive.open(name), encoding="utf-8").read()
    else:
        text = path.read_text(encoding="utf-8")
    pairs, seen = [], set()
    for line in text.splitlines():
        columns = line.split("\t")
        if len(columns) >= 2 and columns[0].strip() and columns[1].strip():
            pair = columns[0].strip(), columns[1].strip()
            if pair not in seen:  # the download repeats a few pairs
                seen.add(pair)
                pairs.append(pair)
    return pairs


def part_of(english: str) -> str:
    """The part an English sentence's group goes to, by a hash of its key."""
    key = " ".join(english.lower().split())
    share = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    for name, fraction in PARTS:
        if share < fraction:
            return name
        share -= fraction
    return "train"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("download", type=Path, help="spa-eng.zip, or the spa.txt inside it")
    parser.add_argument("out", type=Path, help="the folder for the three files")
    args = parser.parse_args()
    parts: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    for en, es in read_pairs(args.download):
        parts[part_of(en)].append((en, es))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pairs in parts.items():
        path = args.out / f"tatoeba_en_es.{name}.jsonl.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            for en, es in pairs:
                f.write(json.dumps({"en": en, "es": es}, ensure_ascii=False) + "\n")
        print(f"{path}: {len(pairs):,} pairs")


if __name__ == "__main__":
    main()
