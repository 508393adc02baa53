"""The container (issue 53): the Dockerfile's image built by podman from a Debian base made
here by mmdebstrap (this machine reaches no image registry), with no network (every wheel
from a folder of the build context), a model baked in; run, it answers /health and
/translate as `mt serve` does in-process, as a user other than root, and its HEALTHCHECK
passes. Skipped, saying why, where podman or mmdebstrap is missing or cannot run a
container. compose.yaml and docker/nginx.conf are checked for what they promise."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from helpers.services import free_port
from helpers.serving import call, start_cli_server
from mt.serve.shared import check_url

ROOT = Path(__file__).resolve().parents[2]
# the base: Debian's Python 3.11, its venv, useradd and the C++ runtime (numpy's, torch's),
# made here (no registry), tagged by its recipe (a base of another recipe is made anew)
DEBIAN = ["--variant=essential", "--include=python3,python3-venv,passwd,libstdc++6", "bookworm"]
BASE = f"localhost/mt-base:{hashlib.sha256(' '.join(DEBIAN).encode()).hexdigest()[:12]}"
IMAGE = "localhost/mt-serve:test"
CONTEXT = ["Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "LICENSE", "mt", "docker"]


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


# podman's default limits (1,048,576 files, 4,194,304 processes) are above what root may raise
# them to here (no CAP_SYS_RESOURCE; conmon runs with 32,768 processes): these suit mt serve
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory):
    """`podman VERB` with what this machine needs to run a container, once the base image
    exists: runc where installed (crun refuses cgroups v1 beside a v2 controller), LIMITS."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make install: podman, mmdebstrap, runc)")
    runtime = ["--runtime", "runc"] if shutil.which("runc") else []

    def command(verb: str) -> list[str]:
        return ["podman", *runtime, verb, *LIMITS]

    if run(["podman", "image", "exists", BASE], 60).returncode != 0:
        if shutil.which("mmdebstrap") is None:
            pytest.skip("mmdebstrap is not installed: no Debian base to build from")
        tar = tmp_path_factory.mktemp("base") / "base.tar"
        made = run(["mmdebstrap", *DEBIAN, str(tar)], 900)
        if made.returncode != 0:
            pytest.skip(f"mmdebstrap could not make a Debian base: {last_line(made)}")
        assert run(["podman", "import", str(tar), BASE], 300).returncode == 0
    tried = run([*command("run"), "--rm", "--network=none", BASE, "true"], 120)
    if tried.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {last_line(tried)}")
    return command


# what the image's Python needs beside mt[serve]'s own: torch's CPU wheel, setuptools to build
# mt, and what a requirement asks for only below this Python's patch release (redis wants
# async-timeout before 3.11.3; bookworm's is 3.11.2)
WHEELS = ["torch==2.13.0", "setuptools>=77", "async-timeout>=4.0.3"]


def wheels(cache: Path) -> Path:
    """Every wheel mt[serve] needs, and WHEELS: made once (pytest's cache) from this
    machine's index, for this Python, whose minor version is the image's; made again when
    pyproject.toml (mt's requirements) or WHEELS change."""
    recipe = (ROOT / "pyproject.toml").read_bytes() + " ".join(WHEELS).encode()
    folder = cache / f"container-wheels-{hashlib.sha256(recipe).hexdigest()[:12]}"
    if not any(folder.glob("torch-*.whl")):
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(folder)]
        done = run([*command, *WHEELS, f"{ROOT}[serve]"], 1800)
        assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.fixture(scope="module")
def image(podman, model, request, tmp_path_factory: pytest.TempPathFactory):
    """The image built from a context of the checkout's files, the wheels and the model."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the wheels are this Python's, and the image's is Debian bookworm's 3.11")
    context = tmp_path_factory.mktemp("context")
    for name in CONTEXT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, context / name)
    shutil.copytree(wheels(Path(request.config.cache.mkdir("mt"))), context / "wheels")
    shutil.copytree(model, context / "model")
    arguments = [f"BASE={BASE}", "WHEELS=wheels", "MODEL=model"]
    build = [*podman("build"), "--format", "docker", "--network", "none", "--pull=never"]
    build.append("--layers=false")  # no image of the build stage left behind
    build += [f"--build-arg={argument}" for argument in arguments]
    built = run([*build, "-t", IMAGE, str(context)], 1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    yield IMAGE
    run(["podman", "rmi", "-f", IMAGE], 300)


def test_the_image_answers_health_and_translate_as_mt_serve_does(podman, image, server):
    port, name = free_port(), f"mt-test-{uuid.uuid4().hex[:8]}"
    environment = ["-e", "MT_SERVE_HOST=127.0.0.1", "-e", f"MT_SERVE_PORT={port}"]
    # the host's network, the server on its loopback only
    started = run(
        [*podman("run"), "-d", "--name", name, "--network", "host", *environment, image], 120
    )
    assert started.returncode == 0, started.stderr
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while not _healthy(address):
            state = run(["podman", "inspect", "-f", "{{.State.Running}}", name], 60).stdout
            assert state.strip() == "true", run(["podman", "logs", name], 60).stderr[-3000:]
            assert time.monotonic() < deadline, "the container's server was not ready in 300 s"
            time.sleep(1)
        texts = {"q": ["Hello.", "I love the cat."]}
        status, answer, _ = call(address, "/translate", texts)
        local = call(server[0], "/translate", texts)[1]
        assert status == 200 and answer.pop("seconds") > 0 and local.pop("seconds") > 0
        assert answer == local and len(answer["translatedText"]) == 2
        assert run(["podman", "healthcheck", "run", name], 120).returncode == 0
        assert run(["podman", "exec", name, "id", "-un"], 60).stdout.strip() == "mt"
    finally:
        run(["podman", "rm", "-f", name], 120)


def _healthy(address: str) -> bool:
    try:
        return call(address, "/health")[0] == 200
    except OSError:
        return False


def test_the_image_says_its_user_port_and_health_check(podman, image):
    found = run(["podman", "image", "inspect", image], 60)
    (data,) = json.loads(found.stdout)
    config = data["Config"]
    assert config["User"] == "mt" and "5000/tcp" in config["ExposedPorts"]
    assert "MT_SERVE_CHECKPOINTS=/model" in config["Env"]
    health = data.get("Healthcheck") or config["Healthcheck"]  # podman's place, docker's
    assert "/health" in " ".join(health["Test"])


def test_compose_runs_replicas_behind_nginx_round_robin_with_redis():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"mt1", "mt2", "redis", "nginx"}
    assert services["mt1"] == services["mt2"] and services["mt1"]["build"] == "."
    upstream = (ROOT / "docker" / "nginx.conf").read_text(encoding="utf-8")
    port = re.search(r"MT_SERVE_PORT=(\d+)", (ROOT / "Dockerfile").read_text())[1]
    servers = re.findall(r"^\s*server (\S+?)(?: |;)", upstream, re.MULTILINE)
    assert servers == [f"mt1:{port}", f"mt2:{port}"]  # round robin: no ip_hash, no least_conn
    assert not re.search(r"^\s*(ip_hash|least_conn|hash)\b", upstream, re.MULTILINE)
    assert "./docker/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in services["nginx"]["volumes"]
    from typer.main import get_command

    from mt.cli import app

    names = {p.name for p in get_command(app).commands["serve"].params}
    for variable in services["mt1"]["environment"]:  # each an option of mt serve
        assert variable.removeprefix("MT_SERVE_").lower() in names, variable
    storage = services["mt1"]["environment"]["MT_SERVE_SHARED_STORAGE"]  # the replicas share
    assert storage == "redis://redis:6379/0" and check_url(storage)  # Redis's own port


def test_the_health_check_follows_the_url_prefix(model):
    """The Dockerfile's HEALTHCHECK command, run here against `mt serve` under /mt: it passes
    with the prefix the server has, from MT_SERVE_URL_PREFIX as the server reads it, and
    fails without."""
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    command = json.loads(re.search(r"^HEALTHCHECK .*\\\n\s*CMD (\[.*\])$", dockerfile, re.M)[1])
    assert command[0] == "python3"
    process, address = start_cli_server(model, "--url-prefix", "mt/")
    try:
        port = address.split(":")[1]
        for prefix, code in (("mt", 0), ("/mt/", 0), ("", 1), ("other", 1)):
            environment = {"MT_SERVE_PORT": port, "MT_SERVE_URL_PREFIX": prefix}
            done = subprocess.run(
                [sys.executable, *command[1:]], env=environment, check=False, capture_output=True
            )
            assert (done.returncode != 0) == bool(code), (prefix, done.stderr[-300:])
    finally:
        process.terminate()
        process.wait(15)
