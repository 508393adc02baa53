"""`mt export --format hf`: a folder transformers loads (AutoModelForSeq2SeqLM, AutoTokenizer)
whose logits, greedy and beam search equal mt's; a Marian model goes back out as it came in;
what MarianMT cannot hold and an existing folder are refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import tiny_config
from mt import checkpoint as ckpt
from mt.config import Config, DecodeConfig
from mt.decoding.engine import open_translator
from mt.export.to_marian import TYPICAL_LENGTH, search_options, unsupported, validation_lengths
from mt.training.trainer import train

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("export-hf")
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    train(tiny_config(corpus, tmp / "run", "train.lr=0.01", "train.max_steps=60"))
    return tmp / "run"


def test_an_exported_run_decodes_in_transformers_as_in_mt(tiny_run, tmp_path, cli_main):
    out = tmp_path / "hf"
    code, _, err = cli_main("export", str(tiny_run), "--format", "hf", "--out", str(out))
    assert code == 0, err
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out, dtype=torch.float32).eval()
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlanguage:\n- en\n- es\n") and "pipeline_tag: translation" in card
    generation = json.loads((out / "generation_config.json").read_text())
    config = ckpt.read_config(tiny_run)
    lengths = validation_lengths(tiny_run)  # the store's, EOS counted
    assert sorted(lengths) == ["src", "tgt"] and lengths["tgt"].min() >= 2
    assert generation == {**generation, **search_options(config, lengths)}
    assert generation["early_stopping"] == "never" and generation["num_beams"] == config.decode.beam
    # transformers 4 has no TokenizersBackend, the class name 5 writes
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "PreTrainedTokenizerFast"
    )

    sources = [src for src, _ in PAIRS]
    loaded = ckpt.load(tiny_run)
    ours = loaded.model
    batch = tokenizer(sources, text_target=sources, return_tensors="pt", padding=True)
    assert tokenizer(["Hello."])["input_ids"][0][-1] == ours.cfg.eos_id  # </s> appended
    labels = batch["labels"]
    tgt_in = torch.cat([torch.full((len(sources), 1), ours.cfg.bos_id), labels[:, :-1]], 1)
    with torch.no_grad():
        theirs = model(**batch).logits
        mine = ours(batch["input_ids"], tgt_in)
    real = labels != ours.cfg.pad_id
    assert (theirs - mine)[real].abs().max() < 1e-4  # the permuted sinusoid layout is exact

    translator = open_translator(tiny_run, device="cpu", decode=["decode.precision=fp32"])
    inputs = tokenizer(sources, return_tensors="pt", padding=True)
    for beam, rules in ((1, "mt"), (4, "transformers")):
        decode = DecodeConfig(beam=beam, alpha=0.6, max_len_a=0, max_len_b=30, rules=rules)
        # each source whole, as generate() reads it: no pieces of the length the model carries
        whole = config.model.max_positions
        decode = dataclasses.replace(decode, precision="fp32", piece_tokens=whole)
        with torch.no_grad():
            ids = model.generate(
                **inputs,
                num_beams=beam,
                max_new_tokens=31,
                length_penalty=0.6,
                early_stopping=False,
            )
        # mt gives a translation without the spaces a model may put at its edges
        expected = [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        assert translator.translate(sources, decode) == expected


def test_a_marian_model_goes_back_out_as_it_came(marian_small, tmp_path, cli_main):
    out = tmp_path / "back"
    code, _, err = cli_main("export", str(marian_small), "--format", "hf", "--out", str(out))
    assert code == 0, err
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (out / name).read_bytes() == (
            marian_small / name
        ).read_bytes() or name == "vocab.json"
    assert json.loads((out / "vocab.json").read_text()) == json.loads(
        (marian_small / "vocab.json").read_text()
    )
    before = transformers.MarianMTModel.from_pretrained(marian_small).state_dict()
    after = transformers.MarianMTModel.from_pretrained(out).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if "embed_positions" not in k)


def test_an_existing_folder_is_refused_without_force(tiny_run, tmp_path, cli_main):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = cli_main("export", str(tiny_run), "--format", "hf", "--out", str(out))
    assert code == 2 and "already exists (pass --force" in err and len(err.splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_what_marian_cannot_hold_is_named():
    config = Config()
    assert unsupported(config) == []
    config.model.norm_first = True
    assert "model.norm_first" in unsupported(config)[0]
    config = Config()
    config.tokenizer.joint = False
    assert "tokenizer.joint" in unsupported(config)[0]
    config.model.norm_first = True  # every reason at once
    assert [r.split("=")[0] for r in unsupported(config)] == ["model.norm_first", "tokenizer.joint"]


def test_the_generation_config_searches_as_near_to_mt_as_transformers_can(tmp_path):
    config = Config()
    assert validation_lengths(tmp_path) == {}  # no prepared store there
    lengths = {"src": np.array([3, 30, 7]), "tgt": np.array([4, 9, 20])}
    options = search_options(config, lengths)
    # L ** p falls with L as GNMT's ((5 + L) / 6) ** alpha does, averaged over the targets
    slopes = [config.decode.alpha * n / (5 + n) for n in lengths["tgt"]]
    assert options["length_penalty"] == pytest.approx(sum(slopes) / 3, abs=1e-4)
    assert options["early_stopping"] == "never"  # ours: stop when nothing can beat the best
    assert options["max_length"] == 1.5 * 30 + 10 + 2  # our limit at the longest, EOS, start
    unknown = search_options(config, {})  # the model's longest output, a typical length
    assert unknown["max_length"] == config.model.max_positions + 1  # 255 tokens, EOS, start
    typical = 0.6 * TYPICAL_LENGTH / (5 + TYPICAL_LENGTH)
    assert unknown["length_penalty"] == pytest.approx(typical, abs=1e-4)
    config.decode.rules = "transformers"  # transformers' own rules: its alpha and stopping
    options = search_options(config, lengths)
    assert options["length_penalty"] == config.decode.alpha and "early_stopping" not in options
