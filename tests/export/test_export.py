"""`mt export` to CTranslate2, and `mt translate` / `mt evaluate` on the exported folder."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from helpers.corpus import (
    PAIRS,
    TATOEBA_TEST,
    TATOEBA_TRAIN,
    TATOEBA_VALID,
    needs_shared,
    write_jsonl,
)
from helpers.runs import tiny_config
from mt import checkpoint
from mt.config_file import load_config
from mt.data.corpus import read_pairs_jsonl
from mt.decoding.engine import open_translator
from mt.export import to_ctranslate2 as export
from mt.training.trainer import train

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model on the hand-written corpus, with two step checkpoints."""
    tmp = tmp_path_factory.mktemp("export")
    run = tmp / "run"
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    train(tiny_config(corpus, run, "train.lr=0.01", "train.max_steps=60", "train.save_every=20"))
    return run


@pytest.fixture(scope="module")
def tatoeba(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str], list[str]]:
    """The tiny model trained a few dozen updates on the real Tatoeba train file, its float32
    export, and 300 sentences of the Tatoeba test set with their references."""
    if not TATOEBA_TRAIN.is_file():
        pytest.skip("shared data not found")
    tmp = tmp_path_factory.mktemp("tatoeba-export")
    run = tmp / "run"
    train(
        load_config(
            "tiny.yaml",
            [
                f"data.files.train={TATOEBA_TRAIN}",
                f"data.files.valid={TATOEBA_VALID}",
                f"data.files.test={TATOEBA_TEST}",
                "tokenizer.vocab_size=2000",
                "model.d_model=64",
                "model.d_ff=128",
                "train.max_steps=60",
                "train.max_tokens=2048",
                "train.eval_every=60",
                "train.save_every=60",
                "train.eval_sentences=20",
                "train.eval_examples=0",
                f"run.dir={run}",
            ],
        )
    )
    pairs = read_pairs_jsonl(run / "data" / "test.jsonl", "src", "tgt")[:300]
    out = export.to_ctranslate2(run, tmp / "ct2-float32")
    return run, out, [s for s, _ in pairs], [r for _, r in pairs]


def torch_nbest(
    run: Path, texts: list[str], prefixes: list[str] | None = None, **decode
) -> list[list[tuple[str, float]]]:
    translator = open_translator(run, device="cpu")
    cfg = dataclasses.replace(translator.config.decode, **decode)
    return translator.translate_nbest(texts, cfg, prefixes=prefixes).nbest


def ct2_nbest(
    folder: Path, texts: list[str], prefixes: list[str] | None = None, **decode
) -> list[list[tuple[str, float]]]:
    translator = open_translator(folder, device="cpu")
    cfg = dataclasses.replace(translator.config.decode, **decode)
    return translator.translate_nbest(texts, cfg, prefixes=prefixes).nbest


@needs_shared
def test_float32_export_translates_as_mt_on_tatoeba(tatoeba):
    run, folder, sources, _ = tatoeba
    ours = [h[0][0] for h in torch_nbest(run, sources, beam=1, nbest=1)]
    theirs = [h[0][0] for h in ct2_nbest(folder, sources, beam=1, nbest=1)]
    differ = [(s, a, b) for s, a, b in zip(sources, ours, theirs) if a != b]
    # float sums in another order can flip a near tie between two tokens, rarely
    assert len(sources) == 300 and len(differ) <= 3, differ


@needs_shared
def test_nbest_scores_match_within_3e_3(tatoeba):
    run, folder, sources, _ = tatoeba
    ours = torch_nbest(run, sources[:8], beam=4, nbest=3, alpha=0.6)
    theirs = ct2_nbest(folder, sources[:8], beam=4, nbest=3, alpha=0.6)
    compared = 0
    for a, b in zip(ours, theirs):
        assert a[0][0] == b[0][0]
        scores = dict(b)
        for text, score in a:
            if text in scores:
                # CTranslate2's sums run about 1e-4 a token above mt's on this tiny model
                # (8e-4 on the 5 tokens of "Tom a a.", 1.4e-3 on 9), and it takes EOS out
                # of the first step before its softmax, where mt (as fairseq and generate())
                # masks it after: -log(1 - p(EOS first)) more, 1.6e-3 on "Tom a a."
                assert abs(scores[text] - score) < 3e-3, (text, score, scores[text])
                compared += 1
    assert compared >= 16


@needs_shared
def test_int8_is_within_one_bleu_of_float32(tatoeba, cli_main, tmp_path):
    run, folder, _, _ = tatoeba
    assert (
        cli_main("export", str(run), "--out", str(tmp_path / "int8"), "--quantization", "int8")[0]
        == 0
    )
    bleu = {}
    for name, path in (("float32", folder), ("int8", tmp_path / "int8")):
        code, out, err = cli_main("evaluate", str(path), "--beam", "1", "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["sentences"] >= 1000  # the run's own test split, found through mt.json
        bleu[name] = result["bleu"]
    assert abs(bleu["int8"] - bleu["float32"]) <= 1.0, bleu
    assert (tmp_path / "int8" / "model.bin").stat().st_size < (
        folder / "model.bin"
    ).stat().st_size / 2


def test_export_folder_holds_model_tokenizers_and_manifest(tiny_run, cli_main, tmp_path):
    out = tmp_path / "ct2"
    code, _, err = cli_main("export", str(tiny_run), "--out", str(out))
    assert code == 0, err
    assert {"model.bin", "config.json", "tokenizer.json", "mt.json"} <= {
        p.name for p in out.iterdir()
    }
    manifest = json.loads((out / "mt.json").read_text())
    assert manifest["quantization"] == "float32"
    assert manifest["command"].startswith("mt export ")
    assert manifest["config"] == checkpoint.read_config(tiny_run).to_dict()
    assert "bleu" in manifest


def test_translate_engines(tiny_run, cli_main, tmp_path):
    out = tmp_path / "ct2"
    export.to_ctranslate2(tiny_run, out)
    texts = ["Where is the station?", "I love you.", "The dog barks at night."]
    torch_out = cli_main("translate", "--checkpoint", str(tiny_run), "--beam", "1", *texts)
    for engine in ("auto", "ctranslate2"):
        ct2_out = cli_main(
            "translate", "--checkpoint", str(out), "--engine", engine, "--beam", "1", *texts
        )
        assert ct2_out[0] == 0 and ct2_out[1] == torch_out[1]
    assert torch_out[1].strip()
    for folder, engine in ((out, "torch"), (tiny_run, "ctranslate2")):
        code, _, err = cli_main("translate", "--checkpoint", str(folder), "--engine", engine, "x")
        assert code == 2 and len(err.splitlines()) == 1 and str(folder) in err


def test_average_output_exports(tiny_run, cli_main, tmp_path):
    averaged = tmp_path / "avg.safetensors"
    assert cli_main("average", str(tiny_run), "--last", "2", "--out", str(averaged))[0] == 0
    out = tmp_path / "ct2"
    code, _, err = cli_main("export", str(averaged), "--out", str(out))
    assert code == 0, err
    texts = [s for s, _ in PAIRS[:10]]
    found = [h[0][0] for h in ct2_nbest(out, texts, beam=1, nbest=1)]
    assert found == [h[0][0] for h in torch_nbest(averaged, texts, beam=1, nbest=1)]
    assert any(found)


def test_readme_snippet_outside_mt(tiny_run, tmp_path):
    """docs/export.md's use of an exported folder with ctranslate2 and tokenizers alone."""
    import ctranslate2
    from tokenizers import Tokenizer

    folder = export.to_ctranslate2(tiny_run, tmp_path / "ct2")
    texts = ["Where is the station?", "I love you."]
    # --- as in docs/export.md
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.encode_special_tokens = True  # a literal "</s>" in a text is text
    translator = ctranslate2.Translator(str(folder))
    sources = [e.tokens for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    # min_decoding_length=0: an empty translation is allowed, as in mt (CT2's default is 1)
    results = translator.translate_batch(sources, beam_size=1, min_decoding_length=0)
    ids = [[tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    found = tokenizer.decode_batch(ids, skip_special_tokens=True)
    # ---
    ours = [h[0][0] for h in torch_nbest(tiny_run, texts, beam=1, nbest=1, max_len_b=200)]
    assert found == ours


@pytest.mark.parametrize(
    "args, message",
    [
        (["{empty}", "--out", "{out}"], "no checkpoint found"),
        (["{run}", "--out", "{out}", "--format", "onnx"], "--format onnx: unknown"),
        (["{run}", "--out", "{out}", "--quantization", "int4"], "--quantization int4: unknown"),
        (["{run}", "--out", "{existing}"], "already exists (pass --force"),
        (
            ["{run}", "--out", "{out}", "--format", "hf", "--quantization", "int8"],
            "--quantization: not an option of --format hf",
        ),
    ],
)
def test_bad_exports_exit_2_and_leave_nothing(cli_main, tiny_run, tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    paths = {"empty": tmp_path / "empty", "run": tiny_run, "out": tmp_path / "out"}
    paths["existing"] = existing
    code, out, err = cli_main("export", *(a.format(**paths) for a in args))
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("mt: error: ") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "existing"]
    assert [p.name for p in existing.iterdir()] == ["keep.txt"]


def test_a_config_ct2_cannot_express_is_refused(cli_main, tiny_run, tmp_path, monkeypatch):
    monkeypatch.setattr(export, "ACTIVATIONS", ("gelu",))  # as if relu were not CT2's
    code, _, err = cli_main("export", str(tiny_run), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.splitlines()) == 1 and "model.activation=relu" in err, err
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_an_existing_export(cli_main, tiny_run, tmp_path):
    out = tmp_path / "ct2"
    export.to_ctranslate2(tiny_run, out, quantization="int8")
    code, _, err = cli_main("export", str(tiny_run), "--out", str(out), "--force")
    assert code == 0, err
    assert json.loads((out / "mt.json").read_text())["quantization"] == "float32"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]


def test_missing_ctranslate2_is_one_line(cli_main, tiny_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import raises ImportError
    code, _, err = cli_main("export", str(tiny_run), "--out", str(tmp_path / "out"))
    assert (
        code == 1 and err == "mt: error: ctranslate2 is not installed: pip install 'mt[export]'\n"
    )
    assert not (tmp_path / "out").exists()


def test_core_does_not_import_ctranslate2():
    import subprocess

    modules = "mt.cli, mt.decoding.translate, mt.decoding.ct2, mt.export"
    code = f"import {modules}, sys; print('ctranslate2' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.stdout.strip() == "False", found.stderr


@pytest.fixture(scope="module")
def tiny_export(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export.to_ctranslate2(tiny_run, tmp_path_factory.mktemp("ct2") / "ct2")


TEXTS = ["Where is the station?", "I love you.", "The dog barks at night."]


@pytest.mark.parametrize("search", [dict(beam=1, nbest=1), dict(beam=3, nbest=2)])
def test_a_ct2_prefix_starts_every_output_as_torchs_does(tiny_run, tiny_export, search):
    prefixes = ["Me gusta", "", "El perro"]
    theirs = ct2_nbest(tiny_export, TEXTS, **search, prefixes=prefixes)
    for prefix, hyps in zip(prefixes, theirs):
        assert len(hyps) == search["nbest"] and all(t.startswith(prefix) for t, _ in hyps)
    ours = torch_nbest(tiny_run, TEXTS, **search, prefixes=prefixes)
    assert [h[0][0] for h in theirs] == [h[0][0] for h in ours]


def test_ct2_seeded_sampling_repeats_and_top_k_1_is_greedy(tiny_export):
    sampled = dict(sampling=True, nbest=4, beam=1, temperature=1.5)
    runs = [ct2_nbest(tiny_export, TEXTS, **sampled, seed=seed) for seed in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert all(len(hyps) == 4 for hyps in runs[0])
    assert all(len({t for t, _ in hyps}) > 1 for hyps in runs[0])  # samples vary
    for hyps in runs[0]:  # best first, as the torch engine's samples
        assert [s for _, s in hyps] == sorted((s for _, s in hyps), reverse=True)
    greedy = ct2_nbest(tiny_export, TEXTS, beam=1, nbest=1)
    top_1 = ct2_nbest(tiny_export, TEXTS, sampling=True, nbest=1, top_k=1, seed=3)
    assert [h[0][0] for h in top_1] == [h[0][0] for h in greedy]
    prefixed = ct2_nbest(tiny_export, TEXTS, **sampled, seed=1, prefixes=["Hola", "", ""])
    assert all(t.startswith("Hola") for t, _ in prefixed[0])


def test_ct2_prefix_and_sampling_from_the_command_line(cli_main, tiny_export, tmp_path):
    base = ["translate", "--checkpoint", str(tiny_export)]
    code, out, err = cli_main(*base, "--prefix", "El", *TEXTS)
    assert code == 0 and all(line.startswith("El") for line in out.splitlines()), err
    sampled = [*base, "--set", "decode.sampling=true", "--nbest", "2", *TEXTS]
    code, out, err = cli_main(*sampled)  # no --seed: run.seed
    assert code == 0 and len(out.splitlines()) == 6 and out == cli_main(*sampled)[1], err
    terms = tmp_path / "terms.tsv"
    terms.write_text("perro\n", encoding="utf-8")
    for args, message in [
        (["--constraints", str(terms)], "CTranslate2 has no terminology constraints"),
        (["--checkpoint", str(tiny_export)], "CTranslate2 has no ensembles"),
    ]:
        code, out, err = cli_main(*base, *args, TEXTS[0])
        assert code == 2 and not out and len(err.splitlines()) == 1, err
        assert message in err and "torch engine" in err
