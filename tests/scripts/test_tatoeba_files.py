"""scripts/tatoeba_files.py: the Tatoeba recipe's three files from the Anki spa-eng download,
and the recipe's one-line error that points to it when they are missing."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile

import pytest

from helpers.corpus import ROOT
from mt.config_file import load_config
from mt.errors import ConfigError


def test_the_download_becomes_three_parts_that_share_no_english_sentence(tmp_path):
    english = [f"Sentence number {n}." for n in range(400)]
    lines = [f"{en}\t{es}\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"
             for en in english for es in (f"Frase {en}", f"Otra {en}")]  # fmt: skip
    lines.append(lines[0])  # a repeated pair is kept once
    lines.append(f"{english[0].upper()}\tMayúsculas.")  # the same English key, another case
    with zipfile.ZipFile(tmp_path / "spa-eng.zip", "w") as archive:
        archive.writestr("spa.txt", "\n".join(lines) + "\n")
        archive.writestr("_about.txt", "not pairs")
    script = ROOT / "scripts" / "tatoeba_files.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "spa-eng.zip"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    parts = {}
    for name in ("train", "valid", "test"):
        with gzip.open(tmp_path / "out" / f"tatoeba_en_es.{name}.jsonl.gz", "rt") as f:
            parts[name] = [json.loads(line) for line in f]
    assert sum(map(len, parts.values())) == 2 * len(english) + 1
    assert parts["valid"] and parts["test"] and len(parts["train"]) > 0.9 * 801
    keys = {name: {row["en"].lower() for row in rows} for name, rows in parts.items()}
    assert not keys["train"] & keys["valid"] and not keys["train"] & keys["test"]
    assert not keys["valid"] & keys["test"]
    assert all(set(row) == {"en", "es"} and row["es"] for rows in parts.values() for row in rows)


def test_the_recipe_without_its_data_says_where_it_comes_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ../shared/data here
    with pytest.raises(ConfigError) as info:
        load_config("tatoeba_cpu.yaml")
    message = str(info.value)
    assert "\n" not in message and "no such file: ../shared/data/tatoeba_en_es." in message
    assert "spa-eng.zip" in message and "scripts/tatoeba_files.py" in message
