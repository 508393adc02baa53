"""The text layer (mt.text): texts cut into sentences with their layout kept exactly, every
sentence decoded in one call, translations put back in the layout; and the one policy for
inputs longer than the model's positions (mt.decoding.pieces), without a model."""

from __future__ import annotations

import math

import pytest

from mt.decoding.pieces import fitted_pairs, join_nbest, not_exact
from mt.text import (
    Layout,
    Layouts,
    Translations,
    split_sentences,
    translate_texts,
    translate_texts_nbest,
)

TEXTS = [
    "Hello.",
    "",
    "   ",
    "My little brother is watching TV. He is bankrupt. This machine is worthless.",
    "  Two spaces.  Then two more.\tA tab!  Trailing spaces.   ",
    "First line. Second sentence.\n\nA new paragraph? Yes.\r\nWindows line.\rOld Mac.",
    "Mr. Smith went to Washington, e.g. by train. Dr. Jones stayed home.",
    "No final punctuation here",
    "Unicode line\u2028separator. ¿Qué? 😀 日本.",
    "\n\nStarts with blank lines.\n",
]


class FakeTranslator:
    """A Translator that wraps each sentence in brackets (n-best: <s>, [s], {s}), says a
    sentence holding "short" is short (it has no guard to measure with) and records every
    call it gets."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def translate_nbest(self, texts, decode=None, progress=False, prefixes=None, constraints=None):
        self.calls.append(list(texts))
        nbest = decode.nbest if decode else 1
        forms = [("<{}>", -1.0), ("[{}]", -2.0), ("{{{}}}", -3.0)][:nbest]
        found = [[(form.format(t), score - len(t)) for form, score in forms] for t in texts]
        return Translations(found, ["short" in t for t in texts])


class Decode:
    def __init__(self, nbest: int) -> None:
        self.nbest = nbest


def rebuilt(layout: Layout, sentences: list[str]) -> str:
    return "".join(g + s for g, s in zip(layout.gaps, [*sentences, ""]))


@pytest.mark.parametrize("text", TEXTS)
def test_a_layout_is_the_text_exactly(text):
    layout = Layout.of(text)
    assert len(layout.gaps) == len(layout.sentences) + 1
    assert rebuilt(layout, layout.sentences) == text
    for sentence in layout.sentences:  # no sentence holds a line break or an outer space
        assert sentence == sentence.strip() and sentence.splitlines() == [sentence]
    assert Layout.of(text, split=False).sentences == [text]


def test_sentences_are_found_and_abbreviations_kept():
    assert Layout.of(TEXTS[3]).sentences == [
        "My little brother is watching TV.",
        "He is bankrupt.",
        "This machine is worthless.",
    ]
    assert Layout.of(TEXTS[6]).sentences == [
        "Mr. Smith went to Washington, e.g. by train.",
        "Dr. Jones stayed home.",
    ]
    assert Layout.of("Give it to me. Hold my calls.").sentences == [
        "Give it to me.",
        "Hold my calls.",
    ]
    assert Layout.of(TEXTS[5]).gaps == ["", " ", "\n\n", " ", "\r\n", "\r", ""]
    assert split_sentences("   ") == [] and Layout.of("   ").gaps == ["   "]


def test_a_piece_without_letters_and_an_enumerator_are_layout_not_sentences():
    heading = Layout.of("1. The Tortoise and the Hare")
    assert heading.sentences == ["The Tortoise and the Hare"] and heading.gaps == ["1. ", ""]
    items = Layout.of("3) Yes. (a) No. 2.1. Intro\n— Done.\n2024\n• Go!")
    assert items.sentences == ["Yes.", "No.", "Intro", "Done.", "Go!"]
    assert items.gaps == ["3) ", " (a) ", " 2.1. ", "\n— ", "\n2024\n• ", ""]
    assert Layout.of("2024").sentences == [] and Layout.of("1.").gaps == ["1."]
    assert Layout.of("See section 3. It is there.").sentences == ["See section 3.", "It is there."]
    # spans alone are carried over, not translated: nothing for a model to add words to
    for alone in ("https://example.org/a?b=1", "{{name}}", "bob@example.com", "`make test`"):
        assert Layout.of(alone).sentences == [], alone
    assert Layout.of("Write to bob@example.com.").sentences == ["Write to bob@example.com."]
    translator = FakeTranslator()
    assert translate_texts(translator, ["6. The Crow and the Pitcher", "—"]) == [
        "6. <The Crow and the Pitcher>",
        "—",
    ]


def test_every_sentence_is_decoded_in_one_call_and_put_back_in_its_layout():
    translator = FakeTranslator()
    out = translate_texts(translator, TEXTS)
    layouts = [Layout.of(t) for t in TEXTS]
    assert translator.calls == [[s for layout in layouts for s in layout.sentences]]
    assert out == [rebuilt(lay, [f"<{s}>" for s in lay.sentences]) for lay in layouts]
    assert out[1:3] == ["", "   "]  # empty and blank texts come back as they are
    assert out[5] == "<First line.> <Second sentence.>\n\n<A new paragraph?> <Yes.>\r\n" + (
        "<Windows line.>\r<Old Mac.>"
    )

    translator = FakeTranslator()  # not split: each text whole, as the model read them before
    assert translate_texts(translator, TEXTS, split=False) == [f"<{t}>" for t in TEXTS]
    assert translator.calls == [TEXTS]


class BreakingTranslator(FakeTranslator):
    """Its translations hold line breaks of every kind, as a sampled one may."""

    def translate_nbest(self, texts, decode=None, progress=False, prefixes=None, constraints=None):
        found = super().translate_nbest(texts, decode, progress)
        broken = [[(f"{t}\nx\r\ny\u2028z", score) for t, score in hyps] for hyps in found.nbest]
        return Translations(broken, found.short)


def test_a_sentence_on_one_line_is_translated_on_one_line():
    texts = ["One. Two.", "Line one.\nLine two."]
    one, two = translate_texts(BreakingTranslator(), texts)
    assert one == "<One.> x y z <Two.> x y z"
    assert two == "<Line one.> x y z\n<Line two.> x y z"  # its own line break only
    whole = translate_texts(BreakingTranslator(), texts, split=False)  # the model read them
    assert whole == ["<One. Two.> x y z", "<Line one.\nLine two.>\nx y z"]  # its kind kept
    steered = translate_texts(BreakingTranslator(), texts[:1], prefixes=["a"])
    assert steered == ["<One. Two.> x y z"]  # whole, as a prefix's text is


def test_nbest_of_a_text_joins_each_sentences_kth():
    found = translate_texts_nbest(FakeTranslator(), [" A b. C d. ", ""], Decode(3)).nbest
    assert [text for text, _ in found[0]] == [
        " <A b.> <C d.> ",
        " [A b.] [C d.] ",
        " {A b.} {C d.} ",
    ]
    assert [score for _, score in found[0]] == [-5.0, -6.0, -7.0]  # the mean of the two
    assert found[1][0][0] == "" and math.isnan(found[1][0][1])
    # parts with fewer hypotheses give their last
    joined = join_nbest([[("a", -1.0)], [("b", -1.0), ("c", -3.0)]], ["|"])
    assert joined == [("a|b", -1.0), ("a|c", -2.0)]


def test_layouts_of_many_texts_split_their_sentences_back():
    layouts = Layouts(["One. Two.", "", "Three."])
    assert layouts.sentences == ["One.", "Two.", "Three."]
    found = [[(s.upper(), 0.0)] for s in layouts.sentences]
    assert [x[0][0] for x in layouts.joined(found)] == ["ONE. TWO.", "", "THREE."]


def test_a_text_is_short_where_the_translator_says_a_sentence_of_it_is():
    texts = ["Fine. A short one.", "Fine. Fine too.", "", "short", "Short? Shorter."]
    found = translate_texts_nbest(FakeTranslator(), texts)
    assert found.short == [True, False, False, True, False]
    assert translate_texts_nbest(FakeTranslator(), texts, split=False).short == found.short
    layouts = Layouts(texts)  # the sentences' verdicts, as given: none measured again
    assert len(layouts.sentences) == 7
    flags = [False, True, False, False, False, False, True]
    found = layouts.translations(Translations([[("x", 0.0)]] * 7, flags))
    assert found.short == [True, False, False, False, True]


def test_pairs_too_long_to_score_are_cut_and_named():
    src, tgt = [[1] * 3, [1] * 9, [1] * 2], [[1] * 2, [1] * 2, [1] * 8]
    assert fitted_pairs(src, tgt, 9) == (src, tgt, [])
    cut_src, cut_tgt, cut_ones = fitted_pairs(src, tgt, 5)
    assert cut_ones == [1, 2] and max(map(len, cut_src + cut_tgt)) == 5
    line = not_exact(cut_ones, 5)
    assert "2 pair(s) (2, 3)" in line and "not exactly" in line and "\n" not in line
