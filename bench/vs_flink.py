"""clink against Apache Flink on the original Nexmark texts, over the same JSON-lines file.

Both engines read one JSON-lines file of ``--events`` Nexmark events in nexmark-flink's event
layout (``event_type`` and the ROW columns ``person``, ``auction``, ``bid``; see
``_nexmark_json.py``), declared by ``bench/nexmark/ddl.sql`` with its ``WITH`` clause replaced by
``'connector' = 'filesystem', 'format' = 'json'``, and run ``bench/nexmark/qN.sql`` unchanged into
their blackhole sinks, parallelism 1, one query after another, in one run:

- clink: each query in a fresh process of this Python; the time runs from ``clink.sql(...)``
  (compiling included) to the end of the run; the interpreter's start and ``import clink`` are
  not counted.
- Flink: PyFlink (``apache-flink``) in its own virtual environment, ``bench/.flink-venv``, made by
  this script on first use (``pip install apache-flink``; Java 17 must be on the PATH). One JVM
  (a local mini-cluster, streaming mode, ``parallelism.default = 1``) runs every query; a trivial
  job runs first so the JVM's start and warm-up are not counted; each query's time runs from
  ``execute_sql`` of its INSERT (planning included) to the end of its job.
- DuckDB: q0 over the same file (``read_json`` with the declared columns, ``threads = 1``,
  materialized), against clink's q0: the JSON reader's standing against a batch engine's.

events/s is the event count over that time. The table gives both and their ratio per query and
the geometric mean of the ratios over the queries both engines ran; a query that an engine
cannot run is reported with the first line of its error. Next to them, events per CPU second:
clink's process (compiling and running), the Flink JVM's every thread (the job's, the garbage
collector's, the JIT compiler's), DuckDB's process; on a shared machine the wall times of runs
made minutes apart see different loads, and the CPU times far less so.

Flink 2's parser takes ``dateTime`` for a keyword, so the texts Flink is given quote it
(`` `dateTime` ``); nothing else in them changes.

    python bench/vs_flink.py                            # 5M events, the default queries
    python bench/vs_flink.py --events 500000 --queries q0,q1,q5   # a quick run (a minute or two)
    python bench/vs_flink.py --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "nexmark"
FLINK_VENV = HERE / ".flink-venv"
DEFAULT_QUERIES = "q0,q1,q2,q5,q7,q8,q9,q16,q18,q19,q20"

CLINK_CHILD = """
import json, sys, time
import clink
t0 = time.perf_counter()
c0 = time.process_time()
result = clink.sql(open(sys.argv[1]).read(), name=sys.argv[2], init=[sys.argv[3]])
metrics = result.run()
print('RESULT ' + json.dumps({'wall_s': time.perf_counter() - t0, 'cpu_s': time.process_time() - c0,
                              'events_in': sum(metrics.records_in.values()),
                              'rows_out': sum(metrics.records_out.values())}))
"""


def statements(text: str) -> list[str]:
    """The statements of a SQL script: comments dropped, split at ``;`` outside quotes."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    out, current, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == ";" and not quoted:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    out.append("".join(current).strip())
    return [s for s in out if s]


def flink_text(text: str) -> str:
    """``text`` for Flink 2's parser, which takes ``dateTime`` for a keyword: quoted as an
    identifier (`` `dateTime` ``), which means the same to both engines."""
    return re.sub(r"(?<![`\w])dateTime(?![`\w])", "`dateTime`", text)


def jvm_cpu_seconds() -> float:
    """CPU time (user + system, every thread) of the JVMs this process started."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # fields[1] is the parent's pid
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def flink_child(spec: str) -> None:
    """Runs in the Flink venv: every query in one JVM, a ``RESULT`` line each."""
    ddl_path, queries = json.loads(spec)
    from pyflink.table import EnvironmentSettings, TableEnvironment

    def environment() -> TableEnvironment:
        env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        env.get_config().set("parallelism.default", "1")
        return env

    warm = environment()  # starts the JVM and runs one small job to warm it up
    warm.execute_sql("CREATE TABLE warm_sink (x INT) WITH ('connector' = 'blackhole')")
    warm.execute_sql("INSERT INTO warm_sink VALUES (1), (2)").wait()
    ddl = statements(flink_text(Path(ddl_path).read_text()))
    for query in queries:
        try:
            env = environment()
            for stmt in ddl:
                env.execute_sql(stmt)
            *setup, insert = statements(flink_text((QUERIES / f"{query}.sql").read_text()))
            for stmt in setup:
                env.execute_sql(stmt)
            t0, c0 = time.perf_counter(), jvm_cpu_seconds()
            env.execute_sql(insert).wait()
            result = {"query": query, "wall_s": time.perf_counter() - t0, "cpu_s": jvm_cpu_seconds() - c0}
        except Exception as e:  # noqa: BLE001 - reported per query, the run goes on
            # py4j's first line only names the call; the Java exception's own message follows.
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            first = next((ln for ln in lines if "Exception:" in ln), lines[0] if lines else type(e).__name__)
            result = {"query": query, "error": first[:300]}
        print("RESULT " + json.dumps(result), flush=True)


def flink_python() -> Path:
    """The Python of the Flink venv, made (and ``apache-flink`` installed) when missing."""
    python = FLINK_VENV / "bin" / "python"
    if not python.exists():
        print(f"making {FLINK_VENV} (pip install apache-flink; this takes a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True)
    done = subprocess.run([str(python), "-c", "import pyflink"], capture_output=True, check=False)
    if done.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "apache-flink"], check=True)
    return python


def run_flink(ddl: Path, queries: list[str]) -> dict[str, dict]:
    python = flink_python()
    done = subprocess.run([str(python), __file__, "--flink-child", json.dumps([str(ddl), queries])],
                          capture_output=True, text=True, check=False)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line.removeprefix("RESULT "))
            results[r["query"]] = r
    for q in queries:
        if q not in results:
            results[q] = {"query": q, "error": f"Flink exited ({done.returncode}): {done.stderr.strip()[-300:]}"}
    return results


def run_clink(query: str, ddl: Path, folder: Path) -> dict:
    path = folder / f"{query}.sql"
    path.write_text((QUERIES / f"{query}.sql").read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(QUERIES), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", CLINK_CHILD, str(path), f"{query}.sql", str(ddl)],
                          capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return {"query": query, "error": (tail[-1] if tail else f"exit {done.returncode}")[:300]}
    return {"query": query, **json.loads(lines[-1].removeprefix("RESULT "))}


def run_duckdb_q0(path: Path) -> dict:
    import duckdb

    sys.path.insert(0, str(HERE))
    from json_formats import SCHEMAS, duckdb_type

    columns = "{" + ", ".join(f"{f.name}: '{duckdb_type(f.type)}'" for f in SCHEMAS["all"]) + "}"
    con = duckdb.connect()
    con.execute("SET threads = 1")
    t0, c0 = time.perf_counter(), time.process_time()
    # Materialized, as clink's sink receives every row: a bare COUNT(*) would skip the work.
    con.execute("CREATE TEMP TABLE result AS SELECT bid.auction, bid.bidder, bid.price, bid.dateTime, bid.extra "
                f"FROM read_json('{path}', format = 'newline_delimited', columns = {columns}) WHERE event_type = 2")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "rows_out": con.execute("SELECT COUNT(*) FROM result").fetchone()[0]}


def rate(events: int, r: dict, key: str = "wall_s") -> str:
    if "error" in r:
        return "failed"
    return f"{events / r[key] / 1e6:.2f} M" if r.get(key) else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5_000_000, help="Nexmark events (default 5000000)")
    parser.add_argument("--queries", default=DEFAULT_QUERIES, help=f"queries to run (default {DEFAULT_QUERIES})")
    parser.add_argument("--data", type=Path, default=HERE / "data", help="where the event file is kept")
    parser.add_argument("--no-flink", action="store_true", help="run clink and DuckDB only")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--flink-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flink_child:
        flink_child(args.flink_child)
        return
    sys.path.insert(0, str(HERE))
    from _nexmark_json import events_file, file_ddl

    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    path = events_file(args.events, args.data)
    folder = args.data / f"vs-flink-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    ddl = folder / "ddl.sql"
    ddl.write_text(file_ddl(path))
    print(f"{args.events} events, {path.stat().st_size / 2**20:.0f} MiB of JSON lines: {path}", flush=True)
    duck = run_duckdb_q0(path)  # first, next to clink's q0
    clink = {}
    for q in queries:
        clink[q] = run_clink(q, ddl, folder)
        print(f"  clink {q}: {rate(args.events, clink[q])} ev/s {clink[q].get('error', '')}", flush=True)
    flink = {q: {"query": q, "error": "not run (--no-flink)"} for q in queries} if args.no_flink else \
        run_flink(ddl, queries)

    print(f"\n{'query':6} {'clink ev/s':>11} {'Flink ev/s':>11} {'ratio':>7}   "
          f"{'clink ev/CPU s':>14} {'Flink ev/CPU s':>14} {'CPU ratio':>9}")
    ratios, cpu_ratios, rows = [], [], []
    for q in queries:
        c, f = clink[q], flink[q]
        ratio = f["wall_s"] / c["wall_s"] if "wall_s" in c and "wall_s" in f else None
        cpu_ratio = f["cpu_s"] / c["cpu_s"] if "cpu_s" in c and f.get("cpu_s") else None
        if ratio is not None:
            ratios.append(ratio)
        if cpu_ratio is not None:
            cpu_ratios.append(cpu_ratio)
        print(f"{q:6} {rate(args.events, c):>11} {rate(args.events, f):>11} {f'{ratio:.2f}x' if ratio else '-':>7}   "
              f"{rate(args.events, c, 'cpu_s'):>14} {rate(args.events, f, 'cpu_s'):>14} "
              f"{f'{cpu_ratio:.2f}x' if cpu_ratio else '-':>9}")
        rows.append({"query": q, "clink": c, "flink": f, "ratio": ratio, "cpu_ratio": cpu_ratio})
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    cpu_geomean = math.exp(sum(map(math.log, cpu_ratios)) / len(cpu_ratios)) if cpu_ratios else None
    if geomean:
        print(f"{'geomean':6} {'':>11} {'':>11} {geomean:.2f}x   {'':>14} {'':>14} "
              f"{f'{cpu_geomean:.2f}x' if cpu_geomean else '-':>9}   (over {len(ratios)} queries)")
    for q in queries:
        for engine, r in (("clink", clink[q]), ("Flink", flink[q])):
            if "error" in r:
                print(f"  {q} does not run in {engine}: {r['error']}")
    print(f"\nDuckDB q0 over the same file (threads = 1): {rate(args.events, duck)} ev/s, "
          f"{rate(args.events, duck, 'cpu_s')} ev/CPU s, {duck['rows_out']} rows")
    if "wall_s" in clink.get("q0", {}):
        c = clink["q0"]
        print(f"clink JSON q0: {rate(args.events, c)} ev/s, {rate(args.events, c, 'cpu_s')} ev/CPU s, "
              f"{c['rows_out']} rows: {duck['wall_s'] / c['wall_s']:.2f}x DuckDB by wall time, "
              f"{duck['cpu_s'] / c['cpu_s']:.2f}x by CPU time (target 0.8x)")
    if args.json:
        print(json.dumps({"events": args.events, "queries": rows, "geomean": geomean, "cpu_geomean": cpu_geomean,
                          "duckdb_q0": duck}, indent=2))


if __name__ == "__main__":
    main()
