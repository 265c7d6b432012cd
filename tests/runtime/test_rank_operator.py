"""The Top-N operator against a model: random rows in random batches; the changelog applied to a
multiset retracts only rows it emitted and ends as the top N of each partition."""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators.rank import RankOperator
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

INPUT = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def _node(limit: int, emit_rank: bool, descending: bool) -> P.Rank:
    fields = [pa.field("k", pa.int64()), pa.field("v", pa.int64())]
    if emit_rank:
        fields.append(pa.field("rn", pa.int64(), nullable=False))
    fields.append(pa.field(P.ROWKIND_COLUMN, pa.string()))
    return P.Rank(id=2, input=1, partition=(0,), order=((1, descending),), limit=limit, schema=pa.schema(fields),
                  emit_rank=emit_rank)


def _operator(node: P.Rank, backend=None) -> RankOperator:
    return RankOperator(node, TaskContext(runtime=RuntimeContext(), node_id=2), input_schema=INPUT, backend=backend)


def _model(rows: list[tuple], limit: int, emit_rank: bool, descending: bool) -> Counter:
    """Top ``limit`` per k by v (NULLs last), ties by arrival."""
    by_key: dict = defaultdict(list)
    for seq, (k, v) in enumerate(rows):
        by_key[k].append((v is None, -v if (descending and v is not None) else v, seq, k, v))
    out: Counter = Counter()
    for items in by_key.values():
        items.sort(key=lambda t: (t[0], t[1] if t[1] is not None else 0, t[2]))
        for rank, (_, _, _, k, v) in enumerate(items[:limit], start=1):
            out[(k, v, rank) if emit_rank else (k, v)] += 1
    return out


def _apply(table: Counter, batches: list[pa.RecordBatch], emit_rank: bool) -> None:
    for batch in batches:
        for row in batch.to_pylist():
            kind = row.pop(P.ROWKIND_COLUMN)
            key = tuple(row.values())
            assert len(key) == (3 if emit_rank else 2)
            if kind == "+I":
                table[key] += 1
            else:
                assert kind == "-D" and table[key] > 0, f"{kind} of a row never emitted: {key}"
                table[key] -= 1


values = st.one_of(st.none(), st.integers(0, 6))
batches = st.lists(st.lists(st.tuples(st.integers(0, 2), values), min_size=1, max_size=8), min_size=1, max_size=10)


def _backend(kind: str, factory):
    """The state backend of a test: memory, or sqlite with a cache so small that runs stop
    merging at a row or two (``KeyedRows._run_rows``), so that rows spread over many runs."""
    if kind == "memory":
        return None
    return SqliteStateBackend(factory.mktemp("rank"), max_parallelism=128, table_cache_bytes=600, min_bucket_bytes=0)


@pytest.mark.parametrize("backend", ["memory", "sqlite-small"])
@pytest.mark.parametrize("emit_rank", [False, True])
@pytest.mark.parametrize("descending", [False, True])
@settings(max_examples=40, deadline=None)
@given(data=batches, limit=st.integers(1, 4))
def test_changelog_ends_as_the_top_n(tmp_path_factory, backend: str, emit_rank: bool, descending: bool, data,
                                     limit: int) -> None:
    op = _operator(_node(limit, emit_rank, descending), backend=_backend(backend, tmp_path_factory))
    table: Counter = Counter()
    for rows in data:
        batch = pa.RecordBatch.from_pylist([{"k": k, "v": v} for k, v in rows], schema=INPUT)
        _apply(table, op.process(batch), emit_rank)
    assert +table == _model([r for rows in data for r in rows], limit, emit_rank, descending)


@pytest.mark.parametrize("backend", ["memory", "sqlite-small"])
@pytest.mark.parametrize("emit_rank", [False, True])
@settings(max_examples=30, deadline=None)
@given(data=batches, limit=st.integers(1, 4))
def test_rows_removed_by_storing_their_retraction_end_as_the_top_n(tmp_path_factory, backend: str, emit_rank: bool,
                                                                   data, limit: int) -> None:
    """Stores written before rows were removed in place (a restored old checkpoint) hold rows
    with count -1: their rows come without ids, and leaving rows are removed by retraction."""
    op = _operator(_node(limit, emit_rank, True), backend=_backend(backend, tmp_path_factory))
    live = op._live
    op._live = lambda partitions, **kw: (live(partitions, **kw)[0], None)
    table: Counter = Counter()
    for rows in data:
        batch = pa.RecordBatch.from_pylist([{"k": k, "v": v} for k, v in rows], schema=INPUT)
        _apply(table, op.process(batch), emit_rank)
    assert +table == _model([r for rows in data for r in rows], limit, emit_rank, True)
    assert op.rows.stored().num_rows >= sum(table.values())


@settings(max_examples=30, deadline=None)
@given(data=batches, cut=st.integers(0, 10))
def test_restore_at_any_cut_goes_on_the_same(tmp_path_factory, data, cut: int) -> None:
    node = _node(2, True, True)
    op = _operator(node)
    table: Counter = Counter()
    for rows in data[:cut]:
        _apply(table, op.process(pa.RecordBatch.from_pylist([{"k": k, "v": v} for k, v in rows], schema=INPUT)),
               True)
    directory = tmp_path_factory.mktemp("rank")
    files, meta = op.snapshot(1, directory)
    restored = _operator(node, backend=MemoryStateBackend(max_parallelism=128))
    restored.restore(files, meta)
    for rows in data[cut:]:
        _apply(table, restored.process(pa.RecordBatch.from_pylist([{"k": k, "v": v} for k, v in rows],
                                                                 schema=INPUT)), True)
    assert +table == _model([r for rows in data for r in rows], 2, True, True)


def test_state_holds_only_the_top_rows() -> None:
    op = _operator(_node(3, False, True))
    for start in range(0, 10_000, 500):
        batch = pa.RecordBatch.from_pylist([{"k": i % 10, "v": i} for i in range(start, start + 500)], schema=INPUT)
        op.process(batch)
    assert op.metrics["state_rows"] <= 10 * 3 * 3  # top 3 of 10 keys, with retracted entries not yet netted


def test_state_ttl_forgets_top_rows_stored_longer_ago() -> None:
    """Deduplication keeping each key's first row: a key whose row was stored more than the TTL
    ago is forgotten, so its next row is emitted as new (as Flink's state TTL does); the state
    holds only what was written within the TTL."""
    now = [0]
    node = _node(1, emit_rank=False, descending=False)
    op = RankOperator(node, TaskContext(runtime=RuntimeContext(clock=lambda: now[0]), node_id=2),
                      input_schema=INPUT, ttl_ms=1000)

    def send(rows: list[tuple[int, int]]) -> list[tuple]:
        batch = pa.RecordBatch.from_arrays([pa.array([k for k, _ in rows], pa.int64()),
                                            pa.array([v for _, v in rows], pa.int64())], schema=INPUT)
        return [(r["k"], r["v"], r[P.ROWKIND_COLUMN]) for b in op.process(batch) for r in b.to_pylist()]

    assert send([(1, 5), (2, 5)]) == [(1, 5, "+I"), (2, 5, "+I")]
    now[0] = 600
    assert send([(1, 9), (3, 5)]) == [(3, 5, "+I")]  # key 1 keeps its first row
    now[0] = 1200  # keys 1 and 2 were stored 1200 ms ago, key 3 600 ms ago
    assert send([(1, 7), (2, 6), (3, 9)]) == [(1, 7, "+I"), (2, 6, "+I")]
    now[0] = 5000
    send([(4, 1)])
    assert op.metrics["state_rows"] == 1  # everything but key 4 has expired


# -- partitions that end (plan.Rank.expiry) ------------------------------------------------------

ENDING = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("end", pa.timestamp("ms"))])


def _ending_node(limit: int) -> P.Rank:
    fields = [*ENDING, pa.field("rn", pa.int64(), nullable=False), pa.field(P.ROWKIND_COLUMN, pa.string())]
    return P.Rank(id=2, input=1, partition=(0,), order=((1, True),), limit=limit, schema=pa.schema(fields),
                  expiry=((2, 5),))


def _ending_operator(node: P.Rank, backend=None) -> RankOperator:
    return RankOperator(node, TaskContext(runtime=RuntimeContext(), node_id=2), input_schema=ENDING, backend=backend)


def _end_of(k: int | None) -> int | None:
    """Each key's end (ms): the same for all its rows, NULL for key 6."""
    return None if k == 6 else (k or 0) * 100 + 40


#: Batches of (k, v) rows, each followed by a watermark step (ms).
ending_batches = st.lists(st.tuples(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 9)), st.integers(0, 20)),
                                             min_size=1, max_size=8),
                                    st.integers(0, 150)), min_size=1, max_size=12)


def _send(op: RankOperator, rows: list[tuple], table: Counter) -> None:
    batch = pa.RecordBatch.from_pylist([{"k": k, "v": v, "end": _end_of(k)} for k, v in rows], schema=ENDING)
    for out in op.process(batch):
        for row in out.to_pylist():
            kind = row.pop(P.ROWKIND_COLUMN)
            key = (row["k"], row["v"], row["rn"])
            if kind == "+I":
                table[key] += 1
            else:
                assert kind == "-D" and table[key] > 0, f"{kind} of a row never emitted: {key}"
                table[key] -= 1


def _late(k: int | None, watermark: int) -> bool:
    end = _end_of(k)
    return k is not None and end is not None and end + 5 <= watermark


@settings(max_examples=60, deadline=None)
@given(data=ending_batches, limit=st.integers(1, 3), cut=st.integers(0, 12))
def test_ended_partitions_are_forgotten_and_their_late_rows_dropped(tmp_path_factory, data, limit: int,
                                                                    cut: int) -> None:
    """Rows of a partition whose end (its ``end`` + 5 ms) the watermark has reached are late:
    dropped and counted, never ranked. The others rank as if nothing ended; ended partitions
    leave the state; a restore at any cut (which does not keep the watermark) goes on the same."""
    node = _ending_node(limit)
    op = _ending_operator(node)
    table: Counter = Counter()
    kept: list[tuple] = []
    watermark, late, counted = -1, 0, 0
    for i, (rows, step) in enumerate(data):
        if i == cut:
            counted += op.metrics["late_records"]
            files, meta = op.snapshot(1, tmp_path_factory.mktemp("rank"))
            op = _ending_operator(node, backend=MemoryStateBackend(max_parallelism=128))
            op.restore(files, meta)
            op.on_watermark(watermark)
        _send(op, rows, table)
        kept += [r for r in rows if not _late(r[0], watermark)]
        late += sum(_late(r[0], watermark) for r in rows)
        watermark += step
        op.on_watermark(watermark)
    assert +table == _model(kept, limit, True, True)
    assert counted + op.metrics["late_records"] == late
    # What stays: every partition that has not ended. An ended one goes once a quarter of the
    # rows stored with it have ended (``KeyedRows.expire``).
    stored = op.rows.stored().column("c0").to_pylist()
    ended = {k for k, _ in kept if _late(k, watermark)}
    assert set(stored) >= {k for k, _ in kept} - ended
    op.on_watermark(10**9)  # every partition with an end ends
    stored = op.rows.stored().column("c0").to_pylist()
    never = sum(k in (6, None) for k in stored)
    assert 3 * (len(stored) - never) <= never, stored


def test_a_partition_with_a_null_end_never_ends() -> None:
    op = _ending_operator(_ending_node(1))
    table: Counter = Counter()
    _send(op, [(6, 1), (None, 2), (1, 3)], table)
    op.on_watermark(10**9)
    _send(op, [(6, 5), (None, 1), (1, 9)], table)  # key 1 has ended: its row is late
    assert +table == Counter({(6, 5, 1): 1, (None, 2, 1): 1, (1, 3, 1): 1})
    assert op.metrics["late_records"] == 1 and op.rows.rows() == 2


def test_a_restored_state_gets_its_ends_from_its_rows(tmp_path) -> None:
    """A checkpoint written by a Top-N whose partitions do not end keeps no ends; restored into
    one whose partitions do, each row's end is read from its columns."""
    plain = RankOperator(P.Rank(id=2, input=1, partition=(0,), order=((1, True),), limit=1,
                                schema=_ending_node(1).schema), TaskContext(runtime=RuntimeContext(), node_id=2),
                         input_schema=ENDING)
    batch = pa.RecordBatch.from_pylist([{"k": k, "v": 1, "end": _end_of(k)} for k in range(5)], schema=ENDING)
    plain.process(batch)
    files, meta = plain.snapshot(1, tmp_path)
    op = _ending_operator(_ending_node(1), backend=MemoryStateBackend(max_parallelism=128))
    op.restore(files, meta)
    op.on_watermark(_end_of(2) + 5)  # keys 0, 1 and 2 end
    op.rows.settle()
    assert sorted(op.rows.stored().column("c0").to_pylist()) == [3, 4]
