"""The non-windowed GROUP BY operator, checked through the changelog it emits.

The changelog is applied to a dict (``+I`` / ``+U`` set a key's row, ``-U`` / ``-D`` remove it
and must carry exactly the row held), and the dict must end equal to the aggregates computed
in plain Python from the rows that were added and not retracted.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import random
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.runtime import plan
from clink.runtime.connectors import ConnectorRegistry
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators.group import GroupAggregateOperator, _dense_ids
from clink.runtime.state import keygroups
from clink.runtime.state.backend import IncompatibleState, StateBackend
from clink.runtime.state.keygroups import key_groups
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

A = plan.AggSpec
ROWKIND = plan.ROWKIND_COLUMN

#: Input layout of most tests: k (STRING key), v (BIGINT), f (BOOLEAN filter); an updating
#: input adds the row-kind column.
INPUT = pa.schema([("k", pa.string()), ("v", pa.int64()), ("f", pa.bool_())])
UPDATING = INPUT.append(pa.field(ROWKIND, pa.string()))
K, V, F = range(3)

#: Few key groups, so that each holds several keys and the split by key group is exercised.
MAX_PARALLELISM = 8

#: Aggregates that an updating input can retract, with their plain-Python meaning over the
#: (v, f) pairs of one key's net rows.
RETRACTABLE: list[tuple[plan.AggSpec, Callable[[list[tuple[Any, Any]]], Any]]] = [
    (A(fn="count_star", arg=None, type=pa.int64()), len),
    (A(fn="count_star", arg=None, type=pa.int64(), filter=F), lambda rs: sum(f is True for _, f in rs)),
    (A(fn="count", arg=V, type=pa.int64()), lambda rs: sum(v is not None for v, _ in rs)),
    (A(fn="count", arg=V, type=pa.int64(), filter=F), lambda rs: sum(v is not None and f is True for v, f in rs)),
    (A(fn="sum", arg=V, type=pa.int64()), lambda rs: _sum([v for v, _ in rs])),
    (A(fn="sum", arg=V, type=pa.int64(), filter=F), lambda rs: _sum([v for v, f in rs if f is True])),
    (A(fn="avg", arg=V, type=pa.float64()), lambda rs: _avg([v for v, _ in rs])),
    (A(fn="avg", arg=V, type=pa.float64(), filter=F), lambda rs: _avg([v for v, f in rs if f is True])),
    (A(fn="count_distinct", arg=V, type=pa.int64()), lambda rs: _distinct([v for v, _ in rs])),
    (A(fn="count_distinct", arg=V, type=pa.int64(), filter=F), lambda rs: _distinct([v for v, f in rs if f is True])),
    # Over another column: a second state of value counts, next to the one of v's two aggregates.
    (A(fn="count_distinct", arg=F, type=pa.int64()), lambda rs: _distinct([f for _, f in rs])),
]
#: Aggregates only an append-only input allows.
EXTREMES: list[tuple[plan.AggSpec, Callable[[list[tuple[Any, Any]]], Any]]] = [
    (A(fn="min", arg=V, type=pa.int64()), lambda rs: _extreme(min, [v for v, _ in rs])),
    (A(fn="max", arg=V, type=pa.int64()), lambda rs: _extreme(max, [v for v, _ in rs])),
    (A(fn="max", arg=V, type=pa.int64(), filter=F), lambda rs: _extreme(max, [v for v, f in rs if f is True])),
]


def _sum(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _avg(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _distinct(values: list[Any]) -> int:
    return len({v for v in values if v is not None})


def _extreme(fn: Callable, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return fn(present) if present else None


BACKENDS: dict[str, Callable[..., StateBackend]] = {
    "memory": lambda d, p=MAX_PARALLELISM: MemoryStateBackend(max_parallelism=p),
    "sqlite": lambda d, p=MAX_PARALLELISM: SqliteStateBackend(d, max_parallelism=p),
    # Nearly every access evicts and reloads: the accumulators go through the database.
    "sqlite-tiny-cache": lambda d, p=MAX_PARALLELISM: SqliteStateBackend(d, cache_entries=2, max_parallelism=p),
}


# ---------------------------------------------------------------- building blocks


def context(max_parallelism: int = MAX_PARALLELISM) -> TaskContext:
    runtime = RuntimeContext(connectors=ConnectorRegistry(), config={"pipeline.max-parallelism": str(max_parallelism)})
    return TaskContext(runtime=runtime, node_id=2)


def make_node(aggs: Sequence[plan.AggSpec], *, input_schema: pa.Schema = INPUT,
              keys: tuple[int, ...] = (K,)) -> plan.GroupAggregate:
    fields = [input_schema.field(k) for k in keys] + [pa.field(f"a{i}", a.type) for i, a in enumerate(aggs)]
    schema = pa.schema([*fields, pa.field(ROWKIND, pa.string())])
    return plan.GroupAggregate(id=2, input=1, keys=keys, aggs=tuple(aggs), schema=schema)


def make_op(aggs: Sequence[plan.AggSpec], *, updating: bool = False, keys: tuple[int, ...] = (K,),
            input_schema: pa.Schema | None = None, backend: StateBackend | None = None,
            max_parallelism: int = MAX_PARALLELISM) -> GroupAggregateOperator:
    schema = input_schema or (UPDATING if updating else INPUT)
    node = make_node(aggs, input_schema=schema, keys=keys)
    mode = plan.UPDATING if schema.names[-1] == ROWKIND else plan.APPEND_ONLY
    return GroupAggregateOperator(node, context(max_parallelism), input_schema=schema, backend=backend,
                                  input_mode=mode)


def batch(rows: Iterable[tuple], schema: pa.Schema = INPUT) -> pa.RecordBatch:
    """Rows as tuples in the column order of ``schema``."""
    return pa.RecordBatch.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def rows_of(batches: Iterable[pa.RecordBatch]) -> list[tuple]:
    """Every output row as a tuple, in output order."""
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


def apply_changelog(table: dict[tuple, tuple], out: Iterable[pa.RecordBatch], op: GroupAggregateOperator) -> None:
    """Apply changelog batches to ``table`` (key tuple -> aggregate tuple), checking that each
    retraction carries the row held and that no key is inserted twice."""
    width = len(op.node.keys)
    for b in out:
        assert b.schema == op.node.schema
        for row in rows_of([b]):
            key, values, kind = row[:width], row[width:-1], row[-1]
            if kind in ("+I", "+U"):
                assert key not in table, f"{kind} for {key} while it holds {table[key]}"
                table[key] = values
            else:
                assert kind in ("-U", "-D"), kind
                assert table.get(key) == values, f"{kind} {values} for {key}, which holds {table.get(key)}"
                del table[key]


def model(live: Iterable[tuple], fns: Sequence[Callable]) -> dict[tuple, tuple]:
    """The aggregates per key of the net input rows ``(k, v, f)``."""
    by_key: dict[Any, list[tuple[Any, Any]]] = defaultdict(list)
    for k, v, f in live:
        by_key[k].append((v, f))
    return {(k,): tuple(fn(rs) for fn in fns) for k, rs in by_key.items()}


def to_batches(steps: list[list[tuple[bool, int, tuple, bool]]], updating: bool) -> tuple[list[pa.RecordBatch],
                                                                                            list[tuple]]:
    """Input batches from drawn operations, and the rows live at the end.

    An operation either adds its row (``+I``, or ``+U`` when ``variant``) or, on an updating
    input with rows live, retracts the live row ``which`` points at (``-D``, or ``-U``): only
    rows really added are retracted, as a real upstream would.
    """
    live: list[tuple] = []
    batches = []
    for ops in steps:
        rows = []
        for retract, which, row, variant in ops:
            if updating and retract and live:
                rows.append((*live.pop(which % len(live)), "-U" if variant else "-D"))
            else:
                live.append(row)
                rows.append((*row, "+U" if variant else "+I") if updating else row)
        batches.append(batch(rows, UPDATING if updating else INPUT))
    return batches, live


def random_steps(seed: int, n_batches: int, size: int, keys: str = "abcdefghij") -> list[list]:
    rng = random.Random(seed)

    def row() -> tuple:
        return (rng.choice([*keys, None]), rng.choice([None, *range(-20, 21)]), rng.choice([True, False, None]))

    return [[(rng.random() < 0.35, rng.randrange(1000), row(), rng.random() < 0.5) for _ in range(size)]
            for _ in range(n_batches)]


# ---------------------------------------------------------------- the changelog against a model


_ops = st.tuples(st.booleans(), st.integers(0, 1_000),
                 st.tuples(st.sampled_from(["a", "b", "c", None]), st.none() | st.integers(-5, 5),
                           st.sampled_from([True, False, None])),
                 st.booleans())
_steps = st.lists(st.lists(_ops, max_size=12), min_size=1, max_size=8)
_PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("backend", ["memory", "sqlite-tiny-cache"])
@pytest.mark.parametrize("updating", [False, True], ids=["append-only", "updating"])
@_PROPERTY
@given(steps=_steps)
def test_the_changelog_ends_at_the_aggregates_of_the_net_rows(backend: str, updating: bool,
                                                            steps: list[list]) -> None:
    specs = RETRACTABLE if updating else RETRACTABLE + EXTREMES
    batches, live = to_batches(steps, updating)
    with tempfile.TemporaryDirectory() as directory:
        op = make_op([a for a, _ in specs], updating=updating, backend=BACKENDS[backend](Path(directory)))
        table: dict[tuple, tuple] = {}
        for b in batches:
            apply_changelog(table, op.process(b), op)
        expected = model(live, [fn for _, fn in specs])
        assert table == expected
        assert op.metrics["state_rows"] == len(expected)
        op.close()


# ---------------------------------------------------------------- examples


def test_the_first_row_inserts_and_the_next_updates() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=V, type=pa.int64())])
    assert rows_of(op.process(batch([("a", 5, None)]))) == [("a", 1, 5, "+I")]
    assert rows_of(op.process(batch([("a", 2, None)]))) == [("a", 1, 5, "-U"), ("a", 2, 7, "+U")]
    # Several rows of one key in a batch: one update, from the result before to the one after.
    assert rows_of(op.process(batch([("a", 1, None), ("b", None, None), ("a", 1, None)]))) == [
        ("a", 2, 7, "-U"), ("a", 4, 9, "+U"), ("b", 1, None, "+I")]


def test_an_unchanged_result_emits_nothing() -> None:
    op = make_op([A(fn="max", arg=V, type=pa.int64())])
    assert rows_of(op.process(batch([("a", 5, None)]))) == [("a", 5, "+I")]
    assert op.process(batch([("a", 3, None), ("a", None, None), ("a", 5, None)])) == []
    assert rows_of(op.process(batch([("a", 8, None)]))) == [("a", 5, "-U"), ("a", 8, "+U")]
    # The row count still grows even when no result shows it.
    count = make_op([A(fn="count", arg=V, type=pa.int64())])
    count.process(batch([("a", None, None)]))
    assert count.process(batch([("a", None, None)])) == []


def test_retracting_the_last_row_deletes_the_key() -> None:
    op = make_op([A(fn="sum", arg=V, type=pa.int64())], updating=True)
    assert rows_of(op.process(batch([("a", 1, None, "+I"), ("a", 2, None, "+U")], UPDATING))) == [("a", 3, "+I")]
    assert rows_of(op.process(batch([("a", 1, None, "-U")], UPDATING))) == [("a", 3, "-U"), ("a", 2, "+U")]
    assert op.metrics["state_rows"] == 1
    assert rows_of(op.process(batch([("a", 2, None, "-D")], UPDATING))) == [("a", 2, "-D")]
    assert op.metrics["state_rows"] == 0
    # The key is gone: the next row starts it again.
    assert rows_of(op.process(batch([("a", 4, None, "+I")], UPDATING))) == [("a", 4, "+I")]


def test_a_key_that_comes_and_goes_within_a_batch_emits_nothing() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64())], updating=True)
    assert op.process(batch([("a", 1, None, "+I"), ("a", 1, None, "-D")], UPDATING)) == []
    assert op.metrics["state_rows"] == 0


def test_the_sum_of_retracted_values_is_null_again() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=V, type=pa.int64()),
                  A(fn="avg", arg=V, type=pa.float64())], updating=True)
    op.process(batch([("a", None, None, "+I"), ("a", 3, None, "+I")], UPDATING))
    assert rows_of(op.process(batch([("a", 3, None, "-D")], UPDATING))) == [("a", 2, 3, 3.0, "-U"),
                                                                             ("a", 1, None, None, "+U")]


def test_null_is_a_key_like_any_other() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64())])
    out = rows_of(op.process(batch([(None, 1, None), ("a", 1, None), (None, 2, None)])))
    assert sorted(out, key=repr) == sorted([(None, 2, "+I"), ("a", 1, "+I")], key=repr)
    assert rows_of(op.process(batch([(None, 1, None)]))) == [(None, 2, "-U"), (None, 3, "+U")]


def test_several_key_columns_with_nulls() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64())], keys=(K, F))
    out = rows_of(op.process(batch([("a", 1, None), ("a", 2, None), ("a", 3, True), (None, 4, None)])))
    assert sorted(out, key=repr) == sorted([("a", None, 2, "+I"), ("a", True, 1, "+I"), (None, None, 1, "+I")],
                                           key=repr)


def test_filters_count_only_rows_where_they_are_true() -> None:
    aggs = [A(fn="count_star", arg=None, type=pa.int64(), filter=F), A(fn="sum", arg=V, type=pa.int64(), filter=F),
            A(fn="max", arg=V, type=pa.int64(), filter=F), A(fn="count_star", arg=None, type=pa.int64())]
    op = make_op(aggs)
    assert rows_of(op.process(batch([("a", 9, False), ("a", 8, None)]))) == [("a", 0, None, None, 2, "+I")]
    assert rows_of(op.process(batch([("a", 1, True), ("a", 7, False)]))) == [("a", 0, None, None, 2, "-U"),
                                                                               ("a", 1, 1, 1, 4, "+U")]


def test_no_keys_is_one_global_group() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=V, type=pa.int64())],
                 updating=True, keys=())
    assert rows_of(op.process(batch([("a", 1, None, "+I"), ("b", 2, None, "+I")], UPDATING))) == [(2, 3, "+I")]
    assert rows_of(op.process(batch([("a", 1, None, "-D")], UPDATING))) == [(2, 3, "-U"), (1, 2, "+U")]
    assert rows_of(op.process(batch([("b", 2, None, "-D")], UPDATING))) == [(1, 2, "-D")]


def test_result_types_are_those_of_the_output_schema() -> None:
    schema = pa.schema([("k", pa.int32()), ("i", pa.int32()), ("d", pa.decimal128(10, 2)), ("x", pa.float32())])
    aggs = (A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=1, type=pa.int64()),
            A(fn="avg", arg=1, type=pa.float64()), A(fn="avg", arg=1, type=pa.int32()),
            A(fn="min", arg=1, type=pa.int32()), A(fn="sum", arg=2, type=pa.decimal128(38, 2)),
            A(fn="avg", arg=2, type=pa.decimal128(38, 6)), A(fn="max", arg=2, type=pa.decimal128(10, 2)),
            A(fn="sum", arg=3, type=pa.float64()), A(fn="count", arg=3, type=pa.int32()))
    op = make_op(aggs, input_schema=schema)
    b = batch([(1, 2, Decimal("1.50"), 0.5), (1, 3, Decimal("2.25"), None)], schema)
    (out,) = op.process(b)
    assert out.schema == op.node.schema
    assert rows_of([out]) == [(1, 2, 5, 2.5, 2, 2, Decimal("3.75"), Decimal("1.875000"), Decimal("2.25"), 0.5, 1,
                               "+I")]
    (out,) = op.process(batch([(1, -10, Decimal("-4.00"), 1.5)], schema))
    assert out.schema == op.node.schema
    assert rows_of([out])[1] == (1, 3, -5, -5 / 3, -1, -10, Decimal("-0.25"), Decimal("-0.083333"), Decimal("2.25"),
                                 2.0, 2, "+U")


@pytest.mark.parametrize(("type_", "values"), [
    (pa.int8(), [1, -1, None]),
    (pa.float64(), [1.5, -2.0, None]),
    (pa.bool_(), [True, False, None]),
    (pa.decimal128(12, 3), [Decimal("1.250"), Decimal("-7.000"), None]),
    (pa.date32(), [dt.date(2024, 2, 29), dt.date(1969, 12, 31), None]),
    (pa.timestamp("ms"), [dt.datetime(2024, 1, 1, 12), dt.datetime(1999, 1, 1), None]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
                                    None]),
    (pa.string(), ["x", "", None]),
], ids=str)
@pytest.mark.parametrize("backend", ["memory", "sqlite-tiny-cache"])
def test_keys_of_every_scalar_type(type_: pa.DataType, values: list[Any], backend: str, tmp_path: Path) -> None:
    schema = pa.schema([("key", type_), ("v", pa.int64())])
    op = make_op([A(fn="sum", arg=1, type=pa.int64())], input_schema=schema, keys=(0,),
                 backend=BACKENDS[backend](tmp_path))
    first = rows_of(op.process(batch([(values[0], 1), (values[1], 2), (values[2], 3), (values[0], 4)], schema)))
    assert sorted(first, key=repr) == sorted([(values[0], 5, "+I"), (values[1], 2, "+I"), (values[2], 3, "+I")],
                                             key=repr)
    assert rows_of(op.process(batch([(values[2], 1)], schema))) == [(values[2], 3, "-U"), (values[2], 4, "+U")]
    assert op.metrics["state_rows"] == 3


def test_float_keys_that_the_state_treats_as_equal_are_one_group() -> None:
    schema = pa.schema([("key", pa.float64()), ("v", pa.int64())])
    op = make_op([A(fn="count_star", arg=None, type=pa.int64())], input_schema=schema, keys=(0,))
    quiet_nan = np.frombuffer(np.array([0x7FF8000000000001], np.uint64).tobytes(), np.float64)[0]
    out = rows_of(op.process(batch([(-0.0, 1), (0.0, 1), (math.nan, 1), (float(quiet_nan), 1)], schema)))
    assert len(out) == 2 and out[0] == (0.0, 2, "+I")
    assert math.isnan(out[1][0]) and out[1][1:] == (2, "+I")
    assert rows_of(op.process(batch([(-0.0, 1)], schema))) == [(0.0, 2, "-U"), (0.0, 3, "+U")]
    assert op.metrics["state_rows"] == 2


def test_compound_keys_with_floats_strings_and_nulls_group_as_the_state_compares_them() -> None:
    # A float and a string key column: the batch is grouped by one id per key, which must make
    # -0.0 and 0.0 one key, every NaN one key, and NULL a key in either column.
    schema = pa.schema([("x", pa.float64()), ("s", pa.string()), ("v", pa.int64())])
    op = make_op([A(fn="count_star", arg=None, type=pa.int64()), A(fn="count_distinct", arg=2, type=pa.int64()),
                  A(fn="sum", arg=2, type=pa.int64())], input_schema=schema, keys=(0, 1))
    out = rows_of(op.process(batch([(-0.0, "a", 1), (0.0, "a", 1), (math.nan, None, 2), (float("-nan"), None, 3),
                                    (None, "a", 4), (None, None, 5), (0.0, None, 6), (None, "a", 4)], schema)))
    by_key = {(repr(x), s): rest for x, s, *rest in out}
    assert by_key == {("0.0", "a"): [2, 1, 2, "+I"], ("nan", None): [2, 2, 5, "+I"], ("None", "a"): [2, 1, 8, "+I"],
                      ("None", None): [1, 1, 5, "+I"], ("0.0", None): [1, 1, 6, "+I"]}
    out = rows_of(op.process(batch([(-0.0, "a", 7), (math.nan, None, 2)], schema)))
    assert [r[-1] for r in out] == ["-U", "-U", "+U", "+U"]
    assert sorted((repr(x), s, *rest) for x, s, *rest in out) == [
        ("0.0", "a", 2, 1, 2, "-U"), ("0.0", "a", 3, 2, 9, "+U"), ("nan", None, 2, 2, 5, "-U"),
        ("nan", None, 3, 2, 7, "+U")]
    assert op.metrics["state_rows"] == 5


def test_count_distinct_counts_each_value_once_until_its_last_row_goes() -> None:
    op = make_op([A(fn="count_distinct", arg=V, type=pa.int64()),
                  A(fn="count_distinct", arg=V, type=pa.int64(), filter=F)], updating=True)
    assert rows_of(op.process(batch([("a", 1, True, "+I"), ("a", 1, False, "+I"), ("a", 2, None, "+I"),
                                     ("a", None, True, "+I"), ("b", None, True, "+I")], UPDATING))) == [
        ("a", 2, 1, "+I"), ("b", 0, 0, "+I")]
    # 1 has another row: only the filtered count loses it.
    assert rows_of(op.process(batch([("a", 1, True, "-U")], UPDATING))) == [("a", 2, 1, "-U"), ("a", 2, 0, "+U")]
    assert rows_of(op.process(batch([("a", 1, False, "-D"), ("a", 3, True, "+U")], UPDATING))) == [
        ("a", 2, 0, "-U"), ("a", 2, 1, "+U")]
    # A value that comes back within a batch changes nothing; nor does a row the filters skip.
    assert op.process(batch([("a", 2, None, "-U"), ("a", 2, False, "+U"), ("a", 3, None, "+I")], UPDATING)) == []
    assert rows_of(op.process(batch([("a", 2, False, "-D"), ("a", 3, True, "-D"), ("a", 3, None, "-D"),
                                     ("a", None, True, "-D")], UPDATING))) == [("a", 2, 1, "-D")]
    # Nothing of the key is left behind: it starts again from its next row.
    assert op._distinct[0].pairs == 0
    assert not [e for g in range(MAX_PARALLELISM) for e in op.operator_state.entries(g) if e[0] == "distinct0"]
    assert rows_of(op.process(batch([("a", 2, True, "+I")], UPDATING))) == [("a", 1, 1, "+I")]


def test_count_distinct_of_floats_strings_and_over_no_keys() -> None:
    schema = pa.schema([("x", pa.float64()), ("s", pa.string())])
    op = make_op([A(fn="count_distinct", arg=0, type=pa.int64()), A(fn="count_distinct", arg=1, type=pa.int64()),
                  A(fn="count_star", arg=None, type=pa.int64())], input_schema=schema, keys=())
    # -0.0 is 0.0 and every NaN one value, as for keys; "" is a value, NULL is none.
    out = op.process(batch([(-0.0, "x"), (0.0, ""), (math.nan, None), (float("-nan"), "x"), (None, "y")], schema))
    assert rows_of(out) == [(2, 3, 5, "+I")]
    assert rows_of(op.process(batch([(1.5, "y")], schema))) == [(2, 3, 5, "-U"), (3, 3, 6, "+U")]


def test_the_value_counts_of_a_key_are_in_its_key_group() -> None:
    op = make_op([A(fn="count_distinct", arg=V, type=pa.int64())], keys=(K, F))
    rows = [(k, v, f) for k in "abcdefgh" for v in range(6) for f in (True, None)]
    op.process(batch(rows))
    seen = 0
    for g in range(MAX_PARALLELISM):
        for name, key, _ in op.operator_state.entries(g):
            if name == "distinct0":
                assert key_groups([pa.array([key[0]]), pa.array([key[1]])], MAX_PARALLELISM)[0] == g
                seen += 1
    assert seen == len(rows) == op._distinct[0].pairs


@pytest.mark.parametrize("collision", ["three hashes", "the value's hash"])
def test_pairs_whose_hashes_collide_stay_apart(collision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [(a, fn) for a, fn in RETRACTABLE if a.fn == "count_distinct"]
    batches, live = to_batches(random_steps(seed=3, n_batches=6, size=40), updating=True)
    real_hash = keygroups.extend_hashes

    # Lookups by hash keep finding other pairs: many for one hash, or one of another key. (The
    # pairs' hash extends that of their key by their value; the key groups stay the keys'.)
    def three(key_hashes: np.ndarray, columns: list[pa.Array]) -> np.ndarray:
        return real_hash(key_hashes, columns) % np.uint64(3)

    def value_only(key_hashes: np.ndarray, columns: list[pa.Array]) -> np.ndarray:
        return keygroups.hash_columns(columns)

    monkeypatch.setattr(keygroups, "extend_hashes", three if collision == "three hashes" else value_only)
    op = make_op([a for a, _ in specs], updating=True)
    table: dict[tuple, tuple] = {}
    for b in batches:
        apply_changelog(table, op.process(b), op)
    assert table == model(live, [fn for _, fn in specs])
    assert op._distinct[0].pairs >= 1


def test_a_hash_of_another_pair_is_not_taken_for_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pair hashes as its value alone; the keys keep their own key groups.
    monkeypatch.setattr(keygroups, "extend_hashes", lambda key_hashes, columns: keygroups.hash_columns(columns))
    candidates = [f"key{i}" for i in range(50)]
    first, second = [k for k in candidates if key_groups([pa.array([k])], MAX_PARALLELISM)[0] == 0][:2]
    op = make_op([A(fn="count_distinct", arg=V, type=pa.int64())])
    assert rows_of(op.process(batch([(first, 1, None)]))) == [(first, 1, "+I")]
    # (second, 1) hashes as (first, 1): the lookup finds that row and tells it apart.
    assert rows_of(op.process(batch([(second, 1, None)]))) == [(second, 1, "+I")]
    assert rows_of(op.process(batch([(first, 2, None), (second, 1, None)]))) == [(first, 1, "-U"), (first, 2, "+U")]


def test_unsupported_aggregates_are_refused() -> None:
    with pytest.raises(ValueError, match="group aggregate 2: aggregate 0 .stddev_pop. is not supported"):
        make_op([A(fn="stddev_pop", arg=V, type=pa.float64())])
    with pytest.raises(ValueError, match="needs a scalar argument"):
        make_op([A(fn="count_distinct", arg=0, type=pa.int64())],
                input_schema=pa.schema([("l", pa.list_(pa.int64())), ("k", pa.string())]), keys=(1,))
    for fn in ("min", "max"):
        with pytest.raises(ValueError, match=f"{fn.upper()} cannot be retracted"):
            make_op([A(fn=fn, arg=V, type=pa.int64())], updating=True)
    with pytest.raises(ValueError, match="FILTER column 1 must be a BOOLEAN"):
        make_op([A(fn="count_star", arg=None, type=pa.int64(), filter=V)])
    with pytest.raises(ValueError, match="needs a numeric argument"):
        make_op([A(fn="sum", arg=K, type=pa.int64())])
    node = make_node([A(fn="count_star", arg=None, type=pa.int64())])
    wrong = plan.GroupAggregate(id=2, input=1, keys=(K,), aggs=node.aggs, schema=node.schema.remove(2))
    with pytest.raises(ValueError, match="the output schema must be"):
        GroupAggregateOperator(wrong, context(), input_schema=INPUT)


def test_empty_batches_emit_nothing() -> None:
    op = make_op([A(fn="count_star", arg=None, type=pa.int64())], updating=True)
    assert op.process(batch([], UPDATING)) == []
    assert op.metrics["state_rows"] == 0 and op.metrics["state_bytes"] == 0


def test_state_metrics_follow_the_keys_held() -> None:
    op = make_op([A(fn="sum", arg=V, type=pa.int64())], updating=True)
    op.process(batch([(k, 1, None, "+I") for k in "abcd"], UPDATING))
    assert op.metrics["state_rows"] == 4 and op.metrics["state_bytes"] > 0
    op.process(batch([("a", 1, None, "-D"), ("b", 1, None, "-D"), ("e", 1, None, "+I")], UPDATING))
    assert op.metrics["state_rows"] == 3


# ---------------------------------------------------------------- checkpoints


AGGS = [a for a, _ in RETRACTABLE]


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("max_parallelism", [MAX_PARALLELISM, 32])
def test_snapshot_restore_and_split_by_key_group(backend: str, max_parallelism: int, tmp_path: Path) -> None:
    # The second part retracts rows of the first: draw both together, then cut.
    batches, _ = to_batches(random_steps(seed=5, n_batches=6, size=40), updating=True)
    first, second = batches[:3], batches[3:]

    def make(directory: Path) -> StateBackend:
        return BACKENDS[backend](directory, max_parallelism)

    new_op = functools.partial(make_op, AGGS, updating=True, max_parallelism=max_parallelism)

    whole = new_op()
    for b in first:
        whole.process(b)
    expected = [rows_of(whole.process(b)) for b in second]
    assert any(expected)

    op = new_op(backend=make(tmp_path / "a"))
    for b in first:
        op.process(b)
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    assert op.operator_state.committed_checkpoint == 1
    held = op.metrics["state_rows"]
    assert [rows_of(op.process(b)) for b in second] == expected  # the snapshot changed nothing
    op.close()

    restored = new_op(backend=make(tmp_path / "b"))
    restored.restore(files, meta)
    assert restored.metrics["state_rows"] == held
    assert [rows_of(restored.process(b)) for b in second] == expected
    assert restored.metrics["state_rows"] == whole.metrics["state_rows"]

    groups = set(range(max_parallelism))
    half = {g for g in groups if g % 3 == 0} | {7}
    outputs: list[tuple] = []
    held_by_tasks = 0
    for i, part in enumerate((half, groups - half)):  # two tasks, each with half of the key groups
        task = new_op(backend=make(tmp_path / f"task{i}"))
        task.restore(files, meta, key_groups=part)
        held_by_tasks += task.metrics["state_rows"]
        for b in second:
            mine = b.filter(pa.array(np.isin(key_groups([b.column(K)], max_parallelism), list(part))))
            outputs += rows_of(task.process(mine))
        task.close()
    assert held_by_tasks == held
    assert sorted(outputs, key=repr) == sorted((r for rows in expected for r in rows), key=repr)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_restored_operator_continues_the_changelog(backend: str, tmp_path: Path) -> None:
    """Snapshots at several points, each restored into a fresh operator that finishes the run:
    the changelog of the first part and of the restored rest ends at the model."""
    batches, live = to_batches(random_steps(seed=9, n_batches=5, size=30, keys="abc"), updating=True)
    expected = model(live, [fn for _, fn in RETRACTABLE])
    for cut in range(1, len(batches)):
        op = make_op(AGGS, updating=True, backend=BACKENDS[backend](tmp_path / f"a{cut}"))
        table: dict[tuple, tuple] = {}
        for b in batches[:cut]:
            apply_changelog(table, op.process(b), op)
        snap = tmp_path / f"snap{cut}"
        snap.mkdir()
        files, meta = op.snapshot(cut, snap)
        op.close()
        restored = make_op(AGGS, updating=True, backend=BACKENDS[backend](tmp_path / f"b{cut}"))
        restored.restore(files, meta)
        for b in batches[cut:]:
            apply_changelog(table, restored.process(b), restored)
        assert table == expected
        restored.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_snapshot_of_other_aggregates_is_refused(backend: str, tmp_path: Path) -> None:
    op = make_op(AGGS, updating=True, backend=BACKENDS[backend](tmp_path / "a"))
    op.process(batch([("a", 1, True, "+I")], UPDATING))
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    other = make_op(AGGS[:-1], updating=True, backend=BACKENDS[backend](tmp_path / "b"))
    assert other.descriptor.signature() != op.descriptor.signature()
    with pytest.raises(IncompatibleState):
        other.restore(files, meta)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_snapshot_of_other_distinct_counts_is_refused(backend: str, tmp_path: Path) -> None:
    # The same accumulators (two distinct counts), but the value counts of other columns.
    mine = [A(fn="count_distinct", arg=V, type=pa.int64()), A(fn="count_distinct", arg=F, type=pa.int64())]
    theirs = [A(fn="count_distinct", arg=V, type=pa.int64()), A(fn="count_distinct", arg=V, type=pa.int64(), filter=F)]
    op = make_op(mine, backend=BACKENDS[backend](tmp_path / "a"))
    op.process(batch([("a", 1, True)]))
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    other = make_op(theirs, backend=BACKENDS[backend](tmp_path / "b"))
    assert other.descriptor.signature() == op.descriptor.signature()
    with pytest.raises(IncompatibleState):
        other.restore(files, meta)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_empty_state_snapshot_round_trips(backend: str, tmp_path: Path) -> None:
    op = make_op(AGGS, updating=True, backend=BACKENDS[backend](tmp_path / "a"))
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    other = make_op(AGGS, updating=True, backend=BACKENDS[backend](tmp_path / "b"))
    other.restore(files, meta)
    assert other.metrics["state_rows"] == 0
    assert rows_of(other.process(batch([("a", 1, True, "+I")], UPDATING)))[0][-1] == "+I"


def _ttl_operator(fn: str, now: list[int]):
    """A GROUP BY k with ``fn(v)`` and a TTL of one second on the clock ``now[0]``, and a function
    that sends it (k, v) rows and returns its changes as tuples."""
    import pyarrow as pa

    from clink.runtime import plan as P
    from clink.runtime.context import RuntimeContext, TaskContext
    from clink.runtime.operators.group import GroupAggregateOperator

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    node = P.GroupAggregate(id=2, input=1, keys=(0,), aggs=(P.AggSpec(fn=fn, arg=1, type=pa.int64()),),
                            schema=pa.schema([("k", pa.int64()), ("a", pa.int64()), (P.ROWKIND_COLUMN, pa.string())]))
    op = GroupAggregateOperator(node, TaskContext(runtime=RuntimeContext(clock=lambda: now[0]), node_id=2),
                                input_schema=schema, ttl_ms=1000)

    def rows(pairs):
        out = op.process(pa.RecordBatch.from_arrays([pa.array([k for k, _ in pairs], pa.int64()),
                                                     pa.array([v for _, v in pairs], pa.int64())], schema=schema))
        return [tuple(r.values()) for b in out for r in b.to_pylist()]

    return op, rows


def test_state_ttl_forgets_keys_not_updated_for_that_long() -> None:
    """A key idle for longer than the TTL is forgotten: its next row starts it afresh (+I), and
    a sweep deletes idle keys that get no row at all."""
    now = [0]
    op, rows = _ttl_operator("sum", now)

    assert rows([(1, 10), (2, 20)]) == [(1, 10, "+I"), (2, 20, "+I")]
    now[0] = 800
    assert rows([(1, 5)]) == [(1, 10, "-U"), (1, 15, "+U")]  # key 1 was updated 800 ms ago: kept
    now[0] = 1500  # key 2 idle for 1500 ms, key 1 for 700 ms
    assert rows([(2, 1), (1, 1)]) == [(1, 15, "-U"), (1, 16, "+U"), (2, 1, "+I")]
    assert op.metrics["state_rows"] == 2
    now[0] = 5000  # both idle: the sweep (at most every half TTL) deletes them
    assert rows([(3, 7)]) == [(3, 7, "+I")]
    assert op.metrics["state_rows"] == 1 and len(list(op.operator_state.entries(
        next(g for g in range(128) if list(op.operator_state.entries(g)))))) == 1


def test_state_ttl_forgets_the_distinct_values_of_an_expired_key() -> None:
    """COUNT(DISTINCT) under a TTL: a key that expires loses its value counts with its
    accumulators, so when it comes back its values count afresh; other keys keep theirs."""
    now = [0]
    op, rows = _ttl_operator("count_distinct", now)

    assert rows([(1, 10), (1, 11), (2, 20)]) == [(1, 2, "+I"), (2, 1, "+I")]
    now[0] = 800
    assert rows([(2, 21)]) == [(2, 1, "-U"), (2, 2, "+U")]
    now[0] = 1500  # key 1 idle for 1500 ms: forgotten with its values 10 and 11
    assert rows([(1, 10), (2, 20)]) == [(1, 1, "+I")]  # key 2 still knows 20
    now[0] = 1600
    assert rows([(1, 11), (1, 12)]) == [(1, 1, "-U"), (1, 3, "+U")]
    now[0] = 10_000  # both idle: a sweep drops every value count
    assert rows([(3, 1)]) == [(3, 1, "+I")]
    assert op._distinct[0].pairs == 1
    assert sum(e[0] == "distinct0" for g in range(op._max_parallelism) for e in op.operator_state.entries(g)) == 1


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.none() | st.sampled_from(["a", "b", "c"]), st.none() | st.integers(-3, 3),
                               st.none() | st.integers(0, 10**6)), min_size=1, max_size=200),
       width=st.sampled_from([2, 3]))
def test_dense_ids_are_equal_exactly_where_the_key_columns_are(rows: list[tuple], width: int) -> None:
    """``_dense_ids`` over two or three columns: few combinations (numbered through a table of
    them) or many (the third column, encoded again), NULLs equal to NULLs; ids run 0 .. m-1 and
    each id's row holds that id."""
    columns = [pa.array([r[j] for r in rows]) for j in range(width)]
    ids, row_of = _dense_ids(columns, len(rows))
    keys = [r[:width] for r in rows]
    assert sorted(set(ids.tolist())) == list(range(len(set(keys))))
    for i, key in enumerate(keys):
        assert keys[row_of[ids[i]]] == key
        assert ids[i] == ids[keys.index(key)]


MERGE_INPUT = pa.schema([("k", pa.string()), ("x", pa.float64()), ("s", pa.string()), ("t", pa.timestamp("ms")),
                         ("i", pa.int32()), ("f", pa.bool_())])
_MERGE_VALUES = st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.none() | st.sampled_from([math.nan, -0.0, 0.0, 1.5, -2.0, math.inf]),
                          st.none() | st.sampled_from(["", "a", "ab", "b"]),
                          st.none() | st.integers(0, 5).map(lambda n: dt.datetime(2026, 1, 1) + dt.timedelta(seconds=n)),
                          st.none() | st.integers(-(2**31), 2**31 - 1),
                          st.none() | st.booleans())


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.lists(_MERGE_VALUES, min_size=1, max_size=8), min_size=1, max_size=5))
def test_merging_element_wise_gives_what_a_group_by_gives(batches: list[list[tuple]]) -> None:
    """The accumulators merged position by position (sums added, MIN and MAX element-wise, NULL
    and NaN skipped) equal a group_by's over the old and new values: the same changelog for
    floats with NaN, signed zeros and infinities, strings, timestamps, int32 sums, and filters."""
    aggs = [A(fn="max", arg=1, type=pa.float64()), A(fn="min", arg=1, type=pa.float64()),
            A(fn="max", arg=2, type=pa.string()), A(fn="min", arg=3, type=pa.timestamp("ms")),
            A(fn="sum", arg=4, type=pa.int64()), A(fn="sum", arg=1, type=pa.float64(), filter=5),
            A(fn="count", arg=2, type=pa.int64()), A(fn="avg", arg=4, type=pa.int64()),
            A(fn="count_star", arg=None, type=pa.int64(), filter=5)]
    elementwise, grouped = (make_op(aggs, input_schema=MERGE_INPUT) for _ in range(2))
    assert elementwise._elementwise
    grouped._elementwise = False
    for rows in batches:
        a = rows_of(elementwise.process(batch(rows, MERGE_INPUT)))
        b = rows_of(grouped.process(batch(rows, MERGE_INPUT)))
        assert repr(a) == repr(b)  # repr: NaN equals NaN, -0.0 differs from 0.0


@pytest.mark.parametrize(("fn", "t", "values"), [
    ("sum", pa.decimal128(10, 2), [Decimal("1.50"), None, Decimal("-2.25")]),
    ("max", pa.bool_(), [False, None, True]),
    ("min", pa.bool_(), [True, None, False]),
    ("max", pa.timestamp("ms", tz="UTC"), [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), None,
                                          dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)]),
])
def test_a_field_without_an_element_wise_kernel_is_merged_by_a_group_by(fn: str, t: pa.DataType,
                                                                       values: list) -> None:
    """DECIMAL sums, MIN/MAX of BOOLEAN and of zoned timestamps: Arrow has no element-wise
    kernel for them, and their key merges its accumulators through a group_by, as before."""
    schema = pa.schema([("k", pa.string()), ("v", t)])
    op = make_op([A(fn=fn, arg=1, type=t if fn != "sum" else pa.decimal128(38, 2))], input_schema=schema)
    assert not op._elementwise
    results = [rows_of(op.process(batch([("a", v)], schema))) for v in values]
    expected = {"sum": [Decimal("1.50"), Decimal("1.50"), Decimal("-0.75")],
                "max": [values[0], values[0], values[2]], "min": [values[0], values[0], values[2]]}[fn]
    assert [r[-1][1] for r in results if r] == [expected[0], expected[2]]
