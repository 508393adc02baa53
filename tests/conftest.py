"""Fixtures every test folder shares: the CLI run in-process (`cli`, `cli_main`), the tiny
corpus file, `mt prepare` on the Tatoeba files, random-weight Marian folders, a deadline for
the tests of hostile input; and, before anything imports `datasets`, an offline environment
with a private cache. Helpers that are not fixtures are in tests/helpers/."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
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

from helpers.corpus import PAIRS, SHARED, TATOEBA_TEST, TATOEBA_TRAIN, TATOEBA_VALID, write_jsonl  # noqa: E402
from helpers.marian import build_marian  # noqa: E402
from helpers.runs import run_mt  # noqa: E402
from mt.cli import app, main  # noqa: E402

DEADLINE_SECONDS = 10  # a hostile input's test takes well under one; regressions took minutes


@pytest.fixture
def deadline():
    """A deadline (SIGALRM) on the test, for those that feed hostile input to a parser: a
    regression fails there rather than hanging."""

    def expired(signum, frame):
        raise TimeoutError(f"over {DEADLINE_SECONDS} s: is a parser super-linear again?")

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE_SECONDS)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    """The tiny corpus as flat JSON Lines: {"en": ..., "es": ...} per line."""
    return write_jsonl(tmp_path / "corpus.jsonl", PAIRS)


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


@pytest.fixture(scope="session")
def marian_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-weight Marian folder (build_marian), built once a session."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    if not TATOEBA_TRAIN.is_file():
        pytest.skip(f"shared data not found in {SHARED}")
    return build_marian(tmp_path_factory.mktemp("marian") / "small")


@pytest.fixture(scope="session")
def marian_multilingual(marian_small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for a multilingual OPUS-MT model: vocab.json has >>spa<< and >>fra<<."""
    folder = tmp_path_factory.mktemp("marian") / "multilingual"
    return build_marian(folder, tokens=(">>spa<<", ">>fra<<"))


@pytest.fixture(scope="session")
def marian_separate(marian_small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for a tc-big model with separate vocabularies (build_marian)."""
    return build_marian(tmp_path_factory.mktemp("marian") / "separate", separate=True)
