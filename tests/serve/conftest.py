"""The serve tests' fixtures: a tiny trained model, trained once a session, and an in-process
server of it, one a test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.runs import tiny_trained


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_trained(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[tuple[str, object]]:
    """(its address, its Service): starlette and uvicorn are imported here, so that a folder
    whose tests skip without them can still be collected."""
    from helpers.serving import loader, serving, wait_ready

    with serving(loader(model), batch_wait_ms=50) as (address, service):
        wait_ready(address)
        yield address, service
