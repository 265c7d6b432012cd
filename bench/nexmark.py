"""The Nexmark queries under bench/nexmark/ over the nexmark source, with DuckDB as a reference.

Each query (``bench/nexmark/qN.sql``, with ``ddl.sql``'s ``'events.num'`` set to ``--events``) runs in a fresh
clink process into its blackhole sink; the table gives events/s (generated events over wall time,
compiling included), peak RSS and the rows the sink received. For the reference, the people,
auctions and bids of the same events are written once to Parquet (by clink), and DuckDB (``SET threads = 1``) runs the
same query over that file in batch, in the same run: its events/s is the same event count over
its time, and its row count must equal clink's.

    python bench/nexmark.py                        # every query present, 10M events
    python bench/nexmark.py --events 1000000 --queries q0,q2
    python bench/nexmark.py --json
    python bench/nexmark.py --queries q5,q7,q20 --parallelism 4   # also at 4 subtasks: the overhead
    python bench/nexmark.py --queries q5,q7 --parallelism 4 --reps 5   # fastest of 5 runs of each
    python bench/nexmark.py --queries q9,q20 --events 2000000 --memory-scaling 5   # bounded state?
    python bench/nexmark.py --queries q18 --set "table.exec.state.ttl=1 min"         # a setting for every run

With ``--memory-scaling F`` each query also runs over F times the events, and the table adds that
run's peak RSS over the base run's against the target for bounded state (at most 1.2: state a
watermark, an expiry or the data bound does not grow with the events). A query above the target
makes the run exit with status 1, naming it: the scaling is an assertion.

With ``--parallelism N`` each query also runs with N subtasks per operator in its one process
(``parallelism.default``); the table adds that run's events/s and its overhead against
parallelism 1 (its wall time over parallelism 1's, minus one). One process does not get faster
with subtasks: the overhead is the cost of the exchanges between them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "nexmark"
sys.path.insert(0, str(QUERIES))
from oracle import QUERIES as DUCKDB  # noqa: E402 - the DuckDB text of each query, next to it
from oracle import SIDE_INPUT  # noqa: E402

#: events/s on one core each query should reach: stateless 2M, every other query 1M.
STATELESS = ("q0", "q1", "q2", "q14", "q21", "q22")
TARGETS = {f"q{i}": 2_000_000 if f"q{i}" in STATELESS else 1_000_000 for i in range(23) if i != 12}
#: Peak RSS at --memory-scaling F times the events over the base run's, for bounded state.
MEMORY_SCALING_TARGET = 1.2

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import clink
result = clink.sql(open(sys.argv[1]).read(), name=sys.argv[2], init=[sys.argv[3]],
                   config={'parallelism.default': sys.argv[4], **json.loads(sys.argv[5])})
t1 = time.perf_counter()
metrics = result.run()
wall = time.perf_counter() - t0
run = time.perf_counter() - t1
updating = any(n.changelog.updating for n in result.plan.runtime_plan.sinks)
rss = 0.0
for line in open('/proc/self/status'):
    if line.startswith('VmHWM:'):
        rss = int(line.split()[1]) / 1024
print('RESULT ' + json.dumps({'wall_s': wall, 'run_s': run, 'rows_out': sum(metrics.records_out.values()),
                              'events_in': sum(metrics.records_in.values()), 'peak_rss_mib': rss,
                              'updating': updating}))
"""


def ddl(events: int, folder: Path) -> Path:
    """``ddl.sql`` with ``events`` events, written into ``folder``: the init script of every query."""
    path = folder / "ddl.sql"
    text = (QUERIES / "ddl.sql").read_text()
    path.write_text(re.sub(r"'events\.num'\s*=\s*'\d+'", f"'events.num' = '{events}'", text))
    return path


def run_clink(query: str, events: int, folder: Path, parallelism: int = 1, settings: dict | None = None) -> dict:
    path = folder / f"{query}.sql"
    # Files a query writes (q10) go under ``folder``.
    text = (QUERIES / f"{query}.sql").read_text().replace("'path' = 'bench/out/", f"'path' = '{folder}/out/")
    path.write_text(text.replace("'path' = 'bench/nexmark/", f"'path' = '{QUERIES}/"))  # q13's side input
    # The folder of the queries is on the Python path: q14 calls a function defined there.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(QUERIES), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), f"{query}.sql", str(ddl(events, folder)),
                           str(parallelism), json.dumps(settings or {})],
                          capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{query} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def fastest(best: dict | None, run: dict) -> dict:
    return run if best is None or run["wall_s"] < best["wall_s"] else best


def write_events(events: int, folder: Path) -> Path:
    """The people, auctions and bids of the first ``events`` events, as Parquet files
    ``person.parquet``, ``auction.parquet`` and ``bid.parquet`` in ``folder``, written by clink."""
    text = f"""
CREATE TABLE person_file (id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING,
                          state STRING, dateTime TIMESTAMP(3), extra STRING)
WITH ('connector' = 'filesystem', 'path' = '{folder / "person.parquet"}', 'format' = 'parquet');
CREATE TABLE auction_file (id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
                           dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT,
                           extra STRING)
WITH ('connector' = 'filesystem', 'path' = '{folder / "auction.parquet"}', 'format' = 'parquet');
CREATE TABLE bid_file (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
                       dateTime TIMESTAMP(3), extra STRING)
WITH ('connector' = 'filesystem', 'path' = '{folder / "bid.parquet"}', 'format' = 'parquet');
INSERT INTO person_file SELECT * FROM person;
INSERT INTO auction_file SELECT * FROM auction;
INSERT INTO bid_file SELECT * FROM bid;
"""
    import clink

    clink.sql(text, name="events.sql", init=[ddl(events, folder)]).run()
    return folder


def run_duckdb(query: str, folder: Path) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    for kind in ("person", "auction", "bid"):
        rows = ", file_row_number = true" if kind == "bid" else ""
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM read_parquet('{folder / kind}.parquet'{rows})")
    con.execute(SIDE_INPUT.format(path=QUERIES / "side_input.csv"))
    t0 = time.perf_counter()
    # Materialized, as clink's sink receives every column: a bare COUNT(*) would skip the work.
    con.execute(f"CREATE TEMP TABLE result AS {DUCKDB[query]}")
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "rows_out": con.execute("SELECT COUNT(*) FROM result").fetchone()[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events per query (default 10M)")
    parser.add_argument("--queries", default=",".join(sorted(p.stem for p in QUERIES.glob("q*.sql"))),
                        help="comma-separated, e.g. q0,q2 (default: every query in bench/nexmark/)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--parallelism", type=int, default=1, metavar="N",
                        help="also run each query with N subtasks per operator, and show the overhead")
    parser.add_argument("--reps", type=int, default=1, metavar="R",
                        help="run clink R times per query (alternating with the run at --parallelism) "
                             "and keep the fastest of each: the machine is shared and noisy")
    parser.add_argument("--memory-scaling", type=int, default=0, metavar="F",
                        help="also run each query over F times the events and compare peak RSS")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every clink run, e.g. 'table.exec.state.ttl=1 min' (repeatable)")
    args = parser.parse_args(argv)
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        settings[key.strip()] = value.strip()
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if not (QUERIES / f"{q}.sql").exists()]
    if unknown:
        parser.error(f"no such queries: {', '.join(unknown)} (bench/nexmark/ has "
                     f"{', '.join(sorted(p.stem for p in QUERIES.glob('q*.sql')))})")
    results = {}
    with tempfile.TemporaryDirectory(prefix="clink-nexmark-") as tmp:
        folder = Path(tmp)
        print(f"writing the people, auctions and bids of {args.events:,} events to Parquet for the reference ...",
              file=sys.stderr)
        data = write_events(args.events, folder)
        for query in queries:
            clink_run = wide = None
            for _ in range(max(1, args.reps)):
                run = run_clink(query, args.events, folder, settings=settings)
                print(f"  {query}: {args.events / run['wall_s'] / 1e6:.2f}M ev/s, {run['rows_out']:,} rows",
                      file=sys.stderr)
                clink_run = fastest(clink_run, run)
                if args.parallelism > 1:
                    run = run_clink(query, args.events, folder, args.parallelism, settings)
                    print(f"  {query} at parallelism {args.parallelism}: "
                          f"{args.events / run['wall_s'] / 1e6:.2f}M ev/s", file=sys.stderr)
                    wide = fastest(wide, run)
            duck = run_duckdb(query, data) if query in DUCKDB else None
            results[query] = {"clink": clink_run, "duckdb": duck}
            if args.memory_scaling > 1:
                more = args.events * args.memory_scaling
                run = run_clink(query, more, folder, settings=settings)
                print(f"  {query} over {more:,} events: {more / run['wall_s'] / 1e6:.2f}M ev/s, "
                      f"{run['peak_rss_mib']:.0f} MiB", file=sys.stderr)
                results[query]["scaled"] = run
            if wide is not None:
                results[query]["parallel"] = wide
                if wide["rows_out"] != clink_run["rows_out"] and not clink_run.get("updating"):
                    sys.exit(f"{query}: {wide['rows_out']:,} rows at parallelism {args.parallelism}, "
                             f"{clink_run['rows_out']:,} at 1")
    if args.json:
        print(json.dumps({"events": args.events, "cpus": os.cpu_count(), "settings": settings,
                          "memory_scaling": args.memory_scaling, "results": results}, indent=2))
        return
    print(f"\nnexmark: {args.events:,} events per query, clink in a fresh process per query, "
          f"DuckDB (threads=1) over the same events in Parquet; {os.cpu_count()} CPUs"
          + (f"; clink's fastest of {args.reps} runs" if args.reps > 1 else "")
          + "".join(f"; {k} = {v}" for k, v in settings.items()))
    wide = f"{f'p={args.parallelism} ev/s':>11} {'overhead':>8} " if args.parallelism > 1 else ""
    if args.memory_scaling > 1:
        wide += f"{f'x{args.memory_scaling} ev/s':>10} {f'x{args.memory_scaling} RSS':>8} {'RSS ratio':>16} "
    head = (f"{'query':6} {'clink ev/s':>11} {'RSS MiB':>8} {'rows out':>12} {'DuckDB ev/s':>12} "
            f"{'ratio':>6} {'target':>14} {wide}")
    print(head)
    print("-" * len(head))
    unbounded = []
    for query, r in results.items():
        c, d = r["clink"], r["duckdb"]
        rate = args.events / c["wall_s"]
        duck_rate = "-" if d is None else f"{args.events / d['wall_s'] / 1e6:.2f}M"
        ratio = "-" if d is None else f"{d['wall_s'] / c['wall_s']:.2f}"
        target = TARGETS.get(query)
        verdict = "-" if target is None else f">= {target / 1e6:.1f}M {'met' if rate >= target else 'NOT met'}"
        rows = f"{c['rows_out']:,}" + ("*" if c.get("updating") else "")
        extra = ""
        if "parallel" in r:
            w = r["parallel"]
            extra = f"{args.events / w['wall_s'] / 1e6:10.2f}M {w['wall_s'] / c['wall_s'] - 1:+8.0%} "
        if "scaled" in r:
            m = r["scaled"]
            ratio_rss = m["peak_rss_mib"] / c["peak_rss_mib"]
            met = "met" if ratio_rss <= MEMORY_SCALING_TARGET else "NOT met"
            if ratio_rss > MEMORY_SCALING_TARGET:
                unbounded.append(f"{query} {ratio_rss:.2f}")
            extra += (f"{args.events * args.memory_scaling / m['wall_s'] / 1e6:9.2f}M {m['peak_rss_mib']:8.0f} "
                      f"{f'{ratio_rss:.2f} <= {MEMORY_SCALING_TARGET} {met}':>16}")
        print(f"{query:6} {rate / 1e6:10.2f}M {c['peak_rss_mib']:8.0f} {rows:>12} {duck_rate:>12} "
              f"{ratio:>6} {verdict:>14} {extra}")
        if d is not None and d["rows_out"] != c["rows_out"] and not c.get("updating"):
            print(f"WARNING: {query}: clink wrote {c['rows_out']:,} rows, DuckDB found {d['rows_out']:,}")
    print("\nev/s: generated events over wall time (clink: compiling and generating included; DuckDB: "
          "the query over the events already in Parquet). ratio: clink ev/s over DuckDB ev/s.\n"
          "*: an updating query; its sink received every change (+I, -U, +U), not the final rows DuckDB counts "
          "(tests/runtime/test_nexmark.py checks those).")
    if unbounded:
        # The memory scaling is an assertion: state that grows with the events fails the run.
        sys.exit(f"peak RSS grew more than {MEMORY_SCALING_TARGET}x with {args.memory_scaling}x the events: "
                 + ", ".join(unbounded))


if __name__ == "__main__":
    main()
