"""Marian (OPUS-MT) models in: ids, text, logits, greedy and beam search equal to
transformers' own on random-weight MarianMTModels (helpers.marian.build_marian), and every bad
input refused in one line."""

from __future__ import annotations

import json
import shutil
import sys
import warnings

import pytest
import torch

from helpers.corpus import FLORES, TATOEBA_TEST, read_pairs
from mt import checkpoint as ckpt
from mt.config import DecodeConfig
from mt.data import tokenizer as tok
from mt.decoding.beam import beam_search
from mt.decoding.engine import open_translator
from mt.decoding.search import greedy
from mt.errors import ConfigError

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")


def reference(folder):
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    model = transformers.MarianMTModel.from_pretrained(folder, dtype=torch.float32).eval()
    return tokenizer, model


def assert_same_logits_and_greedy(tokenizer, model, loaded, sources, targets):
    """Our float32 logits on (sources, targets) within 1e-4 of transformers', and greedy
    outputs of 9 tokens the same as generate()'s."""
    ours = loaded.model
    batch = tokenizer(sources, text_target=targets, return_tensors="pt", padding=True)
    labels = batch["labels"]
    tgt_in = torch.cat([torch.full((len(sources), 1), ours.cfg.bos_id), labels[:, :-1]], 1)
    with torch.no_grad():
        theirs = model(**batch).logits
        mine = ours(batch["input_ids"], tgt_in)
        inputs = tokenizer(sources, return_tensors="pt", padding=True)
        out = model.generate(**inputs, num_beams=1, max_new_tokens=10)
    assert (theirs - mine)[labels != ours.cfg.pad_id].abs().max() < 1e-4
    found = tok.detokenize(loaded.tgt_tokenizer, greedy(ours, batch["input_ids"], 9))
    assert found == tokenizer.batch_decode(out, skip_special_tokens=True)


def test_ids_and_text_are_marian_tokenizers(marian_small):
    pairs = read_pairs(TATOEBA_TEST, 1000) + read_pairs(FLORES, 1000)
    en, es = [p["en"] for p in pairs], [p["es"] for p in pairs]
    theirs, _ = reference(marian_small)
    loaded = ckpt.load(marian_small)
    eos = loaded.model.cfg.eos_id
    assert [[*x, eos] for x in tok.encode(loaded.src_tokenizer, en)] == theirs(en)["input_ids"]
    targets = theirs(text_target=es)["input_ids"]
    assert [[*x, eos] for x in tok.encode(loaded.tgt_tokenizer, es)] == targets
    assert any(theirs.unk_token_id in x for x in targets)  # unknown pieces were met
    assert tok.detokenize(loaded.tgt_tokenizer, targets) == theirs.batch_decode(
        targets, skip_special_tokens=True
    )


def test_logits_greedy_and_beam_are_transformers(marian_small):
    en = [p["en"] for p in read_pairs(TATOEBA_TEST, 200)]
    tokenizer, model = reference(marian_small)
    loaded = ckpt.load(marian_small)
    ours = loaded.model
    assert (ours.cfg.pad_id, ours.cfg.bos_id, ours.cfg.eos_id) == (len(tokenizer) - 1,) * 2 + (0,)
    batch = tokenizer(en, text_target=en, return_tensors="pt", padding=True)
    src, labels = batch["input_ids"], batch["labels"]
    tgt_in = torch.cat([torch.full((len(en), 1), ours.cfg.bos_id), labels[:, :-1]], 1)
    with torch.no_grad():
        theirs = model(input_ids=src, attention_mask=batch["attention_mask"], labels=labels)
        mine = ours(src, tgt_in)
    real = labels != tokenizer.pad_token_id
    assert (theirs.logits - mine)[real].abs().max() < 1e-4

    steps = 20  # generate's max_new_tokens: 19 tokens, then EOS forced
    with torch.no_grad():
        out = model.generate(
            **tokenizer(en, return_tensors="pt", padding=True), num_beams=1, max_new_tokens=steps
        )
    expected = tokenizer.batch_decode(out, skip_special_tokens=True)
    found = tok.detokenize(loaded.tgt_tokenizer, greedy(ours, src, steps - 1))
    assert found == expected
    assert len(set(found)) > 10  # the outputs depend on the sources

    cfg = DecodeConfig(beam=4, alpha=1.0, max_len_a=0, max_len_b=steps - 1, rules="transformers")
    with torch.no_grad():
        out = model.generate(
            **tokenizer(en, return_tensors="pt", padding=True),
            num_beams=4,
            max_new_tokens=steps,
            length_penalty=1.0,
            early_stopping=False,
        )
    expected = tokenizer.batch_decode(out, skip_special_tokens=True)
    hyps = beam_search(ours, src, cfg)
    assert tok.detokenize(loaded.tgt_tokenizer, [h[0].tokens for h in hyps]) == expected


def test_translate_cli_opens_a_marian_folder(marian_small, cli_main):
    code, out, err = cli_main(
        "translate", "--checkpoint", str(marian_small), "--beam", "1", "Hello.", "I like tea."
    )
    assert code == 0, err
    assert len(out.splitlines()) == 2


def copy_of(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / "copy")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: _edit_config(f, model_type="t5"), "model_type 't5' is not 'marian'"),
        (lambda f: (f / "target.spm").unlink(), "target.spm: missing"),
        (lambda f: _drop_piece(f), "vocab.json: does not cover the piece"),
        (
            lambda f: _edit_config(
                f, d_model=48, encoder_attention_heads=4, decoder_attention_heads=4
            ),
            "disagree with config.json",
        ),
    ],
)
def test_bad_marian_folders_are_refused_in_one_line(marian_small, tmp_path, damage, message):
    folder = copy_of(marian_small, tmp_path)
    damage(folder)
    with pytest.raises(ConfigError, match=message) as e:
        ckpt.load(folder)
    assert "\n" not in str(e.value)


def test_an_uncached_hub_id_offline_is_one_line(monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="Helsinki-NLP/opus-mt-xx-yy: neither a run folder"):
        ckpt.load("Helsinki-NLP/opus-mt-xx-yy")


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def _drop_piece(folder):
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab.pop(next(p for p in vocab if p.startswith("▁") and len(p) > 3))
    (folder / "vocab.json").write_text(json.dumps(vocab))


def test_the_opus_mt_en_es_shape_is_exact(tmp_path):
    """d 512, 6+6 layers, 8 heads, ffn 2048, swish, 65,001 ids, saved in float16 (as OPUS-MT
    models on the Hub): float32 logits and greedy outputs equal transformers'."""
    from helpers.corpus import TATOEBA_TRAIN
    from helpers.marian import build_marian

    if not TATOEBA_TRAIN.is_file():
        pytest.skip("shared data not found")
    folder = build_marian(
        tmp_path / "big", d=512, layers=6, heads=8, ffn=2048, vocab_size=65_001, dtype="float16"
    )
    tokenizer, model = reference(folder)
    loaded = ckpt.load(folder)
    ours = loaded.model
    assert ours.out.out_features == 65_001 and ours.cfg.pad_id == ours.cfg.bos_id == 65_000
    assert ours.src_embed.weight.dtype == torch.float32
    en = [p["en"] for p in read_pairs(TATOEBA_TEST, 20)]
    assert_same_logits_and_greedy(tokenizer, model, loaded, en, en)


def finetune_config(marian, corpus, run, *overrides):
    """A run that fine-tunes `marian`: no model or tokenizer key of its own."""
    from helpers.corpus import HELD_OUT
    from mt.config_file import load_config

    settings = [
        f"train.init={marian}",
        f"data.files.train={corpus}",
        f"run.dir={run}",
        "data.source=files",
        f"data.valid_size={HELD_OUT}",
        f"data.test_size={HELD_OUT}",
        "run.device=cpu",
        "train.max_tokens=300",
        "train.schedule=inverse_sqrt",
        "train.warmup_steps=2",
        "train.eval_every=3",
        "train.save_every=100",
        "train.eval_sentences=4",
        "train.eval_examples=0",
        "train.precision=fp32",
        "decode.precision=fp32",
        "decode.beam=2",
        *overrides,
    ]
    file = run.parent / f"{run.name}.yaml"
    file.write_text("data:\n  source: files\n", encoding="utf-8")
    return load_config(file, settings)


def test_a_marian_model_fine_tunes_resumes_exactly_and_goes_back_out(
    marian_small, corpus_file, tmp_path, cli_main
):
    from mt.training.trainer import train

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(finetune_config(marian_small, corpus_file, straight, "train.max_steps=6"))
    train(finetune_config(marian_small, corpus_file, resumed, "train.max_steps=3"))
    train(finetune_config(marian_small, corpus_file, resumed, "train.max_steps=6"))
    a, b = (ckpt.load_weights(ckpt.resolve(run))[0] for run in (straight, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    original = ckpt.load(marian_small).model.state_dict()
    assert torch.equal(a["logits_bias"], original["logits_bias"])  # a frozen buffer
    assert not torch.equal(a["src_embed.weight"], original["src_embed.weight"])  # it learned

    out = tmp_path / "hf"
    code, _, err = cli_main("export", str(straight), "--format", "hf", "--out", str(out))
    assert code == 0, err
    assert (out / "source.spm").read_bytes() == (marian_small / "source.spm").read_bytes()
    tokenizer, model = reference(out)
    loaded = ckpt.load(straight)
    en = ["I like tea.", "Where is the station?"]
    batch = tokenizer(en, text_target=en, return_tensors="pt", padding=True)
    tgt_in = torch.cat([torch.full((2, 1), loaded.model.cfg.bos_id), batch["labels"][:, :-1]], 1)
    with torch.no_grad():
        diff = model(**batch).logits - loaded.model(batch["input_ids"], tgt_in)
    assert diff[batch["labels"] != loaded.model.cfg.pad_id].abs().max() < 1e-4

    pytest.importorskip("ctranslate2")
    ct2 = tmp_path / "ct2"  # swish, halves, the logits bias and PAD starting the decoder
    code, _, err = cli_main("export", str(straight), "--out", str(ct2))
    assert code == 0, err
    texts = [p["en"] for p in read_pairs(TATOEBA_TEST, 6)]
    fp32 = ["decode.precision=fp32", "decode.beam=1"]
    ours = open_translator(straight, device="cpu", decode=fp32).translate(texts)
    assert open_translator(ct2, device="cpu", decode=fp32).translate(texts) == ours
    assert all(ours)


def test_fine_tuning_with_another_model_key_is_refused(marian_small, corpus_file, tmp_path):
    from mt.training.trainer import train

    run = tmp_path / "run"
    config = finetune_config(
        marian_small, corpus_file, run, "model.d_model=64", "train.max_steps=2"
    )
    with pytest.raises(ConfigError, match=r"model.d_model is 32 in the model, 64 here"):
        train(config)
    assert not run.exists()


def test_without_the_hf_extra_one_line_says_what_to_install(marian_small, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    with pytest.raises(ConfigError, match=r"pip install 'mt\[hf\]'") as e:
        ckpt.load(marian_small)
    assert "\n" not in str(e.value)


def test_a_target_language_leads_every_source_as_marian_tokenizer_puts_it(
    marian_multilingual,
):
    from mt.decoding.pieces import source_pieces

    tokenizer, model = reference(marian_multilingual)
    en = [p["en"] for p in read_pairs(TATOEBA_TEST, 8)]
    found = {}
    for language in ("spa", "fra"):
        token = f">>{language}<<"
        limits = ["decode.max_len_a=0", "decode.max_len_b=9", "decode.beam=1"]
        decode = ["decode.precision=fp32", *limits, f"decode.target_language={language}"]
        translator = open_translator(marian_multilingual, device="cpu", decode=decode)
        marian = tokenizer([f"{token} {text}" for text in en])["input_ids"]
        ours = source_pieces(translator.src_tokenizer, en, 500, language).ids
        assert [[*ids, translator.model.cfg.eos_id] for ids in ours] == marian
        inputs = tokenizer([f"{token} {text}" for text in en], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**inputs, num_beams=1, max_new_tokens=10)
        found[language] = translator.translate(en)
        assert found[language] == tokenizer.batch_decode(out, skip_special_tokens=True)
    assert found["spa"] != found["fra"]  # the token reaches the encoder


def test_a_target_language_outside_the_vocabulary_is_one_line(marian_multilingual, cli_main):
    code, out, err = cli_main(
        "translate",
        "--checkpoint",
        str(marian_multilingual),
        "--set",
        "decode.target_language=ita",
        "Hello.",
    )
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "decode.target_language: ita: the model's source vocabulary has no >>ita<<" in err


def test_separate_vocabularies_are_exact_in_and_out(marian_separate, tmp_path, cli_main):
    tokenizer, model = reference(marian_separate)
    loaded = ckpt.load(marian_separate)
    ours = loaded.model
    assert not loaded.config.tokenizer.joint
    assert ours.src_embed.num_embeddings != ours.out.out_features  # two vocabularies
    pairs = read_pairs(TATOEBA_TEST, 100)
    en, es = [p["en"] for p in pairs], [p["es"] for p in pairs]
    eos = ours.cfg.eos_id
    assert [[*x, eos] for x in tok.encode(loaded.src_tokenizer, en)] == tokenizer(en)["input_ids"]
    targets = tokenizer(text_target=es)["input_ids"]
    assert [[*x, eos] for x in tok.encode(loaded.tgt_tokenizer, es)] == targets
    decoded = tokenizer.batch_decode(targets, skip_special_tokens=True)
    assert tok.detokenize(loaded.tgt_tokenizer, targets) == decoded
    assert_same_logits_and_greedy(tokenizer, model, loaded, en, es)

    back = tmp_path / "hf"
    code, _, err = cli_main("export", str(marian_separate), "--format", "hf", "--out", str(back))
    assert code == 0, err
    for name in ("vocab.json", "target_vocab.json"):
        assert json.loads((back / name).read_text()) == json.loads(
            (marian_separate / name).read_text()
        )
    before = transformers.MarianMTModel.from_pretrained(marian_separate).state_dict()
    after = transformers.MarianMTModel.from_pretrained(back).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if "embed_positions" not in k)
    assert (
        transformers.MarianTokenizer.from_pretrained(back)(text_target=es)["input_ids"] == targets
    )

    pytest.importorskip("ctranslate2")
    ct2 = tmp_path / "ct2"
    code, _, err = cli_main("export", str(marian_separate), "--out", str(ct2))
    assert code == 0, err
    fp32 = ["decode.precision=fp32", "decode.beam=1"]
    mt_greedy = open_translator(marian_separate, device="cpu", decode=fp32).translate(en[:8])
    assert open_translator(ct2, device="cpu", decode=fp32).translate(en[:8]) == mt_greedy


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: (f / "target_vocab.json").unlink(), "target_vocab.json: missing"),
        (
            lambda f: _edit_config(f, share_encoder_decoder_embeddings=True),
            "separate_vocabs: two vocabularies cannot share one embedding matrix",
        ),
        (
            lambda f: _edit_config(f, decoder_vocab_size=10),
            "decoder_vocab_size 10 is not that of target_vocab.json",
        ),
    ],
)
def test_bad_separate_vocabularies_are_refused_in_one_line(
    marian_separate, tmp_path, damage, message
):
    folder = copy_of(marian_separate, tmp_path)
    damage(folder)
    with pytest.raises(ConfigError, match=message) as e:
        ckpt.load(folder)
    assert "\n" not in str(e.value)
