"""PARTITIONED BY on a filesystem sink: one Hive-style directory per partition value, the
partition columns kept out of the files, and the same exactly-once commit as an unpartitioned
directory, across a crash and a restart."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

import clink
from clink.errors import ConnectorError, SqlError
from clink.runtime.connectors.filesystem import DEFAULT_PARTITION, escape_partition_text, partition_groups
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

ROWS = [
    (1, "2024-01-01", "10:00", 1.5),
    (2, "2024-01-01", "10:00", 2.5),
    (3, "2024-01-01", "11:00", None),
    (4, "2024-01-02", "10:00", 4.0),
    (5, None, "10:00", 5.0),
    (6, "", "12:00", 6.0),
    (7, "a/b=c d", "x%y", 7.0),
    (8, "2024-01-02", None, 8.0),
    (9, "2024-01-01", "10:00", 9.5),
]
SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("hm", pa.string()), ("v", pa.float64())])


def write_rows(tmp_path: Path, fmt: str, rows: list[tuple] = ROWS) -> Path:
    """Run INSERT INTO a partitioned table from a CSV file holding ``rows``; returns its directory."""
    source = tmp_path / "in.json"
    source.write_text("".join(json.dumps(dict(zip(SCHEMA.names, r, strict=True))) + "\n" for r in rows))
    out = tmp_path / "out"
    sql = f"""
    CREATE TABLE src (id BIGINT, dt STRING, hm STRING, v DOUBLE)
    WITH ('connector' = 'filesystem', 'path' = '{source}', 'format' = 'json');
    CREATE TABLE sink (id BIGINT, dt STRING, hm STRING, v DOUBLE) PARTITIONED BY (dt, hm)
    WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = '{fmt}');
    INSERT INTO sink SELECT * FROM src;
    """
    plan = clink.compile(sql, name="part.sql").runtime_plan
    Job(plan, RuntimeContext(config={}, stdout=io.StringIO())).run()
    return out


def read_file(path: Path, schema: pa.Schema) -> pa.Table:
    if path.suffix == ".csv":
        return pa_csv.read_csv(path, read_options=pa_csv.ReadOptions(column_names=schema.names),
                               convert_options=pa_csv.ConvertOptions(
                                   column_types=schema, strings_can_be_null=True, null_values=[""]))
    if path.suffix == ".json":
        return pa.Table.from_pylist([json.loads(line) for line in path.read_text().splitlines()], schema=schema)
    return pq.read_table(path)


FILE_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64())])


def read_partitioned(out: Path, columns: tuple[str, ...] = ("dt", "hm")) -> Counter:
    """Every committed row, with the partition values read back from the directory names."""
    file_schema = FILE_SCHEMA
    rows: Counter = Counter()
    for path in out.rglob("part-*"):
        directories = path.relative_to(out).parts[:-1]
        assert [d.split("=", 1)[0] for d in directories] == list(columns)
        values = {}
        for d in directories:
            text = d.split("=", 1)[1]
            values[d.split("=", 1)[0]] = None if text == DEFAULT_PARTITION else unquote(text)
        table = read_file(path, file_schema)
        assert table.schema.names == file_schema.names  # partition columns are not in the files
        for row in table.to_pylist():
            rows[(row["id"], values["dt"], values["hm"], row["v"])] += 1
    return rows


def expected(rows: list[tuple] = ROWS) -> Counter:
    # NULL and the empty string both land in the default partition, which reads back as NULL.
    return Counter((i, dt or None, hm or None, v) for i, dt, hm, v in rows)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_rows_land_in_their_partition_directories(tmp_path: Path, fmt: str) -> None:
    out = write_rows(tmp_path, fmt)
    assert read_partitioned(out) == expected()
    directories = sorted(str(p.relative_to(out)) for p in out.glob("*/*") if p.is_dir())
    assert directories == sorted([
        "dt=2024-01-01/hm=10%3A00", "dt=2024-01-01/hm=11%3A00", "dt=2024-01-02/hm=10%3A00",
        f"dt=2024-01-02/hm={DEFAULT_PARTITION}", f"dt={DEFAULT_PARTITION}/hm=10%3A00",
        f"dt={DEFAULT_PARTITION}/hm=12%3A00", "dt=a%2Fb%3Dc d/hm=x%25y",
    ])
    # One file per partition for a run without checkpoints, and no hidden file left over.
    assert len(list(out.rglob("part-*"))) == len(directories)
    assert not [p for p in out.rglob(".*")]


def test_escaping_follows_hive() -> None:
    assert escape_partition_text("a/b=c:d e%") == "a%2Fb%3Dc%3Ad e%25"
    assert escape_partition_text("x\ny#?*[]{}^'\"\\") == "x%0Ay%23%3F%2A%5B%5D%7B}%5E%27%22%5C"  # "}" is not escaped in Hive either


def test_grouping_is_by_value_combination() -> None:
    batch = pa.RecordBatch.from_pydict({"a": [1, 2, 1, None, 1], "b": ["x", "x", "x", "y", None],
                                        "c": [0, 1, 2, 3, 4]})
    groups = {d: (rows.to_pylist() if rows is not None else None) for d, rows in partition_groups(batch, ("a", "b"))}
    assert groups == {"a=1/b=x": [0, 2], "a=2/b=x": [1], f"a={DEFAULT_PARTITION}/b=y": [3],
                      f"a=1/b={DEFAULT_PARTITION}": [4]}
    single = partition_groups(batch.slice(0, 1), ("a",))
    assert single == [("a=1", None)]


def test_non_string_partition_columns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sql = f"""
    CREATE TABLE src (k BIGINT, day DATE, v BIGINT)
    WITH ('connector' = 'datagen', 'number-of-rows' = '200', 'seed' = '5', 'fields.k.min' = '1', 'fields.k.max' = '3');
    CREATE TABLE sink (day DATE, v BIGINT, k BIGINT) PARTITIONED BY (k)
    WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'parquet');
    INSERT INTO sink SELECT day, v, k FROM src;
    """
    plan = clink.compile(sql, name="part.sql").runtime_plan
    Job(plan, RuntimeContext(config={}, stdout=io.StringIO())).run()
    assert sorted(p.name for p in out.iterdir()) == ["k=1", "k=2", "k=3"]
    total = 0
    for path in out.rglob("part-*"):
        table = pq.read_table(path)
        assert table.schema.names == ["day", "v"]
        total += table.num_rows
    assert total == 200


# ---------------------------------------------------------------- compile-time checks


def compile_error(sql: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        clink.compile(sql, name="part.sql")
    return info.value


def test_a_partition_column_must_be_declared() -> None:
    error = compile_error("CREATE TABLE t (a BIGINT, dt STRING) PARTITIONED BY (dtt) "
                          "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'csv');")
    assert "partition column 'dtt' is not a physical column of 't'" in str(error)
    assert str(error).startswith("part.sql:1:1")
    assert "dt" in (error.hint or "")


def test_every_column_a_partition_is_refused() -> None:
    error = compile_error("CREATE TABLE t (dt STRING) PARTITIONED BY (dt) "
                          "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'csv');")
    assert "every column is a partition column" in str(error)


def test_other_connectors_refuse_partitioned_by() -> None:
    error = compile_error("CREATE TABLE t (a BIGINT, dt STRING) PARTITIONED BY (dt) "
                          "WITH ('connector' = 'blackhole');")
    assert "does not write partitioned tables" in str(error)


def test_nested_partition_columns_are_refused() -> None:
    error = compile_error("CREATE TABLE t (a BIGINT, r ROW<x INT>) PARTITIONED BY (r) "
                          "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'json');")
    assert "partition column 'r'" in str(error)


def test_nested_partition_columns_are_refused_with_the_sql_type() -> None:
    error = compile_error("CREATE TABLE t (a BIGINT, xs ARRAY<INT>) PARTITIONED BY (xs) "
                          "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'json');")
    assert "partition column 'xs' is ARRAY<INT>; a partition value must be a flat value" in str(error)
    assert str(error).startswith("part.sql:1:1")


def test_the_partition_columns_reach_the_sink_typed_not_as_an_option() -> None:
    source = clink.compile("CREATE TABLE s (a BIGINT, dt STRING) WITH ('connector' = 'datagen');\n"
                           "CREATE TABLE t (a BIGINT, dt STRING) PARTITIONED BY (dt) "
                           "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'csv');\n"
                           "INSERT INTO t SELECT a, dt FROM s;").source
    assert "partition_columns=('dt',)," in source and "partitioned-by" not in source


def test_the_writer_refuses_a_partition_column_that_is_not_a_flat_column(tmp_path: Path) -> None:
    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.filesystem import FileSinkWriter

    schema = pa.schema([("v", pa.int64()), ("r", pa.struct([("x", pa.int64())]))])
    for column in ("nope", "r"):
        spec = TableSpec(name="t", schema=schema, table_schema=schema,
                         options={"path": f"{tmp_path}/", "format": "json"}, partition_columns=(column,))
        with pytest.raises(ConnectorError, match=f"partition column '{column}' must be a column of the table"):
            FileSinkWriter(spec, RuntimeContext(config={}, stdout=io.StringIO()))


def test_reading_a_partitioned_table_is_refused_with_a_position() -> None:
    error = compile_error(
        "CREATE TABLE t (a BIGINT, dt STRING) PARTITIONED BY (dt) "
        "WITH ('connector' = 'filesystem', 'path' = 'o/', 'format' = 'csv');\n"
        "CREATE TABLE s (a BIGINT, dt STRING) WITH ('connector' = 'blackhole');\n"
        "INSERT INTO s SELECT a, dt FROM t;")
    assert "reading the partitioned table 't' is not supported yet" in str(error)
    assert str(error).startswith("part.sql:3:")


# ---------------------------------------------------------------- checkpoints and restarts

# Twelve partitions: four auctions, each with two tags and the default partition. Each checkpoint
# commits a part file in each of them (every file and directory fsynced), so more partitions
# would only make the test slower.
CKPT_SQL = """
CREATE TABLE bid (auction BIGINT, price BIGINT, tag STRING)
WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '12', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '4', 'fields.tag.length' = '1');
CREATE TABLE bids_by_auction (price BIGINT, tag STRING, auction BIGINT) PARTITIONED BY (auction, tag)
WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv');
INSERT INTO bids_by_auction
SELECT price, CASE WHEN tag < 'F' THEN NULL WHEN tag < 'a' THEN 'F-Z' ELSE 'a-z' END, auction FROM bid;
"""


def committed(out: Path) -> Counter:
    """Committed rows as (auction directory, tag directory, csv line); hidden files are not visible."""
    rows: Counter = Counter()
    for path in out.rglob("*"):
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(out).parts):
            auction, tag = path.relative_to(out).parts[:2]
            rows.update((auction, tag, line) for line in path.read_text().splitlines())
    return rows


def ckpt_job(out: Path, state: Path | None, every: int | None = None) -> Job:
    plan = clink.compile(CKPT_SQL.format(out=out), name="ckpt.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": str(every)} if every else {}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Counter:
    out = tmp_path_factory.mktemp("reference")
    ckpt_job(out, None).run()
    rows = committed(out)
    assert sum(rows.values()) == 20000
    assert {a for a, _, _ in rows} == {"auction=1", "auction=2", "auction=3", "auction=4"}
    assert any(t == f"tag={DEFAULT_PARTITION}" for _, t, _ in rows)
    return rows


def test_checkpoints_commit_one_part_per_partition(tmp_path: Path, uninterrupted: Counter) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    job = ckpt_job(out, state, every=3000)
    job.run()
    assert committed(out) == uninterrupted
    names = {p.name for p in out.rglob("part-*")}
    assert any(n.startswith("part-00000001-") for n in names)
    assert not [p for p in out.rglob(".*")]


@pytest.mark.parametrize("crash_after_steps", [1, 7, 13, 22])
def test_a_crash_and_restart_writes_each_row_once(tmp_path: Path, uninterrupted: Counter,
                                                   crash_after_steps: int) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    first = ckpt_job(out, state, every=3000)
    for _ in range(crash_after_steps):
        first.step()
    # A crash: nothing is closed, committed or cleaned up; in-progress and pending files stay.
    del first
    resumed = ckpt_job(out, state, every=3000)
    resumed.run()
    assert committed(out) == uninterrupted
    assert not [p for p in out.rglob(".*")]


def test_a_repeated_commit_is_a_no_op(tmp_path: Path) -> None:
    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.filesystem import FileSinkWriter

    schema = pa.schema([("v", pa.int64()), ("p", pa.string())])
    spec = TableSpec(name="t", schema=schema, table_schema=schema,
                     options={"path": f"{tmp_path}/", "format": "csv"}, partition_columns=("p",))
    writer = FileSinkWriter(spec, RuntimeContext(config={}, stdout=io.StringIO()))
    writer.write(pa.RecordBatch.from_pydict({"v": [1, 2, 3], "p": ["a", "b", "a"]}, schema=schema))
    handle = writer.pre_commit(1)
    assert sorted(final for _, final in handle["files"]) == [
        f"p=a/{handle['files'][0][1].split('/')[-1]}", f"p=b/{handle['files'][0][1].split('/')[-1]}"]
    writer.commit(1, handle)
    writer.commit(1, handle)
    writer.recover(1, handle)
    writer.close()
    assert sorted((p.parent.name, p.read_text()) for p in tmp_path.rglob("part-*")) == [
        ("p=a", "1\n3\n"), ("p=b", "2\n")]
