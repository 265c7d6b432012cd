"""Nexmark queries with the source making only the kinds of event the plan keeps, against the same
plan with the source making every event.

```sh
python bench/nexmark_kinds.py                                    # 2M events, q1 q5 q8 q18 q19 q20, 3 reps
python bench/nexmark_kinds.py --events 10000000 --queries q3,q8 --reps 5
python bench/nexmark_kinds.py --json
```

Each query is compiled once per run with ``bench/nexmark/ddl.sql``; its sources get the kinds of
event their views keep (``kept_values``). The reference is the same plan with ``kept_values``
taken out of every source, which then makes every event for the filters above it to drop (what
clink did before). Each run is a fresh process (so its peak RSS, VmHWM, is its own), the two
alternate, and the fastest of ``--reps`` is kept: CPU seconds of running the job (compiling and
start-up left out), events/s over those seconds, and peak RSS. The ratio is the reference's CPU
seconds over the kept kinds', so above 1 is faster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _harness

MODES = ("kept-kinds", "every-event")
DEFAULT_QUERIES = "q1,q5,q8,q18,q19,q20"


def run_one(query: str, mode: str, events: int) -> dict:
    """Run ``query`` over ``events`` events in this process; returns CPU seconds and peak RSS."""
    sys.path.insert(0, str(_harness.ROOT))
    import io

    import clink
    from clink import records
    from clink.runtime.context import RuntimeContext
    from clink.runtime.executor import Job
    from clink.runtime.plan import Source

    folder = _harness.ROOT / "bench" / "nexmark"
    ddl = (folder / "ddl.sql").read_text().replace("'events.num' = '10000000'", f"'events.num' = '{events}'")
    plan = clink.compile(ddl + (folder / f"{query}.sql").read_text()).runtime_plan
    if mode == "every-event":
        plan = records.evolve(plan, nodes=tuple(
            records.evolve(n, kept_values={}) if isinstance(n, Source) else n for n in plan.nodes))
    kept = {n.id: n.kept_values for n in plan.nodes if isinstance(n, Source)}
    started = time.process_time()
    Job(plan, RuntimeContext(stdout=io.StringIO())).run()
    seconds = time.process_time() - started
    return {"query": query, "mode": mode, "events": events, "cpu_seconds": seconds,
            "events_per_cpu_s": events / seconds, "peak_rss_mib": _harness.peak_rss_mib(),
            "kept_values": {str(k): {c: list(v) for c, v in values.items()} for k, values in kept.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--queries", default=DEFAULT_QUERIES)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("QUERY", "MODE"), help=argparse.SUPPRESS)  # in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.events)))
        return
    results = []
    for query in args.queries.split(","):
        best: dict[str, dict] = {}
        for _ in range(args.reps):
            for mode in MODES:
                out = subprocess.run([sys.executable, __file__, "--one", query, mode, "--events", str(args.events)],
                                     capture_output=True, text=True, check=True)
                run = json.loads(out.stdout)
                if mode not in best or run["cpu_seconds"] < best[mode]["cpu_seconds"]:
                    best[mode] = run
        kept, every = best["kept-kinds"], best["every-event"]
        kept["ratio_to_reference"] = every["cpu_seconds"] / kept["cpu_seconds"]
        results += [kept, every]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.events:,} events, fastest of {args.reps} (CPU seconds of the job, fresh process each)")
    print(f"{'query':<7}{'mode':<13}{'kept kinds':<32}{'CPU s':>8}{'events/CPU s':>14}{'peak RSS MiB':>14}"
          f"{'vs every event':>16}")
    for r in results:
        kept = ", ".join(f"{c}={v}" for values in r["kept_values"].values() for c, v in values.items()) or "-"
        ratio = f"{r['ratio_to_reference']:.2f}" if "ratio_to_reference" in r else ""
        print(f"{r['query']:<7}{r['mode']:<13}{kept:<32}{r['cpu_seconds']:>8.2f}{r['events_per_cpu_s']:>14,.0f}"
              f"{r['peak_rss_mib']:>14.0f}{ratio:>16}")


if __name__ == "__main__":
    main()
