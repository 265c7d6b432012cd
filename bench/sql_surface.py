"""The SQL surface benchmark: query forms beyond SELECT-FROM-WHERE on a stream, against DuckDB.

The bid rows of ``windows.py`` (Parquet, cached under ``--data-dir``; one event per ms of event
time, up to 999 ms out of order, watermark 1 s behind) are read by clink as a stream and by
DuckDB (``threads=1``) in batch, each in a fresh process, to the final result (clink's updating
results materialized by ``to_arrow()``, as DuckDB's ``to_arrow_table()``). Reported: events/s
of each, peak RSS, the result's row count in both (they must agree), and clink / DuckDB.

    python bench/sql_surface.py                      # 10M rows
    python bench/sql_surface.py --rows 1000000 --cases distinct,union

Cases: ``distinct`` (SELECT DISTINCT, updating), ``union`` (UNION of two filters), ``in`` (an
IN (subquery) semi join), ``grouping-sets`` (GROUPING SETS over a TUMBLE window), ``top-n``
(ORDER BY ... LIMIT over the stream), ``match`` (a three-step MATCH_RECOGNIZE: three rising prices in
a row per partition, with AFTER MATCH SKIP TO NEXT ROW; DuckDB finds the same rows with LEAD).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness  # noqa: E402
import windows  # noqa: E402

#: Targets (events/s on one core) from the query language's issue.
TARGET_EVENTS_PER_S = 500_000
MATCH_TARGET_EVENTS_PER_S = 300_000
RSS_TARGET_MIB = 512

_WINDOW = "epoch_ms(CAST(date_time AS TIMESTAMP)) // 10000 * 10000"
CASES = {
    # case: (clink query over the stream `bid`, DuckDB query over {src})
    "distinct": ("SELECT DISTINCT auction % 1000 AS a, channel FROM bid",
                 "SELECT DISTINCT auction % 1000 AS a, channel FROM {src}"),
    "union": ("SELECT auction FROM bid WHERE price > 9000 UNION SELECT bidder FROM bid WHERE price < 100",
              "SELECT auction FROM {src} WHERE price > 9000 UNION SELECT bidder FROM {src} WHERE price < 100"),
    "in": ("SELECT auction, price FROM bid WHERE auction IN (SELECT bidder FROM bid WHERE channel = 'Apple')",
           "SELECT auction, price FROM {src} WHERE auction IN (SELECT bidder FROM {src} WHERE channel = 'Apple')"),
    "grouping-sets": ("SELECT window_start, channel, COUNT(*) AS n, MAX(price) AS top FROM TABLE(TUMBLE(TABLE bid, "
                      "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
                      "GROUP BY window_start, window_end, GROUPING SETS ((channel), ())",
                      f"SELECT ws, channel, COUNT(*) AS n, MAX(price) AS top FROM (SELECT {_WINDOW} AS ws, channel, "
                      "price FROM {src}) GROUP BY GROUPING SETS ((ws, channel), (ws))"),
    "top-n": ("SELECT auction, bidder, price FROM bid ORDER BY price DESC, auction, bidder LIMIT 10",
              "SELECT auction, bidder, price FROM {src} ORDER BY price DESC, auction, bidder LIMIT 10"),
    "match": ("SELECT * FROM (SELECT auction % 1000 AS k, bidder, price, date_time FROM bid) MATCH_RECOGNIZE ("
              "PARTITION BY k ORDER BY date_time, bidder, price MEASURES A.price AS low, C.price AS high "
              "AFTER MATCH SKIP TO NEXT ROW PATTERN (A B C) "
              "DEFINE B AS B.price > A.price, C AS C.price > B.price)",
              "SELECT k, price AS low, p2 AS high FROM (SELECT k, price, LEAD(price, 1) OVER w AS p1, "
              "LEAD(price, 2) OVER w AS p2 FROM (SELECT auction % 1000 AS k, bidder, price, date_time FROM {src}) "
              "WINDOW w AS (PARTITION BY k ORDER BY date_time, bidder, price)) WHERE price < p1 AND p1 < p2"),
}


def run_one(engine: str, case: str, source: Path) -> dict:
    """One case in this process: wall time from the query's text to its final rows."""
    clink_query, duck_query = CASES[case]
    if engine == "clink":
        import clink

        columns = ", ".join(f"{n} {t}" for n, t in windows.COLUMNS)
        text = (f"CREATE TABLE bid ({columns}, WATERMARK FOR date_time AS date_time - {windows.WATERMARK_DELAY}) "
                f"WITH ('connector' = 'filesystem', 'path' = '{source}', 'format' = 'parquet');\n{clink_query};")
        started, cpu = time.perf_counter(), time.process_time()
        rows = clink.sql(text).to_arrow().num_rows
    else:
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads = 1")
        started, cpu = time.perf_counter(), time.process_time()
        rows = con.execute(duck_query.format(src=f"read_parquet('{source}')")).to_arrow_table().num_rows
    return {"engine": engine, "case": case, "wall_s": time.perf_counter() - started, "rows": rows,
            "cpu_s": time.process_time() - cpu, "peak_rss_mib": _harness.peak_rss_mib()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="bid rows (default 10M)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated (default {','.join(CASES)})")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where the generated rows are cached")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    source, _ = windows.dataset(Path(args.data_dir), args.rows)
    if args.one:
        engine, case = args.one.split(":")
        print("RESULT " + json.dumps(run_one(engine, case, source)))
        return
    print(f"sql surface: {args.rows:,} bid rows (Parquet), clink as a stream, DuckDB in batch (threads=1)")
    # Events per CPU second beside events per second: on a shared machine the wall time of a run
    # grows with the other work, the CPU time it used much less.
    print(f"{'case':<14} {'clink ev/s':>11} {'ev/cpu-s':>9} {'DuckDB ev/s':>12} {'clink/DuckDB':>13} "
          f"{'peak RSS MiB':>13} {'rows (both)':>12}")
    for case in args.cases.split(","):
        runs = {}
        for engine in ("clink", "duckdb"):
            done = subprocess.run([sys.executable, __file__, "--one", f"{engine}:{case}", "--rows", str(args.rows),
                                   "--data-dir", args.data_dir], capture_output=True, text=True, check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode or not lines:
                sys.exit(f"{engine} {case} failed:\n{done.stderr[-3000:]}")
            runs[engine] = json.loads(lines[-1].removeprefix("RESULT "))
        c, d = runs["clink"], runs["duckdb"]
        rows = f"{c['rows']:,}" if c["rows"] == d["rows"] else f"{c['rows']:,} vs {d['rows']:,} (DIFFER)"
        print(f"{case:<14} {args.rows / c['wall_s'] / 1e6:>10.2f}M {args.rows / c['cpu_s'] / 1e6:>8.2f}M "
              f"{args.rows / d['wall_s'] / 1e6:>11.2f}M "
              f"{d['wall_s'] / c['wall_s']:>12.2f}x {c['peak_rss_mib']:>13.0f} {rows:>12}")
    print(f"targets: clink >= {TARGET_EVENTS_PER_S / 1e6:.1f}M events/s per case on one core "
          f"(match >= {MATCH_TARGET_EVENTS_PER_S / 1e6:.1f}M); peak RSS <= "
          f"{RSS_TARGET_MIB} MiB where the state is bounded by the watermark or a TTL")


if __name__ == "__main__":
    main()
