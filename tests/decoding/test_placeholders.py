"""Spans carried over (mt.data.spans, mt.decoding.placeholders): what is a span, a source's
spans as placeholders and back, a lost one forced or put back by its neighbours, and the
Translator that does it for every caller."""

from __future__ import annotations

from mt.config import Config
from mt.data.spans import spans
from mt.decoding.engine import Translator
from mt.decoding.placeholders import Protected

LINE = (
    "The meeting is at 10:30 on 2024-05-01, see https://example.org/a?b=1 or mail "
    "bob@example.com. Hello {{name}}, you have %d messages: run `make test` and {0}."
)


def found(text: str) -> list[str]:
    return [text[a:b] for a, b in spans(text)]


def test_every_kind_of_span_is_found_whole_and_punctuation_stays_out():
    assert found(LINE) == [
        "10:30",
        "2024-05-01",
        "https://example.org/a?b=1",
        "bob@example.com",
        "{{name}}",
        "%d",
        "`make test`",
        "{0}",
    ]
    assert found("It costs 1,000.50 and 3 more, not 3rd or v2.") == ["1,000.50", "3"]
    assert found("50% off, 100 % sure") == ["50", "100"]  # numbers, no printf
    assert found("See www.example.com/x, or ftp://a.b/c.") == ["www.example.com/x", "ftp://a.b/c"]
    assert found("no spans here") == []


def test_hostile_text_gives_its_spans_and_no_more():
    assert spans("a" * 50_000 + "@") == []
    assert spans("1" * 40 + "x") == []  # a number glued to a word is none
    assert len(spans("%" * 10_000)) == 0
    assert len(spans("www." * 1000)) == 1


def test_a_source_gives_placeholders_in_order_and_they_come_back_as_its_spans():
    p = Protected.of(LINE, 16)
    assert p.text.startswith("The meeting is at ⦅1⦆ on ⦅2⦆, see ⦅3⦆ or mail ⦅4⦆.")
    assert len(p.spans) == 8
    translation = "La reunión es a las ⦅1⦆ del ⦅2⦆, ver ⦅3⦆ o ⦅4⦆. Hola ⦅5⦆, ⦅6⦆: ⦅7⦆ y ⦅8⦆."
    restored, amiss = p.restore(translation)
    assert amiss == 0
    assert restored == (
        "La reunión es a las 10:30 del 2024-05-01, ver https://example.org/a?b=1 o "
        "bob@example.com. Hola {{name}}, %d: `make test` y {0}."
    )
    assert Protected.of(LINE, 2).spans == ("10:30", "2024-05-01")  # the rest stay text
    assert Protected.of(LINE, 0).text == LINE


def test_a_lost_span_goes_where_its_neighbours_are_a_repeated_one_once():
    p = Protected.of("Call 555 at 10:30 or 11:00.", 8)
    assert p.text == "Call ⦅1⦆ at ⦅2⦆ or ⦅3⦆."
    assert p.restore("Llama al ⦅1⦆ a las ⦅3⦆.") == ("Llama al 555 10:30 a las 11:00.", 1)
    assert p.restore("Llama al ⦅1⦆ a las ⦅2⦆ o ⦅2⦆ ⦅3⦆.") == (
        "Llama al 555 a las 10:30 o 11:00.",
        1,
    )
    assert p.restore("Llama ya.") == ("555 10:30 11:00 Llama ya.", 3)
    assert p.restore("⦅1⦆ ⦅2⦆ ⦅3⦆ ⦅9⦆") == ("555 10:30 11:00", 1)  # made up: out
    assert Protected.of("No spans.", 8).restore("Ninguno ⦅1⦆.") == ("Ninguno .", 1)


class Scripted(Translator):
    """A translator whose model answers from a script: each source's translation, and with
    constraints (the lost placeholders forced) another."""

    engine = "scripted"

    def __init__(self, answers: dict, forced: dict, can_force: bool = True) -> None:
        config = Config()
        config.tokenizer.placeholders = 8
        config.decode.coverage = 0.0
        super().__init__(config, "cpu", None, (None, None))
        self.answers, self.forced, self.can_force = answers, forced, can_force
        self.asked = []

    def decoding(self, decode):
        return decode or self.config.decode

    def forces(self, decode):
        return self.can_force

    def _pieces_nbest(self, texts, decode, progress, prefixes, constraints):
        self.asked.append((list(texts), constraints))
        table = self.forced if constraints else self.answers
        return [[(table[t], -1.0)] for t in texts]

    def _with(self, config):
        raise NotImplementedError

    def _decode(self, *args):
        raise NotImplementedError

    def _metadata(self):
        return {}

    def run_dir(self):
        raise NotImplementedError

    def _described(self):
        raise NotImplementedError


def test_the_translator_forces_what_was_lost_then_puts_back_what_still_is(monkeypatch):
    import mt.decoding.engine as engine

    class Unguarded:
        def guarded(self, translate, texts, decode):
            return translate(range(len(texts)), decode), [False] * len(texts), [0] * len(texts)

    monkeypatch.setattr(engine.Translator, "coverage", Unguarded())
    sources = ["Call 555 now.", "Meet at 10:30 or 11:00.", "Hello."]
    answers = {
        "Call ⦅1⦆ now.": "Llama ya.",
        "Meet at ⦅1⦆ or ⦅2⦆.": "Nos vemos a las ⦅1⦆ o ⦅2⦆.",
        "Hello.": "Hola.",
    }
    forced = {"Call ⦅1⦆ now.": "Llama al ⦅1⦆ ya."}
    translator = Scripted(answers, forced)
    found = translator.translate_nbest(sources)
    assert [h[0][0] for h in found.nbest] == [
        "Llama al 555 ya.",
        "Nos vemos a las 10:30 o 11:00.",
        "Hola.",
    ]
    assert found.placed == [0, 0, 0]
    assert translator.asked[1] == (["Call ⦅1⦆ now."], [["⦅1⦆"]])  # only the lost one, forced
    unforced = Scripted(answers, forced, can_force=False)
    found = unforced.translate_nbest(sources)
    assert found.nbest[0][0][0] == "Llama 555 ya." and found.placed == [1, 0, 0]
    assert len(unforced.asked) == 1
