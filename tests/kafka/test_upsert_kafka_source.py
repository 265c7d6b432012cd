"""The upsert-kafka source against a real broker: the latest value per key, a tombstone deleting
its key, normalized into a full changelog (+I, -U/+U, -D) by a keyed operator as Flink's
ChangelogNormalize does; round trips through the sink, aggregates compared with DuckDB over the
final state, and a restore from a checkpoint."""

from __future__ import annotations

import io
import json
import random

import pyarrow as pa
import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from tests.shared_duckdb import assert_same_rows, connect


def upsert_ddl(name: str, columns: str, key: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "upsert-kafka", "topic": topic, "properties.bootstrap.servers": servers,
            "key.format": "json", "value.format": "json", "scan.bounded.mode": "latest-offset", **options}
    return (f"CREATE TABLE {name} ({columns}, PRIMARY KEY ({key}) NOT ENFORCED) WITH ("
            f"{', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})")


def changes(result) -> list[tuple]:
    out = []
    for batch in result.batches():
        for row in batch.to_pylist():
            kind = row.pop("_rowkind")
            out.append((kind, *row.values()))
    return out


def produce(broker, topic: str, messages: list[tuple[dict, dict | None]]) -> None:
    broker.produce(topic, [(json.dumps(k).encode(), None if v is None else json.dumps(v).encode())
                           for k, v in messages], partition=0)


def test_upserts_become_a_changelog_dropping_duplicates_and_unknown_deletes(broker) -> None:
    topic = broker.topic()
    produce(broker, topic, [
        ({"k": 1}, {"k": 1, "v": "a"}),    # new key: +I
        ({"k": 2}, {"k": 2, "v": "b"}),    # new key: +I
        ({"k": 1}, {"k": 1, "v": "a"}),    # the same row again: nothing
        ({"k": 1}, {"k": 1, "v": "c"}),    # changed: -U a, +U c
        ({"k": 3}, None),                  # delete of a key never seen: nothing
        ({"k": 2}, None),                  # delete: -D b
        ({"k": 2}, {"k": 2, "v": "d"}),    # back again: +I
    ])
    ddl = upsert_ddl("t", "k BIGINT, v STRING", "k", topic, broker.servers)
    per_key: dict = {}
    for kind, k, v in changes(clink.sql([ddl, "SELECT * FROM t"])):
        per_key.setdefault(k, []).append((kind, v))  # changes to one key keep their order
    assert per_key == {1: [("+I", "a"), ("-U", "a"), ("+U", "c")], 2: [("+I", "b"), ("-D", "b"), ("+I", "d")]}
    assert sorted(map(tuple, (r.values() for r in clink.sql([ddl, "SELECT k, v FROM t"]).to_pylist()))) == [
        (1, "c"), (2, "d")]


def test_a_filter_over_upserts_retracts_a_row_that_leaves_it(broker) -> None:
    """The filter runs after normalization: a key whose new value fails it retracts its old row
    (pushed below, the old row would stay)."""
    topic = broker.topic()
    produce(broker, topic, [({"k": 1}, {"k": 1, "n": 5}), ({"k": 1}, {"k": 1, "n": 50})])
    ddl = upsert_ddl("t", "k BIGINT, n BIGINT", "k", topic, broker.servers)
    assert clink.sql([ddl, "SELECT k, n FROM t WHERE n < 10"]).to_pylist() == []
    plan = clink.compile([ddl, "SELECT n FROM t WHERE n < 10"]).explain()
    assert "ChangelogNormalize state keys=[k]" in plan


def test_sink_then_source_round_trip(broker) -> None:
    topic = broker.topic(partitions=3)
    sink = upsert_ddl("counts", "k BIGINT, n BIGINT", "k", topic, broker.servers)
    words = [1, 2, 1, 3, 1, 2, 4]
    values = ", ".join(f"({w})" for w in words)
    clink.sql([sink, f"INSERT INTO counts SELECT k, COUNT(*) FROM (VALUES {values}) AS v(k) GROUP BY k"]).run()
    # Tansu reports a partition's end loosely after batched writes: bound the read by the
    # offsets the messages have.
    ends: dict[int, int] = {}
    for partition, offset, _, _ in broker.read(topic):
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    source = upsert_ddl("back", "k BIGINT, n BIGINT", "k", topic, broker.servers, **{
        "scan.bounded.mode": "specific-offsets",
        "scan.bounded.specific-offsets": ";".join(f"partition:{p},offset:{ends.get(p, 0)}" for p in range(3))})
    got = clink.sql([source, "SELECT k, n FROM back"])
    assert sorted((r["k"], r["n"]) for r in got.to_pylist()) == [(1, 3), (2, 2), (3, 1), (4, 1)]


def test_an_upsert_table_without_a_primary_key_is_refused_at_its_connector(broker) -> None:
    ddl = (f"CREATE TABLE t (k BIGINT, v STRING) WITH ('connector' = 'upsert-kafka', 'topic' = 'x', "
           f"'properties.bootstrap.servers' = '{broker.servers}', 'key.format' = 'json', 'value.format' = 'json')")
    with pytest.raises(clink.SqlError, match="declares no key") as info:
        clink.sql([ddl, "SELECT k, v FROM t"])
    assert ddl[info.value.span.col - 1:].startswith("'connector'")


def test_upsert_kafka_refuses_a_changelog_format_and_startup_modes(broker) -> None:
    with pytest.raises(clink.SqlError, match="changelog format"):
        clink.sql([upsert_ddl("t", "k BIGINT, v STRING", "k", "x", broker.servers, **{"value.format": "debezium-json"}),
                   "SELECT k, v FROM t"])
    with pytest.raises(clink.SqlError, match="unknown option 'scan.startup.mode'"):
        clink.sql([upsert_ddl("t", "k BIGINT, v STRING", "k", "x", broker.servers,
                              **{"scan.startup.mode": "latest-offset"}), "SELECT k, v FROM t"])


def upsert_history(seed: int, n: int, *, nulls: bool) -> tuple[list[tuple[dict, dict | None]], dict[int, dict]]:
    rng = random.Random(seed)
    table: dict[int, dict] = {}
    out = []
    for _ in range(n):
        k = rng.randrange(30)
        if k in table and rng.random() < 0.25:
            out.append(({"id": k}, None))
            del table[k]
            continue
        row = {"id": k, "grp": None if nulls and rng.random() < 0.3 else f"g{rng.randrange(4)}",
               "amount": None if nulls and rng.random() < 0.3 else rng.randrange(-20, 60)}
        if k in table and rng.random() < 0.2:
            row = dict(table[k])  # a duplicate upsert
        out.append(({"id": k}, row))
        table[k] = row
    return out, table


QUERIES = [
    "SELECT grp, COUNT(*) AS n, SUM(amount) AS total, COUNT(amount) AS known FROM t GROUP BY grp",
    "SELECT COUNT(*) AS n, SUM(amount) AS total FROM t WHERE amount > 5",
]


@pytest.mark.parametrize("nulls", [False, True], ids=["dense", "nulls"])
@pytest.mark.parametrize("parallelism", [1, 4])
def test_group_by_over_upserts_matches_duckdb_over_the_final_state(broker, nulls: bool, parallelism: int) -> None:
    topic = broker.topic(partitions=1)
    messages, final = upsert_history(seed=11 + nulls, n=250, nulls=nulls)
    produce(broker, topic, messages)
    ddl = upsert_ddl("t", "id BIGINT, grp STRING, amount BIGINT", "id", topic, broker.servers,
                     **{"properties.max.poll.records": "23"})
    duck = connect()
    duck.register("t", pa.table({"id": pa.array([r["id"] for r in final.values()], pa.int64()),
                                 "grp": pa.array([r["grp"] for r in final.values()], pa.string()),
                                 "amount": pa.array([r["amount"] for r in final.values()], pa.int64())}))
    for query in QUERIES:
        got = clink.sql([f"SET 'parallelism.default' = '{parallelism}'", ddl, query]).to_arrow()
        assert_same_rows(got, duck.execute(query).fetchall())


@pytest.mark.parametrize("parallelism", [1, 4])
@pytest.mark.parametrize("crash_after_steps", [2, 5])
def test_a_crash_resumes_from_the_checkpoint_exactly(broker, tmp_path, parallelism: int,
                                                      crash_after_steps: int) -> None:
    import sqlite3

    topic = broker.topic(partitions=1)
    messages, final = upsert_history(seed=5, n=300, nulls=True)
    produce(broker, topic, messages)
    sql = "\n".join([
        f"SET 'parallelism.default' = '{parallelism}';",
        upsert_ddl("t", "id BIGINT, grp STRING, amount BIGINT", "id", topic, broker.servers,
                   **{"properties.max.poll.records": "20", "scan.bounded.mode": "specific-offsets",
                      "scan.bounded.specific-offsets": f"partition:0,offset:{len(messages)}"}) + ";",
        f"CREATE TABLE totals (grp STRING, n BIGINT, total BIGINT, PRIMARY KEY (grp) NOT ENFORCED) "
        f"WITH ('connector' = 'sqlite', 'path' = '{tmp_path}/totals.db');",
        "INSERT INTO totals SELECT COALESCE(grp, '-'), COUNT(*), SUM(amount) FROM t GROUP BY COALESCE(grp, '-');"])

    def job() -> Job:
        plan = clink.compile(sql, name="upserts.sql").runtime_plan
        return Job(plan, RuntimeContext(config={"execution.checkpointing.interval-rows": "40"},
                                        state_dir=tmp_path / "state", stdout=io.StringIO()))

    first = job()
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints > 0 and not first.finished
    del first  # a crash: nothing closed or committed
    resumed = job()
    assert resumed.metrics.restored_from is not None
    resumed.run()
    groups: dict = {}
    for row in final.values():
        n, total = groups.get(row["grp"] or "-", (0, None))
        groups[row["grp"] or "-"] = (n + 1, total if row["amount"] is None else (total or 0) + row["amount"])
    with sqlite3.connect(tmp_path / "totals.db") as con:
        assert sorted(con.execute("SELECT grp, n, total FROM totals")) == sorted(
            (g, n, t) for g, (n, t) in groups.items())
