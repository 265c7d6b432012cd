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
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

# The stateless benchmark's data generator and measuring helpers.
import stateless
from stateless import COLUMNS, DUCKDB_TYPES, SEED, _cpu_seconds, _rate, _warm, count_csv_rows, peak_rss_mib

CHUNK_ROWS = stateless.CHUNK_ROWS  # rows generated at a time, and rows per Parquet row group
BASE_MS = 1_717_200_000_000  # 2024-06-01 00:00:00 UTC
JITTER_MS = 1_000  # event times are 0..999 ms later than their place in the stream
WATERMARK_DELAY = "INTERVAL '1' SECOND"

CASES = ("csv-tumble", "csv-hop", "parquet-tumble", "parquet-hop")
#: Minimum clink/DuckDB throughput ratio per case.
TARGETS = {"csv-tumble": 0.6, "csv-hop": 0.55, "parquet-tumble": 0.25, "parquet-hop": 0.5}
RSS_TARGET_MIB = 512
RSS_CASE = "csv-tumble"
RSS_GROWTH = 0.20  # the peak at 3 x the rows may be at most 20% above the peak at the rows

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
    folder = data_dir / f"bid-windows-{rows}-s{SEED}"
    parquet_path, csv_path = folder / "bid.parquet", folder / "bid.csv"
    if (folder / "_COMPLETE").exists():
        return parquet_path, csv_path

    import numpy as np
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    started = time.perf_counter()
    print(f"generating {rows:,} rows into {folder} ...", file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(SEED)
    hot_ids = rng.integers(1, 100_000_000, stateless.HOT_AUCTIONS)
    pq_writer = csv_writer = None
    try:
        for start in range(0, rows, CHUNK_ROWS):
            batch = _window_chunk(rng, start, min(CHUNK_ROWS, rows - start), hot_ids)
            if pq_writer is None:
                pq_writer = pq.ParquetWriter(folder / ".bid.parquet.tmp", batch.schema)
                # Strings hold no delimiter, quote or line break, so nothing needs quoting.
                csv_writer = pa_csv.CSVWriter(str(folder / ".bid.csv.tmp"), batch.schema,
                                              write_options=pa_csv.WriteOptions(quoting_style="none"))
            pq_writer.write_batch(batch, row_group_size=CHUNK_ROWS)
            csv_writer.write_batch(batch)
    finally:
        if pq_writer is not None:
            pq_writer.close()
            csv_writer.close()
    os.replace(folder / ".bid.parquet.tmp", parquet_path)
    os.replace(folder / ".bid.csv.tmp", csv_path)
    (folder / "_COMPLETE").write_text(f"{rows}\n")
    print(f"generated in {time.perf_counter() - started:.1f} s "
          f"(CSV {csv_path.stat().st_size / 2**20:,.0f} MiB, "
          f"Parquet {parquet_path.stat().st_size / 2**20:,.0f} MiB)", file=sys.stderr, flush=True)
    return parquet_path, csv_path


# --- one run (in a child process) ---------------------------------------------------------------


def _clink_script(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    select, _, out_columns = QUERIES[kind]
    source_options = f"'connector' = 'filesystem', 'path' = '{source}', 'format' = '{fmt}'"
    if fmt == "csv":
        source_options += ", 'csv.header' = 'true'"
    columns = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    sink_columns = ", ".join(f"{n} {t}" for n, t in out_columns)
    return (f"CREATE TABLE bid ({columns}, WATERMARK FOR date_time AS date_time - {WATERMARK_DELAY}) "
            f"WITH ({source_options});\n"
            f"CREATE TABLE out_table ({sink_columns}) WITH ('connector' = 'filesystem', "
            f"'path' = '{out}', 'format' = 'csv', 'csv.header' = 'true');\n"
            f"INSERT INTO out_table {select};\n")


def _duckdb_source(fmt: str, source: Path) -> str:
    if fmt == "csv":
        columns = ", ".join(f"'{n}': '{DUCKDB_TYPES[t]}'" for n, t in COLUMNS)
        return f"read_csv('{source}', header = true, delim = ',', quote = '\"', columns = {{{columns}}})"
    return f"read_parquet('{source}')"


def _duckdb_statement(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    _, select, _ = QUERIES[kind]
    size = TUMBLE_MS if kind == "tumble" else HOP_SIZE_MS
    query = select.format(src=_duckdb_source(fmt, source), ms=_MS, size=size, slide=HOP_SLIDE_MS,
                          windows=HOP_SIZE_MS // HOP_SLIDE_MS)
    return f"COPY ({query}) TO '{out}' (FORMAT csv, HEADER)"


def run_one(engine: str, case: str, source: Path, out: Path, profile: str | None) -> dict:
    """Run one case in this process; returns timings, this process's peak RSS and clink's metrics."""
    if out.exists():
        out.unlink()
    if engine == "clink":
        # Modules are imported before the clock starts, as DuckDB's are.
        import clink
        import clink.api
        import clink.compiler

        text = _clink_script(case, source, out)
    else:
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads = 1")
        text = _duckdb_statement(case, source, out)
    base_rss = peak_rss_mib()

    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    extra: dict = {}
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    if engine == "clink":
        t_compile = time.perf_counter()
        plan = clink.compile(text)
        compile_s = time.perf_counter() - t_compile
        result = plan.run()
        result.run()
        metrics = result.metrics
        rows_out = sum(metrics.records_out.values())
        extra = {"peak_state_bytes": metrics.peak_state_bytes,
                 "late_records": sum(metrics.late_records.values()),
                 "records_in": sum(metrics.records_in.values())}
    else:
        compile_s = 0.0
        rows_out = con.execute(text).fetchone()[0]
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
        import pstats

        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
    return {"engine": engine, "case": case, "wall_s": wall, "cpu_s": cpu, "compile_s": compile_s,
            "rows_out_reported": rows_out, "version": (clink if engine == "clink" else duckdb).__version__,
            "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base_rss,
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def run_child(engine: str, case: str, rows: int, args: argparse.Namespace) -> dict:
    """Run one case in a fresh interpreter and return what it measured, plus the output's row count."""
    out = Path(args.out_dir) / f"windows-{engine}-{case}.csv"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", f"{engine}:{case}", "--rows", str(rows),
           "--data-dir", str(args.data_dir), "--out-dir", str(args.out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{engine} {case} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["rows_in"] = rows
    result["rows_out"] = count_csv_rows(out)
    result["output"] = str(out)
    return result


def _same_rows(case: str, clink_out: str, duckdb_out: str) -> tuple[int, int]:
    """Rows only clink wrote and rows only DuckDB wrote (as multisets; values parsed by type)."""
    import duckdb

    _, _, out_columns = QUERIES[case.split("-")[1]]
    columns = ", ".join(f"'{n}': '{DUCKDB_TYPES[t]}'" for n, t in out_columns)

    def read(path: str) -> str:
        return f"SELECT * FROM read_csv('{path}', header = true, columns = {{{columns}}})"

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
    if c["rows_out"] != c["rows_out_reported"]:
        warnings.append(f"WARNING: {case}: clink reported {c['rows_out_reported']:,} rows out "
                        f"but its file holds {c['rows_out']:,}")
    return warnings


def compare(args: argparse.Namespace) -> dict:
    parquet_path, csv_path = dataset(Path(args.data_dir), args.rows)
    _warm(csv_path)
    _warm(parquet_path)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict]] = {}
    for case in CASES:
        results[case] = {}
        for engine in ("clink", "duckdb"):
            # Every run writes the same file; each run's rows are counted before the next starts.
            runs = [run_child(engine, case, args.rows, args) for _ in range(args.reps)]
            best = min(runs, key=lambda r: r["wall_s"])
            best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            if engine == "clink":
                best["peak_state_bytes"] = max(r["peak_state_bytes"] for r in runs)
                best["late_records"] = max(r["late_records"] for r in runs)
            best["walls_s"] = [round(r["wall_s"], 3) for r in runs]
            results[case][engine] = best
            state = f"  peak state {_mib(best['peak_state_bytes'])}" if engine == "clink" else ""
            print(f"  {case:15} {engine:6} {best['wall_s']:7.2f} s wall {best['cpu_s']:7.2f} s cpu "
                  f"{_rate(args.rows, best['wall_s'])} ev/s  peak RSS {best['peak_rss_mib']:.0f} MiB{state}",
                  file=sys.stderr, flush=True)
        c, d = results[case]["clink"], results[case]["duckdb"]
        if args.verify:
            c["only_clink"], c["only_duckdb"] = _same_rows(case, c["output"], d["output"])
        if not args.keep_output:
            Path(c["output"]).unlink()
            Path(d["output"]).unlink()
    summary = []
    for case in CASES:
        c, d = results[case]["clink"], results[case]["duckdb"]
        ratio = d["wall_s"] / c["wall_s"]  # (rows / clink s) / (rows / duckdb s)
        summary.append({"case": case, "clink_ev_s": args.rows / c["wall_s"],
                        "duckdb_ev_s": args.rows / d["wall_s"],
                        "ratio": ratio, "target": TARGETS[case], "met": ratio >= TARGETS[case],
                        "rows_match": c["rows_out"] == d["rows_out"],
                        "peak_state_bytes": c["peak_state_bytes"], "late_records": c["late_records"]})
    report = {"rows": args.rows, "reps": args.reps, "cpus": os.cpu_count(), "results": results,
              "summary": summary}
    if args.json:
        print(json.dumps(report, indent=2))
        return report

    print(f"\nwindows: {args.rows:,} input rows, best of {args.reps}, CSV sink; "
          f"clink {results[CASES[0]]['clink']['version']}, DuckDB {results[CASES[0]]['duckdb']['version']} "
          f"with threads=1; {os.cpu_count()} CPUs\n")
    head = (f"{'case':15} {'clink ev/s':>10} {'wall s':>7} {'cpu s':>6} {'compile':>7} {'DuckDB ev/s':>11} "
            f"{'wall s':>7} {'cpu s':>6} {'ratio':>6} {'target':>7} {'':8} {'clink RSS':>9} "
            f"{'DuckDB RSS':>10} {'peak state':>10} {'rows out':>11}")
    print(head)
    print("-" * len(head))
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        print(f"{s['case']:15} {_rate(args.rows, c['wall_s']):>10} {c['wall_s']:7.2f} {c['cpu_s']:6.2f} "
              f"{c['compile_s']:7.2f} {_rate(args.rows, d['wall_s']):>11} {d['wall_s']:7.2f} "
              f"{d['cpu_s']:6.2f} {s['ratio']:6.2f} {'>= ' + format(s['target'], '.2f'):>7} "
              f"{'met' if s['met'] else 'NOT met':8} "
              f"{c['peak_rss_mib']:>5.0f} MiB {d['peak_rss_mib']:>6.0f} MiB "
              f"{_mib(c['peak_state_bytes']):>10} {c['rows_out']:>11,}")
    busiest = max(results[case]["clink"]["cpu_s"] / results[case]["clink"]["wall_s"] for case in CASES)
    print("\nratio = clink ev/s / DuckDB ev/s, judged against the target; ev/s = input rows / wall s."
          "\nwall s: clink's covers compiling the SQL (the 'compile' column) and running it; neither engine's"
          "\n  covers imports or data generation."
          "\ncpu s: user + system CPU of the run; more than wall s means more than one core was busy"
          f" (clink's highest cpu/wall: {busiest:.2f})."
          "\nRSS: peak resident set (VmHWM) of the run's own process, interpreter and libraries included"
          f" (clink target <= {RSS_TARGET_MIB} MiB)."
          "\npeak state: the largest window state clink held at once (Metrics.peak_state_bytes)."
          "\nrows out: rows of clink's output file.")
    warnings = []
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        if not s["rows_match"]:
            warnings.append(f"WARNING: {s['case']}: clink wrote {c['rows_out']:,} rows, DuckDB {d['rows_out']:,}")
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
    sizes = (args.rows, 3 * args.rows)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    runs = []
    for rows in sizes:
        parquet_path, csv_path = dataset(Path(args.data_dir), rows)
        _warm(csv_path if RSS_CASE.startswith("csv") else parquet_path)
        run = run_child("clink", RSS_CASE, rows, args)
        if not args.keep_output:
            Path(run["output"]).unlink()
        runs.append(run)
        print(f"  {RSS_CASE:12} {rows:>12,} rows: {run['wall_s']:7.2f} s wall {run['cpu_s']:7.2f} s cpu "
              f"{_rate(rows, run['wall_s'])} ev/s  peak RSS {run['peak_rss_mib']:.0f} MiB  "
              f"peak state {_mib(run['peak_state_bytes'])}", file=sys.stderr, flush=True)
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
    parser.add_argument("--rows", type=int, default=10_000_000, help="input rows (default 10,000,000)")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where generated data is cached")
    parser.add_argument("--out-dir", default=str(HERE / "out"), help="where the runs write their CSV files")
    parser.add_argument("--reps", type=int, default=1, help="runs per case and engine; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--rss-scaling", action="store_true",
                        help=f"run clink's {RSS_CASE} case at --rows and 3 x --rows; compare peak RSS")
    parser.add_argument("--verify", action="store_true",
                        help="also check that clink and DuckDB wrote the same rows, not just as many")
    parser.add_argument("--keep-output", action="store_true", help="keep the output CSV files")
    parser.add_argument("--one", metavar="ENGINE:CASE",
                        help=("run one case in this process (engine clink or duckdb; "
                              f"case one of {', '.join(CASES)})"))
    parser.add_argument("--profile", metavar="FILE", help="with --one: cProfile the run into FILE")
    args = parser.parse_args(argv)

    if args.one:
        engine, _, case = args.one.partition(":")
        if engine not in ("clink", "duckdb") or case not in CASES:
            parser.error("--one wants ENGINE:CASE with ENGINE clink or duckdb and CASE one of "
                         + ", ".join(CASES))
        parquet_path, csv_path = dataset(Path(args.data_dir), args.rows)
        source = csv_path if case.startswith("csv") else parquet_path
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        result = run_one(engine, case, source, Path(args.out_dir) / f"windows-{engine}-{case}.csv",
                         args.profile)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.rss_scaling:
        rss_scaling(args)
        return
    compare(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
