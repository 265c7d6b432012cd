"""Event-time window aggregation: TUMBLE, HOP, CUMULATE and SESSION windows.

Each input batch is assigned to windows with numpy, pre-aggregated per (window, key) with one
Arrow ``group_by``, and the resulting partial aggregates are stored per window end in a
``WindowState``. When the watermark passes a window's end, its partials are merged with a second
``group_by``, finished (AVG = sum / count and so on), and emitted. No step loops over rows in
Python; loops run over windows or aggregates only.

Partial tables use internal column names: ``_k<j>`` for the keys, ``_key_group``, ``_ws`` (the
start, session windows only), then per aggregate ``i`` one to three of ``_a<i>_n`` (count),
``_a<i>_s`` (sum), ``_a<i>_q`` (sum of squares), ``_a<i>_x`` (min / max / first / last value) and
``_a<i>_d`` (the distinct values, a list) or ``_a<i>_l`` (every value in arrival order, a list:
LISTAGG and COLLECT). While a table is in flight it may also carry ``_w``
(the window end) and ``_t`` (whether the row holds data from the batch being processed).

Over a TIMESTAMP_LTZ time column (an instant), windows are aligned on the wall clock of the
session time zone, as in Flink: event times and watermarks are turned into that wall clock's
milliseconds (``local_ms``) as they arrive, so every window end, the state and ``watermark`` are
wall-clock milliseconds; window_start and window_end come out as that wall clock (TIMESTAMP),
window_time as the instant just before the end (TIMESTAMP_LTZ). In a zone without daylight
saving time this is a fixed shift; with it, a window spanning the change holds an hour more or
less of events, and a window whose end falls in an hour that repeats when clocks go back fires
once the watermark has passed that hour's second occurrence (``local_watermark``).

See docs/windows.md for the semantics.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import kernels as K
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import max_parallelism, open_state
from clink.runtime.state.backend import OperatorState, StateBackend, TableStateDescriptor
from clink.runtime.state.keygroups import key_groups
from clink.runtime.state.window_state import KEY_GROUP, WINDOW_END, WindowState, split_by_window
from clink.runtime.timezone import epoch_ms, local_ms, local_watermark
from clink.runtime.udaf import AggregateRunner, AggregateUdf, resolve

if TYPE_CHECKING:
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

__all__ = ["PREAGGREGATED", "WindowAggregateOperator", "WindowPreAggregation", "window_partial_schema"]

_INT64_MIN = -(2**63)
#: Watermarks beyond this many ms from the epoch (the end of input's) are not moved to a time zone.
_LOCAL_LIMIT = 2**53
_END = "_w"
_START = "_ws"
_TOUCHED = "_t"
_GID = "_gid"
#: Partial rows merged together in one ``group_by`` when many windows fire at once.
_FIRE_ROWS = 1 << 20
#: Session windows are held in buckets of this many ms of their end.
_SESSION_BUCKET = 1000
#: Partial rows merged with one ``group_by``; more are merged in slices by key group.
_MERGE_ROWS = 1 << 19

_AGG_FUNCTIONS = frozenset({"count_star", "count", "count_distinct", "sum", "min", "max", "avg", "first_value",
                            "last_value", "stddev_pop", "stddev_samp", "var_pop", "var_samp", "listagg",
                            "collect", "udaf"})
_VARIANCE = frozenset({"stddev_pop", "stddev_samp", "var_pop", "var_samp"})
_VALUE_FN = {"min": "min", "max": "max", "first_value": "first", "last_value": "last"}
#: The aggregates whose partials per key and pane merge into the same result as the rows would
#: give (no arrival order, no distinct lists): those a window aggregation may split in two phases.
PREAGGREGATED = frozenset({"count_star", "count", "sum", "min", "max", "avg"})
#: A partial row's pane start (ms; local wall clock over a TIMESTAMP_LTZ), and the rows it stands for.
_PANE = "_p"
_ROWS = "_rows"
_ONLY_VALID = pc.CountOptions(mode="only_valid")
_SUM_OPTIONS = pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)


class WindowAggregateOperator(OperatorBase):
    """Run one ``plan.WindowAggregate`` node.

    ``process`` takes input batches, ``on_watermark`` fires the windows the watermark has passed;
    both return the output batches (schema ``node.schema``) they produce. Rows dropped as late
    collect in ``late_rows`` (the caller drains the list); counters live in ``metrics``
    (the task context's metrics dict): ``late_records``, ``null_time_records``, ``state_rows``,
    ``state_bytes``, ``windows_fired``.

    Its keyed state is one table state, ``windows``, opened from ``backend`` (memory if not
    given) as operator ``operator_id``; ``input_schema`` is the schema of the input batches.
    """

    def __init__(self, node: plan.WindowAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._check_window(node.window)
        self._kind = node.window.kind
        self._lateness = int(node.allowed_lateness)
        if self._lateness < 0:
            raise ValueError(f"window aggregate {node.id}: allowed lateness must be >= 0, got {self._lateness} ms")
        self._max_parallelism = max_parallelism(ctx)
        self._watermark: int | None = None
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("late_records", "null_time_records", "state_rows", "state_bytes", "windows_fired"):
            self.metrics.setdefault(name, 0)

        #: Two-phase: the input is partial rows (``WindowPreAggregation``) of rows of this schema.
        self._preaggregated = node.raw_schema is not None
        if self._preaggregated:
            input_schema = node.raw_schema
        time_type = input_schema.field(node.time).type
        #: The session time zone when windows align on its wall clock (a TIMESTAMP_LTZ time column).
        self._zone = ctx.time_zone if pa.types.is_timestamp(time_type) and time_type.tz else None
        self._keys = [f"_k{j}" for j in range(len(node.keys))]
        self._group = [*self._keys, KEY_GROUP] + ([_START] if self._kind == "session" else [])
        self._plan_aggregates(node.aggs)
        expected = len(node.keys) + 3 + len(node.aggs)
        if len(node.schema) != expected:
            raise ValueError(f"window aggregate {node.id}: the output schema has {len(node.schema)} columns, "
                             f"expected {expected} (keys, window_start, window_end, window_time, aggregates)")
        # Pre-aggregating per slide (pane) and then copying each pane's partial to every window
        # that covers it is much cheaper than copying rows, but within a batch it loses the
        # arrival order across panes that FIRST_VALUE / LAST_VALUE (and LISTAGG's order) need.
        self._by_pane = self._kind in ("hop", "cumulate") and not any(
            a.fn in ("first_value", "last_value", "listagg") for a in node.aggs)
        self.operator_id = operator_id or f"window-{node.id}"
        self.descriptor = TableStateDescriptor("windows", self._partial_schema(input_schema))
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        [self.descriptor], f"window aggregate {node.id}")
        self._state = WindowState(self._merge, table=self.operator_state.table_state("windows"))

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Add ``batch``'s rows to their windows.

        Returns output only for windows that had already fired and are still within the allowed
        lateness: for each (key, window) the batch touched, the full updated row.
        """
        out: list[pa.RecordBatch] = []
        if batch.num_rows and self._preaggregated:
            out = self._process_partials(batch)
        elif batch.num_rows:
            ts, batch = self._event_times(batch)
            if len(ts):
                out = self._process_session(batch, ts) if self._kind == "session" else self._process_time(batch, ts)
        self._update_state_metrics()
        return out

    def on_watermark(self, ts: int) -> list[pa.RecordBatch]:
        """Advance event time to ``ts`` (ms): fire every window whose end is ``<= ts`` in order of
        window end, then free the state of windows whose end + allowed lateness is ``<= ts``.

        A watermark at or below the current one changes nothing. Over a TIMESTAMP_LTZ time
        column ``ts`` is an instant, compared with window ends as its session-zone wall clock.
        """
        if self._zone is not None and abs(ts) < _LOCAL_LIMIT:
            ts = local_watermark(ts, self._zone)
        previous = self._watermark
        if previous is not None and ts <= previous:
            return []
        self._watermark = ts
        horizon = self._horizon()
        if self._kind == "session":
            out = self._fire_sessions(ts, previous, horizon)
            self._update_state_metrics()
            return out
        due = self._state.windows_until(ts)
        fire = [end for end in due if previous is None or end > previous]
        out = self._fire(fire, horizon)
        for end in due:
            if end <= horizon:
                self._state.take(end)
        self._update_state_metrics()
        return out

    @property
    def watermark(self) -> int | None:
        """The last watermark seen (ms), or None before the first."""
        return self._watermark

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int | None]]:
        """Commit the keyed state as of checkpoint ``checkpoint_id`` and write it to files in
        ``directory``; return them and the operator's own small state (the last watermark and
        the arrival counter), which the caller stores with the checkpoint."""
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        self._update_state_metrics()
        return files, {"watermark": self._watermark, "seq": self._seq}

    def restore(self, files: list[Path], meta: dict[str, int | None], *,
                key_groups: Collection[int] | None = None) -> None:
        """Continue from what ``snapshot`` wrote (the snapshots of several tasks may be given);
        only ``key_groups``, if given: how a task of a rescaled job takes its share."""
        self.operator_state.restore(files, key_groups=key_groups)
        self._watermark = meta.get("watermark")
        self._seq = int(meta.get("seq") or 0)
        self._update_state_metrics()

    def close(self) -> None:
        """Release the state (a durable backend keeps what was last committed)."""
        self.operator_state.close()

    @property
    def state(self) -> WindowState:
        return self._state

    # -- set-up ----------------------------------------------------------------------------------

    def _partial_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema of the partial tables kept in state: pre-aggregate an empty batch."""
        cols = self._input_columns(pa.RecordBatch.from_pylist([], schema=input_schema))
        by = [_START, _END] if self._kind == "session" else [_END]
        for name in by:
            cols[name] = pa.array([], pa.int64())
        partials = self._preaggregate(pa.table(cols), by)
        # Sessions are held by time bucket, each row with its own end; other windows by their end.
        return (partials if self._kind == "session" else partials.drop_columns([_END])).schema

    def _check_window(self, spec: plan.WindowSpec) -> None:
        where = f"window aggregate {self.node.id} ({spec.describe()})"
        match spec.kind:
            case "tumble":
                if spec.size <= 0:
                    raise ValueError(f"{where}: the window size must be positive")
            case "hop":
                if spec.size <= 0 or spec.slide <= 0:
                    raise ValueError(f"{where}: size and slide must be positive")
                if spec.size % spec.slide:
                    raise ValueError(f"{where}: the size must be a multiple of the slide")
            case "cumulate":
                if spec.size <= 0 or spec.slide <= 0:
                    raise ValueError(f"{where}: step and max size must be positive")
                if spec.size % spec.slide:
                    raise ValueError(f"{where}: the max size must be a multiple of the step")
            case "session":
                if spec.gap <= 0:
                    raise ValueError(f"{where}: the gap must be positive")
            case _:
                raise ValueError(f"{where}: unknown window kind {spec.kind!r}; "
                                 "expected tumble, hop, cumulate or session")

    def _plan_aggregates(self, aggs: tuple[plan.AggSpec, ...]) -> None:
        """Work out, per aggregate, its input columns, its partial columns, how to build them from
        rows (``_pre``), and how to merge partials (``_post``)."""
        self._pre: list[tuple] = []        # group_by aggregations over input rows
        self._pre_names: list[tuple[str, str]] = []  # (partial column, group_by output column)
        self._post: list[tuple] = []       # group_by aggregations over partials
        self._post_names: list[tuple[str, str]] = []
        self._distinct: list[str] = []     # partial columns holding lists of distinct values
        self._lists: list[str] = []        # partial columns holding lists of every value (LISTAGG, COLLECT)
        # Sessions merge partials from different windows, whose parts are not in arrival order:
        # there FIRST_VALUE / LAST_VALUE also keep the arrival number of their value (``_a<i>_o``)
        # and merging picks by it. (value column, order column, pick the lowest order?)
        self._ordered: list[tuple[str, str, bool]] = []
        self._seq = 0
        self._partials: list[str] = []
        #: Python aggregate functions: (aggregate index, runner, partial column per accumulator field).
        self._udafs: list[tuple[int, AggregateRunner, list[str]]] = []
        count_all = False
        for i, agg in enumerate(aggs):
            if agg.fn not in _AGG_FUNCTIONS:
                raise ValueError(f"window aggregate {self.node.id}: unknown aggregate function {agg.fn!r}")
            if agg.fn == "udaf":
                f = resolve(agg.function, self.ctx)
                if not isinstance(f, AggregateUdf) or agg.accumulator is None:
                    raise ValueError(f"window aggregate {self.node.id}: aggregate {i} is not a Python aggregate "
                                     f"function (clink.udaf) with an accumulator type: {agg.function!r}")
                runner = AggregateRunner(f, agg.accumulator, agg.type, where=getattr(self.node, "span", None) or None)
                columns = [f"_a{i}_u_{name}" for name in runner.names]
                self._udafs.append((i, runner, columns))
                self._partials += columns
                continue
            if agg.fn != "count_star" and agg.arg is None:
                raise ValueError(f"window aggregate {self.node.id}: {agg.fn} needs an argument column")
            v, q = f"_v{i}", f"_q{i}"
            n, s, sq, x, d = (f"_a{i}_{p}" for p in "nsqxd")
            if agg.fn == "count_star" and agg.filter is None:
                if not count_all:
                    self._pre.append(([], "count_all"))
                    count_all = True
                self._pre_names.append((n, "count_all"))
                parts = [(n, "sum", None)]
            elif agg.fn in ("count_star", "count"):
                self._pre.append((v, "count", _ONLY_VALID))
                self._pre_names.append((n, f"{v}_count"))
                parts = [(n, "sum", None)]
            elif agg.fn == "count_distinct":
                self._pre.append((v, "distinct", _ONLY_VALID))
                self._pre_names.append((d, f"{v}_distinct"))
                self._distinct.append(d)
                self._partials.append(d)
                continue
            elif agg.fn in ("listagg", "collect"):
                # Every value, in the order the rows came (NULLs too: the list's length is the
                # rows'; they are dropped when the window fires).
                lst = f"_a{i}_l"
                self._pre.append((v, "list"))
                self._pre_names.append((lst, f"{v}_list"))
                self._lists.append(lst)
                self._partials.append(lst)
                continue
            elif agg.fn == "sum":
                self._pre.append((v, "sum", _SUM_OPTIONS))
                self._pre_names.append((s, f"{v}_sum"))
                parts = [(s, "sum", _SUM_OPTIONS)]
            elif agg.fn in _VALUE_FN:
                fn = _VALUE_FN[agg.fn]
                self._pre.append((v, fn))
                self._pre_names.append((x, f"{v}_{fn}"))
                if self._kind == "session" and fn in ("first", "last"):
                    o, order_fn = f"_a{i}_o", "min" if fn == "first" else "max"
                    self._pre.append((f"_o{i}", order_fn))
                    self._pre_names.append((o, f"_o{i}_{order_fn}"))
                    self._ordered.append((x, o, fn == "first"))
                    self._partials += [x, o]
                    continue
                parts = [(x, fn, None)]
            elif agg.fn == "avg":
                self._pre += [(v, "sum", _SUM_OPTIONS), (v, "count", _ONLY_VALID)]
                self._pre_names += [(s, f"{v}_sum"), (n, f"{v}_count")]
                parts = [(s, "sum", _SUM_OPTIONS), (n, "sum", None)]
            else:  # variance family: count, sum and sum of squares, all in float64
                self._pre += [(v, "count", _ONLY_VALID), (v, "sum", _SUM_OPTIONS), (q, "sum", _SUM_OPTIONS)]
                self._pre_names += [(n, f"{v}_count"), (s, f"{v}_sum"), (sq, f"{q}_sum")]
                parts = [(n, "sum", None), (s, "sum", _SUM_OPTIONS), (sq, "sum", _SUM_OPTIONS)]
            for name, fn, options in parts:
                self._post.append((name, fn) if options is None else (name, fn, options))
                self._post_names.append((name, f"{name}_{fn}"))
                self._partials.append(name)

    # -- input -----------------------------------------------------------------------------------

    def _event_times(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch]:
        """The event time of each row in ms as int64, and the batch without NULL-time rows
        (they belong to no window: dropped and counted in ``null_time_records``)."""
        col = batch.column(self.node.time)
        if col.null_count:
            valid = pc.is_valid(col)
            self.metrics["null_time_records"] += col.null_count
            batch = batch.filter(valid)
            col = batch.column(self.node.time)
        if pa.types.is_timestamp(col.type):
            values = col.view(pa.int64()).to_numpy(zero_copy_only=False)
            # Round down (also before 1970), so a row is in the window that contains its instant.
            match col.type.unit:
                case "s":
                    values = values * 1000
                case "us":
                    values = values // 1000
                case "ns":
                    values = values // 1_000_000
        elif pa.types.is_date(col.type):
            values = pc.cast(pc.cast(col, pa.timestamp("ms")), pa.int64()).to_numpy(zero_copy_only=False)
        elif pa.types.is_integer(col.type):
            values = col.to_numpy(zero_copy_only=False)
        else:
            raise TypeError(f"window aggregate {self.node.id}: the time column must be a TIMESTAMP, "
                            f"got {col.type}")
        values = values.astype(np.int64, copy=False)
        if self._zone is not None:
            values = local_ms(values, self._zone)
        return values, batch

    def _horizon(self) -> int:
        """Windows whose end is at or below this are finished for good (watermark - lateness)."""
        if self._watermark is None:
            return _INT64_MIN
        return max(self._watermark - self._lateness, _INT64_MIN)

    def _drop_late(self, batch: pa.RecordBatch, ts: np.ndarray, late: np.ndarray
                   ) -> tuple[pa.RecordBatch, np.ndarray]:
        if not late.any():
            return batch, ts
        self.late_rows.append(batch.filter(pa.array(late)))
        self.metrics["late_records"] += int(late.sum())
        keep = ~late
        return batch.filter(pa.array(keep)), ts[keep]

    def _input_columns(self, batch: pa.RecordBatch) -> dict[str, pa.Array]:
        """The key columns and, per aggregate, its argument with FILTER applied (rows the filter
        does not pass become NULL, which every aggregate skips)."""
        cols: dict[str, pa.Array] = {k: batch.column(j) for k, j in zip(self._keys, self.node.keys)}
        for i, agg in enumerate(self.node.aggs):
            if agg.fn == "count_star" and agg.filter is None:
                continue
            keep = None if agg.filter is None else pc.fill_null(batch.column(agg.filter), False)
            if agg.fn == "udaf":
                # The arguments as they are (the function decides what a NULL means), and which
                # rows the FILTER lets it see.
                for j, a in enumerate(agg.args):
                    cols[f"_u{i}_{j}"] = batch.column(a)
                if keep is not None:
                    cols[f"_f{i}"] = keep
                continue
            if agg.fn == "count_star":
                assert keep is not None
                cols[f"_v{i}"] = pc.if_else(keep, True, pa.scalar(None, pa.bool_()))
                continue
            value = batch.column(agg.arg)
            if keep is not None:
                value = pc.if_else(keep, value, pa.scalar(None, value.type))
            if agg.fn in _VARIANCE:
                value = pc.cast(value, pa.float64())
                cols[f"_q{i}"] = pc.multiply(value, value)
            cols[f"_v{i}"] = value
            if self._kind == "session" and agg.fn in ("first_value", "last_value"):
                seq = pa.array(np.arange(self._seq, self._seq + batch.num_rows, dtype=np.int64))
                cols[f"_o{i}"] = pc.if_else(pc.is_valid(value), seq, pa.scalar(None, pa.int64()))
        self._seq += batch.num_rows
        return cols

    def _preaggregate(self, table: pa.Table, by: list[str]) -> pa.Table:
        """One partial row per distinct (keys, ``by``) of ``table``, with its key group."""
        group = [*self._keys, *by]
        gid = None
        if self._udafs:
            gid, n_groups = K.group_ids([table[c] for c in group], table.num_rows)
            table = table.append_column(_GID, pa.array(gid))
            group.append(_GID)
        out = table.group_by(group, use_threads=False).aggregate(self._pre)
        cols: dict[str, pa.ChunkedArray | pa.Array] = {k: out[k] for k in self._keys}
        cols[KEY_GROUP] = pa.array(key_groups([out[k] for k in self._keys], self._max_parallelism,
                                              num_rows=out.num_rows))
        for name in by:
            cols[name] = out[name]
        for partial, column in self._pre_names:
            cols[partial] = out[column]
        if gid is not None:
            picks = out[_GID]
            for i, runner, columns in self._udafs:
                rows = None if self.node.aggs[i].filter is None else table[f"_f{i}"].combine_chunks()
                args = [table[f"_u{i}_{j}"].combine_chunks() for j in range(len(self.node.aggs[i].args))]
                groups = gid
                if rows is not None:
                    args = [pc.filter(a, rows) for a in args]
                    groups = gid[rows.to_numpy(zero_copy_only=False)]
                acc = runner.partials(n_groups, groups, args)
                for name, column in zip(runner.names, columns, strict=True):
                    cols[column] = acc[name].take(picks)
        return pa.table(cols)

    # -- time windows ----------------------------------------------------------------------------

    def _pane(self) -> int:
        spec = self.node.window
        return spec.size if self._kind == "tumble" else spec.slide

    def _expand(self, pane_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each pane (a [start, start + pane) interval; HOP and CUMULATE), the windows that
        cover it: (index of the pane, window end) per window."""
        spec = self.node.window
        pane = self._pane()
        m = len(pane_start)
        if self._kind == "hop":
            n = spec.size // spec.slide
            index = np.repeat(np.arange(m), n)
            ends = pane_start[index] + np.tile(np.arange(1, n + 1, dtype=np.int64) * spec.slide, m)
            return index, ends
        # cumulate: a pane j steps into its period is in the windows ending at steps j+1 .. n.
        n = spec.size // pane
        period = pane_start - np.mod(pane_start - spec.offset, spec.size)
        j = (pane_start - period) // pane
        counts = n - j
        index = np.repeat(np.arange(m), counts)
        first = np.cumsum(counts) - counts
        k = (j + 1)[index] + (np.arange(len(index)) - first[index])
        return index, period[index] + k * pane

    def _process_time(self, batch: pa.RecordBatch, ts: np.ndarray) -> list[pa.RecordBatch]:
        spec = self.node.window
        pane = self._pane()
        horizon = self._horizon()
        if self._watermark is not None:
            # The last window a row belongs to is the one that starts in its own pane (tumble,
            # hop) or ends its period (cumulate); when that one is finished, so are the rest.
            if self._kind == "cumulate":
                last_end = ts - np.mod(ts - spec.offset, spec.size) + spec.size
            else:
                last_end = ts - np.mod(ts - spec.offset, pane) + spec.size
            batch, ts = self._drop_late(batch, ts, last_end <= horizon)
            if not len(ts):
                return []
        pane_start = ts - np.mod(ts - spec.offset, pane)
        cols = self._input_columns(batch)
        if self._kind == "tumble":
            cols[_END] = pa.array(pane_start + spec.size)
            partials = self._preaggregate(pa.table(cols), [_END])
        elif self._by_pane:
            cols["_p"] = pa.array(pane_start)
            return self._store(self._pane_windows(self._preaggregate(pa.table(cols), ["_p"])), horizon)
        else:
            index, ends = self._expand(pane_start)
            cols["_p"] = pa.array(pane_start)
            rows = pa.table(cols).take(index).drop_columns(["_p"]).append_column(_END, pa.array(ends))
            partials = self._preaggregate(rows, [_END])
        return self._store(split_by_window(partials, _END), horizon)

    def _process_partials(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Second phase: add partial rows (keys, pane start, partials) to their windows. A partial
        is late exactly when the rows it was made of are: they share their pane, and so their
        windows."""
        spec = self.node.window
        pane_start = batch.column(_PANE).to_numpy().astype(np.int64, copy=False)
        horizon = self._horizon()
        if self._watermark is not None:
            if self._kind == "cumulate":
                last_end = pane_start - np.mod(pane_start - spec.offset, spec.size) + spec.size
            else:
                last_end = pane_start + spec.size
            late = last_end <= horizon
            if late.any():
                rows = batch.column(_ROWS).to_numpy()
                self.metrics["late_records"] += int(rows[late].sum())  # the rows they stand for
                keep = ~late
                batch, pane_start = batch.filter(pa.array(keep)), pane_start[keep]
                if not len(pane_start):
                    return []
        keys = [batch.column(j) for j in range(len(self._keys))]  # the partials' first columns
        cols: dict[str, pa.Array] = {k: column for k, column in zip(self._keys, keys, strict=True)}
        cols[KEY_GROUP] = pa.array(key_groups(keys, self._max_parallelism, num_rows=batch.num_rows))
        if self._kind == "tumble":
            cols[_END] = pa.array(pane_start + spec.size)
        else:
            cols[_PANE] = pa.array(pane_start)
        for partial, _ in self._pre_names:
            cols[partial] = batch.column(partial)
        partials = pa.table(cols)
        if self._kind == "tumble":
            return self._store(split_by_window(partials, _END), horizon)
        return self._store(self._pane_windows(partials), horizon)

    def _pane_windows(self, partials: pa.Table) -> list[tuple[int, pa.Table]]:
        """Pane partials (with a ``_p`` column) as (window end, partials) per window, ascending.

        The panes of a HOP or CUMULATE window are consecutive, so once the partials are sorted
        by pane each window's partials are one zero-copy slice.
        """
        panes = partials["_p"].to_numpy()
        if (panes[1:] < panes[:-1]).any():
            order = np.argsort(panes, kind="stable")
            partials, panes = partials.take(order), panes[order]
        partials = partials.drop_columns(["_p"])
        unique, first_row = np.unique(panes, return_index=True)
        bounds = np.append(first_row, len(panes))
        index, ends = self._expand(unique)
        order = np.lexsort((index, ends))
        index, ends = index[order], ends[order]
        cuts = [0, *(np.flatnonzero(ends[1:] != ends[:-1]) + 1).tolist(), len(ends)]
        out = []
        for lo, hi in itertools.pairwise(cuts):
            a, b = int(index[lo]), int(index[hi - 1])
            assert b - a + 1 == hi - lo, "the panes of a window must be consecutive"
            out.append((int(ends[lo]), partials.slice(bounds[a], bounds[b + 1] - bounds[a])))
        return out

    def _store(self, windows: Iterable[tuple[int, pa.Table]], horizon: int) -> list[pa.RecordBatch]:
        """Add partials to state, window by window (ends ascending). Windows at or below the
        horizon are finished: a row that is not late may still belong to some of them (a HOP
        row whose early windows are done), and counts only in the others. For a window that has
        already fired, merge at once and return the updated rows."""
        out: list[pa.RecordBatch] = []
        for end, part in windows:
            if end <= horizon:
                continue
            if self._watermark is None or end > self._watermark:
                self._state.add(end, part)
                continue
            old = self._state.take(end)
            part = part.append_column(_TOUCHED, pa.repeat(pa.scalar(True), part.num_rows))
            if old is not None:
                old = old.append_column(_TOUCHED, pa.repeat(pa.scalar(False), old.num_rows))
                part = pa.concat_tables([old, part])
            merged = self._merge(part)
            self._state.add(end, merged.drop_columns([_TOUCHED]))
            updated = merged.filter(merged[_TOUCHED]).drop_columns([_TOUCHED])
            out.append(self._finish(updated.append_column(_END, pa.array(np.full(updated.num_rows, end)))))
        return out

    # -- session windows -------------------------------------------------------------------------

    def _process_session(self, batch: pa.RecordBatch, ts: np.ndarray) -> list[pa.RecordBatch]:
        gap = self.node.window.gap
        horizon = self._horizon()
        if self._watermark is not None:
            batch, ts = self._drop_late(batch, ts, ts + gap <= horizon)
            if not len(ts):
                return []
        cols = self._input_columns(batch)
        # Sessions already held that a new row could join: those ending at or after the earliest
        # row (a session that ends exactly where a row starts touches it, and they merge).
        old = self._state.take_many(self._state.windows_after(int(ts.min()) - 1))
        n_old = 0 if old is None else old.num_rows
        if old is None:
            keys = [cols[k] for k in self._keys]
            starts, ends = ts, ts + gap
        else:
            old = old.drop_columns([WINDOW_END])
            keys = [pa.chunked_array(old[k].chunks + [cols[k]], type=cols[k].type) for k in self._keys]
            starts = np.concatenate([old[_START].to_numpy(), ts])
            ends = np.concatenate([old[_END].to_numpy(), ts + gap])
        gid, _ = K.group_ids(keys, len(starts))
        session_start, session_end = _merge_intervals(gid, starts, ends)

        cols[_START] = pa.array(session_start[n_old:])
        cols[_END] = pa.array(session_end[n_old:])
        fresh = self._preaggregate(pa.table(cols), [_START, _END])
        fresh = fresh.append_column(_TOUCHED, pa.repeat(pa.scalar(True), fresh.num_rows))
        if old is not None:
            old = old.set_column(old.schema.get_field_index(_START), _START, pa.array(session_start[:n_old]))
            old = old.set_column(old.schema.get_field_index(_END), _END, pa.array(session_end[:n_old]))
            old = old.append_column(_TOUCHED, pa.repeat(pa.scalar(False), n_old))
            fresh = pa.concat_tables([old.select(fresh.column_names), fresh])
        merged = self._merge(fresh)

        out: list[pa.RecordBatch] = []
        if self._watermark is not None:
            # Sessions that end at or before the watermark fired already (or would have): a row
            # within the allowed lateness updates them at once.
            ended = pc.less_equal(merged[_END], self._watermark)
            updated = merged.filter(pc.and_(ended, merged[_TOUCHED]))
            if updated.num_rows:
                out.append(self._finish(_sort_by_end(updated.drop_columns([_TOUCHED]))))
        self._hold_sessions(merged.drop_columns([_TOUCHED]))
        return out

    def _hold_sessions(self, sessions: pa.Table) -> None:
        """Store session partials in the bucket of their end: one namespace per ``_SESSION_BUCKET``
        ms of end time, not per end (a batch ends thousands of sessions at distinct times)."""
        if not sessions.num_rows:
            return
        bucket = -(-sessions[_END].to_numpy() // _SESSION_BUCKET) * _SESSION_BUCKET
        for end, part in split_by_window(sessions.append_column(WINDOW_END, pa.array(bucket)), WINDOW_END):
            self._state.add(end, part)

    def _fire_sessions(self, watermark: int, previous: int | None, horizon: int) -> list[pa.RecordBatch]:
        """Emit the sessions that end at or before ``watermark`` (and after ``previous``: those
        fired already), a bounded number of rows at a time; keep those not past ``horizon``."""
        out: list[pa.RecordBatch] = []
        for _, table in self._take_chunks(self._state.windows_until(watermark + _SESSION_BUCKET - 1)):
            merged = self._merge(table.drop_columns([WINDOW_END]))
            ends = merged[_END].to_numpy()
            fire = ends <= watermark
            if previous is not None:
                fire &= ends > previous
            self._hold_sessions(merged.filter(pa.array(ends > horizon)))
            if fire.any():
                fired = _sort_by_end(merged.filter(pa.array(fire)))
                out.append(self._finish(fired))
                self.metrics["windows_fired"] += fired.num_rows
        return out

    # -- merge, fire, finish ---------------------------------------------------------------------

    def _merge(self, table: pa.Table) -> pa.Table:
        """Merge partial rows that share a group (keys, key group, window) into one.

        A large table is merged in slices by key group (a group never spans key groups), so the
        hash tables of one merge stay small however many keys a window holds."""
        if table.num_rows <= _MERGE_ROWS:
            return self._merge_rows(table)
        shards = -(-table.num_rows // _MERGE_ROWS)
        shard = table[KEY_GROUP].to_numpy() * shards // self._max_parallelism
        slices = (table.filter(pa.array(shard == i)) for i in range(shards))
        return pa.concat_tables([self._merge_rows(part) for part in slices if part.num_rows])

    def _merge_rows(self, table: pa.Table) -> pa.Table:
        group = [c for c in (*self._group, _END) if c in table.column_names]
        post = list(self._post)
        touched = _TOUCHED in table.column_names
        if touched:
            post.append((_TOUCHED, "max"))
        gid = None
        if self._distinct or self._ordered or self._lists or self._udafs:
            gid, n_groups = K.group_ids([table[c] for c in group], table.num_rows)
            table = table.append_column(_GID, pa.array(gid))
            group.append(_GID)
        out = table.group_by(group, use_threads=False).aggregate(post)
        cols: dict[str, pa.ChunkedArray | pa.Array] = {c: out[c] for c in group if c != _GID}
        named = dict(self._post_names)
        picks = {}
        for _, runner, columns in self._udafs:
            assert gid is not None
            other = {name: table[column].combine_chunks() for name, column in zip(runner.names, columns, strict=True)}
            acc = runner.merge(runner.fresh(n_groups), gid, other)
            picks.update({column: acc[name].take(out[_GID]) for name, column in zip(runner.names, columns,
                                                                                     strict=True)})
        for value, order, lowest in self._ordered:
            assert gid is not None
            rows = _pick_by_order(table[order], gid, n_groups, lowest).take(out[_GID])
            picks[value], picks[order] = table[value].take(rows), table[order].take(rows)
        for partial in self._partials:
            if partial in named:
                cols[partial] = out[named[partial]]
            elif partial in picks:
                cols[partial] = picks[partial]
            elif partial in self._lists:
                assert gid is not None
                cols[partial] = _concat_lists(table[partial], gid, n_groups).take(out[_GID])
            else:
                assert gid is not None
                lists = _distinct_lists(table[partial], gid, n_groups)
                cols[partial] = lists.take(out[_GID])
        if touched:
            cols[_TOUCHED] = out[f"{_TOUCHED}_max"]
        return pa.table(cols)

    def _fire(self, ends: list[int], horizon: int) -> list[pa.RecordBatch]:
        """Merge and emit the given windows (ascending ends), a bounded number of rows at a time.
        Windows still within the allowed lateness keep their (now merged) state."""
        out: list[pa.RecordBatch] = []
        for chunk, table in self._take_chunks(ends):
            table = table.rename_columns([_END if c == "_window_end" else c for c in table.column_names])
            merged = _sort_by_end(self._merge(table))
            for window_end, part in split_by_window(merged, _END):
                if window_end > horizon:
                    self._state.add(window_end, part)
            out.append(self._finish(merged))
            self.metrics["windows_fired"] += len(chunk)  # every end in the chunk holds state
        return out

    def _take_chunks(self, ends: list[int]) -> Iterator[tuple[list[int], pa.Table]]:
        """Take the given windows (or session buckets) out of state, a chunk of about
        ``_FIRE_ROWS`` partial rows at a time: each chunk's ends and their partials in one table."""
        chunk: list[int] = []
        rows = 0
        for i, end in enumerate(ends):
            rows += self._state.window_rows(end)
            chunk.append(end)
            if rows < _FIRE_ROWS and i + 1 < len(ends):
                continue
            table = self._state.take_many(chunk)
            if table is not None:
                yield chunk, table
            chunk, rows = [], 0

    def _window_start(self, ends: np.ndarray) -> np.ndarray:
        spec = self.node.window
        if self._kind == "cumulate":
            last = ends - 1
            return last - np.mod(last - spec.offset, spec.size)
        return ends - spec.size

    def _finish(self, merged: pa.Table) -> pa.RecordBatch:
        """Output rows (``node.schema``) from merged partials that carry ``_w``."""
        schema = self.node.schema
        ends = merged[_END].to_numpy().astype(np.int64, copy=False)
        starts = merged[_START].to_numpy() if self._kind == "session" else self._window_start(ends)
        columns: list[pa.Array | pa.ChunkedArray] = [
            _cast(merged[k], schema.field(j).type) for j, k in enumerate(self._keys)]
        base = len(self._keys)
        times = ends - 1 if self._zone is None else epoch_ms(ends - 1, self._zone)
        for offset, values in enumerate((starts, ends, times)):
            columns.append(pa.array(values, pa.int64()).cast(schema.field(base + offset).type))
        base += 3
        for i, agg in enumerate(self.node.aggs):
            columns.append(self._final(i, agg, merged, schema.field(base + i).type))
        table = pa.Table.from_arrays(columns, schema=schema).combine_chunks()
        batches = table.to_batches()
        return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)

    def _final(self, i: int, agg: plan.AggSpec, t: pa.Table, type_: pa.DataType) -> pa.ChunkedArray | pa.Array:
        n, s, sq, x, d = (f"_a{i}_{p}" for p in "nsqxd")
        match agg.fn:
            case "count_star" | "count":
                return _cast(t[n], type_)
            case "count_distinct":
                return _cast(pc.fill_null(pc.list_value_length(t[d]), 0), type_)
            case "sum":
                return t[s] if t[s].type == type_ else K.cast(t[s], type_)  # fails on INT overflow
            case "min" | "max" | "first_value" | "last_value":
                return _cast(t[x], type_)
            case "listagg":
                return _listagg(t[f"_a{i}_l"], agg.param if agg.param is not None else ",")
            case "collect":
                return _collect(t[f"_a{i}_l"], type_)
            case "udaf":
                runner, columns = next((r, c) for j, r, c in self._udafs if j == i)
                return runner.value({name: t[column].combine_chunks()
                                     for name, column in zip(runner.names, columns, strict=True)})
            case "avg":
                count = t[n]
                # NULL sum exactly when the count is 0; the divisor 1 only avoids a division error.
                divisor = pc.if_else(pc.equal(count, 0), 1, count)
                total = t[s]
                if pa.types.is_floating(type_) or pa.types.is_floating(total.type):
                    return _cast(pc.divide(pc.cast(total, pa.float64()), pc.cast(divisor, pa.float64())), type_)
                if pa.types.is_decimal(total.type):
                    return K.decimal_arith("divide", total, pc.cast(divisor, pa.decimal128(19, 0)), type_)
                return _cast(pc.divide(total, pc.cast(divisor, total.type)), type_)  # truncates, as SQL
        # variance family
        count = t[n].to_numpy(zero_copy_only=False).astype(np.float64)
        total = pc.fill_null(t[s], 0.0).to_numpy(zero_copy_only=False)
        squares = pc.fill_null(t[sq], 0.0).to_numpy(zero_copy_only=False)
        sample = agg.fn.endswith("_samp")
        null = count < (2 if sample else 1)
        # Flink rewrites VAR_POP(x) as (SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x) (VAR_SAMP
        # divides by COUNT(x) - 1, STDDEV takes the square root) in the argument's type, and casts
        # the result to it (Calcite's AggregateReduceFunctionsRule): for integers each division
        # truncates, and so does the cast of the square root.
        whole = pa.types.is_integer(type_)
        cut = np.trunc if whole else (lambda v: v)
        with np.errstate(divide="ignore", invalid="ignore"):
            m2 = np.maximum(squares - cut(total * total / count), 0.0)  # rounding can dip below 0
            value = cut(m2 / (count - 1 if sample else count))
            if agg.fn.startswith("stddev"):
                value = cut(np.sqrt(value))
        value = pa.array(np.where(null, 0.0, value), pa.float64(), mask=null)
        return K.cast(value, type_) if not pa.types.is_floating(type_) else _cast(value, type_)

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self._state.num_rows()
        self.metrics["state_bytes"] = self._state.nbytes()


# -- vectorized helpers -----------------------------------------------------------------------


def _cast(values: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> pa.Array | pa.ChunkedArray:
    return values if values.type == type_ else pc.cast(values, type_)


def _sort_by_end(table: pa.Table) -> pa.Table:
    ends = table[_END].to_numpy()
    if len(ends) < 2 or (ends[1:] >= ends[:-1]).all():
        return table
    return table.take(np.argsort(ends, kind="stable"))


def _concat_lists(lists: pa.ChunkedArray, gid: np.ndarray, n_groups: int) -> pa.ListArray:
    """Per group id, the values of the lists of the rows with that id, one list after another in
    row order (partials are held in arrival order, so a window's values stay in arrival order)."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = pc.list_flatten(lists)
    groups = gid[pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)]
    order = np.argsort(groups, kind="stable")
    offsets = np.zeros(n_groups + 1, dtype=np.int32)
    np.cumsum(np.bincount(groups, minlength=n_groups), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pc.take(values, pa.array(order)))


def _without_nulls(lists: pa.ChunkedArray | pa.ListArray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(the non-NULL values of ``lists``, each one's list, the number of lists)."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    return pc.filter(values, pa.array(valid)), parents[valid], len(lists)


def _listagg(lists: pa.ChunkedArray, separator: str) -> pa.Array:
    """LISTAGG: each list's non-NULL strings joined by ``separator``; NULL where there are none."""
    values, parents, n = _without_nulls(lists)
    counts = np.bincount(parents, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pc.cast(values, pa.string())), separator)
    return pc.if_else(pa.array(counts > 0), joined, pa.scalar(None, pa.string()))


def _collect(lists: pa.ChunkedArray, type_: pa.MapType) -> pa.Array:
    """COLLECT: per list, a map from each distinct non-NULL value to how many times it occurs
    (Flink's MULTISET), keys in the order they first occur."""
    values, parents, n = _without_nulls(lists)
    counted = pa.table({"p": pa.array(parents, pa.int64()), "v": values}).group_by(
        ["p", "v"], use_threads=False).aggregate([([], "count_all")])
    p = counted["p"].to_numpy()
    order = np.argsort(p, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(p, minlength=n), out=offsets[1:])
    keys = pc.take(counted["v"], pa.array(order)).combine_chunks() if counted.num_rows else pa.array(
        [], type_.key_type)
    items = pc.cast(pc.take(counted["count_all"], pa.array(order)), pa.int32()).combine_chunks() \
        if counted.num_rows else pa.array([], pa.int32())
    return pa.MapArray.from_arrays(pa.array(offsets), pc.cast(keys, type_.key_type), items)


def _distinct_lists(lists: pa.ChunkedArray, gid: np.ndarray, n_groups: int) -> pa.ListArray:
    """Per group id, the distinct values found in the lists of the rows with that id."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = pc.list_flatten(lists)
    groups = gid[pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)]
    pairs = pa.table({"g": groups, "v": values}).group_by(["g", "v"], use_threads=False).aggregate([])
    g = pairs["g"].to_numpy()
    order = np.argsort(g, kind="stable")
    offsets = np.zeros(n_groups + 1, dtype=np.int32)
    np.cumsum(np.bincount(g, minlength=n_groups), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pairs["v"].take(order).combine_chunks()
                                    if pairs.num_rows else pa.array([], lists.type.value_type))


def _pick_by_order(order: pa.ChunkedArray, gid: np.ndarray, n_groups: int, lowest: bool) -> pa.Array:
    """Per group id, the row with the lowest (or highest) ``order``; NULL orders lose."""
    values = pc.fill_null(order, np.iinfo(np.int64).max if lowest else -1).to_numpy()
    rows = np.lexsort((values if lowest else -values, gid))
    heads = np.flatnonzero(np.r_[True, gid[rows][1:] != gid[rows][:-1]])
    assert len(heads) == n_groups
    return pa.array(rows[heads])


def _merge_intervals(gid: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union the intervals [start, end) that overlap within each group id; return, per input
    interval, the start and end of the union it belongs to. Touching intervals (one ends where
    the next starts) merge, as Flink's session windows do: events exactly the gap apart share
    a session.

    Sorted by (group, start), an interval opens a new union when it starts at or after the
    running maximum of the ends before it in its group. The running maximum per group is one
    ``maximum.accumulate`` over ``group * R + rank(end)``: every key of a later group is larger
    than every key of an earlier one, so the maximum never leaks across groups.
    """
    n = len(starts)
    order = np.lexsort((starts, gid))
    g, s, e = gid[order], starts[order], ends[order]
    first_of_group = np.ones(n, dtype=bool)
    first_of_group[1:] = g[1:] != g[:-1]
    unique_ends, rank = np.unique(e, return_inverse=True)
    width = len(unique_ends)
    running = np.maximum.accumulate(g * width + rank.reshape(-1))
    opens = first_of_group.copy()
    if n > 1:
        previous = running[:-1] - g[1:] * width
        previous = np.where(first_of_group[1:], 0, previous)
        opens[1:] |= s[1:] > unique_ends[previous]
    heads = np.flatnonzero(opens)
    session = np.cumsum(opens) - 1
    union_start = np.empty(n, dtype=np.int64)
    union_end = np.empty(n, dtype=np.int64)
    union_start[order] = s[heads][session]
    union_end[order] = np.maximum.reduceat(e, heads)[session]
    return union_start, union_end


class WindowPreAggregation(WindowAggregateOperator):
    """The first phase of a window aggregation split in two: each batch becomes one partial row
    per key and pane (the slice of time every window it belongs to covers whole), made as the
    single-phase operator makes its own (``_input_columns``, FILTER applied, rows without a time
    dropped and counted), of ``schema`` (``window_partial_schema``). Keeps no state."""

    def __init__(self, node: plan.WindowAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 schema: pa.Schema) -> None:
        super().__init__(node, ctx, input_schema=input_schema)
        self.schema = schema
        # The keys keep their names (an exchange shows them), but for names of the partials' own.
        names = [input_schema.field(k).name for k in node.keys]
        self._key_names = names if not any(n.startswith("_") for n in names) else self._keys

    def partials(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        ts, batch = self._event_times(batch)
        if not len(ts):
            return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in self.schema], schema=self.schema)
        spec = self.node.window
        cols = self._input_columns(batch)
        cols[_PANE] = pa.array(ts - np.mod(ts - spec.offset, self._pane()))
        return self._aggregate(pa.table(cols))

    def _aggregate(self, table: pa.Table) -> pa.RecordBatch:
        pre = self._pre if ([], "count_all") in self._pre else [*self._pre, ([], "count_all")]
        out = table.group_by([*self._keys, _PANE], use_threads=False).aggregate(pre)
        arrays = [out[k] for k in self._keys] + [out[_PANE]] + [out[column] for _, column in self._pre_names]
        names = [*self._key_names, _PANE, *(partial for partial, _ in self._pre_names)]
        # How many rows each partial stands for: a late one counts them in ``late_records``.
        arrays.append(out["count_all"])
        names.append(_ROWS)
        result = pa.Table.from_arrays(arrays, names=names)
        if self.schema is not None:
            result = result.cast(self.schema)
        batches = result.combine_chunks().to_batches()
        return batches[0] if batches else pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in result.schema], schema=result.schema)


def window_partial_schema(node: plan.WindowAggregate, input_schema: pa.Schema) -> pa.Schema:
    """The schema of the partial rows the first phase of ``node`` makes from rows of
    ``input_schema``: the keys (``_k0`` ...), the pane start (``_p``, int64), the partials."""
    from clink.runtime.context import RuntimeContext, TaskContext

    phase = WindowPreAggregation(node, TaskContext(runtime=RuntimeContext(), node_id=node.id),
                                 input_schema=input_schema, schema=None)
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in input_schema], schema=input_schema)
    cols = phase._input_columns(empty)
    cols[_PANE] = pa.array([], pa.int64())
    return phase._aggregate(pa.table(cols)).schema
