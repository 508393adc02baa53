"""Real text through every door (issue 51): numbers, dates, times, URLs, e-mail addresses and
placeholders come back verbatim exactly once through `mt translate`, `/translate` and a .docx
made by pandoc, and a numbered heading keeps its number and is translated as its words alone
(no sentence made of "1."). A tiny model trained with placeholders: what it does not carry
over is put back and counted (`placed`), so the spans are exact whatever it learned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.documents import need, plain
from helpers.runs import tiny_trained
from helpers.serving import call, loader, serving, wait_ready

SPANS = [
    "10:30",
    "2024-05-01",
    "https://example.org/a?b=1",
    "bob@example.com",
    "{{name}}",
    "%d",
    "`make test`",
    "3.5",
]
TEXT = (
    "The meeting is at 10:30 on 2024-05-01, see https://example.org/a?b=1 or mail "
    "bob@example.com. Hello {{name}}, you have %d messages. Run `make test` with 3.5 GB."
)
HEADINGS = ["The Tortoise and the Hare", "The Crow and the Pitcher"]
MARKDOWN = f"# 1. {HEADINGS[0]}\n\n{TEXT}\n\n# 6. {HEADINGS[1]}\n\nThe cat sleeps.\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_trained(
        tmp_path_factory.mktemp("real"), "tokenizer.placeholders=8", "train.placeholders=0.5"
    )


def each_once(text: str, spans: list[str] = SPANS) -> dict[str, int]:
    """The `spans` not found exactly once in `text`, with their counts."""
    return {span: text.count(span) for span in spans if text.count(span) != 1}


def test_spans_come_back_once_through_mt_translate_translate_and_a_docx(cli_main, model, tmp_path):
    code, out, _ = cli_main("translate", "--checkpoint", str(model), TEXT)
    assert code == 0 and each_once(out) == {}
    with serving(loader(model), batch_wait_ms=10) as (address, _):
        wait_ready(address)
        status, answer, _ = call(address, "/translate", {"q": [TEXT, "The cat sleeps."]})
    assert status == 200 and answer["translatedText"][0] == out.rstrip("\n")
    assert each_once(answer["translatedText"][0]) == {}
    assert answer["placed"][1] == 0 and answer["placed"][0] >= 0
    source = tmp_path / "fables.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    docx = tmp_path / "fables.docx"
    subprocess.run([need("pandoc"), str(source), "-o", str(docx)], check=True)
    translated = tmp_path / "fabulas.docx"
    code, _, err = cli_main(
        "translate", "--checkpoint", str(model), "--file", str(docx), "--out", str(translated)
    )
    assert code == 0, err
    lines = plain(translated)
    assert len(lines) == len(plain(docx)) == 4
    assert each_once(lines[1], [s for s in SPANS if "`" not in s]) == {}  # code: a style
    titles = [cli_main("translate", "--checkpoint", str(model), h)[1].strip() for h in HEADINGS]
    assert [lines[0], lines[2]] == [f"1. {titles[0]}", f"6. {titles[1]}"]
