"""`mt translate`, `evaluate` and `score` with an ensemble, sampling and a prefix, and their bad
input: one line, exit 2."""

from __future__ import annotations

import json

import pytest

from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import long_sentence, sacrebleu_paired
from mt import checkpoint
from mt.data import tokenizer as tok
from mt.decoding import translate
from mt.model import max_sentence_tokens

SENTENCES = ["Hello.", "The coffee is hot and the water is cold.", "I like music."]


def other_tokenizer_checkpoint(run_dir, tmp_path):
    """The run's weights with a target tokenizer of the same size but two symbols' ids
    swapped."""
    state, meta = checkpoint.load_weights(checkpoint.resolve(run_dir))
    other = json.loads(meta["tgt_tokenizer"])
    vocab = other["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    bad = tmp_path / "other.safetensors"
    checkpoint.save_weights(bad, dict(state), dict(meta, tgt_tokenizer=json.dumps(other)))
    return bad


def test_an_ensemble_of_a_checkpoint_with_itself_translates_and_scores_as_it(
    cli_main,
    run_dir,
    tmp_path,
):
    one = ["--checkpoint", str(run_dir)]
    args = ["--beam", "3", "--nbest", "2", *SENTENCES]
    code, alone, err = cli_main("translate", *one, *args)
    assert code == 0, err
    code, together, err = cli_main("translate", *one, *one, *args)
    assert code == 0, err
    assert together == alone
    pairs = write_jsonl(tmp_path / "pairs.jsonl", PAIRS[:4])
    code, alone, err = cli_main("score", str(run_dir), "--pairs", str(pairs))
    assert code == 0, err
    code, together, err = cli_main("score", str(run_dir), *one, "--pairs", str(pairs))
    assert code == 0 and together == alone, err
    code, alone, err = cli_main("evaluate", str(run_dir), "--pairs", str(pairs), "--json")
    assert code == 0, err
    code, together, err = cli_main("evaluate", str(run_dir), *one, "--pairs", str(pairs), "--json")
    assert code == 0, err
    assert json.loads(together)["bleu"] == json.loads(alone)["bleu"]
    config = tmp_path / "ensemble.yaml"
    config.write_text(f"decode: {{ensemble: [{run_dir}], beam: 3, nbest: 2}}\n")
    code, by_key, err = cli_main("translate", *one, "-c", str(config), *SENTENCES)
    assert code == 0 and by_key == cli_main("translate", *one, *args)[1], err


def test_an_ensemble_of_other_tokenizers_is_refused(cli_main, run_dir, tmp_path):
    bad = other_tokenizer_checkpoint(run_dir, tmp_path)
    two = ["--checkpoint", str(run_dir), "--checkpoint", str(bad)]
    code, out, err = cli_main("translate", *two, "Hi.")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "has another tgt tokenizer" in err


def test_seeded_sampling_repeats_and_gives_n_samples(cli_main, run_dir):
    args = ["translate", "--checkpoint", str(run_dir), "--set", "decode.sampling=true"]
    args += ["--nbest", "3", *SENTENCES]
    runs = [cli_main(*args, "--seed", seed) for seed in ("1", "1", "2")]
    assert all(code == 0 for code, _, _ in runs), runs
    assert runs[0][1] == runs[1][1] and runs[0][1] != runs[2][1]
    rows = [line.split("\t") for line in runs[0][1].splitlines()]  # one line each (mt.text)
    assert [(r[0], r[1]) for r in rows] == [(str(i), str(k)) for i in range(3) for k in (1, 2, 3)]
    code, out, err = cli_main(*args)  # no --seed: run.seed
    assert code == 0 and out == cli_main(*args)[1], err


def test_a_prefix_starts_every_translation(cli_main, run_dir):
    base = ["translate", "--checkpoint", str(run_dir), "--beam", "2"]
    code, out, err = cli_main(*base, "--prefix", "Me gusta", *SENTENCES)
    assert code == 0, err
    assert all(line.startswith("Me gusta") for line in out.splitlines()), out
    code, free, err = cli_main(*base, SENTENCES[1])
    assert code == 0, err
    words = free.split()
    if len(words) > 1:  # the model's own first words change nothing
        own = " ".join(words[: len(words) // 2])
        assert cli_main(*base, "--prefix", own, SENTENCES[1])[1] == free


def test_a_translation_of_a_line_is_one_line(cli_main, run_dir, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    base = ["translate", "--checkpoint", str(run_dir), "--file", str(lines)]
    code, out, err = cli_main(*base, "--prefix", "Me\ngusta\u2028mucho")
    assert code == 0, err
    assert out.count("\n") == len(out.splitlines()) == len(SENTENCES), out
    assert all(line.startswith("Me gusta mucho") for line in out.splitlines()), out
    # a line is what a line feed ends (as wc -l, sacreBLEU and aligned training text count)
    lines.write_text("Hello.\u2028I like music.\r\nHi.\x0cThe water is cold.\n", "utf-8")
    for steer in ([], ["--prefix", "El"], ["--no-split-sentences"]):
        code, out, err = cli_main(*base, *steer)
        assert code == 0 and out.count("\n") == 2 and out.endswith("\n"), (steer, out, err)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "decode.temperature=0"], "decode.temperature: must be above 0, got 0.0"),
        (["--set", "decode.temperature=-1"], "decode.temperature: must be above 0, got -1.0"),
        (["--set", "decode.top_p=0"], "decode.top_p: must be in (0, 1], got 0.0"),
        (["--set", "decode.top_p=1.5"], "decode.top_p: must be in (0, 1], got 1.5"),
        (["--set", "decode.top_k=-2"], "decode.top_k: must not be negative"),
        (["--set", "decode.top_p=0.9"], "decode.top_p: applies to decode.sampling only"),
        (["--prefix", "muy " * 60], "its prefix has"),
    ],
)
def test_bad_sampling_and_prefix_options_exit_2(cli_main, run_dir, args, message):
    code, out, err = cli_main("translate", "--checkpoint", str(run_dir), *args, "Hello.")
    assert code == 2 and message in err and not out, err
    assert len(err.strip().splitlines()) == 1


def test_paired_tests_equal_sacrebleus_command_line(cli_main, run_dir, tmp_path):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(en + "\n" for en, _ in PAIRS[:12]), encoding="utf-8")
    ref.write_text("".join(es + "\n" for _, es in PAIRS[:12]), encoding="utf-8")
    early = str(sorted((run_dir / "checkpoints").glob("step-*"))[0])
    base, other, again = tmp_path / "base.txt", tmp_path / "other.txt", tmp_path / "again.txt"
    common = ["--src", str(src), "--ref", str(ref), "--beam", "2"]
    code, _, err = cli_main("evaluate", early, *common, "--out", str(other))
    assert code == 0, err
    code, out, err = cli_main(
        "evaluate", str(run_dir), *common, "--out", str(base), "--out", str(again),
        "--system", early, "--hyp", str(other), "--json",
    )  # fmt: skip
    assert code == 0, err
    assert again.read_text(encoding="utf-8") == other.read_text(encoding="utf-8")
    rows = json.loads(out)["systems"]
    assert [r["system"] for r in rows] == [str(run_dir), early, str(other)]
    assert rows[1]["bleu"] == rows[2]["bleu"] and rows[1]["bleu_p_bs"] == rows[2]["bleu_p_bs"]
    by_hand = {test: sacrebleu_paired(ref, [base, other], test) for test in ("bs", "ar")}
    for metric, key in (("BLEU", "bleu"), ("chrF2", "chrf")):
        for i, row in enumerate(rows[:2]):
            score, mean, ci, p_bs = by_hand["bs"][i][metric]
            mine = (row[key], row[f"{key}_mean"], row[f"{key}_ci"])
            assert mine == pytest.approx((score, mean, ci), abs=5e-5)
            if i:
                assert row[f"{key}_p_bs"] == pytest.approx(p_bs, abs=5e-5)
                p_ar = by_hand["ar"][i][metric][3]
                assert row[f"{key}_p_ar"] == pytest.approx(p_ar, abs=5e-5)
    code, out, err = cli_main("evaluate", str(run_dir), *common, "--hyp", str(other))
    assert code == 0 and "p bs" in out and "baseline: " in out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hyp", "missing.txt"], "--hyp missing.txt: no such file"),
        (["--hyp", "SHORT"], "lines for 12 test sentences"),
        (["--hyp", "SHORT", "--paired", "tt"], "--paired tt: expected bs, ar or both"),
        (["--out", "a.txt", "--out", "b.txt"], "--out given 2 times for 1 decoded systems"),
    ],
)
def test_bad_paired_test_input_exit_2(cli_main, run_dir, tmp_path, args, message):
    src, ref, short = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "short.txt"
    src.write_text("".join(en + "\n" for en, _ in PAIRS[:12]), encoding="utf-8")
    ref.write_text("".join(es + "\n" for _, es in PAIRS[:12]), encoding="utf-8")
    short.write_text("una\n", encoding="utf-8")
    args = [str(short) if a == "SHORT" else a for a in args]
    code, out, err = cli_main("evaluate", str(run_dir), "--src", str(src), "--ref", str(ref), *args)
    assert code == 2 and message in err and not out, err


def test_constraints_and_a_glossary_are_in_every_translation(cli_main, run_dir, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("perro\n\ncasa\tgrande\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(run_dir), "--beam", "3"]
    code, out, err = cli_main(*base, "--constraints", str(terms), *SENTENCES)
    assert code == 0, err
    first, second, third = out.splitlines()
    assert "perro" in first and "casa" in third and "grande" in third
    assert second == cli_main(*base, SENTENCES[1])[1].strip()  # no terms: as without
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text("music\tmúsica\nCoffee\tcafé\n", encoding="utf-8")
    code, out, err = cli_main(*base, "--glossary", str(glossary), *SENTENCES)
    assert code == 0, err
    lines = out.splitlines()
    assert "café" in lines[1] and "música" in lines[2], out
    code, out, err = cli_main(
        "evaluate", str(run_dir), "--json", "--beam", "3", "--glossary", str(glossary),
        "--pairs", str(write_jsonl(tmp_path / "p.jsonl", PAIRS[:6])),
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.parametrize(
    ("content", "option", "message"),
    [
        ("perro\tcan\tdog\n", "--glossary", "line 1: expected a source term and a target term"),
        ("dog\n", "--glossary", "got 1 column(s)"),
        ("dog\tperro\nDog\tcan\n", "--glossary", "line 2: conflicting constraints: 'Dog'"),
        ("a\n", "--constraints", "1 lines for 2 texts"),
        ("perro\t \nx\n", "--constraints", "text 1: constraint ' ' tokenizes to nothing"),
        ("muy " * 60 + "\n\n", "--constraints", "text 1: its constraints need"),
    ],
)
def test_bad_constraints_exit_2(cli_main, run_dir, tmp_path, content, option, message):
    path = tmp_path / "terms.tsv"
    path.write_text(content, encoding="utf-8")
    code, out, err = cli_main(
        "translate", "--checkpoint", str(run_dir), option, str(path), "Hello dog.", "Hi."
    )
    assert code == 2 and message in err and not out, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("decode.sampling=true", "constraints need beam search"),
        ("decode.rules=transformers", "not decode.rules transformers"),
    ],
)
def test_constraints_with_sampling_or_transformers_rules_are_refused(
    cli_main,
    run_dir,
    tmp_path,
    key,
    message,
):
    terms = tmp_path / "terms.tsv"
    terms.write_text("perro\n", encoding="utf-8")
    code, out, err = cli_main(
        "translate", "--checkpoint", str(run_dir), "--constraints", str(terms),
        "--set", key, "Hello.",
    )  # fmt: skip
    assert code == 2 and message in err and not out and len(err.splitlines()) == 1, err


def test_a_text_cut_into_pieces_keeps_the_numbers_and_terms_of_the_texts(
    cli_main,
    run_dir,
    tmp_path,
):
    loaded = checkpoint.load(run_dir)
    long = long_sentence(
        loaded.src_tokenizer, 2 * max_sentence_tokens(loaded.model.cfg)
    )  # 3 pieces
    lines = tmp_path / "in.txt"
    lines.write_text(f"{long}\nHello dog.\nHi.\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(run_dir), "--beam", "2", "--file", str(lines)]
    terms = tmp_path / "terms.tsv"
    terms.write_text("\nperro\ncasa\n", encoding="utf-8")
    code, out, err = cli_main(*base, "--constraints", str(terms), "--prefix", "El")
    assert code == 0, err
    first, second, third = out.splitlines()
    assert all(line.startswith("El") for line in (first, second, third)), out
    assert "perro" in second and "casa" in third, out
    terms.write_text("\n\ncasa\t \n", encoding="utf-8")  # line 3's term is blank
    code, out, err = cli_main(*base, "--constraints", str(terms))
    assert code == 2 and not out and "text 3: constraint ' ' tokenizes to nothing" in err, err
    # a prefix that fits the long line's first piece, not line 2's output
    source = tok.encode(loaded.src_tokenizer, ["Hello dog."])
    limit = translate.output_limits(loaded.model.cfg, source, loaded.config.decode)[0]
    word = len(tok.encode(loaded.tgt_tokenizer, [" muy"])[0])
    code, out, err = cli_main(*base, "--prefix", "muy" + " muy" * (limit // word + 1))
    assert code == 2 and not out and "text 2: its prefix has" in err, err
