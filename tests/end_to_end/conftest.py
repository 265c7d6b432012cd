"""Real servers for the end-to-end crash harness: the Kafka-protocol broker of tests/kafka and
the PostgreSQL server of tests/postgres, started once for this directory's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.conftest import Broker, running_broker
from tests.postgres.conftest import Postgres, running_postgres


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_broker(tmp_path_factory.mktemp("tansu")) as running:
        yield running


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server
