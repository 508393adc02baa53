"""Back-translation as a workflow, end to end on a tiny model: a reverse (es→en) model, its
sampled translations of monolingual Spanish, and a forward model trained on the parallel
corpus and the synthetic one, weighted and tagged: the tag is one token of the source
tokenizer, and the model sees it before the synthetic sources only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.corpus import HELD_OUT, PAIRS, prepare_args, write_jsonl
from mt import checkpoint
from mt.data import tokenizer as tok
from mt.data.scan import source_key
from mt.data.store import open_split

TINY = ["--config", "tiny.yaml", "--set", "train.max_steps=10", "--set", "train.max_tokens=200"]
TINY += ["--set", f"data.valid_size={HELD_OUT}", "--set", f"data.test_size={HELD_OUT}"]


def test_the_three_commands_give_a_tagged_synthetic_corpus(cli_main, tmp_path):
    corpus = write_jsonl(tmp_path / "parallel.jsonl", PAIRS)
    mono = tmp_path / "mono.es"
    mono.write_text("".join(f"{es} {es}\n" for _, es in PAIRS[:20]), encoding="utf-8")
    reverse, forward = tmp_path / "reverse", tmp_path / "forward"
    code, _, err = cli_main(
        "train", *TINY, "--set", f"data.files.train={corpus}", "--set", f"run.dir={reverse}",
        "--set", "data.src_lang=es", "--set", "data.tgt_lang=en",
    )  # fmt: skip
    assert code == 0, err
    code, synthetic, err = cli_main(
        "translate", "--checkpoint", str(reverse), "--file", str(mono), "--seed", "1",
        "--set", "decode.sampling=true", "--set", "decode.top_k=5",
    )  # fmt: skip
    assert code == 0, err
    english = tmp_path / "mono.en"
    english.write_text(synthetic, encoding="utf-8")
    assert len(synthetic.splitlines()) == 20
    bt = {"en": str(english), "es": str(mono), "weight": 1, "tag": "<bt>"}
    code, _, err = cli_main(
        "train", *TINY, "--set", f"data.files.train=[{corpus}, {json.dumps(bt)}]",
        "--set", f"run.dir={forward}",
    )  # fmt: skip
    assert code == 0, err
    loaded = checkpoint.load(forward)
    tag = loaded.src_tokenizer.token_to_id("<bt>")
    assert tag is not None and tag >= 400  # after the learnt vocabulary
    assert tok.encode(loaded.src_tokenizer, ["<bt> Hello."])[0][0] == tag
    assert tok.encode(loaded.src_tokenizer, ["<bt>"]) == [[tag]]
    meta = json.loads((forward / "data" / "meta.json").read_text(encoding="utf-8"))
    train = open_split(forward / "data", "train", meta["store"]["train"])
    (parallel, _), (synthetic_pairs, weight) = meta["corpora"]
    assert weight == 1 and synthetic_pairs > 0
    tagged = [int(np.sum(np.asarray(train.src[i]) == tag)) for i in range(len(train))]
    # the store keeps the corpora in order: the parallel pairs untagged, the synthetic tagged once
    assert tagged == [0] * parallel + [1] * synthetic_pairs
    assert all(train.src[i][0] == tag for i in range(parallel, len(train)))
    # fine-tuning keeps its model's tokenizer: a tag it lacks cannot be reserved there
    other = json.dumps({"path": str(corpus), "tag": "<ft>"})
    code, _, err = cli_main(
        "prepare", *TINY, "--set", f"data.files.train=[{corpus}, {other}]",
        "--set", f"train.init={forward}", "--set", f"run.dir={tmp_path / 'tuned'}",
    )  # fmt: skip
    assert code == 2 and "tag <ft>: not a token of train.init's tokenizer" in err, err


@pytest.mark.parametrize(
    ("tag", "split", "message"),
    [
        ("bt", "train", "tag: 'bt': a training corpus's tag is a word in <>"),
        ("<bt>", "valid", "tag: '<bt>': a training corpus's tag is a word in <>"),
        ("<pad>", "train", "tag: <pad> is a special token"),
    ],
)
def test_bad_tags_exit_2(cli_main, tmp_path, tag, split, message):
    corpus = write_jsonl(tmp_path / "parallel.jsonl", PAIRS)
    entry = json.dumps({"path": str(corpus), "tag": tag})
    code, _, err = cli_main(
        "prepare", *TINY[:2], "--set", f"data.files.train={corpus}",
        "--set", f"data.files.{split}=[{entry}]", "--set", f"run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert code == 2 and message in err, err


def test_valid_and_test_cut_from_train_are_untagged_pairs_and_their_sources_leave_train(
    cli_main, tmp_path
):
    parallel = write_jsonl(tmp_path / "parallel.jsonl", PAIRS)
    synthetic = [(f"{en} ", f"{es} (sintético)") for en, es in PAIRS]  # the same sources
    synthetic += [(f"Line {n}.", f"Línea {n}.") for n in range(60)] + [("", "vacía")]
    bt = json.dumps({"path": str(write_jsonl(tmp_path / "bt.jsonl", synthetic)), "tag": "<bt>"})
    run = tmp_path / "run"
    args = prepare_args(parallel, run, "--set", f"data.files.train=[{parallel}, {bt}]", "--json")
    code, out, err = cli_main(*args)
    assert code == 0, err
    held = [
        json.loads(line)["src"]
        for name in ("valid", "test")
        for line in (run / "data" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert not [src for src in held if "<bt>" in src]
    meta = json.loads((run / "data" / "meta.json").read_text(encoding="utf-8"))
    train = open_split(run / "data", "train", meta["store"]["train"])
    src_tokenizer = tok.tokenizers_from_files([run / "tokenizer.json"] * 2)[0]
    sources = tok.detokenize(src_tokenizer, list(train.src))
    keys = {source_key(s.removeprefix("<bt> ")) for s in sources}
    assert keys.isdisjoint(source_key(src) for src in held)  # tagged or not
    stats = json.loads(out)
    assert stats["pairs"]["valid"] + stats["pairs"]["test"] > HELD_OUT  # fewer at a boundary
    assert stats["dropped"]["held_out_source"] > 0
    # an empty source stays empty with a tag, and is dropped
    assert stats["dropped"]["empty"] == sum(
        not (a.strip() and b.strip()) for a, b in [*PAIRS, *synthetic]
    )
