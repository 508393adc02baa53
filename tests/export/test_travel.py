"""What a model needs to decode travels with it (mt.decoding.trained): its weights copied
elsewhere, its CTranslate2 export and its transformers export translate a long line and spans
exactly as in the run folder, with the run folder gone."""

from __future__ import annotations

import json
import shutil

from helpers.corpus import PAIRS
from helpers.runs import metric_lines, tiny_trained
from mt.decoding.engine import open_translator
from mt.decoding.trained import METADATA, Trained
from mt.export.to_ctranslate2 import to_ctranslate2
from mt.export.to_marian import to_marian

SPANS = "Hello {{name}}, see https://example.org/a?b=1 at 10:30 on 2024-05-01, or mail bob@x.org."


def long_line(words: int) -> str:
    """The corpus's English sentences joined by clauses into a line of `words` words."""
    sentences = [s.rstrip(".!?") for s, _ in PAIRS if s.endswith(".")]
    out, k = [], 0
    while len(" ".join(out).split()) < words:
        out.append(sentences[k % len(sentences)])
        k += 1
    return ", and ".join(out) + "."


def test_a_copied_checkpoint_and_its_exports_translate_as_in_the_run_folder(tmp_path):
    last = tiny_trained(tmp_path, "tokenizer.placeholders=4", "train.placeholders=0.5")
    texts = [long_line(409), SPANS, *[s for s, _ in PAIRS[:8]]]
    run = tmp_path / "run"
    measured = [r["carried"] for r in metric_lines(run) if r["kind"] == "valid"][-1]
    at_home = open_translator(last, device="cpu")
    assert at_home.trained.carried == measured  # measured on the model, kept with it
    found = at_home.translate(texts)
    ct2 = to_ctranslate2(last, tmp_path / "ct2")
    hf = to_marian(last, tmp_path / "hf")
    by_ct2 = open_translator(ct2, device="cpu").translate(texts)
    manifest = json.loads((ct2 / "mt.json").read_text())
    assert Trained.of(manifest[METADATA], at_home.config) == at_home.trained
    assert json.loads((hf / "config.json").read_text())["mt"]["trained"] == manifest[METADATA]
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(last / "model.safetensors", moved / "model.safetensors")
    for folder in (ct2, hf):
        shutil.copytree(folder, moved / folder.name)
    shutil.rmtree(run)  # the run folder and its prepared data are gone
    away = open_translator(moved / "model.safetensors", device="cpu")
    assert away.trained == at_home.trained
    assert away.translate(texts) == found
    assert open_translator(moved / "ct2", device="cpu").translate(texts) == by_ct2
    marian = open_translator(moved / "hf", device="cpu")
    assert marian.trained == at_home.trained
    assert marian.config.tokenizer.placeholders == 4
