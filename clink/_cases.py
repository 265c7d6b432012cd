"""Pipeline test cases: rows in, watermarks and clock steps, expected rows or changelog out.

A case file (YAML, or JSON of the same shape) holds cases for one pipeline. Each case feeds
rows into the pipeline's source tables step by step, moves their watermarks and the
processing-time clock explicitly, and says what each sink (or bare ``SELECT``) must produce.
``clink test`` and the pytest plugin in ``clink.testing`` both run cases through here.

A case runs the pipeline's own plan with every source replaced by a ``push`` table and every
sink by a collector, in this process: a Kafka or JDBC table needs no broker or database. The
processing-time clock is the case's own (``RuntimeContext.clock``), so a run is deterministic.
docs/testing.md is the user's guide to the format.
"""

from __future__ import annotations

import difflib
import io
import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clink.errors import ClinkError, Span, SqlError, UsageError
from clink.records import evolve, record

if TYPE_CHECKING:
    import pyarrow as pa

    from clink.runtime.plan import Plan as RuntimePlan

__all__ = ["Case", "CaseFile", "CaseFileError", "Outcome", "case_plan", "load_case_file", "pipeline_plan", "run_case"]

#: Where the processing-time clock of a case starts unless the case sets ``clock``.
DEFAULT_CLOCK = "2020-01-01 00:00:00"
_INSTALL = "pip install 'clink[testing]'"


class CaseFileError(SqlError):
    """A mistake in a case file, shown at its place in the file as a SQL mistake is (exit 2)."""


class _Map(dict):
    """A mapping read from a case file that remembers where it starts and where each key is
    (nothing for JSON)."""

    span: Span | None = None
    key_spans: dict[Any, Span] = {}  # noqa: RUF012 - replaced per instance by the YAML reader


# --- the model ---------------------------------------------------------------------------------


@record
class Rows:
    """Rows for ``table``, handed to the pipeline as one batch."""

    table: str
    rows: tuple[Mapping[str, Any], ...]
    span: Span | None
    #: Where the case names the table.
    table_span: Span | None = None


@record
class WatermarkStep:
    """Move ``table``'s watermark to ``ms`` (ms since the epoch)."""

    table: str
    ms: int
    text: str
    span: Span | None
    table_span: Span | None = None


@record
class AdvanceStep:
    """Move the processing-time clock forward by ``ms``."""

    ms: int
    span: Span | None


Step = Rows | WatermarkStep | AdvanceStep


@record
class Expectation:
    """What one output (sink table or ``query_N``) must produce: its final ``rows`` (compared
    as a multiset unless ``ordered``), or its ``changelog`` (a list of (kind, row), in order)."""

    output: str
    rows: tuple[Mapping[str, Any], ...] | None
    changelog: tuple[tuple[str, Mapping[str, Any]], ...] | None
    ordered: bool
    span: Span | None


@record
class Case:
    name: str
    file: str
    steps: tuple[Step, ...]
    expected: tuple[Expectation, ...]
    end_of_input: bool
    clock_ms: int
    span: Span | None

    @property
    def line(self) -> int | None:
        return self.span.line if self.span is not None else None


@record
class CaseFile:
    path: Path
    text: str
    #: The pipeline the file names (``pipeline:``, relative to the case file), if it names one.
    pipeline: Path | None
    cases: tuple[Case, ...]


@record(frozen=False)
class Outcome:
    """How a case went: ``passed``, the time it took, and otherwise the readable difference
    (or the error that stopped the pipeline)."""

    case: Case
    passed: bool
    seconds: float
    report: str = ""

    def line(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        return f"{status}  {self.case.name}  ({self.seconds * 1000:.0f} ms)"


# --- reading a case file -----------------------------------------------------------------------


def load_case_file(path: str | Path, sources: dict[str, str] | None = None) -> CaseFile:
    """Read and check the structure of a ``.yaml``/``.yml`` or ``.json`` case file.

    ``sources`` receives the file's text under its name, for rendering errors with a caret.
    Raises ``CaseFileError`` naming the file, the case and the place; ``UsageError`` when the
    file cannot be read or PyYAML is missing for a YAML file.
    """
    from clink.plans import read_source

    p = Path(path)
    name, text = read_source(path, sources, what="case file")
    if p.suffix.lower() == ".json":
        data = _read_json(text, name)
    elif p.suffix.lower() in (".yaml", ".yml"):
        data = _read_yaml(text, name)
    else:
        raise UsageError(f"{path}: a case file is .yaml, .yml or .json")
    return _case_file(data, p, text)


def _read_json(text: str, name: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> _Map:
        out = _Map()
        for key, value in items:
            if key in out:
                raise CaseFileError(f"{name}: the key {key!r} is given twice in one object", None)
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise CaseFileError(f"not valid JSON: {exc.msg}", Span(name, exc.lineno, exc.colno)) from None


def _read_yaml(text: str, name: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise UsageError(f"reading the YAML case file {name} needs PyYAML: {_INSTALL} (or pip install pyyaml); "
                         "a .json case file of the same shape needs nothing more") from None

    class Loader(yaml.SafeLoader):
        pass

    # Timestamps stay text: Arrow casts them to the column's type, as for pushed rows, and a
    # diff shows them as written.
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def mapping(loader: Loader, node: yaml.MappingNode) -> _Map:
        loader.flatten_mapping(node)
        out = _Map()
        out.span = _span(name, node.start_mark)
        out.key_spans = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in out:
                raise CaseFileError(f"the key {key!r} is given twice in one mapping", _span(name, key_node.start_mark),
                                    hint="to feed a table in several places, make 'input' a list of "
                                         "{table: steps} mappings")
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_spans[key] = _span(name, key_node.start_mark)
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise CaseFileError(f"not valid YAML: {exc.problem or exc.context}",
                            _span(name, mark) if mark else None) from None
    except yaml.YAMLError as exc:
        raise CaseFileError(f"{name}: not valid YAML: {exc}", None) from None


def _span(name: str, mark: Any) -> Span:
    return Span(name, mark.line + 1, mark.column + 1)


class _Reader:
    """Checks the shape of one case while reading it; errors name the file, the case and the place."""

    def __init__(self, file: str, case: str, span: Span | None) -> None:
        self.file = file
        self.case = case
        self.span = span

    def error(self, message: str, where: Any = None, hint: str | None = None) -> CaseFileError:
        span = getattr(where, "span", None) or self.span
        prefix = "" if span is not None else f"{self.file}: "
        return CaseFileError(f"{prefix}case {self.case!r}: {message}", span, hint)

    def mapping(self, value: Any, what: str, where: Any) -> _Map:
        if not isinstance(value, Mapping):
            raise self.error(f"{what} must be a mapping, got {_kind(value)}", where)
        return value if isinstance(value, _Map) else _Map(value)

    def keys(self, value: _Map, allowed: tuple[str, ...], what: str) -> None:
        for key in value:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {near[0]!r}?" if near else None
                raise self.error(f"{what} has no key {key!r} (it takes {', '.join(allowed)})", value, hint)


@record
class _At:
    """A place in the case file to point an error at."""

    span: Span | None


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "nothing"}.get(type(value), type(value).__name__)


def _case_file(data: Any, path: Path, text: str) -> CaseFile:
    name = path.name
    top = _Reader(name, "", getattr(data, "span", None))
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"{name}: a case file is a mapping with a list 'cases' (and optionally 'pipeline')",
                            Span(name, 1, 1))
    for key in data:
        if key not in ("cases", "pipeline"):
            raise CaseFileError(f"{name}: unknown top-level key {key!r} (a case file has 'cases' and "
                                "optionally 'pipeline')", getattr(data, "span", None))
    pipeline = data.get("pipeline")
    if pipeline is not None and not isinstance(pipeline, str):
        raise top.error("'pipeline' must be the path of a .sql file")
    cases = []
    seen: set[str] = set()
    for index, raw in enumerate(data["cases"], 1):
        case = _case(raw, index, name)
        if case.name in seen:
            raise CaseFileError(f"two cases are named {case.name!r}: each case needs its own name", case.span)
        seen.add(case.name)
        cases.append(case)
    return CaseFile(path=path, text=text, pipeline=(path.parent / pipeline) if pipeline else None,
                    cases=tuple(cases))


_CASE_KEYS = ("name", "input", "expect", "end_of_input", "clock")


def _case(raw: Any, index: int, file: str) -> Case:
    label = raw.get("name") if isinstance(raw, Mapping) and isinstance(raw.get("name"), str) else f"#{index}"
    r = _Reader(file, label, getattr(raw, "span", None))
    raw = r.mapping(raw, "a case", raw)
    r.keys(raw, _CASE_KEYS, "a case")
    if "name" not in raw:
        raise r.error("a case needs a 'name'", raw)
    if "expect" not in raw:
        raise r.error("a case needs 'expect': the rows or changelog each output must produce", raw)
    clock_text = raw.get("clock", DEFAULT_CLOCK)
    clock_ms = _timestamp_ms(r, clock_text, raw, "'clock'")
    end = raw.get("end_of_input", True)
    if not isinstance(end, bool):
        raise r.error(f"'end_of_input' is true or false, got {end!r}", raw)
    steps = tuple(_steps(r, raw.get("input", _Map()), raw))
    expect = r.mapping(raw["expect"], "'expect'", raw)
    expected = tuple(_expectation(r, output, value, expect, expect.key_spans.get(output))
                     for output, value in expect.items())
    return Case(name=str(raw["name"]), file=file, steps=steps, expected=expected, end_of_input=end,
                clock_ms=clock_ms, span=raw.span)


def _steps(r: _Reader, raw: Any, case: _Map) -> Iterator[Step]:
    """``input`` is ``{table: [steps]}`` (tables fed one after another, in the order written) or a
    list of such mappings (to come back to a table later)."""
    if isinstance(raw, Mapping):
        groups = [raw]
    elif isinstance(raw, list):
        groups = raw
    else:
        raise r.error(f"'input' must map each table to its steps, got {_kind(raw)}", case)
    for group in groups:
        group = r.mapping(group, "an element of 'input'", case)
        for table, steps in group.items():
            named = group.key_spans.get(table)
            if not isinstance(steps, list):
                raise r.error(f"the input of table {table!r} must be a list of rows and steps, got {_kind(steps)}",
                              group)
            pending: list[Mapping[str, Any]] = []
            first: Span | None = None
            for step in steps:
                step = r.mapping(step, f"each input step of table {table!r} (a row, or a watermark or advance step)",
                                 group)
                if "watermark" in step or "advance" in step:
                    if pending:
                        yield Rows(str(table), tuple(pending), first, named)
                        pending, first = [], None
                    if len(step) != 1:
                        raise r.error("a watermark or advance step has one key: {watermark: '2020-04-15 08:10:00'} "
                                      "or {advance: '5 s'}", step)
                    if "watermark" in step:
                        text = step["watermark"]
                        yield WatermarkStep(str(table), _timestamp_ms(r, text, step, "the watermark"), str(text),
                                            step.span, named)
                    else:
                        yield AdvanceStep(_duration_ms(r, step["advance"], step), step.span)
                else:
                    pending.append(step)
                    first = first or step.span
            if pending:
                yield Rows(str(table), tuple(pending), first, named)


def _expectation(r: _Reader, output: Any, value: Any, where: _Map, named: Span | None) -> Expectation:
    if isinstance(value, list):  # the short form: the final rows
        value = _Map(rows=value)
        value.span = where.span
    spec = r.mapping(value, f"the expectation of {output!r}", where)
    r.keys(spec, ("rows", "changelog", "ordered"), f"the expectation of {output!r}")
    if ("rows" in spec) == ("changelog" in spec):
        raise r.error(f"the expectation of {output!r} gives either 'rows' (the final rows) or 'changelog' "
                      "(every change, in order)", spec)
    ordered = spec.get("ordered", False)
    if not isinstance(ordered, bool):
        raise r.error(f"'ordered' is true or false, got {ordered!r}", spec)
    if "rows" in spec:
        rows = spec["rows"]
        if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
            raise r.error(f"the rows of {output!r} must be a list of mappings (column: value)", spec)
        return Expectation(str(output), tuple(rows), None, ordered, named or spec.span)
    changes = spec["changelog"]
    if not isinstance(changes, list):
        raise r.error(f"the changelog of {output!r} must be a list like [{{'+I': {{word: a, n: 1}}}}]", spec)
    out = []
    for change in changes:
        if (not isinstance(change, Mapping) or len(change) != 1
                or next(iter(change)) not in ("+I", "-U", "+U", "-D")
                or not isinstance(next(iter(change.values())), Mapping)):
            raise r.error(f"each change of {output!r} is one of +I, -U, +U, -D with its row, "
                          "like {'+I': {word: a, n: 1}}", change if isinstance(change, _Map) else spec)
        ((kind, row),) = change.items()
        out.append((kind, row))
    return Expectation(str(output), None, tuple(out), True, named or spec.span)


def _timestamp_ms(r: _Reader, text: Any, where: Any, what: str) -> int:
    import pyarrow as pa

    try:
        value = pa.array([str(text)]).cast(pa.timestamp("ms"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise r.error(f"{what} {text!r} is not a timestamp; write it like '2020-04-15 08:10:00'", where) from None
    return value.cast(pa.int64())[0].as_py()


def _duration_ms(r: _Reader, text: Any, where: Any) -> int:
    from clink.runtime.settings import parse_duration

    try:
        ms = parse_duration(str(text))
    except ValueError as exc:
        raise r.error(f"advance: {exc}", where) from None
    if ms < 0:
        raise r.error("advance: the clock only goes forward", where)
    return ms


# --- running -----------------------------------------------------------------------------------


#: What every case runs with: one subtask per operator (a deterministic order of changes), in
#: this process whatever the pipeline's SET says.
_CASE_SETTINGS = {"parallelism.default": "1", "execution.target": "local"}


def case_plan(plan: RuntimePlan) -> RuntimePlan:
    """``plan`` with each source read from a push table and each sink collected under its table's
    name (bare ``SELECT``s keep ``query_1``, ``query_2``, …). Nothing else changes: computed
    columns, WATERMARK clauses and every operator are the pipeline's own."""
    from clink.runtime.plan import Plan, Sink, Source

    nodes = []
    for node in plan.nodes:
        if isinstance(node, Source) and node.connector != "values":  # VALUES rows are the query's own
            node = evolve(node, connector="push", options={}, predicate=None)
        elif isinstance(node, Sink) and node.connector != "collect":
            node = evolve(node, connector="collect", options={})
        nodes.append(node)
    return Plan(nodes=tuple(nodes), name=plan.name, fingerprint=plan.fingerprint,
                config={k: v for k, v in plan.config.items() if k != "ray.address"}, explain=plan.explain)


class _Clock:
    """The case's processing-time clock: it moves only when an ``advance`` step says so."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def check_case(plan: RuntimePlan, case: Case) -> None:
    """Refuse, before anything runs, a case that names a table or an output the pipeline lacks,
    a watermark for a table without event time, or rows that do not fit their table."""
    from clink.runtime.connectors.push import to_table_rows

    sources = {}
    for node in plan.sources:
        if node.connector != "values":  # a VALUES list in the query is not a table
            sources.setdefault(node.table, node)
    outputs = list(dict.fromkeys(s.table for s in plan.sinks))
    r = _Reader(case.file, case.name, case.span)
    for step in case.steps:
        if isinstance(step, AdvanceStep):
            continue
        if step.table not in sources:
            near = difflib.get_close_matches(step.table, list(sources), n=1)
            raise r.error(f"the pipeline reads no table {step.table!r} (it reads: {', '.join(sources) or 'none'})",
                          _At(step.table_span or step.span), f"did you mean {near[0]!r}?" if near else None)
        node = sources[step.table]
        if isinstance(step, WatermarkStep):
            if node.watermark is None:
                raise r.error(f"table {step.table!r} has no event time (no WATERMARK clause): a watermark step "
                              "cannot move it", step)
            continue
        if node.changelog.updating:
            raise r.error(f"table {step.table!r} reads a changelog ('{node.connector}'); a case gives it insert-only "
                          "rows, which cannot stand for its updates", step,
                          "test the query on a table of the same columns declared without the changelog format")
        try:
            to_table_rows(step.table, list(step.rows), node.table_schema)
        except UsageError:
            for row in step.rows:  # the error path only: find the row to point at
                try:
                    to_table_rows(step.table, [row], node.table_schema)
                except UsageError as exc:
                    raise r.error(str(exc).replace("cannot push into", "a row does not fit"), row) from None
            raise
    for expectation in case.expected:
        if expectation.output not in outputs:
            near = difflib.get_close_matches(expectation.output, outputs, n=1)
            raise r.error(f"the pipeline has no output {expectation.output!r} (its outputs: "
                          f"{', '.join(outputs) or 'none'}; a bare SELECT is query_1, query_2, …)",
                          expectation, f"did you mean {near[0]!r}?" if near else None)


def run_case(plan: RuntimePlan, case: Case) -> Outcome:
    """Run ``case`` against ``plan`` (the pipeline's plan, as compiled; ``case_plan`` is applied
    here) and compare what each expected output produced. A case file mistake raises
    ``CaseFileError``; a pipeline that fails while running makes a failed outcome."""
    from clink.embedded import EmbeddedJob
    from clink.runtime.connectors.collect import COLLECT
    from clink.runtime.connectors.values import VALUES
    from clink.runtime.context import RuntimeContext
    from clink.runtime.registry import ConnectorRegistry

    check_case(plan, case)
    started = time.perf_counter()
    plan = case_plan(plan)
    clock = _Clock(case.clock_ms)
    # A case's plan reads push tables (and VALUES) and writes collectors only: a registry of just
    # those keeps the job from loading every connector module (Kafka's, JDBC's, …) it would not use.
    ctx = RuntimeContext(clock=clock, stdout=io.StringIO(), stderr=io.StringIO(), config=dict(_CASE_SETTINGS),
                         connectors=ConnectorRegistry([COLLECT, VALUES]))
    produced: dict[str, list[pa.RecordBatch]] = {}
    try:
        job = EmbeddedJob(plan, context=ctx)
        for name in job.queries:
            produced[name] = []
            job.on_rows(name, produced[name].append)
        for step in case.steps:
            if isinstance(step, Rows):
                job.push(step.table, list(step.rows))
                job.run_until_idle()
            elif isinstance(step, WatermarkStep):
                job.advance_watermark(step.table, step.ms)
            else:
                clock.ms += step.ms
                job.step()  # a round after the clock moved: processing-time windows fire
                job.run_until_idle()
        if case.end_of_input:
            for table in job.push_tables:
                job.close_input(table)
            job.wait()
        else:
            job.run_until_idle()
            job.stop(with_checkpoint=False)
    except CaseFileError:
        raise
    except ClinkError as exc:
        return Outcome(case, False, time.perf_counter() - started,
                       f"  the pipeline failed: {exc}")
    sinks = {s.table: s for s in plan.sinks}
    reports = [compare(e, produced.get(e.output, []), sinks[e.output].schema, sinks[e.output].primary_key, case)
               for e in case.expected]
    report = "\n".join(r for r in reports if r)
    return Outcome(case, not report, time.perf_counter() - started, report)


# --- comparing ---------------------------------------------------------------------------------


def compare(expectation: Expectation, batches: list[pa.RecordBatch], schema: pa.Schema,
            primary_key: tuple[str, ...], case: Case) -> str:
    """The difference between what ``expectation`` says and the ``batches`` an output produced,
    as readable text; empty when they agree."""
    import pyarrow as pa

    from clink.runtime.plan import ROWKIND_COLUMN

    # A batch may say NOT NULL where the sink's schema does not: the values are what count.
    table = pa.Table.from_batches([pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches],
                                  schema=schema)
    kinds = (table.column(ROWKIND_COLUMN).to_pylist() if ROWKIND_COLUMN in table.column_names
             else ["+I"] * table.num_rows)
    data_schema = pa.schema([f for f in schema if f.name != ROWKIND_COLUMN])
    given = expectation.changelog if expectation.changelog is not None else tuple(
        ("+I", row) for row in expectation.rows)
    columns = _columns(expectation, given, data_schema, case)
    expected = _as_values(expectation, [row for _, row in given], columns, data_schema, case)
    actual = ([tuple(_canonical(v) for v in row) for row in zip(*(table.column(c).to_pylist() for c in columns))]
              if columns else [()] * table.num_rows)
    if expectation.changelog is not None:
        want = [f"{kind}{_show(columns, row)}" for (kind, _), row in zip(given, expected)]
        got = [f"{kind}{_show(columns, row)}" for kind, row in zip(kinds, actual)]
        return _sequence_diff(expectation.output, "changelog differs", want, got)
    final = _final_rows(kinds, actual, [columns.index(k) for k in primary_key if k in columns]
                        if primary_key and all(k in columns for k in primary_key) else None)
    if expectation.ordered:
        return _sequence_diff(expectation.output, "rows differ", [_show(columns, r) for r in expected],
                              [_show(columns, r) for r in final])
    missing = Counter(expected) - Counter(final)
    unexpected = Counter(final) - Counter(expected)
    if not missing and not unexpected:
        return ""
    lines = [f"  {expectation.output}: {_count(missing)} missing, {_count(unexpected)} unexpected "
             f"(- expected but not produced, + produced but not expected)"]
    lines += [f"    - {_show(columns, row)}" for row in _each(missing, expected)]
    lines += [f"    + {_show(columns, row)}" for row in _each(unexpected, final)]
    return "\n".join(lines)


def _columns(expectation: Expectation, given: tuple[tuple[str, Mapping[str, Any]], ...], schema: pa.Schema,
             case: Case) -> list[str]:
    """The columns the expectation compares: those its rows name (all of the output's when it
    names none, as for an expectation of no rows)."""
    named = list(dict.fromkeys(key for _, row in given for key in row))
    if not named:
        return schema.names
    r = _Reader(case.file, case.name, expectation.span)
    for key in named:
        if key not in schema.names:
            near = difflib.get_close_matches(str(key), schema.names, n=1)
            row = next(row for _, row in given if key in row)
            where = _At(getattr(row, "key_spans", {}).get(key) or getattr(row, "span", None) or expectation.span)
            raise r.error(f"output {expectation.output!r} has no column {key!r} (its columns: "
                          f"{', '.join(schema.names)})", where, f"did you mean {near[0]!r}?" if near else None)
    return [name for name in schema.names if name in named]


def _as_values(expectation: Expectation, rows: list[Mapping[str, Any]], columns: list[str], schema: pa.Schema,
               case: Case) -> list[tuple]:
    """The expected rows as tuples of the output's own Python values (cast to its column types)."""
    import pyarrow as pa

    r = _Reader(case.file, case.name, expectation.span)
    arrays = []
    for name in columns:
        target = schema.field(name).type
        values = [row.get(name) for row in rows]
        try:
            array = pa.array(values)
            if array.type != target:
                array = array.cast(target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            reason = str(exc).splitlines()[0]
            raise r.error(f"the expected values of column {name!r} of {expectation.output!r} are not "
                          f"{target}: {reason}", expectation) from None
        arrays.append(array.to_pylist())
    if not columns:
        return [()] * len(rows)
    return [tuple(_canonical(v) for v in row) for row in zip(*arrays)]


def _canonical(value: Any) -> Any:
    # Doubles that agree to 12 significant digits are equal: a sum may add in another order.
    if isinstance(value, float):
        return float(f"{value:.12g}")
    return value


def _final_rows(kinds: list[str], rows: list[tuple], key: list[int] | None) -> list[tuple]:
    """Apply a changelog: what a table that took every change holds at the end. By ``key`` (a sink's
    primary key: the last change of a key wins), else row by row (-U and -D take back one equal row).
    Outputs of a test case are small; one pass in Python keeps the rule plain."""
    if key is not None:
        table: dict[tuple, tuple] = {}
        for kind, row in zip(kinds, rows):
            k = tuple(row[i] for i in key)
            if kind in ("+I", "+U"):
                table[k] = row
            elif kind == "-D":
                table.pop(k, None)
        return list(table.values())
    held: Counter[tuple] = Counter()
    order: dict[tuple, None] = {}
    for kind, row in zip(kinds, rows):
        if kind in ("+I", "+U"):
            held[row] += 1
            order[row] = None
        elif held[row]:
            held[row] -= 1
    return [row for row in order for _ in range(held[row])]


def _each(counts: Counter, in_order: list[tuple]) -> list[tuple]:
    out = []
    remaining = Counter(counts)
    for row in in_order:
        if remaining[row]:
            remaining[row] -= 1
            out.append(row)
    return out


def _count(counter: Counter) -> str:
    n = sum(counter.values())
    return f"{n} row" if n == 1 else f"{n} rows"


def _sequence_diff(output: str, what: str, want: list[str], got: list[str]) -> str:
    if want == got:
        return ""
    lines = [f"  {output}: the {what} (- expected, + produced)"]
    for line in difflib.ndiff(want, got):
        if line.startswith("?"):
            continue
        lines.append(f"    {line}")
    return "\n".join(lines)


def _show(columns: list[str], row: tuple) -> str:
    """A row as a YAML flow mapping, so a produced row can be pasted into a case file."""
    return "{" + ", ".join(f"{c}: {_literal(v)}" for c, v in zip(columns, row)) + "}"


def _literal(value: Any) -> str:
    import datetime

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, datetime.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond // 1000:03d}"
        return f'"{text}"'
    if isinstance(value, (datetime.date, datetime.time)):
        return f'"{value.isoformat()}"'
    return json.dumps(value, ensure_ascii=False, default=str)


def pipeline_plan(path: str | Path, sources: dict[str, str] | None = None) -> RuntimePlan:
    """The plan of the pipeline in the SQL file ``path``: from the plan cache when this text was
    compiled before, else compiled now (``SqlError`` for a mistake in it, with its position)."""
    from clink.plans import plan_from_sql, read_source

    name, text = read_source(path, sources, what="pipeline")
    plan, _ = plan_from_sql(text, name, recompile=False)
    return plan
