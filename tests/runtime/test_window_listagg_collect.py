"""LISTAGG and COLLECT in the window operator: checked against a reference built from each row's
windows (``windows_of``), across batches, snapshot and restore, and a split by key group."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_window_operator import (
    BACKENDS,
    K,
    S,
    WINDOWS,
    _batch_from,
    make_op,
    random_rows,
    run_all,
    windows_of,
)

from clink.runtime import plan

A = plan.AggSpec
AGGS = [A(fn="listagg", arg=S, type=pa.string()), A(fn="listagg", arg=S, type=pa.string(), param=" | ", filter=3),
        A(fn="collect", arg=S, type=pa.map_(pa.string(), pa.int32())), A(fn="count_star", arg=None, type=pa.int64())]


def reference(window: plan.WindowSpec, rows: list[dict]) -> dict[tuple, tuple]:
    """Per (key, start, end): LISTAGG(s), LISTAGG(s, ' | ') FILTER (WHERE f), COLLECT(s), COUNT(*),
    with the strings in arrival order (the rows' order)."""
    listed: dict[tuple, list] = defaultdict(list)
    filtered: dict[tuple, list] = defaultdict(list)
    counts: Counter = Counter()
    for r in rows:
        for start, end in windows_of(window, r["ts"]):
            w = (r["k"], start, end)
            counts[w] += 1
            if r["s"] is not None:
                listed[w].append(r["s"])
                if r["f"]:
                    filtered[w].append(r["s"])
    return {w: (",".join(listed[w]) or None, " | ".join(filtered[w]) or None, dict(Counter(listed[w])), n)
            for w, n in counts.items()}


def results(batches: list[pa.RecordBatch]) -> dict[tuple, tuple]:
    out = {}
    for b in batches:
        for r in b.to_pylist():
            start, end = (int(pa.scalar(r[c], pa.timestamp("ms")).cast(pa.int64()).as_py())
                          for c in ("window_start", "window_end"))
            out[(r["k"], start, end)] = (r["a0"], r["a1"], dict(r["a2"]), r["a3"])
    return out


@pytest.mark.parametrize("window", [w for w in WINDOWS if w.kind != "session"], ids=lambda w: f"{w.kind}")
def test_listagg_and_collect_keep_arrival_order(window: plan.WindowSpec) -> None:
    rows = random_rows(300, seed=5, keys="abcd")
    batches = [_batch_from(rows, lo, 37) for lo in range(0, 300, 37)]
    got = results(run_all(make_op(window, AGGS), batches))
    assert got == reference(window, rows)


def test_session_windows_hold_every_value() -> None:
    # Sessions merge as they grow, in no arrival order: compare the values, not their order.
    window = plan.WindowSpec(kind="session", gap=3_000)
    rows = random_rows(300, seed=6, keys="abcd")
    batches = [_batch_from(rows, lo, 50) for lo in range(0, 300, 50)]
    got = run_all(make_op(window, AGGS), batches)
    per_key: dict[str, Counter] = defaultdict(Counter)
    for b in got:
        for r in b.to_pylist():
            per_key[r["k"]].update((r["a0"] or "").split(",") if r["a0"] else [])
            assert Counter(dict(r["a2"])) == Counter((r["a0"] or "").split(",") if r["a0"] else [])
    want: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        if r["s"] is not None:
            want[r["k"]][r["s"]] += 1
    assert per_key == want


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_snapshot_restore_and_split_by_key_group(backend: str, tmp_path: Path) -> None:
    window = plan.WindowSpec(kind="hop", size=10_000, slide=5_000)
    rows = random_rows(300, seed=3, keys="abcdefgh")
    first, second = [_batch_from(rows, 0, 150)], [_batch_from(rows, 150, 150)]
    expected = results(run_all(make_op(window, AGGS), first + second))
    assert expected == reference(window, rows)
    make = BACKENDS[backend]

    op = make_op(window, AGGS, backend=make(tmp_path / "a"))
    for b in first:
        op.process(b)
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    restored = make_op(window, AGGS, backend=make(tmp_path / "b"))
    restored.restore(files, meta)
    assert results(run_all(restored, second)) == expected

    from clink.runtime.state.keygroups import key_groups

    groups = {g for b in first for g in key_groups([b.column(K)]).tolist()}
    half = set(sorted(groups)[: len(groups) // 2])
    outputs = []
    for i, part in enumerate((half, groups - half)):
        task = make_op(window, AGGS, backend=make(tmp_path / f"task{i}"))
        task.restore(files, meta, key_groups=part)
        mine = [b.filter(pa.array(np.isin(key_groups([b.column(K)]), list(part)))) for b in second]
        outputs += run_all(task, mine)
    assert results(outputs) == expected

