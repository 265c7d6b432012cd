"""The built-in connectors: datagen, filesystem (CSV, JSON lines, Parquet), print and blackhole."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from clink.errors import ConnectorError, RecordError
from clink.runtime.connectors.base import ConnectorRegistry, SinkWriter, SourceReader, TableSpec
from clink.runtime.connectors.blackhole import BLACKHOLE
from clink.runtime.connectors.datagen import ANCHOR_MS, DATAGEN
from clink.runtime.connectors import filesystem
from clink.runtime.connectors.filesystem import FILESYSTEM
from clink.runtime.connectors.print import PRINT
from clink.runtime.context import RuntimeContext
from clink.runtime.plan import UPDATING

SIMPLE = pa.schema([("id", pa.int64()), ("price", pa.float64()), ("region", pa.string())])

EVERY_TYPE = pa.schema([
    ("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(10, 2)), ("s", pa.string()),
    ("bin", pa.binary()), ("d", pa.date32()), ("t32", pa.time32("ms")), ("t64", pa.time64("us")),
    ("ts_s", pa.timestamp("s")), ("ts_ms", pa.timestamp("ms")), ("ts_us", pa.timestamp("us")),
    ("ts_ns", pa.timestamp("ns")), ("ts_ltz", pa.timestamp("ms", tz="UTC")),
    ("row", pa.struct([("x", pa.int32()), ("y", pa.string())])), ("arr", pa.list_(pa.int64())),
    ("map", pa.map_(pa.string(), pa.float64())),
])

FLAT_TYPES = pa.schema([f for f in EVERY_TYPE if not pa.types.is_nested(f.type)])


def ctx(**kwargs: object) -> RuntimeContext:
    return RuntimeContext(connectors=ConnectorRegistry(), stdout=io.StringIO(), **kwargs)  # type: ignore[arg-type]


def spec(schema: pa.Schema, options: dict[str, str], table_schema: pa.Schema | None = None) -> TableSpec:
    return TableSpec(name="t", schema=schema, table_schema=table_schema or schema, options=options)


def drain(reader: SourceReader, schema: pa.Schema, max_polls: int = 100_000) -> tuple[pa.Table, int]:
    """All rows of a bounded reader, and how many non-empty batches they came in."""
    batches = []
    for _ in range(max_polls):
        if reader.finished:
            break
        batch = reader.poll()
        if batch is not None:
            assert batch.schema == schema
            batches.append(batch)
    assert reader.finished
    reader.close()
    return pa.Table.from_batches(batches, schema=schema), len(batches)


def datagen(schema: pa.Schema, context: RuntimeContext | None = None, **options: str) -> pa.Table:
    reader = DATAGEN.create_source(spec(schema, dict(options)), context or ctx())
    table, _ = drain(reader, schema)
    return table


def write(schema: pa.Schema, options: dict[str, str], table: pa.Table | pa.RecordBatch) -> SinkWriter:
    writer = FILESYSTEM.create_sink(spec(schema, options), ctx())
    for batch in (table.to_batches() if isinstance(table, pa.Table) else [table]):
        writer.write(batch)
    writer.close()
    return writer


def read(schema: pa.Schema, options: dict[str, str],
         table_schema: pa.Schema | None = None) -> tuple[pa.Table, SourceReader]:
    reader = FILESYSTEM.create_source(spec(schema, options, table_schema), ctx())
    batches = []
    while not reader.finished:
        batch = reader.poll()
        if batch is not None:
            assert batch.schema == schema
            batches.append(batch)
    reader.close()
    return pa.Table.from_batches(batches, schema=schema), reader


# --- datagen --------------------------------------------------------------------------------


def test_datagen_produces_exactly_number_of_rows() -> None:
    table = datagen(SIMPLE, **{"number-of-rows": "20000", "batch-size": "3000"})
    assert table.num_rows == 20000


def test_datagen_is_reproducible_by_seed() -> None:
    a = datagen(SIMPLE, **{"number-of-rows": "500", "seed": "7"})
    b = datagen(SIMPLE, **{"number-of-rows": "500", "seed": "7"})
    c = datagen(SIMPLE, **{"number-of-rows": "500", "seed": "8"})
    assert a.equals(b)
    assert not a.column("id").equals(c.column("id"))
    assert not a.column("region").equals(c.column("region"))


def test_datagen_projection_keeps_each_columns_values() -> None:
    full = datagen(SIMPLE, **{"number-of-rows": "100"})
    projected = pa.schema([SIMPLE.field("region"), SIMPLE.field("id")])
    reader = DATAGEN.create_source(spec(projected, {"number-of-rows": "100"}, SIMPLE), ctx())
    table, _ = drain(reader, projected)
    assert table.column_names == ["region", "id"]
    assert table.column("region").equals(full.column("region"))
    assert table.column("id").equals(full.column("id"))


def test_datagen_sequence_bounds_the_table() -> None:
    schema = pa.schema([("n", pa.int32()), ("s", pa.string()), ("d", pa.decimal128(6, 1))])
    table = datagen(schema, **{"fields.n.kind": "sequence", "fields.n.start": "5", "fields.n.end": "9",
                               "fields.s.kind": "sequence", "fields.s.start": "100",
                               "fields.d.kind": "sequence"})
    assert table.column("n").to_pylist() == [5, 6, 7, 8, 9]
    assert table.column("s").to_pylist() == ["100", "101", "102", "103", "104"]
    assert [str(v) for v in table.column("d").to_pylist()] == ["0.0", "1.0", "2.0", "3.0", "4.0"]


def test_datagen_sequence_and_number_of_rows_take_the_smaller() -> None:
    schema = pa.schema([("n", pa.int64())])
    table = datagen(schema, **{"fields.n.kind": "sequence", "fields.n.end": "99", "number-of-rows": "10"})
    assert table.column("n").to_pylist() == list(range(10))


def test_datagen_min_max_and_length() -> None:
    schema = pa.schema([("i", pa.int16()), ("f", pa.float64()), ("s", pa.string()),
                        ("d", pa.decimal128(8, 2))])
    table = datagen(schema, **{"number-of-rows": "5000", "fields.i.min": "-3", "fields.i.max": "4",
                               "fields.f.min": "10", "fields.f.max": "10.5", "fields.s.length": "4",
                               "fields.d.min": "1.5", "fields.d.max": "2"})
    assert pc.min(table["i"]).as_py() == -3 and pc.max(table["i"]).as_py() == 4
    assert pc.min(table["f"]).as_py() >= 10 and pc.max(table["f"]).as_py() <= 10.5
    assert set(pc.utf8_length(table["s"]).to_pylist()) == {4}
    assert all(s.isalnum() and s.isascii() for s in table["s"].to_pylist())
    assert float(pc.min(table["d"]).as_py()) >= 1.5 and float(pc.max(table["d"]).as_py()) <= 2


def test_datagen_temporal_values_lie_in_a_fixed_window() -> None:
    schema = pa.schema([("ts", pa.timestamp("ms")), ("t", pa.time32("ms")), ("d", pa.date32())])
    table = datagen(schema, **{"number-of-rows": "1000", "fields.ts.max-past": "60000",
                               "fields.d.min": "2020-01-01", "fields.d.max": "2020-01-31"})
    stamps = table["ts"].cast(pa.int64())
    assert pc.min(stamps).as_py() >= ANCHOR_MS - 60_000 and pc.max(stamps).as_py() <= ANCHOR_MS
    days = {d.isoformat()[:7] for d in table["d"].to_pylist()}
    assert days == {"2020-01"}


def test_datagen_null_rate_is_roughly_honoured() -> None:
    table = datagen(SIMPLE, **{"number-of-rows": "20000", "fields.price.null-rate": "0.25"})
    assert 0.22 < table["price"].null_count / 20000 < 0.28
    assert table["id"].null_count == 0


def test_datagen_generates_every_type() -> None:
    options = {"number-of-rows": "300"} | {f"fields.{n}.null-rate": "0.1" for n in EVERY_TYPE.names}
    table = datagen(EVERY_TYPE, **options)
    table.validate(full=True)
    assert table.schema == EVERY_TYPE
    for column in table.columns:
        assert 0 < column.null_count < 300
    lengths = pc.list_value_length(table["arr"]).drop_null().to_pylist()
    assert set(lengths) <= {0, 1, 2, 3} and len(set(lengths)) > 1


def test_datagen_throttles_against_the_clock() -> None:
    now = [1_000_000]
    reader = DATAGEN.create_source(spec(SIMPLE, {"rows-per-second": "100"}), ctx(clock=lambda: now[0]))
    assert reader.poll() is None  # nothing is due at the start
    now[0] += 100
    assert reader.poll().num_rows == 10
    assert reader.poll() is None
    now[0] += 900
    assert reader.poll().num_rows == 90
    now[0] += 5
    assert reader.poll() is None
    assert not reader.finished and reader.bounded is False
    assert reader.metrics["records_in"] == 100


def test_datagen_bounded_without_explicit_rate_ignores_the_clock() -> None:
    reader = DATAGEN.create_source(spec(SIMPLE, {"number-of-rows": "100000"}), ctx(clock=lambda: 0))
    table, _ = drain(reader, SIMPLE, max_polls=100)
    assert table.num_rows == 100000


def test_datagen_throttled_output_equals_unthrottled_output() -> None:
    now = [0]
    options = {"number-of-rows": "1000", "rows-per-second": "1000", "batch-size": "300"}
    reader = DATAGEN.create_source(spec(SIMPLE, options), ctx(clock=lambda: now[0]))
    batches = []
    while not reader.finished:
        now[0] += 37
        if (batch := reader.poll()) is not None:
            batches.append(batch)
    assert len(batches) > 6
    fast = datagen(SIMPLE, **{"number-of-rows": "1000", "batch-size": "300"})
    assert pa.Table.from_batches(batches).equals(fast)


@pytest.mark.parametrize("options, key", [
    ({"number-of-rows": "ten"}, "number-of-rows"),
    ({"rows-per-second": "-1"}, "rows-per-second"),
    ({"fields.id.kind": "zigzag"}, "fields.id.kind"),
    ({"fields.id.min": "5", "fields.id.max": "1"}, "fields.id.min"),
    ({"fields.price.null-rate": "1.5"}, "fields.price.null-rate"),
    ({"fields.nope.kind": "random"}, "fields.nope.kind"),
])
def test_datagen_validate_reports_bad_values(options: dict[str, str], key: str) -> None:
    assert DATAGEN.validate is not None
    errors = DATAGEN.validate(options, SIMPLE, "source")
    assert key in errors
    with pytest.raises(ConnectorError):
        DATAGEN.create_source(spec(SIMPLE, options), ctx())


def test_datagen_generates_a_million_rows() -> None:
    # How fast is bench/'s business (bench/stateless.py); a test asserts what comes out.
    table = datagen(SIMPLE, **{"number-of-rows": "1000000"})
    assert table.num_rows == 1_000_000
    assert table.column(0).null_count == 0


# --- filesystem -----------------------------------------------------------------------------


def sample(n: int = 5) -> pa.Table:
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "price": pa.array([i * 1.5 for i in range(n)], pa.float64()),
        "region": pa.array([f"r,{i}" if i % 2 else f'q"{i}' for i in range(n)], pa.string()),
    })


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_filesystem_round_trip_simple(tmp_path: Path, fmt: str) -> None:
    options = {"path": str(tmp_path / f"out.{fmt}"), "format": fmt}
    writer = write(SIMPLE, options, sample(100))
    assert writer.metrics["rows_out"] == 100
    table, reader = read(SIMPLE, options)
    assert table.equals(sample(100))
    assert reader.metrics == {"records_in": 100, "skipped_records": 0}


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_filesystem_round_trip_every_type(tmp_path: Path, fmt: str) -> None:
    schema = EVERY_TYPE if fmt == "parquet" else FLAT_TYPES
    if fmt == "json":
        schema = pa.schema([f for f in EVERY_TYPE if not pa.types.is_map(f.type)])
    # Without a null literal CSV cannot tell a null string from an empty one.
    nulls = {f"fields.{n}.null-rate": "0.2" for n in schema.names if not (fmt == "csv" and n == "s")}
    data = datagen(schema, **{"number-of-rows": "200"} | nulls)
    options = {"path": str(tmp_path / f"out.{fmt}"), "format": fmt}
    write(schema, options, data)
    table, _ = read(schema, options)
    for name in schema.names:
        assert table[name].equals(data[name]), name


def only_part(directory: Path) -> Path:
    """The one part file a sink wrote into ``directory``."""
    (part,) = [p for p in directory.iterdir() if p.name.startswith("part-")]
    return part


def test_csv_null_literal_keeps_null_and_empty_strings_apart(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 2, 3], "price": [1.0, None, 3.0], "region": ["a", None, ""]}, schema=SIMPLE)
    options = {"path": str(tmp_path / "x.csv"), "format": "csv", "csv.null-literal": "\\N"}
    write(SIMPLE, options, data)
    assert only_part(tmp_path / "x.csv").read_text() == '1,1,"a"\n2,\\N,\\N\n3,3,""\n'
    table, _ = read(SIMPLE, options)
    assert table.equals(data)


def test_csv_empty_fields_without_null_literal(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("1,,\n,2.5,EU\n")
    table, _ = read(SIMPLE, {"path": str(tmp_path / "x.csv"), "format": "csv"})
    assert table.to_pylist() == [{"id": 1, "price": None, "region": ""},
                                 {"id": None, "price": 2.5, "region": "EU"}]


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_filesystem_projection_reads_requested_columns_in_order(tmp_path: Path, fmt: str) -> None:
    options = {"path": str(tmp_path / f"x.{fmt}"), "format": fmt}
    write(SIMPLE, options, sample(10))
    projected = pa.schema([SIMPLE.field("region"), SIMPLE.field("id")])
    table, _ = read(projected, options, SIMPLE)
    assert table.column_names == ["region", "id"]
    assert table["id"].to_pylist() == list(range(10))
    assert table["region"].equals(sample(10)["region"])


def test_csv_projection_to_no_columns_still_counts_rows(tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "x.csv"), "format": "csv"}
    write(SIMPLE, options, sample(7))
    table, reader = read(pa.schema([]), options, SIMPLE)
    assert table.num_rows == 7 and reader.metrics["records_in"] == 7


def test_directory_source_reads_visible_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text("2,2,b\n")
    (tmp_path / "a.csv").write_text("1,1,a\n")
    (tmp_path / "_SUCCESS").write_text("x\n")
    (tmp_path / ".a.csv.inprogress-123").write_text("garbage\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.csv").write_text("3,3,c\n")
    table, _ = read(SIMPLE, {"path": str(tmp_path), "format": "csv"})
    assert table["id"].to_pylist() == [1, 2, 3]


def test_csv_header_delimiter_and_quote(tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "x.csv"), "format": "csv", "csv.header": "true",
               "csv.field-delimiter": ";"}
    write(SIMPLE, options, sample(3))
    lines = only_part(tmp_path / "x.csv").read_text().splitlines()
    assert lines[0] == '"id";"price";"region"'
    assert lines[2] == '1;1.5;"r,1"'
    table, _ = read(SIMPLE, options)
    assert table.equals(sample(3))
    (tmp_path / "q.csv").write_text("id|price|region\n1|2|'a|b'\n")
    table, _ = read(SIMPLE, {"path": str(tmp_path / "q.csv"), "format": "csv", "csv.header": "true",
                             "csv.field-delimiter": "|", "csv.quote-character": "'"})
    assert table.to_pylist() == [{"id": 1, "price": 2.0, "region": "a|b"}]


def test_csv_timestamps_accept_space_and_t(tmp_path: Path) -> None:
    schema = pa.schema([("ts", pa.timestamp("ms")), ("ltz", pa.timestamp("ms", tz="UTC"))])
    (tmp_path / "x.csv").write_text("2020-01-01 12:00:00.123,2020-01-01 12:00:00\n"
                                    "2020-01-01T12:00:01,2020-01-01T13:00:00+01:00\n")
    table, _ = read(schema, {"path": str(tmp_path / "x.csv"), "format": "csv"})
    assert pc.cast(table["ts"], pa.int64()).to_pylist() == [1577880000123, 1577880001000]
    assert pc.cast(table["ltz"], pa.int64()).to_pylist() == [1577880000000, 1577880000000]


def bad_csv(tmp_path: Path) -> Path:
    lines = [f"{i},{i}.5,r{i}" for i in range(1, 10)]
    lines[3] = "4,4.5"          # line 5 (after the header): too few fields
    lines[6] = "7,abc,r7"       # line 8: not a DOUBLE
    path = tmp_path / "bad.csv"
    path.write_text("id,price,region\n" + "\n".join(lines) + "\n")
    return path


def test_csv_wrong_field_count_names_file_and_line(tmp_path: Path) -> None:
    path = bad_csv(tmp_path)
    with pytest.raises(RecordError) as info:
        read(SIMPLE, {"path": str(path), "format": "csv", "csv.header": "true"})
    assert info.value.line == 5
    assert info.value.file == str(path)
    assert info.value.reason == "expected 3 fields, found 2"


def test_csv_value_that_does_not_cast_names_the_column(tmp_path: Path) -> None:
    path = bad_csv(tmp_path)
    text = path.read_text().replace("4,4.5\n", "4,4.5,r4\n")
    path.write_text(text)
    with pytest.raises(RecordError) as info:
        read(SIMPLE, {"path": str(path), "format": "csv", "csv.header": "true"})
    assert info.value.line == 8
    assert info.value.reason == "cannot read 'abc' as DOUBLE in column 'price'"


def test_csv_bad_value_in_a_text_converted_column(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("t", pa.time32("ms"))])
    (tmp_path / "x.csv").write_text("1,12:00:00\n2,25:99\n")
    with pytest.raises(RecordError) as info:
        read(schema, {"path": str(tmp_path / "x.csv"), "format": "csv"})
    assert info.value.line == 2
    assert "column 't'" in info.value.reason


def test_csv_ignore_parse_errors_skips_and_counts(tmp_path: Path) -> None:
    path = bad_csv(tmp_path)
    table, reader = read(SIMPLE, {"path": str(path), "format": "csv", "csv.header": "true",
                                  "format.ignore-parse-errors": "true"})
    assert table["id"].to_pylist() == [1, 2, 3, 5, 6, 8, 9]
    assert reader.metrics == {"records_in": 7, "skipped_records": 2}


def test_csv_large_file_is_read_in_several_batches(tmp_path: Path) -> None:
    n = 300_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "price": pa.array([0.25] * n),
                     "region": pa.array(["europe-west"] * n)})
    options = {"path": str(tmp_path / "big.csv"), "format": "csv"}
    write(SIMPLE, options, data)
    reader = FILESYSTEM.create_source(spec(SIMPLE, options), ctx())
    table, batches = drain(reader, SIMPLE)
    assert batches > 3
    assert table.equals(data)


def test_json_reads_missing_keys_as_null_and_ignores_unknown_ones(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"id": 1, "extra": [1]}\n\n{"region": "EU", "price": 2}\n')
    table, _ = read(SIMPLE, {"path": str(tmp_path / "x.json"), "format": "json"})
    assert table.to_pylist() == [{"id": 1, "price": None, "region": None},
                                 {"id": None, "price": 2.0, "region": "EU"}]


def test_json_timestamp_standards(tmp_path: Path) -> None:
    schema = pa.schema([("ts", pa.timestamp("ms"))])
    data = pa.table({"ts": pa.array([1577880000123], pa.timestamp("ms"))})
    for standard, text in (("SQL", "2020-01-01 12:00:00.123"), ("ISO-8601", "2020-01-01T12:00:00.123")):
        options = {"path": str(tmp_path / f"{standard}.json"), "format": "json",
                   "json.timestamp-format.standard": standard}
        write(schema, options, data)
        assert only_part(tmp_path / f"{standard}.json").read_text() == f'{{"ts":"{text}"}}\n'
        table, _ = read(schema, options)
        assert table.equals(data)


def test_json_escapes_strings(tmp_path: Path) -> None:
    import json

    values = ['a"b', "back\\slash", "new\nline", "tab\t", "bell\x07", "ünï"]
    data = pa.table({"s": values})
    options = {"path": str(tmp_path / "x.json"), "format": "json"}
    write(data.schema, options, data)
    assert [json.loads(line)["s"] for line in only_part(tmp_path / "x.json").read_text().splitlines()] == values
    table, _ = read(data.schema, options)
    assert table.equals(data)


def bad_json(tmp_path: Path) -> Path:
    lines = [f'{{"id": {i}, "price": {i}.5, "region": "r{i}"}}' for i in range(1, 8)]
    lines[2] = '{"id": 3, "price": '                   # line 3: not JSON
    lines[5] = '{"id": "abc", "price": 1, "region": "x"}'  # line 6: not a BIGINT
    path = tmp_path / "bad.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = bad_json(tmp_path)
    with pytest.raises(RecordError) as info:
        read(SIMPLE, {"path": str(path), "format": "json"})
    assert (info.value.file, info.value.line) == (str(path), 3)
    assert info.value.reason.startswith("invalid JSON")


def test_json_value_that_does_not_cast_names_the_column(tmp_path: Path) -> None:
    path = bad_json(tmp_path)
    path.write_text(path.read_text().replace('{"id": 3, "price": \n', '{"id": 3}\n'))
    with pytest.raises(RecordError) as info:
        read(SIMPLE, {"path": str(path), "format": "json"})
    assert info.value.line == 6
    assert info.value.reason == "cannot read 'abc' as BIGINT in column 'id'"


def test_json_ignore_parse_errors_skips_and_counts(tmp_path: Path) -> None:
    path = bad_json(tmp_path)
    table, reader = read(SIMPLE, {"path": str(path), "format": "json", "json.ignore-parse-errors": "true"})
    assert table["id"].to_pylist() == [1, 2, 4, 5, 7]
    assert reader.metrics["skipped_records"] == 2


def test_parquet_missing_column_reads_as_null_and_types_are_cast(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32())}), tmp_path / "x.parquet")
    table, _ = read(SIMPLE, {"path": str(tmp_path / "x.parquet"), "format": "parquet"})
    assert table.to_pylist() == [{"id": 1, "price": None, "region": None},
                                 {"id": 2, "price": None, "region": None}]


def test_sink_publishes_only_on_close(tmp_path: Path) -> None:
    # As in Flink, the path is a directory, whatever its name.
    target = tmp_path / "out.csv"
    writer = FILESYSTEM.create_sink(spec(SIMPLE, {"path": str(target), "format": "csv"}), ctx())
    writer.write(sample(3).to_batches()[0])
    (hidden,) = [p.name for p in target.iterdir()]
    assert hidden.startswith(".part-") and ".inprogress-" in hidden
    writer.close()
    assert len(only_part(target).read_text().splitlines()) == 3
    assert [p.name.startswith("part-") for p in target.iterdir()] == [True]


def test_a_sink_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out.csv").write_text("someone's data\n")
    with pytest.raises(ConnectorError, match="a filesystem sink's 'path' is a directory"):
        FILESYSTEM.create_sink(spec(SIMPLE, {"path": str(tmp_path / "out.csv"), "format": "csv"}), ctx())
    assert (tmp_path / "out.csv").read_text() == "someone's data\n"  # nothing overwritten


def test_sink_abort_leaves_no_file(tmp_path: Path) -> None:
    for fmt in ("csv", "json", "parquet"):
        options = {"path": str(tmp_path / f"out.{fmt}"), "format": fmt}
        writer = FILESYSTEM.create_sink(spec(SIMPLE, options), ctx())
        writer.write(sample(3).to_batches()[0])
        writer.abort()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_directory_sink_writes_part_files(tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "out") + "/", "format": "json"}
    write(SIMPLE, options, sample(4))
    write(SIMPLE, options, sample(2))
    names = sorted(os.listdir(tmp_path / "out"))
    assert len(names) == 2 and all(n.startswith("part-") and n.endswith("-0.json") for n in names)
    table, _ = read(SIMPLE, {"path": str(tmp_path / "out"), "format": "json"})
    assert table.num_rows == 6


@pytest.mark.parametrize("options, key", [
    ({"format": "csv"}, "path"),
    ({"path": "/tmp/x", "format": "xml"}, "format"),
    ({"path": "/tmp/x", "format": "csv", "csv.field-delimiter": ";;"}, "csv.field-delimiter"),
    ({"path": "/tmp/x", "format": "csv", "csv.header": "yes"}, "csv.header"),
    ({"path": "/tmp/x", "format": "json", "json.timestamp-format.standard": "RFC"},
     "json.timestamp-format.standard"),
])
def test_filesystem_validate_reports_bad_values(options: dict[str, str], key: str) -> None:
    assert FILESYSTEM.validate is not None
    assert key in FILESYSTEM.validate(options, SIMPLE, "source")


def test_filesystem_validate_rejects_nested_csv_columns() -> None:
    assert FILESYSTEM.validate is not None
    errors = FILESYSTEM.validate({"path": "x", "format": "csv"}, EVERY_TYPE, "sink")
    assert "format" in errors and "CSV" in errors["format"]


def test_filesystem_source_on_a_missing_path() -> None:
    with pytest.raises(ConnectorError, match="no such file"):
        FILESYSTEM.create_source(spec(SIMPLE, {"path": "/nonexistent/x.csv", "format": "csv"}), ctx())


# --- print and blackhole --------------------------------------------------------------------


def test_print_writes_flink_style_lines() -> None:
    schema = pa.schema([("id", pa.int64()), ("price", pa.float64()), ("region", pa.string()),
                        ("ts", pa.timestamp("ms")), ("tags", pa.list_(pa.string())),
                        ("pt", pa.struct([("x", pa.int32())]))])
    data = pa.record_batch([
        pa.array([1, None]), pa.array([2.5, 3.0]), pa.array(["EU", None]),
        pa.array([1586937900000, 1586937900123], pa.timestamp("ms")),
        pa.array([["a", "b"], []]), pa.array([{"x": 1}, None], schema.field("pt").type),
    ], schema=schema)
    context = ctx()
    writer = PRINT.create_sink(spec(schema, {}), context)
    writer.write(data)
    assert context.stdout.getvalue() == (
        "+I[1, 2.5, EU, 2020-04-15T08:05:00, [a, b], (1)]\n"
        "+I[null, 3.0, null, 2020-04-15T08:05:00.123, [], null]\n")
    assert writer.metrics["rows_out"] == 2


def test_print_identifier_and_rowkind() -> None:
    schema = pa.schema([("n", pa.int64()), ("_rowkind", pa.string())])
    context = ctx()
    updating = TableSpec(name="t", schema=schema, table_schema=schema, options={"print-identifier": "sink"},
                         changelog=UPDATING)
    writer = PRINT.create_sink(updating, context)
    writer.write(pa.record_batch([pa.array([1, 2]), pa.array(["+I", "-U"])], schema=schema))
    assert context.stdout.getvalue() == "sink> +I[1]\nsink> -U[2]\n"


def test_blackhole_counts_rows() -> None:
    writer = BLACKHOLE.create_sink(spec(SIMPLE, {}), ctx())
    writer.write(sample(4).to_batches()[0])
    writer.write(sample(3).to_batches()[0])
    writer.close()
    assert writer.metrics["rows_out"] == 7


def test_csv_blocks_are_joined_into_batches_of_csv_batch_rows(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Small blocks and batches, so a small file shows the joining: each batch but the last holds
    # at least CSV_BATCH_ROWS rows, and less than one block more.
    monkeypatch.setattr(filesystem, "CSV_BLOCK_SIZE", 4096)
    monkeypatch.setattr(filesystem, "CSV_BATCH_ROWS", 1000)
    n = 10_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "price": pa.array([i / 4 for i in range(n)]),
                     "region": pa.array([f"r{i % 7}" for i in range(n)])})
    options = {"path": str(tmp_path / "big.csv"), "format": "csv"}
    write(SIMPLE, options, data)
    reader = FILESYSTEM.create_source(spec(SIMPLE, options), ctx())
    sizes = []
    while not reader.finished:
        batch = reader.poll()
        if batch is not None:
            sizes.append(batch.num_rows)
    assert sum(sizes) == n and len(sizes) > 3
    assert all(1000 <= size < 2000 for size in sizes[:-1])  # a 4 KiB block holds < 1000 of these lines
    table, _ = read(SIMPLE, options)
    assert table.equals(data)
    assert reader.metrics == {"records_in": n, "skipped_records": 0}


def test_csv_rows_before_a_bad_record_come_out_before_its_error(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The rows of the blocks before the bad one are given out (and counted) before the error is
    # raised, as when every block was its own batch.
    monkeypatch.setattr(filesystem, "CSV_BLOCK_SIZE", 4096)
    lines = [f"{i},{i}.5,r{i}" for i in range(5000)]
    lines[4321] = "4321,4321.5"  # line 4322: too few fields
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    reader = FILESYSTEM.create_source(spec(SIMPLE, {"path": str(path), "format": "csv"}), ctx())
    ids = []
    with pytest.raises(RecordError) as info:
        while not reader.finished:
            batch = reader.poll()
            if batch is not None:
                ids += batch.column("id").to_pylist()
    assert info.value.line == 4322
    assert info.value.reason == "expected 3 fields, found 2"
    # Every row of the blocks before the bad one's (a 4 KiB block holds < 400 of these lines).
    assert 4321 - 400 < len(ids) <= 4321 and ids == list(range(len(ids)))
    assert reader.metrics["records_in"] == len(ids)


def test_coalesce_batches_joins_in_order_and_yields_what_it_holds_before_an_error() -> None:
    def batches(sizes: list[int], fail: bool):
        start = 0
        for size in sizes:
            yield pa.record_batch({"x": pa.array(range(start, start + size), pa.int64())})
            start += size
        if fail:
            raise ValueError("bad block")

    out = list(filesystem.coalesce_batches(batches([3, 4, 10, 0, 2, 2, 1], False), 5))
    assert [b.num_rows for b in out] == [7, 10, 5]
    assert pa.Table.from_batches(out)["x"].to_pylist() == list(range(22))

    got = []
    with pytest.raises(ValueError, match="bad block"):
        for b in filesystem.coalesce_batches(batches([3, 1], True), 5):
            got.append(b.num_rows)
    assert got == [4]

    closed = []

    def watched():
        try:
            yield from batches([5, 5, 5], False)
        finally:
            closed.append(True)

    joined = filesystem.coalesce_batches(watched(), 5)
    assert next(joined).num_rows == 5
    joined.close()
    assert closed == [True]
