"""`mt serve`'s `prefix` field: translations start with it, as `mt translate --prefix` gives
them; a bad one is a 400 to its own request alone."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.serving import call
from mt.serve.requests import JSON_TYPE


def test_a_prefix_starts_each_translation(server):
    address, service = server
    texts = ["Hello.", "Where is the station?"]
    status, answer, _ = call(address, "/translate", {"q": texts, "prefix": "La"})
    assert status == 200, answer
    assert all(text.startswith("La") for text in answer["translatedText"])
    decode = dataclasses.replace(service.first.translator.config.decode, nbest=1)
    want = service.first.translator.translate(texts, decode, prefixes=["La", "La"])
    assert answer["translatedText"] == want
    status, answer, _ = call(address, "/translate", {"q": texts, "prefix": ["", "Me"]})
    assert status == 200 and answer["translatedText"][1].startswith("Me"), answer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"q": "a", "prefix": 3}, "prefix: expected a string or a list of 1 strings, got a number"),
        ({"q": ["a", "b"], "prefix": ["x"]}, "prefix: expected a string or a list of 2 strings"),
        ({"q": "a", "prefix": "muy " * 60}, "text 1: its prefix has"),
    ],
)
def test_a_bad_prefix_is_a_400_to_its_request_alone(server, body, message):
    address, _ = server
    with ThreadPoolExecutor(2) as pool:  # a good request batched with it is answered
        bad = pool.submit(call, address, "/translate", body, JSON_TYPE)
        good = pool.submit(call, address, "/translate", {"q": "Hello."}, JSON_TYPE)
        (status, answer, _), (good_status, _, _) = bad.result(), good.result()
    assert (status, answer["error"][: len(message)]) == (400, message), answer
    assert good_status == 200


def test_a_glossary_puts_its_terms_in_the_translations(server):
    address, service = server
    texts = ["I like music.", "Hello."]
    glossary = {"Music": "música", "dog": "perro"}
    status, answer, _ = call(address, "/translate", {"q": texts, "glossary": glossary})
    assert status == 200, answer
    assert "música" in answer["translatedText"][0]
    want = service.first.translator.translate(texts, constraints=[["música"], []])
    assert answer["translatedText"] == want


@pytest.mark.parametrize(
    ("glossary", "message"),
    [
        (["music", "música"], "glossary: expected an object of source terms to target terms"),
        ({"music": 3}, "glossary: expected an object"),
        ({"music": "música", "Music": "canción"}, "glossary: conflicting constraints for 'Music'"),
        ({"music": " "}, "glossary: 'music': ' ': an empty term"),
        ({"": "música"}, "glossary: '': 'música': an empty term"),
        ({"music": "muy " * 80}, "text 1: its constraints need"),
    ],
)
def test_a_bad_glossary_is_a_400(server, glossary, message):
    address, _ = server
    status, answer, _ = call(address, "/translate", {"q": "I like music.", "glossary": glossary})
    assert (status, answer["error"][: len(message)]) == (400, message), answer
