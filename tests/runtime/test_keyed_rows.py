"""The array helpers of the join and Top-N row stores against numpy's and Arrow's own answers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from clink.runtime.operators.rows import _merge_sorted, take_rows

_keys = st.lists(st.integers(0, 12), max_size=40).map(lambda v: np.sort(np.array(v, dtype=np.uint64)))


@given(_keys, _keys)
def test_merging_two_sorted_runs_is_a_stable_sort_of_both(a, b):
    a_rows, b_rows = np.arange(len(a)), np.arange(len(b)) + 1000
    keys, rows = _merge_sorted(a, a_rows, b, b_rows)
    together, order = np.concatenate([a, b]), np.concatenate([a_rows, b_rows])
    perm = np.argsort(together, kind="stable")
    assert keys.tolist() == together[perm].tolist()
    assert rows.tolist() == order[perm].tolist()


@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.data())
def test_taking_rows_of_a_chunked_table_gives_arrows_take(sizes, data):
    start = np.cumsum([0, *sizes])
    table = pa.Table.from_batches([pa.record_batch({"x": pa.array(np.arange(s, s + n), pa.int64()),
                                                    "y": pa.array([str(v) for v in range(s, s + n)], pa.string())})
                                   for s, n in zip(start, sizes)])
    total = int(start[-1])
    rows = np.array(data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=total // 8 if total else 0)),
                    dtype=np.int64)
    assert take_rows(table, rows).to_pydict() == table.take(pa.array(rows, type=pa.int64())).to_pydict()
