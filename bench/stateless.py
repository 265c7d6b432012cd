"""Stateless throughput benchmark: clink against single-threaded DuckDB on the same files.

Generates bid-like rows once (cached under ``--data-dir``, keyed by row count and seed), as
Parquet and as CSV, then runs four cases through clink and through DuckDB (``threads=1``), each
run in a fresh subprocess so that peak RSS and CPU time belong to that run alone:

    filter  SELECT auction, price FROM bid WHERE auction % 123 = 0
    map     SELECT auction, bidder, price * 0.908, date_time, extra FROM bid

each reading CSV and Parquet, each writing a CSV file with a header.

    python bench/stateless.py                     # 10M rows, the table
    python bench/stateless.py --rows 1000000      # quicker
    python bench/stateless.py --rss-scaling       # map cases at --rows and 3 x --rows, peak RSS
    python bench/stateless.py --one clink:csv-map --profile /tmp/map.prof   # one run, cProfile

``price`` is BIGINT; clink types the literal ``0.908`` as DOUBLE, so the DuckDB query multiplies
by ``CAST(0.908 AS DOUBLE)`` to compute the same DOUBLE column (DuckDB would otherwise use
DECIMAL arithmetic).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import _harness

SEED = 20240601
CHUNK_ROWS = 1_000_000  # rows generated at a time, and rows per Parquet row group
HOT_AUCTIONS = 1_000
HOT_SHARE = 0.9

CASES = ("csv-filter", "csv-map", "parquet-filter", "parquet-map")
#: Minimum clink/DuckDB throughput ratio per case.
TARGETS = {"csv-filter": 0.5, "csv-map": 0.85, "parquet-filter": 0.25, "parquet-map": 0.85}
RSS_TARGET_MIB = 512
OUT_PREFIX = ""  # output files are <out-dir>/<engine>-<case>.csv

COLUMNS = [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "BIGINT"), ("channel", "STRING"),
           ("url", "STRING"), ("date_time", "TIMESTAMP(3)"), ("extra", "STRING")]

QUERIES = {
    # kind: (clink SELECT, DuckDB SELECT list + WHERE, output columns)
    "filter": ("SELECT auction, price FROM bid WHERE auction % 123 = 0",
               "SELECT auction, price FROM {src} WHERE auction % 123 = 0",
               [("auction", "BIGINT"), ("price", "BIGINT")]),
    "map": ("SELECT auction, bidder, price * 0.908, date_time, extra FROM bid",
            "SELECT auction, bidder, price * CAST(0.908 AS DOUBLE) AS price, date_time, extra FROM {src}",
            [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "DOUBLE"),
             ("date_time", "TIMESTAMP(3)"), ("extra", "STRING")]),
}


# --- data ---------------------------------------------------------------------------------------


def _random_strings(rng, n: int, min_len: int, max_len: int, alphabet: bytes):
    """``n`` random strings of ``min_len``..``max_len`` characters, built from buffers (no Python loop)."""
    import numpy as np
    import pyarrow as pa

    lengths = rng.integers(min_len, max_len + 1, n, dtype=np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    letters = np.frombuffer(alphabet, dtype=np.uint8)
    data = letters[rng.integers(0, len(letters), int(offsets[-1]), dtype=np.int32)]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _bid_chunk(rng, start: int, n: int, hot_ids):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    hot = rng.random(n) < HOT_SHARE
    auction = np.where(hot, hot_ids[rng.integers(0, len(hot_ids), n)], rng.integers(1, 100_000_000, n))
    bidder = rng.integers(1, 10_000_000, n)
    price = np.maximum(1, rng.lognormal(7.0, 1.5, n)).astype(np.int64)
    channels = pa.array(["Google", "Facebook", "Baidu", "Apple", "channel-4711"])
    channel = channels.take(pa.array(rng.choice(5, n, p=[0.4, 0.3, 0.15, 0.1, 0.05])))
    lower = b"abcdefghijklmnopqrstuvwxyz0123456789"
    # "https://www.nexmark.com/" (24) + 10..46 random + "/item.htm" (9): 43..79 characters.
    url = pc.binary_join_element_wise("https://www.nexmark.com/", _random_strings(rng, n, 10, 46, lower),
                                      "/item.htm", "")
    # About 1,000 events per second of event time, a little out of order.
    base_ms = 1_717_200_000_000  # 2024-06-01 00:00:00 UTC
    millis = base_ms + np.arange(start, start + n, dtype=np.int64) + rng.integers(0, 2_000, n)
    date_time = pa.array(millis, pa.int64()).cast(pa.timestamp("ms"))
    extra = _random_strings(rng, n, 4, 16, b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
    return pa.record_batch([auction, bidder, price, channel, url, date_time, extra],
                           names=[c for c, _ in COLUMNS])


def bid_batches(rows: int, chunk=None):
    """``rows`` seeded bid rows, ``CHUNK_ROWS`` at a time; ``chunk`` (default ``_bid_chunk``) makes
    each batch from the same random stream."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    hot_ids = rng.integers(1, 100_000_000, HOT_AUCTIONS)
    for start in range(0, rows, CHUNK_ROWS):
        yield (chunk or _bid_chunk)(rng, start, min(CHUNK_ROWS, rows - start), hot_ids)


def dataset(data_dir: Path, rows: int) -> tuple[Path, Path]:
    """The Parquet and CSV files of ``rows`` bid rows, generated the first time."""
    return _harness.dataset(data_dir / f"bid-{rows}-s{SEED}", rows, lambda: bid_batches(rows), CHUNK_ROWS)


# --- one run (in a child process) ---------------------------------------------------------------


def _clink_script(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    select, _, out_columns = QUERIES[kind]
    return _harness.clink_script(fmt, source, COLUMNS, select, out_columns, out)


def _duckdb_statement(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    _, select, _ = QUERIES[kind]
    return _harness.duckdb_copy(select.format(src=_harness.duckdb_source(fmt, source, COLUMNS)), out)


def run_one(engine: str, case: str, source: Path, out: Path, profile: str | None) -> dict:
    """Run one case in this process; returns timings and this process's peak RSS."""
    script = _clink_script if engine == "clink" else _duckdb_statement
    return _harness.run_one(engine, case, out, script(case, source, out), profile)


def run_child(engine: str, case: str, rows: int, args: argparse.Namespace) -> dict:
    """Run one case in a fresh interpreter and return what it measured, plus the output's row count."""
    out = _harness.output_path(args.out_dir, OUT_PREFIX, engine, case)
    result = _harness.run_child(Path(__file__).resolve(), out, engine, case, rows, args)
    if not args.keep_output:
        _harness.remove_output(out)
    return result


# --- the report ---------------------------------------------------------------------------------


def compare(args: argparse.Namespace) -> dict:
    results = _harness.measure(CASES, args, dataset, run_child)
    summary = _harness.summarize(results, args.rows, TARGETS)
    report = _harness.report(args, results, summary)
    if args.json:
        return report

    _harness.print_table("stateless", args, results, summary, RSS_TARGET_MIB, f"{'ratio excl. compile':>19}",
                         lambda s, c, d: f"{d['wall_s'] / (c['wall_s'] - c['compile_s']):>19.2f}",
                         wall_note=" 'ratio excl. compile' leaves clink's compile time out.")
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        for line in _harness.count_warning(s["case"], c, d) + _harness.reported_warning(s["case"], c):
            print(line)
    if all(s["rows_match"] for s in summary):
        print("row counts: clink and DuckDB wrote the same number of rows in every case ("
              + ", ".join(f"{s['case']} {results[s['case']]['clink']['rows_out']:,}" for s in summary) + ")")
    return report


RSS_CASES = ("csv-map", "parquet-map")


def rss_scaling(args: argparse.Namespace) -> dict:
    """Peak RSS of clink's map cases at ``--rows`` and 3 x ``--rows``: streaming should keep it flat."""
    report: dict[str, dict] = {}
    for case in RSS_CASES:
        runs = _harness.scaling_runs(case, args, dataset, run_child)
        small, large = runs
        growth = large["peak_rss_mib"] - small["peak_rss_mib"]
        report[case] = {"runs": runs, "growth_mib": growth,
                        "flat": growth <= max(16.0, 0.10 * small["peak_rss_mib"]),
                        "under_target": all(r["peak_rss_mib"] <= RSS_TARGET_MIB for r in runs)}
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(f"\nRSS scaling, clink (target: peak <= {RSS_TARGET_MIB} MiB and flat, "
          "i.e. at most +10% for 3x the rows):")
    for case, r in report.items():
        small, large = r["runs"]
        print(f"  {case:12} {small['rows_in']:>12,} rows {small['peak_rss_mib']:6.0f} MiB   "
              f"{large['rows_in']:>12,} rows {large['peak_rss_mib']:6.0f} MiB   "
              f"growth {r['growth_mib']:+5.0f} MiB: {'flat' if r['flat'] else 'NOT flat'}, "
              f"{'under' if r['under_target'] else 'OVER'} {RSS_TARGET_MIB} MiB   "
              f"(after imports {small['base_rss_mib']:.0f} MiB)")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _harness.add_common_arguments(parser)
    parser.add_argument("--rss-scaling", action="store_true",
                        help=("run clink's map cases (CSV and Parquet input) at --rows and 3 x --rows; "
                              "compare peak RSS"))
    _harness.main(parser, argv, CASES, OUT_PREFIX, dataset, run_one, compare, rss_scaling)


if __name__ == "__main__":
    sys.path.insert(0, str(_harness.ROOT))
    main()
