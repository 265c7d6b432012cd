"""The ``filesystem`` connector: CSV, JSON lines and Parquet files, read and written in batches.

Reading. ``path`` names a file or a directory; a directory is read file by file in name order
(subdirectories included), skipping names that start with ``.`` or ``_`` (in-progress and
marker files). Files are read incrementally, a block at a time, with pyarrow's readers. CSV
columns match the table's columns by position, JSON and Parquet columns by name; a JSON key that
is absent reads as null, and so does a Parquet column the file lacks.

Bad records. A CSV line with the wrong number of fields, a JSON line that does not parse, and a
value that cannot be read as its column's type are bad records. By default the first one fails
the job with a ``RecordError`` naming the file, the line and the reason; with
``format.ignore-parse-errors`` (or ``csv.``/``json.ignore-parse-errors``) set to ``'true'`` bad
records are skipped and counted in ``metrics['skipped_records']``. CSV line numbers count
records: a quoted field that spans lines, or a blank line, moves later records' numbers away
from the physical line.

Writing. Rows go to a hidden in-progress file next to the target (``.<name>.inprogress-<id>``),
which is fsynced and renamed to its final name when the sink is closed after a successful run,
and deleted when the run fails: a file under a final name is always complete. As in Flink, a
sink's ``path`` is a directory (made when missing; an existing file there is an error): each run
adds a ``part-<id>-0.<ext>`` file, and with checkpoints each checkpoint commits its own
``part-<n>-<token>.<ext>``. A table with PARTITIONED BY columns writes each row under
``path/col=value/...`` (Hive-style names) without those columns, one in-progress file per partition.

Where. ``path`` is a local path or a URI (``clink.runtime.fs``): ``file:///data/bids.json`` is
the local path ``/data/bids.json`` in every respect; ``s3://``, ``gs://``, ``hdfs://`` and
``abfs://`` paths are listed, read and written through ``pyarrow.fs``, where the in-progress
file is moved to its final name by the store's move and nothing is fsynced.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import os
import re
import uuid
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from clink import records
from clink.errors import ConnectorError, RecordError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import (
    Connector,
    OptionSpec,
    SinkWriter,
    SourceReader,
    TableSpec,
    widen_struct,
)
from clink.runtime.connectors.shares import DONE, Progress, merge, share_of
from clink.runtime.connectors.text import concatenated, join_list_text
from clink.runtime.fs import Files, check_location, resolve

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["FILESYSTEM", "FileSinkWriter", "FileSourceReader", "join_list_text", "sql_type_name"]

FORMATS = ("csv", "json", "parquet")
TIMESTAMP_STANDARDS = ("SQL", "ISO-8601")
#: Bytes per CSV block and per JSON chunk: big enough to amortise per-call costs, small enough to
#: stay in cache (1 MiB measured faster than 4 MiB for CSV).
CSV_BLOCK_SIZE = 1 << 20
#: Rows the CSV reader gathers into one batch: a 1 MiB block holds only ~8K rows of a wide table,
#: and every operator downstream pays its per-batch costs per block (one TUMBLE over 10M rows
#: spent ~30% less CPU with 64K-row batches). Joining blocks costs a copy of the columns read.
CSV_BATCH_ROWS = 65_536
JSON_CHUNK_SIZE = 4 << 20
PARQUET_BATCH_ROWS = 65_536
_IGNORE_KEYS = ("format.ignore-parse-errors", "csv.ignore-parse-errors", "json.ignore-parse-errors")

OPTIONS = (
    OptionSpec(name="path", required=True,
               description=("file or directory to read or write, a local path or a URI (file://, s3://, "
                            "gs://, hdfs://, abfs://); a directory is read file by file in name order")),
    OptionSpec(name="format", required=True, choices=FORMATS,
               description="file format: csv, json or parquet"),
    OptionSpec(name="csv.field-delimiter", default=",",
               description="CSV field separator, one character ('\\t' for tab)"),
    OptionSpec(name="csv.quote-character", default='"',
               description="CSV quote character (writing always quotes with '\"')"),
    OptionSpec(name="csv.null-literal", description=(
        "CSV text that stands for null; when unset, an empty field is null except in string columns, "
        "where it is an empty string")),
    OptionSpec(name="csv.header", default="false", choices=("true", "false"),
               description="'true': the first line is a header, skipped on read and written on write"),
    OptionSpec(name="format.ignore-parse-errors", default="false", choices=("true", "false"),
               description="'true': skip bad records and count them instead of failing (reading only)"),
    OptionSpec(name="csv.ignore-parse-errors", default="false", choices=("true", "false"),
               description="same as format.ignore-parse-errors, for CSV"),
    OptionSpec(name="json.ignore-parse-errors", default="false", choices=("true", "false"),
               description="same as format.ignore-parse-errors, for JSON"),
    OptionSpec(name="json.timestamp-format.standard", default="SQL", choices=TIMESTAMP_STANDARDS,
               description=("JSON timestamp text: SQL '2020-01-01 12:00:00.123' or ISO-8601 "
                            "'2020-01-01T12:00:00.123' (both are accepted when reading)")),
)


# --- settings -------------------------------------------------------------------------------


@records.record(kw_only=True)
class Settings:
    """The table's options, parsed."""

    path: str
    format: str
    delimiter: str = ","
    quote: str = '"'
    null_literal: str | None = None
    header: bool = False
    ignore_errors: bool = False
    iso_timestamps: bool = False


def _bool(options: Mapping[str, str], key: str, errors: dict[str, str]) -> bool:
    value = options.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        errors[key] = f"expected 'true' or 'false', found {options[key]!r}"
    return value == "true"


def _char(options: Mapping[str, str], key: str, default: str, errors: dict[str, str]) -> str:
    value = options.get(key, default)
    value = {"\\t": "\t", "tab": "\t"}.get(value, value)
    if len(value) != 1:
        errors[key] = f"expected one character, found {value!r}"
        return default
    if value in "\r\n":
        errors[key] = "a line break cannot separate or quote fields"
    return value


def _unsupported(fmt: str, t: pa.DataType, role: str) -> str | None:
    nested = pa.types.is_nested(t)
    if fmt == "csv" and nested:
        return "CSV holds only flat values"
    if fmt == "json" and role == "source" and (pa.types.is_map(t) or (nested and any(
            _unsupported(fmt, t.field(i).type, role) for i in range(t.num_fields)))):
        return "JSON maps cannot be read; declare the column as a ROW"
    return None


def parse_settings(options: Mapping[str, str], table_schema: pa.Schema,
                   role: str) -> tuple[Settings | None, dict[str, str]]:
    """Parse and check a table's options; returns the settings or the errors keyed by option."""
    errors: dict[str, str] = {}
    path = options.get("path", "").strip()
    if not path:
        errors["path"] = "the filesystem connector needs a 'path' (a file or a directory)"
    elif (problem := check_location(path)) is not None:
        errors["path"] = problem
    fmt = options.get("format", "").strip().lower()
    if fmt not in FORMATS:
        found = f", found {options['format']!r}" if "format" in options else ""
        errors["format"] = f"expected one of {', '.join(FORMATS)}{found}"
    delimiter = _char(options, "csv.field-delimiter", ",", errors)
    quote = _char(options, "csv.quote-character", '"', errors)
    if delimiter == quote and "csv.field-delimiter" not in errors:
        errors["csv.quote-character"] = "the quote character must differ from the field delimiter"
    if role == "sink" and fmt == "csv" and quote != '"':
        errors["csv.quote-character"] = "the CSV writer quotes with '\"' only"
    header = _bool(options, "csv.header", errors)
    ignore = any([_bool(options, key, errors) for key in _IGNORE_KEYS])
    standard = options.get("json.timestamp-format.standard", "SQL").strip().upper()
    if standard not in TIMESTAMP_STANDARDS:
        errors["json.timestamp-format.standard"] = (
            f"expected SQL or ISO-8601, found {options['json.timestamp-format.standard']!r}")
    if fmt in FORMATS:
        for f in table_schema:
            if (problem := _unsupported(fmt, f.type, role)) is not None:
                errors["format"] = f"column {f.name!r} of type {f.type} cannot be stored as {fmt}: {problem}"
    if errors:
        return None, errors
    return Settings(path=path, format=fmt, delimiter=delimiter, quote=quote,
                    null_literal=options.get("csv.null-literal"), header=header, ignore_errors=ignore,
                    iso_timestamps=standard == "ISO-8601"), {}


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check the option values of a filesystem table; returns messages keyed by option."""
    return parse_settings(options, table_schema, role)[1]


def _settings_or_raise(spec: TableSpec, role: str) -> Settings:
    settings, errors = parse_settings(spec.options, spec.table_schema, role)
    if settings is None:
        details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
        raise ConnectorError(f"table {spec.name!r}: bad filesystem options: {details}")
    return settings


# --- text values ----------------------------------------------------------------------------


def sql_type_name(t: pa.DataType) -> str:
    """The SQL spelling of an Arrow type, for messages (``int64`` → ``BIGINT``)."""
    simple = {pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
              pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING",
              pa.large_string(): "STRING", pa.binary(): "BYTES", pa.date32(): "DATE"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_time(t):
        return "TIME"
    if pa.types.is_timestamp(t):
        precision = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
        return f"TIMESTAMP_LTZ({precision})" if t.tz else f"TIMESTAMP({precision})"
    return str(t).upper()


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


class BadValue(Exception):
    """A text value that cannot be read as its column's type (raised by ``cast_text``)."""


def cast_text(arr: pa.Array, t: pa.DataType, *, empty_is_null: bool, base64_binary: bool = False) -> pa.Array:
    """Read string values as type ``t``, vectorized; raises ``BadValue`` when one does not fit.

    Timestamps may use a space or ``T`` between date and time and may end in ``Z`` or an offset;
    a value without an offset in a ``TIMESTAMP_LTZ`` column is taken as UTC. ``empty_is_null``
    makes empty strings null in columns that are not strings (CSV without a null literal).
    """
    try:
        if _is_text(t):
            return arr if arr.type == t else arr.cast(t)
        if empty_is_null:
            arr = pc.if_else(pc.equal(arr, ""), pa.scalar(None, arr.type), arr)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            if not base64_binary:
                return arr.cast(t)
            return pa.array([None if v is None else base64.b64decode(v, validate=True)
                             for v in arr.to_pylist()], type=t)
        if pa.types.is_timestamp(t):
            if t.tz is not None:
                try:
                    return pc.cast(arr, t)
                except pa.ArrowInvalid:
                    pass  # no offsets in the text: read it as UTC below
            naive = pc.cast(pc.replace_substring_regex(arr, r"Z$", ""), pa.timestamp(t.unit))
            return naive if t.tz is None else naive.cast(t)
        if pa.types.is_time(t):
            unit = "ms" if t.unit == "s" else t.unit
            stamps = pc.cast(pc.binary_join_element_wise("1970-01-01 ", arr, ""), pa.timestamp(unit))
            return pc.cast(stamps, t)
        return pc.cast(arr, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise BadValue(str(e)) from None


def cast_text_lenient(arr: pa.Array, t: pa.DataType, **kwargs: bool) -> tuple[pa.Array, list[int]]:
    """Like ``cast_text``, but returns the converted array with nulls at the bad positions, and those.

    Bad values are found by bisection, so a few bad values among many good ones cost a few dozen
    vectorized casts rather than one per row.
    """
    pieces: list[pa.Array] = []
    bad: list[int] = []

    def visit(lo: int, hi: int) -> None:
        try:
            pieces.append(cast_text(arr.slice(lo, hi - lo), t, **kwargs))
        except BadValue:
            if hi - lo == 1:
                bad.append(lo)
                pieces.append(pa.nulls(1, t))
                return
            mid = (lo + hi) // 2
            visit(lo, mid)
            visit(mid, hi)

    if len(arr):
        visit(0, len(arr))
    if not bad:
        return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces), bad
    return pa.concat_arrays(pieces), bad


def _describe(value: object) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cannot_read(value: object, f: pa.Field) -> str:
    return f"cannot read {_describe(value)} as {sql_type_name(f.type)} in column {f.name!r}"


# --- source ---------------------------------------------------------------------------------


def list_files(where: Files) -> list[str]:
    """The files a source reads: ``where.path`` itself, or the visible files under it in name order."""
    try:
        if where.is_file(where.path):
            return [where.path]
        if not where.is_dir(where.path):
            raise ConnectorError(f"no such file or directory: {where.uri!r}")
        return where.files_under(where.path)
    except OSError as e:
        raise ConnectorError(f"cannot list {where.uri!r}: {e}") from None


class FileSourceReader(SourceReader):
    """Reads the files of a table one after another, one block per poll.

    The table is read in parts: a CSV or JSON file is one part, a Parquet file one part per row
    group. Read by several subtasks, each reads the parts of its share (``shares.py``): part ``i``
    in order (files by name, row groups in their file) goes to subtask ``i % parallelism``.
    """

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        self._settings = _settings_or_raise(spec, "source")
        self._spec = spec
        self._where = resolve(self._settings.path, ctx.filesystems)
        self._files = list_files(self._where)
        self._parts = self._list_parts()
        self._run_last: int | None = None
        self._progress = Progress.start(spec.subtask, spec.parallelism)
        self._batches = self._own_batches()
        self.bounded = True
        self.metrics.update(records_in=0, skipped_records=0)

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        for batch in self._batches:
            if batch.num_rows:
                self.metrics["records_in"] += batch.num_rows
                self._count(batch.num_rows)
                return batch
        self.finished = True
        return None

    def position(self) -> dict:
        # Files are read in name order and bad records are skipped the same way every time, so
        # the number of rows given out of a file is a position that a new reader can reach again.
        return self._progress.position()

    def seek(self, position: dict) -> None:
        if "rows" in position:  # a checkpoint of one reader over the whole table, by row count
            self._batches.close()
            self._progress = Progress.start(0, 1)
            self._batches = self._skip_counted(self._own_batches(), int(position["rows"]))
            self.finished = False
            return
        mine = Progress.of(position)
        if (mine.subtask, mine.parallelism) != (self._progress.subtask, self._progress.parallelism):
            self.seek_shares([position])
            return
        self._resume(mine)

    def seek_shares(self, positions: list[dict]) -> None:
        if len(positions) == 1 and "rows" in positions[0]:
            if self._progress.parallelism != 1:
                raise ConnectorError(f"table {self._spec.name!r}: a checkpoint of an older clink cannot resume "
                                     "at another parallelism")
            self.seek(positions[0])
            return
        first, done = merge(positions)
        self._resume(share_of(first, done, subtask=self._progress.subtask, parallelism=self._progress.parallelism))

    def _resume(self, progress: Progress) -> None:
        self._batches.close()
        self._progress = progress
        self._batches = self._own_batches()
        self.finished = False

    def _skip_counted(self, batches: Iterator[pa.RecordBatch], count: int) -> Iterator[pa.RecordBatch]:
        """``batches`` without the first ``count`` rows, counted as given out."""
        for batch in batches:
            if count >= batch.num_rows:
                count -= batch.num_rows
                self._count(batch.num_rows)
                continue
            if count:
                self._count(count)
                batch = batch.slice(count)
                count = 0
            yield batch

    @staticmethod
    def _skip_rows(batches: Iterator[pa.RecordBatch], count: int) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if count >= batch.num_rows:
                count -= batch.num_rows
                continue
            yield batch.slice(count) if count else batch
            count = 0

    def close(self) -> None:
        self._batches.close()

    def _list_parts(self) -> list[tuple[str, int | None]]:
        """(file, row group) per part: each Parquet row group, or a whole file (None). The rows
        of each Parquet row group go to ``self._part_rows``."""
        self._part_rows: list[int] = []
        if self._settings.format != "parquet":
            return [(path, None) for path in self._files]
        parts: list[tuple[str, int | None]] = []
        for path in self._files:
            source = None
            try:
                source = self._where.open_input(path)
                meta = pq.read_metadata(source)
            except (OSError, pa.ArrowInvalid) as e:
                raise ConnectorError(f"table {self._spec.name!r}: cannot read {path!r} as Parquet: {e}") from None
            finally:
                _close_input(source)
            if meta.num_row_groups:
                parts.extend((path, g) for g in range(meta.num_row_groups))
                self._part_rows.extend(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
            else:
                parts.append((path, None))
                self._part_rows.append(0)
        return parts

    def _own_batches(self) -> Iterator[pa.RecordBatch]:
        """The batches of this reader's parts from where its progress is, in order. Its progress
        moves from part to part as they end; a part begun before skips the rows given out."""
        read = {"csv": self._csv_batches, "json": self._json_batches}
        progress = self._progress
        while progress.part < len(self._parts):
            skip = progress.offset
            if skip == DONE:
                progress.next_part()
                continue
            path, group = self._parts[progress.part]
            if group is None:
                batches = read[self._settings.format](path) if self._settings.format != "parquet" else iter(())
                yield from self._skip_rows(batches, skip) if skip else batches
                progress.next_part()
                continue
            yield from self._row_groups(path)

    def _row_groups(self, path: str) -> Iterator[pa.RecordBatch]:
        """The rows of this reader's next row groups of ``path`` in one read, where they follow
        one another (one reader of the table: batches as large as the file allows, not one per
        row group): from the part its progress is at, to the last in the file before one that
        another reader had begun. With several readers each reads its groups one at a time, so
        that, polled in turn, they hand on the rows in the file's order."""
        progress = self._progress
        step = progress.parallelism
        last = progress.part
        while (step == 1 and last + step < len(self._parts) and self._parts[last + step][0] == path
               and last + step not in progress.later):
            last += step
        groups = [self._parts[b][1] for b in range(progress.part, last + 1, step)]
        batches = self._parquet_batches(path, groups)
        self._run_last = last
        yield from self._skip_rows(batches, progress.offset) if progress.offset else batches
        self._run_last = None
        progress.part, progress.offset = last, self._part_rows[last]
        progress.next_part()

    def _count(self, rows: int) -> None:
        """``rows`` more given out: in a read of several row groups, they may finish some."""
        progress = self._progress
        progress.offset += rows
        last = self._run_last
        while last is not None and progress.part < last and progress.offset >= self._part_rows[progress.part]:
            progress.offset -= self._part_rows[progress.part]
            progress.part += progress.parallelism

    def _record_error(self, reason: str, path: str, line: int | None) -> RecordError:
        return RecordError(reason, file=path, line=line, table=self._spec.name)

    def _skip(self, count: int = 1) -> None:
        self.metrics["skipped_records"] += count

    # CSV

    def _csv_batches(self, path: str) -> Iterator[pa.RecordBatch]:
        return coalesce_batches(self._csv_blocks(path), CSV_BATCH_ROWS)

    def _csv_blocks(self, path: str) -> Generator[pa.RecordBatch, None, None]:
        s = self._settings
        schema = self._spec.schema
        lenient = s.ignore_errors
        # Types pyarrow's CSV reader cannot read as we want (offsets, 'Z', times) are read as
        # text and converted here; in lenient mode everything is, because one value that does
        # not convert would end pyarrow's stream.
        as_text = {f.name for f in schema if lenient or pa.types.is_time(f.type) or pa.types.is_binary(f.type)
                   or (pa.types.is_timestamp(f.type) and f.type.tz is not None)}
        names = schema.names or self._spec.table_schema.names[:1]  # pyarrow reads all on []
        types = {n: pa.string() if n in as_text else self._spec.table_schema.field(n).type for n in names}
        if s.null_literal is None:
            null_values = [""]
            strings_can_be_null = False
        else:
            # An unquoted empty field is null too; a quoted "" is always an empty string.
            null_values = [s.null_literal, ""]
            strings_can_be_null = True
        empty_is_null = s.null_literal is None
        bad_row: list[tuple[int | None, str]] = []

        def on_invalid_row(row: pa_csv.InvalidRow) -> str:
            if lenient:
                self._skip()
                return "skip"
            reason = f"expected {row.expected_columns} fields, found {row.actual_columns}"
            bad_row.append((row.number, reason))
            return "error"

        header = 1 if s.header else 0
        source = None
        try:
            source = self._where.open_input(path)
            reader = pa_csv.open_csv(
                source,
                read_options=pa_csv.ReadOptions(column_names=self._spec.table_schema.names, skip_rows=header,
                                                block_size=CSV_BLOCK_SIZE, use_threads=False),
                parse_options=pa_csv.ParseOptions(delimiter=s.delimiter, quote_char=s.quote,
                                                  invalid_row_handler=on_invalid_row),
                convert_options=pa_csv.ConvertOptions(column_types=types, include_columns=names,
                                                      null_values=null_values,
                                                      true_values=["true", "TRUE", "True", "1"],
                                                      false_values=["false", "FALSE", "False", "0"],
                                                      strings_can_be_null=strings_can_be_null,
                                                      quoted_strings_can_be_null=False))
        except pa.ArrowInvalid as e:
            _close_input(source)
            raise self._csv_error(e, bad_row, path) from None
        except OSError as e:
            _close_input(source)
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {path!r}: {e}") from None
        rows_before = header
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except pa.ArrowInvalid as e:
                    raise self._csv_error(e, bad_row, path) from None
                arrays = []
                bad_rows: set[int] = set()
                for f in schema:
                    column = batch.column(f.name)
                    if f.name not in as_text:
                        arrays.append(column)
                    elif lenient:
                        converted, bad = cast_text_lenient(column, f.type, empty_is_null=empty_is_null,
                                                           base64_binary=True)
                        arrays.append(converted)
                        bad_rows.update(bad)
                    else:
                        try:
                            arrays.append(cast_text(column, f.type, empty_is_null=empty_is_null,
                                                    base64_binary=True))
                        except BadValue:
                            # Values that only fail together (mixed timestamp styles) pass here.
                            converted, bad = cast_text_lenient(column, f.type, empty_is_null=empty_is_null,
                                                               base64_binary=True)
                            if bad:
                                value = column[bad[0]].as_py()
                                line = rows_before + bad[0] + 1
                                raise self._record_error(_cannot_read(value, f), path, line) from None
                            arrays.append(converted)
                rows_before += batch.num_rows
                out = pa.RecordBatch.from_arrays(arrays, schema=schema) if schema.names else batch.select([])
                if bad_rows:
                    self._skip(len(bad_rows))
                    keep = np.ones(out.num_rows, dtype=bool)
                    keep[list(bad_rows)] = False
                    out = out.filter(pa.array(keep))
                yield out
        finally:
            reader.close()
            _close_input(source)

    _CONVERSION = re.compile(
        r"In CSV column #(\d+): Row #(\d+): CSV conversion error to [^:]+: invalid value '(.*)'", re.DOTALL)

    def _csv_error(self, error: pa.ArrowInvalid, bad_row: list[tuple[int | None, str]],
                   path: str) -> RecordError:
        """Translate pyarrow's message about the first bad CSV record into a ``RecordError``."""
        if bad_row:
            line, reason = bad_row[0]
            return self._record_error(reason, path, line)
        message = str(error)
        if m := self._CONVERSION.search(message):
            f = self._spec.table_schema.field(int(m.group(1)))
            return self._record_error(_cannot_read(m.group(3), f), path, int(m.group(2)))
        line = None
        if m := re.search(r"Row #(\d+)", message):
            line = int(m.group(1))
        return self._record_error(message.removeprefix("CSV parse error: "), path, line)

    # JSON lines

    def _json_batches(self, path: str) -> Iterator[pa.RecordBatch]:
        schema = self._spec.schema
        # Types pyarrow's JSON reader does not read from strings as we want are read as text.
        self._json_text = {f.name for f in schema
                           if pa.types.is_temporal(f.type) or pa.types.is_binary(f.type)}
        # ROW columns the plan reads only some fields of are read with those fields alone (the
        # reader skips the rest of each object) and given back whole, the others null.
        self._json_pruned = {name: set(fields) for name, fields in self._spec.fields.items()
                             if name in schema.names and pa.types.is_struct(schema.field(name).type)}

        def read_field(f: pa.Field) -> pa.Field:
            if f.name in self._json_text:
                return pa.field(f.name, pa.string())
            if f.name in self._json_pruned:
                return f.with_type(pa.struct([c for c in f.type if c.name in self._json_pruned[f.name]]))
            return f

        read_schema = pa.schema([read_field(f) for f in schema])
        self._json_options = pa_json.ParseOptions(explicit_schema=read_schema,
                                                  unexpected_field_behavior="ignore")
        try:
            # Closed in the finally below, across yields.
            handle = open(path, "rb") if self._where.local else self._where.open_input(path)  # noqa: SIM115
        except OSError as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {path!r}: {e}") from None
        try:
            offset = 0  # bytes of the file before ``chunk``
            rest = b""
            while True:
                data = handle.read(JSON_CHUNK_SIZE)
                if data:
                    buffer = rest + data if rest else data
                    cut = buffer.rfind(b"\n") + 1
                    if cut == 0:
                        rest = buffer
                        continue
                    # A view, not a copy: pyarrow reads the chunk in place.
                    chunk, rest = memoryview(buffer)[:cut], buffer[cut:]
                else:
                    chunk, rest = memoryview(rest), b""
                if not _blank(chunk):
                    for table in self._json_chunk(chunk, path, offset):
                        yield from table.to_batches()
                offset += len(chunk)
                if not data:
                    return
        finally:
            handle.close()

    def _decode_json(self, data: bytes | memoryview) -> pa.Table:
        table = pa_json.read_json(pa.BufferReader(pa.py_buffer(data)),
                                  read_options=pa_json.ReadOptions(use_threads=False,
                                                                   block_size=len(data) + 1),
                                  parse_options=self._json_options)
        table = table.combine_chunks()
        if not self._json_text and not self._json_pruned:
            return table
        columns = []
        for f in self._spec.schema:
            column = table.column(f.name)
            if f.name in self._json_text or f.name in self._json_pruned:
                read = column.chunk(0) if column.num_chunks else pa.array([], column.type)
                if f.name in self._json_text:
                    column = cast_text(read, f.type, empty_is_null=False,
                                       base64_binary=pa.types.is_binary(f.type))
                else:
                    column = widen_struct(read, f.type)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=self._spec.schema)

    def _json_chunk(self, chunk: memoryview, path: str, offset: int) -> list[pa.Table]:
        """The rows of ``chunk`` (whole lines, starting ``offset`` bytes into ``path``).

        The fast path decodes the whole chunk in one call. When that fails, some line is bad:
        the chunk is bisected by lines, the good runs still decoded in bulk, until the bad lines
        are single; each fails the read with its line number, or is skipped and counted.
        """
        try:
            return [self._decode_json(chunk)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue):
            pass
        lines = bytes(chunk).split(b"\n")
        tables: list[pa.Table] = []

        def visit(lo: int, hi: int) -> None:
            data = b"\n".join(lines[lo:hi])
            if not data.strip():
                return
            try:
                tables.append(self._decode_json(data))
                return
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue) as e:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    visit(lo, mid)
                    visit(mid, hi)
                    return
                if self._settings.ignore_errors:
                    self._skip()
                    return
                reason = self._explain_json(lines[lo], e)
                line = self._lines_before(path, offset) + lo + 1
                raise self._record_error(reason, path, line) from None

        visit(0, len(lines))
        return tables

    def _lines_before(self, path: str, offset: int) -> int:
        """The line breaks in the first ``offset`` bytes of ``path``: counted only when a bad
        line is reported, so that reading good data does not pay for line numbers."""
        with open(path, "rb") if self._where.local else self._where.open_input(path) as handle:
            count = 0
            while offset > 0:
                data = handle.read(min(offset, JSON_CHUNK_SIZE))
                if not data:
                    break
                count += data.count(b"\n")
                offset -= len(data)
            return count

    def _explain_json(self, line: bytes, error: Exception) -> str:
        """Why one JSON line cannot be read (the error path only: it parses the line in Python)."""
        try:
            record = json.loads(line)
        except ValueError as e:
            return f"invalid JSON: {getattr(e, 'msg', e)} at column {getattr(e, 'colno', '?')}"
        if not isinstance(record, dict):
            return f"expected a JSON object, found {type(record).__name__}"
        for f in self._spec.schema:
            if f.name not in record:
                continue
            try:
                self._decode_json(json.dumps({f.name: record[f.name]}).encode())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue):
                return _cannot_read(record[f.name], f)
        return f"cannot read the record: {error}"

    # Parquet

    def _parquet_batches(self, path: str, groups: list[int] | None = None) -> Iterator[pa.RecordBatch]:
        """The rows of ``path`` (of its row groups ``groups`` only, unless None) as batches of the
        table's read schema."""
        schema = self._spec.schema
        source = None
        try:
            # Without pre_buffer=False, iter_batches keeps every row group it has read until close.
            source = self._where.open_input(path)
            file = pq.ParquetFile(source, pre_buffer=False)
        except (OSError, pa.ArrowInvalid) as e:
            _close_input(source)
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {path!r} as Parquet: {e}") from None
        try:
            present = [n for n in schema.names if n in file.schema_arrow.names]
            # One row group at a time: a batch never spans two (iter_batches would join small
            # ones), so a file written in small row groups streams as it was written, each batch
            # followed by its watermark.
            chunks = (file.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[g], columns=present,
                                        use_threads=False)
                      for g in (groups if groups is not None else range(file.num_row_groups)))
            for batch in itertools.chain.from_iterable(chunks):
                if batch.schema == schema:
                    yield batch
                    continue
                arrays = []
                for f in schema:
                    if f.name not in present:
                        arrays.append(pa.nulls(batch.num_rows, f.type))
                        continue
                    column = batch.column(f.name)
                    try:
                        arrays.append(column if column.type == f.type else column.cast(f.type))
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        raise self._record_error(
                            f"column {f.name!r} holds {column.type}, which cannot be read as "
                            f"{sql_type_name(f.type)}: {e}", path, None) from None
                yield pa.RecordBatch.from_arrays(arrays, schema=schema) if schema.names else batch
        finally:
            file.close()
            _close_input(source)


_NOT_BLANK = re.compile(rb"[^ \t\r\n]")


def _blank(data: memoryview) -> bool:
    """Whether ``data`` holds only whitespace (stops at the first other byte; no copy)."""
    return _NOT_BLANK.search(data) is None


def coalesce_batches(batches: Generator[pa.RecordBatch, None, None], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` joined into batches of at least ``rows`` rows (the last may hold fewer), in
    order. Rows gathered before an error are yielded before it is raised, as they would have been
    block by block."""
    pending: list[pa.RecordBatch] = []
    count = 0
    try:
        for batch in batches:
            if batch.num_rows >= rows and not pending:
                yield batch
                continue
            pending.append(batch)
            count += batch.num_rows
            if count >= rows:
                yield _joined(pending)
                pending, count = [], 0
    except Exception:
        if count:
            yield _joined(pending)
        raise
    finally:
        batches.close()  # closes the file when this ends early (a seek, an error downstream)
    if count:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _close_input(source: str | pa.NativeFile | None) -> None:
    """Close a file opened on a remote filesystem (a local path is opened and closed by its reader)."""
    if isinstance(source, pa.NativeFile):
        source.close()


# --- text rendering (JSON sink, and the print sink) -----------------------------------------


def _base64_text(arr: pa.Array) -> pa.Array:
    return pa.array([None if v is None else base64.b64encode(v).decode() for v in arr.to_pylist()],
                    pa.string())


def _json_quote(arr: pa.Array) -> pa.Array:
    text = pc.replace_substring(arr, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    for raw, escaped in (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        text = pc.replace_substring(text, raw, escaped)
    if pc.any(pc.match_substring_regex(text, "[\\x00-\\x1f]")).as_py():
        # Rare control characters need \\u escapes that no compute function writes.
        return pa.array([None if v is None else json.dumps(v) for v in arr.to_pylist()], pa.string())
    return pc.binary_join_element_wise('"', text, '"', "")


def json_text(arr: pa.Array, iso_timestamps: bool) -> pa.Array:
    """Encode every value of ``arr`` as JSON text (a string array without nulls).

    >>> json_text(pa.array([1, None]), False).to_pylist()
    ['1', 'null']
    """
    t = arr.type
    if pa.types.is_null(t):
        return pa.array(["null"] * len(arr), pa.string())
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
        text = arr.cast(pa.string())
    elif pa.types.is_floating(t):
        text = arr.cast(pa.string())
        finite = pc.is_finite(arr)
        if not pc.all(finite).as_py():
            # JSON has no NaN or infinity; write them as strings, as Flink does.
            special = pc.if_else(pc.is_nan(arr), '"NaN"',
                                 pc.if_else(pc.greater(arr, 0), '"Infinity"', '"-Infinity"'))
            text = pc.if_else(finite, text, special)
    elif _is_text(t):
        text = _json_quote(arr)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        # Bytes are written as base64 strings, value by value.
        text = pc.binary_join_element_wise('"', _base64_text(arr), '"', "")
    elif pa.types.is_timestamp(t):
        text = arr.cast(pa.string())
        if iso_timestamps:
            text = pc.replace_substring(text, " ", "T", max_replacements=1)
        text = pc.binary_join_element_wise('"', text, '"', "")
    elif pa.types.is_temporal(t):
        text = pc.binary_join_element_wise('"', arr.cast(pa.string()), '"', "")
    elif pa.types.is_struct(t):
        children = arr.flatten()
        parts: list[object] = []
        for i, (f, child) in enumerate(zip(t, children, strict=True)):
            parts.append(("{" if i == 0 else ",") + json.dumps(f.name) + ":")
            parts.append(json_text(child, iso_timestamps))
        parts.append("}" if t.num_fields else "{}")
        text = pc.binary_join_element_wise(*parts, "")
    elif pa.types.is_map(t):
        def entries(values: pa.Array) -> pa.Array:
            keys, items = values.flatten()
            key_text = keys if _is_text(keys.type) else keys.cast(pa.string())
            return pc.binary_join_element_wise(_json_quote(key_text), ":",
                                               json_text(items, iso_timestamps), "")
        text = pc.binary_join_element_wise("{", join_list_text(arr, entries, ","), "}", "")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        text = pc.binary_join_element_wise(
            "[", join_list_text(arr, lambda v: json_text(v, iso_timestamps), ","), "]", "")
    else:
        raise ConnectorError(f"cannot write values of type {t} as JSON")
    if arr.null_count:
        text = pc.if_else(arr.is_null(), "null", text)
    return text


# --- partitions -----------------------------------------------------------------------------

#: The directory of rows whose partition value is NULL or empty.
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Characters written as ``%XX`` in partition directory names, the set Hive and Flink escape.
_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def escape_partition_text(text: str) -> str:
    """``text`` made safe as one part of a ``name=value`` directory name, as Hive and Flink do.

    >>> escape_partition_text("2024-01-01 10:00")
    '2024-01-01 10%3A00'
    """
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def partition_groups(batch: pa.RecordBatch, columns: tuple[str, ...]) -> list[tuple[str, pa.Array | None]]:
    """Split ``batch`` by the values of ``columns``: one ``(directory, rows)`` per distinct
    combination, where ``directory`` is ``col=value/...`` relative to the table's path and
    ``rows`` the row indices (None when every row belongs to the one group).

    Values are grouped as text (so NULL and '' share the default partition) by dictionary
    encoding, one column at a time; only the distinct values are escaped in Python.
    """
    if batch.num_rows == 0:
        return []
    codes: np.ndarray | None = None
    per_column: list[tuple[np.ndarray, list[str | None]]] = []
    for name in columns:
        column = batch.column(name)
        text = column if _is_text(column.type) else pc.cast(column, pa.string())
        encoded = pc.dictionary_encode(text, null_encoding="encode")
        indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        per_column.append((indices, encoded.dictionary.to_pylist()))
        combined = indices if codes is None else codes * len(encoded.dictionary) + indices
        # Renumber densely after each column, so the combined codes stay below the row count.
        _, codes = np.unique(combined, return_inverse=True)
    assert codes is not None
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.diff(codes[order])) + 1
    groups = np.split(order, starts)
    result: list[tuple[str, pa.Array | None]] = []
    for rows in groups:
        first = int(rows[0])
        parts = []
        for name, (indices, values) in zip(columns, per_column, strict=True):
            value = values[indices[first]]
            text = DEFAULT_PARTITION if value is None or value == "" else escape_partition_text(value)
            parts.append(f"{escape_partition_text(name)}={text}")
        result.append(("/".join(parts), None if len(groups) == 1 else pa.array(rows)))
    return result


# --- sink -----------------------------------------------------------------------------------


class _CsvFormat:
    def __init__(self, path: str, schema: pa.Schema, s: Settings, where: Files) -> None:
        # Bytes are written as base64 text (value by value), as Flink's CSV format does.
        self._binary = [i for i, f in enumerate(schema)
                        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
        if self._binary:
            schema = pa.schema([pa.field(f.name, pa.string()) if i in self._binary else f
                                for i, f in enumerate(schema)])
        self._schema = schema
        self._file = where.open_output(path)
        self._writer = pa_csv.CSVWriter(self._file, schema, write_options=pa_csv.WriteOptions(
            include_header=s.header, delimiter=s.delimiter, null_string=s.null_literal or "",
            quoting_style="needed"))

    def write(self, batch: pa.RecordBatch) -> None:
        if self._binary:
            arrays = [_base64_text(c) if i in self._binary else c for i, c in enumerate(batch.columns)]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        self._writer.write_batch(batch)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._file.close()


class _JsonFormat:
    def __init__(self, path: str, schema: pa.Schema, s: Settings, where: Files) -> None:
        self._file = where.open_output(path)
        self._iso = s.iso_timestamps
        self._prefixes = [("{" if i == 0 else ",") + json.dumps(name) + ":"
                          for i, name in enumerate(schema.names)]

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if batch.num_columns == 0:
            self._file.write(b"{}\n" * batch.num_rows)
            return
        parts: list[object] = []
        for prefix, column in zip(self._prefixes, batch.columns, strict=True):
            parts.append(prefix)
            parts.append(json_text(column, self._iso))
        parts.append("}\n")
        self._file.write(concatenated(pc.binary_join_element_wise(*parts, "")))

    def close(self) -> None:
        self._file.close()


class _ParquetFormat:
    def __init__(self, path: str, schema: pa.Schema, s: Settings, where: Files) -> None:
        self._writer = pq.ParquetWriter(path, schema, filesystem=where.arrow)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()


_FORMAT_WRITERS = {"csv": _CsvFormat, "json": _JsonFormat, "parquet": _ParquetFormat}
_EXTENSIONS = {"csv": "csv", "json": "json", "parquet": "parquet"}


#: The folder of a table's directory where output rolled back by a restore is kept.
ROLLED_BACK_FOLDER = "_rolled_back"


def _name_token(table: str, lineage: str = "") -> str:
    """The part of a committed part file's name that says whose it is: the table, and the line of
    checkpoints (the state directory's token) that committed it. ``""`` is the token of state
    directories made before there were tokens."""
    return hashlib.sha256((f"{table}\0{lineage}" if lineage else table).encode()).hexdigest()[:12]


@records.record(frozen=False)
class _OpenFile:
    """One in-progress file: the directory it is in, its hidden name and the name it gets."""

    folder: str
    final: str
    in_progress: str
    format: _CsvFormat | _JsonFormat | _ParquetFormat
    rows: int = 0


class FileSinkWriter(SinkWriter):
    """Writes rows to in-progress files and publishes them under their final names on ``close``.

    A table without partition columns has one in-progress file. A partitioned table has one per
    partition directory that received rows since the last checkpoint, opened on its first row;
    each is pre-committed, committed and recovered like the one file of an unpartitioned table.
    """

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        s = _settings_or_raise(spec, "sink")
        self._spec = spec
        self._settings = s
        #: PARTITIONED BY columns: each row goes to ``path/col=value/...``, without those columns.
        self._partitions = spec.partition_columns
        for name in self._partitions:
            # The compiler checks PARTITIONED BY; this guards a spec that other code makes.
            t = spec.schema.field(name).type if name in spec.schema.names else None
            if t is None or pa.types.is_nested(t) or pa.types.is_binary(t):
                raise ConnectorError(f"table {spec.name!r}: partition column {name!r} must be a column of the "
                                     "table whose values read as text (a string, number, boolean, date or time)")
        self._where = where = resolve(s.path, ctx.filesystems)
        if where.is_file(where.path):
            raise ConnectorError(f"table {spec.name!r}: a filesystem sink's 'path' is a directory, which gets "
                                 f"one part file per run or checkpoint (as in Flink), but {s.path!r} is a file; "
                                 "name a directory, or move the file away")
        self._root = where.path
        # Partition columns are in the directory names, not repeated inside the files.
        self._file_columns = [i for i, name in enumerate(spec.schema.names) if name not in self._partitions]
        self._file_schema = pa.schema([spec.schema.field(i) for i in self._file_columns])
        self._files: dict[str, _OpenFile] = {}
        #: The state directory's token, given by ``recover`` when the job has checkpoints.
        self._lineage = ""
        if not self._partitions:
            self._files[""] = self._start_file("")
        self._open = True
        self.metrics["rows_out"] = 0

    def _start_file(self, directory: str) -> _OpenFile:
        s = self._settings
        where = self._where
        token = uuid.uuid4().hex
        folder = where.join(self._root, *directory.split("/")) if directory else self._root
        final = where.join(folder, f"part-{token}-0.{_EXTENSIONS[s.format]}")
        in_progress = where.join(folder, f".{os.path.basename(final)}.inprogress-{token}")
        try:
            where.makedirs(folder)
            fmt = _FORMAT_WRITERS[s.format](in_progress, self._file_schema, s, where)
        except OSError as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot write to {final!r}: {e}") from None
        return _OpenFile(folder=folder, final=final, in_progress=in_progress, format=fmt)

    def write(self, batch: pa.RecordBatch) -> None:
        if not self._partitions:
            self._write_to("", batch)
        else:
            data = batch.select(self._file_columns)
            for directory, rows in partition_groups(batch, self._partitions):
                self._write_to(directory, data if rows is None else data.take(rows))
        self.metrics["rows_out"] += batch.num_rows

    def _write_to(self, directory: str, batch: pa.RecordBatch) -> None:
        file = self._files.get(directory)
        if file is None:
            file = self._files[directory] = self._start_file(directory)
        file.format.write(batch)
        file.rows += batch.num_rows

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for file in self._files.values():
            try:
                file.format.close()
                if file.rows == 0:
                    self._where.unlink(file.in_progress)  # no empty part files in a directory
                    continue
                self._where.fsync(file.in_progress)
                self._where.replace(file.in_progress, file.final)
                self._where.fsync(file.folder, directory=True)
            except OSError as e:
                self._discard()
                raise ConnectorError(f"table {self._spec.name!r}: cannot finish {file.final!r}: {e}") from None
        self._files.clear()

    # -- two-phase commit: one part file per checkpoint (and partition), named after it

    def pre_commit(self, checkpoint_id: int) -> dict:
        ext = _EXTENSIONS[self._settings.format]
        # The name says which checkpoint committed it, so a restore from an older checkpoint can
        # find (and set aside) what later checkpoints committed.
        final = f"part-{checkpoint_id:08d}-{_name_token(self._spec.name, self._lineage)}.{ext}"
        entries = []
        folders = set()
        for directory, file in sorted(self._files.items()):
            if file.rows == 0:
                continue
            file.format.close()
            self._where.fsync(file.in_progress)
            pending = f".pending-{final}"
            self._where.replace(file.in_progress, self._where.join(file.folder, pending))
            folders.add(file.folder)
            # Paths relative to the table's directory ('dt=1/.pending-part-...' in a partition).
            prefix = f"{directory}/" if directory else ""
            entries.append([prefix + pending, prefix + final])
            del self._files[directory]
        for folder in sorted(folders):
            self._where.fsync(folder, directory=True)
        if not self._partitions and "" not in self._files:
            self._files[""] = self._start_file("")
        return {"files": entries}

    def commit(self, checkpoint_id: int, handle: dict | None) -> None:
        where = self._where
        folders = {self._root}
        for pending, final in (handle or {}).get("files", []):
            target = where.join(self._root, *final.split("/"))
            source = where.join(self._root, *pending.split("/"))
            folders.add(where.dirname(target))
            if where.exists(target):
                # Committed already: a repeated commit changes nothing.
                where.unlink(source, missing_ok=True)
                continue
            if not where.exists(source):
                raise ConnectorError(f"table {self._spec.name!r}: the pre-committed file {pending!r} of "
                                     f"checkpoint {checkpoint_id} is gone; its rows cannot be committed")
            where.replace(source, target)
        for folder in sorted(folders):
            self._where.fsync(folder, directory=True)

    def recover(self, checkpoint_id: int, handle: dict | None, *, lineage: str = "") -> str | None:
        self._lineage = lineage
        self.commit(checkpoint_id, handle)
        # Whatever was written after that checkpoint is replayed from the sources: discard it.
        keep = {file.in_progress for file in self._files.values()}
        where = self._where
        if self._partitions:
            folders = list(where.folders(self._root)) if where.is_dir(self._root) else []
        else:
            folders = [self._root] if where.is_dir(self._root) else []
        committed = re.compile(rf"part-(\d{{8}})-{_name_token(self._spec.name, lineage)}\.[a-z]+")
        later: dict[int, list[str]] = {}
        for folder in folders:
            for name in where.listdir(folder):
                path = where.join(folder, name)
                if path in keep:
                    continue
                if name.startswith(".pending-part-") or (name.startswith(".part-") and ".inprogress-" in name):
                    where.unlink(path, missing_ok=True)
                elif (m := committed.fullmatch(name)) and int(m[1]) > checkpoint_id:
                    later.setdefault(int(m[1]), []).append(path)
        return self._roll_back(checkpoint_id, later)

    def _roll_back(self, checkpoint_id: int, later: dict[int, list[str]]) -> str | None:
        """Move the part files that checkpoints after ``checkpoint_id`` committed to
        ``<path>/_rolled_back/chk-<n>/`` (readers skip ``_`` folders): the run writes their rows
        again. Nothing is deleted."""
        if not later:
            return None
        where = self._where
        aside = where.join(self._root, ROLLED_BACK_FOLDER)
        for n, paths in sorted(later.items()):
            for path in paths:
                relative = path[len(self._root):].lstrip("/" + os.sep)
                target = where.join(aside, f"chk-{n}", relative)
                where.makedirs(where.dirname(target))
                where.replace(path, target)
                where.fsync(where.dirname(path), directory=True)
            where.fsync(where.join(aside, f"chk-{n}"), directory=True)
        ids = ", ".join(map(str, sorted(later)))
        resumed = f"checkpoint {checkpoint_id}" if checkpoint_id else "the start"
        return (f"table {self._spec.name!r}: the output of checkpoint(s) {ids}, committed after {resumed} which "
                f"this run resumes from, moved to {aside}; those rows are written again")

    def abort(self) -> None:
        if not self._open:
            return
        self._open = False
        for file in self._files.values():
            # The run has failed already, and the file is discarded whatever closing it says.
            with contextlib.suppress(Exception):
                file.format.close()
        self._discard()

    def _discard(self) -> None:
        for file in self._files.values():
            self._where.unlink(file.in_progress, missing_ok=True)


FILESYSTEM = Connector(
    name="filesystem",
    description="CSV, JSON lines or Parquet files: a local directory or file, or a file:// (s3://, ...) URI",
    source_options=OPTIONS,
    sink_options=OPTIONS,
    create_source=FileSourceReader,
    splittable=True,
    create_sink=FileSinkWriter,
    validate=validate,
)
