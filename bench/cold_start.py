"""Cold start: how long from process start to the first row of a small pipeline.

Each case runs in ``--runs`` fresh Python processes (10 by default, in turn); the time is
measured from just before the process is started to the moment its first result line is read
from its standard output:

    floor      python -c "import pyarrow"                        (to the process's exit)
    duckdb     python -c "import duckdb; print(duckdb.sql('SELECT 42').fetchall())"   (reference)
    clk        clink run q.clk        a compiled artefact, to the first printed row
    sql        clink run q.sql        from SQL, compiled before (the plan cache holds it)
    compile    clink run q.sql --recompile   from SQL, compiled in the process (parser tables cached)
    embedded   python -c "import clink; job = clink.load('q.clk').start(); ... poll"   first row

The pipeline is five generated rows through a filter, printed. Medians are printed with each
minus the floor, against the targets: clk and embedded within 60 ms of the floor, sql (and
compile) within 150 ms. Every case uses a fresh cache directory (``XDG_CACHE_HOME``) warmed by
one compile and one run before timing starts.

    python bench/cold_start.py              # the table
    python bench/cold_start.py --runs 20
    python bench/cold_start.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SQL = """CREATE TABLE orders (id BIGINT, price DOUBLE, region STRING)
  WITH ('connector' = 'datagen', 'number-of-rows' = '5', 'seed' = '7', 'fields.region.length' = '2');
SELECT id, price * 0.908 AS price_eur, region FROM orders WHERE price > 0 OR price <= 0;
"""

#: Milliseconds over the floor each case may take (median).
TARGETS = {"clk": 60, "embedded": 60, "sql": 150, "compile": 150}

EMBEDDED = """
import sys
import clink
plan = clink.load(sys.argv[1])
if hasattr(plan, "start"):
    job = plan.start()
    while (batch := job.poll()) is None:
        if not job.step():
            pass
else:
    batch = next(iter(plan.run()))
print("ROW", batch.slice(0, 1).to_pylist()[0], flush=True)
"""


def commands(folder: Path) -> dict[str, tuple[list[str], str | None]]:
    """Per case: the command, and the prefix of the line that counts as the first row (None: the
    process's exit)."""
    python = sys.executable
    clink = [python, "-m", "clink"]
    cases = {
        "floor": ([python, "-c", "import pyarrow"], None),
        "duckdb": ([python, "-c", "import duckdb; print('ROW', duckdb.sql('SELECT 42').fetchall(), flush=True)"],
                   "ROW"),
        "clk": ([*clink, "run", str(folder / "q.clk")], "+I["),
        "sql": ([*clink, "run", str(folder / "q.sql")], "+I["),
        "compile": ([*clink, "run", "--recompile", str(folder / "q.sql")], "+I["),
        "embedded": ([python, "-c", EMBEDDED, str(folder / "q.clk")], "ROW"),
    }
    try:
        import duckdb  # noqa: F401
    except ImportError:
        del cases["duckdb"]
    return cases


def time_to_first_row(command: list[str], prefix: str | None, cwd: Path) -> float:
    """Seconds from starting ``command`` to reading a stdout line starting with ``prefix``."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "0", "XDG_CACHE_HOME": str(cwd / "cache")}
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                               env=env)
    try:
        if prefix is None:
            process.wait(timeout=60)
            elapsed = time.perf_counter() - started
        else:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith(prefix):
                    elapsed = time.perf_counter() - started
                    break
            else:
                raise RuntimeError(f"no row from {command}: {process.stderr.read() if process.stderr else ''}")
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed with exit {process.returncode}")
    return elapsed


def prepare(folder: Path) -> None:
    (folder / "q.sql").write_text(SQL)
    env = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache")}
    subprocess.run([sys.executable, "-m", "clink", "compile", str(folder / "q.sql"), "-o", str(folder / "q.clk")],
                   check=True, capture_output=True, env=env)
    # One run from SQL first: the parser tables and this text's plan are then in their caches,
    # as on any machine after the first compile and the first run.
    subprocess.run([sys.executable, "-m", "clink", "run", str(folder / "q.sql")], check=True, capture_output=True,
                   env=env)


def measure(runs: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="clink-cold-") as tmp:
        folder = Path(tmp)
        prepare(folder)
        cases = commands(folder)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for i in range(runs):  # interleaved, so drift on a shared machine hits every case alike
            for name, (command, prefix) in cases.items():
                times[name].append(time_to_first_row(command, prefix, folder))
            print(f"  run {i + 1}/{runs}", file=sys.stderr, flush=True)
    return times


def report(times: dict[str, list[float]], as_json: bool) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["floor"]
    rows = []
    for name, values in times.items():
        over = (medians[name] - floor) * 1000
        target = TARGETS.get(name)
        rows.append({"case": name, "median_ms": medians[name] * 1000, "min_ms": min(values) * 1000,
                     "max_ms": max(values) * 1000, "over_floor_ms": over, "target_ms": target,
                     "met": None if target is None else over <= target})
    if as_json:
        print(json.dumps({"runs": len(times["floor"]), "cases": rows}, indent=2))
        return
    from clink import __version__

    print(f"\ncold start: {len(times['floor'])} fresh processes per case, clink {__version__}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    head = f"{'case':9} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'- floor ms':>11} {'target':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        verdict = "" if r["target_ms"] is None else f"<= {r['target_ms']}: {'met' if r['met'] else 'NOT met'}"
        print(f"{r['case']:9} {r['median_ms']:10.0f} {r['min_ms']:8.0f} {r['max_ms']:8.0f} "
              f"{r['over_floor_ms']:11.0f}  {verdict}")
    print("\nfloor: python -c 'import pyarrow' to exit; the others: process start to the first row read "
          "from stdout.\nclk: clink run of a compiled artefact; sql: clink run from SQL run before (plan cache); "
          "compile: clink run --recompile (parser tables cached);\nembedded: clink.load(...).start() and poll; "
          "duckdb: a one-row query, for reference.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per case (default 10)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    report(measure(args.runs), args.json)


if __name__ == "__main__":
    main()
