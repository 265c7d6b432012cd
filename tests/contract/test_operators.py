"""The operator contract, passed by every registered operator: a job cut at any step (a crash,
nothing closed or committed), restored from its last checkpoint and run to the end writes exactly
the output of a run that never stopped.

Each kind in ``clink.runtime.operators.KINDS`` (and each operator class a kind opens) has a case
here; a new kind without one fails ``test_every_registered_operator_has_a_case``. The default run
cuts each case before its first checkpoint, right after one, between two, and right after the
last before the end of its input (a restored job that goes straight to its final watermark);
``-m slow`` cuts it at every third step.
"""

from __future__ import annotations

import csv
import functools
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.operators import KINDS
from clink.runtime.plan import SINGLE
from clink.runtime.plan import Plan as RuntimePlan

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nexmark"
DDL = (BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                              "'events.num' = '6000', 'batch-size' = '250'")
CSV = "WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv')"

ORDERS = ("CREATE TABLE orders (cur STRING, amount BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - "
          "INTERVAL '3' SECOND) WITH ('connector' = 'filesystem', 'path' = '{data}/orders.parquet', "
          "'format' = 'parquet');\n")
#: (the operator class it must open, the statements after the DDL); ``{out}`` is the sink folder.
CASES = {
    "window": ("WindowAggregateOperator",
               f"CREATE TABLE o (auction BIGINT, n BIGINT, top BIGINT, ws TIMESTAMP(3)) {CSV};\n"
               "INSERT INTO o SELECT auction, COUNT(*), MAX(price), window_start FROM TABLE(TUMBLE(TABLE bid, "
               "DESCRIPTOR(dateTime), INTERVAL '2' SECOND)) GROUP BY auction, window_start, window_end;"),
    "group": ("GroupAggregateOperator",
              "CREATE TABLE o (b BIGINT, n BIGINT, s BIGINT, d BIGINT, PRIMARY KEY (b) NOT ENFORCED) "
              "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
              "INSERT INTO o SELECT bidder % 50, COUNT(*), SUM(price), COUNT(DISTINCT auction) FROM bid "
              "GROUP BY bidder % 50;"),
    "join": ("JoinOperator",
             f"CREATE TABLE o (auction BIGINT, price BIGINT, seller BIGINT) {CSV};\n"
             "INSERT INTO o SELECT B.auction, B.price, A.seller FROM bid B JOIN auction A ON B.auction = A.id "
             "AND B.dateTime BETWEEN A.dateTime AND A.expires;"),
    # An outer interval join: padded auctions, retracted at their first bid, remembered after it expires.
    "join-outer": ("JoinOperator",
                   "CREATE TABLE o (id BIGINT, n BIGINT, bids BIGINT, total BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
                   "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
                   "INSERT INTO o SELECT id, COUNT(*), COUNT(price), SUM(price) FROM (SELECT A.id, B.price FROM "
                   "auction A LEFT JOIN bid B ON A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) "
                   "GROUP BY id;"),
    "rank": ("RankOperator",
             "CREATE TABLE o (auction BIGINT, price BIGINT, r BIGINT, PRIMARY KEY (auction, r) NOT ENFORCED) "
             "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
             "INSERT INTO o SELECT auction, price, rn FROM (SELECT auction, price, ROW_NUMBER() OVER "
             "(PARTITION BY auction ORDER BY price DESC, dateTime) AS rn FROM bid) WHERE rn <= 3;"),
    # A Top-N of a GROUP BY's counts: every row kept, a retracted one gives its place back.
    "rank-updating": ("RankOperator",
                      "CREATE TABLE o (a BIGINT, n BIGINT, rn BIGINT, PRIMARY KEY (rn) NOT ENFORCED) "
                      "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
                      "INSERT INTO o SELECT a, n, rn FROM (SELECT a, n, ROW_NUMBER() OVER (ORDER BY n DESC, a) AS rn "
                      "FROM (SELECT auction % 20 AS a, COUNT(*) AS n FROM bid GROUP BY auction % 20)) WHERE rn <= 3;"),
    "over": ("OverAggregateOperator",
             f"CREATE TABLE o (bidder BIGINT, price BIGINT, recent BIGINT) {CSV};\n"
             "INSERT INTO o SELECT bidder, price, SUM(price) OVER (PARTITION BY bidder ORDER BY dateTime "
             "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) FROM bid;"),
    "over-updating": ("UpdatingOverOperator",
                      "CREATE TABLE o (id BIGINT, total BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
                      "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
                      "INSERT INTO o SELECT id, SUM(top) OVER (PARTITION BY seller ORDER BY id ROWS BETWEEN 2 "
                      "PRECEDING AND CURRENT ROW) FROM (SELECT A.id, A.seller, B.price AS top, ROW_NUMBER() OVER "
                      "(PARTITION BY A.id ORDER BY B.price DESC, B.dateTime) AS rn FROM auction A JOIN bid B "
                      "ON A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE rn = 1;"),
    "temporal": ("TemporalJoinOperator",
                 "CREATE TABLE orders (cur STRING, amount BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - "
                 "INTERVAL '3' SECOND) WITH ('connector' = 'filesystem', 'path' = '{data}/orders.parquet', "
                 "'format' = 'parquet');\n"
                 "CREATE TABLE rates (cur STRING, rate BIGINT, rts TIMESTAMP(3), PRIMARY KEY (cur) NOT ENFORCED, "
                 "WATERMARK FOR rts AS rts) WITH ('connector' = 'filesystem', 'path' = '{data}/rates.parquet', "
                 "'format' = 'parquet');\n"
                 f"CREATE TABLE o (cur STRING, amount BIGINT, rate BIGINT) {CSV};\n"
                 "INSERT INTO o SELECT o.cur, o.amount, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts "
                 "AS r ON o.cur = r.cur;"),
    "sort": ("SortOperator",
             f"CREATE TABLE o (auction BIGINT, price BIGINT, t TIMESTAMP(3)) {CSV};\n"
             "INSERT INTO o SELECT auction, price, dateTime FROM bid ORDER BY dateTime, price DESC;"),
    # Partial matches, and matches waiting for earlier ones, cross checkpoints (the orders' time
    # spans 10 minutes, so the watermark releases rows all along).
    "match": ("MatchRecognizeOperator",
              ORDERS + f"CREATE TABLE o (cur STRING, a0 BIGINT, a1 BIGINT, n BIGINT, t TIMESTAMP(3)) {CSV};\n"
              "INSERT INTO o SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY cur ORDER BY ts, amount "
              "MEASURES FIRST(A.amount) AS a0, LAST(B.amount) AS a1, COUNT(*) AS n, LAST(C.ts) AS t "
              "PATTERN (A B{{1,3}}? C) DEFINE B AS B.amount > LAST(A.amount), C AS C.amount < PREV(amount));"),
    # A pattern of fixed length: matched a batch at a time; undecided starts wait across checkpoints.
    "match-fixed": ("MatchRecognizeOperator",
                    ORDERS + f"CREATE TABLE o (cur STRING, a0 BIGINT, a2 BIGINT, n BIGINT) {CSV};\n"
                    "INSERT INTO o SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY cur ORDER BY ts, amount "
                    "MEASURES A.amount AS a0, C.amount AS a2, SUM(amount) AS n "
                    "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B{{2}} C) "
                    "DEFINE A AS A.amount > PREV(amount), B AS B.amount < A.amount, C AS C.amount > LAST(B.amount));"),
    # Upserts of an upsert-kafka topic: each key's last row is kept across checkpoints.
    "normalize": ("ChangelogNormalizeOperator",
                  "CREATE TABLE u (id BIGINT, grp BIGINT, amount BIGINT, PRIMARY KEY (id) NOT ENFORCED) WITH ("
                  "'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{servers}', "
                  "'key.format' = 'json', 'value.format' = 'json', 'properties.max.poll.records' = '250', "
                  "'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{ends}');\n"
                  "CREATE TABLE o (g BIGINT, n BIGINT, s BIGINT, PRIMARY KEY (g) NOT ENFORCED) "
                  "WITH ('connector' = 'sqlite', 'path' = '{out}.db');\n"
                  "INSERT INTO o SELECT grp, COUNT(*), SUM(amount) FROM u GROUP BY grp;"),
    # Rows wait across checkpoints for their sessions to end.
    "session": ("SessionWindowsOperator",
                ORDERS + f"CREATE TABLE o (cur STRING, amount BIGINT, ws TIMESTAMP(3), we TIMESTAMP(3)) {CSV};\n"
                "INSERT INTO o SELECT cur, amount, window_start, window_end FROM TABLE(SESSION(TABLE orders "
                "PARTITION BY cur, DESCRIPTOR(ts), INTERVAL '1' SECOND));"),
}
#: The cases that read the orders and rates written by the ``data`` fixture, not Nexmark's events.
OWN_DATA = {"temporal", "match", "match-fixed", "session", "normalize"}
KIND_OF_CASE = {"window": "window", "group": "group", "join": "join", "rank": "rank", "rank-updating": "rank",
                "over": "over",
                "over-updating": "over", "temporal": "join", "sort": "sort",
                "match": "match", "match-fixed": "match", "session": "session", "normalize": "normalize"}
#: Where the ``normalize`` case's upserts are: filled by the ``data`` fixture.
UPSERTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def upsert_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka-protocol broker holding 6,000 upserts (and tombstones) of 400 keys in one topic."""
    import json

    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.kafka.conftest import running_broker

    with running_broker(tmp_path_factory.mktemp("tansu")) as broker:
        admin = AdminClient({"bootstrap.servers": broker.servers})
        for future in admin.create_topics([NewTopic("upserts", num_partitions=1, replication_factor=1)]).values():
            future.result(30)
        rng = np.random.default_rng(5)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.servers})
        n = 6000
        for key, grp, amount, delete in zip(rng.integers(0, 400, n).tolist(), rng.integers(0, 7, n).tolist(),
                                             rng.integers(-50, 100, n).tolist(), (rng.random(n) < 0.1).tolist(),
                                             strict=True):
            value = None if delete else json.dumps({"id": key, "grp": grp, "amount": amount}).encode()
            producer.produce("upserts", key=json.dumps({"id": key}).encode(), value=value, partition=0)
        producer.flush(30)
        UPSERTS.update(servers=broker.servers, topic="upserts", ends=f"partition:0,offset:{n}")
        yield broker.servers


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, upsert_broker: str) -> Path:
    """Orders and currency rates in time order, for the temporal join (and, for the normalize
    case, a broker with upserts)."""
    folder = tmp_path_factory.mktemp("rates")
    rng = np.random.default_rng(3)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    n, m = 3000, 300
    orders = pa.table({
        "cur": pa.array(rng.choice(np.array(["EUR", "USD", "GBP"]), n)),
        "amount": pa.array(rng.integers(1, 100, n), pa.int64()),
        "ts": pa.array(base + np.sort(rng.integers(0, 600_000, n)).astype("timedelta64[ms]"), pa.timestamp("ms"))})
    rates = pa.table({
        "cur": pa.array(rng.choice(np.array(["EUR", "USD", "GBP"]), m)),
        "rate": pa.array(rng.integers(1, 50, m), pa.int64()),
        "rts": pa.array(base + np.sort(rng.choice(600_000, m, replace=False)).astype("timedelta64[ms]"),
                        pa.timestamp("ms"))})
    # Several files each, read one after another: many polls, so many checkpoints to cut between.
    # (Checkpoints stop once a source has ended: both sources end together.)
    for name, table, parts in (("orders.parquet", orders, 12), ("rates.parquet", rates, 12)):
        (folder / name).mkdir()
        step = table.num_rows // parts
        for i in range(parts):
            pq.write_table(table.slice(i * step, step), folder / name / f"{i:02d}.parquet")
    return folder


@functools.lru_cache(maxsize=8)
def _plan(text: str, name: str) -> RuntimePlan:
    """The plan of ``text``, compiled once: a plan is data, and starts as many jobs as asked."""
    return clink.compile(text, name=name).runtime_plan


def _job(case: str, out: Path, state: Path | None, data: Path, parallelism: int = 1) -> Job:
    text = CASES[case][1].format(out=out, data=data, **UPSERTS)
    prefix = "" if case in OWN_DATA else DDL
    plan = _plan(prefix + "SET 'execution.checkpointing.interval-rows' = '700';\n" + text, f"{case}.sql")
    return Job(plan, RuntimeContext(state_dir=state, stdout=io.StringIO(),
                                    config={"parallelism.default": str(parallelism)}))


def _output(out: Path) -> list[tuple]:
    db = out.with_suffix(".db")
    if db.exists():
        import sqlite3

        with sqlite3.connect(db) as conn:
            return sorted(conn.execute("SELECT * FROM o").fetchall(), key=repr)
    rows = []
    for path in sorted(out.iterdir()):
        if path.name.startswith("part-"):
            rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def test_every_registered_operator_has_a_case() -> None:
    assert {kind.name for kind in KINDS.values()} == set(KIND_OF_CASE.values())


def _empty(out: Path, state: Path) -> None:
    """Remove a run's output (a folder, or a SQLite file and its journal) and state directory."""
    shutil.rmtree(out, ignore_errors=True)
    for path in out.parent.glob(f"{out.name}.db*"):
        path.unlink()
    shutil.rmtree(state, ignore_errors=True)


def _uninterrupted(case: str, tmp_path: Path, data: Path) -> tuple[list[tuple], list[int]]:
    """The case's output from a run that never stops, and the number of checkpoints it has taken
    after each of its steps."""
    reference = _job(case, tmp_path / "out", tmp_path / "state", data)
    (operator,) = [type(op).__name__ for op in reference._operators.values()
                   if type(op).__name__ == CASES[case][0]] or [None]
    assert operator == CASES[case][0], f"{case} does not open a {CASES[case][0]}"
    checkpoints = []
    while not reference.finished:
        reference.step()
        checkpoints.append(reference.metrics.checkpoints)
    expected = _output(tmp_path / "out")
    assert expected, f"{case}: the reference run wrote nothing"
    assert reference.metrics.checkpoints >= 3, "too few checkpoints to cut between"
    _empty(tmp_path / "out", tmp_path / "state")
    return expected, checkpoints


def _cut_then_restore(case: str, cut: int, steps: int, expected: list[tuple], tmp_path: Path, data: Path) -> None:
    # Every run of a case writes to the same places, emptied after it: the same text, one plan.
    out, state = tmp_path / "out", tmp_path / "state"
    first = _job(case, out, state, data)
    for _ in range(cut):
        first.step()
    del first  # a crash: nothing closed, committed or cleaned up
    resumed = _job(case, out, state, data)
    resumed.run()
    assert _output(out) == expected, f"{case}: cut after step {cut} of {steps}"
    _empty(out, state)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cut_before_at_and_between_checkpoints_then_a_restore_gives_the_uninterrupted_output(
        case: str, tmp_path: Path, data: Path) -> None:
    expected, checkpoints = _uninterrupted(case, tmp_path, data)
    steps = len(checkpoints)
    # The step after which the n-th checkpoint has been taken (the first step is step 1); the
    # last one, at the end of the input, is not followed by a step to cut after.
    taken = {n: checkpoints.index(n) + 1 for n in range(1, checkpoints[-1] + 1) if n in checkpoints}
    last = max(n for n, step in taken.items() if step < steps)
    assert 1 < taken[1] and taken[2] + 1 < taken[3], f"{case}: no step before the first checkpoint or between two"
    # Before the first checkpoint, right after one, between two, and after the last before the end.
    for cut in sorted({taken[1] - 1, taken[2], taken[2] + 1, taken[last]}):
        _cut_then_restore(case, cut, steps, expected, tmp_path, data)


@pytest.mark.slow  # every third step: .ci/run runs it after the default suite
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cut_at_any_step_then_a_restore_gives_the_uninterrupted_output(case: str, tmp_path: Path,
                                                                         data: Path) -> None:
    expected, checkpoints = _uninterrupted(case, tmp_path, data)
    steps = len(checkpoints)
    # Every third step: a cut right after a checkpoint, between two, and before the first.
    for cut in range(1, steps, 3):
        _cut_then_restore(case, cut, steps, expected, tmp_path, data)


def _run_until_checkpoint(job: Job, checkpoints: int) -> None:
    """Step ``job`` until it has taken ``checkpoints`` checkpoints, then two steps more."""
    while job.metrics.checkpoints < checkpoints and not job.finished:
        job.step()
    for _ in range(2):
        job.step()
    assert not job.finished, "the job ended before the cut: use more rows"


@pytest.mark.parallel
@pytest.mark.parametrize("case", sorted(CASES))
def test_state_split_into_key_group_halves_and_merged_back_gives_the_uninterrupted_output(
        case: str, tmp_path: Path, data: Path) -> None:
    """A job cut after a checkpoint resumes as two subtasks per operator (each restores the half
    of the key groups it owns, each source reader its share), is cut again, and resumes as one
    (the halves merged back): the output is that of one uninterrupted subtask."""
    reference = _job(case, tmp_path / "ref", tmp_path / "ref-state", data)
    reference.run()
    expected = _output(tmp_path / "ref")
    out, state = tmp_path / "out", tmp_path / "state"
    first = _job(case, out, state, data)
    _run_until_checkpoint(first, 1)
    del first  # a crash
    halves = _job(case, out, state, data, parallelism=2)
    restored = halves.metrics.restored_from
    assert restored is not None
    stateful = [n for n in halves.plan.nodes if KINDS.get(type(n)) is not None]
    # Each operator runs as two subtasks, but one that takes every row in one (a streaming ORDER BY).
    assert all(len(halves._subtasks[n.id]) == (1 if SINGLE in n.requires() else 2) for n in stateful)
    _run_until_checkpoint(halves, 1)
    del halves
    merged = _job(case, out, state, data)
    assert merged.metrics.restored_from is not None and merged.metrics.restored_from > restored
    merged.run()
    assert _output(out) == expected, f"{case}: split and merged back"


def _on_ray_text(case: str, data: Path, out: Path, *, limited: bool) -> str:
    """The case's statements for a cluster run: checkpoints by time (a cluster takes them on the
    job master's clock), Nexmark events at 3,000 a second of event time, and with ``limited`` of
    wall-clock time too, so that the job runs for two seconds (its rows depend on the rate only)."""
    text = CASES[case][1].format(out=out, data=data, **UPSERTS)
    if case in OWN_DATA:
        return text
    ddl = DDL.replace("'10000'", "'3000'")
    if limited:
        ddl = ddl.replace("'batch-size' = '250'", "'batch-size' = '250', 'rate.limited' = 'true'")
    return ddl + text


@pytest.mark.cluster
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_on_ray_a_killed_worker_restarts_from_the_last_checkpoint_with_the_uninterrupted_output(
        case: str, backend: str, tmp_path: Path, data: Path, ray_cluster) -> None:
    """The same contract on two Ray workers: one worker's process is killed (SIGKILL) once a
    checkpoint is complete; the job restarts from it and its output is a local uninterrupted run's.
    The cases over the orders and rates files read them in well under a second, faster than a kill
    can be aimed: for them, two workers give the rows of one process."""
    import os
    import signal
    import time

    from clink.cluster import onray
    from clink.runtime.artefact import artefact_bytes

    reference = clink.compile(_on_ray_text(case, data, tmp_path / "ref", limited=False), name=f"{case}.sql")
    Job(reference.runtime_plan, RuntimeContext(stdout=io.StringIO(), config={"state.backend": backend})).run()
    expected = _output(tmp_path / "ref")
    assert expected, f"{case}: the reference run wrote nothing"
    settings = ("SET 'execution.checkpointing.interval' = '200 ms';\n"
                "SET 'restart-strategy.fixed-delay.delay' = '50 ms';\n")
    plan = clink.compile(settings + _on_ray_text(case, data, tmp_path / "out", limited=True), name=f"{case}.sql")
    artefact = artefact_bytes(module_source=plan.source, plan=plan.runtime_plan)
    job = onray.submit(artefact, config={**plan.runtime_plan.config, "parallelism.default": "2",
                                         "state.backend": backend},
                       state_dir=str(tmp_path / "state"), workers=2, parallelism=2, fingerprint=plan.fingerprint,
                       host="127.0.0.1")
    if case not in OWN_DATA:
        while job.status()["last_checkpoint"] is None:
            assert not job.done(), f"{case}: the job ended before its first checkpoint"
            time.sleep(0.05)
        os.kill(job.worker_pids()[{"memory": 0, "sqlite": 1}[backend]], signal.SIGKILL)
    outcome = job.result()
    assert outcome["attempts"] == (1 if case in OWN_DATA else 2), outcome["failures"]
    assert _output(tmp_path / "out") == expected, f"{case} on Ray ({backend})"
