"""Several replicas, one service: with `--shared-storage`, Redis (Debian's, started here)
holds the limits' buckets, the key list's revision and the downloads. The store's own
behaviour first, as the in-memory one's; then two `mt serve` processes behind nginx (round
robin, on 127.0.0.1): one limit per key whichever replica a request reaches, each one's
downloads served by the other, and a replica killed under the load of 16 clients costing no
request (nginx sends what it had in flight to the other), then taken back once restarted."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import subprocess
import threading
import time

import pytest

pytest.importorskip("redis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.services import free_port, nginx, redis_server
from helpers.serving import SENTENCES, call, multipart, request, start_cli_server
from mt.errors import ConfigError
from mt.serve import shared
from mt.serve.batcher import BadRequest
from mt.serve.shared import Memory, Shared


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def test_the_shared_store_behaves_as_the_memory_one(redis_url):
    async def both() -> None:
        stores = [Memory(10, 1.0), Shared(redis_url, 10, 1.0)]
        for store in stores:
            await store.open()
        try:
            for store in stores:  # a bucket of 3 requests, then empty: a token in 20 s
                found = [await store.take("key k", [("requests", 3, 1)]) for _ in range(4)]
                assert found[:3] == [None] * 3, store
                kind, size, wait = found[3]
                assert (kind, size) == ("requests", 3) and 19 < wait <= 20
                # two limits: the first is spent even when the second refuses
                assert await store.take("key j", [("requests", 5, 1), ("characters", 9, 10)])
                assert (await store.take("key j", [("requests", 5, 5)]))[2] > 0
                # downloads: the newest kept within the bytes (files kept in one millisecond
                # too: many rounds), none past its time
                for _ in range(20):
                    a = await store.keep("a.txt", b"12345")
                    b = await store.keep("b.txt", b"123456")  # a goes to make room
                    assert (await store.kept(a), await store.kept(b)) == (None, b"123456")
                with pytest.raises(BadRequest, match="more than the 10 kept for downloads"):
                    await store.keep("c.txt", b"x" * 11)
                await asyncio.sleep(1.5)
                assert await store.kept(b) is None
            revision = await stores[1].revision()
            await stores[1].revise()
            assert await stores[1].revision() == revision + 1
        finally:
            for store in stores:
                await store.close()

    asyncio.run(both())


def test_redis_out_of_reach_is_a_503_then_served_again(tmp_path):
    async def scenario(url: str, stop) -> None:
        store = Shared(url, 1 << 20, 60)
        await store.open()
        assert await store.take("address a", [("requests", 9, 1)]) is None
        stop()
        with pytest.raises(BadRequest, match="shared storage unreachable") as refused:
            await store.take("address a", [("requests", 9, 1)])
        assert (refused.value.status, refused.value.retry) == (503, 1)
        await store.close()

    with redis_server(tmp_path) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        def stop() -> None:
            import redis

            redis.Redis(port=port).shutdown(nosave=True)

        asyncio.run(scenario(url, stop))


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/0", "redis://", "redis://host:port/0", "redis://h:6379/db"]
)
def test_a_bad_shared_storage_url_is_one_line(url):
    with pytest.raises(ConfigError, match=r"^--shared-storage .*: expected redis://HOST:PORT/N"):
        shared.check_url(url)
    assert shared.shown("redis://:pw@h:1/0") == "redis://:***@h:1/0"  # no password said
    with pytest.raises(
        ConfigError, match=r"^--shared-storage redis://:\*\*\*@127.0.0.1:1/0: cannot reach it"
    ):
        shared.reachable("redis://:pw@127.0.0.1:1/0")


def test_mt_serve_stops_at_start_in_one_line_without_its_redis(cli_main, model):
    for url, why in [
        ("redis://127.0.0.1:1/0", "cannot reach it (Error 111 connecting to 127.0.0.1:1."),
        ("http://127.0.0.1:1", "expected redis://HOST:PORT/N"),
    ]:
        code, out, err = cli_main("serve", str(model), "--port", "0", "--shared-storage", url)
        assert (code, out, err.count("\n")) == (2, "", 1)
        assert err.startswith(f"mt: error: --shared-storage {url}: {why}"), err


@pytest.fixture(scope="module")
def replicas(model, redis_url, tmp_path_factory):
    """Two `mt serve` processes sharing `redis_url`, behind nginx: (nginx's address, each
    replica's port, the options to start one again)."""
    folder = tmp_path_factory.mktemp("replicas")
    keys = folder / "keys.txt"
    keys.write_text("limited 3\nload\n", encoding="utf-8")
    ports = [free_port(), free_port()]
    options = ["--shared-storage", redis_url, "--api-keys", str(keys)]
    options += ["--trusted-proxies", "127.0.0.1"]
    processes = [start_cli_server(model, "--port", str(p), *options)[0] for p in ports]
    try:
        with nginx(folder, [f"127.0.0.1:{p}" for p in ports]) as front:
            yield front, ports, processes, options
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(15)


def translated(address: str, key: str, text: str = "Hello.") -> tuple[int, str]:
    """(status, the replica that answered: nginx's X-Upstream) of one /translate."""
    body = json.dumps({"q": text, "api_key": key}).encode()
    status, said, _ = request(
        address, "POST", "/translate", {"Content-Type": "application/json"}, body
    )
    return status, said.get("x-upstream", "")


def drained(process: subprocess.Popen) -> list[str]:
    """The lines `process` writes on stderr, read as they come (a pipe nobody reads would
    stop the server once full)."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
    return lines


def test_a_keys_limit_holds_whichever_replica_a_request_reaches(replicas):
    front, ports, _, _ = replicas
    answered = [translated(front, "limited") for _ in range(3)]
    assert [status for status, _ in answered] == [200] * 3
    assert {upstream for _, upstream in answered} == {f"127.0.0.1:{p}" for p in ports}
    assert translated(front, "limited")[0] == 429  # the 4th, through nginx
    for port in ports:  # and straight to each replica
        status, answer, headers = call(
            f"127.0.0.1:{port}", "/translate", {"q": "Hello.", "api_key": "limited"}
        )
        assert (status, answer["error"]) == (429, "too many requests: at most 3 a minute")
        assert 1 <= int(headers["retry-after"]) <= 20


def test_a_file_translated_by_one_replica_is_downloaded_from_the_other(replicas):
    front, ports, _, _ = replicas
    one, other = (f"127.0.0.1:{p}" for p in ports)
    body, kind = multipart("notes.txt", b"Hello.\n\nI love you.\n", api_key="load")
    status, answer, _ = call(one, "/translate_file", body, kind)
    assert status == 200
    url = answer["translatedFileUrl"]
    downloads = [request(address, "GET", url) for address in (other, one, front, front)]
    assert [status for status, _, _ in downloads] == [200] * 4
    assert len({data for _, _, data in downloads}) == 1
    assert downloads[0][2].decode().count("\n") == 3
    assert request(other, "GET", "/download_file/x.notes.txt")[0] == 404


def test_a_replica_killed_under_load_costs_no_request_and_rejoins(model, replicas):
    front, ports, processes, options = replicas
    for process in processes:
        drained(process)
    killed = f"127.0.0.1:{ports[0]}"
    results: list[tuple[int, str]] = []  # (status, upstream) of each request
    stop = threading.Event()

    def client(i: int) -> None:
        connection = http.client.HTTPConnection(front, timeout=60)
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            body = json.dumps({"q": SENTENCES[i % len(SENTENCES)], "api_key": "load"})
            try:
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                results.append((response.status, response.getheader("x-upstream", "")))
            except (OSError, http.client.HTTPException):
                results.append((0, "client"))
                connection.close()
                connection = http.client.HTTPConnection(front, timeout=60)
        connection.close()

    def answered(count: int) -> None:
        deadline = time.monotonic() + 90
        while len(results) < count:
            assert time.monotonic() < deadline, f"{len(results)} requests answered"
            time.sleep(0.02)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in clients:
        thread.start()
    try:
        answered(48)
        processes[0].kill()  # SIGKILL: nothing finished, nothing said
        processes[0].wait()
        answered(len(results) + 48)
        # started again on its port: nginx tries it again after its 2 s and it answers
        restarted, _ = start_cli_server(model, "--port", str(ports[0]), *options)
        processes[0] = restarted
        drained(restarted)
        back = len(results)
        deadline = time.monotonic() + 60
        while not any(upstream == killed for _, upstream in results[back:]):
            assert time.monotonic() < deadline, "the restarted replica got no request"
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in clients:
            thread.join()
    # what the killed replica had in flight, and what the restarted one refused while it
    # loaded (503), nginx sent again to the other (non_idempotent): no request failed
    assert [(status, upstream) for status, upstream in results if status != 200] == []
    again = [upstream for _, upstream in results if upstream.startswith(killed + ", ")]
    assert again, "no request was sent again from the killed replica"
    other = f"127.0.0.1:{ports[1]}"
    assert any(upstream == other for _, upstream in results)
