"""Subtasks in one process: key-group ranges, exchanges, split sources, and a plan that lacks
the exchange its partitioning needs."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import clink
from clink import records
from clink.errors import CompilerBug, SqlError, UsageError
from clink.runtime.connectors.shares import Progress, merge, share_of
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job, key_group_range
from clink.runtime.plan import Exchange, Plan
from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM

COUNTS = """CREATE TABLE t (k BIGINT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '20000',
  'batch-size' = '700', 'fields.k.kind' = 'random', 'fields.k.min' = '1', 'fields.k.max' = '50');
SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k;
"""
#: The same counts into a sink, for jobs run here.
COUNTS_INTO = COUNTS.replace("SELECT", "CREATE TABLE o (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = "
                                       "'blackhole');\nINSERT INTO o SELECT")


@given(st.integers(1, 64), st.sampled_from([1, 7, 128, 1000]))
def test_key_group_ranges_are_contiguous_cover_every_group_and_match_the_routing(parallelism: int,
                                                                                 groups: int) -> None:
    if parallelism > groups:
        return
    ranges = [key_group_range(i, parallelism, groups) for i in range(parallelism)]
    assert [g for r in ranges for g in r] == list(range(groups))
    assert all(len(r) >= 1 for r in ranges)
    for i, r in enumerate(ranges):
        assert all(g * parallelism // groups == i for g in r)  # the exchange sends group g to i


def test_the_default_number_of_key_groups_is_the_state_s() -> None:
    job = Job(clink.compile(COUNTS_INTO).runtime_plan, RuntimeContext(stdout=io.StringIO()))
    assert job.max_parallelism == DEFAULT_MAX_PARALLELISM


@pytest.mark.parametrize("parallelism", [1, 2, 3, 8])
def test_a_group_by_gives_the_same_rows_at_any_parallelism(parallelism: int) -> None:
    reference = clink.sql(COUNTS).to_arrow().sort_by("k")
    ours = clink.sql(COUNTS, config={"parallelism.default": str(parallelism)}).to_arrow().sort_by("k")
    assert ours.equals(reference) and reference.num_rows == 50


def test_each_subtask_owns_its_key_groups_and_each_source_reader_its_share() -> None:
    job = Job(clink.compile(COUNTS_INTO).runtime_plan,
              RuntimeContext(stdout=io.StringIO(), config={"parallelism.default": "3"}))
    job.run()
    (source,) = job.plan.sources
    readers = [job._readers[sid] for sid in job._subtasks[source.id]]
    # Blocks of 700 rows (the last of 400): 0, 3 … 27 to the first reader, 1, 4 … 28 to the second.
    assert [r.metrics["records_in"] for r in readers] == [7000, 6700, 6300]
    group = next(n for n in job.plan.nodes if type(n).__name__ == "GroupAggregate")
    tasks = [job._tasks[sid] for sid in job._subtasks[group.id]]
    assert [(t.subtask, t.parallelism, t.key_groups) for t in tasks] == [
        (0, 3, range(0, 43)), (1, 3, range(43, 86)), (2, 3, range(86, 128))]
    sink = job.plan.sinks[0]
    assert len(job._subtasks[sink.id]) == 1  # one writer


def test_a_plan_without_the_exchange_its_partitioning_needs_is_refused_above_parallelism_1() -> None:
    plan = clink.compile(COUNTS_INTO).runtime_plan
    exchange = next(n for n in plan.nodes if isinstance(n, Exchange) and n.distribution.kind == "hash")
    # The plan an older compiler made: the aggregate reads the chain below the exchange directly.
    nodes = tuple(n.__class__(**{**{f.name: getattr(n, f.name) for f in records.fields(type(n))}, "input": exchange.input})
                  if getattr(n, "input", None) == exchange.id else n for n in plan.nodes if n is not exchange)
    old = Plan(nodes=nodes, name=plan.name, config=plan.config)
    assert Job(old, RuntimeContext(stdout=io.StringIO())).run()  # one subtask: nothing to spread
    with pytest.raises(CompilerBug, match=r"needs its input .* distributed as P.hash_by\(0\).*compile the pipeline"):
        Job(old, RuntimeContext(stdout=io.StringIO(), config={"parallelism.default": "2"}))


def test_a_parallelism_that_is_not_a_positive_number_is_refused() -> None:
    with pytest.raises(SqlError, match="parallelism.default"):
        clink.compile("SET 'parallelism.default' = '0';\n" + COUNTS)
    with pytest.raises(UsageError, match="'parallelism.default' must be a positive whole number"):
        Job(clink.compile(COUNTS_INTO).runtime_plan, RuntimeContext(config={"parallelism.default": "two"}))
    with pytest.raises(UsageError, match="exceeds 'pipeline.max-parallelism'"):
        Job(clink.compile(COUNTS_INTO).runtime_plan,
            RuntimeContext(config={"parallelism.default": "9", "pipeline.max-parallelism": "8"}))


@given(st.integers(1, 5), st.integers(1, 5), st.lists(st.integers(0, 40), min_size=5, max_size=5),
       st.integers(0, 3))
def test_shares_resumed_at_another_parallelism_read_each_row_once(old: int, new: int, reached: list[int],
                                                                  offset: int) -> None:
    """Parts 0..29 of 10 rows: old readers stopped at their ``reached`` part (``offset`` rows in);
    the new readers together read exactly the rows the old ones had not."""
    parts, rows = 30, 10
    done_before: set[tuple[int, int]] = set()
    positions = []
    for i in range(old):
        own = [b for b in range(parts) if b % old == i]
        stop = min(reached[i] // old, len(own))
        for b in own[:stop]:
            done_before |= {(b, r) for r in range(rows)}
        part = own[stop] if stop < len(own) else i + old * len(own)
        at = offset if stop < len(own) else 0
        done_before |= {(part, r) for r in range(at)}
        positions.append(Progress(i, old, part, at).position())
    read: list[tuple[int, int]] = []
    for j in range(new):
        progress = share_of(*merge(positions), subtask=j, parallelism=new)
        while progress.part < parts:
            start = progress.offset
            if start != -1:
                read += [(progress.part, r) for r in range(start, rows)]
            progress.next_part()
    assert sorted(read) == sorted({(b, r) for b in range(parts) for r in range(rows)} - done_before)


def test_one_parquet_file_is_split_by_row_group_and_resumes_at_another_parallelism(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from clink.runtime.connectors import filesystem
    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.filesystem import FILESYSTEM

    # Batches of 700 rows over row groups of 1000: batches straddle groups, cuts land inside one.
    monkeypatch.setattr(filesystem, "PARQUET_BATCH_ROWS", 700)

    table = pa.table({"a": pa.array(range(10_000), pa.int64())})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=1000)  # ten row groups
    schema = table.schema

    def readers(parallelism: int) -> list:
        return [FILESYSTEM.create_source(TableSpec(name="t", schema=schema, table_schema=schema,
                                                   options={"path": str(tmp_path / "t.parquet"), "format": "parquet"},
                                                   subtask=i, parallelism=parallelism), RuntimeContext())
                for i in range(parallelism)]

    def drain(reader, limit: int | None = None) -> list[int]:
        rows: list[int] = []
        while not reader.finished and (limit is None or len(rows) < limit):
            batch = reader.poll()
            if batch is not None:
                rows += batch.column(0).to_pylist()
        return rows

    three = readers(3)
    shares = [drain(r) for r in three]
    assert [len(s) for s in shares] == [4000, 3000, 3000]  # row groups 0, 3, 6, 9 to the first
    assert sorted(sum(shares, [])) == list(range(10_000))
    # Cut two readers part-way, resume the table with three readers, then with one.
    two = readers(2)
    before = drain(two[0], 1500) + drain(two[1], 2500)
    # Each reader reads its row groups one by one: 700, 300, 700 rows, and 700, 300, 700, 300, 700.
    assert len(before) == 1700 + 2700
    positions = [r.position() for r in two]
    assert [(p["part"], p["offset"]) for p in positions] == [(2, 700), (5, 700)]  # row group, rows of it
    for count in (3, 1):  # one reader reads its groups together, around those begun before
        after = []
        for reader in readers(count):
            reader.seek_shares(positions)
            after += drain(reader)
        assert sorted(before + after) == list(range(10_000)), count


def test_two_exchanges_over_the_same_key_arrays_share_their_partition() -> None:
    """A window aggregate's result feeds both inputs of a join: two projections of one batch,
    the same key arrays. The second exchange reuses the first's ordering; arrays with equal
    values but their own buffers are ordered afresh."""
    job = Job(clink.compile(COUNTS_INTO).runtime_plan,
              RuntimeContext(stdout=io.StringIO(), config={"parallelism.default": "4"}))
    keys = pa.array([5, 1, 9, 3, 5, 1, 7] * 100)
    batch = pa.record_batch({"k": keys, "v": pa.array(range(700))})
    order, bounds = job._partition([batch.column(0)], 4, batch.num_rows)
    projected = batch.select(["k"])
    again, again_bounds = job._partition([projected.column(0)], 4, projected.num_rows)
    assert again is order and again_bounds is bounds
    copy = pa.array(keys.to_pylist())
    fresh, fresh_bounds = job._partition([copy], 4, len(copy))
    assert fresh is not order
    assert fresh.tolist() == order.tolist() and fresh_bounds.tolist() == bounds.tolist()
    assert job._partition([copy], 2, len(copy))[0] is not fresh  # another count of subtasks
