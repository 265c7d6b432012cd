"""The filesystem source's JSON-lines decoder against its exact path, one line at a time.

The reader decodes a whole chunk of lines in one call and, when that fails, bisects down to the
bad lines (``FileSourceReader._json_chunk``); ROW columns the plan reads only some fields of are
decoded with those fields alone and widened back (``TableSpec.fields``). The reference here is
the same reader over a file of one line: what each line gives on its own, or the error it raises.
Over random lines (nested ROWs, NULLs, missing keys, unknown keys, values of the wrong type, lines
that are not JSON, blank lines) and chunk sizes that cut the file at every few lines:

- skipping bad lines gives exactly the good lines' rows, in order, and counts the bad ones;
- failing on them names the first bad line and the reason that line gives on its own;
- reading only some fields of a ROW never changes a value that is read (from a file or from
  Kafka messages): where the whole line reads, the pruned row is the whole row with the unread
  fields null.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.errors import RecordError
from clink.runtime.connectors import filesystem
from clink.runtime.connectors.base import ConnectorRegistry, TableSpec
from clink.runtime.connectors.filesystem import FILESYSTEM, BadValue
from clink.runtime.connectors.kafka_formats import decode
from clink.runtime.context import RuntimeContext

TS = pa.timestamp("ms")
ROW = pa.struct([("a", pa.int64()), ("b", pa.string()), ("t", TS), ("c", pa.struct([("x", pa.int32())]))])
SCHEMA = pa.schema([("id", pa.int64()), ("price", pa.float64()), ("name", pa.string()), ("ts", TS), ("r", ROW)])
#: What a query reading ``r.a`` and ``r.t`` only tells the source.
PRUNED = {"r": ("a", "t")}

#: Values of the right type, of a wrong one, or null; timestamps as Flink's json format writes
#: them (and one that is not a timestamp).
wrong = st.sampled_from(["x", 1.5, True, [1], {"k": 1}])
ints = st.integers(-1000, 1000) | st.none() | wrong
doubles = st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-5, 5) | st.none() | wrong
strings = st.text("ab\"\\ é", max_size=4) | st.none() | wrong
stamps = st.sampled_from(["2024-01-01 00:00:00.000", "2024-02-29 12:34:56.789", "2024-01-01T01:02:03", None,
                          "not a time", 5])


def objects(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """Objects with any subset of ``fields`` (a key left out reads as null) and maybe an unknown key."""
    return st.fixed_dictionaries({}, optional={**fields, "extra": st.integers() | st.text(max_size=3)})


rows = objects({"a": ints, "b": strings, "t": stamps,
                "c": objects({"x": ints}) | st.none() | wrong}) | st.none() | wrong
records = objects({"id": ints, "price": doubles, "name": strings, "ts": stamps, "r": rows})
lines = st.lists(records.map(json.dumps) | st.sampled_from(["", "{", "[1, 2]", "nope", "  "]), max_size=25)


def context() -> RuntimeContext:
    return RuntimeContext(connectors=ConnectorRegistry(), stdout=io.StringIO())  # type: ignore[arg-type]


def read(path: Path, *, fields: dict, ignore: bool) -> tuple[pa.Table, int]:
    options = {"path": str(path), "format": "json", "json.ignore-parse-errors": str(ignore).lower()}
    spec = TableSpec(name="t", schema=SCHEMA, table_schema=SCHEMA, options=options, fields=fields)
    reader = FILESYSTEM.create_source(spec, context())
    batches = []
    try:
        while not reader.finished:
            batch = reader.poll()
            if batch is not None:
                assert batch.schema == SCHEMA
                batches.append(batch)
    finally:
        reader.close()
    return pa.Table.from_batches(batches, schema=SCHEMA), reader.metrics["skipped_records"]


def alone(folder: Path, line: str, fields: dict) -> pa.Table | RecordError:
    """What one line gives on its own: its rows, or the error it fails with."""
    path = folder / "one.json"
    path.write_text(line + "\n")
    try:
        return read(path, fields=fields, ignore=False)[0]
    except RecordError as e:
        return e


def null_unread(table: pa.Table) -> pa.Table:
    """``table`` with the fields of ``r`` that PRUNED leaves out set to null."""
    r = table.column("r").combine_chunks()
    children = [r.field(i) if ROW.field(i).name in PRUNED["r"] else pa.nulls(len(r), ROW.field(i).type)
                for i in range(ROW.num_fields)]
    widened = pa.StructArray.from_arrays(children, fields=list(ROW), mask=r.is_null() if r.null_count else None)
    return table.set_column(SCHEMA.get_field_index("r"), "r", widened)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=lines, chunk=st.sampled_from([48, 300, 1 << 20]), pruned=st.booleans())
def test_json_decoding_matches_the_line_by_line_path(tmp_path: Path, text: list[str], chunk: int,
                                                     pruned: bool) -> None:
    fields = PRUNED if pruned else {}
    path = tmp_path / "in.json"
    path.write_text("".join(line + "\n" for line in text))
    expected = [alone(tmp_path, line, fields) if line.strip() else None for line in text]
    good = [t for t in expected if isinstance(t, pa.Table)]
    bad = [i for i, t in enumerate(expected) if isinstance(t, RecordError)]
    want = pa.concat_tables([SCHEMA.empty_table(), *good])
    # Small chunks cut the file every few lines, so that lines straddle reads and bad lines sit
    # in any chunk.
    with mock.patch.object(filesystem, "JSON_CHUNK_SIZE", chunk):
        table, skipped = read(path, fields=fields, ignore=True)
        assert table.equals(want)
        assert skipped == len(bad)
        if not bad:
            assert read(path, fields=fields, ignore=False)[0].equals(want)
            return
        with pytest.raises(RecordError) as info:
            read(path, fields=fields, ignore=False)
    first = expected[bad[0]]
    assert (info.value.file, info.value.line, info.value.reason) == (str(path), bad[0] + 1, first.reason)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=records.map(json.dumps))
def test_reading_some_fields_never_changes_a_value_read(tmp_path: Path, line: str) -> None:
    whole = alone(tmp_path, line, {})
    pruned = alone(tmp_path, line, PRUNED)
    if isinstance(whole, pa.Table):
        # A line that reads whole reads pruned too (its unread fields are not even looked at).
        assert isinstance(pruned, pa.Table)
        assert pruned.equals(null_unread(whole))


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(records.map(json.dumps), min_size=1, max_size=10))
def test_kafka_json_values_read_some_fields_the_same_way(messages: list[str]) -> None:
    payloads = [m.encode() for m in messages]
    try:
        whole = decode("json", payloads, SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue):
        return  # a bad message: the connector bisects to it (its own tests)
    assert decode("json", payloads, SCHEMA, fields=PRUNED).equals(null_unread(whole))
