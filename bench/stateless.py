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
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SEED = 20240601
CHUNK_ROWS = 1_000_000  # rows generated at a time, and rows per Parquet row group
HOT_AUCTIONS = 1_000
HOT_SHARE = 0.9

CASES = ("csv-filter", "csv-map", "parquet-filter", "parquet-map")
#: Minimum clink/DuckDB throughput ratio per case.
TARGETS = {"csv-filter": 0.5, "csv-map": 0.85, "parquet-filter": 0.25, "parquet-map": 0.85}
RSS_TARGET_MIB = 512

COLUMNS = [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "BIGINT"), ("channel", "STRING"),
           ("url", "STRING"), ("date_time", "TIMESTAMP(3)"), ("extra", "STRING")]
DUCKDB_TYPES = {"BIGINT": "BIGINT", "STRING": "VARCHAR", "TIMESTAMP(3)": "TIMESTAMP"}

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


def dataset(data_dir: Path, rows: int) -> tuple[Path, Path]:
    """The Parquet and CSV files of ``rows`` bid rows, generated the first time."""
    folder = data_dir / f"bid-{rows}-s{SEED}"
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
    hot_ids = rng.integers(1, 100_000_000, HOT_AUCTIONS)
    pq_writer = csv_writer = None
    try:
        for start in range(0, rows, CHUNK_ROWS):
            batch = _bid_chunk(rng, start, min(CHUNK_ROWS, rows - start), hot_ids)
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


def _warm(path: Path) -> None:
    """Read a file once so every run finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def count_csv_rows(path: Path) -> int:
    """Data lines of a CSV file with a header (values hold no line breaks)."""
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            lines += chunk.count(b"\n")
    return lines - 1


# --- one run (in a child process) ---------------------------------------------------------------


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM) in MiB.

    ``getrusage``'s ``ru_maxrss`` survives ``execve``, so in a child it starts at the parent's peak
    (the parent that generated data is large); VmHWM belongs to the process image and is not
    inherited. Falls back to ``ru_maxrss`` where /proc is missing.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _clink_script(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    select, _, out_columns = QUERIES[kind]
    source_options = f"'connector' = 'filesystem', 'path' = '{source}', 'format' = '{fmt}'"
    if fmt == "csv":
        source_options += ", 'csv.header' = 'true'"
    columns = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    sink_columns = ", ".join(f"{n} {t}" for n, t in out_columns)
    return (f"CREATE TABLE bid ({columns}) WITH ({source_options});\n"
            f"CREATE TABLE out_table ({sink_columns}) WITH ('connector' = 'filesystem', "
            f"'path' = '{out}', 'format' = 'csv', 'csv.header' = 'true');\n"
            f"INSERT INTO out_table {select};\n")


def _duckdb_statement(case: str, source: Path, out: Path) -> str:
    fmt, kind = case.split("-")
    _, select, _ = QUERIES[kind]
    if fmt == "csv":
        columns = ", ".join(f"'{n}': '{DUCKDB_TYPES[t]}'" for n, t in COLUMNS)
        src = f"read_csv('{source}', header = true, delim = ',', quote = '\"', columns = {{{columns}}})"
    else:
        src = f"read_parquet('{source}')"
    return f"COPY ({select.format(src=src)}) TO '{out}' (FORMAT csv, HEADER)"


def run_one(engine: str, case: str, source: Path, out: Path, profile: str | None) -> dict:
    """Run one case in this process; returns timings and this process's peak RSS."""
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
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    if engine == "clink":
        t_compile = time.perf_counter()
        plan = clink.compile(text)
        compile_s = time.perf_counter() - t_compile
        metrics = plan.run().run()
        rows_out = sum(metrics.records_out.values())
    else:
        compile_s = 0.0
        rows_out = con.execute(text).fetchone()[0]
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    return {"engine": engine, "case": case, "wall_s": wall, "cpu_s": cpu, "compile_s": compile_s,
            "rows_out_reported": rows_out, "version": (clink if engine == "clink" else duckdb).__version__,
            "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base_rss,
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(engine: str, case: str, rows: int, args: argparse.Namespace) -> dict:
    """Run one case in a fresh interpreter and return what it measured, plus the output's row count."""
    out = Path(args.out_dir) / f"{engine}-{case}.csv"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", f"{engine}:{case}", "--rows", str(rows),
           "--data-dir", str(args.data_dir), "--out-dir", str(args.out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{engine} {case} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["rows_in"] = rows
    result["rows_out"] = count_csv_rows(out)
    if not args.keep_output:
        out.unlink()
    return result


# --- the report ---------------------------------------------------------------------------------


def _rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e6:.2f}M"


def compare(args: argparse.Namespace) -> dict:
    parquet_path, csv_path = dataset(Path(args.data_dir), args.rows)
    _warm(csv_path)
    _warm(parquet_path)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict]] = {}
    for case in CASES:
        results[case] = {}
        for engine in ("clink", "duckdb"):
            runs = [run_child(engine, case, args.rows, args) for _ in range(args.reps)]
            best = min(runs, key=lambda r: r["wall_s"])
            best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            best["walls_s"] = [round(r["wall_s"], 3) for r in runs]
            results[case][engine] = best
            print(f"  {case:15} {engine:6} {best['wall_s']:7.2f} s wall {best['cpu_s']:7.2f} s cpu "
                  f"{_rate(args.rows, best['wall_s'])} ev/s  peak RSS {best['peak_rss_mib']:.0f} MiB",
                  file=sys.stderr, flush=True)
    summary = []
    for case in CASES:
        c, d = results[case]["clink"], results[case]["duckdb"]
        ratio = d["wall_s"] / c["wall_s"]  # (rows / clink s) / (rows / duckdb s)
        summary.append({"case": case, "clink_ev_s": args.rows / c["wall_s"],
                        "duckdb_ev_s": args.rows / d["wall_s"],
                        "ratio": ratio, "target": TARGETS[case], "met": ratio >= TARGETS[case],
                        "rows_match": c["rows_out"] == d["rows_out"]})
    report = {"rows": args.rows, "reps": args.reps, "cpus": os.cpu_count(), "results": results,
              "summary": summary}
    if args.json:
        print(json.dumps(report, indent=2))
        return report

    print(f"\nstateless: {args.rows:,} input rows, best of {args.reps}, CSV sink; "
          f"clink {results[CASES[0]]['clink']['version']}, DuckDB {results[CASES[0]]['duckdb']['version']} "
          f"with threads=1; {os.cpu_count()} CPUs\n")
    head = (f"{'case':15} {'clink ev/s':>10} {'wall s':>7} {'cpu s':>6} {'compile':>7} {'DuckDB ev/s':>11} "
            f"{'wall s':>7} {'cpu s':>6} {'ratio':>6} {'target':>7} {'':8} {'clink RSS':>9} "
            f"{'DuckDB RSS':>10} "
            f"{'ratio excl. compile':>19}")
    print(head)
    print("-" * len(head))
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        print(f"{s['case']:15} {_rate(args.rows, c['wall_s']):>10} {c['wall_s']:7.2f} {c['cpu_s']:6.2f} "
              f"{c['compile_s']:7.2f} {_rate(args.rows, d['wall_s']):>11} {d['wall_s']:7.2f} "
              f"{d['cpu_s']:6.2f} {s['ratio']:6.2f} {'>= ' + format(s['target'], '.2f'):>7} "
              f"{'met' if s['met'] else 'NOT met':8} "
              f"{c['peak_rss_mib']:>5.0f} MiB {d['peak_rss_mib']:>6.0f} MiB "
              f"{d['wall_s'] / (c['wall_s'] - c['compile_s']):>19.2f}")
    busiest = max(results[case]["clink"]["cpu_s"] / results[case]["clink"]["wall_s"] for case in CASES)
    print("\nratio = clink ev/s / DuckDB ev/s, judged against the target; ev/s = input rows / wall s."
          "\nwall s: clink's covers compiling the SQL (the 'compile' column) and running it; neither engine's"
          "\n  covers imports or data generation. 'ratio excl. compile' leaves clink's compile time out."
          "\ncpu s: user + system CPU of the run; more than wall s means more than one core was busy"
          f" (clink's highest cpu/wall: {busiest:.2f})."
          "\nRSS: peak resident set (VmHWM) of the run's own process, interpreter and libraries included"
          f" (clink target <= {RSS_TARGET_MIB} MiB).")
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        if not s["rows_match"]:
            print(f"WARNING: {s['case']}: clink wrote {c['rows_out']:,} rows, DuckDB {d['rows_out']:,}")
        if c["rows_out"] != c["rows_out_reported"]:
            print(f"WARNING: {s['case']}: clink reported {c['rows_out_reported']:,} rows out "
                  f"but its file holds {c['rows_out']:,}")
    if all(s["rows_match"] for s in summary):
        print("row counts: clink and DuckDB wrote the same number of rows in every case ("
              + ", ".join(f"{s['case']} {results[s['case']]['clink']['rows_out']:,}" for s in summary) + ")")
    return report


RSS_CASES = ("csv-map", "parquet-map")


def rss_scaling(args: argparse.Namespace) -> dict:
    """Peak RSS of clink's map cases at ``--rows`` and 3 x ``--rows``: streaming should keep it flat."""
    sizes = (args.rows, 3 * args.rows)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    report: dict[str, dict] = {}
    for case in RSS_CASES:
        runs = []
        for rows in sizes:
            parquet_path, csv_path = dataset(Path(args.data_dir), rows)
            _warm(csv_path if case.startswith("csv") else parquet_path)
            run = run_child("clink", case, rows, args)
            runs.append(run)
            print(f"  {case:12} {rows:>12,} rows: {run['wall_s']:7.2f} s wall {run['cpu_s']:7.2f} s cpu "
                  f"{_rate(rows, run['wall_s'])} ev/s  peak RSS {run['peak_rss_mib']:.0f} MiB",
                  file=sys.stderr, flush=True)
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
    parser.add_argument("--rows", type=int, default=10_000_000, help="input rows (default 10,000,000)")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where generated data is cached")
    parser.add_argument("--out-dir", default=str(HERE / "out"), help="where the runs write their CSV files")
    parser.add_argument("--reps", type=int, default=1, help="runs per case and engine; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--rss-scaling", action="store_true",
                        help=("run clink's map cases (CSV and Parquet input) at --rows and 3 x --rows; "
                              "compare peak RSS"))
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
        result = run_one(engine, case, source, Path(args.out_dir) / f"{engine}-{case}.csv", args.profile)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.rss_scaling:
        rss_scaling(args)
        return
    compare(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
