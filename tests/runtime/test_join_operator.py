"""The join operator against a model: random inserts and retractions on both sides, in random
batches, for every join kind; the changelog it emits, applied to a multiset, must retract only
rows it emitted before and must end as the batch join of the rows that are left."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.executor import key_group_range
from clink.runtime.operators.join import JoinOperator
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

LEFT = pa.schema([("k", pa.int64()), ("v", pa.int64()), (P.ROWKIND_COLUMN, pa.string())])
RIGHT = pa.schema([("k", pa.int64()), ("w", pa.int64()), (P.ROWKIND_COLUMN, pa.string())])


def _node(kind: str, residual: bool) -> P.Join:
    fields = [pa.field("k", pa.int64()), pa.field("v", pa.int64()), pa.field("k2", pa.int64()),
              pa.field("w", pa.int64()), pa.field(P.ROWKIND_COLUMN, pa.string())]
    return P.Join(id=3, left=1, right=2, kind=kind, left_keys=(0,), right_keys=(0,), schema=pa.schema(fields),
                  changelog=P.INSERT_DELETE, residual=(lambda b, ctx: pc.less_equal(b.column(1), b.column(3))) if residual else None,
                  residual_reads=(1, 3) if residual else None)  # the pair columns it reads: only those are gathered


def _expected(kind: str, residual: bool, left: Counter, right: Counter) -> Counter:
    out: Counter = Counter()
    matched_right: Counter = Counter()
    for (lk, v), ln in left.items():
        hits = 0
        for (rk, w), rn in right.items():
            if lk is not None and lk == rk and (not residual or (v is not None and w is not None and v <= w)):
                out[(lk, v, rk, w)] += ln * rn
                matched_right[(rk, w)] += 1
                hits += 1
        if not hits and kind in ("left", "full"):
            out[(lk, v, None, None)] += ln
    if kind in ("right", "full"):
        for (rk, w), rn in right.items():
            if not matched_right[(rk, w)]:
                out[(None, None, rk, w)] += rn
    return out


values = st.one_of(st.none(), st.integers(0, 3))
retractions = st.sampled_from(["-U", "-D"])
additions = st.sampled_from(["+I", "+U"])


@st.composite
def changes(draw) -> list[tuple[int, list[tuple[str, tuple]]]]:
    """Batches of (side, [(kind, row)]): only rows present may be retracted."""
    present = [Counter(), Counter()]
    batches = []
    for _ in range(draw(st.integers(1, 14))):
        side = draw(st.integers(0, 1))
        rows = []
        for _ in range(draw(st.integers(1, 6))):
            live = sorted((r for r, n in present[side].items() if n > 0), key=repr)
            if live and draw(st.booleans()):
                # An index, not sampled_from(live): a strategy built per row is validated per row.
                row = live[draw(st.integers(0, len(live) - 1))]
                present[side][row] -= 1
                rows.append((draw(retractions), row))
            else:
                row = (draw(values), draw(values))
                present[side][row] += 1
                rows.append((draw(additions), row))
        batches.append((side, rows))
    return batches


def _batch(side: int, rows: list[tuple[str, tuple]]) -> pa.RecordBatch:
    schema = LEFT if side == 0 else RIGHT
    return pa.RecordBatch.from_arrays(
        [pa.array([r[0] for _, r in rows], pa.int64()), pa.array([r[1] for _, r in rows], pa.int64()),
         pa.array([k for k, _ in rows], pa.string())], schema=schema)


def _operator(kind: str, residual: bool, backend=None, clock=None) -> JoinOperator:
    runtime = RuntimeContext(clock=clock) if clock is not None else RuntimeContext()
    return JoinOperator(_node(kind, residual), TaskContext(runtime=runtime, node_id=3), left_schema=LEFT,
                        right_schema=RIGHT, backend=backend, left_mode=P.UPDATING, right_mode=P.UPDATING)


def _apply(table: Counter, batches: list[pa.RecordBatch]) -> None:
    for batch in batches:
        for row in batch.to_pylist():
            kind = row.pop(P.ROWKIND_COLUMN)
            key = (row["k"], row["v"], row["k2"], row["w"])
            if kind in ("+I", "+U"):
                table[key] += 1
            else:
                assert table[key] > 0, f"{kind} of a row never emitted: {key}"
                table[key] -= 1


def _net(batches, side: int) -> Counter:
    net: Counter = Counter()
    for s, rows in batches:
        if s == side:
            for kind, row in rows:
                net[row] += 1 if kind in ("+I", "+U") else -1
    return +net


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("residual", [False, True])
@settings(max_examples=40, deadline=None)
@given(batches=changes())
def test_changelog_matches_the_batch_join(kind: str, residual: bool, batches) -> None:
    op = _operator(kind, residual)
    table: Counter = Counter()
    for side, rows in batches:
        _apply(table, op.process(_batch(side, rows), side))
    assert +table == _expected(kind, residual, _net(batches, 0), _net(batches, 1))


@settings(max_examples=25, deadline=None)
@given(batches=changes(), cut=st.integers(0, 14))
def test_restore_at_any_cut_continues_the_same_changelog(tmp_path_factory, batches, cut: int) -> None:
    """Snapshot after ``cut`` batches; a fresh operator restored from it (the runs of the
    snapshot reloaded as one) must go on exactly as the original would have. SQLite state, with
    a cache too small to hold the sides."""
    directory = tmp_path_factory.mktemp("snap")
    op = _operator("full", True, backend=SqliteStateBackend(directory / "a", max_parallelism=128,
                                                            table_cache_bytes=256))
    table: Counter = Counter()
    for side, rows in batches[:cut]:
        _apply(table, op.process(_batch(side, rows), side))
    files, meta = op.snapshot(1, directory)
    backend = SqliteStateBackend(directory / "b", max_parallelism=128, table_cache_bytes=256)
    restored = _operator("full", True, backend=backend)
    restored.restore(files, meta)
    for side, rows in batches[cut:]:
        _apply(table, restored.process(_batch(side, rows), side))
    restored.close()
    op.close()
    assert +table == _expected("full", True, _net(batches, 0), _net(batches, 1))


def test_split_by_key_groups_keeps_each_key_with_its_rows(tmp_path: Path) -> None:
    op = _operator("inner", False)
    op.process(_batch(0, [("+I", (k, k)) for k in range(40)]), 0)
    files, meta = op.snapshot(1, tmp_path)
    halves = [set(range(64)), set(range(64, 128))]
    seen = Counter()
    for groups in halves:
        part = _operator("inner", False, backend=MemoryStateBackend(max_parallelism=128))
        part.restore(files, meta, key_groups=groups)
        out = part.process(_batch(1, [("+I", (k, 100)) for k in range(40)]), 1)
        for batch in out:
            seen.update(batch.column(0).to_pylist())
    assert seen == Counter(range(40))


def test_state_ttl_forgets_rows_stored_longer_ago() -> None:
    now = [0]
    runtime = RuntimeContext(clock=lambda: now[0])
    op = JoinOperator(_node("inner", False), TaskContext(runtime=runtime, node_id=3), left_schema=LEFT,
                      right_schema=RIGHT, ttl_ms=1000, left_mode=P.UPDATING, right_mode=P.UPDATING)
    op.process(_batch(0, [("+I", (1, 1)), ("+I", (2, 2))]), 0)
    now[0] = 600
    op.process(_batch(0, [("+I", (3, 3))]), 0)
    now[0] = 1200  # rows 1 and 2 are 1200 ms old, row 3 600 ms
    out = op.process(_batch(1, [("+I", (k, 9)) for k in (1, 2, 3)]), 1)
    assert [r["k"] for b in out for r in b.to_pylist()] == [3]
    assert op.metrics["state_rows"] == 4  # row 3 and the three right rows


KT = pa.schema([("k", pa.int64()), ("t", pa.timestamp("ms"))])


def _within_a_second(*, broadcast: int | None = None, backend=None, subtask: int = 0) -> JoinOperator:
    """(k, t) joined with (k, t) on k, where the times are at most a second apart; with
    ``broadcast``, subtask ``subtask`` of a join that gets that input whole in every subtask."""
    ts = pa.timestamp("ms")
    out_schema = pa.schema([("k", pa.int64()), ("t", ts), ("k2", pa.int64()), ("t2", ts)])

    def within(b, ctx):
        diff = pc.subtract(pc.cast(b.column(3), pa.int64()), pc.cast(b.column(1), pa.int64()))
        return pc.and_(pc.greater_equal(diff, -1000), pc.less_equal(diff, 1000))

    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,), schema=out_schema,
                  residual=within, interval=(1, 1, -1000, 1000), broadcast=broadcast)
    return JoinOperator(node, TaskContext(runtime=RuntimeContext(), node_id=3), left_schema=KT, right_schema=KT,
                        backend=backend, operator_id=f"join-3.{subtask}")


def test_interval_join_frees_state_as_the_watermark_passes() -> None:
    """Rows 100 ms apart on both sides, matched within one second: the state holds about the
    rows of the last second or two, whatever the length of the stream, and nothing at the end."""
    ts = pa.timestamp("ms")
    left_schema = right_schema = KT
    op = _within_a_second()
    n = 3000
    times = [i * 100 for i in range(n)]
    pairs = 0
    peak = 0
    for start in range(0, n, 10):
        chunk = times[start:start + 10]
        for side, schema in ((0, left_schema), (1, right_schema)):
            batch = pa.RecordBatch.from_arrays([pa.array([t // 100 % 3 for t in chunk], pa.int64()),
                                                pa.array(chunk, ts)], schema=schema)
            pairs += sum(b.num_rows for b in op.process(batch, side))
        op.on_watermark(chunk[-1])
        peak = max(peak, op.metrics["state_rows"])
    # Same key every 300 ms: each row meets the other side's rows at 0, ±300, ±600, ±900 ms.
    assert pairs == sum(1 for a in range(n) for b in range(max(0, a - 10), min(n, a + 11))
                        if a % 3 == b % 3)
    assert peak <= 80, peak  # ~2 x 10 rows per second x 2 s at most, plus a batch or two
    op.on_watermark(2**62)
    assert op.metrics["state_rows"] == 0 and op.metrics["state_bytes"] == 0


def test_rows_of_two_channels_interleaved_in_time_are_stored_in_time_order() -> None:
    """The left side gets batches of two channels in turn, one 500 ms behind the other (two
    subtasks above an exchange): each channel's rows keep to a lane, so every stored run stays in
    time order (and expiry drops a prefix of it), pairs are all found, and the state stays small."""
    ts = pa.timestamp("ms")
    schema = KT
    op = _within_a_second()
    left: list[int] = []
    pairs = 0
    peak = 0
    for step in range(300):
        for lag in (0, 500):  # channel A, then channel B half a second behind
            chunk = [step * 100 + i * 10 - lag for i in range(10)]
            left += chunk
            batch = pa.RecordBatch.from_arrays([pa.array([0] * 10, pa.int64()), pa.array(chunk, ts)], schema=schema)
            pairs += sum(b.num_rows for b in op.process(batch, 0))
        right = pa.RecordBatch.from_arrays([pa.array([0], pa.int64()), pa.array([step * 100 - 500], ts)], schema=schema)
        pairs += sum(b.num_rows for b in op.process(right, 1))
        op.on_watermark(step * 100 - 600)
        peak = max(peak, op.metrics["state_rows"])
        for run in op.sides[0].runs:
            times = op.sides[0].table.get(run.namespace).column("_time").to_numpy()
            assert (times[1:] >= times[:-1]).all(), f"a run out of time order after step {step}"
    expected = sum(1 for r in range(300) for t in left if -1000 <= r * 100 - 500 - t <= 1000)
    assert pairs == expected
    # 200 rows per second over 1.7 s (from the watermark less a second to channel A's newest),
    # and up to a third more that waits until a quarter of its run has expired.
    assert peak <= 460, peak
    op.on_watermark(2**62)
    assert op.metrics["state_rows"] == 0


AUCTIONS = pa.schema([("k", pa.int64()), ("t", pa.timestamp("ms")), ("expires", pa.timestamp("ms"))])
BIDS = pa.schema([("k", pa.int64()), ("t", pa.timestamp("ms"))])


def _auction_bid_join(ends: bool, upper: int = 0) -> JoinOperator:
    """Auctions (k, t, expires) joined with bids (k, t) on ``bid.t BETWEEN auction.t AND
    auction.expires`` (``ends``: bounded by the expires column, as the compiler plans it), or on
    ``bid.t BETWEEN auction.t AND auction.t + upper`` (a plain interval join)."""
    ts = pa.timestamp("ms")
    out_schema = pa.schema([("k", pa.int64()), ("t", ts), ("expires", ts), ("k2", pa.int64()), ("t2", ts)])

    def open_then(b, ctx):
        bid, start = pc.cast(b.column(4), pa.int64()), pc.cast(b.column(1), pa.int64())
        end = pc.cast(b.column(2), pa.int64()) if ends else pc.add(start, upper)
        return pc.and_(pc.greater_equal(bid, start), pc.less_equal(bid, end))

    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,), schema=out_schema,
                  residual=open_then, interval=(1, 1, 0, 0 if ends else upper),
                  interval_ends=(2, 1) if ends else None)
    return JoinOperator(node, TaskContext(runtime=RuntimeContext(), node_id=3), left_schema=AUCTIONS,
                        right_schema=BIDS)


def _auctions(rows: list[tuple[int, int, int | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([r[0] for r in rows], pa.int64()),
                                       pa.array([r[1] for r in rows], pa.timestamp("ms")),
                                       pa.array([r[2] for r in rows], pa.timestamp("ms"))], schema=AUCTIONS)


def _bids(rows: list[tuple[int, int]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([r[0] for r in rows], pa.int64()),
                                       pa.array([r[1] for r in rows], pa.timestamp("ms"))], schema=BIDS)


def test_join_bounded_by_another_column_frees_state_as_the_watermark_passes() -> None:
    """An auction every 100 ms, open for 300 to 1,200 ms (a few never: expired before they
    start, or with no end), and four bids every 100 ms, 200 ms out of order: an auction leaves
    the state once the watermark passes its ``expires``, a bid once it passes the bid's time. The
    state stays that of the last second or so however long the stream, and is empty at the end."""
    op = _auction_bid_join(ends=True)
    n = 3000
    def expires(i: int) -> int | None:
        return None if i % 50 == 0 else i * 100 - 10 if i % 37 == 0 else i * 100 + 300 + i % 10 * 100

    auctions = [(i % 7, i * 100, expires(i)) for i in range(n)]
    bids = [(j % 11, j * 25 + (j * 7919) % 200) for j in range(4 * n)]
    pairs = 0
    peak = 0
    for start in range(0, n, 10):
        pairs += sum(b.num_rows for b in op.process(_auctions(auctions[start:start + 10]), 0))
        pairs += sum(b.num_rows for b in op.process(_bids(bids[4 * start:4 * start + 40]), 1))
        # The newest rows are up to 200 ms out of order: the watermark lags the latest time by that.
        op.on_watermark((start + 10) * 100 - 300)
        peak = max(peak, op.metrics["state_rows"])
    by_key: dict[int, list[int]] = {}
    for k, t in bids:
        by_key.setdefault(k, []).append(t)
    assert pairs == sum(1 for k, t, e in auctions if e is not None for b in by_key.get(k, ()) if t <= b <= e)
    assert pairs > 5_000
    # Open auctions (12 a second at most), and the bids of the last ~500 ms.
    assert peak <= 120, peak
    op.on_watermark(2**62)
    assert op.metrics["state_rows"] == 0 and op.metrics["state_bytes"] == 0


def test_join_bounded_by_another_column_treats_late_rows_as_a_plain_interval_join_does() -> None:
    """Where every auction's ``expires`` is its time + 1 s, the join bounded by ``expires`` and
    the plain interval join ``BETWEEN a.t AND a.t + 1 s`` are the same join, late rows included:
    a late row is matched against what is still stored, is stored, and leaves at the next
    watermark; nothing is counted as dropped."""
    by_end, plain = _auction_bid_join(ends=True), _auction_bid_join(ends=False, upper=1000)
    steps = [
        (0, [(1, 0), (2, 500)]),          # auctions at 0 and 500 ms, open for a second
        (1, [(1, 300), (2, 900)]),        # bids that meet them
        (2, 1200),                        # watermark 1200: auction 1 (until 1000) is done
        (1, [(1, 800), (2, 1100)]),       # late bids: the first finds auction 1 gone, the second meets auction 2
        (0, [(2, 700)]),                  # a late auction: meets the late bid at 1100, not the bid at 900, gone
        (2, 1400),                        # the late bids leave; the late auction is open until 1700
        (1, [(2, 1450), (1, 1500)]),
        (2, 1600),                        # auction 2 (until 1500) is done
        (1, [(2, 1500)]),                 # late: only the late auction at 700 (until 1700) is left
    ]
    outputs: list[list[list[dict]]] = [[], []]
    states: list[list[int]] = [[], []]
    for which, op in enumerate((by_end, plain)):
        for kind, arg in steps:
            if kind == 2:
                op.on_watermark(arg)
                states[which].append(op.metrics["state_rows"])
                continue
            rows = ([(k, t, t + 1000) for k, t in arg] if kind == 0 else arg)
            batch = _auctions(rows) if kind == 0 else _bids(rows)
            outputs[which].append([r for b in op.process(batch, kind) for r in b.to_pylist()])
    assert outputs[0] == outputs[1]
    assert states[0] == states[1] == [1, 2, 1]
    ms = dt.timedelta(milliseconds=1)
    epoch = dt.datetime(1970, 1, 1)
    met = [[((r["t"] - epoch) // ms, (r["t2"] - epoch) // ms) for r in rows] for rows in outputs[0]]
    assert met == [[], [(0, 300), (500, 900)], [(500, 1100)], [(700, 1100)], [(500, 1450), (700, 1450)],
                   [(700, 1500)]]
    assert "late_records" not in by_end.metrics


def test_temporal_join_drops_versions_the_watermark_has_superseded() -> None:
    """30 keys get a new version every 100 ms for 100 s (30,000 versions); the state keeps about
    the newest settled version of each key, compacting when it doubles, and never all of them."""
    from clink.runtime.operators.temporal import TemporalJoinOperator

    ts = pa.timestamp("ms")
    left_schema = pa.schema([("k", pa.int64()), ("t", ts)])
    right_schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("t", ts)])
    out_schema = pa.schema([("k", pa.int64()), ("t", ts), ("k2", pa.int64()), ("v", pa.int64()), ("t2", ts)])
    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,), schema=out_schema,
                  temporal=(1, 2))
    op = TemporalJoinOperator(node, TaskContext(runtime=RuntimeContext(), node_id=3), left_schema=left_schema,
                              right_schema=right_schema)
    peak = 0
    results = []
    for step in range(1000):
        now = step * 100
        op.process(pa.RecordBatch.from_arrays([pa.array(range(30), pa.int64()), pa.array([step] * 30, pa.int64()),
                                               pa.array([now] * 30, ts)], schema=right_schema), 1)
        op.process(pa.RecordBatch.from_arrays([pa.array([step % 30], pa.int64()), pa.array([now + 50], ts)],
                                              schema=left_schema), 0)
        results += op.on_watermark(now)
        peak = max(peak, op.metrics["state_rows"])
    results += op.on_watermark(2**62)
    rows = [r for b in results for r in b.to_pylist()]
    # Each left row (at step * 100 + 50) meets its key's version of that step (at step * 100),
    # although the version of the next step had arrived when the row fired.
    epoch = dt.datetime(1970, 1, 1)
    assert len(rows) == 1000
    assert all(r["v"] == (r["t"] - epoch) // dt.timedelta(milliseconds=100) and r["t"] - r["t2"] ==
               dt.timedelta(milliseconds=50) for r in rows)
    assert peak < 4 * 1024, peak


def _kt(times: list[int], keys: range) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([k for t in times for k in keys], pa.int64()),
                                       pa.array([t for t in times for _ in keys], pa.timestamp("ms"))], schema=KT)


@pytest.mark.parametrize("state", ["memory", "sqlite"])
@pytest.mark.parametrize("resume_at", [1, 2, 3])
def test_a_broadcast_input_restores_whole_in_every_subtask_and_the_other_by_key_group(
        tmp_path: Path, state: str, resume_at: int) -> None:
    """Two subtasks of a join whose right input is broadcast, each with left rows of every key;
    the second one's watermark is further on, so it has dropped a right row the first still
    keeps. Snapshots, a restore at 1, 2 or 3 subtasks, more rows of both inputs: every pair
    comes out exactly once, as from one join that saw every row (a restore by key groups
    alone would repeat the right rows both copies hold, or lose the other key groups')."""
    def backend(name: str):
        if state == "memory":
            return MemoryStateBackend(max_parallelism=128)
        return SqliteStateBackend(tmp_path / name, max_parallelism=128, table_cache_bytes=256)

    keys = range(6)
    pairs: Counter = Counter()

    def collect(out: list[pa.RecordBatch]) -> None:
        pairs.update(tuple(r.values()) for b in out for r in b.to_pylist())

    ops = [_within_a_second(broadcast=1, backend=backend(f"a{i}"), subtask=i) for i in range(2)]
    for op, left_time, watermark in zip(ops, (900, 950), (1100, 1500), strict=True):
        collect(op.process(_kt([200, 1000], keys), 1))
        collect(op.process(_kt([left_time], keys), 0))
        op.on_watermark(watermark)  # subtask 1 drops the right rows at 200 ms, subtask 0 keeps them
    assert ops[0].sides[1].rows() == 12 and ops[1].sides[1].rows() == 6
    snapshot = tmp_path / "chk"
    snapshot.mkdir()
    files, metas = [], []
    for op in ops:
        written, meta = op.snapshot(1, snapshot)
        files += written
        metas.append(meta)
        op.close()
    restored = [_within_a_second(broadcast=1, backend=backend(f"b{j}"), subtask=j) for j in range(resume_at)]
    for j, op in enumerate(restored):
        op.restore(files, metas[0], key_groups=key_group_range(j, resume_at, 128))
    collect(restored[0].process(_kt([1200], keys), 0))  # from the first subtask's source, on time there
    for op in restored:
        collect(op.process(_kt([2100], keys), 1))
    lefts, rights = (900, 950, 1200), (200, 1000, 2100)
    expected = Counter((k, dt.datetime.fromtimestamp(a / 1000, dt.UTC).replace(tzinfo=None), k,
                        dt.datetime.fromtimestamp(b / 1000, dt.UTC).replace(tzinfo=None))
                       for k in keys for a in lefts for b in rights if abs(a - b) <= 1000)
    assert pairs == expected


def test_a_broadcast_join_refuses_a_snapshot_without_its_copy_of_the_broadcast_input(tmp_path: Path) -> None:
    """State of a join that hashed both inputs holds no whole copy of either: read by key groups
    alone, a subtask would miss the broadcast rows of every other key group."""
    from clink.runtime.state.backend import IncompatibleState

    hashed = _within_a_second()
    hashed.process(_kt([1000], range(6)), 1)
    files, meta = hashed.snapshot(1, tmp_path)
    with pytest.raises(IncompatibleState, match="no copy of the broadcast input"):
        _within_a_second(broadcast=1).restore(files, meta)


WINDOW_ROWS = pa.schema([("w", pa.int64()), ("n", pa.int64())])
WINDOW_MAX = pa.schema([("w", pa.int64()), ("maxn", pa.int64())])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_few_rows_probing_long_stretches_of_one_key_find_every_match(data) -> None:
    """The shape of a per-window maximum joined with its window's rows: the rows of a key arrive
    together, many at a time (found as stretches of a run, sliced), sometimes two keys in one
    batch or one key over several batches, and a few rows of the other input probe them. Every
    pair is found once, against a nested loop over what was stored."""
    out_schema = pa.schema([("w", pa.int64()), ("n", pa.int64()), ("w2", pa.int64()), ("maxn", pa.int64())])
    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,), schema=out_schema,
                  residual=lambda b, ctx: pc.greater_equal(b.column(1), b.column(3)))
    op = JoinOperator(node, TaskContext(runtime=RuntimeContext(), node_id=3), left_schema=WINDOW_ROWS,
                      right_schema=WINDOW_MAX)
    stored: list[tuple[int, int]] = []
    probing: list[tuple[int, int]] = []
    found: Counter = Counter()
    for _ in range(data.draw(st.integers(1, 8), label="rounds")):
        for _ in range(data.draw(st.integers(1, 3), label="left batches")):
            keys = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=2), label="keys")
            rows = [(k, n) for k in keys for n in data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=150))]
            stored += rows
            for batch in op.process(pa.RecordBatch.from_arrays([pa.array([r[0] for r in rows], pa.int64()),
                                                                pa.array([r[1] for r in rows], pa.int64())],
                                                               schema=WINDOW_ROWS), 0):
                found.update(tuple(r.values()) for r in batch.to_pylist())
        probes = data.draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9)), min_size=1, max_size=3),
                           label="probes")
        for batch in op.process(pa.RecordBatch.from_arrays([pa.array([p[0] for p in probes], pa.int64()),
                                                            pa.array([p[1] for p in probes], pa.int64())],
                                                           schema=WINDOW_MAX), 1):
            found.update(tuple(r.values()) for r in batch.to_pylist())
        probing += probes
    assert found == Counter((w, n, w2, m) for w2, m in probing for w, n in stored if w == w2 and n >= m)


def test_keys_whose_hashes_collide_do_not_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every string key hashed alike: rows meet only where their keys are really equal. (A
    signed integer key skips the comparison: its hash is a bijection, tests/runtime/test_keygroups.py.)"""
    import numpy as np

    import clink.runtime.operators.join as join_module

    monkeypatch.setattr(join_module, "hash_columns", lambda columns, n=None: np.zeros(
        n if n is not None else len(columns[0]), dtype=np.uint64))
    left = pa.schema([("k", pa.string()), ("v", pa.int64())])
    right = pa.schema([("k", pa.string()), ("w", pa.int64())])
    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,),
                  schema=pa.schema([*left, pa.field("k2", pa.string()), pa.field("w", pa.int64())]))
    ctx = TaskContext(runtime=RuntimeContext(), node_id=3)
    op = JoinOperator(node, ctx, left_schema=left, right_schema=right)
    assert op.process(pa.record_batch([pa.array(["a", "b"]), pa.array([1, 2])], schema=left), 0) == []
    out = op.process(pa.record_batch([pa.array(["b", "c", "a"]), pa.array([10, 20, 30])], schema=right), 1)
    rows = sorted(r for b in out for r in zip(*(c.to_pylist() for c in b.columns)))
    assert rows == [("a", 1, "a", 30), ("b", 2, "b", 10)]


# -- a side with one row per key (plan.Join.unique) ---------------------------------------------

PLAIN_LEFT = pa.schema([("k", pa.int64()), ("v", pa.int64())])
PLAIN_RIGHT = pa.schema([("k", pa.int64()), ("w", pa.int64())])


def _unique_operator(unique: tuple[bool, bool], residual: bool) -> JoinOperator:
    fields = [pa.field("k", pa.int64()), pa.field("v", pa.int64()), pa.field("k2", pa.int64()),
              pa.field("w", pa.int64())]
    node = P.Join(id=3, left=1, right=2, kind="inner", left_keys=(0,), right_keys=(0,), schema=pa.schema(fields),
                  residual=(lambda b, ctx: pc.less_equal(b.column(1), b.column(3))) if residual else None,
                  residual_reads=(1, 3) if residual else None, unique=unique)
    return JoinOperator(node, TaskContext(runtime=RuntimeContext(), node_id=3), left_schema=PLAIN_LEFT,
                        right_schema=PLAIN_RIGHT)


@st.composite
def one_row_per_key(draw, unique_side: int) -> list[tuple[int, list[tuple]]]:
    """Batches of (side, rows) of two append-only inputs; on ``unique_side`` no key comes twice
    (NULL keys may: they match nothing)."""
    used: set[int] = set()
    batches = []
    for _ in range(draw(st.integers(1, 14))):
        side = draw(st.integers(0, 1))
        rows = []
        for _ in range(draw(st.integers(1, 6))):
            k = draw(st.one_of(st.none(), st.integers(0, 5)))
            if side == unique_side and k is not None:
                if k in used:
                    k = None
                used.add(k)
            rows.append((k, draw(values)))
        batches.append((side, rows))
    return batches


@pytest.mark.parametrize("unique_side", [0, 1])
@pytest.mark.parametrize("residual", [False, True])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_side_with_one_row_per_key_keeps_the_other_only_until_it_comes(unique_side: int, residual: bool,
                                                                        data) -> None:
    """The pairs are the batch join's; the other side's rows that met their row are not kept
    (where they are most of their batch) or leave when it comes."""
    batches = data.draw(one_row_per_key(unique_side))
    unique = (unique_side == 0, unique_side == 1)
    op, plain = _unique_operator(unique, residual), _unique_operator((False, False), residual)
    table: Counter = Counter()
    for side, rows in batches:
        schema = PLAIN_LEFT if side == 0 else PLAIN_RIGHT
        batch = pa.RecordBatch.from_arrays([pa.array([r[0] for r in rows], pa.int64()),
                                            pa.array([r[1] for r in rows], pa.int64())], schema=schema)
        for out in op.process(batch, side):
            for row in out.to_pylist():
                table[(row["k"], row["v"], row["k2"], row["w"])] += 1
        plain.process(batch, side)
    left = Counter(r for s, rows in batches if s == 0 for r in rows)
    right = Counter(r for s, rows in batches if s == 1 for r in rows)
    assert table == _expected("inner", residual, left, right)
    other = 1 - unique_side
    assert op.sides[other].rows() <= plain.sides[other].rows()
    assert op.sides[unique_side].rows() == plain.sides[unique_side].rows()
    if not residual:
        # No row of the other side that met its row stays (those left out, or removed when it came),
        # but for rows stored with a batch mostly of rows that had not.
        unique_keys = {r[0] for s, rows in batches if s == unique_side for r in rows if r[0] is not None}
        stayed = [k for k in op.sides[other].stored().column("c0").to_pylist() if k in unique_keys]
        late = [k for s, rows in batches if s == other for k, _ in rows if k in unique_keys]
        assert len(stayed) <= len(late)


def test_rows_that_meet_their_one_row_on_arrival_are_not_kept() -> None:
    op = _unique_operator((True, False), residual=False)
    left = pa.RecordBatch.from_arrays([pa.array(range(10), pa.int64()), pa.array(range(10), pa.int64())],
                                      schema=PLAIN_LEFT)
    right = pa.RecordBatch.from_arrays([pa.array([1, 2, 3, 11], pa.int64()), pa.array([0, 0, 0, 0], pa.int64())],
                                       schema=PLAIN_RIGHT)
    early = pa.RecordBatch.from_arrays([pa.array([12, 12], pa.int64()), pa.array([5, 6], pa.int64())],
                                       schema=PLAIN_RIGHT)
    op.process(early, 1)
    assert op.sides[1].rows() == 2
    op.process(left, 0)
    assert sum(b.num_rows for b in op.process(right, 1)) == 3
    assert sorted(op.sides[1].stored().column("c0").to_pylist()) == [11, 12, 12]  # 1, 2 and 3 met theirs
    closing = pa.RecordBatch.from_arrays([pa.array([12], pa.int64()), pa.array([1], pa.int64())], schema=PLAIN_LEFT)
    assert sum(b.num_rows for b in op.process(closing, 0)) == 2
    assert sorted(op.sides[1].stored().column("c0").to_pylist()) == [11]  # 12's rows met their row and went
