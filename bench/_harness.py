"""The harness of the benchmark scripts (``stateless.py``, ``windows.py``).

Each script keeps its own data, queries and targets; this module writes and caches the data it
generates, runs one case in this process or in a fresh one, measures the run (wall time, CPU time,
peak RSS, optionally under cProfile), and prints the parts of the report the scripts share.
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
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

ENGINES = ("clink", "duckdb")
DUCKDB_TYPES = {"BIGINT": "BIGINT", "STRING": "VARCHAR", "TIMESTAMP(3)": "TIMESTAMP"}


# --- data ---------------------------------------------------------------------------------------


def dataset(folder: Path, rows: int, batches: Callable[[], Iterable],
            row_group_size: int) -> tuple[Path, Path]:
    """The Parquet and CSV files in ``folder`` of the ``rows`` rows ``batches()`` yields, written the
    first time (Parquet row groups of ``row_group_size`` rows, CSV with a header)."""
    parquet_path, csv_path = folder / "bid.parquet", folder / "bid.csv"
    if (folder / "_COMPLETE").exists():
        return parquet_path, csv_path

    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    started = time.perf_counter()
    print(f"generating {rows:,} rows into {folder} ...", file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pq_writer = csv_writer = None
    try:
        for batch in batches():
            if pq_writer is None:
                pq_writer = pq.ParquetWriter(folder / ".bid.parquet.tmp", batch.schema)
                # Strings hold no delimiter, quote or line break, so nothing needs quoting.
                csv_writer = pa_csv.CSVWriter(str(folder / ".bid.csv.tmp"), batch.schema,
                                              write_options=pa_csv.WriteOptions(quoting_style="none"))
            pq_writer.write_batch(batch, row_group_size=row_group_size)
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


def case_source(dataset: Callable[[Path, int], tuple[Path, Path]], data_dir: Path, rows: int,
                case: str) -> Path:
    """The input file of ``case`` (``csv-...`` or ``parquet-...``) at ``rows`` rows."""
    parquet_path, csv_path = dataset(data_dir, rows)
    return csv_path if case.startswith("csv") else parquet_path


def warm(path: Path) -> None:
    """Read a file once so every run finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def remove_output(path: Path) -> None:
    """Delete what a run wrote: DuckDB's file, or clink's sink directory of part files."""
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def csv_files(path: Path | str) -> str:
    """What DuckDB's read_csv takes for a run's output: the file, or a glob of the part files."""
    return f"{path}/part-*.csv" if Path(path).is_dir() else str(path)


def count_csv_rows(path: Path) -> int:
    """Data lines of a CSV file with a header (values hold no line breaks), or of every part file
    in a directory (clink's filesystem sink writes a directory, as Flink's does)."""
    if path.is_dir():
        return sum(count_csv_rows(p) for p in sorted(path.iterdir()) if p.name.startswith("part-"))
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            lines += chunk.count(b"\n")
    return lines - 1


# --- the statements -----------------------------------------------------------------------------


def clink_script(fmt: str, source: Path, columns: list[tuple[str, str]], select: str,
                 out_columns: list[tuple[str, str]], out: Path, watermark: str | None = None) -> str:
    """Source table ``bid`` over ``source`` (``fmt`` csv or parquet), a CSV sink over ``out``, and
    ``INSERT INTO`` the sink ``select``; ``watermark`` is the ``WATERMARK FOR`` clause's body."""
    source_options = f"'connector' = 'filesystem', 'path' = '{source}', 'format' = '{fmt}'"
    if fmt == "csv":
        source_options += ", 'csv.header' = 'true'"
    table_columns = ", ".join(f"{n} {t}" for n, t in columns)
    if watermark:
        table_columns += f", WATERMARK FOR {watermark}"
    sink_columns = ", ".join(f"{n} {t}" for n, t in out_columns)
    return (f"CREATE TABLE bid ({table_columns}) WITH ({source_options});\n"
            f"CREATE TABLE out_table ({sink_columns}) WITH ('connector' = 'filesystem', "
            f"'path' = '{out}', 'format' = 'csv', 'csv.header' = 'true');\n"
            f"INSERT INTO out_table {select};\n")


def duckdb_source(fmt: str, source: Path, columns: list[tuple[str, str]]) -> str:
    """DuckDB's table function reading ``source`` (CSV with typed ``columns``, or Parquet)."""
    if fmt == "csv":
        types = ", ".join(f"'{n}': '{DUCKDB_TYPES[t]}'" for n, t in columns)
        return f"read_csv('{source}', header = true, delim = ',', quote = '\"', columns = {{{types}}})"
    return f"read_parquet('{source}')"


def duckdb_copy(query: str, out: Path) -> str:
    return f"COPY ({query}) TO '{out}' (FORMAT csv, HEADER)"


# --- one run (in a child process) ---------------------------------------------------------------


def cpu_seconds() -> float:
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


def run_one(engine: str, case: str, out: Path, text: str, profile: str | None, *,
            clink_metrics: Callable[[object], dict] | None = None,
            profile_sorts: tuple[str, ...] = ("tottime",)) -> dict:
    """Run ``text`` (a clink script or a DuckDB statement writing ``out``) in this process; returns
    timings and this process's peak RSS, plus ``clink_metrics(metrics)`` of a clink run. With
    ``profile``, the run is profiled into that file and its top 30 functions printed to stderr
    by each of ``profile_sorts``."""
    remove_output(out)
    if engine == "clink":
        # Modules are imported before the clock starts, as DuckDB's are.
        import clink
        import clink.api
        import clink.compiler
    else:
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads = 1")
    base_rss = peak_rss_mib()

    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    extra: dict = {}
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    if engine == "clink":
        t_compile = time.perf_counter()
        plan = clink.compile(text)
        compile_s = time.perf_counter() - t_compile
        metrics = plan.run().run()
        rows_out = sum(metrics.records_out.values())
        if clink_metrics is not None:
            extra = clink_metrics(metrics)
    else:
        compile_s = 0.0
        rows_out = con.execute(text).fetchone()[0]
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
        import pstats

        stats = pstats.Stats(profiler, stream=sys.stderr)
        for key in profile_sorts:
            stats.sort_stats(key).print_stats(30)
    return {"engine": engine, "case": case, "wall_s": wall, "cpu_s": cpu, "compile_s": compile_s,
            "rows_out_reported": rows_out, "version": (clink if engine == "clink" else duckdb).__version__,
            "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base_rss,
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def output_path(out_dir: str, prefix: str, engine: str, case: str) -> Path:
    """The CSV file a run of ``engine`` on ``case`` writes."""
    return Path(out_dir) / f"{prefix}{engine}-{case}.csv"


def run_child(script: Path, out: Path, engine: str, case: str, rows: int, args: argparse.Namespace) -> dict:
    """Run one case through ``script --one`` in a fresh interpreter and return what it measured, plus
    the row count of ``out``, the file it wrote."""
    cmd = [sys.executable, str(script), "--one", f"{engine}:{case}", "--rows", str(rows),
           "--data-dir", str(args.data_dir), "--out-dir", str(args.out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{engine} {case} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["rows_in"] = rows
    result["rows_out"] = count_csv_rows(out)
    return result


# --- the runs -----------------------------------------------------------------------------------


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e6:.2f}M"


def progress(label: str, rows: int, run: dict, note: str = "") -> None:
    """One line on stderr about a finished run."""
    print(f"  {label} {run['wall_s']:7.2f} s wall {run['cpu_s']:7.2f} s cpu "
          f"{rate(rows, run['wall_s'])} ev/s  peak RSS {run['peak_rss_mib']:.0f} MiB{note}",
          file=sys.stderr, flush=True)


def measure(cases: Iterable[str], args: argparse.Namespace, dataset: Callable, run_child: Callable, *,
            clink_max: tuple[str, ...] = (), note: Callable[[str, dict], str] | None = None,
            after_case: Callable[[str, dict, dict], None] | None = None) -> dict[str, dict[str, dict]]:
    """Each case through each engine, ``--reps`` times: the fastest run, with the largest peak RSS
    (and, of clink's runs, the largest of each of ``clink_max``) of its runs. ``note(engine, best)``
    ends the progress line; ``after_case(case, clink, duckdb)`` follows each case's runs."""
    parquet_path, csv_path = dataset(Path(args.data_dir), args.rows)
    warm(csv_path)
    warm(parquet_path)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict]] = {}
    for case in cases:
        results[case] = {}
        for engine in ENGINES:
            # Every run writes the same file; each run's rows are counted before the next starts.
            runs = [run_child(engine, case, args.rows, args) for _ in range(args.reps)]
            best = min(runs, key=lambda r: r["wall_s"])
            best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            if engine == "clink":
                for key in clink_max:
                    best[key] = max(r[key] for r in runs)
            best["walls_s"] = [round(r["wall_s"], 3) for r in runs]
            results[case][engine] = best
            progress(f"{case:15} {engine:6}", args.rows, best, note(engine, best) if note else "")
        if after_case is not None:
            after_case(case, results[case]["clink"], results[case]["duckdb"])
    return results


def scaling_runs(case: str, args: argparse.Namespace, dataset: Callable, run_child: Callable,
                 note: Callable[[dict], str] | None = None) -> list[dict]:
    """clink's ``case`` at ``--rows`` and at 3 x ``--rows``, one fresh process each."""
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    runs = []
    for rows in (args.rows, 3 * args.rows):
        warm(case_source(dataset, Path(args.data_dir), rows, case))
        run = run_child("clink", case, rows, args)
        runs.append(run)
        progress(f"{case:12} {rows:>12,} rows:", rows, run, note(run) if note else "")
    return runs


# --- the report ---------------------------------------------------------------------------------


def summarize(results: dict[str, dict[str, dict]], rows: int, targets: dict[str, float]) -> list[dict]:
    """Per case: both engines' events/s, their ratio, and whether it meets the target."""
    summary = []
    for case, r in results.items():
        c, d = r["clink"], r["duckdb"]
        ratio = d["wall_s"] / c["wall_s"]  # (rows / clink s) / (rows / duckdb s)
        summary.append({"case": case, "clink_ev_s": rows / c["wall_s"],
                        "duckdb_ev_s": rows / d["wall_s"],
                        "ratio": ratio, "target": targets[case], "met": ratio >= targets[case],
                        "rows_match": c["rows_out"] == d["rows_out"]})
    return summary


def report(args: argparse.Namespace, results: dict, summary: list[dict]) -> dict:
    """The comparison's report; with ``--json``, printed as JSON."""
    report = {"rows": args.rows, "reps": args.reps, "cpus": os.cpu_count(), "results": results,
              "summary": summary}
    if args.json:
        print(json.dumps(report, indent=2))
    return report


def print_table(name: str, args: argparse.Namespace, results: dict[str, dict[str, dict]],
                summary: list[dict], rss_target_mib: int, extra_head: str,
                extra_cells: Callable[[dict, dict, dict], str], wall_note: str = "", more: str = "") -> None:
    """The title, one row per case and what the columns mean. ``extra_head`` and
    ``extra_cells(s, clink, duckdb)`` add the script's own columns; ``wall_note`` ends the legend's
    entry for wall time, and ``more`` follows the legend."""
    first = next(iter(results.values()))
    print(f"\n{name}: {args.rows:,} input rows, best of {args.reps}, CSV sink; "
          f"clink {first['clink']['version']}, DuckDB {first['duckdb']['version']} "
          f"with threads=1; {os.cpu_count()} CPUs\n")
    head = (f"{'case':15} {'clink ev/s':>10} {'wall s':>7} {'cpu s':>6} {'compile':>7} {'DuckDB ev/s':>11} "
            f"{'wall s':>7} {'cpu s':>6} {'ratio':>6} {'target':>7} {'':8} {'clink RSS':>9} "
            f"{'DuckDB RSS':>10} {extra_head}")
    print(head)
    print("-" * len(head))
    for s in summary:
        c, d = results[s["case"]]["clink"], results[s["case"]]["duckdb"]
        print(f"{s['case']:15} {rate(args.rows, c['wall_s']):>10} {c['wall_s']:7.2f} {c['cpu_s']:6.2f} "
              f"{c['compile_s']:7.2f} {rate(args.rows, d['wall_s']):>11} {d['wall_s']:7.2f} "
              f"{d['cpu_s']:6.2f} {s['ratio']:6.2f} {'>= ' + format(s['target'], '.2f'):>7} "
              f"{'met' if s['met'] else 'NOT met':8} "
              f"{c['peak_rss_mib']:>5.0f} MiB {d['peak_rss_mib']:>6.0f} MiB "
              f"{extra_cells(s, c, d)}")
    busiest = max(r["clink"]["cpu_s"] / r["clink"]["wall_s"] for r in results.values())
    print("\nratio = clink ev/s / DuckDB ev/s, judged against the target; ev/s = input rows / wall s."
          "\nwall s: clink's covers compiling the SQL (the 'compile' column) and running it; neither engine's"
          f"\n  covers imports or data generation.{wall_note}"
          "\ncpu s: user + system CPU of the run; more than wall s means more than one core was busy"
          f" (clink's highest cpu/wall: {busiest:.2f})."
          "\nRSS: peak resident set (VmHWM) of the run's own process, interpreter and libraries included"
          f" (clink target <= {rss_target_mib} MiB).{more}")


def count_warning(case: str, c: dict, d: dict) -> list[str]:
    """A warning if clink's and DuckDB's files hold different numbers of rows."""
    if c["rows_out"] == d["rows_out"]:
        return []
    return [f"WARNING: {case}: clink wrote {c['rows_out']:,} rows, DuckDB {d['rows_out']:,}"]


def reported_warning(case: str, c: dict) -> list[str]:
    """A warning if clink's file holds another number of rows than clink reported writing."""
    if c["rows_out"] == c["rows_out_reported"]:
        return []
    return [(f"WARNING: {case}: clink reported {c['rows_out_reported']:,} rows out "
             f"but its file holds {c['rows_out']:,}")]


# --- the command line ---------------------------------------------------------------------------


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=10_000_000, help="input rows (default 10,000,000)")
    parser.add_argument("--data-dir", default=str(HERE / "data"), help="where generated data is cached")
    parser.add_argument("--out-dir", default=str(HERE / "out"), help="where the runs write their CSV files")
    parser.add_argument("--reps", type=int, default=1, help="runs per case and engine; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def add_run_arguments(parser: argparse.ArgumentParser, cases: Iterable[str]) -> None:
    parser.add_argument("--keep-output", action="store_true", help="keep the output CSV files")
    parser.add_argument("--one", metavar="ENGINE:CASE",
                        help=("run one case in this process (engine clink or duckdb; "
                              f"case one of {', '.join(cases)})"))
    parser.add_argument("--profile", metavar="FILE", help="with --one: cProfile the run into FILE")


def main(parser: argparse.ArgumentParser, argv: list[str] | None, cases: Iterable[str], out_prefix: str,
         dataset: Callable, run_one: Callable, compare: Callable, rss_scaling: Callable) -> None:
    """Parse the command line (``parser`` already holds the common and the script's own options) and
    run what it asks for: ``--one``, ``--rss-scaling`` or, by default, the comparison."""
    add_run_arguments(parser, cases)
    args = parser.parse_args(argv)
    if args.one:
        one(parser, args, cases, dataset, run_one, out_prefix)
    elif args.rss_scaling:
        rss_scaling(args)
    else:
        compare(args)


def one(parser: argparse.ArgumentParser, args: argparse.Namespace, cases: Iterable[str], dataset: Callable,
        run_one: Callable, prefix: str) -> None:
    """``--one ENGINE:CASE``: run it in this process and print its ``RESULT`` line for the parent."""
    engine, _, case = args.one.partition(":")
    if engine not in ENGINES or case not in cases:
        parser.error("--one wants ENGINE:CASE with ENGINE clink or duckdb and CASE one of "
                     + ", ".join(cases))
    source = case_source(dataset, Path(args.data_dir), args.rows, case)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    result = run_one(engine, case, source, output_path(args.out_dir, prefix, engine, case), args.profile)
    print("RESULT " + json.dumps(result), flush=True)
