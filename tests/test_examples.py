"""Every pipeline in examples/ compiles and runs to the end; the one that reads Kafka and writes
PostgreSQL runs with `clink run` against servers the test starts, and is checked against DuckDB."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import clink
import shared_duckdb
from clink.runtime.context import RuntimeContext

# Examples that reach servers; the others run as they are.
WITH_SERVERS = {"kafka_to_postgres.sql"}
EXAMPLES = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.sql") if p.name not in WITH_SERVERS)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    out = io.StringIO()
    result = clink.sql(path.read_text(), name=path.name, context=RuntimeContext(stdout=out))
    metrics = result.run()
    assert sum(metrics.records_out.values()) > 0


def test_quickstart_prints_the_expected_rows() -> None:
    out = io.StringIO()
    text = (Path(__file__).parent.parent / "examples" / "quickstart.sql").read_text()
    clink.sql(text, context=RuntimeContext(stdout=out)).run()
    # 20 generated orders (seed 42, so the rows are known), those above 10 kept, as README shows.
    assert out.getvalue().splitlines() == QUICKSTART_ROWS


QUICKSTART_ROWS = [
    "+I[1, 22.78, H6]", "+I[2, 20.78, RT]", "+I[3, 59.66, NF]", "+I[4, 48.27, 9T]", "+I[5, 17.66, TW]",
    "+I[6, 81.52, JB]", "+I[7, 67.61, BC]", "+I[8, 44.13, 7P]", "+I[9, 19.01, V4]", "+I[10, 23.71, S6]",
    "+I[11, 25.6, I8]", "+I[12, 29.63, XN]", "+I[13, 72.45, UK]", "+I[14, 49.46, QA]", "+I[15, 77.53, T6]",
    "+I[16, 29.15, DX]", "+I[17, 23.94, Y2]", "+I[18, 23.36, NR]", "+I[19, 62.55, RU]", "+I[20, 85.14, AO]",
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A Kafka-protocol broker and a PostgreSQL server, as tests/kafka and tests/postgres start them."""
    from tests.kafka.conftest import running_broker
    from tests.postgres.conftest import running_postgres

    with running_broker(tmp_path_factory.mktemp("tansu")) as broker, running_postgres() as postgres:
        yield broker, postgres


def page_views(count: int, seed: int) -> pa.Table:
    """Page views about one a second, each up to 4 s late (inside the example's 5 s watermark delay),
    a fifth of them with no user."""
    rng = random.Random(seed)
    start = dt.datetime(2024, 5, 1, 9, 58)
    ts = [start + dt.timedelta(milliseconds=i * 1000 - rng.randrange(4000)) for i in range(count)]
    return pa.table({
        "user_id": pa.array([None if rng.random() < 0.2 else rng.randrange(30) for _ in range(count)], pa.int64()),
        "page": pa.array([rng.choice(["/", "/cart", "/search", "/item/7"]) for _ in range(count)]),
        "ts": pa.array(ts, pa.timestamp("ms")),
    })


def test_kafka_to_postgres_example_matches_duckdb(servers, tmp_path: Path) -> None:
    broker, postgres = servers
    events = page_views(600, seed=3)
    topic = broker.topic(partitions=3)
    broker.produce(topic, [(None, json.dumps({"user_id": r["user_id"], "page": r["page"],
                                              "ts": r["ts"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}).encode())
                           for r in events.to_pylist()])
    database = postgres.new_database()
    postgres.execute(database, "CREATE TABLE page_view_counts (window_start timestamp(3), window_end timestamp(3), "
                               "page text, views bigint, users bigint, last_view timestamp(3), "
                               "PRIMARY KEY (window_start, window_end, page))")
    # The example names the conventional local addresses; point them at this test's servers.
    text = (Path(__file__).parent.parent / "examples" / "kafka_to_postgres.sql").read_text()
    for old, new in [("'topic' = 'page_views'", f"'topic' = '{topic}'"),
                     ("'localhost:9092'", f"'{broker.servers}'"),
                     ("jdbc:postgresql://localhost:5432/clink", postgres.jdbc_url(database)),
                     ("'password' = 'clink'", "'password' = 'clink-secret'")]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tmp_path / "kafka_to_postgres.sql").write_text(text)
    run = subprocess.run([sys.executable, "-m", "clink", "run", "kafka_to_postgres.sql", "--state-dir", "state"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    ours = sorted(postgres.query(database, "SELECT * FROM page_view_counts"))

    con = shared_duckdb.connect()
    con.register("page_views", events)
    theirs = sorted(con.execute(
        "SELECT time_bucket(INTERVAL 1 MINUTE, ts) AS ws, ws + INTERVAL 1 MINUTE, page, COUNT(*), "
        "COUNT(DISTINCT user_id), MAX(ts) FROM page_views GROUP BY ws, page").fetchall())
    assert len(theirs) > 30  # 11 minutes of 4 pages
    assert ours == theirs
