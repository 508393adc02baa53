"""Shared fixtures: a tiny hand-written corpus, CLI runners and the shared data folder."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
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

from typer.testing import CliRunner  # noqa: E402

from mt.cli import app, main  # noqa: E402

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
) -> Path:
    """A random-weight MarianMTModel folder as OPUS-MT's are laid out (swish, scaled and tied
    embeddings, eos 0, unk 1, pad = decoder start = the last id, a non-zero logits bias) with
    SentencePiece unigram models of `pieces` pieces a side, trained on 20,000 Tatoeba pairs;
    `vocab_size`: vocab.json filled up to that many ids (opus-mt-en-es: 65,001)."""
    import io

    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    pairs = read_pairs(TATOEBA_TRAIN, 20_000)
    protos = []
    for side in ("en", "es"):
        buffer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([p[side] for p in pairs]),
            model_writer=buffer,
            vocab_size=pieces,
            model_type="unigram",
            character_coverage=1.0,
            minloglevel=2,
            num_threads=1,
        )
        protos.append(buffer.getvalue())
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"</s>": 0, "<unk>": 1}
    for name, proto in zip(("source.spm", "target.spm"), protos):
        (out / name).write_bytes(proto)
        model = spm.SentencePieceProcessor()
        model.LoadFromSerializedProto(proto)
        for i in range(model.get_piece_size()):
            if not (model.is_control(i) or model.is_unknown(i)):
                vocab.setdefault(model.id_to_piece(i), len(vocab))
    while vocab_size and len(vocab) < vocab_size - 1:
        vocab[f"▁unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = pad = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    config = MarianConfig(
        vocab_size=pad + 1,
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
        share_encoder_decoder_embeddings=True,
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
