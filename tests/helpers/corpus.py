"""The test data: a tiny hand-written corpus and its files, the shared data folder (Tatoeba,
FLORES) and what reads it, batches and subword helpers of the data layer."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mt.config import DataConfig
from mt.data.batches import Batches
from mt.data.corpus import corpora
from mt.data.store import Sentences

ROOT = Path(__file__).resolve().parents[2]
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


def epoch_plan(batches: Batches, epoch: int) -> list:
    """All of a rank's batches of `epoch` (sentence indices, or packed `Rows`), found as
    training finds them: the same for every (seed, epoch)."""
    plan: list = []
    while (found := batches._locate(epoch, len(plan))) is not None:
        plan.append(found[1])
    return plan


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
