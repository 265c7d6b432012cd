"""Candidate decoders of JSON lines and CSV against a declared schema, measured side by side.

Every candidate decodes the same bytes (the first ``--events`` Nexmark events as JSON lines, see
``_nexmark_json.py``; their bids as CSV) into Arrow columns of the types the DDL declares, on one
thread, and the table gives rows per CPU second (and per wall second: the machine may be shared,
so compare within one run). Two JSON schemas: ``all`` is the event table as declared (every ROW
field), ``q0`` only what Nexmark q0 reads (``event_type``, ``bid``'s five fields, and the
``dateTime`` of each ROW for the watermark), the nested pruning a reader can exploit.

    python bench/json_formats.py                      # 200k events, fastest of 3 runs each
    python bench/json_formats.py --events 1000000 --chunk-mib 1,4,16
    python bench/json_formats.py --formats csv

Candidates (a missing optional library is reported, not an error):

- ``pyarrow``: ``pyarrow.json.read_json`` with ``explicit_schema`` and
  ``unexpected_field_behavior='ignore'``, one call per chunk of ``--chunk-mib`` MiB (what clink's
  filesystem source does);
- ``polars``: ``polars.read_ndjson(schema=...)`` per chunk, timestamps read as strings (its own
  datetime parsing is slower) and ``to_arrow()``, which hands the buffers over without a copy;
- ``simdjson``: ``pysimdjson`` parses each line (a Python call per line) and the columns are
  built from Python values;
- ``duckdb``: ``read_json`` with declared ``columns`` over the file, ``threads = 1``: the
  reference, not a candidate (it is not a run-time dependency).

CSV: ``pyarrow.csv`` with ``column_types`` and ``include_columns`` (clink's source), ``polars.read_csv``
with a schema, and DuckDB's ``read_csv``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # before polars is imported

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.csv as pa_csv  # noqa: E402
import pyarrow.json as pa_json  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _nexmark_json import events_file  # noqa: E402

TS = pa.timestamp("ms")
PERSON = pa.struct([("id", pa.int64()), ("name", pa.string()), ("emailAddress", pa.string()),
                    ("creditCard", pa.string()), ("city", pa.string()), ("state", pa.string()),
                    ("dateTime", TS), ("extra", pa.string())])
AUCTION = pa.struct([("id", pa.int64()), ("itemName", pa.string()), ("description", pa.string()),
                     ("initialBid", pa.int64()), ("reserve", pa.int64()), ("dateTime", TS), ("expires", TS),
                     ("seller", pa.int64()), ("category", pa.int64()), ("extra", pa.string())])
BID = pa.struct([("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()), ("channel", pa.string()),
                 ("url", pa.string()), ("dateTime", TS), ("extra", pa.string())])
SCHEMAS = {
    "all": pa.schema([("event_type", pa.int32()), ("person", PERSON), ("auction", AUCTION), ("bid", BID)]),
    "q0": pa.schema([("event_type", pa.int32()), ("person", pa.struct([("dateTime", TS)])),
                     ("auction", pa.struct([("dateTime", TS)])),
                     ("bid", pa.struct([BID.field(i) for i in (0, 1, 2, 5, 6)]))]),
}
BID_CSV = pa.schema([BID.field(i) for i in range(BID.num_fields)])


def chunks(data: bytes, size: int) -> list[bytes]:
    """``data`` cut after a line break about every ``size`` bytes."""
    out, start = [], 0
    while start < len(data):
        cut = data.rfind(b"\n", start, start + size) + 1 if start + size < len(data) else len(data)
        if cut <= start:
            cut = data.index(b"\n", start + size) + 1
        out.append(data[start:cut])
        start = cut
    return out


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def pyarrow_json(schema: pa.Schema, parts: list[bytes]) -> Callable[[], object]:
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def run() -> None:
        for part in parts:
            pa_json.read_json(io.BytesIO(part), parse_options=options,
                              read_options=pa_json.ReadOptions(use_threads=False, block_size=len(part) + 1))
    return run


def polars_schema(t: pa.DataType):  # noqa: ANN201 - polars is optional
    import polars as pl

    if pa.types.is_struct(t):
        return pl.Struct({t.field(i).name: polars_schema(t.field(i).type) for i in range(t.num_fields)})
    return {pa.int32(): pl.Int32, pa.int64(): pl.Int64, pa.string(): pl.String, TS: pl.String}[t]


def polars_json(schema: pa.Schema, parts: list[bytes]) -> Callable[[], object]:
    import polars as pl

    pl_schema = pl.Schema({f.name: polars_schema(f.type) for f in schema})

    def run() -> None:
        for part in parts:
            pl.read_ndjson(io.BytesIO(part), schema=pl_schema).to_arrow()
    return run


def simdjson_json(schema: pa.Schema, parts: list[bytes]) -> Callable[[], object]:
    import simdjson

    parser = simdjson.Parser()

    def run() -> None:
        for part in parts:
            columns: dict[str, list] = {f.name: [] for f in schema}
            for line in part.splitlines():
                record = parser.parse(line).as_dict()
                for f in schema:
                    value = record.get(f.name)
                    if pa.types.is_struct(f.type) and value is not None:
                        value = {f.type.field(i).name: value.get(f.type.field(i).name)
                                 for i in range(f.type.num_fields)}
                    columns[f.name].append(value)
            read = pa.schema([pa.field(f.name, _text_times(f.type)) for f in schema])
            pa.Table.from_pydict(columns, schema=read)
    return run


def _text_times(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _text_times(t.field(i).type)) for i in range(t.num_fields)])
    return pa.string() if pa.types.is_timestamp(t) else t


def duckdb_type(t: pa.DataType) -> str:
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{t.field(i).name} {duckdb_type(t.field(i).type)}"
                                     for i in range(t.num_fields)) + ")"
    return {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.string(): "VARCHAR", TS: "TIMESTAMP"}[t]


def duckdb_read(kind: str, path: Path, schema: pa.Schema, select: str = "*") -> Callable[[], object]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    columns = "{" + ", ".join(f"{f.name}: '{duckdb_type(f.type)}'" for f in schema) + "}"
    if kind == "json":
        sql = f"SELECT * FROM read_json('{path}', format = 'newline_delimited', columns = {columns})"
    else:
        sql = f"SELECT {select} FROM read_csv('{path}', header = false, columns = {columns})"
    return lambda: con.sql(sql).to_arrow_table()


def pyarrow_csv(schema: pa.Schema, parts: list[bytes], include: list[str]) -> Callable[[], object]:
    def run() -> None:
        for part in parts:
            pa_csv.read_csv(io.BytesIO(part),
                            read_options=pa_csv.ReadOptions(column_names=schema.names, use_threads=False,
                                                            block_size=len(part) + 1),
                            convert_options=pa_csv.ConvertOptions(
                                column_types={n: schema.field(n).type for n in include}, include_columns=include,
                                strings_can_be_null=False, quoted_strings_can_be_null=False))
    return run


def polars_csv(schema: pa.Schema, parts: list[bytes], include: list[str]) -> Callable[[], object]:
    import polars as pl

    pl_schema = pl.Schema({f.name: polars_schema(f.type) for f in schema})
    columns = [schema.names.index(n) for n in include]

    def run() -> None:
        for part in parts:
            pl.read_csv(io.BytesIO(part), has_header=False, schema=pl_schema, columns=columns).to_arrow()
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="Nexmark events to decode (default 200000)")
    parser.add_argument("--chunk-mib", default="1,4,16", help="pyarrow chunk sizes to try, in MiB (default 1,4,16)")
    parser.add_argument("--formats", default="json,csv", help="which to measure (default json,csv)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each candidate; the fastest counts (default 3)")
    parser.add_argument("--data", type=Path, default=HERE / "data", help="where the event file is kept")
    args = parser.parse_args(argv)
    path = events_file(args.events, args.data)
    data = path.read_bytes()
    rows = data.count(b"\n")
    sizes = [int(s) for s in args.chunk_mib.split(",")]
    default = 1 if 1 in sizes else sizes[0]
    print(f"{path.name}: {rows} lines, {len(data) / rows:.0f} bytes a line; rows per CPU second (wall), fastest of {args.reps} runs")

    def row(label: str, make: Callable[[], Callable[[], object]], count: int = rows) -> None:
        try:
            fn = make()
        except ImportError as e:
            print(f"  {label:38s} not installed ({e.name})")
            return
        cpu, wall = min(timed(fn) for _ in range(args.reps))
        print(f"  {label:38s} {count / cpu / 1e6:6.2f} M rows/s  ({count / wall / 1e6:.2f} M wall)", flush=True)

    for name, schema in SCHEMAS.items() if "json" in args.formats else ():
        print(f"JSON, schema {name!r}")
        for size in sizes:
            parts = chunks(data, size << 20)
            row(f"pyarrow, {size} MiB chunks", lambda s=schema, p=parts: pyarrow_json(s, p))
        parts = chunks(data, default << 20)
        row(f"polars + to_arrow, {default} MiB chunks", lambda s=schema, p=parts: polars_json(s, p))
        # simdjson builds Python values per line: a tenth of the rows is enough to rank it.
        tenth = chunks(data[:data.index(b"\n", len(data) // 10) + 1], default << 20)
        row("pysimdjson per line (1/10 of rows)", lambda s=schema, p=tenth: simdjson_json(s, p),
            sum(p.count(b"\n") for p in tenth))
        row("duckdb read_json (reference)", lambda s=schema: duckdb_read("json", path, s))

    if "csv" not in args.formats:
        return
    bids = pa_json.read_json(io.BytesIO(data), parse_options=pa_json.ParseOptions(
        explicit_schema=pa.schema([("bid", BID)]), unexpected_field_behavior="ignore")).column("bid")
    table = pa.Table.from_struct_array(bids.combine_chunks()).filter(pc.is_valid(bids.combine_chunks()))
    csv_path = args.data / f"bids-{args.events}.csv"
    pa_csv.write_csv(table, csv_path, write_options=pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
    csv_data = csv_path.read_bytes()
    csv_rows = table.num_rows
    print(f"CSV: {csv_path.name}: {csv_rows} lines, {len(csv_data) / csv_rows:.0f} bytes a line")
    for label, include in (("all columns", BID_CSV.names), ("q0 columns", ["auction", "bidder", "price",
                                                                           "dateTime", "extra"])):
        for size in sizes:
            parts = chunks(csv_data, size << 20)
            row(f"pyarrow.csv, {label}, {size} MiB", lambda p=parts, i=include: pyarrow_csv(BID_CSV, p, i), csv_rows)
        parts = chunks(csv_data, default << 20)
        row(f"polars read_csv, {label}", lambda p=parts, i=include: polars_csv(BID_CSV, p, i), csv_rows)
        row(f"duckdb read_csv, {label} (reference)",
            lambda i=include: duckdb_read("csv", csv_path, BID_CSV, ", ".join(f'"{n}"' for n in i)), csv_rows)


if __name__ == "__main__":
    main()
