"""`mt serve` as a person meets it: the page in headless Chromium, the command in a process of
its own under SIGTERM, its one-line errors."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import signal
import socket
import threading
import time

import pytest

from helpers.corpus import PAIRS
from helpers.serving import (
    SENTENCES,
    call,
    expected,
    headless_chromium,
    start_cli_server,
)


def test_the_page_translates_as_you_type_in_headless_chromium(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with headless_chromium(tmp_path) as driver:
        address, service = server
        driver.get(f"http://{address}/")
        WebDriverWait(driver, 30).until(lambda d: "step 60" in d.find_element(By.ID, "model").text)
        driver.find_element(By.ID, "source").send_keys("Hello.\nI love you.")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_element(By.ID, "status").text.endswith("beam 3"))
        found = expected(service, ["Hello.", "I love you."], beam=3, nbest=3)  # 2 alternatives
        target = driver.find_element(By.ID, "target").text
        assert target == "\n".join(hyps[0][0] for hyps in found)
        rows = driver.find_elements(By.CSS_SELECTOR, "#alternatives li .text")
        shown = [" ".join(text.split()) for hyps in found for text, _ in hyps]  # as HTML shows it
        assert [row.text for row in rows] == shown
        assert driver.find_element(By.ID, "error").text == ""
        assert driver.save_screenshot(str(tmp_path / "page.png"))


def test_sigterm_under_load_answers_every_request_in_flight_and_exits_0(model):
    process, address = start_cli_server(model, "--batch-wait-ms", "2000")
    answers: list[int] = []
    failures: list[str] = []

    def client(text: str, loop: bool) -> None:
        while True:
            try:
                status, answer, _ = call(address, "/translate", {"q": text})
            except OSError as e:  # refused or closed: the server stopped before reading it
                failures.append(type(e).__name__)
                return
            answers.append(status)
            assert status == 200 and "translatedText" in answer, answer
            if not loop:
                return

    # 4 clients in a loop and 8 single requests, all waiting in the decoder's 2-second window
    looping = [threading.Thread(target=client, args=(t, True)) for t in SENTENCES[:4]]
    waiting = [threading.Thread(target=client, args=(p[0], False)) for p in PAIRS[:8]]
    for thread in looping + waiting:
        thread.start()
    deadline = time.monotonic() + 30
    while call(address, "/health")[1]["pending"] < len(looping + waiting):
        assert time.monotonic() < deadline, "the requests never were all in flight at once"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert process.wait(10) == 0
    assert time.monotonic() - stopped < 10
    for thread in looping + waiting:
        thread.join()
    log = process.stderr.read()
    assert "SIGTERM: finishing" in log and "stopped" in log and "Traceback" not in log
    # every request the server answered reached its client, each in-flight one among them
    assert answers.count(200) == len(answers) >= 8
    assert log.count('"POST /translate" 200') == len(answers)


def test_cli_errors_are_one_line(cli_main, model):
    code, _, err = cli_main("serve", "/nowhere", "--port", "0")
    assert code == 2 and err.splitlines()[-1].startswith("mt: error: /nowhere: no checkpoint")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, _, err = cli_main("serve", str(model), "--port", port)
    why = "cannot listen (Address already in use)"
    assert (code, err) == (2, f"mt: error: 127.0.0.1:{port}: {why}\n")
    code, _, err = cli_main("serve", str(model), "--max-texts", "0")
    assert (code, err) == (2, "mt: error: --max-texts 0: must be at least 1\n")
    code, _, err = cli_main("serve", str(model), "--port", "0", "--set", "decode.beam=0")
    assert code == 2 and err.splitlines()[-1].startswith("mt: error: decoding options: decode")
