"""`mt serve` with several models: en→es and es→en behind one LibreTranslate API (two
models, or one model of both directions serving each), routed by `source` and `target`,
`source: auto` routed by the detected language, a pair no model serves refused naming the
pairs, LibreTranslate's clients both ways, the page's language switch in headless Chromium,
and two models of one pair refused at start. Tiny models: the asserts are about routing,
each answer against the model that must give it."""

from __future__ import annotations

import dataclasses
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.runs import tiny_trained
from helpers.serving import (
    ENGLISH,
    SPANISH,
    call,
    headless_chromium,
    loader,
    serving,
    wait_ready,
)
from mt.decoding.engine import Translator
from mt.text import translate_texts

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def reverse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Spanish→English model."""
    return tiny_trained(tmp_path_factory.mktemp("reverse"), "data.src_lang=es", "data.tgt_lang=en")


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model of both directions (data.both_directions)."""
    return tiny_trained(tmp_path_factory.mktemp("both_ways"), "data.both_directions=true")


@pytest.fixture(scope="module", params=["two models", "one model of both directions"])
def both(request, model: Path) -> Iterator[tuple[str, object]]:
    """A server of en→es and es→en: two models, or one model of both directions."""
    if request.param == "two models":
        models = [loader(model), loader(request.getfixturevalue("reverse"))]
    else:
        models = [loader(request.getfixturevalue("both_ways"))]
    with serving(*models, batch_wait_ms=0) as (address, service):
        wait_ready(address)
        yield address, service


def test_one_model_of_both_directions_serves_each_from_the_same_weights(both_ways):
    with serving(loader(both_ways)) as (address, service):
        wait_ready(address)
        forward, backward = (m.translator for m in service.models)
        assert [m.pair for m in service.models] == [("en", "es"), ("es", "en")]
        assert backward.model is forward.model  # one copy in memory
        models = call(address, "/info")[1]["models"]
        assert [m["config"]["decode"]["target_language"] for m in models] == ["es", "en"]


def alone(translator: Translator, text: str) -> str:
    return translator.translate([text])[0]


def test_languages_lists_each_source_with_its_targets_as_libretranslate(both):
    address, _ = both
    assert call(address, "/languages")[1] == [
        {"code": "en", "name": "English", "targets": ["es"]},
        {"code": "es", "name": "Spanish", "targets": ["en"]},
    ]
    info = call(address, "/info")[1]
    assert [(m["source"], m["target"]) for m in info["models"]] == [("en", "es"), ("es", "en")]
    assert info["serve"]["workers"] == 2  # one bound for both


def test_each_pair_goes_to_its_model_and_auto_by_the_detected_language(both):
    address, service = both
    forward, backward = (m.translator for m in service.models)
    answer = call(address, "/translate", {"q": ENGLISH, "source": "en", "target": "es"})[1]
    assert answer["translatedText"] == alone(forward, ENGLISH)
    answer = call(address, "/translate", {"q": SPANISH, "source": "es", "target": "en"})[1]
    assert answer["translatedText"] == alone(backward, SPANISH)
    answer = call(address, "/translate", {"q": SPANISH, "source": "es"})[1]  # its own target
    assert answer["translatedText"] == alone(backward, SPANISH)
    answer = call(address, "/translate", {"q": [ENGLISH, SPANISH], "source": "auto"})[1]
    assert answer["translatedText"] == [alone(forward, ENGLISH), alone(backward, SPANISH)]
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "es"]
    # a Spanish text asked for in Spanish: no model takes it, it comes back as it is
    answer = call(address, "/translate", {"q": SPANISH, "source": "auto", "target": "es"})[1]
    assert (answer["translatedText"], answer["detectedLanguage"]["language"]) == (SPANISH, "es")


def test_a_pair_no_model_serves_is_a_400_naming_the_pairs(both):
    address, _ = both
    served = "(pairs served: en→es, es→en)"
    for body, message in (
        ({"q": "Hi.", "source": "fr", "target": "es"}, f"source: 'fr' is not served {served}"),
        ({"q": "Hi.", "source": "en", "target": "de"}, f"target: 'de' is not served {served}"),
        ({"q": "Hi.", "source": "en", "target": "en"}, "source, target: en→en is not served"),
    ):
        status, answer, _ = call(address, "/translate", body)
        assert (status, answer["error"][: len(message)]) == (400, message)


def test_both_libretranslate_clients_translate_both_ways(both, tmp_path):
    address, service = both
    forward, backward = (m.translator for m in service.models)
    lt_py = pytest.importorskip("libretranslatepy").LibreTranslateAPI(f"http://{address}")
    assert lt_py.translate(ENGLISH, "en", "es") == alone(forward, ENGLISH)
    assert lt_py.translate(SPANISH, "es", "en") == alone(backward, SPANISH)
    lt = pytest.importorskip("libretranslate_aio")
    with lt.LibreTranslate(f"http://{address}") as client:
        assert client.translate(SPANISH, "es", "en").translated_text == alone(backward, SPANISH)
        assert client.translate(ENGLISH, "auto", "es").translated_text == alone(forward, ENGLISH)
        file = tmp_path / "a.txt"
        file.write_text(f"{SPANISH}\n", encoding="utf-8")
        url = client.translate_file(file, "es", "en").translated_file_url
    with urllib.request.urlopen(f"http://{address}{url}") as got:
        assert got.read().decode() == f"{alone(backward, SPANISH)}\n"


def as_page(translator: Translator, text: str) -> str:
    """`text` translated as the page asks by default (two alternatives, so three best of a
    beam of three), as the server translates a text (mt.text: a segment with no letters kept
    as it is)."""
    decode = dataclasses.replace(translator.config.decode, beam=3, nbest=3)
    return translate_texts(translator, [text], decode)[0]


def shown(text: str) -> str:
    """`text` as a page shows it: a browser renders a run of spaces as one."""
    return " ".join(text.split())


def test_the_page_switches_and_swaps_languages_in_headless_chromium(both, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    address, service = both
    forward, backward = (m.translator for m in service.models)
    with headless_chromium(tmp_path) as driver:
        driver.get(f"http://{address}/")
        wait = WebDriverWait(driver, 30)
        target = lambda d: d.find_element(By.ID, "target").text  # noqa: E731
        wait.until(lambda d: d.find_element(By.ID, "from").get_attribute("value") == "en")
        assert driver.find_element(By.ID, "pair").text == "English → Spanish"
        driver.find_element(By.ID, "source").send_keys(ENGLISH)
        wait.until(lambda d: target(d) == shown(as_page(forward, ENGLISH)))
        driver.find_element(By.ID, "swap").click()  # es→en, the translation now the text
        spanish = as_page(forward, ENGLISH)
        assert driver.find_element(By.ID, "source").get_attribute("value") == spanish
        wait.until(lambda d: target(d) == shown(as_page(backward, spanish)))
        assert driver.find_element(By.ID, "pair").text == "Spanish → English"
        Select(driver.find_element(By.ID, "from")).select_by_value("auto")
        source = driver.find_element(By.ID, "source")
        source.clear()
        source.send_keys(SPANISH)
        wait.until(lambda d: target(d) == shown(as_page(backward, SPANISH)))
        assert driver.find_element(By.ID, "detected").text == "Detected: Spanish"
        assert driver.find_element(By.ID, "error").text == ""


def test_two_models_of_one_pair_stop_the_server_with_one_line(model):
    with serving(loader(model), loader(model)) as (address, service):
        deadline = time.monotonic() + 60
        while service.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        status, answer, _ = call(address, "/health")
    assert (status, answer["error"]) == (503, "the model failed to load")
    assert str(service.error) == "run and run both translate en→es: serve one of them"
