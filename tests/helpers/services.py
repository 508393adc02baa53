"""The daemons the serve tests run as people run them beside `mt serve`, each Debian's, on
127.0.0.1 and a free port, its files in a test's folder, stopped after: Redis, nginx in front
of replicas, a Prometheus server scraping one. Each skips, saying why, where it is missing."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    """A port of 127.0.0.1 free now (a daemon that cannot take port 0 is given it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def program(name: str, package: str) -> str:
    """The path of Debian's `name`, or a skip naming the package that has it."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.skip(f"no {name}: apt-get install -y {package} (make install installs it)")
    return found


@contextmanager
def running(command: list[str], ready, what: str, seconds: float = 30) -> Iterator[None]:
    """`command` run until the block ends (then stopped: SIGTERM, SIGKILL after 10 s), once
    `ready()`; a failure naming `what` if it exits or time runs out first."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + seconds
        while not ready():
            if process.poll() is not None:
                why = process.stderr.read()[-2000:]
                pytest.fail(f"{what} exited ({process.returncode}): {why}")
            assert time.monotonic() < deadline, f"{what} was not ready in {seconds} s"
            time.sleep(0.05)
        yield
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def answers(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def ready(url: str) -> bool:
    """Whether `url` answers 200 (a daemon still starting answers 503, or nothing)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:  # refused, or an HTTPError
        return False


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A Redis of its own, nothing saved to disk: its URL, redis://127.0.0.1:PORT/0."""
    binary = program("redis-server", "redis-server")
    port = free_port()
    options = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with running([binary, *options, "--dir", str(folder)], lambda: answers(port), "redis-server"):
        yield f"redis://127.0.0.1:{port}/0"


NGINX = """
daemon off;
master_process off;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    upstream mt {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 1m;
        location / {{
            proxy_pass http://mt;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_read_timeout 300s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            add_header X-Upstream $upstream_addr always;  # which replica answered
        }}
    }}
}}
"""


@contextmanager
def nginx(folder: Path, replicas: list[str]) -> Iterator[str]:
    """nginx on 127.0.0.1 in front of `replicas` (their addresses), round robin, each
    skipped for 2 s once it fails (as docker/nginx.conf, with compose's 5 s), saying which
    replica answered in X-Upstream: its address."""
    binary = program("nginx", "nginx")
    port = free_port()
    servers = "\n".join(f"        server {r} max_fails=1 fail_timeout=2s;" for r in replicas)
    config = folder / "nginx.conf"
    config.write_text(NGINX.format(folder=folder, servers=servers, port=port))
    command = [binary, "-c", str(config), "-p", str(folder), "-e", str(folder / "error.log")]
    with running(command, lambda: answers(port), "nginx"):
        yield f"127.0.0.1:{port}"


PROMETHEUS = """
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: mt
    metrics_path: {path}
    authorization:
      credentials: {token}
    static_configs:
      - targets: ["{target}"]
"""


@contextmanager
def prometheus(folder: Path, target: str, path: str, token: str) -> Iterator[str]:
    """A Prometheus server scraping `target`'s `path` every second with the bearer `token`:
    its address, for its HTTP API."""
    binary = program("prometheus", "prometheus")
    port = free_port()
    config = folder / "prometheus.yml"
    config.write_text(PROMETHEUS.format(path=path, token=token, target=target))
    options = [
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(
        [binary, *options], lambda: ready(f"http://127.0.0.1:{port}/-/ready"), "prometheus", 60
    ):
        yield f"127.0.0.1:{port}"


def prometheus_query(address: str, query: str) -> list[dict]:
    """The result of an instant `query` of the Prometheus at `address`."""
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())["data"]["result"]
