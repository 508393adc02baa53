"""`mt translate`, `mt evaluate` and `mt average` on a tiny trained run."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import pytest
import torch

from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import long_sentence
from mt import checkpoint
from mt.data import tokenizer as tok
from mt.data.prepare import Prepared, prepare
from mt.data.store import Split
from mt.decoding.engine import open_translator
from mt.decoding.pieces import source_pieces
from mt.decoding.translate import translate_ids
from mt.model import max_sentence_tokens
from mt.text import translate_texts
from mt.training.validation import validation_record


def test_translate_prints_one_line_per_input_in_order(cli_main, run_dir):
    texts = ["Hello.", "", "The coffee is hot and the water is cold.", "¿Qué? 😀 日本"]
    code, out, err = cli_main("translate", "--checkpoint", str(run_dir), "--beam", "2", *texts)
    assert code == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == len(texts) and lines[1] == ""  # an empty input gives an empty line
    translator = open_translator(run_dir, device="cpu", decode=["decode.beam=2"])
    alone = [translate_texts(translator, [t])[0] for t in texts]
    assert lines == alone  # batching and sorting by length change nothing


def test_translate_file_and_stdin(cli_main, run_dir, tmp_path, monkeypatch):
    source = tmp_path / "in.txt"
    source.write_text("Hello.\nI like music.\n\n", encoding="utf-8")
    code, from_file, err = cli_main(
        "translate", "--checkpoint", str(run_dir), "--file", str(source)
    )
    assert code == 0, err
    assert len(from_file.splitlines()) == 3
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO(source.read_text()))
    code, from_stdin, _ = cli_main("translate", "--checkpoint", str(run_dir), "--file", "-")
    assert code == 0 and from_stdin == from_file


def test_one_line_in_one_line_out_each_lines_sentences_joined(cli_main, run_dir, tmp_path):
    lines = ["Hello. I like music.", "", "  Good night!  Thank you.", "The coffee is hot."]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = cli_main("translate", "--checkpoint", str(run_dir), "--file", str(source))
    assert code == 0, err
    translator = open_translator(run_dir, device="cpu")
    assert out.split("\n")[:-1] == translate_texts(translator, lines)
    alone = translator.translate(["Good night!", "Thank you."])
    assert out.split("\n")[2] == f"  {alone[0]}  {alone[1]}"  # its spacing kept
    # --no-split-sentences: each line whole, as the model read it before
    code, whole, _ = cli_main(
        "translate", "--checkpoint", str(run_dir), "--no-split-sentences", *lines[:1]
    )
    assert whole.split("\n")[:-1] == translator.translate(lines[:1])


def test_a_sentence_twice_the_carried_length_comes_back_whole_one_policy_for_all(
    cli_main, run_dir, tmp_path
):
    translator = open_translator(run_dir)
    loaded, limit = translator.loaded, translator.trained.carried
    assert 1 < limit <= loaded.config.data.max_length < max_sentence_tokens(loaded.model.cfg)
    assert translator.decoding(None).piece_tokens == limit  # measured, from the weights
    train = prepare(loaded.config).splits["train"]
    text = long_sentence(loaded.src_tokenizer, 2 * limit)
    pieces = source_pieces(loaded.src_tokenizer, [text], limit)
    assert len(pieces.ids) >= 2 and max(map(len, pieces.ids)) <= limit
    decoded = tok.detokenize(loaded.src_tokenizer, pieces.ids)
    # cut after clauses, each piece as a source starts: no space before it
    assert " ".join(decoded) == text and all(p == p.strip() for p in decoded)
    greedy = dataclasses.replace(loaded.config.decode, beam=1, nbest=1)
    found = translate_ids(loaded.model, pieces.ids, greedy)
    translated = tok.detokenize(loaded.tgt_tokenizer, [h[0].tokens for h in found])
    whole = pieces.joined([[(t, 0.0)] for t in translated])[0][0][0]

    # mt translate: whole, no warning (the coverage guard off: it judges the whole, a long
    # source, and none of its pieces)
    unguarded = ("--beam", "1", "--set", "decode.coverage=0")
    code, out, err = cli_main("translate", "--checkpoint", str(run_dir), *unguarded, text)
    assert code == 0 and out == whole + "\n" and "warning" not in err
    # validation translates it as translate does (the guard off alike)
    config = dataclasses.replace(
        loaded.config,
        train=dataclasses.replace(loaded.config.train, eval_examples=1),
        decode=dataclasses.replace(loaded.config.decode, coverage=0.0),
    )
    ids = tok.encode(loaded.src_tokenizer, [text]), tok.encode(loaded.tgt_tokenizer, ["hola"])
    valid = Split(*ids, [text], ["hola"])
    splits = {"valid": valid, "train": train}
    data = Prepared(splits, loaded.src_tokenizer, loaded.tgt_tokenizer, {}, True)
    _, examples = validation_record(
        loaded.model, data, config, torch.device("cpu"), translator.trained
    )
    assert examples[0].endswith(f"hyp: {whole}")
    # mt score of a pair past the positions: scored on what fits, said in one line
    longer = long_sentence(loaded.src_tokenizer, max_sentence_tokens(loaded.model.cfg))
    pairs = write_jsonl(tmp_path / "long.jsonl", [("Hello.", "Hola."), (longer, "Hola.")])
    code, out, err = cli_main("score", str(run_dir), "--pairs", str(pairs))
    assert code == 0 and len(out.splitlines()) == 2
    assert err.count("\n") == 1 and "(2)" in err and "not exactly" in err


def test_translate_nbest_lists_are_sorted(cli_main, run_dir):
    code, out, err = cli_main(
        "translate",
        "--checkpoint",
        str(run_dir),
        "--beam",
        "3",
        "--nbest",
        "3",
        "Hello.",
        "Good morning.",
    )
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [(str(i), str(k)) for i in range(2) for k in (1, 2, 3)]
    for i in range(2):  # INDEX RANK SCORE TEXT, best score first
        scores = [float(r[2]) for r in rows if r[0] == str(i)]
        assert scores == sorted(scores, reverse=True) and all(s <= 0 for s in scores)
    code, _, err = cli_main(
        "translate", "--checkpoint", str(run_dir), "--beam", "2", "--nbest", "3", "Hello."
    )
    assert code == 2 and "decode.nbest: 3 is larger than decode.beam (2)" in err


def test_translate_uses_the_newest_run_by_default(cli_main, run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli_main("translate", "Hello.")
    assert code == 2 and "no trained model under ./runs" in err
    shutil.copytree(run_dir, tmp_path / "runs" / "copy", symlinks=True)
    code, out, err = cli_main("translate", "Hello.")
    assert code == 0, err
    assert len(out.splitlines()) == 1


def test_evaluate_reports_bleu_chrf_and_signatures(cli_main, run_dir, tmp_path):
    hyps = tmp_path / "hyps.txt"
    code, out, err = cli_main("evaluate", str(run_dir), "--json", "--beam", "2", "--out", str(hyps))
    assert code == 0, err
    result = json.loads(out)
    assert {"bleu", "chrf", "signature", "sentences", "beam", "seconds"} <= result.keys()
    assert result["sentences"] == 8 and result["beam"] == 2
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert len(hyps.read_text(encoding="utf-8").splitlines()) == 8
    code, out, _ = cli_main("evaluate", str(run_dir), "--split", "valid")
    assert code == 0 and "BLEU" in out and "chrF" in out


def test_evaluate_external_sets(cli_main, run_dir, tmp_path):
    pairs = PAIRS[:10]
    gz = tmp_path / "pairs.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"en": a, "es": b}, ensure_ascii=False) + "\n" for a, b in pairs)
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(a.strip() + "\n" for a, _ in pairs), encoding="utf-8")
    ref.write_text("".join(b.strip() + "\n" for _, b in pairs), encoding="utf-8")
    code, by_pairs, err = cli_main(
        "evaluate", str(run_dir), "--pairs", str(gz), "--json", "--beam", "1"
    )
    assert code == 0, err
    code, by_files, err = cli_main(
        "evaluate", str(run_dir), "--src", str(src), "--ref", str(ref), "--json", "--beam", "1"
    )
    assert code == 0, err
    a, b = json.loads(by_pairs), json.loads(by_files)
    assert a["sentences"] == b["sentences"] == 10
    assert a["bleu"] == pytest.approx(b["bleu"]) and a["chrf"] == pytest.approx(b["chrf"])


def test_evaluate_errors_exit_2_and_write_nothing(cli_main, run_dir, tmp_path):
    src, ref, out = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "out.txt"
    src.write_text("a\nb\nc\n")
    ref.write_text("x\ny\n")
    out.write_text("precious\n")
    cases = [
        (["--src", str(src), "--ref", str(ref)], "has 3 lines but --ref"),
        (["--pairs", str(tmp_path / "missing.jsonl")], "no such file"),
        (["--src", str(src)], "--src and --ref go together"),
        (["--split", "train"], "must be test or valid"),
    ]
    for args, message in cases:
        code, _, err = cli_main("evaluate", str(run_dir), *args, "--out", str(out))
        assert code == 2, (args, err)
        assert message in err and len(err.strip().splitlines()) == 1
        assert out.read_text() == "precious\n"
    code, _, err = cli_main("evaluate", str(tmp_path / "nowhere"))
    assert code == 2 and "no checkpoint found" in err


def test_checkpoint_that_does_not_match_its_tokenizers_is_refused(cli_main, run_dir, tmp_path):
    state, meta = checkpoint.load_weights(checkpoint.resolve(run_dir))
    other = json.loads(meta["src_tokenizer"])
    other["model"]["vocab"]["extra-token"] = len(other["model"]["vocab"])  # one more symbol
    meta = dict(meta, src_tokenizer=json.dumps(other), tgt_tokenizer=json.dumps(other))
    bad = tmp_path / "bad.safetensors"
    checkpoint.save_weights(bad, {k: v for k, v in state.items()}, meta)
    code, _, err = cli_main("evaluate", str(bad))
    assert code == 2 and "do not match their tokenizers" in err and "Traceback" not in err


def test_average_is_the_mean_and_translates(cli_main, run_dir, tmp_path):
    out = tmp_path / "avg.safetensors"
    code, _, err = cli_main("average", str(run_dir), "--last", "2", "--out", str(out))
    assert code == 0, err
    files = checkpoint.newest_steps(run_dir / "checkpoints", 2)
    (a, _), (b, _) = (checkpoint.load_weights(f) for f in files)
    averaged, _ = checkpoint.load_weights(out)
    for key in a:
        assert torch.allclose(averaged[key], (a[key] + b[key]) / 2, atol=1e-6), key
    assert averaged["out.weight"].data_ptr() == averaged["tgt_embed.weight"].data_ptr()  # tied
    code, translated, err = cli_main("translate", "--checkpoint", str(out), "Hello.")
    assert code == 0 and len(translated.splitlines()) == 1, err
    code, _, err = cli_main(
        "evaluate",
        str(out),
        "--json",
        "--beam",
        "1",
        "--pairs",
        str(write_jsonl(tmp_path / "p.jsonl", PAIRS[:4])),
    )
    assert code == 0, err
    code, _, err = cli_main("average", str(run_dir), "--last", "9", "--out", str(out))
    assert code == 2 and "only 3 step checkpoints" in err


# ----------------------------------------------------------------------------- the CLI contract


def test_decoding_keys_come_from_config_and_set_on_top_of_the_checkpoint(
    cli_main, run_dir, tmp_path
):
    sentence = "The coffee is hot."  # one piece: within the length the model carries
    code, short, err = cli_main(
        "translate", "--checkpoint", str(run_dir), "--set", "decode.max_len_b=1", "--set",
        "decode.max_len_a=0", "--beam", "1", sentence,
    )  # fmt: skip
    assert code == 0, err
    config = tmp_path / "decode.yaml"
    config.write_text("model: {d_model: 8}\ndecode: {max_len_a: 0, max_len_b: 1, beam: 1}\n")
    code, same, err = cli_main(
        "translate", "--checkpoint", str(run_dir), "-c", str(config), sentence
    )
    assert code == 0, err
    assert same == short and len(short.split()) <= 1  # one token at most; the model section
    # of the file is ignored: the model is the checkpoint's
    for command in (["translate", "--checkpoint", str(run_dir), "Hi."], ["evaluate", str(run_dir)]):
        code, out, err = cli_main(*command, "--set", "model.d_model=8")
        assert code == 2 and "--set model.d_model=8: only decode.* keys" in err and not out
    code, _, err = cli_main("evaluate", str(run_dir), "--set", "decode.alpha=-1")
    assert code == 2 and "decode.alpha: must not be negative" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--beam", "0"], "decode.beam: must be positive, got 0"),
        (["--beam", "-1"], "decode.beam: must be positive, got -1"),
        (["--batch-tokens", "-5"], "decode.batch_tokens: must not be negative, got -5"),
        (["--device", "bogus"], "run.device: 'bogus': expected auto, cpu, cuda, cuda:N or mps"),
    ],
)
def test_decoding_options_are_checked_by_the_config_rule(cli_main, run_dir, args, message):
    for command in (
        ["translate", "--checkpoint", str(run_dir), "Hello."],
        ["evaluate", str(run_dir)],
    ):
        code, out, err = cli_main(*command, *args)
        assert code == 2 and message in err and not out, err
        assert len(err.strip().splitlines()) == 1


def test_interactive_prompt_goes_to_stderr(cli_main, run_dir, monkeypatch):
    import io
    import sys

    stdin = io.StringIO("Hello.\nGood morning.\n")
    stdin.isatty = lambda: True
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = cli_main("translate", "--checkpoint", str(run_dir))
    assert code == 0, err
    assert "en> " not in out and err.count("en> ") == 3  # two sentences, then end of input
    assert len(out.splitlines()) == 2


def test_evaluate_reads_pairs_in_every_corpus_format(cli_main, run_dir, tmp_path):
    flat = write_jsonl(tmp_path / "flat.jsonl", PAIRS[:12])
    nested = tmp_path / "nested.jsonl"
    nested.write_text(
        "".join(json.dumps({"translation": {"en": a, "es": b}}) + "\n" for a, b in PAIRS[:12])
    )
    csv = tmp_path / "pairs.csv"
    csv.write_text("en,es\n" + "".join(f'"{a}","{b}"\n' for a, b in PAIRS[:12] if '"' not in a))
    results = []
    for file in (flat, nested):
        code, out, err = cli_main("evaluate", str(run_dir), "--pairs", str(file), "--json")
        assert code == 0, err
        results.append(json.loads(out))
    assert results[0]["bleu"] == results[1]["bleu"] and results[0]["sentences"] == 12
    code, out, err = cli_main("evaluate", str(run_dir), "--pairs", str(csv), "--json")
    assert code == 0 and json.loads(out)["sentences"] == 12, err


def test_saved_tokenizer_alone_gives_the_ids_the_encoder_reads(run_dir):
    from tokenizers import Tokenizer

    from mt.data import tokenizer as tok
    from mt.data.tokenizer import EOS

    outside = Tokenizer.from_file(str(run_dir / "tokenizer.json"))
    outside.encode_special_tokens = True  # as the run folder's README says
    loaded = checkpoint.load(run_dir)
    texts = ["Hello.", "The coffee is hot </s> <s>."]
    assert [outside.encode(t).ids for t in texts] == [
        [*ids, EOS] for ids in tok.encode(loaded.src_tokenizer, texts)
    ]
    assert "encode_special_tokens = True" in (run_dir / "README.md").read_text()


def test_checkpoint_metadata_says_pt_and_mt_format(run_dir):
    from safetensors import safe_open

    with safe_open(str(checkpoint.resolve(run_dir)), "pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt" and meta["mt_format"] == checkpoint.FORMAT


def test_python_dash_m_mt_runs_the_cli():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mt", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.startswith("mt "), result.stderr


def test_evaluate_splits_a_line_of_sentences_unless_told_not_to(cli_main, run_dir, tmp_path):
    lines = ["Hello. I like music.", "The coffee is hot."]
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    ref.write_text("Hola. Me gusta la música.\nEl café está caliente.\n", encoding="utf-8")
    translator = open_translator(run_dir, device="cpu", decode=["decode.beam=1"])
    for option, want in (
        ("--split-sentences", translate_texts(translator, lines)),
        ("--no-split-sentences", translator.translate(lines)),
    ):
        out = tmp_path / f"{option}.txt"
        args = ("--src", str(src), "--ref", str(ref), "--beam", "1", "--out", str(out), option)
        code, _, err = cli_main("evaluate", str(run_dir), *args)
        assert code == 0, err
        assert out.read_text(encoding="utf-8").splitlines() == want
    assert translate_texts(translator, lines)[0] == " ".join(
        translator.translate(lines[0].split(" ", 1))
    )
