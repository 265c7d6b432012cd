"""``clink.sql``, ``clink.compile`` and ``clink.load``: the Python front door.

The only module besides the CLI that imports both the compiler and the runtime; it holds glue,
not logic.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clink.errors import UsageError
from clink.records import evolve
from clink.runtime.connectors.base import ConnectorRegistry
from clink.runtime.context import RuntimeContext, system_clock_ms
from clink.runtime.executor import Job, Metrics
from clink.runtime.loader import load_generated, load_plan_file
from clink.runtime.plan import Plan as _RuntimePlan
from clink.runtime.udaf import AggregateFunction, udaf, udtf
from clink.runtime.udf import FunctionRegistry, ScalarFunction, udf

#: What ``functions=`` accepts: a registry, or UDFs (plain callables are passed to ``clink.udf``).
Functions = FunctionRegistry | Iterable[ScalarFunction | Callable[..., Any]]

if TYPE_CHECKING:
    from clink.embedded import EmbeddedJob

__all__ = ["AggregateFunction", "FunctionRegistry", "Plan", "Result", "compile", "load", "sql", "udaf", "udf", "udtf"]


class Plan:
    """A compiled pipeline: the generated module's ``source``, its ``explain()`` text, and the
    runtime plan it defines. ``run()`` executes it."""

    def __init__(self, runtime_plan: _RuntimePlan, *, source: str | None = None, explain_text: str | None = None,
                 functions: FunctionRegistry | None = None) -> None:
        self.runtime_plan = runtime_plan
        self.source = source
        self._explain = explain_text
        #: The Python UDFs given when compiling; every run gets them in its context.
        self.functions = functions or FunctionRegistry()

    def _context(self, context: RuntimeContext | None) -> RuntimeContext | None:
        if not len(self.functions):
            return context
        ctx = context or RuntimeContext()
        # A copy: the caller's context is not changed; its own functions win on a shared name.
        return evolve(ctx, functions=self.functions.merged(ctx.functions))

    @property
    def name(self) -> str:
        return self.runtime_plan.name

    @property
    def fingerprint(self) -> str:
        return self.runtime_plan.fingerprint

    def explain(self) -> str:
        """The logical and physical plans as text (for a loaded module: its physical nodes)."""
        if self._explain is not None:
            return self._explain
        return "\n".join(f"[{n.id}] {type(n).__name__} {getattr(n, 'table', '')}" for n in self.runtime_plan.nodes)

    def run(self, *, config: Mapping[str, str] | None = None, context: RuntimeContext | None = None) -> Result:
        """Start the pipeline; the returned ``Result`` gives its rows."""
        return Result(self, config=config, context=self._context(context))

    def start(self, state_dir: str | Path | None = None, config: Mapping[str, str] | None = None, *,
              background: bool = False, context: RuntimeContext | None = None) -> EmbeddedJob:
        """Start the pipeline inside this process: push rows into its ``push`` tables, poll its
        ``SELECT`` rows as Arrow (docs/embedding.md).

        ``state_dir`` enables checkpoints and resumes from the newest one in it. With
        ``background`` a daemon thread runs the job; otherwise the caller drives it (``step``,
        ``run_until_idle``, or ``poll``).

        >>> plan = compile("CREATE TABLE t (a BIGINT) WITH ('connector' = 'push'); SELECT a + 1 AS b FROM t")
        >>> job = plan.start()
        >>> job.push("t", [{"a": 1}, {"a": 2}])
        2
        >>> job.poll().column("b").to_pylist()
        [2, 3]
        """
        context = self._context(context)
        settings = {**self.runtime_plan.config, **(context.config if context else {}), **(config or {})}
        if (settings.get("execution.target") or "local").strip().lower() == "ray":
            # On Ray's workers: the same handle where it means the same (docs/cluster.md).
            from clink.cluster.embedded import RayEmbeddedJob

            ctx = context or RuntimeContext()
            _refuse_what_cannot_reach_ray(self, ctx)
            if state_dir is not None:
                from clink.runtime.fs import local_directory

                state_dir = local_directory(state_dir if isinstance(state_dir, Path) else str(state_dir))
            return RayEmbeddedJob(self.runtime_plan, source=self.source,
                                  settings={k: str(v) for k, v in settings.items()},
                                  state_dir=str(Path(state_dir).resolve()) if state_dir is not None else None,
                                  stdout=ctx.stdout, stderr=ctx.stderr)
        from clink.embedded import EmbeddedJob  # threads and push tables: only for embedded jobs

        return EmbeddedJob(self.runtime_plan, state_dir=state_dir, config=config, background=background,
                           context=context)

    def __repr__(self) -> str:
        return f"<clink.Plan {self.name} sha256:{self.fingerprint}>"


class Result:
    """The rows of a running pipeline's bare ``SELECT`` queries.

    ``to_arrow()`` runs a bounded pipeline to its end and returns the query's rows as one
    table; iterating yields ``RecordBatch``es as they are produced, which also works for
    unbounded sources. ``INSERT`` statements write to their sinks either way.
    """

    def __init__(self, plan: Plan, *, config: Mapping[str, str] | None = None,
                 context: RuntimeContext | None = None) -> None:
        self.plan = plan
        self._pending: dict[str, deque[pa.RecordBatch]] = {
            s.table: deque() for s in plan.runtime_plan.sinks if s.connector == "collect"}
        self._schemas = {s.table: s.schema for s in plan.runtime_plan.sinks if s.connector == "collect"}
        self._modes = {s.table: s.changelog for s in plan.runtime_plan.sinks if s.connector == "collect"}
        ctx = context or RuntimeContext()
        ctx = ctx.with_config(dict(config or {}))
        ctx.on_result = self._deliver
        settings = {**plan.runtime_plan.config, **ctx.config}
        if (settings.get("execution.target") or "local").strip().lower() == "ray":
            # The same plan on Ray's workers; the rows come back over the data plane.
            self._job = _RayRun(plan, settings, ctx, self._deliver)
        else:
            self._job = Job(plan.runtime_plan, ctx)

    @property
    def explain(self) -> tuple[str, ...]:
        """The text of each EXPLAIN statement in the script."""
        return self.plan.runtime_plan.explain

    @property
    def queries(self) -> list[str]:
        return list(self._schemas)

    @property
    def metrics(self) -> Metrics:
        """The run's counters, brought up to date; an Arrow table of one row per operator and
        subtask to any Arrow reader, ``metrics.to_arrow("splits" | "checkpoints")`` for the others."""
        if hasattr(self._job, "refresh_metrics"):
            self._job.refresh_metrics()
        return self._job.metrics

    def operators(self) -> list[dict]:
        """The stateful operators, sources and sinks: ``id``, ``kind``, ``position``, ``subtasks``."""
        return self._local_job("operators").operators()

    def state(self, operator_id: str, *, state: str | None = None) -> pa.Table:
        """Operator ``operator_id``'s current keyed state as a table, between two batches of the
        iteration (docs/state.md, "Queryable state")."""
        return self._local_job("state").state(operator_id, state=state)

    def _local_job(self, what: str) -> Job:
        if not isinstance(self._job, Job):
            raise UsageError(f"{what}() reads a job running in this process; this one runs on Ray")
        return self._job

    def _deliver(self, name: str, batch: pa.RecordBatch) -> None:
        self._pending[name].append(batch)

    def _query_name(self, query: str | None) -> str:
        from clink.embedded import query_name

        return query_name(self._schemas, query, "returned")

    def run(self) -> Metrics:
        """Run to the end; results of queries are kept for ``to_arrow``."""
        unbounded = self._job.unbounded_sources
        if unbounded:
            raise UsageError(f"the pipeline reads unbounded source(s) {', '.join(unbounded)}: it never ends; "
                             "iterate over the result instead, or set 'number-of-rows'")
        return self._job.run()

    def to_arrow(self, query: str | None = None) -> pa.Table:
        """All rows of ``query`` (the only query, if there is one) as a ``pyarrow.Table``. For an
        updating query (GROUP BY without a window) that is the final table its changes add up
        to; iterating gives the changes themselves, with their kind in ``_rowkind``."""
        name = self._query_name(query)
        self.run()
        batches = list(self._pending[name])
        self._pending[name].clear()
        table = pa.Table.from_batches(batches, schema=self._schemas[name])
        if self._modes[name].updating:
            # An updating query: the final table its changes add up to (iterate for the changes).
            from clink.runtime.changelog import materialize

            table = materialize(table, self._modes[name])
        return table

    def to_pylist(self, query: str | None = None) -> list[dict]:
        return self.to_arrow(query).to_pylist()

    def batches(self, query: str | None = None) -> Iterator[pa.RecordBatch]:
        """Yield the batches of ``query`` as the pipeline produces them."""
        name = self._query_name(query)
        pending = self._pending[name]
        while True:
            while pending:
                yield pending.popleft()
            if self._job.finished:
                return
            if not self._job.step():
                time.sleep(0.005)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The result as an Arrow C stream (the Arrow PyCapsule interface), so that any Arrow
        consumer reads it without a copy: ``pa.table(result)``, ``duckdb.sql("SELECT ... FROM
        result")``, ``polars.DataFrame(result)``. An append-only query streams its batches as
        the pipeline makes them; an updating one gives the final table its changes add up to
        (as ``to_arrow``), once the pipeline has ended. A script of several queries: export one
        with ``to_arrow(query)``."""
        name = self._query_name(None)
        if self._modes[name].updating:
            table = self.to_arrow(name)
            reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
        else:
            reader = pa.RecordBatchReader.from_batches(self._schemas[name], self.batches(name))
        return reader.__arrow_c_stream__(requested_schema)

    def step(self) -> bool:
        """Do one round of work (poll every source once); True if anything happened."""
        return self._job.step()

    def take(self, query: str | None = None) -> list[pa.RecordBatch]:
        """The batches of ``query`` produced so far and not yet taken."""
        pending = self._pending[self._query_name(query)]
        batches = list(pending)
        pending.clear()
        return batches

    def cancel(self) -> None:
        self._job.cancel()


def _refuse_what_cannot_reach_ray(plan: Plan, ctx: RuntimeContext) -> None:
    """What lives only in this process cannot reach Ray's workers: refused, not dropped."""
    if plan.source is None:
        raise UsageError("running on Ray needs the plan's generated module (clink.compile or clink.load of "
                         "an artefact)")
    if ctx.clock is not system_clock_ms:
        raise UsageError("a job on Ray reads the workers' own clocks: a RuntimeContext clock cannot reach "
                         "them (run it locally, 'execution.target' = 'local')")
    if ctx.filesystems:
        raise UsageError("a job on Ray opens its paths on the workers: RuntimeContext.filesystems cannot reach "
                         "them; give the filesystem in the path's URI")


class _RayRun:
    """A ``Result``'s job on Ray (``'execution.target' = 'ray'``): run to the end, or in a thread
    of this process while its rows are iterated. The parts of ``Job`` that ``Result`` uses."""

    def __init__(self, plan: Plan, settings: dict, ctx: RuntimeContext, deliver) -> None:
        _refuse_what_cannot_reach_ray(plan, ctx)
        self.plan = plan
        self.settings = {k: str(v) for k, v in settings.items()}
        self.state_dir = str(Path(ctx.state_dir).resolve()) if ctx.state_dir is not None else None
        # Rows handed back cannot be taken back, so a job that returns rows is not restarted:
        # only a script with a bare SELECT asks for them.
        self.deliver = deliver if any(s.connector == "collect" for s in plan.runtime_plan.sinks) else None
        self.stdout, self.stderr = ctx.stdout, ctx.stderr
        self.metrics = Metrics()
        self._done = False
        self.unbounded_sources: list[str] = []
        self._thread = None
        self._error: BaseException | None = None

    @property
    def finished(self) -> bool:
        """Whether the job has ended; raises what it failed with."""
        if self._done and self._error is not None:
            raise self._error
        return self._done

    def run(self) -> Metrics:
        if self._thread is not None:
            self._thread.join()
        elif not self._done:
            self._run()
        if self._error is not None:
            raise self._error
        return self.metrics

    def _run(self) -> None:
        try:
            from clink.cluster.onray import run_on_ray
        except ImportError as exc:
            self._error = UsageError(f"running on Ray needs Ray: pip install 'clink[ray]' ({exc})")
            self._done = True
            return
        from clink.runtime.artefact import artefact_bytes

        artefact = artefact_bytes(module_source=self.plan.source, plan=self.plan.runtime_plan)
        try:
            outcome = run_on_ray(artefact, config=self.settings, state_dir=self.state_dir,
                                 fingerprint=self.plan.fingerprint, on_result=self.deliver,
                                 on_print=self._printed)
            self.metrics.records_in = dict(outcome["records_in"])
            self.metrics.records_out = dict(outcome["records_out"])
            self.metrics.seconds = outcome["seconds"]
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            self._error = exc
        finally:
            self._done = True

    def _printed(self, stream: str, text: str) -> None:
        """What the job's print sinks write, in this process's context."""
        (self.stdout if stream == "stdout" else self.stderr).write(text)

    def step(self) -> bool:
        """Rows arrive from the workers on their own: start the job once, then wait a little."""
        if self._thread is None:
            import threading

            self._thread = threading.Thread(target=self._run, name="clink-ray-result", daemon=True)
            self._thread.start()
        if self.finished:
            return False
        time.sleep(0.01)
        return False

    def cancel(self) -> None:
        raise UsageError("a job on Ray stops with clink stop JOB")


def compile(text: str | Iterable[str], *, name: str = "<sql>",  # noqa: A001 - the public verb
            connectors: ConnectorRegistry | None = None, functions: Functions | None = None,
            init: Iterable[str | Path] = ()) -> Plan:
    """Compile SQL (one string, or several statements) into a ``Plan``.

    ``functions`` are Python UDFs (``clink.udf``) the SQL may call; the plan passes them to every
    run in ``RuntimeContext.functions`` (docs/udf.md). ``init``: SQL files of declarations
    (tables, views, functions, SET) that come before ``text``, as ``clink run -i``.

    >>> plan = compile("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '2');"
    ...                "SELECT a FROM t")
    >>> plan.source.startswith("# Generated by clink")
    True
    """
    from clink.compiler import compile_text

    if not isinstance(text, str):
        text = ";\n".join(s.strip().rstrip(";") for s in text)
    registry = FunctionRegistry.of(functions)
    compiled = compile_text(text, name=name, connectors=connectors, functions=registry, init=read_init(init))
    module = load_generated(compiled.source, name=name, fingerprint=compiled.fingerprint)
    runtime_plan = module.PLAN
    return Plan(runtime_plan, source=compiled.source, explain_text=compiled.explain(), functions=registry)


def sql(text: str | Iterable[str], *, config: Mapping[str, str] | None = None,
        context: RuntimeContext | None = None, name: str = "<sql>", functions: Functions | None = None,
        init: Iterable[str | Path] = ()) -> Result:
    """Compile and start a pipeline; the ``Result`` gives the rows of its ``SELECT``.

    ``functions`` are Python UDFs the SQL may call, added to those of ``context.functions``;
    ``init``, SQL files of declarations that come first (as in ``compile``).

    >>> r = sql("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
    ...         "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '3');"
    ...         "SELECT a * 10 AS b FROM t")
    >>> r.to_arrow().column("b").to_pylist()
    [10, 20, 30]
    """
    # Connectors registered in the context are usable in the SQL, and their options are checked.
    connectors = context.connectors if context is not None else None
    # Likewise the context's functions, and those given here.
    registry = FunctionRegistry.of(functions)
    if context is not None:
        registry = context.functions.merged(registry)
    return compile(text, name=name, connectors=connectors, functions=registry, init=init).run(config=config,
                                                                                               context=context)


def read_init(paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    """(file name, text) of each init script, with a clear error for one that cannot be read."""
    scripts = []
    for path in paths:
        p = Path(path)
        try:
            scripts.append((p.name, p.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise UsageError(f"no such init script: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the init script {path}: {exc}") from None
    return scripts


def load(path: str | Path) -> Plan:
    """Load an artefact written by ``clink compile -o plan.clk`` (verified before it runs), or a
    module written by ``clink compile -o plan.py``."""
    path = Path(path)
    if path.suffix == ".clk":
        from clink.runtime.artefact import read_artefact

        artefact = read_artefact(path)
        return Plan(artefact.plan(), source=artefact.module_source, explain_text=artefact.explain)
    source = path.read_text(encoding="utf-8") if path.exists() else None
    return Plan(load_plan_file(path), source=source)
