"""Non-windowed GROUP BY: an updating aggregation over every row seen so far, emitted as a changelog.

State is one value state, ``groups``: per key, a struct of accumulators.

- ``rows``: the key's net row count (rows added minus rows retracted, whatever the aggregate
  filters say). It decides the key's life: a key whose count reaches 0 is deleted.
- per aggregate ``i``, one or two fields: ``a<i>_n`` the net count of the rows it counts
  (COUNT(*) with a FILTER, COUNT, and the non-NULL arguments of SUM and AVG); ``a<i>_s`` the
  net sum of the arguments (SUM, AVG; int64, float64 or the decimal that Arrow's sum gives);
  ``a<i>_x`` the smallest or largest argument (MIN, MAX); ``a<i>_d`` the number of distinct
  values (COUNT(DISTINCT)). COUNT(*) without a filter reads ``rows`` and keeps nothing of its own.

COUNT(DISTINCT x) also needs, per key and value, how many of the key's net rows it counts hold
that value, so that a retraction knows whether the value's last row went. These counts live in
one more value state per argument column, ``distinct<j>``, shared by the COUNT(DISTINCT)
aggregates over that column (with their different FILTERs): its key is the group key's columns
and ``value``, its value one int64 ``a<i>`` per aggregate. It is filed under the key group of
the group key alone (``ValueStateDescriptor.group_fields``), so a restore of some key groups
keeps a key's values with its accumulators. The batch's rows are added to it in one call,
``ValueState.add_counts``, which reports each pair's counts before and after (the memory backend
finds each pair once in its hash index and adds in place), so the work per batch grows with the
batch, not with the state; a pair goes when its counts are all back to 0.

Counts and sums can be retracted (a ``-U`` / ``-D`` input row adds its negation), MIN and MAX
cannot: an extreme that is retracted leaves no record of the next one. So MIN / MAX over an
updating input is refused. SUM and AVG are NULL while their count is 0, COUNT is then 0.

A batch is processed in four vectorized steps, none looping over rows or keys in Python:

1. every row becomes signed contributions, and one Arrow ``group_by`` over the key columns sums
   them into one delta row per distinct key of the batch. With COUNT(DISTINCT), the key is
   first replaced by a dense int64 id per row (each column dictionary-encoded, the codes
   combined): the ``group_by`` runs over the id, the rows' (key, value) pairs are added to the
   value counts with the key columns passed once per id (``PrefixedKeys``), and each key's
   distinct count changes by +1 for each value whose count leaves 0 and -1 for each that
   returns to 0, summed per id with ``numpy.bincount``;
2. ``get_many`` reads those keys' accumulators; a second ``group_by``, over the position of
   each key, merges old and delta (Arrow's kernels add decimals without overflowing precision);
3. the results before and after are computed for all keys at once and compared;
4. ``put_many`` writes the new accumulators (NULL, which deletes, where the count is 0) and one
   output batch is assembled with ``take``.

Emission per key the batch touched: a new key gives ``+I`` with its result; a key whose count
reaches 0 gives ``-D`` with its previous result; otherwise, if the result changed, ``-U`` with
the previous result and ``+U`` with the new one, and nothing if it did not (a MAX not beaten).
A key that appears and disappears within one batch gives nothing. The output batch holds every
``-D`` row, then every ``-U``, then every ``+U``, then every ``+I``, so each key's ``-U``
precedes its ``+U``.

Float keys are normalized before grouping (``-0.0`` to ``0.0``, every NaN to one NaN) because
the state contract treats them as equal keys and Arrow's ``group_by`` does not; so are the
arguments of COUNT(DISTINCT), which count them as one value each.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import kernels as K
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import max_parallelism, open_state, updating_input
from clink.runtime.plan import (
    APPEND_ONLY,
    DELETE,
    INSERT,
    ROWKIND_COLUMN,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    ChangelogMode,
)
from clink.runtime.state.backend import (
    Counted,
    KeyColumns,
    OperatorState,
    PrefixedKeys,
    StateBackend,
    ValueState,
    ValueStateDescriptor,
)
from clink.runtime.udaf import AggregateRunner, AggregateUdf, resolve

if TYPE_CHECKING:
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

__all__ = ["GroupAggregateOperator"]

_FUNCTIONS = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max", "udaf")
_ROWS = "rows"
_POSITION = "_p"
#: The accumulator field that holds a key's last update time (with a state TTL).
_TOUCHED = "touched"
#: Sums never come out NULL (0 over no value): a missing sum and a sum of nothing then agree.
_SUM_OPTIONS = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)
#: Output row kinds, in the order the output batch holds them.
_KINDS = pa.array([DELETE, UPDATE_BEFORE, UPDATE_AFTER, INSERT], pa.string())
_RETRACTING = pa.array([UPDATE_BEFORE, DELETE], pa.string())
#: Typed, because an untyped Python literal given to a kernel costs a failed import each call.
_ZERO = pa.scalar(0, pa.int64())
_ONE = pa.scalar(1, pa.int64())
#: Bytes counted per value of a variable-width type when no written batch has been measured yet.
_VARIABLE_BYTES = 16
#: The field of a COUNT(DISTINCT) state's key that holds the argument's value.
_VALUE = "value"
#: The column of a batch's dense key id, grouped by instead of the key columns (see ``_deltas``).
_GROUP = "_g"


class GroupAggregateOperator(OperatorBase):
    """Run one ``plan.GroupAggregate`` node.

    ``process`` takes an input batch and returns the changelog it causes (batches of
    ``node.schema``, whose last column is ``ROWKIND_COLUMN``). Watermarks mean nothing here.
    ``metrics`` (the task context's metrics dict) holds ``state_rows``, the number of keys held,
    and ``state_bytes``, an estimate of their state's size as Arrow data (with the value counts
    of COUNT(DISTINCT)). ``late_rows`` is always empty:
    no row is ever late; it exists so the executor can treat this like a window operator.

    Its keyed state is one value state, ``groups``, and one table state ``distinct<j>`` per
    argument column of COUNT(DISTINCT) (see the module docstring), opened from ``backend``
    (memory if not given) as operator ``operator_id``; ``descriptor`` is that of ``groups``,
    ``descriptors`` all of them. ``input_schema`` is the schema of the input batches, which ends
    with ``ROWKIND_COLUMN`` when the input is updating.
    """

    def __init__(self, node: plan.GroupAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None,
                 ttl_ms: int | None = None, input_mode: ChangelogMode = APPEND_ONLY) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"group aggregate {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        self._updating = updating_input(input_mode, input_schema, self._where)
        self._check_schema(input_schema)
        self._keys = [f"_k{j}" for j in range(max(len(node.keys), 1))]
        self._plan_aggregates(input_schema)
        # With COUNT(DISTINCT), each batch's keys get a dense id (see _deltas): the value counts
        # are kept per key and value and their changes summed per key by id, and the id serves
        # the batch's group_by too. Without it, computing the id costs more than it saves
        # (measured on Nexmark q17 and q4), so the key columns are grouped as they are.
        self._by_id = bool(self._distinct_args)
        self._group = [_GROUP] if self._by_id else self._keys
        #: ``table.exec.state.ttl``: a key not updated for this long is forgotten (its next row
        #: starts it afresh, with +I). Each key's accumulators carry the time of their last update.
        self.ttl_ms = ttl_ms
        if ttl_ms is not None:
            self._fields.append(pa.field(_TOUCHED, pa.int64()))
            self._aggregations.append((_TOUCHED, "max"))
            self._next_sweep = int(ctx.runtime.clock()) + ttl_ms
        self._plan_merge()

        if node.keys:
            key_schema = pa.schema([(f"k{j}", input_schema.field(k).type) for j, k in enumerate(node.keys)])
        else:  # a global aggregate: one key, the same for every row
            key_schema = pa.schema([("all", pa.bool_())])
        # Python aggregate functions' accumulators come after the fields group_by merges.
        value_type = pa.struct(self._fields + self._udaf_fields)
        self.operator_id = operator_id or f"group-{node.id}"
        self.descriptor = ValueStateDescriptor("groups", key_schema, value_type)
        self._distinct = [_DistinctCounts(f"distinct{j}", arg, aggs, self._keys, key_schema, input_schema)
                          for j, (arg, aggs) in enumerate(self._distinct_args.items())]
        self.descriptors = [self.descriptor, *(d.descriptor for d in self._distinct)]
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self._groups = self.operator_state.value_state("groups")
        for d in self._distinct:
            d.state = self.operator_state.value_state(d.descriptor.name)
        self._num_keys = 0
        self._entry_bytes = float(sum(_type_bytes(t) for t in [*key_schema.types, value_type]))

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Add (or retract) ``batch``'s rows; return the changes to the results, as at most one
        batch (none when no result changed)."""
        out: list[pa.RecordBatch] = []
        if batch.num_rows:
            if self.ttl_ms is not None and self._distinct and self._touches_expired(batch):
                # An expired key's value counts must go before the batch counts its values again.
                self._sweep(int(self.ctx.runtime.clock()))
            keys, delta = self._deltas(batch)
            old = self._groups.get_many(keys)
            if self.ttl_ms is not None:
                now = int(self.ctx.runtime.clock())
                old = self._unexpired(old, now)
            new = self._merge(old, delta)
            udafs = self._run_udafs(batch, keys, old) if self._udafs else None
            for _, _, names, (_, after) in udafs or ():
                new.update(zip(names, after, strict=True))
            out = self._apply(keys, old, new, udafs)
            if self.ttl_ms is not None and now >= self._next_sweep:
                self._sweep(now)
        self._update_state_metrics()
        return out

    def _unexpired(self, old: pa.StructArray, now: int) -> pa.StructArray:
        """``old`` with the keys not updated within the TTL read as absent (their state is
        overwritten when the batch stores them)."""
        if old.null_count == len(old):
            return old
        touched = pc.struct_field(old, [len(self._fields) - 1])
        expired = pc.fill_null(pc.less(touched, now - self.ttl_ms), False)
        count = int(pc.sum(expired).as_py() or 0)
        if count == 0:
            return old
        self._num_keys -= count
        return pc.if_else(expired, pa.scalar(None, old.type), old)

    def _touches_expired(self, batch: pa.RecordBatch) -> bool:
        """Whether a key of ``batch`` is held but was not updated within the TTL."""
        if self.node.keys:
            keys = [_normalize_key(batch.column(k)) for k in self.node.keys]
        else:
            keys = [pa.array([True])]
        old = self._groups.get_many(keys)
        if old.null_count == len(old):
            return False
        touched = pc.struct_field(old, [len(self._fields) - 1])
        limit = int(self.ctx.runtime.clock()) - self.ttl_ms
        return bool(pc.any(pc.fill_null(pc.less(touched, limit), False)).as_py())

    def _sweep(self, now: int) -> None:
        """Delete every key not updated within the TTL, with its COUNT(DISTINCT) value counts (a
        pass over the state, at most once per half TTL of processing time, so its cost is spread
        over the rows in between — or when a batch meets an expired key holding value counts)."""
        limit = now - self.ttl_ms
        names = {d.descriptor.name: d for d in self._distinct}
        for group in range(self._max_parallelism):
            entries = list(self.operator_state.entries(group))
            expired = [key for name, key, value in entries
                       if name == "groups" and value is not None and value.get(_TOUCHED, limit) < limit]
            if not expired:
                continue
            columns = list(zip(*expired, strict=True))
            key_arrays = [pa.array(c, f.type) for c, f in zip(columns, self.descriptor.key_schema, strict=True)]
            self._groups.put_many(key_arrays, pa.nulls(len(expired), self.descriptor.value_type))
            self._num_keys -= len(expired)
            if names:
                gone = set(expired)
                held: dict[str, list[tuple]] = {name: [] for name in names}
                for name, key, _ in entries:
                    if name in names and key[:-1] in gone:
                        held[name].append(key)
                for name, pairs in held.items():
                    if pairs:
                        names[name].forget(pairs)
        self._next_sweep = now + max(self.ttl_ms // 2, 1)

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, Any]]:
        """Commit the keyed state as of checkpoint ``checkpoint_id`` and write it to files in
        ``directory``; return them and the operator's own small state (the number of keys, and
        of (key, value) pairs per COUNT(DISTINCT) argument), which the caller stores with the
        checkpoint."""
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        self._update_state_metrics()
        return files, {"keys": self._num_keys, "pairs": [d.pairs for d in self._distinct]}

    def restore(self, files: list[Path], meta: dict[str, Any], *,
                key_groups: Collection[int] | None = None) -> None:
        """Continue from what ``snapshot`` wrote (the snapshots of several tasks may be given);
        only ``key_groups``, if given: how a task of a rescaled job takes its share."""
        self.operator_state.restore(files, key_groups=key_groups)
        # One snapshot: the pieces of one chain (sqlite), or one file per state (memory).
        one = getattr(self.operator_state, "restored_one_chain", None)
        if one is None:
            one = len(files) == len(self.descriptors)
        pairs = meta.get("pairs")
        if (key_groups is None and one and "keys" in meta and isinstance(pairs, list)
                and len(pairs) == len(self._distinct)):
            self._num_keys = int(meta["keys"])
            for d, n in zip(self._distinct, pairs, strict=True):
                d.pairs = int(n)
        else:
            # The counts in ``meta`` are those of one whole snapshot: count what was kept instead.
            groups = range(self._max_parallelism) if key_groups is None else sorted(set(key_groups))
            held = collections.Counter(name for g in groups for name, _, _ in self.operator_state.entries(g))
            self._num_keys = held["groups"]
            for d in self._distinct:
                d.pairs = held[d.descriptor.name]
        self._update_state_metrics()

    def close(self) -> None:
        """Release the state (a durable backend keeps what was last committed)."""
        self.operator_state.close()

    # -- set-up ----------------------------------------------------------------------------------

    def _check_schema(self, input_schema: pa.Schema) -> None:
        node = self.node
        width = len(input_schema) - self._updating
        for k in node.keys:
            if not 0 <= k < width:
                raise ValueError(f"{self._where}: key column {k} is not an input column (the input has {width})")
        expected = len(node.keys) + len(node.aggs) + 1
        schema = node.schema
        if len(schema) != expected or schema.names[-1] != ROWKIND_COLUMN or schema.types[-1] != pa.string():
            raise ValueError(f"{self._where}: the output schema must be the {len(node.keys)} key(s), the "
                             f"{len(node.aggs)} aggregate(s) and {ROWKIND_COLUMN!r} (string); got <{schema}>")

    def _plan_aggregates(self, input_schema: pa.Schema) -> None:
        """Work out each aggregate's accumulator fields (``_fields``), the group_by
        aggregations that sum contributions into them (``_aggregations``), and the
        COUNT(DISTINCT) aggregates by argument column (``_distinct_args``: their indices)."""
        self._fields: list[pa.Field] = [pa.field(_ROWS, pa.int64())]
        self._aggregations: list[tuple] = [(_ROWS, "sum")]
        self._distinct_args: dict[int, list[int]] = {}
        self._distinct_fields: list[str] = []  # the a<i>_d fields, which the value counts change
        #: Python aggregate functions (``udaf``): (aggregate index, runner, its state field names).
        self._udafs: list[tuple[int, AggregateRunner, list[str]]] = []
        self._udaf_fields: list[pa.Field] = []
        width = len(input_schema) - self._updating
        for i, agg in enumerate(self.node.aggs):
            what = f"{self._where}: aggregate {i} ({agg.fn})"
            if agg.fn not in _FUNCTIONS:
                raise ValueError(f"{what} is not supported without a window; expected one of {', '.join(_FUNCTIONS)}")
            if agg.fn == "udaf":
                self._plan_udaf(i, agg, what, width)
                continue
            if agg.fn != "count_star" and (agg.arg is None or not 0 <= agg.arg < width):
                raise ValueError(f"{what} needs an argument column, got {agg.arg!r}")
            if agg.fn in ("min", "max") and self._updating:
                raise ValueError(f"{what}: {agg.fn.upper()} cannot be retracted, and the input is an updating "
                                 f"stream (its last column is {ROWKIND_COLUMN!r})")
            if agg.filter is not None and (not 0 <= agg.filter < width
                                           or input_schema.field(agg.filter).type != pa.bool_()):
                raise ValueError(f"{what}: the FILTER column {agg.filter!r} must be a BOOLEAN input column")
            n, s, x, d = (f"a{i}_{p}" for p in "nsxd")
            if agg.fn == "count_star" and agg.filter is None:
                continue  # the row count is the result
            if agg.fn == "count_distinct":
                if pa.types.is_nested(input_schema.field(agg.arg).type):
                    raise ValueError(f"{what} needs a scalar argument, got {input_schema.field(agg.arg).type}")
                self._fields.append(pa.field(d, pa.int64()))
                self._aggregations.append((d, "sum"))
                self._distinct_fields.append(d)
                self._distinct_args.setdefault(agg.arg, []).append(i)
                continue
            if agg.fn in ("count_star", "count", "sum", "avg"):
                self._fields.append(pa.field(n, pa.int64()))
                self._aggregations.append((n, "sum"))
            if agg.fn in ("sum", "avg"):
                self._fields.append(pa.field(s, self._sum_type(what, input_schema.field(agg.arg).type)))
                self._aggregations.append((s, "sum", _SUM_OPTIONS))
            elif agg.fn in ("min", "max"):
                self._fields.append(pa.field(x, input_schema.field(agg.arg).type))
                self._aggregations.append((x, agg.fn))

    def _plan_merge(self) -> None:
        """Whether ``_merge`` combines each field element-wise: every sum over integers or floats,
        every MIN and MAX over a type Arrow's element-wise kernels take (numbers, strings,
        dates, times, timestamps without a zone; not booleans or zoned timestamps, asked of the
        kernel itself), and the aggregation of each field (``_merged_by``)."""
        self._merged_by = {a[0]: a[1] for a in self._aggregations}

        def elementwise(f: pa.Field) -> bool:
            fn = self._merged_by[f.name]
            if fn == "sum":
                return pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
            if fn not in ("min", "max"):
                return False
            try:
                pc.max_element_wise(pa.nulls(1, f.type), pa.nulls(1, f.type), skip_nulls=True)
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return False
            return True

        self._elementwise = all(elementwise(f) for f in self._fields)

    def _plan_udaf(self, i: int, agg: plan.AggSpec, what: str, width: int) -> None:
        f = resolve(agg.function, self.ctx)
        if not isinstance(f, AggregateUdf):
            raise ValueError(f"{what}: {agg.function!r} is not a Python aggregate function (clink.udaf)")
        if any(not 0 <= a < width for a in agg.args) or agg.accumulator is None:
            raise ValueError(f"{what}: needs argument columns of the input and an accumulator type")
        if self._updating and not f.retractable:
            raise ValueError(f"{what}: aggregate function {f.name} has no retract method, and the input is an "
                             f"updating stream (its last column is {ROWKIND_COLUMN!r})")
        runner = AggregateRunner(f, agg.accumulator, agg.type, where=getattr(self.node, "span", None) or None)
        names = [f"a{i}_u_{name}" for name in runner.names]
        self._udaf_fields += [pa.field(n, agg.accumulator.field(j).type) for j, n in enumerate(names)]
        self._udafs.append((i, runner, names))

    @staticmethod
    def _sum_type(what: str, type_: pa.DataType) -> pa.DataType:
        # Integers sum in int64 even when unsigned: a retraction subtracts.
        if pa.types.is_integer(type_):
            return pa.int64()
        if pa.types.is_floating(type_):
            return pa.float64()
        if pa.types.is_decimal(type_):
            empty = pa.table({"v": pa.array([], type_)})
            return empty.group_by([], use_threads=False).aggregate([("v", "sum")]).schema.field(0).type
        raise ValueError(f"{what} needs a numeric argument, got {type_}")

    # -- process -----------------------------------------------------------------------------

    def _deltas(self, batch: pa.RecordBatch) -> tuple[list[pa.Array], dict[str, pa.Array]]:
        """The distinct keys of ``batch`` (one array per key column) and, per accumulator field,
        the net change the batch makes to each key.

        Where ``_by_id`` says so (with COUNT(DISTINCT)), the rows are summed per dense id of
        their key (equal ids exactly where the normalized key columns are equal, NULL equal to
        NULL), and the key columns are taken back from one row per id."""
        n = batch.num_rows
        retract = None
        if self._updating:
            kinds = pc.is_in(batch.column(batch.num_columns - 1), value_set=_RETRACTING)
            retract = pc.fill_null(kinds, False).to_numpy(zero_copy_only=False)
            if not retract.any():
                retract = None
        sign = np.ones(n, np.int64) if retract is None else np.where(retract, -1, 1).astype(np.int64)
        if self.node.keys:
            key_cols = [_normalize_key(batch.column(k)) for k in self.node.keys]
        else:
            key_cols = [pa.array(np.ones(n, bool))]
        row_of = None
        if self._by_id:
            ids, row_of = _dense_ids(key_cols, n)
            cols: dict[str, pa.Array] = {_GROUP: pa.array(ids)}
        else:
            cols = dict(zip(self._keys, key_cols, strict=True))
        cols[_ROWS] = pa.array(sign)
        if self.ttl_ms is not None:
            cols[_TOUCHED] = pa.array(np.full(n, int(self.ctx.runtime.clock()), np.int64))
        negate = None if retract is None else pa.array(retract)
        for i, agg in enumerate(self.node.aggs):
            n_name, s_name, x_name = (f"a{i}_{p}" for p in "nsx")
            if (agg.fn == "count_star" and agg.filter is None) or agg.fn == "udaf":
                continue  # the row count is the result; Python aggregates run in _run_udafs
            if agg.fn == "count_distinct":
                continue  # the changes come from the value counts, below
            keep = None if agg.filter is None else pc.fill_null(batch.column(agg.filter), False)
            arg = None if agg.arg is None else batch.column(agg.arg)
            if agg.fn in ("min", "max"):
                assert arg is not None
                cols[x_name] = arg if keep is None else pc.if_else(keep, arg, pa.scalar(None, arg.type))
                continue
            counted = np.ones(n, bool) if keep is None else keep.to_numpy(zero_copy_only=False)
            if agg.fn != "count_star":
                assert arg is not None
                counted = counted & pc.is_valid(arg).to_numpy(zero_copy_only=False)
            cols[n_name] = pa.array(np.where(counted, sign, 0))
            if agg.fn in ("sum", "avg"):
                assert arg is not None
                sum_type = self._field_type(s_name)
                values = arg if arg.type == sum_type else pc.cast(arg, sum_type)
                if negate is not None:
                    values = pc.if_else(negate, pc.negate(values), values)
                if keep is not None:  # NULL arguments are skipped by the sum anyway
                    values = pc.if_else(keep, values, pa.scalar(None, sum_type))
                cols[s_name] = values
        aggregations = [a for a in self._aggregations if a[0] not in self._distinct_fields]
        grouped = pa.table(cols).group_by(self._group, use_threads=False).aggregate(aggregations)
        delta = {name: _array(grouped[f"{name}_{fn}"]) for name, fn, *_ in aggregations}
        if row_of is None:
            return [_array(grouped[k]) for k in self._keys], delta
        # The key columns' values per id; the value counts are keyed by them and the value.
        groups = [pc.take(c, pa.array(row_of)) for c in key_cols]
        order = pa.array(_array(grouped[_GROUP]).to_numpy())
        memo: dict[Any, Any] = {}  # what the states work out from ``groups`` alone, done once
        for d in self._distinct:
            for name, change in self._count_distinct(d, batch, sign, ids, groups, memo).items():
                delta[name] = pc.take(pa.array(change), order)
        return [pc.take(g, order) for g in groups], delta

    def _count_distinct(self, d: _DistinctCounts, batch: pa.RecordBatch, sign: np.ndarray, ids: np.ndarray,
                        groups: list[pa.Array], memo: dict[Any, Any]) -> dict[str, np.ndarray]:
        """Add the batch's (key, value) pairs to the counts of ``d``; return, per aggregate of
        ``d``, the change to each key's distinct count by key id: +1 for each value whose count
        leaves 0, -1 for each that returns to 0. ``ids`` are the rows' key ids and ``groups``
        the key columns' values per id."""
        value = _normalize_key(batch.column(d.arg))
        valid = pc.is_valid(value).to_numpy(zero_copy_only=False)
        # One column per aggregate (column-major: each is written and summed whole).
        counts = np.empty((batch.num_rows, len(d.aggs)), np.int64, order="F")
        somewhere = np.zeros(batch.num_rows, bool)
        for j, i in enumerate(d.aggs):
            counted = valid
            where = self.node.aggs[i].filter
            if where is not None:
                counted = counted & pc.fill_null(batch.column(where), False).to_numpy(zero_copy_only=False)
            counts[:, j] = np.where(counted, sign, 0)
            somewhere |= counted
        rows = np.flatnonzero(somewhere)
        m = len(groups[0])
        if len(rows) < batch.num_rows:
            value, counts = value.take(pa.array(rows)), counts[rows]
        counted = d.add(PrefixedKeys(groups, ids[rows], [value], memo), counts)
        moves = (counted.after > 0).astype(np.int64) - (counted.before > 0).astype(np.int64)
        moved = np.flatnonzero((moves != 0).any(axis=1))
        of = ids[rows[counted.rows[moved]]]
        return {f"a{i}_d": np.bincount(of, weights=moves[moved, j], minlength=m).astype(np.int64)
                for j, i in enumerate(d.aggs)}

    def _field_type(self, name: str) -> pa.DataType:
        return next(f.type for f in self._fields if f.name == name)

    def _merge(self, old: pa.StructArray, delta: dict[str, pa.Array]) -> dict[str, pa.Array]:
        """The accumulators after the batch: old (NULL where the key was absent) plus delta, per
        key position. Position by position, as a group_by over the positions of the two would
        combine them: sums added, MIN and MAX element-wise, NULLs skipped (NaN too, as the
        group_by skips it). Where a field's type has no such kernel (a DECIMAL sum, MIN/MAX of a
        BOOLEAN), one group_by does every field at once."""
        if self._elementwise:
            new = {}
            for f, previous in zip(self._fields, old.flatten()[: len(self._fields)], strict=True):
                change = delta[f.name]
                if change.type != f.type:
                    change = pc.cast(change, f.type)
                fn = self._merged_by[f.name]
                if fn == "sum":
                    # A batch's sums are never NULL (counts; SUMs from 0): NULL is an absent key.
                    zero = pa.scalar(0, f.type)
                    value = pc.add(pc.fill_null(previous, zero), pc.fill_null(change, zero))
                elif fn == "max":
                    value = pc.max_element_wise(previous, change, skip_nulls=True)
                else:
                    value = pc.min_element_wise(previous, change, skip_nulls=True)
                new[f.name] = value
            self._restart_empty_sums(new)
            return new
        m = len(old)
        positions = np.arange(m, dtype=np.int64)
        cols: dict[str, pa.Array] = {_POSITION: pa.array(np.concatenate([positions, positions]))}
        for f, previous in zip(self._fields, old.flatten()[: len(self._fields)], strict=True):
            change = delta[f.name]
            cols[f.name] = pa.concat_arrays([previous, change if change.type == f.type else pc.cast(change, f.type)])
        merged = pa.table(cols).group_by(_POSITION, use_threads=False).aggregate(self._aggregations)
        order = merged[_POSITION].to_numpy()
        take = None if (order == positions).all() else np.argsort(order)
        new = {}
        for name, fn, *_ in self._aggregations:
            values = _array(merged[f"{name}_{fn}"])
            if take is not None:
                values = pc.take(values, pa.array(take))
            new[name] = values if values.type == self._field_type(name) else pc.cast(values, self._field_type(name))
        self._restart_empty_sums(new)
        return new

    def _restart_empty_sums(self, new: dict[str, pa.Array]) -> None:
        for f in self._fields:
            if f.name.endswith("_s"):
                # A sum whose count is back to 0 restarts at exactly 0 (floats may keep a residue).
                empty = pc.equal(new[f.name[:-2] + "_n"], _ZERO)
                new[f.name] = pc.if_else(empty, pc.cast(_ZERO, f.type), new[f.name])

    def _run_udafs(self, batch: pa.RecordBatch, keys: list[pa.Array], old: pa.StructArray) -> list[tuple]:
        """Run the Python aggregate functions over ``batch``: each key's accumulators (new ones
        for a key not held) get the rows that count, added with ``accumulate`` and those
        retracted (``-U`` / ``-D``) taken away with ``retract``, all the batch's rows of all its
        keys in one call each. Returns, per function, (index, runner, field names, (the
        accumulators before, after)), each a list of arrays in the order of ``keys``."""
        m, n = len(old), batch.num_rows
        if self.node.keys:
            row_keys = [_normalize_key(batch.column(k)) for k in self.node.keys]
            # One id over the distinct keys and the rows together: a row's id is its key's.
            ids, _ = K.group_ids([pa.concat_arrays([k, r]) for k, r in zip(keys, row_keys, strict=True)], m + n)
            position = np.empty(m + n, np.int64)
            position[ids[:m]] = np.arange(m, dtype=np.int64)
            groups = position[ids[m:]]
        else:
            groups = np.zeros(n, np.int64)
        retract = np.zeros(n, bool)
        if self._updating:
            kinds = pc.is_in(batch.column(batch.num_columns - 1), value_set=_RETRACTING)
            retract = pc.fill_null(kinds, False).to_numpy(zero_copy_only=False)
        held = pc.is_valid(old)
        stored = dict(zip([f.name for f in self._fields + self._udaf_fields], old.flatten(), strict=True))
        out = []
        for i, runner, names in self._udafs:
            agg = self.node.aggs[i]
            fresh = runner.fresh(m)
            acc = {name: pc.if_else(held, stored[field], fresh[name]) for name, field in
                   zip(runner.names, names, strict=True)}
            before = [acc[name] for name in runner.names]
            counted = np.ones(n, bool)
            if agg.filter is not None:
                counted = pc.fill_null(batch.column(agg.filter), False).to_numpy(zero_copy_only=False)
            args = [batch.column(a) for a in agg.args]
            for rows, taking_away in ((counted & ~retract, False), (counted & retract, True)):
                if rows.any():
                    picks = pa.array(rows)
                    acc = runner.accumulate(acc, groups[rows], [pc.filter(a, picks) for a in args], taking_away)
            out.append((i, runner, names, (before, [acc[name] for name in runner.names])))
        return out

    def _apply(self, keys: list[pa.Array], old: pa.StructArray, new: dict[str, pa.Array],
               udafs: list[tuple] | None = None) -> list[pa.RecordBatch]:
        """Store the new accumulators and return the changelog rows for them (``udafs``: what
        ``_run_udafs`` gave)."""
        m = len(old)
        fields = self._fields + self._udaf_fields
        existed = pc.is_valid(old).to_numpy(zero_copy_only=False)
        alive = new[_ROWS].to_numpy() > 0
        write = existed | alive
        if write.any():
            values = pa.StructArray.from_arrays([new[f.name] for f in fields], fields=fields,
                                                mask=pa.array(~alive))
            stored = keys
            if not write.all():  # keys that came and went within the batch: nothing to store
                chosen = pa.array(write)
                stored, values = [pc.filter(k, chosen) for k in keys], pc.filter(values, chosen)
            self._groups.put_many(stored, values)
            self._entry_bytes = (sum(k.nbytes for k in stored) + values.nbytes) / len(values)

        inserted = ~existed & alive
        deleted = existed & ~alive
        self._num_keys += int(inserted.sum()) - int(deleted.sum())
        after = self._results(new)
        kept = existed & alive
        if kept.any() or deleted.any():
            previous = dict(zip((f.name for f in fields), old.flatten(), strict=True))
            for _, _, names, (accs, _) in udafs or ():
                previous.update(zip(names, accs, strict=True))
            before = self._results(previous)
            changed = kept & ~np.logical_and.reduce([_same(b, a) for b, a in zip(before, after, strict=True)],
                                                    axis=0, initial=True)
        else:
            before = [pa.nulls(m, a.type) for a in after]
            changed = kept
        gone, updated, added = np.flatnonzero(deleted), np.flatnonzero(changed), np.flatnonzero(inserted)
        # Positions into [before results ++ after results]: -D and -U read before, +U and +I after.
        rows = np.concatenate([gone, updated, updated + m, added + m])
        if not len(rows):
            return []
        key_rows = pa.array(rows % m)
        columns = [pc.take(k, key_rows) for k in keys] if self.node.keys else []
        picks = pa.array(rows)
        columns += [pc.take(pa.concat_arrays([b, a]), picks) for b, a in zip(before, after, strict=True)]
        counts = [len(gone), len(updated), len(updated), len(added)]
        columns.append(pc.take(_KINDS, pa.array(np.repeat(np.arange(4), counts))))
        schema = self.node.schema
        columns = [c if c.type == t else pc.cast(c, t) for c, t in zip(columns, schema.types, strict=True)]
        return [pa.RecordBatch.from_arrays(columns, schema=schema)]

    def _results(self, acc: dict[str, pa.Array]) -> list[pa.Array]:
        """The aggregates' results (of the output types) from accumulators."""
        base = len(self.node.keys)
        out = []
        for i, agg in enumerate(self.node.aggs):
            type_ = self.node.schema.field(base + i).type
            n, s, x = (f"a{i}_{p}" for p in "nsx")
            match agg.fn:
                case "count_star" if agg.filter is None:
                    value = acc[_ROWS]
                case "count_star" | "count":
                    value = acc[n]
                case "count_distinct":
                    value = acc[f"a{i}_d"]
                case "sum":
                    value = pc.if_else(pc.greater(acc[n], _ZERO), acc[s], pa.scalar(None, acc[s].type))
                case "avg":
                    value = _average(acc[s], acc[n], type_)
                case "udaf":
                    runner, names = next((r, f) for j, r, f in self._udafs if j == i)
                    value = runner.value({name: acc[field] for name, field in zip(runner.names, names, strict=True)})
                case _:
                    value = acc[x]
            # K.cast: a SUM that no longer fits its INT (Flink keeps the argument's type) fails
            # the pipeline naming the value, rather than wrapping around as Flink's would.
            out.append(value if value.type == type_ else K.cast(value, type_))
        return out

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self._num_keys
        self.metrics["state_bytes"] = int(self._num_keys * self._entry_bytes
                                          + sum(d.pairs * d.row_bytes for d in self._distinct))


class _DistinctCounts:
    """The COUNT(DISTINCT) aggregates over one argument column, and the value state of their
    value counts (see the module docstring): ``aggs`` the aggregates' indices, ``state`` the
    state once opened, ``pairs`` the number of (key, value) pairs it holds.

    The state's key is the group key's columns and ``value``; its value a struct of one int64
    per aggregate, ``a<i>``, the number of the key's net rows with that value that the
    aggregate counts. It files each pair under the key group of the group key alone
    (``group_fields``), so a rescale moves a key's values with its accumulators. A pair is
    deleted when every count is back to 0.
    """

    def __init__(self, name: str, arg: int, aggs: list[int], keys: list[str], key_schema: pa.Schema,
                 input_schema: pa.Schema) -> None:
        self.arg = arg
        self.aggs = tuple(aggs)
        pair_schema = pa.schema([*(pa.field(k, t) for k, t in zip(keys, key_schema.types, strict=True)),
                                 pa.field(_VALUE, input_schema.field(arg).type)])
        counts = [pa.field(f"a{i}", pa.int64()) for i in aggs]
        self.descriptor = ValueStateDescriptor(name, pair_schema, pa.struct(counts), group_fields=len(keys))
        self.row_bytes = sum(_type_bytes(t) for t in [*pair_schema.types, *(f.type for f in counts)])
        self.state: ValueState
        self.pairs = 0

    def add(self, pairs: KeyColumns, counts: np.ndarray) -> Counted:
        """Add ``counts`` (per row of ``pairs``, a key and value, one int64 change per
        aggregate) to the stored counts; return the pairs' counts before and after."""
        counted = self.state.add_counts(pairs, counts)
        self.pairs += (int(np.count_nonzero((counted.after != 0).any(axis=1)))
                       - int(np.count_nonzero((counted.before != 0).any(axis=1))))
        return counted

    def forget(self, pairs: list[tuple]) -> None:
        """Delete the pairs ``pairs`` (key tuples of the state)."""
        columns = list(zip(*pairs, strict=True))
        arrays = [pa.array(c, f.type) for c, f in zip(columns, self.descriptor.key_schema, strict=True)]
        self.state.put_many(arrays, pa.nulls(len(pairs), self.descriptor.value_type))
        self.pairs -= len(pairs)


# -- vectorized helpers -----------------------------------------------------------------------


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def _normalize_key(col: pa.Array) -> pa.Array:
    """``col`` with the float values the state contract treats as one key made identical."""
    if not pa.types.is_floating(col.type):
        return col
    col = pc.add(col, pa.scalar(0.0, col.type))  # -0.0 + 0.0 is 0.0
    nan = pc.is_nan(col)
    if pc.any(nan).as_py():
        col = pc.if_else(nan, pa.scalar(float("nan"), col.type), col)
    return col


def _dense_ids(columns: list[pa.Array], num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A dense id (0 .. m-1) per row, equal exactly where every column is equal (NULL equals
    NULL, and values as Arrow's hashing compares them, as its group_by does), and for each id
    the position of one of its rows.

    Each column is dictionary-encoded (a hash pass); the codes of several columns are combined
    into one int64 and numbered again, so an id stays below the number of rows and the product
    of two never overflows: through a table of every combination where there are few of them
    (a GROUP BY channel, day: each batch holds one or two days), else by encoding again."""
    ids = np.zeros(num_rows, np.int64)
    m = 1
    for j, col in enumerate(columns):
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if j == 0:
            ids, m = codes, len(encoded.dictionary)
            continue
        combined = ids * len(encoded.dictionary) + codes
        combinations = m * len(encoded.dictionary)
        if combinations <= 4 * num_rows:
            seen = np.zeros(combinations, bool)
            seen[combined] = True
            numbers = np.cumsum(seen) - 1
            ids, m = numbers[combined], int(numbers[-1]) + 1
        else:
            recoded = pc.dictionary_encode(pa.array(combined))
            ids, m = recoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(recoded.dictionary)
    row_of = np.empty(m, np.int64)
    row_of[ids] = np.arange(num_rows, dtype=np.int64)  # any row of an id will do
    return ids, row_of


def _average(total: pa.Array, count: pa.Array, type_: pa.DataType) -> pa.Array:
    """SUM / COUNT as ``type_``; NULL where the count is 0 (or NULL)."""
    empty = pc.equal(count, _ZERO)
    # The divisor 1 only avoids a division error where the result is NULL anyway.
    divisor = pc.if_else(empty, _ONE, count)
    if pa.types.is_floating(type_) or pa.types.is_floating(total.type):
        value = pc.divide(pc.cast(total, pa.float64()), pc.cast(divisor, pa.float64()))
    elif pa.types.is_decimal(total.type):
        # Exact, rounded HALF_UP to the scale of DECIMAL(38, max(6, s)), as Flink's decimal AVG.
        value = K.decimal_arith("divide", total, pc.cast(divisor, pa.decimal128(19, 0)), type_)
    else:
        value = pc.divide(total, pc.cast(divisor, total.type))  # truncates, as SQL
    return pc.if_else(empty, pa.scalar(None, value.type), value)


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row, whether ``a`` and ``b`` hold the same result (NULL is the same as NULL, NaN as NaN);
    maps, lists and rows (COLLECT, Python aggregates) compare entry by entry."""
    t = a.type
    if pa.types.is_map(t):
        entries = pa.list_(pa.struct([pa.field("key", t.key_type, nullable=False), pa.field("value", t.item_type)]))
        return _same(a.cast(entries), b.cast(entries))
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return _same_nested(a, b)
    equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    both_null = ~pc.is_valid(a).to_numpy(zero_copy_only=False) & ~pc.is_valid(b).to_numpy(zero_copy_only=False)
    same = equal | both_null
    if pa.types.is_floating(a.type):
        nan = pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(zero_copy_only=False)
        same |= nan
    return same


def _type_bytes(type_: pa.DataType) -> int:
    """A rough size of one value of ``type_`` as Arrow data."""
    if pa.types.is_struct(type_):
        return sum(_type_bytes(type_.field(i).type) for i in range(type_.num_fields))
    try:
        return max(type_.bit_width // 8, 1)
    except ValueError:  # variable width
        return _VARIABLE_BYTES


def _same_nested(a: pa.Array, b: pa.Array) -> np.ndarray:
    """``_same`` of rows or lists: every field, or equal lengths and every element the same."""
    valid_a = pc.is_valid(a).to_numpy(zero_copy_only=False)
    valid_b = pc.is_valid(b).to_numpy(zero_copy_only=False)
    if pa.types.is_struct(a.type):
        same = np.logical_and.reduce([_same(pc.struct_field(a, [i]), pc.struct_field(b, [i]))
                                      for i in range(a.type.num_fields)] or [np.ones(len(a), dtype=bool)])
        return np.where(valid_a & valid_b, same, ~valid_a & ~valid_b)
    length_a = pc.fill_null(pc.list_value_length(a), 0).to_numpy(zero_copy_only=False)
    length_b = pc.fill_null(pc.list_value_length(b), 0).to_numpy(zero_copy_only=False)
    same = valid_a & valid_b & (length_a == length_b)
    rows = np.flatnonzero(same & (length_a > 0))
    if len(rows):
        counts = length_a[rows]
        first = np.cumsum(counts) - counts
        step = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts)
        at_a = np.repeat(a.offsets.to_numpy()[rows], counts) + step
        at_b = np.repeat(b.offsets.to_numpy()[rows], counts) + step
        differ = ~_same(a.values.take(pa.array(at_a)), b.values.take(pa.array(at_b)))
        same[rows] = np.add.reduceat(differ.astype(np.int64), first) == 0
    return same | (~valid_a & ~valid_b)
