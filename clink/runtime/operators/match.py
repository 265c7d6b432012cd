"""``MATCH_RECOGNIZE``: row pattern recognition, per partition, in event-time order.

Rows wait until the watermark passes their time (as for ``ORDER BY`` time), then the rows the
watermark releases are sorted by (partition, time, the other ORDER BY keys, arrival) and run
through the pattern's automaton, partition by partition. A partition's state is its partial
matches ("runs"): where in the pattern each stands (term, rows taken by the term) and the rows
mapped so far, newest first, with the values the conditions and measures read.

One row moves every run of its partition (and a run starting at the row) along the edges the
pattern allows: *take* (one more row for the current term, up to its most) and *proceed* (to the
next term, once the current one has its fewest rows; over terms that may match no row). A
greedy term proceeds only on a row it cannot take, as Flink's CEP does; a reluctant one does
both, as separate runs. A run that completes the last term is a match: the first one (earliest
start) is emitted, and the ``AFTER MATCH SKIP`` rule discards the runs it says (every run
started at or before the match's last row, for ``SKIP PAST LAST ROW``).

Vectorized where the pattern allows: a condition that reads only the row itself (``price > 10``)
is computed once for the whole batch of released rows. One that reads the partial match
(``LAST(A.price)``, ``SUM(A.price)``, another variable's row) is computed over the candidates
of a *step*: the partitions advance in lockstep, the k-th released row of every partition at
step k, so one Arrow call decides a variable's condition for every candidate of every partition
at once. Following the runs themselves is a loop over rows and runs in Python: each step depends
on the last, and no Arrow kernel follows an automaton.

State, through the state contract: ``pending`` (table state), the rows waiting for the
watermark, in buckets of a second by time, with their arrival number and key group; ``runs``
(table state), written at each checkpoint: per partition, its key group, its 64-bit key hash and
its runs and last rows, pickled. Partitions are told apart by the hash of their columns.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Collection
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.errors import PipelineError
from clink.runtime import compute as pc
from clink.runtime.operators import match_fixed
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import epoch_ms, hold, max_parallelism, open_state, set_aside_late, take_ready
from clink.runtime.state.backend import KEY_GROUP, OperatorState, StateBackend, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext

# A run: (start arrival number, start time ms, term, rows taken by the term, mapped rows). The
# mapped rows are a linked list, newest first: (older, variable, arrival number, values), the
# values being those of the columns the navigation reads (``_Partition`` of a step shares tails).
Run = tuple[int, int, int, int, Any]


class _Partition:
    """One partition's key values, its runs, its complete matches waiting for the runs that
    started before them to end (``done``, by start), and, for PREV, its last rows' values
    (newest last)."""

    __slots__ = ("done", "history", "key", "runs", "seen")

    def __init__(self, key: tuple, runs: list[Run], done: list[Run], history: deque, seen: int = 0) -> None:
        self.key = key
        #: Rows of the partition matched so far: a row's number in the partition's order, which
        #: runs start at and the skip rules compare (arrival numbers follow arrival, not time).
        self.seen = seen
        self.runs = runs
        self.done = done
        self.history = history

    def idle(self) -> bool:
        return not (self.runs or self.done or self.history)


class MatchRecognizeOperator(OperatorBase):
    """Run one ``plan.MatchRecognize`` node: ``process`` holds rows back, ``on_watermark`` runs
    the released rows through the pattern and emits a row per match."""

    def __init__(self, node: plan.MatchRecognize, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"match_recognize {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("late_records", "state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        self.width = len(input_schema)
        if not pa.types.is_timestamp(input_schema.field(node.time).type):
            raise ValueError(f"{self._where}: column {node.time} is not a timestamp")
        if len(node.defines) != len(node.variables) or len(node.row_only) != len(node.variables):
            raise ValueError(f"{self._where}: one condition per variable is needed")
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(input_schema.types)]
        fields += [pa.field("_seq", pa.int64()), pa.field("_ts", pa.int64()), pa.field("_h", pa.uint64()),
                   pa.field(KEY_GROUP, pa.int32())]
        self._pending_schema = pa.schema(fields)
        self._runs_schema = pa.schema([pa.field("_h", pa.uint64()), pa.field("state", pa.binary()),
                                       pa.field(KEY_GROUP, pa.int32())])
        # A pattern of fixed length is matched a batch at a time (match_fixed.py); any other one
        # by following its runs.
        place_vars = match_fixed.places(node)
        self._fixed = None if place_vars is None else match_fixed.FixedLengthMatcher(
            node, ctx, place_vars, input_schema, self._max_parallelism, self._where)
        self.descriptors = [TableStateDescriptor("pending", self._pending_schema)]
        if self._fixed is None:
            self.descriptors.append(TableStateDescriptor("runs", self._runs_schema))
        else:
            self.descriptors += self._fixed.descriptors
        self.operator_id = operator_id or f"match-{node.id}"
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.pending = self.operator_state.table_state("pending")
        if self._fixed is None:
            self.stored_runs = self.operator_state.table_state("runs")
        else:
            self._fixed.open(self.operator_state)
        self._sort_keys = [("_h", "ascending", "at_end"), ("_ts", "ascending", "at_end"),
                           *((f"c{c}", "descending" if d else "ascending", "at_end") for c, d in node.order),
                           ("_seq", "ascending", "at_end")]
        self.watermark = -(2**63)
        self._next_seq = 0
        self.partitions: dict[int, _Partition] = {}
        # The pattern, as lists for the loop: per term its variable, fewest and most rows, greediness.
        self._var = [t[0] for t in node.pattern]
        self._low = [t[1] for t in node.pattern]
        self._high = [t[2] for t in node.pattern]
        self._greedy = [t[3] for t in node.pattern]
        self._last = len(node.pattern) - 1
        self._edges: dict[tuple[int, int], list[tuple[int, int, tuple[int, ...], bool]]] = {}
        # The columns whose values the runs keep (what the navigation reads), in that order.
        self._kept = sorted({nav.column for nav in node.navs})
        self._slot = {c: i for i, c in enumerate(self._kept)}
        self._prev_depth = max((nav.offset for nav in node.navs if nav.kind == "prev"), default=0)
        self._nav_fields = [pa.field(f"nav{i}", nav.type) for i, nav in enumerate(node.navs)]
        self._swept = self.watermark
        self._input_types = list(input_schema.types)
        self._match_names = [*(f"c{i}" for i in range(self.width)), *(f"d{i}" for i in range(len(node.derived_types))),
                             *(f.name for f in self._nav_fields)]

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Hold ``batch``'s rows until the watermark passes their time; drop late ones. Ordered by
        processing time, match them now instead."""
        if batch.num_rows == 0:
            return []
        if self.node.proctime:
            ts = epoch_ms(batch.column(self.node.time))
        else:
            batch, ts = set_aside_late(batch, epoch_ms(batch.column(self.node.time)), self.watermark,
                                       self.late_rows, self.metrics)
        n = batch.num_rows
        if n == 0:
            return []
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        if self.node.partition:
            hashes = hash_columns([batch.column(c) for c in self.node.partition], n)
            groups = group_of_hash(hashes, self._max_parallelism)
        else:  # one partition, in one subtask: key group 0
            hashes = np.zeros(n, np.uint64)
            groups = np.zeros(n, np.int32)
        table = pa.Table.from_arrays([*batch.columns, pa.array(seq), pa.array(ts), pa.array(hashes),
                                      pa.array(groups)], schema=self._pending_schema)
        if self.node.proctime:
            return self._advance(table, int(ts.max()))
        hold(self.pending, table, ts)
        self._update_state_metrics()
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Run the held rows at or before ``watermark`` through the pattern; a row per match."""
        if watermark <= self.watermark or self.node.proctime:
            return []
        self.watermark = watermark
        return self._advance(take_ready(self.pending, watermark), watermark)

    def _advance(self, rows: pa.Table | None, now: int) -> list[pa.RecordBatch]:
        """Rows (of the pending layout) through the pattern, in partition and time order; then,
        with WITHIN, the partial matches older than it at time ``now`` dropped."""
        out: list[pa.RecordBatch] = []
        if rows is not None:
            ordered = rows.take(pc.sort_indices(rows, sort_keys=self._sort_keys))
            out = self._match(ordered) if self._fixed is None else self._fixed.match(ordered)
        if self.node.within is not None and now - self._swept >= max(self.node.within // 4, 1000):
            found: list = []
            self._sweep(now, found)
            out += self._emit(found)
        self._update_state_metrics()
        return out

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        if self._fixed is not None:
            self._fixed.save()
        else:
            self._save_runs()
        self.operator_state.commit(checkpoint_id)
        return self.operator_state.snapshot(directory), {"watermark": self.watermark, "next_seq": self._next_seq}

    def _save_runs(self) -> None:
        hashes = list(self.partitions)
        blobs = [pickle.dumps((p.key, p.runs, p.done, list(p.history), p.seen), protocol=5)
                 for p in self.partitions.values()]
        h = np.array(hashes, dtype=np.uint64)
        groups = group_of_hash(h, self._max_parallelism) if self.node.partition else np.zeros(len(h), np.int32)
        self.stored_runs.replace(0, pa.Table.from_arrays([pa.array(h, pa.uint64()), pa.array(blobs, pa.binary()),
                                                          pa.array(groups, pa.int32())], schema=self._runs_schema))

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.watermark = int(meta.get("watermark", self.watermark))
        self._swept = self.watermark
        self._next_seq = int(meta.get("next_seq", 0))
        self.partitions = {}
        stored = self.stored_runs.get(0) if self._fixed is None else None
        if self._fixed is not None:
            self._fixed.load()
        if stored is not None:
            for h, blob in zip(stored.column("_h").to_pylist(), stored.column("state").to_pylist(), strict=True):
                key, runs, done, history, seen = pickle.loads(blob)  # noqa: S301 - the operator's own checkpoint
                self.partitions[h] = _Partition(key, runs, done, deque(history, maxlen=self._prev_depth or None), seen)
        # Arrival numbers break ties in time: new ones must come after every held one, also when
        # the key groups of several subtasks were merged into this one.
        kept = [self._next_seq - 1]
        for ns in self.pending.namespaces():
            held = self.pending.get(ns)
            if held is not None and held.num_rows:
                kept.append(pc.max(held.column("_seq")).as_py())
        self._next_seq = max(kept) + 1
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    # -- matching ------------------------------------------------------------------------------

    def _match(self, ordered: pa.Table) -> list[pa.RecordBatch]:
        node = self.node
        n = ordered.num_rows
        columns = [ordered.column(i).combine_chunks() for i in range(self.width)]
        rows = pa.RecordBatch.from_arrays(columns, schema=pa.schema([pa.field(f"c{i}", c.type)
                                                                    for i, c in enumerate(columns)]))
        if node.derive is not None:
            derived = node.derive(rows, self.ctx)
            rows = pa.RecordBatch.from_arrays([*rows.columns, *derived],
                                              names=[*rows.schema.names,
                                                     *(f"d{i}" for i in range(len(derived)))])
        # Conditions that read only the row: once, for every row.
        fixed: list[list[bool] | None] = []
        for define, row_only in zip(node.defines, node.row_only, strict=True):
            if define is None:
                fixed.append([True] * n)
            elif row_only:
                fixed.append(_truth(define(rows, self.ctx), n))
            else:
                fixed.append(None)
        values = list(zip(*(rows.column(c).to_pylist() for c in self._kept), strict=True)) if self._kept \
            else [()] * n
        times = ordered.column("_ts").to_pylist()
        hashes = ordered.column("_h").to_numpy()
        # Partition boundaries; step k takes the k-th row of every partition.
        starts = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1])))
        sizes = np.diff(np.append(starts, n))
        keys = hashes[starts].tolist()
        parts = []
        for g, h in enumerate(keys):
            part = self.partitions.get(h)
            if part is None:
                first = int(starts[g])
                part = _Partition(tuple(rows.column(c)[first].as_py() for c in node.partition), [], [],
                                  deque(maxlen=self._prev_depth or None))
            parts.append(part)
        found: list[tuple[int, tuple, tuple]] = []  # (time it completed, key, navigation values)
        for k in range(int(sizes.max()) if n else 0):
            self._step(k, np.flatnonzero(sizes > k).tolist(), starts, parts, fixed, rows, values, times, found)
        for h, part in zip(keys, parts, strict=True):
            if part.idle():
                self.partitions.pop(h, None)
            else:
                self.partitions[h] = part
        return self._emit(found)

    def _emit(self, found: list[tuple[int, tuple, tuple]]) -> list[pa.RecordBatch]:
        """The output rows of ``found`` matches, in the order they were found (time it was then)."""
        if not found:
            return []
        node = self.node
        n = len(found)
        navs = [pa.array([f[2][i] for f in found], nav.type) for i, nav in enumerate(node.navs)]
        # Measures read navigation values only; the row columns are there for the layout.
        blanks = [pa.nulls(n, t) for t in (*self._input_types, *node.derived_types)]
        measured = node.measures(pa.RecordBatch.from_arrays([*blanks, *navs], names=self._match_names), self.ctx)
        keys_out = [pa.array([f[1][i] for f in found], self._input_types[c]) for i, c in enumerate(node.partition)]
        return [pa.RecordBatch.from_arrays([*keys_out, *measured], schema=node.schema)]

    def _edges_from(self, term: int, count: int) -> list[tuple[int, int, tuple[int, ...], bool]]:
        """The edges out of (``term``, ``count``) (-1: a run not started): (term, its new count,
        the terms skipped on the way (they match no row), whether it takes the current term)."""
        key = (term, count)
        edges = self._edges.get(key)
        if edges is None:
            edges = []
            if term >= 0 and (self._high[term] is None or count < self._high[term]):
                edges.append((term, count + 1, (), True))
            if term < 0 or count >= self._low[term]:
                skipped: list[int] = []
                j = term + 1
                while j <= self._last:
                    edges.append((j, 1, tuple(skipped), False))
                    if self._low[j] != 0:
                        break
                    skipped.append(j)
                    j += 1
            self._edges[key] = edges
        return edges

    def _step(self, k: int, active: list[int], starts: np.ndarray, parts: list[_Partition],
              fixed: list[list[bool] | None], rows: pa.RecordBatch, values: list[tuple],
              times: list[int], found: list) -> None:
        node = self.node
        within = node.within
        var_of = self._var
        # 1. Every run's edges on its partition's row, and a new run's; what each needs decided.
        plans = []  # (group, row, runs, edges per run)
        wanted: dict[int, list[tuple[int, Any, int]]] = {}  # variable -> [(attempt id, mapped, row)]
        results: list[bool | None] = []
        for g in active:
            row = int(starts[g]) + k
            part = parts[g]
            ts = times[row]
            runs = part.runs
            if within is not None and runs:
                runs = [r for r in runs if ts - r[1] <= within]
            runs.append((part.seen, ts, -1, 0, None))
            per_run = []
            for run in runs:
                edges = self._edges_from(run[2], run[3])
                ids = []
                for term, _count, _skipped, _take in edges:
                    v = var_of[term]
                    ids.append(len(results))
                    f = fixed[v]
                    if f is not None:
                        results.append(f[row])
                    else:
                        results.append(None)
                        wanted.setdefault(v, []).append((len(results) - 1, run[4], row))
                per_run.append((run, edges, ids))
            plans.append((g, row, per_run))
        # 2. The conditions that read the partial match: one Arrow call per variable.
        for v, attempts in wanted.items():
            self._decide(v, attempts, parts, rows, values, results, plans)
        # 3. Follow the edges that hold; complete runs are matches.
        for g, row, per_run in plans:
            part = parts[g]
            seq, vals = part.seen, values[row]
            part.seen += 1
            next_runs: list[Run] = []
            matches: list[Run] = []
            for run, edges, ids in per_run:
                took = bool(edges and edges[0][3] and results[ids[0]])
                held = {edges[i][0]: results[ids[i]] for i in range(len(edges)) if not edges[i][3]}
                for (term, count, skipped, take), aid in zip(edges, ids, strict=True):
                    if not results[aid]:
                        continue
                    if not take:
                        if run[2] >= 0 and self._greedy[run[2]] and took:
                            continue  # greedy: stay on the term while it can take the row
                        if any(self._greedy[s] and held.get(s) for s in skipped):
                            continue
                    new = (run[0], run[1], term, count, (run[4], var_of[term], seq, vals))
                    if term == self._last and count >= self._low[term] and \
                            (not self._greedy[term] or count == self._high[term]):
                        # Complete: a reluctant last term stops at its first row that completes it.
                        matches.append(new)
                        continue
                    next_runs.append(new)
            part.runs = next_runs
            if matches:
                part.done = sorted(part.done + matches, key=lambda m: m[0])
            if part.done:
                self._release(part, found, times[row])
            if self._prev_depth:
                part.history.append(vals)

    def _release(self, part: _Partition, found: list, now: int) -> None:
        """Emit the partition's complete matches that started before every run still going (as
        Flink's CEP does under a skip strategy: a run that started earlier may still complete
        first), the earliest first; each discards the runs and matches its skip rule says."""
        while part.done:
            match = part.done[0]
            if part.runs and min(r[0] for r in part.runs) <= match[0]:
                return
            del part.done[0]
            cut = self._cut(match, match[4][2])
            found.append((now, part.key, self._measure_navs(match[4])))
            part.runs = [r for r in part.runs if r[0] >= cut]
            part.done = [m for m in part.done if m[0] >= cut]

    def _cut(self, match: Run, last_seq: int) -> int:
        """The earliest start a run may have after ``match`` (runs starting before it go)."""
        skip = self.node.skip
        if skip == "past_last":
            return last_seq + 1
        if skip == "next_row":
            return match[0] + 1
        v = self.node.skip_to
        rows = []
        cell = match[4]
        while cell is not None:
            if cell[1] == v:
                rows.append(cell[2])
            cell = cell[0]
        name = self.node.variables[v]
        if not rows:
            raise PipelineError(f"AFTER MATCH SKIP TO {'FIRST' if skip == 'to_first' else 'LAST'} {name}: a match "
                                f"has no row mapped to {name}, so there is no row to continue from",
                                self.node.span or None)
        target = min(rows) if skip == "to_first" else max(rows)
        if target == match[0]:
            raise PipelineError(f"AFTER MATCH SKIP TO {'FIRST' if skip == 'to_first' else 'LAST'} {name} would start "
                                "the next match where this one started, and find it again forever",
                                self.node.span or None)
        return target

    def _decide(self, v: int, attempts: list[tuple[int, Any, int]], parts, rows: pa.RecordBatch,
                values: list[tuple], results: list, plans) -> None:
        """Decide variable ``v``'s condition for ``attempts`` (attempt id, the run's mapped rows,
        the row) in one call over a batch of the candidates."""
        node = self.node
        at = pa.array([a[2] for a in attempts], pa.int64())
        taken = rows.take(at)
        group_of_row = {row: g for g, row, _ in plans}
        navs = []
        wanted = set(node.nav_uses[v]) if node.nav_uses else None
        for i, nav in enumerate(node.navs):
            if wanted is not None and i not in wanted:
                navs.append(pa.nulls(len(attempts), nav.type))
                continue
            navs.append(pa.array([self._nav(nav, a[1], v, values[a[2]], parts[group_of_row[a[2]]].history)
                                  for a in attempts], nav.type))
        batch = pa.RecordBatch.from_arrays([*taken.columns, *navs],
                                           names=[*taken.schema.names, *(f.name for f in self._nav_fields)])
        truth = _truth(node.defines[v](batch, self.ctx), len(attempts))
        for (aid, _, _), ok in zip(attempts, truth, strict=True):
            results[aid] = ok

    def _measure_navs(self, mapped: Any) -> tuple:
        uses = self.node.nav_uses
        wanted = set(uses[-1]) if uses else None
        return tuple(None if wanted is not None and i not in wanted else self._nav(nav, mapped, None, None, None)
                     for i, nav in enumerate(self.node.navs))

    def _nav(self, nav: plan.Nav, mapped: Any, current: int | None, current_values: tuple | None,
             history: deque | None) -> Any:
        """The value ``nav`` reads from the rows ``mapped`` (newest first) and, when deciding a
        condition, the row being tried for variable ``current``."""
        slot = self._slot[nav.column]
        var = nav.variable
        kind = nav.kind
        if kind == "prev":
            if history is None or nav.offset > len(history):
                return None
            return history[-nav.offset][slot] if nav.offset else current_values[slot]
        mine = current is not None and (var < 0 or var == current)
        if kind == "last":
            n = nav.offset
            if mine:
                if n == 0:
                    return current_values[slot]
                n -= 1
            cell = mapped
            while cell is not None:
                if var < 0 or cell[1] == var:
                    if n == 0:
                        return cell[3][slot]
                    n -= 1
                cell = cell[0]
            return None
        picked = []
        cell = mapped
        while cell is not None:
            if var < 0 or cell[1] == var:
                picked.append(cell[3][slot])
            cell = cell[0]
        picked.reverse()
        if mine:
            picked.append(current_values[slot])
        if kind == "first":
            return picked[nav.offset] if nav.offset < len(picked) else None
        if kind == "count_star":
            return len(picked)
        present = [x for x in picked if x is not None]
        if kind == "count":
            return len(present)
        if not present:
            return None
        if kind == "sum":
            return sum(present)
        if kind == "min":
            return min(present)
        if kind == "max":
            return max(present)
        if kind == "avg":
            return _average(present, nav.type)
        raise ValueError(f"{self._where}: unknown navigation {kind!r}")

    def _sweep(self, watermark: int, found: list) -> None:
        """Drop the runs that started longer than WITHIN before the watermark: no row they could
        still take is in time."""
        within = self.node.within
        assert within is not None
        for h in list(self.partitions):
            part = self.partitions[h]
            part.runs = [r for r in part.runs if watermark - r[1] <= within]
            if part.done:
                self._release(part, found, watermark)
            if part.idle():
                del self.partitions[h]
        self._swept = watermark

    def _update_state_metrics(self) -> None:
        held = self._fixed.rows_held() if self._fixed is not None else sum(len(p.runs) for p in self.partitions.values())
        self.metrics["state_rows"] = self.pending.num_rows() + held
        self.metrics["state_bytes"] = self.pending.memory_bytes()


def _truth(result: Any, n: int) -> list[bool]:
    """A condition's result as a list of Python bools (NULL is not TRUE)."""
    if isinstance(result, pa.Scalar):
        return [bool(result.as_py())] * n
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    return pc.fill_null(result, False).to_numpy(zero_copy_only=False).tolist()


def _average(values: list, typ: pa.DataType) -> Any:
    """AVG as Flink types it: integers truncate toward zero, DECIMAL keeps its scale."""
    total = sum(values)
    if pa.types.is_integer(typ):
        q = abs(total) // len(values)
        return q if total >= 0 else -q
    if pa.types.is_decimal(typ):
        return (Decimal(total) / len(values)).quantize(Decimal(1).scaleb(-typ.scale), rounding=ROUND_HALF_UP)
    return total / len(values)
