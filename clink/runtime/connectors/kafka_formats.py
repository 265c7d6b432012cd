"""Message formats of the ``kafka`` and ``upsert-kafka`` connectors: ``json``, ``csv`` and ``raw``.

A format turns the values (or keys) of many messages into one Arrow table at once, and a table
into one ``bytes`` per row. Decoding joins the messages into one text and parses it with
pyarrow's JSON or CSV reader against the declared columns; encoding builds each row's text
column by column with ``pyarrow.compute``. Only the way in and out of the client library is per
message (it takes and gives one message at a time).
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from clink.runtime import compute as pc
from clink.runtime.connectors.base import widen_struct
from clink.runtime.connectors.filesystem import BadValue, cast_text, json_text

__all__ = ["FORMATS", "decode", "encode", "format_problem"]

FORMATS = ("json", "csv", "raw")


def format_problem(fmt: str, schema: pa.Schema) -> str | None:
    """Why ``fmt`` cannot carry the columns of ``schema``; None when it can."""
    if fmt == "raw":
        if len(schema) != 1:
            names = ", ".join(schema.names) or "none"
            return f"the 'raw' format carries exactly one column, here ({names})"
        t = schema.field(0).type
        if not (pa.types.is_string(t) or pa.types.is_binary(t)):
            return f"the 'raw' format carries a STRING or BYTES column, not {t}"
    if fmt == "csv":
        for f in schema:
            if pa.types.is_nested(f.type):
                return f"column {f.name!r} of type {f.type} cannot be stored as csv: CSV holds only flat values"
    if fmt == "json":
        for f in schema:
            if pa.types.is_map(f.type):
                return f"column {f.name!r}: JSON maps cannot be read; declare the column as a ROW"
    return None


# --- decoding --------------------------------------------------------------------------------


def _needs_text(t: pa.DataType) -> bool:
    # Types pyarrow's readers do not read from text as Flink writes them: read as text, then cast.
    return pa.types.is_temporal(t) or pa.types.is_binary(t)


def decode(fmt: str, payloads: list[bytes], schema: pa.Schema, *, csv_delimiter: str = ",",
           fields: Mapping[str, tuple[str, ...]] | None = None) -> pa.Table:
    """The rows of ``payloads`` (one message each, none None) as a table of ``schema``.

    ``fields`` (``TableSpec.fields``): ROW columns of which only these fields are read; JSON
    decodes just those and leaves the others null, as the filesystem source does.

    Raises ``BadValue`` (or ``pyarrow.ArrowInvalid``) when some payload does not parse; the
    caller bisects to find it.
    """
    if not payloads:
        return schema.empty_table()
    if fmt == "raw":
        column = pa.array(payloads, pa.binary())
        t = schema.field(0).type
        return pa.Table.from_arrays([column if t == pa.binary() else column.cast(t)], schema=schema)
    if not len(schema):
        return pa.table({"_": pa.nulls(len(payloads))}).drop_columns(["_"])
    text_columns = {f.name for f in schema if _needs_text(f.type)}
    pruned = {name: set(read) for name, read in (fields or {}).items()
              if fmt == "json" and name in schema.names and pa.types.is_struct(schema.field(name).type)}

    def read_field(f: pa.Field) -> pa.Field:
        if f.name in text_columns:
            return pa.field(f.name, pa.string())
        if f.name in pruned:
            return f.with_type(pa.struct([c for c in f.type if c.name in pruned[f.name]]))
        return f

    read_schema = pa.schema([read_field(f) for f in schema])
    data = b"\n".join(payloads) + b"\n"
    if fmt == "json":
        table = pa_json.read_json(io.BytesIO(data),
                                  read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
                                  parse_options=pa_json.ParseOptions(explicit_schema=read_schema,
                                                                     unexpected_field_behavior="ignore"))
    else:
        table = pa_csv.read_csv(
            io.BytesIO(data),
            read_options=pa_csv.ReadOptions(column_names=schema.names, use_threads=False,
                                            block_size=len(data) + 1),
            parse_options=pa_csv.ParseOptions(delimiter=csv_delimiter, newlines_in_values=True),
            convert_options=pa_csv.ConvertOptions(column_types=read_schema, strings_can_be_null=False,
                                                  quoted_strings_can_be_null=False))
    if table.num_rows != len(payloads):
        raise BadValue(f"{len(payloads)} messages gave {table.num_rows} rows")
    columns = []
    for f in schema:
        column = table.column(f.name).combine_chunks()
        if f.name in text_columns:
            column = cast_text(column, f.type, empty_is_null=fmt == "csv",
                               base64_binary=fmt == "json" and pa.types.is_binary(f.type))
        elif f.name in pruned:
            column = widen_struct(column, f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


# --- encoding --------------------------------------------------------------------------------


def _csv_field(arr: pa.Array, delimiter: str) -> pa.Array:
    """Each value as one CSV field: quoted when it holds the delimiter, a quote or a line break;
    NULL as an empty field, as Flink's CSV format writes it."""
    t = arr.type
    if pa.types.is_binary(t):
        # Bytes are written as base64 text, value by value (no compute function encodes base64).
        text = pa.array([None if v is None else base64.b64encode(v).decode() for v in arr.to_pylist()],
                        pa.string())
    elif pa.types.is_timestamp(t) and t.tz is not None:
        text = pc.cast(pc.cast(arr, pa.timestamp(t.unit, "UTC")), pa.string())
    else:
        text = arr if pa.types.is_string(t) else pc.cast(arr, pa.string())
    special = pc.match_substring_regex(text, "[" + re.escape(delimiter) + '"\r\n]')
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(text, '"', '""'), '"', "")
    text = pc.if_else(pc.fill_null(special, False), quoted, text)
    return pc.fill_null(text, "")


def encode(fmt: str, table: pa.Table, *, csv_delimiter: str = ",") -> list[bytes]:
    """One payload per row of ``table``: its columns in the format ``fmt``."""
    n = table.num_rows
    if n == 0:
        return []
    if fmt == "raw":
        column = table.column(0).combine_chunks()
        if not pa.types.is_binary(column.type):
            column = pc.cast(column, pa.binary())
        return column.to_pylist()
    if fmt == "json":
        parts: list[object] = []
        for i, f in enumerate(table.schema):
            parts.append(("{" if i == 0 else ",") + json.dumps(f.name) + ":")
            parts.append(json_text(table.column(i).combine_chunks(), False))
        parts.append("}" if len(table.schema) else "{}")
        if len(parts) == 1:
            return [b"{}"] * n
        text = pc.binary_join_element_wise(*parts, "")
    else:
        fields = [_csv_field(table.column(i).combine_chunks(), csv_delimiter) for i in range(table.num_columns)]
        text = fields[0] if len(fields) == 1 else pc.binary_join_element_wise(*fields, csv_delimiter)
    return pc.cast(text, pa.binary()).to_pylist()
