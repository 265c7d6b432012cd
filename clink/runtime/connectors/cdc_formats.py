"""Changelog value formats of the ``kafka`` source: ``debezium-json`` and ``canal-json``.

Each message describes changes to rows of a database table; decoding turns the values of many
messages into one Arrow table of rows with their kinds (``+I``, ``-U``, ``+U``, ``-D``), as
Flink's formats of those names do:

- ``debezium-json``: ``{"before": {...}, "after": {...}, "op": "c"}``, or the same under
  ``"payload"`` (``'debezium-json.schema-include' = 'true'``). ``c`` (create) and ``r`` (read, a
  snapshot) insert ``after``; ``u`` retracts ``before`` and inserts ``after`` (``-U`` then
  ``+U``); ``d`` deletes ``before``. An update or delete without ``before`` is refused (a
  PostgreSQL table needs ``REPLICA IDENTITY FULL``).
- ``canal-json``: ``{"data": [{...}, ...], "old": [{...}, ...], "type": "UPDATE", ...}``: one
  change per element of ``data``. ``INSERT`` (and ``INIT``) insert, ``DELETE`` deletes; in an
  ``UPDATE`` the row before is ``data[i]`` with the fields ``old`` names replaced by their old
  values. ``CREATE`` (a DDL event) carries no row and is skipped. Canal writes every value as a
  JSON string (``"111"``); numbers are read too.

The messages are joined into one text and parsed by pyarrow's JSON reader against the envelope
with the table's columns; the rows and kinds are then put in order by one ``take``.

Format metadata (``FORMAT_METADATA``, Flink's keys, read by a kafka table as
``METADATA FROM 'value.<key>'``): each change carries the values of the message it came from, as
extra columns ``value.<key>`` after the table's.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from clink.runtime import compute as pc
from clink.runtime.connectors.filesystem import BadValue, cast_text
from clink.runtime.plan import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE

__all__ = ["CHANGELOG_FORMATS", "FORMAT_METADATA", "UNREAD_METADATA", "decode_changelog"]

CHANGELOG_FORMATS = ("debezium-json", "canal-json")

#: Per format, the metadata a change carries (Flink's keys, without the ``value.`` prefix a kafka
#: table gives them): its type, and the path to it in the message.
_TS = pa.timestamp("ms", "UTC")
FORMAT_METADATA: dict[str, dict[str, tuple[pa.DataType, tuple[str, ...]]]] = {
    "debezium-json": {
        "ingestion-timestamp": (_TS, ("ts_ms",)),
        "source.timestamp": (_TS, ("source", "ts_ms")),
        "source.database": (pa.string(), ("source", "db")),
        "source.schema": (pa.string(), ("source", "schema")),
        "source.table": (pa.string(), ("source", "table")),
    },
    "canal-json": {
        "database": (pa.string(), ("database",)),
        "table": (pa.string(), ("table",)),
        "ingestion-timestamp": (_TS, ("ts",)),
        "event-timestamp": (_TS, ("es",)),
        "pk-names": (pa.list_(pa.string()), ("pkNames",)),
    },
}
#: Flink's metadata of these formats that clink does not read, and why.
UNREAD_METADATA = {
    "debezium-json": {"schema": "the JSON schema of a message", "source.properties": "a MAP of the whole source"},
    "canal-json": {"sql-type": "a MAP of the columns' SQL types"},
}

_CANAL_INSERT = ("INSERT", "INIT")
_CANAL_SKIPPED = ("CREATE",)


def _needs_text(t: pa.DataType) -> bool:
    return pa.types.is_temporal(t) or pa.types.is_binary(t)


def _row_type(schema: pa.Schema, *, as_text: bool) -> pa.StructType:
    """The struct a row is read as: columns that JSON cannot give directly (or, ``as_text``,
    every flat column: Canal quotes its values) read as strings, cast afterwards. Every field may
    be NULL here: a change has no row before (an insert) or after (a delete), even for the
    columns of a PRIMARY KEY, which are NOT NULL in the table."""
    return pa.struct([pa.field(f.name, pa.string()) if _needs_text(f.type) or (as_text and not pa.types.is_nested(
        f.type)) else f.with_nullable(True) for f in schema])


def _read(payloads: list[bytes], envelope: pa.Schema) -> pa.Table:
    data = b"\n".join(payloads) + b"\n"
    table = pa_json.read_json(io.BytesIO(data),
                              read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
                              parse_options=pa_json.ParseOptions(explicit_schema=envelope,
                                                                 unexpected_field_behavior="ignore"))
    if table.num_rows != len(payloads):
        raise BadValue(f"{len(payloads)} messages gave {table.num_rows} rows")
    return table


def _metadata_fields(fmt: str, keys: tuple[str, ...]) -> list[pa.Field]:
    """The envelope fields that hold the metadata ``keys`` of format ``fmt`` (timestamps as
    epoch milliseconds, as the formats write them)."""
    fields: dict[str, dict | pa.DataType] = {}
    for key in keys:
        t, path = FORMAT_METADATA[fmt][key]
        at = fields
        for step in path[:-1]:
            at = at.setdefault(step, {})
        at[path[-1]] = pa.int64() if t == _TS else t

    def field(name: str, t) -> pa.Field:
        return pa.field(name, pa.struct([field(k, v) for k, v in t.items()]) if isinstance(t, dict) else t)

    return [field(k, v) for k, v in fields.items()]


def _metadata(fmt: str, keys: tuple[str, ...], envelope: pa.StructArray | pa.Table) -> dict[str, pa.Array]:
    """Per message, the values of the metadata ``keys``, as columns named ``value.<key>``."""
    out = {}
    for key in keys:
        t, path = FORMAT_METADATA[fmt][key]
        if isinstance(envelope, pa.Table):
            column = envelope.column(path[0]).combine_chunks()
        else:
            column = envelope.field(path[0])
        for step in path[1:]:
            column = pc.struct_field(column, step)
        out[f"value.{key}"] = column.cast(t) if t == _TS else column
    return out


def _with_metadata(rows: pa.Table, metadata: dict[str, pa.Array], origin: np.ndarray) -> pa.Table:
    """``rows`` (one per change) with the metadata of the message each came from."""
    for name, column in metadata.items():
        rows = rows.append_column(name, column.take(pa.array(origin, pa.int64())))
    return rows


def _columns(rows: pa.Array, schema: pa.Schema) -> list[pa.Array]:
    """The fields of a struct array as columns of ``schema``'s types (a NULL row: NULL fields)."""
    rows = rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows
    out = []
    for i, f in enumerate(schema):
        column = rows.field(i)
        if rows.null_count:
            column = pc.if_else(pc.is_valid(rows), column, pa.scalar(None, column.type))
        out.append(column if column.type == f.type else cast_text(column, f.type, empty_is_null=False))
    return out


def _interleave(first: np.ndarray, second: np.ndarray, first_kind: np.ndarray, second_kind: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per change ``c``: row ``first[c]`` of kind ``first_kind[c]``, then, where ``second[c]`` is
    not -1, row ``second[c]`` of kind ``second_kind[c]``. Returns the rows to take, their kinds,
    and the change each comes from."""
    counts = 1 + (second >= 0)
    change = np.repeat(np.arange(len(first)), counts)
    starts = np.cumsum(counts) - counts
    is_second = (np.arange(len(change)) - starts[change]) == 1
    take = np.where(is_second, second[change], first[change])
    kinds = np.where(is_second, second_kind[change], first_kind[change])
    return take, kinds, change


def _debezium(payloads: list[bytes], schema: pa.Schema, *, as_text: bool, schema_include: bool,
              metadata: tuple[str, ...]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    row = _row_type(schema, as_text=as_text)
    body = pa.struct([pa.field("before", row), pa.field("after", row), pa.field("op", pa.string()),
                      *_metadata_fields("debezium-json", metadata)])
    envelope = pa.schema([pa.field("payload", body)] if schema_include else list(body))
    table = _read(payloads, envelope)
    if schema_include:
        payload = table.column("payload").combine_chunks()
        if payload.null_count:
            raise BadValue("a message has no 'payload' ('debezium-json.schema-include' is true)")
        before, after, op = payload.field("before"), payload.field("after"), payload.field("op")
        meta = _metadata("debezium-json", metadata, payload)
    else:
        before, after, op = (table.column(n).combine_chunks() for n in ("before", "after", "op"))
        meta = _metadata("debezium-json", metadata, table)
    ops = np.asarray(op.to_numpy(zero_copy_only=False), dtype=object)
    n = len(ops)
    inserts, updates, deletes = np.isin(ops, ("c", "r")), ops == "u", ops == "d"
    if not (inserts | updates | deletes).all():
        bad = next(o for o, ok in zip(ops, inserts | updates | deletes, strict=True) if not ok)
        raise BadValue(f"unknown Debezium 'op' {bad!r}: expected c, r, u or d")
    missing_before = (updates | deletes) & ~before.is_valid().to_numpy(zero_copy_only=False)
    if missing_before.any():
        raise BadValue("the 'before' field of an update or delete is null; a PostgreSQL table needs "
                       "REPLICA IDENTITY FULL for its changes to carry the old row")
    if (inserts | updates).any() and ((inserts | updates) & ~after.is_valid().to_numpy(zero_copy_only=False)).any():
        raise BadValue("the 'after' field of an insert or update is null")
    # Rows 0..n-1 are the 'before' images, n..2n-1 the 'after' ones.
    index = np.arange(n)
    first = np.where(inserts, n + index, index)
    second = np.where(updates, n + index, -1)
    first_kind = np.where(inserts, INSERT, np.where(updates, UPDATE_BEFORE, DELETE))
    second_kind = np.full(n, UPDATE_AFTER)
    take, kinds, origin = _interleave(first, second, first_kind, second_kind)
    both = pa.Table.from_arrays([pa.concat_arrays([b, a]) for b, a in zip(_columns(before, schema),
                                                                        _columns(after, schema), strict=True)],
                                schema=schema)
    return _with_metadata(both.take(pa.array(take, pa.int64())), meta, origin), kinds, origin


def _mentioned(old_text: pa.Array, name: str) -> np.ndarray:
    """Per message, whether its ``old`` text has a field ``name`` (as Flink looks for it:
    anywhere in ``old``)."""
    pattern = r'(^|[^\\])"' + re.escape(name) + r'"\s*:'
    return pc.fill_null(pc.match_substring_regex(old_text, pattern), False).to_numpy(zero_copy_only=False)


def _old_text(payloads: list[bytes]) -> pa.Array:
    """The ``"old": [...]`` part of each message's text (values are strings or flat scalars)."""
    text = pa.array(payloads, pa.binary()).cast(pa.string())
    found = pc.extract_regex(text, r'"old"\s*:\s*(?P<old>\[(?:[^\]"]|"(?:[^"\\]|\\.)*")*\])')
    return pc.struct_field(found, "old")


def _canal(payloads: list[bytes], schema: pa.Schema, *, as_text: bool, database: str | None, table_name: str | None,
           metadata: tuple[str, ...]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    row = _row_type(schema, as_text=as_text)
    extra = [f for f in _metadata_fields("canal-json", metadata) if f.name not in ("database", "table")]
    envelope = pa.schema([pa.field("data", pa.list_(row)), pa.field("old", pa.list_(row)),
                          pa.field("type", pa.string()), pa.field("database", pa.string()),
                          pa.field("table", pa.string()), *extra])
    table = _read(payloads, envelope)
    meta = _metadata("canal-json", metadata, table)
    types = np.asarray(table.column("type").to_numpy(zero_copy_only=False), dtype=object)
    keep = ~np.isin(types, _CANAL_SKIPPED)
    for column, pattern in (("database", database), ("table", table_name)):
        if pattern is not None:
            matched = pc.match_substring_regex(table.column(column), f"^(?:{pattern})$")
            keep &= pc.fill_null(matched, False).to_numpy(zero_copy_only=False)
    inserts, updates, deletes = np.isin(types, _CANAL_INSERT), types == "UPDATE", types == "DELETE"
    known = inserts | updates | deletes
    if (keep & ~known).any():
        bad = next(t for t, k in zip(types, keep & ~known, strict=True) if k)
        raise BadValue(f"unknown Canal 'type' {bad!r}: expected INSERT, UPDATE, DELETE or CREATE")
    data = table.column("data").combine_chunks()
    if (keep & ~data.is_valid().to_numpy(zero_copy_only=False)).any():
        raise BadValue("a Canal change without 'data'")
    kept = np.flatnonzero(keep)
    data = data.take(pa.array(kept, pa.int64()))
    rows = pc.list_flatten(data)
    parent = kept[pc.list_parent_indices(data).to_numpy()] if len(rows) else np.zeros(0, np.int64)
    data_columns = _columns(rows, schema)
    m = len(rows)
    is_update = updates[parent]
    # The rows before the updates: 'old' replaces the fields it names, the rest are as 'data'.
    upd_messages = np.flatnonzero(keep & updates)
    before_columns: list[pa.Array] = [c.slice(0, 0) for c in data_columns]
    if len(upd_messages):
        old = table.column("old").combine_chunks().take(pa.array(upd_messages, pa.int64()))
        lengths = pc.fill_null(pc.list_value_length(old), 0).to_numpy(zero_copy_only=False)
        if not np.array_equal(lengths, np.bincount(parent[is_update], minlength=len(payloads))[upd_messages]):
            raise BadValue("a Canal UPDATE whose 'old' does not have one element per element of 'data'")
        old_columns = _columns(pc.list_flatten(old), schema)
        old_parent = upd_messages[pc.list_parent_indices(old).to_numpy()]
        texts = _old_text([payloads[i] for i in upd_messages])
        slot = np.full(len(payloads), -1)
        slot[upd_messages] = np.arange(len(upd_messages))
        data_of_update = pa.array(np.flatnonzero(is_update), pa.int64())
        before_columns = []
        for f, old_column, data_column in zip(schema, old_columns, data_columns, strict=True):
            mentioned = _mentioned(texts, f.name)[slot[old_parent]]
            before_columns.append(pc.if_else(pa.array(mentioned), old_column, data_column.take(data_of_update)))
    index = np.arange(m)
    before_row = np.full(m, -1)
    before_row[is_update] = m + np.arange(int(is_update.sum()))
    first = np.where(is_update, before_row, index)
    second = np.where(is_update, index, -1)
    first_kind = np.where(is_update, UPDATE_BEFORE, np.where(deletes[parent], DELETE, INSERT))
    second_kind = np.full(m, UPDATE_AFTER)
    take, kinds, change = _interleave(first, second, first_kind, second_kind)
    both = pa.Table.from_arrays([pa.concat_arrays([d, b]) for d, b in zip(data_columns, before_columns, strict=True)],
                                schema=schema)
    return _with_metadata(both.take(pa.array(take, pa.int64())), meta, parent[change]), kinds, parent[change]


def decode_changelog(fmt: str, payloads: list[bytes], schema: pa.Schema, *, schema_include: bool = False,
                     database: str | None = None, table: str | None = None,
                     metadata: tuple[str, ...] = ()) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The changes ``payloads`` carry: the rows (columns of ``schema``, then ``value.<key>`` for
    each key of ``metadata``), each row's kind, and the index of the message each row comes from
    (a message gives none, one or several rows).

    Raises ``BadValue`` (or ``pyarrow.ArrowInvalid``) when some payload does not parse or is not
    a change; the caller bisects to find it. Values may be JSON numbers or quoted (Canal quotes
    them all): a run of messages is read one way, then the other, then in halves.
    """
    if not payloads:
        empty = schema.empty_table()
        for key in metadata:
            empty = empty.append_column(f"value.{key}", pa.array([], FORMAT_METADATA[fmt][key][0]))
        return empty, np.zeros(0, object), np.zeros(0, np.int64)

    def attempt(part: list[bytes], as_text: bool):
        if fmt == "debezium-json":
            return _debezium(part, schema, as_text=as_text, schema_include=schema_include, metadata=metadata)
        return _canal(part, schema, as_text=as_text, database=database, table_name=table, metadata=metadata)

    first = fmt == "canal-json"  # Canal quotes its values: try text first
    try:
        return attempt(payloads, first)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue) as e:
        problem = e
    try:
        return attempt(payloads, not first)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue):
        pass
    if len(payloads) == 1:
        raise BadValue(str(problem)) from None
    mid = len(payloads) // 2
    left = decode_changelog(fmt, payloads[:mid], schema, schema_include=schema_include, database=database,
                            table=table, metadata=metadata)
    right = decode_changelog(fmt, payloads[mid:], schema, schema_include=schema_include, database=database,
                             table=table, metadata=metadata)
    return (pa.concat_tables([left[0], right[0]]), np.concatenate([left[1], right[1]]),
            np.concatenate([left[2], right[2] + mid]))
