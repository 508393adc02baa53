"""Shared fixtures and helpers: a tiny hand-written corpus, CLI runners, the shared data folder,
a training config, tiny models and their toy corpus, packed batches, search helpers."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

# Offline, with a private cache, before anything imports `datasets` (it reads these at import).
_HF_HOME = tempfile.mkdtemp(prefix="mt-tests-hf-")
atexit.register(shutil.rmtree, _HF_HOME, ignore_errors=True)
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_DATASETS_CACHE"] = str(Path(_HF_HOME) / "datasets")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from threads, and spinning OpenMP threads on a busy 2-core machine
# make every small matrix product wait for a time slice (measured: 100x slower steps).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from mt import checkpoint  # noqa: E402
from mt.cli import app, main  # noqa: E402
from mt.config import Config, DataConfig, ModelConfig  # noqa: E402
from mt.config_file import load_config  # noqa: E402
from mt.data.batch import Batch  # noqa: E402
from mt.data.batches import Batches  # noqa: E402
from mt.data.corpus import corpora  # noqa: E402
from mt.data.packing import collate_packed, pack_rows  # noqa: E402
from mt.data.store import Sentences, Split  # noqa: E402
from mt.data.tokenizer import BOS, EOS, PAD  # noqa: E402
from mt.model import Transformer  # noqa: E402
from mt.training.trainer import Trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(
    os.environ.get("MT_SHARED_DATA", ROOT.parent / "shared" / "data")
)  # a worktree: set it
TATOEBA_TRAIN = SHARED / "tatoeba_en_es.train.jsonl.gz"
TATOEBA_VALID = SHARED / "tatoeba_en_es.valid.jsonl.gz"
TATOEBA_TEST = SHARED / "tatoeba_en_es.test.jsonl.gz"
FLORES = SHARED / "flores200_devtest_en_es.jsonl.gz"
needs_shared = pytest.mark.skipif(
    not TATOEBA_TRAIN.is_file(), reason=f"shared data not found in {SHARED}"
)

# ~60 English–Spanish pairs, raw (as a corpus file would hold them, before cleaning).
PAIRS: list[tuple[str, str]] = [
    ("Hello.", "Hola."),
    ("Good morning.", "Buenos días."),
    ("How are you?", "¿Cómo estás?"),  # one English source, four translations
    ("How are you?", "¿Cómo está usted?"),
    ("How are you?", "¿Qué tal?"),
    ("how  are you?", "¿Cómo están ustedes?"),  # same source key: case and spacing ignored
    ("Watch out!", "¡Cuidado!"),
    ("What a surprise!", "¡Qué sorpresa!"),
    ("I love you.", "Te quiero."),
    ("I love you.", "Te amo."),
    ("Thank you very much.", "Muchas gracias."),
    ("Where is the station?", "¿Dónde está la estación?"),
    ("The boy is eating an apple.", "El niño está comiendo una manzana."),
    ("I'm happy 😀.", "Estoy feliz 😀."),
    ("My name is José.", "Me llamo José."),
    ("Spain is a beautiful country.", "España es un país precioso."),
    ("It's cold in winter.", "Hace frío en invierno."),
    ("I don't understand.", "No entiendo."),
    ("Do you speak Spanish?", "¿Hablas español?"),
    ("The coffee is hot.", "El café está caliente."),
    ("  The   cat\tsleeps  on the sofa.  ", "El gato\u00a0duerme en el sofá.\n"),  # messy spaces
    ("This sentence has no translation.", ""),  # empty side
    ("The cafe\u0301 is closed.", "El cafe\u0301 está cerrado."),  # decomposed é (NFD)
    ("I have two brothers.", "Tengo dos hermanos."),
    ("She reads a book every week.", "Ella lee un libro cada semana."),
    ("We are going to the beach tomorrow.", "Mañana vamos a la playa."),
    ("The children play in the garden.", "Los niños juegan en el jardín."),
    ("Can you help me?", "¿Puedes ayudarme?"),
    ("What time is it?", "¿Qué hora es?"),
    ("It is three o'clock.", "Son las tres."),
    ("I would like a glass of water.", "Quisiera un vaso de agua."),
    ("The train leaves at noon.", "El tren sale a mediodía."),
    ("He lives in Madrid.", "Él vive en Madrid."),
    ("They don't eat meat.", "Ellos no comen carne."),
    ("The book is on the table.", "El libro está sobre la mesa."),
    ("My mother cooks very well.", "Mi madre cocina muy bien."),
    ("Open the window, please.", "Abre la ventana, por favor."),
    ("It's raining a lot.", "Está lloviendo mucho."),
    ("I need to sleep.", "Necesito dormir."),
    ("The dog barks at night.", "El perro ladra por la noche."),
    ("Where do you live?", "¿Dónde vives?"),
    ("I'm learning Spanish.", "Estoy aprendiendo español."),
    ("Happy birthday!", "¡Feliz cumpleaños!"),
    ("See you later.", "Hasta luego."),
    ("The water is cold.", "El agua está fría."),
    ("I like music.", "Me gusta la música."),
    ("Tom is my friend.", "Tom es mi amigo."),
    ("The door is open.", "La puerta está abierta."),
    ("Don't worry.", "No te preocupes."),
    ("How much does it cost?", "¿Cuánto cuesta?"),
    ("I'm hungry.", "Tengo hambre."),
    ("The shop closes at eight.", "La tienda cierra a las ocho."),
    ("Nobody knows the answer.", "Nadie sabe la respuesta."),
    ("The sun is shining.", "Brilla el sol."),
    ("My sister is a doctor.", "Mi hermana es médica."),
    ("We're late again.", "Llegamos tarde otra vez."),
    ("Your idea is excellent.", "Tu idea es excelente."),
    ("Let's go!", "¡Vámonos!"),
    ('He said "no" twice.', 'Dijo "no" dos veces.'),  # a double-quote character
    ("Thank you very much.", "Muchas gracias."),  # exact duplicate of an earlier pair
    ("   ", "Nada."),  # a source that is only whitespace
    ("The museum opens on Sundays.", "El museo abre los domingos."),
]
EMPTY_PAIRS = 2  # pairs with a side that is empty after cleaning
# Sizes of the held-out splits the prepare helpers ask for (tiny.yaml has 20 and 20).
HELD_OUT = 8


def write_jsonl(path: Path, pairs: list[tuple[str, str]], src: str = "en", tgt: str = "es") -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({src: a, tgt: b}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    """The tiny corpus as flat JSON Lines: {"en": ..., "es": ...} per line."""
    return write_jsonl(tmp_path / "corpus.jsonl", PAIRS)


def prepare_args(corpus: Path, run_dir: Path, *extra: str) -> list[str]:
    """`mt prepare` arguments for the tiny corpus in `run_dir` (held-out splits of 8)."""
    return [
        "prepare",
        "--config",
        "tiny.yaml",
        "--set",
        f"data.files.train={corpus}",
        "--set",
        f"run.dir={run_dir}",
        "--set",
        f"data.valid_size={HELD_OUT}",
        "--set",
        f"data.test_size={HELD_OUT}",
        *extra,
    ]


@pytest.fixture
def cli() -> Callable[..., object]:
    """Run `mt` in-process with CliRunner; stdout and stderr come back separately.

    Exceptions are not converted to one-line errors here (that is `main()`'s job): a failing
    command leaves its exception in `result.exception`.
    """
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args))

    return invoke


@pytest.fixture
def cli_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Run `mt.cli.main()` in-process as the console script would: (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["mt", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def mt_executable() -> str:
    found = Path(sys.executable).parent / "mt"
    if found.is_file():
        return str(found)
    which = shutil.which("mt")
    if which is None:
        pytest.skip("the mt console script is not installed")
    return which


def run_mt(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run the installed `mt` console script in a subprocess."""
    return subprocess.run(
        [mt_executable(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=dict(os.environ),
    )


@pytest.fixture(scope="session")
def tatoeba_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """`mt prepare --json` on the real Tatoeba files (train, valid, test), run once."""
    if not TATOEBA_TRAIN.is_file():
        pytest.skip(f"shared data not found in {SHARED}")
    run_dir = tmp_path_factory.mktemp("tatoeba") / "run"
    result = run_mt(
        "prepare",
        "--config",
        "tiny",
        "--set",
        f"data.files.train={TATOEBA_TRAIN}",
        "--set",
        f"data.files.valid={TATOEBA_VALID}",
        "--set",
        f"data.files.test={TATOEBA_TEST}",
        "--set",
        "tokenizer.vocab_size=8000",
        "--set",
        "tokenizer.min_frequency=2",
        "--set",
        "data.max_length=128",
        "--set",
        f"run.dir={run_dir}",
        "--json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout), run_dir


# ---- training runs


def tiny_config(corpus: Path, run_dir: Path, *overrides: str) -> Config:
    return load_config(
        "tiny.yaml",
        [
            f"data.files.train={corpus}",
            f"run.dir={run_dir}",
            f"data.valid_size={HELD_OUT}",
            f"data.test_size={HELD_OUT}",
            "train.max_tokens=200",
            "train.eval_sentences=4",
            "train.eval_examples=0",
            *overrides,
        ],
    )


def weights(run_dir: Path, name: str = "last") -> dict[str, torch.Tensor]:
    state, _ = checkpoint.load_weights(run_dir / "checkpoints" / name / checkpoint.WEIGHTS)
    return state


def metric_lines(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# ---- a tiny model and its toy corpus


VOCAB = 24


def tiny_cfg(**overrides) -> ModelConfig:
    settings = dict(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0)
    return ModelConfig(**{**settings, **overrides})


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_cfg(**overrides), VOCAB, VOCAB).eval()


def pad(seqs: list[list[int]]) -> torch.Tensor:
    """Right-pad token lists into a (B, max length) batch."""
    width = max(map(len, seqs))
    return torch.tensor([seq + [PAD] * (width - len(seq)) for seq in seqs])


def random_batch(lengths: list[int], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return pad([torch.randint(4, VOCAB, (n,), generator=gen).tolist() for n in lengths])


def tiny_corpus() -> tuple[list[list[int]], list[list[int]]]:
    """32 pairs of a toy translation: the target is the source reversed, each word mapped."""
    gen = torch.Generator().manual_seed(1)
    mapping = torch.randperm(VOCAB - 4, generator=gen) + 4
    sources, targets = [], []
    for _ in range(32):
        length = int(torch.randint(2, 9, (), generator=gen))
        words = torch.randint(4, VOCAB, (length,), generator=gen)
        sources.append([*words.tolist(), EOS])
        targets.append(mapping[words - 4].flip(0).tolist())
    return sources, targets


@functools.cache
def trained_model() -> tuple[Transformer, list[list[int]], list[list[int]], float]:
    """A tiny model fitted to `tiny_corpus` (for test_model and test_decode), and its last loss."""
    sources, targets = tiny_corpus()
    src = pad(sources)
    tgt_in, tgt_out = pad([[BOS, *t] for t in targets]), pad([[*t, EOS] for t in targets])
    model = tiny_model(seed=0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = F.cross_entropy(
            model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), sources, targets, loss.item()


# ---- packed batches


PACKED_VOCAB, PACKED_LENGTH, PACKED_ROWS = 40, 16, 3


def packed_corpus(pairs: int = 23, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    side = [
        rng.integers(4, PACKED_VOCAB, rng.integers(1, 12)).astype(np.int32)
        for _ in range(2 * pairs)
    ]
    return Split(side[:pairs], side[pairs:])


def packed_batches(split: Split, seed: int = 1, epoch: int = 0) -> list[Batch]:
    src, tgt = split.src, split.tgt
    plans = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed, epoch)
    return [collate_packed(src, tgt, plan, PACKED_LENGTH, PACKED_ROWS) for plan in plans]


def packed_tensors(batch: Batch) -> Batch:
    return batch.map(torch.from_numpy)


def packed_model(**overrides) -> Transformer:
    settings = dict(d_model=16, heads=2, encoder_layers=2, decoder_layers=2, d_ff=32, dropout=0.0)
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**settings, **overrides}), PACKED_VOCAB, PACKED_VOCAB)


# ---- search


def random_model():
    """Untrained: it hardly ever chooses EOS, so its outputs run to the length limit."""
    return tiny_model(seed=3)


def mixed_batch():
    return random_batch([9, 3, 6, 5, 8, 2], seed=4)


def trained():
    """The model fitted to `tiny_corpus`, its sources as a batch, its targets."""
    model, sources, targets, _ = trained_model()
    return model, pad(sources), targets


class HostSyncs(TorchDispatchMode):
    """Counts the operations that make the host wait for a GPU (those that
    torch.cuda.set_sync_debug_mode reports), on any device: reading a value, a shape that
    depends on values (nonzero, boolean masks, repeat_interleave without its size)."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.reads = {"_local_scalar_dense", "is_nonzero", "equal", "nonzero", "masked_select"}
        self.reads |= {"unique_consecutive", "_unique2", "unique_dim"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        masks = name in ("index", "index_put", "index_put_") and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        )
        sized = (
            func is torch.ops.aten.repeat_interleave.Tensor and kwargs.get("output_size") is None
        )
        self.count += name in self.reads or masks or sized
        return func(*args, **kwargs)


def long_sentence(tokenizer, tokens: int) -> str:
    """Clauses joined by commas into one sentence of more than `tokens` tokens."""
    clauses = ["the museum opens on sundays", "the coffee is hot", "we like music"]
    text, i = "", 0
    while len(tokenizer.encode(text, add_special_tokens=False).ids) <= tokens:
        text += ("" if not text else ", ") + clauses[i % len(clauses)]
        i += 1
    return text[0].upper() + text[1:] + "."


def sacrebleu_paired(ref: Path, hyps: list[Path], test: str) -> list[dict[str, tuple]]:
    """`sacrebleu REF -i HYP... --paired-TEST -m bleu chrf` on its command line, read from its
    LaTeX table (its JSON output fails on numpy floats in 2.6.0): per system, per metric
    (BLEU, chrF2), (score, mean, ci, p-value or None), to 4 decimals."""
    import re

    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", *map(str, hyps)]
    command += [f"--paired-{test}", "-m", "bleu", "chrf", "-w", "4", "--no-color", "-f", "latex"]
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    found = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    cell = r"([\d.]+)(?: \(([\d.]+) ± ([\d.]+)\))?(?: \(p = ([\d.]+)\)\*?)?"
    rows = [line for line in found.stdout.splitlines() if line.rstrip().endswith("\\\\")][1:]
    table = []
    for line in rows:
        cells = [c.strip() for c in line.rstrip(" \\").split("&")[1:]]
        values = [re.fullmatch(cell, c).groups() for c in cells]
        table.append(
            {
                metric: tuple(None if v is None else float(v) for v in groups)
                for metric, groups in zip(("BLEU", "chrF2"), values)
            }
        )
    return table


def read_pairs(file: Path, count: int) -> list[dict]:
    """The first `count` pairs of a gzip JSONL corpus of the shared data."""
    import gzip

    pairs = []
    with gzip.open(file, "rt", encoding="utf-8") as f:
        for line in f:
            pairs.append(json.loads(line))
            if len(pairs) == count:
                break
    return pairs


def build_marian(
    out: Path,
    d: int = 32,
    layers: int = 2,
    heads: int = 4,
    ffn: int = 64,
    pieces: int = 800,
    vocab_size: int | None = None,
    dtype: str = "float32",
    tokens: Sequence[str] = (),
    separate: bool = False,
) -> Path:
    """A random-weight MarianMTModel folder as OPUS-MT's are laid out (swish, scaled and tied
    embeddings, eos 0, unk 1, pad = decoder start = the last id, a non-zero logits bias) with
    SentencePiece unigram models of `pieces` pieces a side, trained on 20,000 Tatoeba pairs;
    `vocab_size`: vocab.json filled up to that many ids (opus-mt-en-es: 65,001); `tokens`:
    more entries of vocab.json, such as a multilingual model's ">>spa<<"; `separate`: tc-big's
    separate vocabularies (vocab.json for sources, target_vocab.json for targets, sizes that
    differ, PAD at id 2 of both, encoder and decoder embeddings apart)."""
    import io

    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    pairs = read_pairs(TATOEBA_TRAIN, 20_000)
    protos = []
    sizes = (pieces, pieces - 100 if separate else pieces)  # separate ones: of two sizes
    for side, size in zip(("en", "es"), sizes):
        buffer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([p[side] for p in pairs]),
            model_writer=buffer,
            vocab_size=size,
            model_type="unigram",
            character_coverage=1.0,
            minloglevel=2,
            num_threads=1,
        )
        protos.append(buffer.getvalue())
    out.mkdir(parents=True, exist_ok=True)
    source_vocab = {"</s>": 0, "<unk>": 1, **({"<pad>": 2} if separate else {})}
    target_vocab = dict(source_vocab) if separate else source_vocab
    for name, proto, vocab in zip(
        ("source.spm", "target.spm"), protos, (source_vocab, target_vocab)
    ):
        (out / name).write_bytes(proto)
        model = spm.SentencePieceProcessor()
        model.LoadFromSerializedProto(proto)
        for i in range(model.get_piece_size()):
            if not (model.is_control(i) or model.is_unknown(i)):
                vocab.setdefault(model.id_to_piece(i), len(vocab))
    vocab = source_vocab
    for token in tokens:
        vocab[token] = len(vocab)
    while vocab_size and len(vocab) < vocab_size - 1:
        vocab[f"▁unused{len(vocab)}"] = len(vocab)
    pad = vocab.setdefault("<pad>", len(vocab))
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    files = {}
    if separate:
        files = {"target_vocab_file": str(out / "target_vocab.json"), "separate_vocabs": True}
        (out / "target_vocab.json").write_text(json.dumps(target_vocab), encoding="utf-8")
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=not separate,
        d_model=d,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        activation_function="swish",
        max_position_embeddings=512,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        scale_embedding=True,
        bad_words_ids=[[pad]],
    )
    torch.manual_seed(0)
    model = MarianMTModel(config)
    with torch.no_grad():  # larger than the init's, so that outputs depend on the source
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, p.size(1) ** -0.5)
            elif "layer_norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.1)
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] = 3.0  # EOS: some outputs end before the limit
    model.to(getattr(torch, dtype)).save_pretrained(out)
    tokenizer = MarianTokenizer(
        str(out / "source.spm"),
        str(out / "target.spm"),
        str(out / "vocab.json"),
        source_lang="en",
        target_lang="es",
        **files,
    )
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def marian_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-weight Marian folder (build_marian), built once a session."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    if not TATOEBA_TRAIN.is_file():
        pytest.skip(f"shared data not found in {SHARED}")
    return build_marian(tmp_path_factory.mktemp("marian") / "small")


def epoch_plan(batches: Batches, epoch: int) -> list:
    """All of a rank's batches of `epoch` (sentence indices, or packed `Rows`), found as
    training finds them: the same for every (seed, epoch)."""
    plan: list = []
    while (found := batches._locate(epoch, len(plan))) is not None:
        plan.append(found[1])
    return plan


def after_each_update(trainer: Trainer, hook: Callable) -> None:
    """Calls hook(update, batches) after each of the trainer's optimiser updates."""
    update = trainer.updater

    def updated(batches, lr):
        result = update(batches, lr)
        hook(result, batches)
        return result

    trainer.updater = updated


@pytest.fixture(scope="session")
def marian_multilingual(marian_small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for a multilingual OPUS-MT model: vocab.json has >>spa<< and >>fra<<."""
    folder = tmp_path_factory.mktemp("marian") / "multilingual"
    return build_marian(folder, tokens=(">>spa<<", ">>fra<<"))


@pytest.fixture(scope="session")
def marian_separate(marian_small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for a tc-big model with separate vocabularies (build_marian)."""
    return build_marian(tmp_path_factory.mktemp("marian") / "separate", separate=True)


def resegmented(dropout, ids: Sequence, rng: np.random.Generator | int) -> Sentences:
    """Sentences `ids` segmented anew by a BpeDropout, drawn from `rng` (or a seed's),
    gathered in memory."""
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    sentences = ids if isinstance(ids, Sentences) else Sentences.of(ids)
    runs = list(dropout.sample(sentences, rng))
    lengths = np.concatenate([n for _, n in runs])
    flat = np.concatenate([x for x, _ in runs])
    return Sentences(flat, np.concatenate(([0], np.cumsum(lengths))))


def load_raw(cfg: DataConfig) -> dict[str, list[tuple[str, str]]]:
    """Every split's raw pairs in memory (small corpora): what `mt prepare` streams."""
    return {
        name: [pair for corpus in found for chunk in corpus.read() for pair in zip(*chunk)]
        for name, found in corpora(cfg).items()
    }


def dedup(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Exact duplicate pairs removed, first occurrence kept: what the scan's hashes find."""
    return list(dict.fromkeys(pairs))
