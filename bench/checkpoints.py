"""Checkpointing cost benchmark: clink's tumbling window case with and without checkpoints.

Reuses ``windows.py``'s cached out-of-order bid data and its tumble query (TUMBLE 10 s,
``COUNT(*)``, ``MAX(price)`` per auction) into a CSV filesystem sink whose path is a directory
(one part file per checkpoint). Per input format (CSV, Parquet), five clink-only runs:

    none         no checkpoints, memory state (the reference)
    1s           a checkpoint every 1 s of processing time ('execution.checkpointing.interval')
    100k         a checkpoint every 100,000 source rows ('execution.checkpointing.interval-rows')
    sqlite       no checkpoints, state in SQLite ('state.backend' = 'sqlite')
    sqlite_1s    SQLite state and a checkpoint every 1 s

each in a fresh subprocess with a fresh state directory. The table gives events/s, the ratio
against the same format's ``none`` run, checkpoint count, p50/p99 checkpoint duration, the size
of the newest checkpoint directory, peak window state in memory and peak RSS; every run's output
rows are checked against the ``none`` run of the same format.

``--keys N`` runs a second table: a tumbling window holding N distinct keys at once (datagen,
one key per row, every row in one 7-day window) under each backend with 1 s checkpoints, for
peak RSS against the 1 GiB target.

    python bench/checkpoints.py                   # 10M rows, the table
    python bench/checkpoints.py --rows 1000000    # quicker
    python bench/checkpoints.py --keys 5000000    # and the large-state table
    python bench/checkpoints.py --one csv-1s      # one run in this process

``--increment-keys N`` runs the incremental case alone: the sqlite backend holding N keys of value
state (one int64 per key, as a COUNT per key keeps), checkpointed into a checkpoint store; then,
``--reps`` times, 1% of the keys (``--changed``) are changed at random and a checkpoint taken,
once incremental (a delta of the changed rows) and once full (a copy of the whole database), on
the same database in the same process, alternately. It prints both times, each split into the
commit (writing the changed rows into the database, the same work in both) and the copy (the
piece, or the whole file, written, fsynced and hashed into the store), with the process's CPU
time and the rows in the state's change log, and the ratio of the incremental checkpoint to the
full one against the 10% target. The merge of the change log into the state's table, which
runs between checkpoints, is timed apart, with its cost per checkpoint it serves.

    python bench/checkpoints.py --increment-keys 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness
import windows

FORMATS = ("csv", "parquet")
SQLITE = {"state.backend": "sqlite"}
EVERY_SECOND = {"execution.checkpointing.interval": "1 s"}
MODES = {
    "none": {},
    "1s": EVERY_SECOND,
    "100k": {"execution.checkpointing.interval-rows": "100000"},
    "sqlite": SQLITE,
    "sqlite_1s": {**SQLITE, **EVERY_SECOND},
}
CASES = tuple(f"{fmt}-{mode}" for fmt in FORMATS for mode in MODES)
#: The largest throughput a checkpointed run may lose against the same format's run without
#: checkpoints on memory state, per backend.
MAX_COST = {"memory": 0.15, "sqlite": 0.40}
#: The peak RSS a run holding millions of keys must stay under.
MAX_RSS_MIB = 1024
KEYS_BACKENDS = ("memory", "sqlite")
OUT_PREFIX = "checkpoints-"  # outputs are <out-dir>/checkpoints-<case>/ (directories)


# --- one run (in a child process) ---------------------------------------------------------------


def _script(fmt: str, source: Path, out: Path) -> str:
    """windows.py's tumble query over ``source``; the sink's path ends with '/' (a directory)."""
    select, _, out_columns = windows.QUERIES["tumble"]
    return _harness.clink_script(fmt, source, windows.COLUMNS, select, out_columns, Path(f"{out}/"),
                                 watermark=f"date_time AS date_time - {windows.WATERMARK_DELAY}")


def _keys_script(keys: int, out: Path) -> str:
    """A tumbling window that holds ``keys`` distinct keys at once: a datagen sequence of keys,
    random timestamps within one day (so within one 7-day window), a CSV directory sink."""
    return f"""
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH ('connector' = 'datagen', 'seed' = '5', 'batch-size' = '65536', 'fields.auction.kind' = 'sequence',
      'fields.auction.start' = '1', 'fields.auction.end' = '{keys}', 'fields.price.min' = '1',
      'fields.price.max' = '999');
CREATE TABLE totals (auction BIGINT, n BIGINT, total BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv', 'csv.header' = 'true');
INSERT INTO totals
SELECT auction, COUNT(*), SUM(price) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '7' DAY))
GROUP BY window_start, window_end, auction;
"""


def _newest_checkpoint_bytes(state_dir: Path) -> tuple[str | None, int]:
    """The newest ``chk-<n>`` directory under ``state_dir/checkpoints`` and the bytes of its files."""
    folder = state_dir / "checkpoints"
    chks = [p for p in folder.glob("chk-*") if p.is_dir() and p.name[4:].isdigit()] if folder.is_dir() else []
    if not chks:
        return None, 0
    newest = max(chks, key=lambda p: int(p.name[4:]))
    return newest.name, sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())


def run_one(case: str, source: Path, out: Path) -> dict:
    """Run ``case`` in this process with a fresh state directory; returns timings and metrics."""
    import clink
    import clink.api
    import clink.compiler
    from clink.runtime.context import RuntimeContext

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if case.startswith("keys-"):
        _, backend, keys = case.split("-")
        text = _keys_script(int(keys), out)
        config = {**EVERY_SECOND, "state.backend": backend}
    else:
        fmt, mode = case.split("-")
        text = _script(fmt, source, out)
        config = dict(MODES[mode])
    base_rss = _harness.peak_rss_mib()
    with tempfile.TemporaryDirectory(prefix="clink-chk-state-") as tmp:
        cpu0, t0 = _harness.cpu_seconds(), time.perf_counter()
        # Only checkpointed runs get a state directory (with one, a run ends with a checkpoint).
        checkpointed = any(k.startswith("execution.checkpointing") for k in config)
        context = RuntimeContext(config=config, state_dir=Path(tmp) if checkpointed else None)
        result = clink.sql(text, context=context)
        metrics = result.run()
        wall = time.perf_counter() - t0
        cpu = _harness.cpu_seconds() - cpu0
        newest, newest_bytes = _newest_checkpoint_bytes(Path(tmp))
    return {"case": case, "wall_s": wall, "cpu_s": cpu, "version": clink.__version__,
            "rows_out_reported": sum(metrics.records_out.values()),
            "records_in": sum(metrics.records_in.values()),
            "late_records": sum(metrics.late_records.values()),
            "checkpoints": metrics.checkpoints, "checkpoint_ms": list(metrics.checkpoint_ms),
            "newest_checkpoint": newest, "newest_checkpoint_bytes": newest_bytes,
            "peak_state_bytes": metrics.peak_state_bytes,
            "peak_rss_mib": _harness.peak_rss_mib(), "base_rss_mib": base_rss}


def count_dir_rows(folder: Path) -> int:
    """Data rows across the visible part files of ``folder`` (each a CSV file with a header)."""
    return sum(_harness.count_csv_rows(p) for p in sorted(folder.iterdir())
               if p.is_file() and not p.name.startswith((".", "_")))


def run_child(case: str, args: argparse.Namespace) -> dict:
    """Run ``case`` through ``--one`` in a fresh interpreter; adds the output directory's row count."""
    out = Path(args.out_dir) / f"{OUT_PREFIX}{case}"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", case, "--rows", str(args.rows),
           "--data-dir", str(args.data_dir), "--out-dir", str(args.out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=_harness.ROOT, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{case} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["rows_in"] = args.rows
    result["rows_out"] = count_dir_rows(out)
    result["part_files"] = sum(1 for p in out.iterdir() if not p.name.startswith((".", "_")))
    if not args.keep_output:
        shutil.rmtree(out)
    return result


# --- the report ---------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, by nearest rank; None if there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(n * q), at least 1
    return ordered[int(rank) - 1]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _size(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB"


def compare(args: argparse.Namespace) -> dict:
    parquet_path, csv_path = windows.dataset(Path(args.data_dir), args.rows)
    _harness.warm(csv_path)
    _harness.warm(parquet_path)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for case in CASES:
        runs = [run_child(case, args) for _ in range(args.reps)]
        best = min(runs, key=lambda r: r["wall_s"])
        best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
        best["walls_s"] = [round(r["wall_s"], 3) for r in runs]
        results[case] = best
        _harness.progress(f"{case:17}", args.rows, best, f"  {best['checkpoints']} checkpoints")

    summary = []
    for case, r in results.items():
        fmt, mode = case.split("-")
        base = results[f"{fmt}-none"]
        ratio = base["wall_s"] / r["wall_s"]  # (rows / r s) / (rows / base s)
        backend = "sqlite" if mode.startswith("sqlite") else "memory"
        summary.append({"case": case, "ev_s": args.rows / r["wall_s"], "ratio": ratio,
                        "checkpointed": mode not in ("none", "sqlite"),
                        "met": ratio >= 1 - MAX_COST[backend],
                        "p50_ms": _percentile(r["checkpoint_ms"], 0.50),
                        "p99_ms": _percentile(r["checkpoint_ms"], 0.99),
                        "rows_match": r["rows_out"] == base["rows_out"]})
    keys = compare_keys(args) if args.keys else None
    report = {"rows": args.rows, "reps": args.reps, "cpus": os.cpu_count(), "results": results,
              "summary": summary, "keys": keys}
    if args.json:
        print(json.dumps(report, indent=2))
        return report

    first = next(iter(results.values()))
    print(f"\ncheckpoints: {args.rows:,} input rows, best of {args.reps}, tumble 10 s into a CSV "
          f"directory sink; clink {first['version']}; {os.cpu_count()} CPUs")
    print(f"target: checkpointing costs <= {MAX_COST['memory']:.0%} throughput with memory state, "
          f"<= {MAX_COST['sqlite']:.0%} with sqlite state (against no checkpoints on memory state)\n")
    head = (f"{'case':17} {'ev/s':>7} {'wall s':>7} {'cpu s':>6} {'ratio':>6} {'':8} {'chks':>5} "
            f"{'p50 ms':>7} {'p99 ms':>7} {'newest chk':>10} {'peak state':>10} {'RSS':>8} "
            f"{'rows out':>11} {'parts':>5}")
    print(head)
    print("-" * len(head))
    for s in summary:
        r = results[s["case"]]
        verdict = ("base" if s["case"].endswith("-none") else "info" if not s["checkpointed"]
                   else "met" if s["met"] else "NOT met")
        print(f"{s['case']:17} {_harness.rate(args.rows, r['wall_s']):>7} {r['wall_s']:7.2f} "
              f"{r['cpu_s']:6.2f} {s['ratio']:6.2f} {verdict:8} {r['checkpoints']:5} "
              f"{_ms(s['p50_ms']):>7} {_ms(s['p99_ms']):>7} {_size(r['newest_checkpoint_bytes']):>10} "
              f"{_size(r['peak_state_bytes']):>10} {r['peak_rss_mib']:4.0f} MiB "
              f"{r['rows_out']:>11,} {r['part_files']:>5}")
    print("\nratio: events/s against the same format's run without checkpoints on memory state (target "
          f">= {1 - MAX_COST['memory']:.2f} memory, >= {1 - MAX_COST['sqlite']:.2f} sqlite; 'info': sqlite "
          "state without checkpoints, no target); ev/s = input rows / wall s, wall s covers compiling "
          "and running."
          "\nchks: checkpoints taken, the final one at the end of the input included; p50/p99 ms: "
          "their durations (Metrics.checkpoint_ms)."
          "\nnewest chk: bytes of the files in the newest chk-<n> directory (the final checkpoint,"
          " taken after every window fired)."
          "\npeak state: the most window state held in memory at once (Metrics.peak_state_bytes); "
          "for sqlite, what is cached or not yet written."
          "\nRSS: peak resident set (VmHWM) of the run's own process. parts: part files written.")
    warnings = []
    for s in summary:
        r = results[s["case"]]
        if not s["rows_match"]:
            base = results[s["case"].split("-")[0] + "-none"]
            warnings.append(f"WARNING: {s['case']}: {r['rows_out']:,} rows out, "
                            f"{base['rows_out']:,} without checkpoints")
        if r["late_records"]:
            warnings.append(f"WARNING: {s['case']}: {r['late_records']:,} late rows dropped")
        if r["records_in"] != r["rows_in"]:
            warnings.append(f"WARNING: {s['case']}: read {r['records_in']:,} rows of {r['rows_in']:,}")
        warnings += _harness.reported_warning(s["case"], r)
    for line in warnings:
        print(line)
    if all(s["rows_match"] for s in summary):
        print("row counts: every checkpointed run wrote as many rows as the run without checkpoints")
    if keys:
        print_keys(args, keys)
    return report


def compare_keys(args: argparse.Namespace) -> dict[str, dict]:
    """Run the large-state case once per backend (in child processes)."""
    results = {}
    for backend in KEYS_BACKENDS:
        case = f"keys-{backend}-{args.keys}"
        r = run_child(case, args)
        results[backend] = r
        _harness.progress(f"{case:17}", args.keys, r, f"  {r['checkpoints']} checkpoints")
    return results


def print_keys(args: argparse.Namespace, results: dict[str, dict]) -> None:
    print(f"\nlarge state: {args.keys:,} distinct keys in one tumbling window, a checkpoint every 1 s; "
          f"target: peak RSS < {MAX_RSS_MIB} MiB")
    head = (f"{'backend':8} {'ev/s':>7} {'wall s':>7} {'chks':>5} {'p50 ms':>7} {'p99 ms':>7} "
            f"{'newest chk':>10} {'RSS':>8} {'':8} {'rows out':>11}")
    print(head)
    print("-" * len(head))
    for backend, r in results.items():
        verdict = "met" if r["peak_rss_mib"] < MAX_RSS_MIB else "NOT met"
        print(f"{backend:8} {_harness.rate(args.keys, r['wall_s']):>7} {r['wall_s']:7.2f} {r['checkpoints']:5} "
              f"{_ms(_percentile(r['checkpoint_ms'], 0.5)):>7} {_ms(_percentile(r['checkpoint_ms'], 0.99)):>7} "
              f"{_size(r['newest_checkpoint_bytes']):>10} {r['peak_rss_mib']:4.0f} MiB {verdict:8} "
              f"{r['rows_out']:>11,}")
        if r["rows_out"] != args.keys:
            print(f"WARNING: {backend}: {r['rows_out']:,} rows out, expected one per key ({args.keys:,})")


#: The most an incremental checkpoint of 1% changed keys may take, as a share of a full one.
MAX_INCREMENT_RATIO = 0.10


def run_increment(keys: int, changed: float, reps: int) -> dict:
    """The incremental case (see the module docstring), in this process; returns its timings."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from clink.runtime.checkpoint.store import CheckpointStore
    from clink.runtime.state.backend import ValueStateDescriptor
    from clink.runtime.state.sqlite import SqliteStateBackend

    descriptor = ValueStateDescriptor("count", [("key", pa.int64())], pa.int64())
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="clink-increment-") as tmp:
        root = Path(tmp)
        store = CheckpointStore(root, retained=3)
        backend = SqliteStateBackend(root / "state", incremental=True)
        state = backend.open("group-1", [descriptor])
        counts = state.value_state("count")
        started = time.perf_counter()
        _load(state, keys)
        print(f"  loaded {keys:,} keys in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)

        def checkpoint(checkpoint_id: int, incremental: bool) -> dict:
            state.incremental = incremental
            t0, c0 = time.perf_counter(), time.process_time()
            writer = store.begin(checkpoint_id, "bench")
            state.commit(checkpoint_id)
            t1 = time.perf_counter()
            names = writer.include(state.snapshot(writer.path))
            writer.write_bytes("job.json", json.dumps(names).encode())
            info = writer.complete()
            store.prune()
            t2, c2 = time.perf_counter(), time.process_time()
            shared = {n.split("/", 1)[1] for n in names if n.startswith("shared/")}
            written = sum((store.root / "shared" / n).stat().st_size for n in shared if
                          int(n.split(".", 1)[0]) == checkpoint_id) + info.size
            return {"commit_s": t1 - t0, "copy_s": t2 - t1, "total_s": t2 - t0, "cpu_s": c2 - c0, "written": written,
                    "log_rows": log_rows()}

        def log_rows() -> int:
            """Rows in the state's change log (0 before the log existed)."""
            if not hasattr(counts, "log_rows"):
                return 0
            return state.conn.execute(f"SELECT COUNT(*) FROM {counts.tbl}_log").fetchone()[0]

        def merge() -> dict | None:
            """The merge of the change log into the table, if one is due (timed apart: it runs
            at the first use of the state after a checkpoint, not inside one)."""
            if not hasattr(state, "merge_if_due"):
                return None
            rows = log_rows()
            t0, c0 = time.perf_counter(), time.process_time()
            if not state.merge_if_due():
                return None
            return {"merge_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "log_rows": rows}

        first = checkpoint(1, True)
        database = state.path.stat().st_size
        runs: dict[str, list[dict]] = {"incremental": [], "full": []}
        merges = []
        checkpoint_id = 1
        # The incremental checkpoints first (each a delta on the chain the first one began), then
        # the full ones (after which the chain would miss their changes).
        for mode in ("incremental", "full"):
            for _ in range(reps):
                merged = merge()
                if merged is not None:
                    merges.append(merged)
                change = pa.array(rng.choice(keys, int(keys * changed), replace=False).astype(np.int64))
                old = counts.get_many(change)
                counts.put_many(change, pc.add(old, 1))
                checkpoint_id += 1
                runs[mode].append(checkpoint(checkpoint_id, mode == "incremental"))
        if not merges and hasattr(state, "merge"):  # the log of every change so far, merged once
            rows = log_rows()
            t0, c0 = time.perf_counter(), time.process_time()
            state.merge()
            merges.append({"merge_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "log_rows": rows})
        state.close()
    best = {mode: min(r, key=lambda x: x["total_s"]) for mode, r in runs.items()}
    return {"keys": keys, "changed": changed, "reps": reps, "database_bytes": database, "first": first,
            "runs": runs, "best": best, "merges": merges,
            "ratio": best["incremental"]["total_s"] / best["full"]["total_s"],
            "copy_ratio": best["incremental"]["copy_s"] / best["full"]["copy_s"]}


def _load(state, keys: int) -> None:
    """Keys 0..keys-1, each with the value 1, written straight into the state's table in the
    backend's own encoding (the codec's format 1, checked against it below) and key order: the
    set-up of the case, much faster than the batch API's writes through the cache."""
    import numpy as np
    import pyarrow as pa

    from clink.runtime.state import codec
    from clink.runtime.state.keygroups import key_groups

    def blobs(values: np.ndarray) -> np.ndarray:
        out = np.zeros((len(values), 9), np.uint8)
        out[:, 0] = 1  # present
        out[:, 1:] = values.astype("<i8").view(np.uint8).reshape(-1, 8)
        return out

    assert blobs(np.array([5]))[0].tobytes() == codec.row_encoder([pa.int64()], canonical=True)((5,))
    assert blobs(np.array([1]))[0].tobytes() == codec.encoder(pa.int64())(1)
    (table,) = state.conn.execute("SELECT tbl FROM clink_states WHERE name = 'count'").fetchone()
    one = blobs(np.array([1]))[0].tobytes()
    state.begin()
    for lo in range(0, keys, 1_000_000):
        values = np.arange(lo, min(keys, lo + 1_000_000), dtype=np.int64)
        groups = key_groups([pa.array(values)], state.max_parallelism).tolist()
        rows = sorted(zip(groups, (b.tobytes() for b in blobs(values)), [one] * len(values)), key=lambda r: r[1])
        state.conn.executemany(f"INSERT INTO {table} (kg, k, v) VALUES (?, ?, ?)", rows)


def print_increment(r: dict) -> None:
    print(f"\nincremental checkpoints: sqlite state of {r['keys']:,} keys ({_size(r['database_bytes'])}), "
          f"{r['changed']:.0%} of them changed at random before each checkpoint; best of {r['reps']}; "
          f"{os.cpu_count()} CPUs")
    print(f"target: an incremental checkpoint takes <= {MAX_INCREMENT_RATIO:.0%} of a full one\n")
    head = (f"{'checkpoint':14} {'total s':>8} {'commit s':>9} {'copy s':>7} {'CPU s':>6} {'written':>10} "
            f"{'log rows':>9}")
    print(head)
    print("-" * len(head))
    rows = [("first (base)", r["first"]), *((f"incremental {i}", run) for i, run in
                                           enumerate(r["runs"]["incremental"], 1)),
            *((f"full {i}", run) for i, run in enumerate(r["runs"]["full"], 1))]
    for label, run in rows:
        print(f"{label:14} {run['total_s']:8.2f} {run['commit_s']:9.2f} {run['copy_s']:7.2f} "
              f"{run.get('cpu_s', 0):6.2f} {_size(run['written']):>10} {run.get('log_rows', 0):>9,}")
    verdict = "met" if r["ratio"] <= MAX_INCREMENT_RATIO else "NOT met"
    print(f"\nbest incremental / best full: {r['ratio']:.3f} of the time ({verdict}); the copy alone: "
          f"{r['copy_ratio']:.3f}")
    worst = max(run["total_s"] for run in r["runs"]["incremental"]) / r["best"]["full"]["total_s"]
    print(f"worst incremental / best full: {worst:.3f}")
    for m in r.get("merges", []):
        share = m["log_rows"] / r["keys"]
        print(f"merge of the change log ({m['log_rows']:,} rows, {share:.1%} of the keys): {m['merge_s']:.2f} s, "
              f"{m['cpu_s']:.2f} s CPU; once per {share / r['changed']:.0f} checkpoints of {r['changed']:.0%} "
              f"changed keys: {m['merge_s'] * r['changed'] / share:.2f} s per checkpoint")
    print("commit: the changed rows written into the database (its change log) and committed (synchronous=FULL), "
          "the same work in both;\ncopy: the piece (incremental) or the whole database (full) written, fsynced, hashed into "
          "the store, the manifest, pruning;\nwritten: bytes new in the store for that checkpoint.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _harness.add_common_arguments(parser)
    parser.add_argument("--keep-output", action="store_true", help="keep the output directories")
    parser.add_argument("--keys", type=int, default=0, metavar="N",
                        help="also run the large-state case with N distinct keys (e.g. 5000000)")
    parser.add_argument("--increment-keys", type=int, default=0, metavar="N",
                        help="run only the incremental checkpoint case with N keys (e.g. 5000000)")
    parser.add_argument("--changed", type=float, default=0.01,
                        help="the share of keys changed before each checkpoint of --increment-keys (0.01)")
    parser.add_argument("--one", metavar="CASE",
                        help=f"run one case in this process (one of {', '.join(CASES)}, or keys-<backend>-<N>)")
    args = parser.parse_args(argv)
    if args.increment_keys:
        result = run_increment(args.increment_keys, args.changed, args.reps)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_increment(result)
        return
    if args.one:
        if args.one not in CASES and not args.one.startswith("keys-"):
            parser.error(f"unknown case {args.one!r}")
        fmt = args.one.split("-")[0]
        source = (None if fmt == "keys"
                  else _harness.case_source(windows.dataset, Path(args.data_dir), args.rows, fmt))
        out = Path(args.out_dir) / f"{OUT_PREFIX}{args.one}"
        print("RESULT " + json.dumps(run_one(args.one, source, out)), flush=True)
    else:
        compare(args)


if __name__ == "__main__":
    sys.path.insert(0, str(_harness.ROOT))
    main()
