"""Fine-tuning from a checkpoint (train.init, --init) and `mt score`, on tiny models."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.corpus import PAIRS, dedup, load_raw, write_jsonl
from helpers.runs import tiny_config
from mt import checkpoint
from mt.config_file import load_config
from mt.data import corpus
from mt.data.corpus import normalize
from mt.data.old_corpus import old_corpus
from mt.data.prepare import prepare
from mt.data.scan import clean, keyed_hashes, source_key
from mt.data.workers import workers
from mt.decoding.engine import open_translator
from mt.decoding.pieces import source_pieces
from mt.decoding.scoring import score_ids, score_pairs
from mt.decoding.translate import translate_ids
from mt.errors import ConfigError
from mt.model import max_sentence_tokens
from mt.training import finetune
from mt.training.finetune import FROZEN
from mt.training.trainer import Trainer, train

# the new domain: pairs the old model never saw
NEW_PAIRS = [(f"I have {n} red cats.", f"Tengo {n} gatos rojos.") for n in range(40)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny model trained 20 updates on the shared corpus."""
    folder = tmp_path_factory.mktemp("old")
    run = folder / "run"
    train(tiny_config(write_jsonl(folder / "old.jsonl", PAIRS), run))
    return run


def weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_weights(checkpoint.resolve(path))[0]


def test_finetuning_starts_from_the_checkpoint_learns_the_new_data_and_freezes(trained, tmp_path):
    new = write_jsonl(tmp_path / "new.jsonl", NEW_PAIRS)
    run = tmp_path / "ft"
    trainer = Trainer(
        tiny_config(new, run, f"train.init={trained}", "train.freeze=encoder", "train.log_every=1")
    )
    start = weights(trained)
    assert all(torch.equal(v, start[k]) for k, v in trainer.model.state_dict().items())
    assert trainer.state.step == 0  # a fresh optimiser and schedule
    assert (run / "tokenizer.json").read_text() == (trained / "tokenizer.json").read_text()
    trainer.run()
    end = weights(run / "checkpoints" / "last")
    frozen = [k for k in end if k.startswith(FROZEN["encoder"])]
    assert frozen and all(torch.equal(end[k], start[k]) for k in frozen)
    assert not torch.equal(end["decoder.0.ff.0.weight"], start["decoder.0.ff.0.weight"])
    losses = [
        json.loads(line)["loss"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    assert len(losses) == 20 and sum(losses[-3:]) < sum(losses[:3]) - 1.5  # nats a token
    record = json.loads((run / "init.json").read_text())
    best = checkpoint.resolve(trained)  # a run folder starts from its best checkpoint
    step = int(best.resolve().parent.name.removeprefix("step-"))  # the best by validation
    assert record == {"init": str(trained), "weights": str(best.resolve()), "step": step}


def test_old_share_mixes_in_the_old_corpus(trained, tmp_path):
    new = write_jsonl(tmp_path / "new.jsonl", NEW_PAIRS)
    configs = [
        tiny_config(new, tmp_path / "a", f"train.init={trained}"),
        tiny_config(new, tmp_path / "b", f"train.init={trained}", "train.old_share=0.5"),
    ]
    alone, mixed = (prepare(c, base=finetune.base) for c in configs)
    assert len(mixed.splits["train"]) == 2 * len(alone.splits["train"])
    assert mixed.splits["valid"].src_text == alone.splits["valid"].src_text


def test_old_share_picks_what_the_whole_corpus_in_memory_gave_read_a_chunk_at_a_time(
    tmp_path, monkeypatch
):
    old_pairs = [*PAIRS, *PAIRS[:9], (" Hello. ", "Hola."), ("", "vacío")]  # repeats, empty
    old = tiny_config(write_jsonl(tmp_path / "old.jsonl", old_pairs), tmp_path / "old").data
    new = write_jsonl(tmp_path / "new.jsonl", NEW_PAIRS)
    config = tiny_config(new, tmp_path / "new")
    config.train.old_share = 0.5  # train.init's corpus is given here
    held = {"valid": [("How are you?", "¿Qué tal?")], "test": []}
    cut = {"test": (0, 1 << 62)}  # a quarter of the source hashes
    monkeypatch.setattr(corpus, "CHUNK", 5)  # many chunks
    with workers(1) as run:
        chosen = old_corpus(old, config, 12, cut, held, run, tmp_path)
        got = [pair for chunk in chosen.read() for pair in zip(*chunk)]
    # as train.old_share chose with the whole corpus in memory
    key, seed = str(config.run.seed).encode(), config.run.seed
    pairs = dedup(clean(load_raw(old)["train"], {}))
    hashes = keyed_hashes([source_key(s) for s, _ in pairs], key)
    out = np.isin(hashes, keyed_hashes([source_key("How are you?")], key)) | (hashes < 1 << 62)
    pairs = [pair for pair, o in zip(pairs, out.tolist()) if not o]
    pick = np.random.default_rng(seed).choice(len(pairs), min(12, len(pairs)), replace=False)
    assert got == [pairs[i] for i in sorted(pick)] and 0 < len(got) < len(pairs)


def test_a_prepared_fine_tuning_run_no_longer_needs_its_init_checkpoint(trained, tmp_path):
    # a resumed run reuses its data: train.init's checkpoint may have moved meanwhile
    weights = tmp_path / "start" / "model.safetensors"
    weights.parent.mkdir()
    shutil.copyfile(checkpoint.resolve(trained), weights)
    config = tiny_config(write_jsonl(tmp_path / "new.jsonl", NEW_PAIRS), tmp_path / "run",
                         f"train.init={weights}", "train.old_share=0.5")  # fmt: skip
    built = prepare(config, base=finetune.base)
    weights.unlink()
    again = prepare(config, base=finetune.base)
    assert again.reused and len(again.splits["train"]) == len(built.splits["train"])
    with pytest.raises(ConfigError, match=r"^train\.init: "):  # a cache to build needs it
        prepare(config, rebuild=True, base=finetune.base)


@pytest.mark.parametrize(
    "init, extra, expected",
    [
        ("TRAINED", ["--set", "model.d_model=64"], "model.d_model differ"),
        ("TRAINED", ["--set", "tokenizer.vocab_size=500"], "tokenizer.vocab_size differ"),
        ("nowhere", [], "train.init: nowhere: no checkpoint found"),
        ("FOREIGN", [], "not a readable safetensors checkpoint"),
    ],
)
def test_bad_init_is_refused_in_one_line_and_nothing_is_written(
    trained, tmp_path, cli_main, init, extra, expected
):
    foreign = tmp_path / "foreign.safetensors"
    foreign.write_bytes(b"not a checkpoint")
    init = {"TRAINED": str(trained), "FOREIGN": str(foreign)}.get(init, init)
    run = tmp_path / "ft"
    new = write_jsonl(tmp_path / "new.jsonl", NEW_PAIRS)
    args = ["--set", f"data.files.train={new}", "--set", f"run.dir={run}", *extra]
    code, _, err = cli_main("train", "--config", "tiny.yaml", "--init", init, *args)
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert not run.exists()


def test_score_equals_the_beams_own_scores(trained):
    loaded = checkpoint.load(trained)
    cfg = dataclasses.replace(loaded.config.decode, beam=3, nbest=3, alpha=0.6, precision="fp32")
    sources = [src for src, _ in PAIRS[:16] if src.strip()]
    src_ids = source_pieces(
        loaded.src_tokenizer, sources, max_sentence_tokens(loaded.model.cfg)
    ).ids
    found = translate_ids(loaded.model, src_ids, cfg)
    flat = [(s, h) for s, hyps in zip(src_ids, found) for h in hyps]
    scored = score_ids(loaded.model, [s for s, _ in flat], [h.tokens for _, h in flat], cfg)
    assert len(flat) == 3 * len(sources)
    for (_, hyp), s in zip(flat, scored):
        assert s.logprob == pytest.approx(hyp.logprob, abs=1e-4)
        assert s.score == pytest.approx(hyp.score, abs=1e-4)
        assert s.tokens == len(hyp.tokens) + 1


def test_score_batches_by_the_devices_size_and_scores_as_pairs_alone(trained):
    """decode.batch_tokens 0 is the device's batch (4096 tokens on a CPU) for scoring too, as
    for translating: once it was passed on raw and made one pair a batch."""
    translator = open_translator(trained, device="cpu")
    assert translator.config.decode.batch_tokens == 0
    pairs = [(s, t) for s, t in PAIRS[:16] if s.strip() and t.strip()]
    batches: list[int] = []
    hook = translator.model.register_forward_hook(lambda _, a, out: batches.append(len(a[0])))
    together = translator.score(pairs)
    hook.remove()
    assert batches == [len(pairs)]
    alone = [translator.score([pair])[0] for pair in pairs]
    assert [s.logprob for s in together] == pytest.approx([s.logprob for s in alone], abs=1e-4)
    assert [s.tokens for s in together] == [s.tokens for s in alone]


def test_score_command_prints_each_pair_and_says_which_it_cannot_score_exactly(
    trained, tmp_path, cli_main
):
    pairs = [(normalize(s), normalize(t)) for s, t in PAIRS[:12] if s.strip() and t.strip()]
    file = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    code, out, err = cli_main(
        "score", str(trained), "--pairs", str(file), "--json", "--device", "cpu"
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    loaded = checkpoint.load(trained)
    expected = score_pairs(
        loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, pairs, loaded.config.decode
    )
    assert [r["tgt"] for r in rows] == [t for _, t in pairs]
    assert [r["score"] for r in rows] == pytest.approx([e.score for e in expected], abs=1e-5)
    assert all(r["per_token"] == pytest.approx(r["logprob"] / r["tokens"]) for r in rows)
    code, out, _ = cli_main("score", str(trained), "--pairs", str(file))
    assert [len(line.split("\t")) for line in out.splitlines()] == [3] * len(pairs)
    long = write_jsonl(tmp_path / "long.jsonl", [("Hello.", "Hola. " * 200)])
    code, out, err = cli_main("score", str(trained), "--pairs", str(long))
    assert code == 0 and len(out.splitlines()) == 1  # scored on what fits of it
    assert err.count("\n") == 1 and "(1)" in err and "positions" in err and "not exactly" in err


def test_a_run_saved_before_these_keys_existed_still_resumes(trained, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(trained, run, symlinks=True)
    file = checkpoint.resolve(run / "checkpoints" / "last")
    state, meta = checkpoint.load_weights(file)
    config = json.loads(meta["config"])
    for section, key in NEW_KEYS:
        del config[section][key]
    checkpoint.save_weights(file, state, dict(meta, config=json.dumps(config)))
    old_corpus = load_config(run / "config.yaml").data.files.train[0]
    result = train(tiny_config(Path(old_corpus), run, "train.max_steps=22"))
    assert result["step"] == 22  # resumed at 20, not refused for keys it never had


NEW_KEYS = [
    ("tokenizer", "model"),
    ("tokenizer", "dropout"),
    ("train", "init"),
    ("train", "freeze"),
    ("train", "old_share"),
]
