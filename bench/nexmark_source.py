"""How fast the ``nexmark`` source generates events, against building int64 batches with NumPy.

```sh
python bench/nexmark_source.py                      # 5M events, every case
python bench/nexmark_source.py --events 20000000    # more
python bench/nexmark_source.py --batch-size 16384   # the connector's 'batch-size' (default 65536)
python bench/nexmark_source.py --json
```

Each case runs in its own fresh process (so its peak RSS, VmHWM, is its own) and polls a reader
until ``--events`` events have come out as Arrow record batches; nothing consumes them.

| case | what is generated |
|---|---|
| nexmark-all | every column: event_type and the person, auction and bid ROWs (default options: 'extra' padded to 200/500/100 bytes) |
| nexmark-bid | event_type and bid only, as a query that reads bids without the CASE over dateTime would ask |
| int64-reference | the same number of rows as 26 int64 columns of random numbers (one per leaf field of the table), built from NumPy in batches of the same size |

The ratio is a case's events/s over the reference's, so a slow or busy machine shows as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _harness

CASES = ("nexmark-all", "nexmark-bid", "int64-reference")
LEAF_COLUMNS = 26  # event_type + 8 person + 10 auction + 7 bid fields


def run_case(case: str, events: int, batch_size: int) -> dict:
    """Generate ``events`` rows for ``case`` in this process; returns events/s and peak RSS."""
    sys.path.insert(0, str(_harness.ROOT))
    import numpy as np
    import pyarrow as pa

    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.nexmark import NEXMARK_SCHEMA, NexmarkReader
    from clink.runtime.context import RuntimeContext

    rows = 0
    if case == "int64-reference":
        names = [f"c{i}" for i in range(LEAF_COLUMNS)]
        started = time.perf_counter()
        for index in range(-(-events // batch_size)):
            rng = np.random.default_rng([0, index])
            n = min(batch_size, events - rows)
            values = rng.integers(0, 1 << 40, size=(LEAF_COLUMNS, n))
            batch = pa.RecordBatch.from_arrays([pa.array(v) for v in values], names=names)
            rows += batch.num_rows
    else:
        schema = NEXMARK_SCHEMA if case == "nexmark-all" else pa.schema(
            [NEXMARK_SCHEMA.field("event_type"), NEXMARK_SCHEMA.field("bid")])
        spec = TableSpec(name="datagen", schema=schema, table_schema=NEXMARK_SCHEMA,
                         options={"events.num": str(events), "batch-size": str(batch_size)})
        started = time.perf_counter()
        reader = NexmarkReader(spec, RuntimeContext())
        while not reader.finished:
            batch = reader.poll()
            if batch is not None:
                rows += batch.num_rows
    seconds = time.perf_counter() - started
    assert rows == events, (rows, events)
    return {"case": case, "events": rows, "seconds": seconds, "events_per_s": rows / seconds,
            "peak_rss_mib": _harness.peak_rss_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--batch-size", type=int, default=65_536)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", choices=CASES, help=argparse.SUPPRESS)  # a case, in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_case(args.one, args.events, args.batch_size)))
        return
    results = []
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--one", case, "--events", str(args.events),
                              "--batch-size", str(args.batch_size)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout))
    reference = results[-1]["events_per_s"]
    for r in results:
        r["ratio_to_reference"] = r["events_per_s"] / reference
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.events:,} events, batch size {args.batch_size:,}")
    print(f"{'case':<18}{'events/s':>14}{'seconds':>10}{'peak RSS MiB':>14}{'vs reference':>14}")
    for r in results:
        print(f"{r['case']:<18}{r['events_per_s']:>14,.0f}{r['seconds']:>10.2f}{r['peak_rss_mib']:>14.0f}"
              f"{r['ratio_to_reference']:>14.2f}")


if __name__ == "__main__":
    main()
