"""ChangelogNormalize on its own: upserts by key in, a full changelog out. A hypothesis property
checks it against a model (a dict of the last row per key) over any split into batches; the state
TTL is checked on a fixed clock."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators.normalize import ChangelogNormalizeOperator

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), (P.ROWKIND_COLUMN, pa.string())])
UPSERTS = P.ChangelogMode(frozenset({"+I", "+U", "-D"}))


def operator(clock=lambda: 0, ttl_ms: int | None = None) -> ChangelogNormalizeOperator:
    node = P.ChangelogNormalize(id=2, input=1, keys=(0,), schema=SCHEMA)
    return ChangelogNormalizeOperator(node, TaskContext(runtime=RuntimeContext(clock=clock), node_id=2),
                                      input_schema=SCHEMA, input_mode=UPSERTS, ttl_ms=ttl_ms)


def batch(changes: list[tuple[int, str | None]]) -> pa.RecordBatch:
    """Upserts (key, value) and deletes (key, None), as the upsert-kafka source gives them."""
    return pa.record_batch([pa.array([k for k, _ in changes], pa.int64()),
                            pa.array([v for _, v in changes], pa.string()),
                            pa.array(["-D" if v is None else "+U" for _, v in changes])], schema=SCHEMA)


def run(op: ChangelogNormalizeOperator, changes: list[tuple[int, str | None]]) -> list[tuple]:
    return [(r["_rowkind"], r["k"], r["v"]) for out in op.process(batch(changes)) for r in out.to_pylist()]


changes_strategy = st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))),
                            max_size=60)


@settings(max_examples=150, deadline=None)
@given(changes=changes_strategy, cuts=st.lists(st.integers(0, 60), max_size=6))
def test_the_changelog_is_the_upserts_made_explicit_whatever_the_batches(changes, cuts) -> None:
    op = operator()
    bounds = sorted({0, len(changes), *(c for c in cuts if c <= len(changes))})
    emitted: dict[int, list[tuple]] = {}
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        for kind, k, v in run(op, changes[lo:hi]):
            emitted.setdefault(k, []).append((kind, v))
    # The model: each key's row after each change, and what a changelog must say about it.
    held: dict[int, str] = {}
    want: dict[int, list[tuple]] = {}
    for k, v in changes:
        old = held.get(k)
        if v is None:
            if old is not None:
                want.setdefault(k, []).append(("-D", old))
                del held[k]
        elif old is None:
            want.setdefault(k, []).append(("+I", v))
            held[k] = v
        elif old != v:
            want.setdefault(k, []).extend([("-U", old), ("+U", v)])
            held[k] = v
    assert emitted == want
    assert op.metrics["state_rows"] == len(held)


def test_a_row_older_than_the_ttl_is_gone() -> None:
    now = [0]
    op = operator(clock=lambda: now[0], ttl_ms=10_000)
    assert run(op, [(1, "a"), (2, "b")]) == [("+I", 1, "a"), ("+I", 2, "b")]
    now[0] = 5_000
    assert run(op, [(2, "c")]) == [("-U", 2, "b"), ("+U", 2, "c")]
    now[0] = 12_000  # key 1 was written at 0: expired; key 2 at 5 s: held
    assert run(op, [(1, "d"), (2, "e")]) == [("+I", 1, "d"), ("-U", 2, "c"), ("+U", 2, "e")]
    assert op.metrics["state_rows"] == 2
    now[0] = 40_000  # both expired: a delete of either finds nothing, and the sweep empties the state
    assert run(op, [(1, None)]) == []
    assert op.metrics["state_rows"] == 0
