"""The local executor: runs a plan's DAG in the calling thread.

Sources are polled in turn; each batch is pushed through the chains below it to the sinks.
When a bounded source ends it sends a final watermark and ``EndOfInput``; a sink closes (and
makes its output visible) once every input has ended. A failure anywhere aborts every sink, so
no half-written output appears under a final name.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import numpy as np
import pyarrow as pa

from clink.errors import (
    ClinkError,
    CompilerBug,
    EvaluationError,
    IncompatibleCheckpoint,
    PipelineError,
    UsageError,
)
from clink.records import field, record
from clink.runtime import allocator
from clink.runtime import compute as pc
from clink.runtime.connectors.base import SinkWriter, SourceReader, TableSpec
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.elements import MAX_WATERMARK, Barrier, Batch, Element, EndOfInput, Idleness, Watermark
from clink.runtime.faults import FaultPoint
from clink.runtime.kernels import max_epoch_ms
from clink.runtime.loader import sql_position_of
from clink.runtime.metrics import Latency, Meter, Rates, position_text, to_table, wall_ms
from clink.runtime.operators import OperatorEnv, kind_of
from clink.runtime.plan import (
    INSERT,
    ROWKIND_COLUMN,
    Chain,
    Exchange,
    GroupAggregate,
    Join,
    Node,
    Plan,
    Sink,
    Source,
    Union,
)
from clink.runtime.settings import check_setting, checkpoint_location, parse_duration, parse_size

#: A subtask's id is its node's id plus ``subtask * SUBTASK_STRIDE``: subtask 0 keeps the node's id.
SUBTASK_STRIDE = 1 << 16


#: An exchange sends a subtask's rows on once this many wait for it, before the round ends.
_EXCHANGE_ROWS = 1 << 16


def subtask_id(node_id: int, subtask: int) -> int:
    return node_id + subtask * SUBTASK_STRIDE


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> range:
    """The key groups subtask ``subtask`` of ``parallelism`` owns: a contiguous range, so that a
    key group ``g`` belongs to subtask ``g * parallelism // max_parallelism``."""
    return range(-(-subtask * max_parallelism // parallelism), -(-(subtask + 1) * max_parallelism // parallelism))


def _identity(array: pa.Array | pa.ChunkedArray) -> tuple:
    """What makes two arrays the same values without looking at them: type, offset, length and
    the addresses of their buffers (valid while the arrays are held)."""
    if isinstance(array, pa.ChunkedArray):
        return (array.type, tuple(_identity(chunk) for chunk in array.chunks))
    return (array.type, array.offset, len(array),
            tuple(0 if b is None else b.address for b in array.buffers()))


def job_parallelism(ctx: RuntimeContext) -> int:
    """``parallelism.default``: how many subtasks run each operator (1 when not set)."""
    text = ctx.get("parallelism.default")
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"'parallelism.default' must be a positive whole number, got {text!r}")
    return value


class Placement:
    """Where a job's subtasks run when it is spread over several processes (a cluster's workers):
    subtask ``i`` of every node runs in worker ``i % workers``, so that a node's subtask and the
    subtask of the node above that feeds it forward share a worker, and one-subtask nodes (sinks,
    a global aggregate) run in worker 0. The cluster package supplies the three callbacks:

    - ``send(target, sender, element)``: deliver an element to a subtask in another worker, in order
      per channel (sender, target);
    - ``snapshot_done(checkpoint_id, pieces)``: every subtask of this worker has taken its part of
      checkpoint ``checkpoint_id`` (``Job.inject_barriers``); ``pieces`` are plain values;
    - the worker reads ``Job.finished`` (every subtask here has ended) and then commits or closes.
    """

    def __init__(self, worker: int, workers: int, send, snapshot_done) -> None:
        if not 0 <= worker < workers:
            raise ValueError(f"worker {worker} of {workers}")
        self.worker = worker
        self.workers = workers
        self.send = send
        self.snapshot_done = snapshot_done

    def worker_of(self, index: int) -> int:
        """The worker that runs subtask ``index`` of any node."""
        return index % self.workers

    def runs_here(self, index: int) -> bool:
        return self.worker_of(index) == self.worker


@record(frozen=False)
class Metrics:
    """Counters of a run: rows read per source, written per sink, bad records skipped."""

    records_in: dict[str, int] = field(factory=dict)
    records_out: dict[str, int] = field(factory=dict)
    skipped_records: dict[str, int] = field(factory=dict)
    #: Rows that arrived after every window they belong to had fired (dropped), per operator id.
    late_records: dict[int, int] = field(factory=dict)
    #: The largest watermark that reached a sink (ms since the epoch; MAX_WATERMARK at the end).
    watermark: int | None = None
    #: The largest state any window operator held at once, in bytes.
    peak_state_bytes: int = 0
    #: Checkpoints completed in this run, and the checkpoint it resumed from (None: a fresh start).
    checkpoints: int = 0
    restored_from: int | None = None
    #: Per subtask of a sqlite-state operator restored (``uid`` or ``uid#i``): ``"local"`` when
    #: its working database was kept (local recovery), else why it was not.
    local_recovery: dict[str, str] = field(factory=dict)
    #: The checkpoint a requested stop ended with (None: it ran to the end, or had no state dir).
    stopped_at: int | None = None
    #: How long each checkpoint of this run took, in milliseconds.
    checkpoint_ms: list[float] = field(factory=list)
    seconds: float = 0.0
    #: Per operator and subtask, per source split, and per checkpoint (the last 100): rows of plain
    #: values with the columns of ``clink.runtime.metrics.TABLES``, as of the last refresh.
    operators: list[dict] = field(factory=list)
    splits: list[dict] = field(factory=list)
    checkpoint_history: list[dict] = field(factory=list)

    def to_arrow(self, what: str = "operators") -> pa.Table:
        """``operators`` (one row per operator and subtask), ``splits`` (one per source split) or
        ``checkpoints`` (one per checkpoint) as an Arrow table (docs/observability.md)."""
        rows = {"operators": self.operators, "splits": self.splits, "checkpoints": self.checkpoint_history}
        if what not in rows:
            raise UsageError(f"no metrics table {what!r}: there are {', '.join(rows)}")
        return to_table(rows[what], what)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The operators table, for any Arrow reader (``pa.table(metrics)``, DuckDB, polars)."""
        return self.to_arrow().__arrow_c_stream__(requested_schema)

    def summary(self) -> str:
        rows_in = sum(self.records_in.values())
        rows_out = sum(self.records_out.values())
        text = f"{rows_in} rows in, {rows_out} rows out in {self.seconds:.2f} s"
        if self.watermark is not None:
            text += f"; watermark {format_watermark(self.watermark)}"
        late = sum(self.late_records.values())
        if self.late_records:
            text += f"; {late} late rows dropped"
        skipped = sum(self.skipped_records.values())
        if skipped:
            text += f"; {skipped} bad records skipped ({', '.join(f'{k}: {v}' for k, v in self.skipped_records.items() if v)})"
        return text


def _minibatch_settings(ctx: RuntimeContext) -> tuple[int, int]:
    """Rows and milliseconds of a mini-batch ('table.exec.mini-batch.size', '.allow-latency'),
    (0, 0) when 'table.exec.mini-batch.enabled' is not 'true'. As in Flink, both must be set."""
    for key in ("table.exec.mini-batch.enabled", "table.exec.mini-batch.allow-latency", "table.exec.mini-batch.size"):
        # Settings given from Python have not been through SET's checks.
        if (value := ctx.get(key)) is not None and (problem := check_setting(key, value)) is not None:
            raise UsageError(problem)
    if (ctx.get("table.exec.mini-batch.enabled") or "false").strip().lower() != "true":
        return 0, 0
    latency = _duration_ms(ctx.get("table.exec.mini-batch.allow-latency")) or 0
    size = int(ctx.get("table.exec.mini-batch.size") or 0)
    if latency <= 0 or size <= 0:
        raise UsageError("'table.exec.mini-batch.enabled' = 'true' needs 'table.exec.mini-batch.allow-latency' "
                         "and 'table.exec.mini-batch.size', each greater than 0 (for example '2 s' and '50000')")
    return size, latency


def _duration_ms(text: str | None) -> int | None:
    """A duration setting in milliseconds; absent or zero is None (off)."""
    if not text:
        return None
    try:
        return parse_duration(text) or None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class _Empty(SourceReader):
    """The stream of a table that a lookup join reads by key: it ends at once."""

    finished = True

    def poll(self) -> None:
        return None

    def position(self) -> dict:
        return {}

    def seek(self, position: dict) -> None:
        pass

    def seek_shares(self, positions: list[dict]) -> None:
        pass


class _LookupInput:
    """The right input of a lookup join, by key: the table's rows looked up through its
    connector, then through the chains between its source and the join."""

    def __init__(self, source: Source, chains: list[Chain], keys: tuple[str, ...], task: TaskContext,
                 connector, ctx: RuntimeContext) -> None:
        spec = TableSpec(name=source.table, schema=source.schema, table_schema=source.table_schema,
                         options=source.options, primary_key=source.primary_key)
        self._lookup = connector.create_lookup(spec, keys, ctx)
        self._chains = chains
        self._task = task

    def __call__(self, keys: pa.Table) -> pa.RecordBatch:
        rows = self._lookup.lookup(keys).combine_chunks()
        batch = pa.RecordBatch.from_arrays([c.chunk(0) if c.num_chunks == 1 else pa.concat_arrays(c.chunks)
                                            for c in rows.columns], schema=rows.schema)
        for chain in self._chains:
            batch = chain.fn(batch, self._task)
        return batch

    @property
    def metrics(self) -> dict[str, int]:
        return self._lookup.metrics

    def close(self) -> None:
        self._lookup.close()


def format_watermark(ms: int) -> str:
    if ms >= MAX_WATERMARK:
        return "end of input"
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class Job:
    """One run of a plan. ``step()`` does a bounded amount of work; ``run()`` runs to the end."""

    def __init__(self, plan: Plan, ctx: RuntimeContext, *, placement: Placement | None = None) -> None:
        allocator.tune()
        self.plan = plan
        self.ctx = ctx.with_config({**plan.config, **ctx.config})
        if placement is None and (self.ctx.get("execution.target") or "local").strip().lower() == "ray":
            raise UsageError("'execution.target' = 'ray' runs the job on Ray's workers, not in this process: use "
                             "clink run --target ray (docs/cluster.md)")
        if placement is None and self.ctx.get("ray.address"):
            raise UsageError("'ray.address' is set, and the job runs in this process: set 'execution.target' = "
                             "'ray' (clink run --target ray) to run it on that cluster")
        self.metrics = Metrics()
        #: Per local subtask, its counters; per sink subtask, its rows' latencies (event time and
        #: ingestion to the sink's write). ``'metrics.enabled'`` = 'false' keeps the row counts only.
        self._meters: dict[int, Meter] = {}
        self._timed = (self.ctx.get("metrics.enabled") or "true").strip().lower() != "false"
        self._child_ns = 0
        self._ingested_ms: int | None = None
        self._latency: dict[int, Latency] = {}
        self._ingestion_latency: dict[int, Latency] = {}
        #: Subtasks per node, and what each subtask (by its id, ``subtask_id``) runs.
        self.parallelism = job_parallelism(self.ctx)
        self.max_parallelism = int(self.ctx.get("pipeline.max-parallelism") or 128)  # keygroups' default
        if self.parallelism > self.max_parallelism:
            raise UsageError(f"'parallelism.default' ({self.parallelism}) exceeds 'pipeline.max-parallelism' "
                             f"({self.max_parallelism}): each subtask needs at least one key group")
        self._nodes = {node.id: node for node in plan.nodes}
        self._subtasks: dict[int, list[int]] = {}
        self._node_of: dict[int, Node] = {}
        self._index_of: dict[int, int] = {}
        #: Per subtask: the subtasks it reads from (its channels), and which input of its node each is.
        self._channels: dict[int, list[int]] = defaultdict(list)
        self._channel_input: dict[tuple[int, int], int] = {}
        #: Per subtask and input of its node: channels still open.
        self._open_channels: dict[tuple[int, int], int] = defaultdict(int)
        #: Per exchange subtask: the subtasks of the node below, by their index.
        self._routes: dict[int, list[int]] = {}
        #: Per count of subtasks below an exchange: the subtask of each key group.
        self._owners: dict[int, np.ndarray] = {}
        #: The last rows a hash exchange ordered by subtask (``_partition``).
        self._last_partition: tuple | None = None
        #: Per exchange with several subtasks below: the rows waiting for each of them (from all
        #: of the exchange's subtasks), and per exchange subtask the watermark held until they go.
        self._buffers: dict[int, list[list[pa.RecordBatch]]] = {}
        self._buffered_rows: dict[int, list[int]] = {}
        self._held_watermarks: dict[int, int] = {}
        self._buffering: set[int] = set()
        self._exchanges: list[int] = []
        #: Mini-batches ('table.exec.mini-batch.*'): per group-aggregate subtask, the batches that
        #: wait to be aggregated as one, their rows, and when (context clock, ms) the first came.
        self._minibatch_size, self._minibatch_latency = _minibatch_settings(self.ctx)
        self._minibatches: dict[int, list[pa.RecordBatch]] = {}
        self._minibatch_rows: dict[int, int] = {}
        self._minibatch_since: dict[int, int] = {}
        #: Per subtask: the checkpoint barrier being aligned, and the channels it came on so far.
        self._barriers: dict[int, tuple[int, set[int]]] = {}
        #: Per subtask aligning a barrier: what came after it on channels that delivered it, in order.
        self._parked: dict[int, list[tuple[int, Element]]] = {}
        #: Spread over several processes (``Placement``): the subtasks that run here, those that
        #: run elsewhere (elements for them go to ``placement.send``), and the checkpoint being taken.
        self._placement = placement
        self._sources_stopped = False
        self._readers_closed = False
        self._local: set[int] = set()
        self._remote: set[int] = set()
        self._snapshot: _SubtaskSnapshots | None = None
        self._snapshots_done = 0
        self._readers: dict[int, SourceReader] = {}
        self._writers: dict[int, SinkWriter] = {}
        self._operators: dict[int, object] = {}
        self._late_outputs: dict[int, int] = {}
        self._proctime_windows: list[int] = []
        self._tasks: dict[int, TaskContext] = {}
        self._downstream: dict[int, list[int]] = defaultdict(list)
        self._open_inputs: dict[int, int] = {}
        self._source_subtasks: set[int] = set()
        self._without_input: list[int] = []
        # Per node: the watermark of each input, and the watermark the node last forwarded.
        self._input_watermarks: dict[int, dict[int, int]] = defaultdict(dict)
        self._watermarks: dict[int, int] = {}
        #: Per source subtask that keeps splits (``SourceReader.splits``): each split's watermark,
        #: and when it last had rows.
        self._split_watermarks: dict[int, dict[str, int]] = {}
        self._split_active: dict[int, dict[str, float]] = {}
        # Sources that have had no rows for their idle timeout do not hold watermarks back.
        self._idle: set[int] = set()
        #: Spread over processes: the senders elsewhere that said they are idle, and what each
        #: sender here last told each receiver elsewhere (``_announce_idleness``).
        self._remote_idle: set[int] = set()
        self._idleness_told: dict[tuple[int, int], bool] = {}
        self._last_active: dict[int, int] = {}
        self._idle_timeouts: dict[int, int] = {}
        self._ended: set[int] = set()
        self._started = time.perf_counter()
        self._rates = Rates(self._started)
        #: Those that read ``metrics`` while the job runs (a Prometheus endpoint, a dashboard, the
        #: terminal view): while there are any, the job's thread refreshes it every second.
        self.observers = 0
        self._published = self._started
        self.metrics_endpoint = None
        self.finished = False
        self._failed = False
        self.warnings: list[str] = []
        self._stop_requested = False
        self._checkpointing: _Checkpointing | None = None
        self._state_backend = None
        self._scratch: str | None = None
        #: Stable ids of sources, sinks and stateful operators: what a checkpoint's contents are
        #: filed under, so that a changed pipeline finds its state (docs/checkpoints.md).
        self.uids = stable_ids(plan)
        try:
            self._open()
            self._checkpointing = _Checkpointing.configure(self)
            self._serve_metrics()
        except BaseException:
            self._abort()
            raise

    # -- set-up

    def _layout(self) -> None:
        """Decide each node's subtasks and wire their channels. A source is split over every
        subtask when its connector can split it; an exchange runs beside its input and spreads
        rows over the subtasks of the node below; a node behind an exchange runs ``parallelism``
        subtasks, one subtask when the exchange sends it everything; any other node runs as many
        as its widest input, subtask ``i`` reading subtask ``i`` (modulo its count) above."""
        count: dict[int, int] = {}
        for node in self.plan.nodes:
            inputs = [self._nodes[i] for i in node.inputs]
            if isinstance(node, Source):
                splittable = self._connector(node.connector).splittable
                count[node.id] = self.parallelism if splittable else 1
            elif isinstance(node, Exchange):
                count[node.id] = count[node.input]
            elif any(isinstance(i, Exchange) for i in inputs):
                single = all(i.distribution.kind == "single" for i in inputs if isinstance(i, Exchange))
                count[node.id] = 1 if single else self.parallelism
            else:
                count[node.id] = max((count[i.id] for i in inputs), default=1)
        for node in self.plan.nodes:
            self._subtasks[node.id] = [subtask_id(node.id, j) for j in range(count[node.id])]
            for j, sid in enumerate(self._subtasks[node.id]):
                self._node_of[sid] = node
                self._index_of[sid] = j
                if self._placement is None or self._placement.runs_here(j):
                    self._local.add(sid)
                else:
                    self._remote.add(sid)
        consumers: dict[int, list[int]] = defaultdict(list)
        for node in self.plan.nodes:
            for index, upstream in enumerate(node.inputs):
                consumers[upstream].append(node.id)
                mine = self._subtasks[node.id]
                for j, up in enumerate(self._subtasks[upstream]):
                    targets = mine if isinstance(self._nodes[upstream], Exchange) else [mine[j % len(mine)]]
                    for target in targets:
                        self._channels[target].append(up)
                        self._channel_input[(target, up)] = index
                        self._open_channels[(target, index)] += 1
                        self._downstream[up].append(target)
        for node in self.plan.nodes:
            if isinstance(node, Exchange):
                (below,) = consumers[node.id]
                for sid in self._subtasks[node.id]:
                    self._routes[sid] = self._subtasks[below]
                if len(self._subtasks[below]) > 1 and self._placement is None:
                    # In one process, rows wait for the end of the round (_hold). Spread over
                    # processes, each goes at once on its own channel: merged, rows of several
                    # senders would pass one sender's barrier.
                    self._exchanges.append(node.id)  # in plan order: upstream ones first
                    self._buffering.update(self._subtasks[node.id])
                    self._buffers[node.id] = [[] for _ in self._subtasks[below]]
                    self._buffered_rows[node.id] = [0] * len(self._subtasks[below])
        self._required_distributions_hold()

    def _required_distributions_hold(self) -> None:
        """Every node that needs its input spread by key (or gathered) gets it from an exchange,
        or from a node whose rows are already spread that way: a plan that breaks this would give
        wrong results at a parallelism above 1, so it does not run."""
        for node in self.plan.nodes:
            for upstream, required in zip(node.inputs, node.requires(), strict=True):
                given = self._nodes[upstream]
                if required.kind == "forward" or (isinstance(given, Exchange) and given.distribution == required):
                    continue
                if self.parallelism == 1 or len(self._subtasks[node.id]) == 1 == len(self._subtasks[upstream]):
                    continue
                if _keeps_distribution(given, required):
                    continue
                raise CompilerBug(f"node {node.id} needs its input {upstream} distributed as {required!r}, and the "
                                  "plan has no exchange for it: compile the pipeline again (clink compile)")

    def _open(self) -> None:
        self._layout()
        self._lookups = self._looked_up_tables()
        for node in self.plan.nodes:
            subtasks = self._subtasks[node.id]
            for j, sid in enumerate(subtasks):
                self._tasks[sid] = TaskContext(runtime=self.ctx, node_id=node.id, subtask=j,
                                               parallelism=len(subtasks),
                                               key_groups=key_group_range(j, len(subtasks), self.max_parallelism))
                self._open_inputs[sid] = len(self._channels[sid])
                if not self._channels[sid] and not isinstance(node, Source) and sid in self._local:
                    self._without_input.append(sid)
        for node in self.plan.nodes:
            subtasks = self._subtasks[node.id]
            for j, sid in enumerate(subtasks):
                if sid in self._local:
                    self._meters[sid] = Meter()
                    if isinstance(node, Sink):
                        self._latency[sid] = Latency()
                        self._ingestion_latency[sid] = Latency()
                    self._open_subtask(node, sid, j, len(subtasks))

    def _open_subtask(self, node: Node, sid: int, index: int, count: int) -> None:
        if isinstance(node, Source) and any(path[0] is node for path in self._lookups.values()):
            # Read by key by the lookup join above it: as a stream it ends at once, empty.
            self._readers[sid] = _Empty()
            self._source_subtasks.add(sid)
        elif isinstance(node, Source):
            connector = self._connector(node.connector)
            if connector.create_source is None:
                raise UsageError(f"connector {node.connector!r} cannot be read (table {node.table!r})")
            spec = TableSpec(name=node.table, schema=node.schema, table_schema=node.table_schema,
                             options=node.options, predicate=node.predicate() if node.predicate else None,
                             subtask=index, parallelism=count, primary_key=node.primary_key,
                             partition_columns=node.partition_columns, fields=node.fields,
                             kept_values=node.kept_values,
                             changelog=node.changelog if node.changelog.updating else None)
            self._readers[sid] = connector.create_source(spec, self.ctx)
            self._source_subtasks.add(sid)
            timeout = node.idle_timeout if node.idle_timeout is not None else _duration_ms(
                self.ctx.get("table.exec.source.idle-timeout"))
            if timeout:
                self._idle_timeouts[sid] = timeout
        elif (kind := kind_of(node)) is not None:
            uid = self.uids[node.id]
            env = OperatorEnv(task=self._tasks[sid],
                              input_schemas=tuple(self._nodes[i].schema for i in node.inputs),
                              backend=self._backend(), operator_id=uid if count == 1 else f"{uid}.{index}",
                              ttl_ms=_duration_ms(self.ctx.get("table.exec.state.ttl")),
                              input_modes=tuple(self._nodes[i].changelog for i in node.inputs))
            self._operators[sid] = kind.open(node, env)
            if node.id in self._lookups:
                self._operators[sid].lookup_rows = _LookupInput(*self._lookups[node.id], self._tasks[sid],
                                                                self._connector(self._lookups[node.id][0].connector),
                                                                self.ctx)
            if self._minibatch_size and isinstance(node, GroupAggregate):
                self._minibatches[sid] = []
                self._minibatch_rows[sid] = 0
            if getattr(node, "late_output", None) is not None:
                self._late_outputs[sid] = subtask_id(node.late_output, index)
            if getattr(node, "proctime", False):
                self._proctime_windows.append(sid)
        elif isinstance(node, Sink):
            connector = self._connector(node.connector)
            if connector.create_sink is None:
                raise UsageError(f"connector {node.connector!r} cannot be written (table {node.table!r})")
            if count != 1:
                raise CompilerBug(f"sink {node.table!r} would run as {count} subtasks; the plan needs an exchange "
                                  "that gathers its rows")
            spec = TableSpec(name=node.table, schema=node.schema, table_schema=node.schema, options=node.options,
                             changelog=node.changelog, primary_key=node.primary_key,
                             partition_columns=node.partition_columns)
            self._writers[sid] = connector.create_sink(spec, self.ctx)

    def _backend(self):
        """The job's state backend (``'state.backend'``), made on first use."""
        if self._state_backend is None:
            self._state_backend = make_state_backend(self.ctx, self)
        return self._state_backend

    def _looked_up_tables(self) -> dict[int, tuple[Source, list[Chain], tuple[str, ...]]]:
        """The lookup joins whose right table is read by key, by join id: the table's source,
        the chains between it and the join, and the source columns the join's keys are.

        A connector that can look rows up (``create_lookup``) serves a lookup join whose right
        input is its source alone, through exchanges and stateless chains (filters, computed
        columns) whose join keys are source columns by name; otherwise the table is read whole
        before left rows are matched."""
        consumers: dict[int, int] = {}
        for node in self.plan.nodes:
            for i in node.inputs:
                consumers[i] = consumers.get(i, 0) + 1
        found = {}
        for join in self.plan.nodes:
            if not isinstance(join, Join) or not join.lookup:
                continue
            chains, node = [], self._nodes[join.right]
            while isinstance(node, (Exchange, Chain)) and consumers.get(node.id) == 1:
                if isinstance(node, Chain):
                    chains.append(node)
                node = self._nodes[node.input]
            if not isinstance(node, Source) or consumers.get(node.id) != 1:
                continue
            connector = self.ctx.connectors.get(node.connector)
            if connector is None or connector.create_lookup is None:
                continue
            right = self._nodes[join.right].schema
            keys = tuple(right.field(k).name for k in join.right_keys)
            if connector.looks_up is not None and not connector.looks_up(node.options, node.primary_key or (), keys):
                continue
            if all(k in node.schema.names and node.schema.field(k).type == right.field(k).type for k in keys):
                found[join.id] = (node, chains[::-1], keys)
        return found

    def _connector(self, name: str):
        connector = self.ctx.connectors.get(name)
        if connector is None:
            raise UsageError(f"unknown connector {name!r}; this context has: {', '.join(self.ctx.connectors.names())}")
        return connector

    @property
    def unbounded_sources(self) -> list[str]:
        tables = [self._node_of[i].table for i, r in self._readers.items() if not r.bounded]
        return list(dict.fromkeys(tables))  # a table read by two queries is listed once

    # -- running

    def step(self) -> bool:
        """Poll every source once and push what they give; True if any work was done."""
        if self.finished:
            return False
        progressed = False
        try:
            for sid in self._without_input:
                self._end(sid)  # a subtask that nothing reaches (its inputs run fewer) is done
            self._without_input = []
            self._child_ns = 0
            for node_id, reader in self._readers.items():
                if node_id in self._ended or self._sources_stopped:
                    continue
                meter = self._meters[node_id]
                started = time.perf_counter_ns()
                batch = reader.poll()
                polled = time.perf_counter_ns()
                meter.busy_ns += polled - started
                has_rows = batch is not None and batch.num_rows > 0
                skipped = reader.time_rows()
                self._check_idle(node_id, has_rows or skipped is not None)
                if not has_rows and node_id in self._split_watermarks and node_id in self._idle_timeouts:
                    # A split going idle may let the source's watermark move on.
                    self._advance_split_watermarks(node_id, None)
                if has_rows:
                    progressed = True
                    meter.records_in += batch.num_rows
                    meter.bytes_in += batch.get_total_buffer_size()
                    self._ingested_ms = wall_ms()
                    self._push(node_id, batch)
                    self._advance_source_watermark(node_id, batch, skipped)
                    meter.blocked_ns += time.perf_counter_ns() - polled
                elif skipped is not None:
                    progressed = True
                    self._advance_source_watermark(node_id, None, skipped)
                if self._checkpointing is not None:
                    # Rows a source left out (none of its readers keeps them) count as read.
                    self._checkpointing.rows += (batch.num_rows if has_rows else 0) + reader.left_out()
                if reader.finished:
                    progressed = True
                    self._end(node_id)
            self._flush_exchanges()
            if self._minibatch_since:
                now = self.ctx.clock()
                for sid, since in list(self._minibatch_since.items()):
                    if now - since >= self._minibatch_latency:
                        self._flush_minibatch(sid)
            # Windows over processing time fire as the clock passes their end.
            for node_id in self._proctime_windows:
                if node_id not in self._ended and not self._sources_stopped:
                    with _sql_errors(self._node_of[node_id]):
                        fired = self._operators[node_id].on_watermark(self.ctx.clock())
                    self._emit_all(node_id, fired)
            # Between rounds nothing is in flight: every node has handled every element sent so
            # far, which is the point a checkpoint's barriers would align on. Once every source
            # has ended, the final checkpoint comes at the end.
            if (self._checkpointing is not None and self._checkpointing.due()
                    and not self._source_subtasks <= self._ended):
                self.checkpoint()
            if len(self._ended) == len(self._local):
                self._finish()
            if self.observers and time.perf_counter() - self._published >= 1.0:
                self.refresh_metrics()
        except BaseException as exc:
            self._fail(exc)
        return progressed

    def _serve_metrics(self) -> None:
        """With ``'metrics.port'``: a Prometheus endpoint for this job (this worker's part of it)."""
        port = self.ctx.get("metrics.port")
        if port is None or str(port).strip() == "":
            return
        from clink.runtime.prometheus import Endpoint, parse_port

        worker = self._placement.worker if self._placement is not None else 0
        labels = {"job": self.ctx.get("pipeline.name") or self.plan.name}
        if self._placement is not None:
            labels["worker"] = str(worker)
        self.metrics_endpoint = Endpoint(lambda: self.metrics, port=parse_port(str(port), worker),
                                         host=self.ctx.get("metrics.host") or "127.0.0.1", labels=labels)
        self.observers += 1
        self.refresh_metrics()

    def advance_watermark(self, table: str, ms: int) -> None:
        """Move the watermark of every source subtask that reads ``table`` to ``ms`` (ms since
        the epoch), as if its rows had allowed it; a watermark never goes back, so a lower one
        changes nothing. What a driver that knows its input's event time uses (``clink test``'s
        watermark steps) instead of waiting for rows to move it."""
        if self.finished:
            return
        try:
            for sid in list(self._readers):
                if self._node_of[sid].table == table and sid not in self._ended:
                    self._source_watermark(sid, ms)
            self._flush_exchanges()
        except BaseException as exc:
            self._fail(exc)

    def checkpoint(self) -> int:
        """Take a checkpoint now; return its id. The job needs a state directory."""
        if self._checkpointing is None:
            raise UsageError("checkpoints need a state directory (clink run --state-dir DIR, "
                             "plan.start(state_dir=...), or RuntimeContext(state_dir=...))")
        return self._checkpointing.take()

    def operators(self) -> list[dict]:
        """The stateful operators, sources and sinks by stable id (what ``state`` and checkpoints
        name them by): ``id``, ``kind`` (``group``, ``window``, ... ``source``, ``sink``), ``position``
        in the SQL and ``subtasks``."""
        out = []
        for node in self.plan.nodes:
            uid = self.uids.get(node.id)
            if uid is None:
                continue
            kind = kind_of(node)
            out.append({"id": uid, "kind": kind.name if kind else "source" if isinstance(node, Source) else "sink",
                        "position": node.span, "subtasks": len(self._subtasks[node.id])})
        return out

    def state(self, operator_id: str, *, state: str | None = None) -> pa.Table:
        """Stateful operator ``operator_id``'s keyed state as of the last step, over all its
        subtasks, as a table (docs/state.md, "Queryable state"); ``state`` picks one state of an
        operator that keeps several, shown as stored."""
        from clink.runtime.state_view import raw_tables, readable, view_of

        stateful = {self.uids[n.id]: n for n in self.plan.nodes if kind_of(n) is not None}
        node = stateful.get(operator_id)
        if node is None:
            known = ", ".join(sorted(stateful)) or "none: the pipeline keeps no state"
            raise UsageError(f"no stateful operator {operator_id!r}; the operators with state are: {known}")
        if self._readers_closed:
            raise UsageError(f"the job has ended and its state is closed; read operator {operator_id} from its "
                             "last checkpoint instead (clink state DIR --operator ID)")
        operators = [self._operators[sid] for sid in self._subtasks[node.id] if sid in self._operators]
        for op in operators:
            op.settle()
        states = [op.operator_state for op in operators]
        descriptors = list(states[0].descriptors.values()) if states else []
        if state is not None:
            names = [d.name for d in descriptors]
            if state not in names:
                raise UsageError(f"operator {operator_id} keeps no state {state!r}; it keeps: {', '.join(names)}")
            descriptors = [d for d in descriptors if d.name == state]
        raw = raw_tables(states, descriptors, self.max_parallelism)
        view = view_of(node, kind_of(node).name) if state is None else {}
        return readable(view, raw)

    def run(self, *, idle_sleep: float = 0.005, stop_after_checkpoints: int | None = None,
            each_round=None) -> Metrics:
        """Run until every source has ended (forever, for an unbounded source), or until a stop
        is requested (``request_stop``, or ``stop_after_checkpoints`` checkpoints taken).
        ``each_round()``, if given, is called after every round (a live view redraws from it)."""
        try:
            while not self.finished:
                if not self.step():
                    time.sleep(idle_sleep)
                if each_round is not None:
                    each_round()
                if stop_after_checkpoints is not None and self.metrics.checkpoints >= stop_after_checkpoints:
                    self._stop_requested = True
                if self._stop_requested and not self.finished:
                    self.stop_with_checkpoint()
        except KeyboardInterrupt:
            self.cancel()
            raise
        return self.metrics

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def request_stop(self) -> None:
        """Ask the run to stop at the next point between rounds (safe from a signal handler)."""
        self._stop_requested = True

    def stop_with_checkpoint(self) -> int | None:
        """Stop between rounds: take a last checkpoint (if the job has a state directory), then
        end; a later run on the same state directory continues from exactly here. A job that has
        already finished took its final checkpoint at the end: this returns None."""
        if self.finished:
            return None
        checkpoint_id = self._checkpointing.take() if self._checkpointing is not None else None
        self.cancel()
        self.metrics.stopped_at = checkpoint_id
        self.refresh_metrics()
        return checkpoint_id

    def cancel(self) -> None:
        """Stop now: sinks are aborted, so nothing half-written stays behind. A job that has
        finished has its sources and operators closed (their files and connections), if they
        are not already."""
        if not self.finished:
            self._abort()
            self.finished = True
        else:
            self._close_readers()

    # -- spread over processes (``Placement``)

    def inject_barriers(self, checkpoint_id: int) -> None:
        """Start checkpoint ``checkpoint_id`` in this worker: each source subtask here records its
        position and sends the barrier; every other subtask takes its part once the barrier has
        come on all its open channels, or at once if it has ended. ``placement.snapshot_done``
        gets the parts when all are taken."""
        if checkpoint_id <= self._snapshots_done:
            return
        snapshot = self._snapshot_of(checkpoint_id)
        assert snapshot is not None
        snapshot.triggered = True
        for sid in self._readers:
            ended = sid in self._ended
            snapshot.take(sid)
            if not ended:
                self._emit(sid, Barrier(checkpoint_id))
        snapshot.done_if_complete()

    def stop_sources(self) -> None:
        """Read nothing more (after the barrier of a stop's checkpoint): what is in flight is
        still handled, so every subtask takes its part of that checkpoint, and nothing comes after
        it. Windows over processing time stop firing too."""
        self._sources_stopped = True

    def deliver(self, target: int, sender: int, element: Element) -> None:
        """An element that subtask ``sender`` in another process sent to subtask ``target`` here."""
        if self.finished:
            return
        try:
            self._child_ns = 0
            self._ingested_ms = None  # read by another worker: when is not known here
            self._receive(target, sender, element)
            if len(self._ended) == len(self._local):
                self._finish()
        except BaseException as exc:
            self._fail(exc)

    def commit_checkpoint(self, checkpoint_id: int, handles: dict) -> None:
        """Checkpoint ``checkpoint_id`` is complete: the sinks here make its output visible."""
        for sid, writer in self._writers.items():
            writer.commit(checkpoint_id, handles.get(self.uids[self._node_of[sid].id]))
        for reader in self._readers.values():
            reader.checkpoint_complete(checkpoint_id)

    def close(self) -> None:
        """Every subtask here has ended and the last checkpoint (if any) has committed: close the
        sinks (making their last output visible), the sources and the operators."""
        if self._checkpointing is not None:
            for writer in self._writers.values():
                writer.close()
        self._close_readers()
        self.refresh_metrics()

    def _snapshot_of(self, checkpoint_id: int) -> _SubtaskSnapshots | None:
        """The parts of checkpoint ``checkpoint_id`` this worker is taking; None once it has
        taken them all (its barrier still passes stateless subtasks here after that: were a
        new set of parts begun, it would write the state of subtasks that end later over the
        files of a checkpoint that may have completed)."""
        if checkpoint_id <= self._snapshots_done:
            return None
        if self._snapshot is None or self._snapshot.id != checkpoint_id:
            self._snapshot = _SubtaskSnapshots(self, checkpoint_id)
            self._snapshot.take_ended()
        return self._snapshot

    def _advance_source_watermark(self, node_id: int, batch: pa.RecordBatch | None,
                                  skipped: pa.RecordBatch | None = None) -> None:
        """Emit the source's watermark after a batch, if the batch moved it forward. ``skipped``:
        rows the reader left out that move it too (``SourceReader.time_rows``), as in a run that
        kept them; one watermark covers both."""
        node = self._node_of[node_id]
        if node.watermark is None:
            return
        try:
            values = node.watermark(batch, self._tasks[node_id]) if batch is not None else None
            more = node.watermark(skipped, self._tasks[node_id]) if skipped is not None else None
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise PipelineError(f"cannot compute the watermark of {node.table!r}: {exc}",
                                sql_position_of(exc)) from exc
        reader = self._readers[node_id]
        if reader.splits():
            if batch is not None:
                self._advance_split_watermarks(node_id, batch, values)
            return
        marks = [m for m in (max_epoch_ms(v) for v in (values, more) if v is not None) if m is not None]
        self._source_watermark(node_id, max(marks) if marks else None)

    def _source_watermark(self, node_id: int, candidate: int | None) -> None:
        if candidate is not None and candidate > self._watermarks.get(node_id, -(2**63)):
            self._watermarks[node_id] = candidate
            self._tasks[node_id].watermark = candidate
            self._emit(node_id, Watermark(candidate))

    def _advance_split_watermarks(self, node_id: int, batch: pa.RecordBatch | None, values=None) -> None:
        """A reader that keeps splits: each split's watermark is the largest its rows allowed;
        the source's is the least over its splits, leaving out those that had no rows for the
        idle timeout (all of them idle: the source itself is idle)."""
        reader = self._readers[node_id]
        splits = reader.splits()
        now = self.ctx.clock()
        marks = self._split_watermarks.setdefault(node_id, {})
        active = self._split_active.setdefault(node_id, {})
        for split in splits:
            active.setdefault(split, now)
        if batch is not None and batch.num_rows:
            rows = reader.split_rows()
            if values is None or rows is None or len(rows) != batch.num_rows:
                raise PipelineError(f"the source of {self._node_of[node_id].table!r} keeps splits but did not say "
                                    "which split each row is of")
            if isinstance(values, pa.Scalar):
                values = pa.repeat(values, batch.num_rows)
            ms = pc.cast(pc.cast(values, pa.timestamp("ms", tz=values.type.tz)), pa.int64())
            valid = pc.is_valid(ms).to_numpy(zero_copy_only=False)
            ms = pc.fill_null(ms, 0).to_numpy(zero_copy_only=False)
            # One step per split the batch holds rows of (a few partitions), not per row.
            for index in np.unique(rows):
                split = splits[int(index)]
                active[split] = now
                mine = (rows == index) & valid
                if mine.any():
                    marks[split] = max(marks.get(split, -(2**63)), int(ms[mine].max()))
        timeout = self._idle_timeouts.get(node_id)
        live = [s for s in splits if timeout is None or now - active[s] < timeout]
        if not live or any(s not in marks for s in live):
            return
        self._source_watermark(node_id, min(marks[s] for s in live))

    def _push(self, node_id: int, batch: pa.RecordBatch) -> None:
        self._emit(node_id, Batch(batch))

    def _emit(self, node_id: int, element: Element) -> None:
        """Send ``element``, produced by ``node_id``, to every node downstream of it (a window's
        or OVER's late-row output gets its late rows only, and every other element)."""
        late_output = self._late_outputs.get(node_id)
        for target_id in self._downstream[node_id]:
            if target_id == late_output and isinstance(element, Batch):
                continue
            self._receive(target_id, node_id, element)

    def _receive(self, target_id: int, from_id: int, element: Element) -> None:
        if target_id in self._remote:
            started = time.perf_counter_ns()
            if type(element) is Batch and (sender := self._meters.get(from_id)) is not None:
                sender.records_out += element.data.num_rows
                sender.bytes_out += element.data.get_total_buffer_size()
            self._placement.send(target_id, from_id, element)
            self._child_ns += time.perf_counter_ns() - started
            return
        if self._barriers:
            aligning = self._barriers.get(target_id)
            if aligning is not None and from_id in aligning[1]:
                # This channel has passed the barrier: what follows waits until every channel has.
                self._parked.setdefault(target_id, []).append((from_id, element))
                return
        meter = self._meters[target_id]
        if type(element) is Batch:
            rows, size = element.data.num_rows, element.data.get_total_buffer_size()
            meter.records_in += rows
            meter.bytes_in += size
            if (sender := self._meters.get(from_id)) is not None:
                sender.records_out += rows
                sender.bytes_out += size
        if not self._timed:
            self._handle(target_id, from_id, element)
            return
        # Busy time is the subtask's own; the time spent in the subtasks it feeds (measured by
        # their own _receive, summed in _child_ns) is time it was blocked on its output.
        started = time.perf_counter_ns()
        outer, self._child_ns = self._child_ns, 0
        try:
            self._handle(target_id, from_id, element)
        finally:
            total = time.perf_counter_ns() - started
            meter.busy_ns += total - self._child_ns
            meter.blocked_ns += self._child_ns
            self._child_ns = outer + total

    def _handle(self, target_id: int, from_id: int, element: Element) -> None:
        node = self._node_of[target_id]
        match element:
            case Batch(data=batch):
                if isinstance(node, Chain):
                    out = self._run_chain(node, target_id, batch)
                    if out.num_rows:
                        self._emit(target_id, Batch(out))
                elif isinstance(node, Exchange):
                    self._route(target_id, node, batch)
                elif isinstance(node, Sink):
                    self._writers[target_id].write(batch)
                    self._meters[target_id].records_out += batch.num_rows
                    if self._timed:
                        self._measure_latency(target_id, node, batch)
                elif isinstance(node, Union):
                    if batch.num_columns < len(node.schema):
                        # A batch of an append-only input of an updating union: its rows are inserts.
                        kinds = pa.repeat(pa.scalar(INSERT, node.schema.field(ROWKIND_COLUMN).type), batch.num_rows)
                        element = Batch(pa.RecordBatch.from_arrays([*batch.columns, kinds], schema=node.schema))
                    elif not batch.schema.equals(node.schema):
                        # An input whose column is NOT NULL where another's may be NULL.
                        element = Batch(pa.RecordBatch.from_arrays(batch.columns, schema=node.schema))
                    self._emit(target_id, element)
                elif target_id in self._minibatches:
                    self._wait_in_minibatch(target_id, batch)
                elif (operator := self._operators.get(target_id)) is not None:
                    with _sql_errors(node):
                        out = operator.process(batch, self._channel_input[(target_id, from_id)])
                    self._emit_all(target_id, out)
                    self._drain_late_rows(target_id, operator)
                else:
                    raise CompilerBug(f"node {node.id} of type {type(node).__name__} cannot take a batch")
            case Watermark(ts=ts):
                inputs = self._input_watermarks[target_id]
                inputs[from_id] = max(ts, inputs.get(from_id, ts))
                self._evaluate_watermark(target_id)
            case Idleness(idle=idle):
                if idle:
                    self._remote_idle.add(from_id)
                    if self._is_idle(target_id):
                        self._went_idle(target_id)
                    else:
                        self._evaluate_watermark(target_id)
                else:
                    self._remote_idle.discard(from_id)
                self._announce_idleness()
            case Barrier(checkpoint_id=checkpoint_id):
                if target_id in self._buffering:
                    self._flush(node.id)
                # A subtask passes a barrier on once it has come on every open channel (aligned).
                current, seen = self._barriers.get(target_id, (checkpoint_id, set()))
                if current != checkpoint_id or not seen:
                    current, seen = checkpoint_id, set()
                    self._meters[target_id].aligning_since = time.perf_counter_ns()
                seen.add(from_id)
                self._barriers[target_id] = (current, seen)
                if len(seen) >= self._open_inputs[target_id]:
                    self._aligned(target_id)
            case EndOfInput():
                if target_id in self._buffering:
                    self._flush(node.id)
                if target_id in self._minibatches:
                    self._flush_minibatch(target_id)
                index = self._channel_input[(target_id, from_id)]
                self._open_channels[(target_id, index)] -= 1
                operator = self._operators.get(target_id)
                if operator is not None and self._open_channels[(target_id, index)] == 0:
                    # Input ``index`` has ended once it has ended on every channel.
                    self._emit_all(target_id, operator.end_of_input(index))
                self._open_inputs[target_id] -= 1
                aligning = self._barriers.get(target_id)
                if aligning is not None and len(aligning[1]) >= self._open_inputs[target_id]:
                    self._aligned(target_id)  # the channels still open had all passed the barrier
                if self._open_inputs[target_id] == 0:
                    self._end(target_id)

    def _aligned(self, target_id: int) -> None:
        """Every open channel of ``target_id`` has delivered the barrier: the subtask takes its part
        of the checkpoint (spread over processes), passes the barrier on, then takes what waited."""
        checkpoint_id, _ = self._barriers.pop(target_id)
        meter = self._meters[target_id]
        meter.alignment_ns = time.perf_counter_ns() - meter.aligning_since
        if target_id in self._minibatches:
            self._flush_minibatch(target_id)  # what came before the barrier is in the checkpoint
        if self._placement is not None and (snapshot := self._snapshot_of(checkpoint_id)) is not None:
            snapshot.take(target_id)
        if not isinstance(self._node_of[target_id], Sink):
            self._emit(target_id, Barrier(checkpoint_id))
        for from_id, element in self._parked.pop(target_id, ()):
            self._receive(target_id, from_id, element)

    def _route(self, sid: int, node: Exchange, batch: pa.RecordBatch) -> None:
        """Send each row of ``batch`` to the subtask of the node below that the exchange's
        distribution names. With several subtasks below, each one's rows wait in the exchange
        until the end of the round (or until there are many): the subtasks below then get batches
        as large as the sources', not a share of each."""
        targets = self._routes[sid]
        distribution = node.distribution
        if len(targets) == 1:
            self._receive(targets[0], sid, Batch(batch))
        elif distribution.kind == "broadcast":
            for j in range(len(targets)):
                self._hold(sid, j, batch)
        elif distribution.kind == "hash":
            order, bounds = self._partition([batch.column(k) for k in distribution.keys], len(targets),
                                            batch.num_rows)
            # The order is a permutation of the rows: no index needs checking.
            taken = pc.take(batch, pa.array(order), boundscheck=False) if len(order) else batch
            for j in range(len(targets)):
                lo, hi = int(bounds[j]), int(bounds[j + 1])
                if hi > lo:
                    self._hold(sid, j, taken.slice(lo, hi - lo))
        else:  # forward: subtask i to subtask i, modulo the count below
            self._hold(sid, self._index_of[sid] % len(targets), batch)

    def _partition(self, keys: list[pa.Array], subtasks: int, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows ordered by the subtask (of ``subtasks``) that owns their key group, each
        subtask's rows in their order, and where each subtask's rows start and end in that order.

        Two exchanges that hash the very same key arrays (projections of one batch, such as a
        join's two inputs from one window aggregate) share the work: the last result is kept
        with its arrays, whose buffers therefore cannot be freed and their addresses reused.
        """
        identity = (subtasks, tuple(_identity(a) for a in keys))
        last = self._last_partition
        if last is not None and last[0] == identity:
            return last[2], last[3]
        from clink.runtime.state.keygroups import key_groups

        groups = key_groups(keys, self.max_parallelism, num_rows=num_rows)
        # The subtask of each row; as int16, a stable argsort is a radix sort (rows keep their order).
        owner = self._owner_of_group(subtasks)[groups]
        order = np.argsort(owner, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=subtasks))])
        self._last_partition = (identity, keys, order, bounds)
        return order, bounds

    def _owner_of_group(self, subtasks: int) -> np.ndarray:
        """Per key group, the index of the subtask (of ``subtasks``) that owns it (``key_group_range``)."""
        table = self._owners.get(subtasks)
        if table is None:
            small = np.int16 if subtasks < 2**15 else np.int32
            table = (np.arange(self.max_parallelism, dtype=np.int64) * subtasks // self.max_parallelism).astype(small)
            self._owners[subtasks] = table
        return table

    def _hold(self, sid: int, target: int, batch: pa.RecordBatch) -> None:
        if sid not in self._buffering:
            self._receive(self._routes[sid][target], sid, Batch(batch))
            return
        exchange = self._node_of[sid].id
        self._buffers[exchange][target].append(batch)
        self._buffered_rows[exchange][target] += batch.num_rows
        if self._buffered_rows[exchange][target] >= _EXCHANGE_ROWS:
            self._send(exchange, target)

    def _send(self, exchange: int, target: int) -> None:
        """The rows waiting for subtask ``target`` below ``exchange``, as one batch. They come from
        any of the exchange's subtasks (each in its order): all are channels of one input."""
        waiting = self._buffers[exchange][target]
        if waiting:
            batch = waiting[0] if len(waiting) == 1 else pa.concat_batches(waiting)
            self._buffers[exchange][target] = []
            self._buffered_rows[exchange][target] = 0
            first = self._subtasks[exchange][0]
            self._receive(self._routes[first][target], first, Batch(batch))

    def _flush(self, exchange: int) -> None:
        """Send the rows an exchange holds, then the watermarks its subtasks held back for them:
        every channel's first, then each subtask below evaluates its watermark once (not once
        per channel, which would fire its windows once per channel)."""
        for target in range(len(self._buffers[exchange])):
            self._send(exchange, target)
        held = [(sid, self._held_watermarks.pop(sid)) for sid in self._subtasks[exchange]
                if sid in self._held_watermarks]
        if not held:
            return
        targets = self._routes[held[0][0]]
        for sid, ts in held:
            for target in targets:
                inputs = self._input_watermarks[target]
                inputs[sid] = max(ts, inputs.get(sid, ts))
        for target in targets:
            self._evaluate_watermark(target)

    def _flush_exchanges(self) -> None:
        """End of a round: every exchange sends what it holds, upstream ones first (what they send
        may fill the ones below). The subtasks below get batches as large as the sources', not a
        share of each from each channel."""
        for exchange in self._exchanges:
            self._flush(exchange)

    def _evaluate_watermark(self, node_id: int) -> None:
        """A subtask's watermark is the minimum over its channels that are not idle; when it
        advances, windows that end at or before it fire, and it passes on."""
        node = self._node_of[node_id]
        inputs = self._input_watermarks[node_id]
        active = [i for i in self._channels[node_id] if not self._is_idle(i)]
        if not active or any(i not in inputs for i in active):
            return
        low = min(inputs[i] for i in active)
        if low <= self._watermarks.get(node_id, -(2**63)):
            return
        self._watermarks[node_id] = low
        if (task := self._tasks.get(node_id)) is not None:
            task.watermark = low  # what CURRENT_WATERMARK reads in this subtask from now on
        if node_id in self._minibatches:
            self._flush_minibatch(node_id)
        if isinstance(node, Sink):
            self.metrics.watermark = low
            return
        if node_id in self._buffering:
            # An exchange that holds rows passes its watermark on after them (_flush).
            self._held_watermarks[node_id] = low
            return
        operator = self._operators.get(node_id)
        if getattr(node, "proctime", False):
            # Event time means nothing to processing-time windows; the end of input fires them all.
            if low >= MAX_WATERMARK:
                with _sql_errors(node):
                    fired = operator.on_watermark(low)
                self._emit_all(node_id, fired)
        elif operator is not None:
            with _sql_errors(node):
                fired = operator.on_watermark(low)
            self._emit_all(node_id, fired)
        self._emit(node_id, Watermark(low))

    def _is_idle(self, node_id: int) -> bool:
        if not self._idle and not self._remote_idle:
            return False  # no source is idle: nothing below one is either
        if node_id in self._remote:
            return node_id in self._remote_idle  # as its process last said
        if node_id in self._source_subtasks:
            return node_id in self._idle
        channels = self._channels[node_id]
        return bool(channels) and all(self._is_idle(i) for i in channels)

    def _check_idle(self, node_id: int, active: bool) -> None:
        """Mark a source idle after its idle timeout without rows, and active again when rows come."""
        timeout = self._idle_timeouts.get(node_id)
        if timeout is None:
            return
        now = self.ctx.clock()
        if active:
            self._last_active[node_id] = now
            if node_id in self._idle:
                self._idle.discard(node_id)
                self._announce_idleness()  # before its rows go out
            return
        last = self._last_active.setdefault(node_id, now)
        if node_id not in self._idle and now - last >= timeout:
            self._idle.add(node_id)
            self._went_idle(node_id)
            self._announce_idleness()

    def _announce_idleness(self) -> None:
        """Spread over processes: tell each receiver elsewhere when what a sender here reads
        from has gone idle or is active again, in band on their channel."""
        if self._placement is None:
            return
        for sid in self._local:
            for target in self._downstream[sid]:
                if target in self._remote:
                    idle = self._is_idle(sid)
                    if self._idleness_told.get((sid, target), False) != idle:
                        self._idleness_told[(sid, target)] = idle
                        self._placement.send(target, sid, Idleness(idle))

    def _went_idle(self, node_id: int) -> None:
        """Without ``node_id``, the nodes below may be able to move on; a node all of whose
        inputs are idle is idle too, and passes that on (to nodes elsewhere, in band:
        ``_announce_idleness``)."""
        for target in self._downstream[node_id]:
            if target in self._remote:
                continue
            if self._is_idle(target):
                self._went_idle(target)
            else:
                self._evaluate_watermark(target)

    def _wait_in_minibatch(self, sid: int, batch: pa.RecordBatch) -> None:
        """Hold a group aggregate's input until its mini-batch is full (or its watermark moves,
        a barrier or the end comes, or it has waited 'allow-latency'): aggregated together, the
        rows of many batches update each key once, and what follows sees fewer changes."""
        self._minibatches[sid].append(batch)
        self._minibatch_rows[sid] += batch.num_rows
        self._minibatch_since.setdefault(sid, self.ctx.clock())
        if self._minibatch_rows[sid] >= self._minibatch_size:
            self._flush_minibatch(sid)

    def _flush_minibatch(self, sid: int) -> None:
        waiting = self._minibatches[sid]
        if not waiting:
            return
        self._minibatches[sid] = []
        self._minibatch_rows[sid] = 0
        self._minibatch_since.pop(sid, None)
        batch = waiting[0] if len(waiting) == 1 else pa.concat_batches(waiting)
        operator = self._operators[sid]
        with _sql_errors(self._node_of[sid]):
            out = operator.process(batch, 0)
        self._emit_all(sid, out)
        self._drain_late_rows(sid, operator)

    def _emit_all(self, node_id: int, batches: list[pa.RecordBatch]) -> None:
        for batch in batches:
            if batch.num_rows:
                self._emit(node_id, Batch(batch))

    def _run_chain(self, node: Chain, sid: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            return node.fn(batch, self._tasks[sid])
        except ClinkError:
            raise
        except (EvaluationError, pa.ArrowException, ArithmeticError, ValueError, TypeError) as exc:
            raise PipelineError(_message(exc), sql_position_of(exc)) from exc

    def _end(self, node_id: int) -> None:
        """``node_id`` has no more input: close it, or pass the end downstream."""
        if node_id in self._ended:
            return
        self._ended.add(node_id)
        if self._snapshot is not None:
            self._snapshot.take(node_id)  # its state is final: its part of the checkpoint is taken now
        node = self._node_of[node_id]
        if isinstance(node, Sink):
            if self._checkpointing is None:
                self._writers[node_id].close()
            # With checkpoints, the last output is committed by a final checkpoint (_finish), so a
            # crash after the end does not replay it.
            self.refresh_metrics()
            return
        if isinstance(node, Source):
            # A bounded source ends with the final watermark, so every open window fires.
            self._emit(node_id, Watermark(MAX_WATERMARK))
        self._emit(node_id, EndOfInput())

    def _finish(self) -> None:
        if self._placement is not None:
            self.finished = True  # the worker takes the last checkpoint with the others, then close()
            return
        if self._checkpointing is not None:
            self._checkpointing.take()
            for writer in self._writers.values():
                writer.close()
        self.finished = True
        self._close_readers()
        self.refresh_metrics()

    def _drain_late_rows(self, node_id: int, operator) -> None:
        """After an operator has taken a batch: send the rows it found late to the node's
        late-row output if it has one (they are counted in its ``late_records`` either way),
        and let go of them, so that nothing piles up on an endless input. Every stateful
        operator exposes ``late_rows``, a list the executor empties."""
        late = operator.late_rows
        if late:
            late_output = self._late_outputs.get(node_id)
            if late_output is not None:
                for rows in late:
                    if rows.num_rows:
                        self._receive(late_output, node_id, Batch(rows))
            late.clear()
        self.metrics.peak_state_bytes = max(self.metrics.peak_state_bytes, operator.metrics.get("state_bytes", 0))

    def refresh_metrics(self) -> None:
        """Bring ``metrics`` up to date with the readers and writers (the run does it at the end)."""
        # Keyed by table; two sources reading one table (two queries over it) add up.
        records_in: dict[str, int] = defaultdict(int)
        skipped: dict[str, int] = defaultdict(int)
        records_out: dict[str, int] = defaultdict(int)
        for node_id, reader in self._readers.items():
            table = self._node_of[node_id].table
            records_in[table] += reader.metrics.get("records_in", 0)
            skipped[table] += reader.metrics.get("skipped_records", 0)
        for node_id, writer in self._writers.items():
            records_out[self._node_of[node_id].table] += writer.metrics.get("rows_out", 0)
        late: dict[int, int] = defaultdict(int)
        for sid, operator in self._operators.items():
            late[self._node_of[sid].id] += operator.metrics.get("late_records", 0)
        self.metrics.late_records.update(late)
        self.metrics.records_in = dict(records_in)
        self.metrics.skipped_records = dict(skipped)
        self.metrics.records_out = dict(records_out)
        self.metrics.seconds = time.perf_counter() - self._started
        self.metrics.operators = self.operator_rows()
        self.metrics.splits = self.split_rows()
        self._published = time.perf_counter()

    def _measure_latency(self, sid: int, node: Sink, batch: pa.RecordBatch) -> None:
        """The latency of the rows a sink writes: from their event time (the query's time
        attribute, when its result has one) and from when the source read the rows whose
        arrival made them (in this process; unknown for rows that came from another worker)."""
        now = wall_ms()
        if self._ingested_ms is not None:
            self._ingestion_latency[sid].add_one(now - self._ingested_ms, batch.num_rows)
        column = getattr(node, "event_time", None)
        if column is not None and column in batch.schema.names:
            times = batch.column(column)
            if times.null_count:
                times = times.drop_null()
            # A view of the values (no copy), sampled before any arithmetic (Latency.SAMPLE).
            values = times.to_numpy(zero_copy_only=False)
            n = len(values)
            if n > Latency.SAMPLE:
                values = values[::-(-n // Latency.SAMPLE)]
            ms = values.astype("datetime64[ms]").view(np.int64)
            self._latency[sid].add(now - ms, n)

    def operator_rows(self) -> list[dict]:
        """One row per operator and subtask running here (``clink.runtime.metrics.OPERATOR_SCHEMA``)."""
        now = time.perf_counter()
        self._rates.update(self._meters, now)
        wall = wall_ms()
        rows = []
        for sid, meter in list(self._meters.items()):
            node = self._node_of[sid]
            kind = kind_of(node)
            kind_name = ("source" if isinstance(node, Source) else "sink" if isinstance(node, Sink)
                         else kind.name if kind is not None else type(node).__name__.lower())
            details = {}
            if (operator := self._operators.get(sid)) is not None:
                details = operator.metrics
            elif (reader := self._readers.get(sid)) is not None:
                details = reader.metrics
            watermark = self._watermarks.get(sid)
            final = watermark is not None and watermark >= MAX_WATERMARK
            latency, ingestion = self._latency.get(sid), self._ingestion_latency.get(sid)
            rows.append({
                "operator": self.uids.get(node.id) or f"{kind_name}-{node.id}",
                "kind": kind_name, "node": node.id, "subtask": self._index_of.get(sid, 0),
                "name": getattr(node, "table", None) or getattr(node, "description", "") or kind_name,
                "sql": node.span, "inputs": list(getattr(node, "inputs", ())),
                "records_in": meter.records_in, "records_out": meter.records_out,
                "bytes_in": meter.bytes_in, "bytes_out": meter.bytes_out,
                **self._rates.of(sid),
                "watermark": None if watermark is None or final else watermark,
                "watermark_lag_ms": None if watermark is None or final else wall - watermark,
                "late_records": details.get("late_records", 0), "skipped_records": details.get("skipped_records", 0),
                "state_rows": details.get("state_rows", 0), "state_bytes": details.get("state_bytes", 0),
                "busy_ms": meter.busy_ns / 1e6, "backpressured_ms": meter.blocked_ns / 1e6,
                "alignment_ms": meter.alignment_ns / 1e6,
                "latency_p50_ms": latency.quantile(0.5) if latency else None,
                "latency_p99_ms": latency.quantile(0.99) if latency else None,
                "ingestion_latency_p50_ms": ingestion.quantile(0.5) if ingestion else None,
                "ingestion_latency_p99_ms": ingestion.quantile(0.99) if ingestion else None,
            })
        return rows

    def split_rows(self) -> list[dict]:
        """One row per split of each source subtask here (one for a reader without splits):
        its position, how far behind the end it is when the reader knows, its watermark."""
        rows = []
        for sid, reader in list(self._readers.items()):
            if isinstance(reader, _Empty):
                continue
            operator = self.uids.get(self._node_of[sid].id, f"source-{sid}")
            subtask = self._index_of.get(sid, 0)
            try:
                position = reader.metrics_position()
            except Exception:  # noqa: BLE001 - a reader that cannot say where it is still has metrics
                position = None
            try:
                lags = reader.split_lag() or {}
            except Exception:  # noqa: BLE001 - as above
                lags = {}
            watermarks = self._split_watermarks.get(sid, {})
            splits = list(reader.splits()) or list(lags) or [""]
            for split in splits:
                watermark = watermarks.get(split, self._watermarks.get(sid) if split == "" else None)
                rows.append({"operator": operator, "subtask": subtask, "split": split,
                             "position": position_text(position), "lag": lags.get(split),
                             "watermark": watermark if watermark is None or watermark < MAX_WATERMARK else None})
        return rows

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        self._abort()
        self.finished = True
        try:
            self.refresh_metrics()  # what a failed job's observers last see: how far it got
        except Exception:  # noqa: BLE001 - the failure to report is exc
            pass
        raise exc

    def _abort(self) -> None:
        # A writer that has closed already treats abort as a no-op.
        for writer in self._writers.values():
            try:
                writer.abort()
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
        self._close_readers()

    def _close_readers(self) -> None:
        # Once only: a SQLite state closed twice is harmless, but a file source may not be.
        if self._readers_closed:
            return
        self._readers_closed = True
        for reader in self._readers.values():
            try:
                reader.close()
            except Exception:  # noqa: BLE001
                pass
        for operator in self._operators.values():
            try:
                operator.close()
            except Exception:  # noqa: BLE001
                pass
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
            self.metrics_endpoint = None
            self.observers -= 1




def stable_ids(plan: Plan) -> dict[int, str]:
    """A name per source, sink and stateful operator that survives changes elsewhere in the plan:
    ``source:<table>``, ``sink:<table>`` (with ``#2``, ``#3`` … for a second and third node of the
    same name), and a stateful operator's ``uid``, which the compiler derives from what it
    computes and where its rows go. A plan made before uids numbers its stateful operators by
    kind in plan order (``window-1``, ``group-2``, …)."""
    ids: dict[int, str] = {}
    seen: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for node in plan.nodes:
        if isinstance(node, Source | Sink):
            base = f"{'source' if isinstance(node, Source) else 'sink'}:{node.table}"
        elif node.uid:
            ids[node.id] = node.uid  # the compiler's, from what the operator computes
            continue
        else:
            kind = kind_of(node)
            if kind is None:
                continue
            counts[kind.name] += 1
            base = f"{kind.name}-{counts[kind.name]}"
        seen[base] += 1
        ids[node.id] = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return ids


STATE_BACKENDS = ("memory", "sqlite")


def make_state_backend(ctx: RuntimeContext, job: Job):
    """The backend ``'state.backend'`` names. SQLite state lives under ``<state dir>/state``
    (rebuilt from the checkpoint on each start), or in a scratch directory removed at the end
    when the job has no state directory."""
    from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM

    name = (ctx.get("state.backend") or "memory").strip().lower()
    max_parallelism = int(ctx.get("pipeline.max-parallelism") or DEFAULT_MAX_PARALLELISM)
    if name in ("memory", "hashmap"):
        from clink.runtime.state.memory import MemoryStateBackend

        return MemoryStateBackend(max_parallelism=max_parallelism)
    if name == "sqlite":
        import shutil
        import tempfile
        from pathlib import Path

        from clink.runtime.state.sqlite import LOG_FRACTION, SqliteStateBackend

        # Checkpoints copy only what changed since the previous one (docs/state.md), unless
        # 'state.backend.incremental' is false; a restart keeps a working database that a clean
        # stop left, when it holds the checkpoint restored ('state.backend.local-recovery').
        incremental = _flag(ctx, "state.backend.incremental", True)
        local_recovery = incremental and _flag(ctx, "state.backend.local-recovery", True)
        if ctx.state_dir is not None:
            directory = Path(ctx.state_dir) / "state"
            if job._placement is not None:
                # Workers of a cluster share the state directory: each has a folder of its own
                # (the job master empties the whole working folder before each attempt).
                directory = directory / f"worker-{job._placement.worker}"
            # The working databases are a copy of the newest checkpoint's state plus changes
            # since; a new run starts from the checkpoint again, so what a crash left goes.
            # Only a database a clean stop left with its checksum beside it may be kept (local
            # recovery: its operator's restore decides).
            local = local_recovery and job._placement is None
            if directory.exists():
                keep = set()
                if local:
                    for sidecar in [*directory.glob("*.sqlite.local"), *directory.glob("*.sqlite.recover.local")]:
                        keep.update({sidecar, sidecar.with_suffix("")})
                for leftover in directory.glob("*.sqlite*"):
                    if leftover in keep:
                        continue
                    if leftover.is_dir():
                        shutil.rmtree(leftover, ignore_errors=True)
                    else:
                        leftover.unlink()
        else:
            job._scratch = tempfile.mkdtemp(prefix="clink-state-")
            directory = Path(job._scratch)
        try:
            cache = parse_size(ctx.get("state.sqlite.cache-size") or "64 mb")
        except ValueError as exc:
            raise UsageError(f"'state.sqlite.cache-size': {exc}") from None
        fraction = ctx.get("state.sqlite.log-fraction")
        return SqliteStateBackend(directory, max_parallelism=max_parallelism, table_cache_bytes=cache,
                                  incremental=incremental, local_recovery=local_recovery and ctx.state_dir is not None
                                  and job._placement is None,
                                  log_fraction=LOG_FRACTION if fraction in (None, "") else float(fraction),
                                  fault_point=ctx.get("test.fault-point"))
    raise UsageError(f"unknown state backend {name!r} in 'state.backend'; choose one of: {', '.join(STATE_BACKENDS)}")


def _flag(ctx: RuntimeContext, key: str, default: bool) -> bool:
    text = ctx.get(key)
    if text is None or text == "":
        return default
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"{key!r} must be 'true' or 'false', got {text!r}")
    return value == "true"


def run_plan(plan: Plan, ctx: RuntimeContext) -> Metrics:
    """Run ``plan`` to completion in this thread."""
    return Job(plan, ctx).run()


class _Checkpointing:
    """Takes checkpoints of a job and restores it from the newest valid one.

    A checkpoint holds every source's position, every window operator's state (Arrow IPC), the
    watermarks, and every sink's pre-commit handle; it completes when its manifest is written.
    Only then do the sinks commit (make that output visible). Restoring seeks the sources,
    restores the operators and lets each sink commit what the checkpoint pre-committed and
    discard anything written after it.
    """

    def __init__(self, job: Job, store, every_rows: int | None, every_ms: int | None) -> None:
        self.job = job
        self.store = store
        self.every_rows = every_rows
        self.every_ms = every_ms
        self.rows = 0
        self.next_id = 1
        self.last_ms = job.ctx.clock()
        # A named point of the checkpoint protocol at which to kill this process (crash tests):
        # 'name:n' kills at the n-th time the point is reached.
        self._fault = FaultPoint(job.ctx.get("test.fault-point"))

    def fault(self, point: str) -> None:
        """Where the checkpoint protocol may be killed (a method: in-process tests replace it)."""
        self._fault(point)

    @classmethod
    def configure(cls, job: Job) -> _Checkpointing | None:
        ctx = job.ctx
        every_ms = _duration_ms(ctx.get("execution.checkpointing.interval"))
        rows_text = ctx.get("execution.checkpointing.interval-rows")
        every_rows = int(rows_text) if rows_text else None
        location = checkpoint_location(ctx.config)
        if ctx.state_dir is None and location is None:
            if every_ms or every_rows:
                raise UsageError("'execution.checkpointing.interval' needs a state directory "
                                 "(clink run --state-dir DIR, or RuntimeContext(state_dir=...)) or "
                                 "'execution.checkpointing.dir'")
            if not ctx.get("execution.savepoint.path"):
                return None
            # Only resumed from (a checkpoint given by its URI), nothing to write.
        from clink.runtime.checkpoint.store import CheckpointStore

        working = ctx.state_dir
        if working is None:
            # Checkpoints elsewhere and no state directory: their working files go to a
            # folder of the job's own, removed with the job.
            import tempfile

            if job._scratch is None:
                job._scratch = tempfile.mkdtemp(prefix="clink-state-")
            working = job._scratch
        store = CheckpointStore(working, retained=int(ctx.get("state.checkpoints.num-retained") or 3),
                                location=location, filesystems=ctx.filesystems)
        if job._placement is not None:
            # Spread over processes, the job master triggers checkpoints and completes them.
            every_rows = every_ms = None
        checkpointing = cls(job, store, every_rows, every_ms)
        checkpointing.restore()
        return checkpointing

    def due(self) -> bool:
        if self.every_rows and self.rows >= self.every_rows:
            return True
        return bool(self.every_ms) and self.job.ctx.clock() - self.last_ms >= self.every_ms

    def take(self) -> int:
        import json

        job = self.job
        started = time.perf_counter()
        checkpoint_id = self.next_id
        writer = self.store.begin(checkpoint_id, job.plan.fingerprint)
        for source_id in job._readers:
            if source_id not in job._ended:
                job._emit(source_id, Barrier(checkpoint_id))
        self.fault("after_barrier")
        uids = job.uids
        positions = {}
        operators = {}
        for node in job.plan.nodes:
            subtasks = job._subtasks[node.id]
            if isinstance(node, Source):
                shares = []
                for sid in subtasks:
                    position = job._readers[sid].position()
                    if position is None:
                        raise UsageError(f"table {node.table!r} cannot be checkpointed: its source cannot resume "
                                         "from a position")
                    shares.append(position)
                # One reader: its position as it is; several: each subtask's, in order.
                positions[uids[node.id]] = shares[0] if len(shares) == 1 else {"subtasks": shares}
            elif kind_of(node) is not None:
                entries = []
                for j, sid in enumerate(subtasks):
                    files, meta = job._operators[sid].snapshot(checkpoint_id, writer.path)
                    names = writer.include(files)
                    groups = key_group_range(j, len(subtasks), job.max_parallelism)
                    entries.append({"files": names, "meta": meta,
                                    "key_groups": [groups.start, groups.stop]})
                entry = {"signature": state_signature(job, node.id), **operator_record(job, node)}
                if len(entries) == 1:
                    entry.update(files=entries[0]["files"], meta=entries[0]["meta"])
                else:
                    entry["subtasks"] = entries
                operators[uids[node.id]] = entry
        handles = {uids[job._node_of[sid].id]: w.pre_commit(checkpoint_id) for sid, w in job._writers.items()}
        state = {
            "parallelism": job.parallelism,
            "max_parallelism": job.max_parallelism,
            "sources": positions,
            "operators": operators,
            "sinks": handles,
            "watermarks": {str(k): v for k, v in job._watermarks.items()},
            "input_watermarks": {str(k): {str(i): w for i, w in v.items()} for k, v in job._input_watermarks.items()},
            "split_watermarks": {str(k): dict(v) for k, v in job._split_watermarks.items()},
        }
        writer.write_bytes("job.json", json.dumps(state, sort_keys=True).encode())
        self.fault("after_state_written_before_commit")
        info = writer.complete(before_rename=lambda: self.fault("during_manifest_rename"))
        self.fault("after_checkpoint_before_sink_commit")
        # The checkpoint exists: now its output may become visible.
        for sid, w in job._writers.items():
            w.commit(checkpoint_id, handles[uids[job._node_of[sid].id]])
            self.fault("during_sink_commit")
        for reader in job._readers.values():
            reader.checkpoint_complete(checkpoint_id)
        self.store.prune()
        self.next_id += 1
        self.rows = 0
        self.last_ms = job.ctx.clock()
        took = (time.perf_counter() - started) * 1000
        job.metrics.checkpoint_ms.append(took)
        job.metrics.checkpoints += 1
        job.metrics.checkpoint_history = [*job.metrics.checkpoint_history[-99:], {
            "checkpoint": checkpoint_id, "completed": wall_ms(), "duration_ms": took, "size_bytes": info.size,
            "alignment_ms": max((m.alignment_ns for m in job._meters.values()), default=0) / 1e6}]
        return checkpoint_id

    def restore(self) -> None:
        import json

        job = self.job
        chosen = job.ctx.get("execution.savepoint.path")
        manifest = None
        if chosen:
            info, manifest = self.store.open(chosen)
            warnings = []
        elif job._placement is not None:
            info, warnings = None, []  # the job master chose: nothing to resume from
        else:
            info, warnings = self.store.latest()
        job.warnings.extend(warnings)
        lineage = self.store.lineage()
        if info is None:
            # Nothing to resume from: output a crashed run left unfinished is discarded, and what
            # damaged checkpoints of this state directory committed is rolled back.
            self.recover_sinks(0, {}, lineage)
            return
        try:
            if manifest is None:
                manifest = self.store.manifest(info)  # verified by latest()
            state = json.loads((info.path / "job.json").read_text())
            if job._placement is None or job._placement.worker == 0:
                self.check_compatible(info.path.name, state)  # worker 0 runs subtask 0 of every node
            uids = job.uids
            for node in job.plan.nodes:
                subtasks = job._subtasks[node.id]
                if isinstance(node, Source):
                    saved = state["sources"][uids[node.id]]
                    shares = saved["subtasks"] if "subtasks" in saved else [saved]
                    for j, sid in enumerate(subtasks):
                        if sid not in job._local:
                            continue
                        reader = job._readers[sid]
                        if len(shares) == len(subtasks):
                            reader.seek(shares[j])
                        else:
                            # Another parallelism: each reader takes its share of what is left.
                            reader.seek_shares(shares)
                elif kind_of(node) is not None:
                    self._restore_operator(node, subtasks, state["operators"][uids[node.id]], info)
            self.recover_sinks(info.id, state["sinks"], lineage)
            if (manifest.get("plan_fingerprint") == job.plan.fingerprint
                    and state.get("parallelism", 1) == job.parallelism):
                # The same plan: node ids mean the same nodes, so watermarks carry over as they were.
                # (A changed plan starts its watermarks afresh; each window operator keeps its own.)
                job._watermarks.update({int(k): v for k, v in state["watermarks"].items()})
                for k, v in state["watermarks"].items():
                    if (task := job._tasks.get(int(k))) is not None:
                        task.watermark = v
                for k, v in state["input_watermarks"].items():
                    job._input_watermarks[int(k)].update({int(i): w for i, w in v.items()})
                # Each split's watermark too, so a split that has no rows after the restore still
                # counts with the watermark its rows had given (older checkpoints lack them).
                for k, v in state.get("split_watermarks", {}).items():
                    job._split_watermarks[int(k)] = {str(split): int(w) for split, w in v.items()}
            self.next_id = info.id + 1
            job.metrics.restored_from = info.id
        finally:
            self.store.release(info)  # a copy downloaded from a remote store

    def _restore_operator(self, node: Node, subtasks: list[int], entry: dict, info) -> None:
        """Give each subtask of ``node`` the state of its key groups, from the snapshots of the
        subtasks that held them (one or several, when the parallelism changed)."""
        job = self.job
        from clink.runtime.checkpoint.store import checkpoint_file
        from clink.runtime.state.backend import IncompatibleState

        saved = entry["subtasks"] if "subtasks" in entry else [
            {"files": entry["files"], "meta": entry["meta"], "key_groups": [0, job.max_parallelism]}]
        for j, sid in enumerate(subtasks):
            if sid not in job._local:
                continue
            mine = key_group_range(j, len(subtasks), job.max_parallelism)
            parts = [e for e in saved if e["key_groups"][0] < mine.stop and mine.start < e["key_groups"][1]]
            if isinstance(node, Join) and node.broadcast is not None:
                # A join with an input broadcast: its other input's rows stayed where they were
                # made, whatever their key group, so every subtask's snapshot is read for them.
                parts = saved
            whole = len(parts) == 1 and parts[0]["key_groups"] == [mine.start, mine.stop]
            files = [checkpoint_file(info.path, name) for e in parts for name in e["files"]]
            try:
                job._operators[sid].restore(files, _merge_meta([e["meta"] for e in parts]),
                                            key_groups=None if whole else mine)
            except IncompatibleState as exc:
                raise IncompatibleCheckpoint(f"checkpoint {info.path.name}: the state of operator "
                                             f"{job.uids[node.id]} cannot be restored: {exc}") from exc
            note = getattr(getattr(job._operators[sid], "operator_state", None), "recovery", None)
            if isinstance(note, str):
                name = job.uids[node.id] + (f"#{j}" if len(subtasks) > 1 else "")
                job.metrics.local_recovery[name] = note
                if note != "local":
                    job.warnings.append(f"operator {name}: {note}")

    def recover_sinks(self, checkpoint_id: int, handles: dict, lineage: str) -> None:
        """Bring every sink to ``checkpoint_id``: commit what it pre-committed, roll back what
        later checkpoints committed (the run replays it), then set those checkpoints aside."""
        job = self.job
        for sid, w in job._writers.items():
            note = w.recover(checkpoint_id, handles.get(job.uids[job._node_of[sid].id]), lineage=lineage)
            if note:
                job.warnings.append(note)
        if job._placement is not None:
            return  # the job master sets later checkpoints aside, once, for every worker
        from clink.runtime.checkpoint.store import ROLLED_BACK

        moved = self.store.set_aside_after(checkpoint_id)
        if moved:
            resumed = f"checkpoint {checkpoint_id}" if checkpoint_id else "the start"
            job.warnings.append(f"checkpoint(s) {', '.join(map(str, moved))} newer than {resumed} moved to "
                                f"{self.store.where(ROLLED_BACK)}; the job goes on from {resumed}")

    def check_compatible(self, name: str, state: dict) -> None:
        """Refuse a checkpoint whose state this plan cannot take (docs/checkpoints.md, "Changing a
        pipeline"): every stateful operator and source must find its own entry, with the same
        state signature, and the checkpoint may hold no state the plan would drop."""
        job = self.job
        uids = job.uids
        hint = ("The change is not compatible with the saved state: run with a new --state-dir (or empty "
                "this one) to start over.")
        saved = state.get("operators", {})
        stateful = [node.id for node in job.plan.nodes if kind_of(node) is not None]
        for node_id in stateful:
            uid = uids[node_id]
            where = _where(job._nodes[node_id])
            expected = state_signature(job, node_id)
            entry = saved.get(uid)
            if entry is None:
                raise IncompatibleCheckpoint(f"checkpoint {name} holds no state for operator {uid}{where}, which "
                                             f"this pipeline has. {hint}")
            if entry["signature"] != expected:
                was, now = _readable(entry["signature"]), _readable(expected)
                if was == now:  # the same query, its state kept another way: say how
                    was, now = entry["signature"].split(" | ", 1)[-1], expected.split(" | ", 1)[-1]
                raise IncompatibleCheckpoint(
                    f"checkpoint {name} cannot be restored into operator {uid}{where}: its state was written "
                    f"for\n    {was}\nbut this pipeline needs\n    {now}\n{hint}")
        dropped = sorted(set(saved) - {uids[i] for i in stateful})
        if dropped:
            raise IncompatibleCheckpoint(f"checkpoint {name} holds state of operator(s) {', '.join(dropped)}, which "
                                         f"this pipeline no longer has; restoring would lose it. {hint}")
        for node in job.plan.sources:
            if uids[node.id] not in state.get("sources", {}):
                raise IncompatibleCheckpoint(f"checkpoint {name} holds no position for {uids[node.id]}"
                                             f"{_where(node)}: a source was added. {hint}")


class _SubtaskSnapshots:
    """The parts of one checkpoint that the subtasks of a worker take (``Placement``): each
    source's position when the checkpoint is injected, each stateful operator's state (files in
    the checkpoint's directory, which the job master made) and each sink's pre-commit handle once
    the barrier is aligned. The job master puts the parts of every worker together."""

    def __init__(self, job: Job, checkpoint_id: int) -> None:
        self.job = job
        self.id = checkpoint_id
        self.triggered = False
        self.store = job._checkpointing.store
        self.path = self.store.staging(checkpoint_id)
        self.waiting = {sid for sid in job._local if sid in job._readers or sid in job._writers
                        or sid in job._operators}
        self.pieces: dict = {"sources": {}, "operators": {}, "sinks": {}, "signatures": {}, "records": {},
                             "max_parallelism": job.max_parallelism}

    def take_ended(self) -> None:
        for sid in sorted(self.waiting & self.job._ended):
            self.take(sid)

    def take(self, sid: int) -> None:
        if sid not in self.waiting or (sid in self.job._readers and not self.triggered
                                       and sid not in self.job._ended):
            return  # a source's position is taken when the checkpoint reaches this worker
        self.waiting.discard(sid)
        job = self.job
        node, index = job._node_of[sid], job._index_of[sid]
        uid = job.uids[node.id]
        if sid in job._readers:
            position = job._readers[sid].position()
            if position is None:
                raise UsageError(f"table {node.table!r} cannot be checkpointed: its source cannot resume "
                                 "from a position")
            self.pieces["sources"].setdefault(uid, {})[str(index)] = position
        elif sid in job._writers:
            self.pieces["sinks"][uid] = job._writers[sid].pre_commit(self.id)
        else:
            files, meta = job._operators[sid].snapshot(self.id, self.path)
            count = len(job._subtasks[node.id])
            groups = key_group_range(index, count, job.max_parallelism)
            names, digests = self.store.include(self.id, files)
            self.pieces["operators"].setdefault(uid, []).append(
                {"index": index, "files": names, "meta": meta,
                 "key_groups": [groups.start, groups.stop], "digests": digests})
            if index == 0:
                self.pieces["signatures"][uid] = state_signature(job, node.id)
                self.pieces["records"][uid] = operator_record(job, node)  # for clink state and plan diff
        self.done_if_complete()

    def done_if_complete(self) -> None:
        job = self.job
        if self.waiting or not self.triggered or job._snapshot is not self:
            return
        job._snapshot = None
        job._snapshots_done = self.id
        job._placement.snapshot_done(self.id, self.pieces)


def _merge_meta(metas: list[dict]) -> dict:
    """One operator's small state from the snapshots of several of its subtasks: the lowest
    watermark (they are equal: every subtask sees the watermark of every channel), the largest
    of every counter."""
    if len(metas) == 1:
        return metas[0]
    merged: dict = {}
    for meta in metas:
        for key, value in meta.items():
            if key not in merged or merged[key] is None:
                merged[key] = value
            elif value is not None:
                merged[key] = min(merged[key], value) if key == "watermark" else max(merged[key], value)
    return merged


def _keeps_distribution(node: Node, required) -> bool:
    """Whether ``node``'s output rows stay spread as ``required``: a keyed operator keeps its rows
    with the subtask of their key, whose columns lead its output (the planner's rule)."""
    from clink.runtime.plan import OverAggregate, Rank, WindowAggregate, hash_by

    match node:
        case WindowAggregate(keys=keys) | GroupAggregate(keys=keys):
            return required == hash_by(*range(len(keys)))
        case OverAggregate(partition=keys) | Rank(partition=keys):
            return required == hash_by(*keys)
        case Join(left_keys=keys):
            return required == hash_by(*keys)
    return False


def _where(node) -> str:
    return f" (at {node.span})" if getattr(node, "span", "") else ""


def _readable(signature: str) -> str:
    return signature.split(" | ")[0]


def state_signature(job: Job, node_id: int) -> str:
    """What a stateful operator's state means: the window (if any), key types and aggregates
    (readable), the keys and aggregates as SQL text, then the layout of its state. A checkpoint
    restores only into the same signature."""
    node = job._nodes[node_id]
    schemas = tuple(job._nodes[i].schema for i in node.inputs)
    return signature_of(node, schemas, job._operators[node_id])


def signature_of(node: Node, schemas: tuple[pa.Schema, ...], operator) -> str:
    """``state_signature`` of a node whose operator is open (on any backend), given its input schemas."""
    readable, layout = kind_of(node).describe(node, schemas, operator).split(" | ", 1)
    if node.meaning:
        readable += f" as {node.meaning}"
    return f"{readable} | {layout}"


def operator_record(job: Job, node: Node) -> dict:
    """What a checkpoint keeps of a stateful operator besides its state, for reading it without
    the pipeline (``clink state``, ``clink plan diff``): its kind, position in the SQL, the view
    of its state and the descriptors of its states. Readers of older checkpoints do without."""
    from clink.runtime.state_view import descriptors_json, view_of

    kind = kind_of(node).name
    operator = job._operators.get(job._subtasks[node.id][0])
    states = getattr(operator, "operator_state", None)
    record = {"kind": kind, "span": node.span, "view": view_of(node, kind)}
    if states is not None:
        record["states"] = descriptors_json(states.descriptors.values())
    return record


def _message(exc: BaseException) -> str:
    message = str(exc).split("\n")[0]
    if isinstance(exc, pa.ArrowInvalid) and "overflow" in message:
        message = f"integer overflow: {message}"
    return message


@contextlib.contextmanager
def _sql_errors(node: Node):
    """An operator's call: an error raised by the SQL it evaluates (a generated expression
    function, which names its SQL) becomes a PipelineError at that SQL; a value the operator
    cannot compute itself (an aggregate's overflow) one at the operator's SQL; others (bugs) pass
    unchanged."""
    try:
        yield
    except ClinkError:
        raise
    except (EvaluationError, pa.ArrowException, ArithmeticError, ValueError, TypeError) as exc:
        where = sql_position_of(exc)
        if where is None and isinstance(exc, (EvaluationError, pa.ArrowInvalid, ArithmeticError)) and node.span:
            where = node.span
        if where is None:
            raise
        raise PipelineError(_message(exc), where) from exc
