"""End-to-end latency of Nexmark q0, q5 and q7 at a fixed input rate, and what metrics cost.

Each query runs in a fresh process over the nexmark source with ``'rate.limited' = 'true'`` at
``--rate`` events per second (100,000 by default) for ``--seconds`` seconds, its event time
anchored at the wall clock when the run starts (``'base-time'``), so an event's event time is
when it was generated. The source gives its rows in chunks of ``--chunk`` events (1,000: 10 ms of
events at 100k/s), so a row waits at most a chunk's span before it is read.

Two latencies, both as p50 and p99 over every row the query emits:

* **event time -> emit**: the wall clock when the row reaches the application (the query is a bare
  SELECT; its rows are taken from the job as they come) minus the row's event time: for q0 and q7
  the bid's ``dateTime``; for q5, whose rows are per window, the window's end (a window's result
  can only exist once its end has passed, so that is the earliest it could appear).
  clink's own metrics measure the same thing at the sink (``latency_p50_ms``/``latency_p99_ms``)
  where the query's result keeps a time attribute (q0; q7's join on the window end, a plain
  timestamp, leaves it none): both are printed, and agree.
Rows that the end of the input fires (windows closed early because no more events come) are
counted apart (``flushed``), not as latencies.

* **ingestion -> emit**: from when the source read the rows whose arrival made the result (clink's
  ``ingestion_latency_*`` metrics): the time clink itself took.

Targets: p99 <= 50 ms for q0; for q5 and q7 at most twice what the query must wait by its nature:
q5 (HOP of 10 s, measured from the window end) twice the 4 s watermark delay; q7 (TUMBLE of 10 s,
measured from the bid's time, which can be anywhere in its window) twice the window plus the delay.

The metrics overhead: q0 without the rate limit over ``--overhead-events`` events, with metrics
on (busy/blocked time, bytes, latency histograms, the Prometheus endpoint on a free port and a
scrape every second, ``'metrics.enabled' = 'true'``) and off (``'metrics.enabled' = 'false'``:
row counts only), alternating, ``--reps`` times each: the median CPU time of each (every thread's,
the endpoint's included), and their ratio. Target: <= 3 %.

    python bench/latency.py                     # q0, q5, q7 at 100k events/s for 60 s; the overhead
    python bench/latency.py --seconds 10 --queries q0
    python bench/latency.py --png bench/out/latency   # also draw charts (needs clink[charts])
    python bench/latency.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

DDL = (HERE / "nexmark" / "ddl.sql").read_text()
WATERMARK_DELAY_MS = 4_000

#: Each query as a bare SELECT (its rows come back to the run), with the column its event time
#: is read from, and the p99 target in ms.
QUERIES = {
    "q0": ("SELECT auction, bidder, price, dateTime, extra FROM bid", "dateTime", 50),
    "q5": ("""SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.endtime
FROM (
    SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
        FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime AND
   AuctionBids.num >= MaxBids.maxn""", "endtime", 2 * WATERMARK_DELAY_MS),
    "q7": ("""SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
FROM bid B
JOIN (
    SELECT MAX(price) AS maxprice, window_end AS dateTime
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime""", "dateTime",
           2 * (10_000 + WATERMARK_DELAY_MS)),
}

CHILD = r"""
import json, sys, time, urllib.request
import numpy as np
import pyarrow as pa
import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.metrics import Latency, wall_ms

spec = json.loads(sys.argv[1])
sql = spec["sql"].replace("'first-event.rate' = '10000'", f"'first-event.rate' = '{spec['rate']}'")
sql = sql.replace("'events.num' = '10000000'", f"'events.num' = '{spec['events']}', 'batch-size' = '{spec['chunk']}'"
                  + (", 'rate.limited' = 'true'" if spec["limited"] else ""))
seen = Latency()
column = spec["column"]
rows_out = [0]

flushed = [0]

def deliver(name, batch):
    now = wall_ms()
    if all(r.finished for r in job._readers.values()):
        # Windows the end of the input fires, before their time: not a latency (counted apart).
        flushed[0] += batch.num_rows
        return
    rows_out[0] += batch.num_rows
    times = batch.column(column).drop_null()
    seen.add(now - times.cast(pa.int64()).to_numpy())

plan = clink.compile(sql, name=spec["name"]).runtime_plan
ctx = RuntimeContext(config=spec["config"], on_result=deliver)
# Event time starts now, after compiling, and so does the source's rate clock (which would
# otherwise start at its first poll, after the job has opened): event n is due at its event time.
base = wall_ms()
for node in plan.nodes:
    if getattr(node, "connector", None) == "nexmark":
        node.options["base-time"] = str(base)
job = Job(plan, ctx)
for reader in job._readers.values():
    reader._started_ms = base
if job.metrics_endpoint is not None:
    urllib.request.urlopen(job.metrics_endpoint.url).read()  # the first scrape's imports are set-up too
started = time.perf_counter()  # the run, not the set-up (opening the Prometheus endpoint included)
cpu_started = time.process_time()
job.observers += 1
samples = []
last = 0.0
while not job.finished:
    if not job.step():
        time.sleep(0.001)
    now = time.perf_counter()
    if now - last >= 0.5:
        last = now
        source = sum(m.records_in for sid, m in job._meters.items() if sid in job._readers)
        rss = 0
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        samples.append([now - started, source, rss])
        if job.metrics_endpoint is not None and len(samples) % 2 == 0:  # a scrape a second
            urllib.request.urlopen(job.metrics_endpoint.url).read()
seconds = time.perf_counter() - started
cpu = time.process_time() - cpu_started  # every thread's: the endpoint's included
job.refresh_metrics()
sink = [r for r in job.metrics.operators if r["kind"] == "sink"][0]
peak = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak = int(line.split()[1]) * 1024
print(json.dumps({"seconds": seconds, "cpu": cpu, "events": spec["events"], "rows_out": rows_out[0], "flushed": flushed[0],
                  "p50": seen.quantile(0.5), "p99": seen.quantile(0.99),
                  "metrics_p50": sink["latency_p50_ms"], "metrics_p99": sink["latency_p99_ms"],
                  "ingestion_p50": sink["ingestion_latency_p50_ms"], "ingestion_p99": sink["ingestion_latency_p99_ms"],
                  "samples": samples, "peak_rss": peak}))
"""


def run(name: str, *, rate: int, events: int, chunk: int, limited: bool, config: dict[str, str]) -> dict:
    select, column, _ = QUERIES[name]
    spec = {"sql": DDL + "\n" + select + ";\n", "name": f"{name}.sql", "rate": rate, "events": events,
            "chunk": chunk, "limited": limited, "column": column, "config": config}
    env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="clink-latency-")}  # no plan cache
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", default="q0,q5,q7")
    parser.add_argument("--rate", type=int, default=100_000, help="events per second (100,000)")
    parser.add_argument("--seconds", type=int, default=60, help="how long each query runs (60: q7 closes five windows)")
    parser.add_argument("--chunk", type=int, default=1_000, help="events per source batch (1,000)")
    parser.add_argument("--overhead-events", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5, help="runs of each side of the overhead comparison (5)")
    parser.add_argument("--no-overhead", action="store_true")
    parser.add_argument("--png", metavar="DIR", help="draw charts into DIR (matplotlib: pip install 'clink[charts]')")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    results: dict[str, dict] = {}
    for name in args.queries.split(","):
        print(f"{name}: {args.rate:,} events/s for {args.seconds} s ...", file=sys.stderr, flush=True)
        results[name] = run(name, rate=args.rate, events=args.rate * args.seconds, chunk=args.chunk, limited=True,
                            config={"metrics.enabled": "true"})
    overhead = None
    if not args.no_overhead:
        on_runs, off_runs = [], []
        for rep in range(args.reps):
            for side, runs in (("on", on_runs), ("off", off_runs)):
                config = ({"metrics.enabled": "true", "metrics.port": "0"} if side == "on"
                          else {"metrics.enabled": "false"})
                print(f"overhead: q0 over {args.overhead_events:,} events, metrics {side} ({rep + 1}/{args.reps}) ...",
                      file=sys.stderr, flush=True)
                runs.append(run("q0", rate=args.rate, events=args.overhead_events, chunk=65_536, limited=False,
                                config=config))
        # The median CPU time of each side: the wall time of runs of one side spreads by more
        # than the effect on a machine with other work; CPU time (all threads) spreads less.
        on = statistics.median(r["cpu"] for r in on_runs)
        off = statistics.median(r["cpu"] for r in off_runs)
        overhead = {"on_events_per_cpu_s": args.overhead_events / on, "off_events_per_cpu_s": args.overhead_events / off,
                    "overhead": on / off - 1, "on_cpu": [r["cpu"] for r in on_runs],
                    "off_cpu": [r["cpu"] for r in off_runs]}

    if args.json:
        print(json.dumps({"rate": args.rate, "seconds": args.seconds, "queries": results, "overhead": overhead},
                         indent=2))
    else:
        print(f"\nNexmark at {args.rate:,} events/s for {args.seconds} s, source batches of {args.chunk:,} events "
              f"(latencies in ms)\n")
        print(f"{'query':<6} {'rows out':>10} {'p50':>9} {'p99':>9} {'target p99':>11} {'met':>4} "
              f"{'metrics p50':>12} {'metrics p99':>12} {'ingest p50':>11} {'ingest p99':>11} {'peak RSS':>9}")
        for name, r in results.items():
            target = QUERIES[name][2]
            met = "yes" if r["p99"] is not None and r["p99"] <= target else "NO"
            print(f"{name:<6} {r['rows_out']:>10,} {ms(r['p50']):>9} {ms(r['p99']):>9} {target:>11,} {met:>4} "
                  f"{ms(r['metrics_p50']):>12} {ms(r['metrics_p99']):>12} {ms(r['ingestion_p50']):>11} "
                  f"{ms(r['ingestion_p99']):>11} {r['peak_rss'] / 2**20:>8.0f}M")
        if overhead is not None:
            print(f"\nmetrics overhead, q0 unthrottled over {args.overhead_events:,} events (median CPU time of "
                  f"{args.reps}): on {overhead['on_events_per_cpu_s']:,.0f} events/cpu-s, off "
                  f"{overhead['off_events_per_cpu_s']:,.0f} events/cpu-s: {overhead['overhead']:+.1%} (target <= 3%)")
            print(f"CPU s of each run: on {', '.join(f'{c:.2f}' for c in overhead['on_cpu'])}; "
                  f"off {', '.join(f'{c:.2f}' for c in overhead['off_cpu'])}")
    if args.png:
        from bench_charts import latency_charts

        for path in latency_charts(results, Path(args.png), rate=args.rate):
            print(f"chart: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
