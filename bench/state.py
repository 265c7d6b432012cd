"""Keyed value state: the cost of one batch's ``get_many`` / ``put_many`` as the state grows.

A value state of the memory backend is filled with ``--sizes`` keys (1M and 5M by default), then
``--batches`` batches of ``--batch`` keys (100k) are read and written back the way a group
aggregate does it: ``get_many`` of the batch's keys (90% held, 10% new), then ``put_many`` of new
values for all of them. Keys are ``(id BIGINT, tag STRING)``; values a group aggregate's
accumulators, ``struct<rows int64, n int64, s int64, x string>`` (``x`` as a MAX over a string).

The reference, in the same run, is the memory backend's previous value state: one Python dict
per key group, from key tuple to Python value, with the batch converted to Python lists and back
(``DictValues`` below, as it was). It runs at the sizes in ``--reference-sizes`` (1M by
default: at 5M its dicts alone take several GiB).

Each (state, size) runs in a fresh process, so its peak RSS is its own. Times are CPU times of
the process (``time.process_time``), which a busy shared machine disturbs less than wall time.

    python bench/state.py                                  # 1M and 5M keys, reference at 1M
    python bench/state.py --sizes 200000,1000000 --batches 5
    python bench/state.py --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
sys.path.insert(0, sys.argv[1])
from state import DictValues, VALUE, KEY
from clink.runtime.state.backend import ValueStateDescriptor
from clink.runtime.state.memory import MemoryStateBackend

kind, size, batch, batches = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
descriptor = ValueStateDescriptor("acc", KEY, VALUE)
if kind == "columnar":
    operator_state = MemoryStateBackend().open("bench", [descriptor])
    state = operator_state.value_state("acc")
else:
    state = DictValues(descriptor)
rng = np.random.default_rng(7)

def keys(ids):
    ids = pa.array(ids)
    return [ids, pc.cast(pc.bit_wise_and(ids, 7), pa.string())]

def values(ids, round_):
    n = len(ids)
    ids = pa.array(ids)
    return pa.StructArray.from_arrays(
        [pa.array(np.full(n, round_ + 1, np.int64)), pa.array(np.ones(n, np.int64)), ids,
         pc.cast(pc.add(ids, round_), pa.string())], fields=list(VALUE))

t0 = time.perf_counter()
for lo in range(0, size, batch):
    ids = np.arange(lo, min(lo + batch, size), dtype=np.int64)
    state.put_many(keys(ids), values(ids, 0))
fill = time.perf_counter() - t0
gets, puts = [], []
next_new = size
for r in range(batches):
    held = rng.integers(0, size, batch - batch // 10)
    new = np.arange(next_new, next_new + batch // 10, dtype=np.int64)
    next_new += len(new)
    ids = np.unique(np.concatenate([held, new]))
    k = keys(ids)
    t = time.process_time()
    old = state.get_many(k)
    gets.append(time.process_time() - t)
    assert old.null_count == len(new), (old.null_count, len(new))
    v = values(ids, r + 1)
    t = time.process_time()
    state.put_many(k, v)
    puts.append(time.process_time() - t)
check = state.get_many(keys(np.array([0, size - 1, next_new - 1, next_new], np.int64))).to_pylist()
assert check[-1] is None and check[2] is not None
rss = 0.0
for line in open('/proc/self/status'):
    if line.startswith('VmHWM:'):
        rss = int(line.split()[1]) / 1024
print(json.dumps({"kind": kind, "size": size, "batch": batch, "fill_s": fill,
                  "get_ms": 1000 * statistics.median(gets), "put_ms": 1000 * statistics.median(puts),
                  "rss_mib": rss}))
"""

import pyarrow as pa

KEY = pa.schema([("id", pa.int64()), ("tag", pa.string())])
VALUE = pa.struct([("rows", pa.int64()), ("n", pa.int64()), ("s", pa.int64()), ("x", pa.string())])


class DictValues:
    """The memory backend's value state before it was columnar: a dict per key group from the
    canonical key tuple to the Python value; each batch converted to Python lists and back."""

    def __init__(self, descriptor, max_parallelism: int = 128) -> None:
        from clink.runtime.state.backend import KeyHelper

        self.descriptor = descriptor
        self.keys = KeyHelper(descriptor.key_schema, max_parallelism)
        self.groups: list[dict] = [{} for _ in range(max_parallelism)]

    def get_many(self, keys):
        from clink.runtime.state import codec

        tuples, groups = self.keys.batch(keys)
        dicts = self.groups
        values = [dicts[g].get(k) for g, k in zip(groups.tolist(), tuples)]
        return codec.from_pylist(values, self.descriptor.value_type)

    def put_many(self, keys, values) -> None:
        from clink.runtime.state import codec

        tuples, groups = self.keys.batch(keys)
        new = codec.to_pylist(values)
        dicts = self.groups
        for g, k, v in zip(groups.tolist(), tuples, new):
            if v is None:
                dicts[g].pop(k, None)
            else:
                dicts[g][k] = v


def run(kind: str, size: int, batch: int, batches: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(HERE), kind, str(size), str(batch), str(batches)],
                         check=False, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{kind} at {size:,} keys failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,5000000", help="stored keys, comma-separated")
    parser.add_argument("--reference-sizes", default="1000000",
                        help="sizes at which the dict reference runs too (comma-separated, may be empty)")
    parser.add_argument("--batch", type=int, default=100_000, help="keys per batch (default 100k)")
    parser.add_argument("--batches", type=int, default=10, help="batches measured per size (median)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    reference = {int(s) for s in args.reference_sizes.split(",") if s}
    results = []
    for size in sizes:
        for kind in ("columnar", "dict") if size in reference else ("columnar",):
            print(f"  {kind} at {size:,} keys ...", file=sys.stderr, flush=True)
            results.append(run(kind, size, args.batch, args.batches))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"\nvalue state: get_many / put_many of {args.batch:,} keys (90% held) per batch, median of "
          f"{args.batches}; {started}")
    print(f"{'state':<9} {'keys':>10} {'fill k/s':>9} {'get ms':>8} {'put ms':>8} {'ns/key':>7} "
          f"{'RSS MiB':>8} {'vs dict':>8}")
    print("-" * 74)
    dict_cost = {r["size"]: r["get_ms"] + r["put_ms"] for r in results if r["kind"] == "dict"}
    for r in results:
        cost = r["get_ms"] + r["put_ms"]
        compared = r["kind"] == "columnar" and r["size"] in dict_cost
        ratio = f"{dict_cost[r['size']] / cost:.1f}x" if compared else ""
        print(f"{r['kind']:<9} {r['size']:>10,} {r['size'] / r['fill_s'] / 1000:>9,.0f} {r['get_ms']:>8.1f} "
              f"{r['put_ms']:>8.1f} {1e6 * cost / r['batch']:>7.0f} {r['rss_mib']:>8,.0f} {ratio:>8}")
    print("\nget ms, put ms: CPU time of one call, median. ns/key: (get + put) per key of the batch. "
          "fill k/s: keys stored per second of wall time while filling. vs dict: the dict state's get + put "
          "time over the columnar state's, same size.")


if __name__ == "__main__":
    main()
