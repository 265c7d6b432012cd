"""Window aggregation throughput benchmark: clink against single-threaded DuckDB on the same files.

Generates bid-like rows once (cached under ``--data-dir``, keyed by row count and seed), as
Parquet and as CSV. The columns and value distributions are those of ``stateless.py``, but
``date_time`` advances steadily, one event per millisecond of event time (10M rows span about
2.8 hours), and each event is up to 999 ms out of order. The table's watermark trails the
largest ``date_time`` by 1 s, so no event is late. Two queries run through clink as a stream
(windows fire on the watermark) and through DuckDB (``threads=1``) in batch, with the window
bounds written out in SQL:

    tumble  auction, window_start, window_end, COUNT(*), MAX(price)
            FROM TUMBLE(bid, date_time, 10 s) GROUP BY window_start, window_end, auction
    hop     auction, window_start, window_end, COUNT(*)
            FROM HOP(bid, date_time, slide 2 s, size 10 s) GROUP BY window_start, window_end, auction

each reading CSV and Parquet, each writing a CSV file with a header. Each run has its own
subprocess, so that its peak RSS and CPU time belong to that run alone.

    python bench/windows.py                       # 10M rows, the table
    python bench/windows.py --rows 1000000        # quicker
    python bench/windows.py --rss-scaling         # csv-tumble at --rows and 3 x --rows, peak RSS
    python bench/windows.py --one clink:csv-tumble --profile /tmp/tumble.prof   # one run, cProfile
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The shared harness, and the stateless benchmark's data generator.
import _harness
import stateless
from _harness import DUCKDB_TYPES
from stateless import COLUMNS, SEED

CHUNK_ROWS = stateless.CHUNK_ROWS  # rows generated at a time, and rows per Parquet row group
BASE_MS = 1_717_200_000_000  # 2024-06-01 00:00:00 UTC
JITTER_MS = 1_000  # event times are 0..999 ms later than their place in the stream
WATERMARK_DELAY = "INTERVAL '1' SECOND"

CASES = ("csv-tumble", "csv-hop", "parquet-tumble", "parquet-hop")
#: Minimum clink/DuckDB throughput ratio per case.
TARGETS = {"csv-tumble": 0.8, "csv-hop": 0.55, "parquet-tumble": 0.25, "parquet-hop": 0.5}
RSS_TARGET_MIB = 512
RSS_CASE = "csv-tumble"
RSS_GROWTH = 0.20  # the peak at 3 x the rows may be at most 20% above the peak at the rows
OUT_PREFIX = "windows-"  # output files are <out-dir>/windows-<engine>-<case>.csv

TUMBLE_MS = 10_000
HOP_SLIDE_MS, HOP_SIZE_MS = 2_000, 10_000

# The event time in ms, and the start of the last window (or slide) an event falls in.
_MS = "epoch_ms(CAST(date_time AS TIMESTAMP))"

QUERIES = {
    # kind: (clink SELECT, DuckDB SELECT over {src}, output columns)
    "tumble": (
        ("SELECT auction, window_start, window_end, COUNT(*), MAX(price) "
         f"FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '{TUMBLE_MS // 1000}' SECOND)) "
         "GROUP BY window_start, window_end, auction"),
        ("SELECT auction, epoch_ms(ws) AS window_start, epoch_ms(ws + {size}) AS window_end, "
         "COUNT(*) AS bids, MAX(price) AS top "
         "FROM (SELECT auction, price, ms - ms % {size} AS ws "
         "      FROM (SELECT auction, price, {ms} AS ms FROM {src})) "
         "GROUP BY ws, auction"),
        [("auction", "BIGINT"), ("window_start", "TIMESTAMP(3)"), ("window_end", "TIMESTAMP(3)"),
         ("bids", "BIGINT"), ("top", "BIGINT")]),
    "hop": (
        ("SELECT auction, window_start, window_end, COUNT(*) "
         f"FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '{HOP_SLIDE_MS // 1000}' SECOND, "
         f"INTERVAL '{HOP_SIZE_MS // 1000}' SECOND)) "
         "GROUP BY window_start, window_end, auction"),
        # Each event is in size / slide windows; the latest starts at the last slide boundary.
        ("SELECT auction, epoch_ms(ws) AS window_start, epoch_ms(ws + {size}) AS window_end, "
         "COUNT(*) AS bids "
         "FROM (SELECT auction, ms - ms % {slide} - r.k * {slide} AS ws "
         "      FROM (SELECT auction, {ms} AS ms FROM {src}) "
         "      CROSS JOIN range(0, {windows}) AS r(k)) "
         "GROUP BY ws, auction"),
        [("auction", "BIGINT"), ("window_start", "TIMESTAMP(3)"), ("window_end", "TIMESTAMP(3)"),
         ("bids", "BIGINT")]),
}


# --- data ---------------------------------------------------------------------------------------


def _window_chunk(rng, start: int, n: int, hot_ids):
    """``stateless``'s bid rows, with one event per ms of event time and 0..999 ms of jitter."""
    import numpy as np
    import pyarrow as pa

    batch = stateless._bid_chunk(rng, start, n, hot_ids)
    millis = BASE_MS + np.arange(start, start + n, dtype=np.int64) + rng.integers(0, JITTER_MS, n)
    index = batch.schema.get_field_index("date_time")
    return batch.set_column(index, "date_time", pa.array(millis, pa.int64()).cast(pa.timestamp("ms")))


def dataset(data_dir: Path, rows: int) -> tuple[Path, Path]:
    """The Parquet and CSV files of ``rows`` windowed bid rows, generated the first time."""
    return _harness.dataset(data_dir / f"bid-windows-{rows}-s{SEED}", rows,
                            lambda: stateless.bid_batches(rows, _window_chunk), CHUNK_ROWS)


# --- one run (in a child process) ---------------------------------------------------------------


def _clink_script(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    select, _, out_columns = QUERIES[kind]
    return _harness.clink_script(fmt, source, COLUMNS, select, out_columns, out,
                                 watermark=f"date_time AS date_time - {WATERMARK_DELAY}")


def _duckdb_statement(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    _, select, _ = QUERIES[kind]
    size = TUMBLE_MS if kind == "tumble" else HOP_SIZE_MS
    query = select.format(src=_harness.duckdb_source(fmt, source, COLUMNS), ms=_MS, size=size,
                          slide=HOP_SLIDE_MS, windows=HOP_SIZE_MS // HOP_SLIDE_MS)
    return _harness.duckdb_copy(query, out)


def _window_metrics(metrics) -> dict:
    return {"peak_state_bytes": metrics.peak_state_bytes,
            "late_records": sum(metrics.late_records.values()),
            "records_in": sum(metrics.records_in.values())}


def run_one(engine: str, case: str, source: Path, out: Path, profile: str | None) -> dict:
    """Run one case in this process; returns timings, this process's peak RSS and clink's metrics."""
    script = _clink_script if engine == "clink" else _duckdb_statement
    return _harness.run_one(engine, case, out, script(case, source, out), profile,
                            clink_metrics=_window_metrics, profile_sorts=("tottime", "cumulative"))


def run_child(engine: str, case: str, rows: int, args: argparse.Namespace) -> dict:
    """Run one case in a fresh interpreter and return what it measured, plus the output's row count
    and path (the caller deletes the file)."""
    out = _harness.output_path(args.out_dir, OUT_PREFIX, engine, case)
    result = _harness.run_child(Path(__file__).resolve(), out, engine, case, rows, args)
    result["output"] = str(out)
    return result


def _same_rows(case: str, clink_out: str, duckdb_out: str) -> tuple[int, int]:
    """Rows only clink wrote and rows only DuckDB wrote (as multisets; values parsed by type)."""
    import duckdb

    _, _, out_columns = QUERIES[case.split("-")[1]]
    columns = ", ".join(f"'{n}': '{DUCKDB_TYPES[t]}'" for n, t in out_columns)

    def read(path: str) -> str:
        return f"SELECT * FROM read_csv('{_harness.csv_files(path)}', header = true, columns = {{{columns}}})"

    con = duckdb.connect()
    con.execute("SET threads = 1")
    only_clink = con.execute(f"SELECT COUNT(*) FROM ({read(clink_out)} EXCEPT ALL {read(duckdb_out)})").fetchone()[0]
    only_duckdb = con.execute(f"SELECT COUNT(*) FROM ({read(duckdb_out)} EXCEPT ALL {read(clink_out)})").fetchone()[0]
    return only_clink, only_duckdb


# --- the report ---------------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _clink_warnings(case: str, c: dict) -> list[str]:
    warnings = []
    if c.get("late_records"):
        warnings.append(f"WARNING: {case}: clink dropped {c['late_records']:,} late rows (expected none)")
    if c.get("records_in") is not None and c["records_in"] != c["rows_in"]:
        warnings.append(f"WARNING: {case}: clink read {c['records_in']:,} rows of {c['rows_in']:,}")
    warnings += _harness.reported_warning(case, c)
    return warnings


def compare(args: argparse.Namespace) -> dict:
    def note(engine: str, best: dict) -> str:
        return f"  peak state {_mib(best['peak_state_bytes'])}" if engine == "clink" else ""

    def after_case(case: str, c: dict, d: dict) -> None:
        if args.verify:
            c["only_clink"], c["only_duckdb"] = _same_rows(case, c["output"], d["output"])
        if not args.keep_output:
            _harness.remove_output(Path(c["output"]))
            _harness.remove_output(Path(d["output"]))

    results = _harness.measure(CASES, args, dataset, run_child,
                               clink_max=("peak_state_bytes", "late_records"), note=note,
                               after_case=after_case)
    summary = _harness.summarize(results, args.rows, TARGETS)
    for s in summary:
        c = results[s["case"]]["clink"]
        s["peak_state_bytes"], s["late_records"] = c["peak_state_bytes"], c["late_records"]
    report = _harness.report(args, results, summary)
    if args.json:
        return report

    _harness.print_table("windows", args, results, summary, RSS_TARGET_MIB,
                         f"{'peak state':>10} {'rows out':>11}",
                         lambda s, c, d: f"{_mib(c['peak_state_bytes']):>10} {c['rows_out']:>11,}",
                         more=("\npeak state: the largest window state clink held at once "
                               "(Metrics.peak_state_bytes).\nrows out: rows of clink's output file."))
    warnings = []
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        warnings += _harness.count_warning(s["case"], c, d)
        if c.get("only_clink") or c.get("only_duckdb"):
            warnings.append(f"WARNING: {s['case']}: {c['only_clink']:,} rows only in clink's output, "
                            f"{c['only_duckdb']:,} only in DuckDB's")
        warnings += _clink_warnings(s["case"], c)
    for line in warnings:
        print(line)
    if all(s["rows_match"] for s in summary):
        print("row counts: clink and DuckDB wrote the same number of rows in every case"
              + (" (and the same rows)" if args.verify and not warnings else ""))
    if not any(s["late_records"] for s in summary):
        print("late rows: none in any case")
    return report


def rss_scaling(args: argparse.Namespace) -> dict:
    """Peak RSS of clink's csv-tumble case at ``--rows`` and 3 x ``--rows``: window state is bounded
    by the watermark, so the peak should stay put."""
    runs = _harness.scaling_runs(RSS_CASE, args, dataset, run_child,
                                 note=lambda run: f"  peak state {_mib(run['peak_state_bytes'])}")
    if not args.keep_output:
        # Both sizes write the same file; each run deletes the one before it.
        for output in {run["output"] for run in runs}:
            _harness.remove_output(Path(output))
    small, large = runs
    growth = large["peak_rss_mib"] / small["peak_rss_mib"] - 1
    report = {"case": RSS_CASE, "runs": runs, "growth": growth, "flat": growth <= RSS_GROWTH,
              "under_target": all(r["peak_rss_mib"] <= RSS_TARGET_MIB for r in runs)}
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(f"\nRSS scaling, clink {RSS_CASE} (target: peak <= {RSS_TARGET_MIB} MiB, and at 3x the rows "
          f"at most {RSS_GROWTH:.0%} above):")
    for r in runs:
        print(f"  {r['rows_in']:>12,} rows  peak RSS {r['peak_rss_mib']:6.0f} MiB  "
              f"peak state {_mib(r['peak_state_bytes']):>10}  (after imports {r['base_rss_mib']:.0f} MiB)")
    print(f"  growth {growth:+.1%}: {'within' if report['flat'] else 'NOT within'} {RSS_GROWTH:.0%}, "
          f"{'under' if report['under_target'] else 'OVER'} {RSS_TARGET_MIB} MiB")
    for r in runs:
        for line in _clink_warnings(f"{RSS_CASE} at {r['rows_in']:,} rows", r):
            print(line)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _harness.add_common_arguments(parser)
    parser.add_argument("--rss-scaling", action="store_true",
                        help=f"run clink's {RSS_CASE} case at --rows and 3 x --rows; compare peak RSS")
    parser.add_argument("--verify", action="store_true",
                        help="also check that clink and DuckDB wrote the same rows, not just as many")
    _harness.main(parser, argv, CASES, OUT_PREFIX, dataset, run_one, compare, rss_scaling)


if __name__ == "__main__":
    sys.path.insert(0, str(_harness.ROOT))
    main()
