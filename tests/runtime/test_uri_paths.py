"""Paths written as URIs: ``file:///...`` behaves exactly as the local path it names (sources,
sinks with their exactly-once commit, the state directory); other schemes go through
``pyarrow.fs``'s generic API, tested here with a filesystem the context supplies for ``s3``;
an unknown scheme is refused where it is written."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import clink
from clink.errors import ConnectorError, SqlError, UsageError
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.fs import check_location, resolve, scheme_of

ROWS = [{"id": i, "price": i * 1.5, "region": f"r{i % 3}"} for i in range(1, 40)]
SCHEMA = pa.schema([("id", pa.int64()), ("price", pa.float64()), ("region", pa.string())])


def write_input(folder: Path, fmt: str) -> Path:
    """Two files of ROWS in ``folder``, plus a hidden one the source must skip."""
    folder.mkdir(parents=True, exist_ok=True)
    halves = [ROWS[:20], ROWS[20:]]
    for n, rows in enumerate(halves):
        path = folder / f"part-{n}.{fmt}"
        if fmt == "csv":
            path.write_text("".join(f"{r['id']},{r['price']},{r['region']}\n" for r in rows))
        elif fmt == "json":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    (folder / f".hidden.{fmt}").write_text("not,a,row\n")
    return folder


def run(sql: str, **context: object) -> Job:
    plan = clink.compile(sql, name="uri.sql").runtime_plan
    job = Job(plan, RuntimeContext(config={}, stdout=io.StringIO(), **context))  # type: ignore[arg-type]
    job.run()
    return job


def read_csv_rows(folder: Path) -> list[tuple]:
    rows = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def copy_sql(source: str, fmt: str, sink: str) -> str:
    return f"""
    CREATE TABLE src (id BIGINT, price DOUBLE, region STRING)
    WITH ('connector' = 'filesystem', 'path' = '{source}', 'format' = '{fmt}');
    CREATE TABLE out (id BIGINT, price DOUBLE, region STRING)
    WITH ('connector' = 'filesystem', 'path' = '{sink}', 'format' = 'csv');
    INSERT INTO out SELECT * FROM src;
    """


EXPECTED = sorted((r["id"], r["price"], r["region"]) for r in ROWS)


def copied_rows(folder: Path) -> list[tuple]:
    return sorted((int(i), float(p), r) for i, p, r in read_csv_rows(folder))


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_file_uris_read_and_write_like_local_paths(tmp_path: Path, fmt: str) -> None:
    source = write_input(tmp_path / "in", fmt)
    run(copy_sql(source.as_uri(), fmt, (tmp_path / "out").as_uri() + "/"))
    assert copied_rows(tmp_path / "out") == EXPECTED
    # One file named by a file:// URI, and the single-file form Flink spells file:/path.
    run(copy_sql((source / f"part-0.{fmt}").as_uri(), fmt, f"file:{tmp_path}/one/"))
    assert copied_rows(tmp_path / "one") == [e for e in EXPECTED if e[0] <= 20]
    assert not [p for p in (tmp_path / "out").rglob(".*")]


def test_a_file_uri_sink_is_a_directory_of_part_files(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in", "csv")
    out = tmp_path / "out"
    out.mkdir()
    run(copy_sql(source.as_uri(), "csv", out.as_uri()))  # an existing directory, no trailing '/'
    files = [p.name for p in out.iterdir()]
    assert len(files) == 1 and files[0].startswith("part-") and files[0].endswith(".csv")
    assert copied_rows(out) == EXPECTED


CHECKPOINTED = """
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '12', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '5', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE totals (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO totals
SELECT auction, window_start, COUNT(*), MAX(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, auction;
"""


def checkpointed_job(out: str, state: str | None, **context: object) -> Job:
    plan = clink.compile(CHECKPOINTED.format(out=out), name="ckpt.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "3000"} if state else {}
    ctx = RuntimeContext(config=config, state_dir=state, stdout=io.StringIO(),  # type: ignore[arg-type]
                         **context)
    return Job(plan, ctx)


@pytest.fixture(scope="module")
def expected_totals(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("reference")
    checkpointed_job(f"{out}/", None).run()
    rows = read_csv_rows(out)
    assert len(rows) > 50
    return rows


@pytest.mark.parametrize("crash_after_steps", [7, 22])
def test_a_file_uri_state_dir_checkpoints_and_restores(tmp_path: Path, expected_totals: list[tuple],
                                                       crash_after_steps: int) -> None:
    out, state = (tmp_path / "out").as_uri() + "/", (tmp_path / "state").as_uri()
    first = checkpointed_job(out, state)
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints >= 1
    assert first.ctx.state_dir == tmp_path / "state"
    del first  # a crash: nothing closed, committed or cleaned up
    resumed = checkpointed_job(out, state)
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected_totals
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    assert sorted(p.name for p in (tmp_path / "state" / "checkpoints").iterdir())


def test_a_filesystem_from_the_context_reads_writes_and_commits_exactly_once(
        tmp_path: Path, expected_totals: list[tuple]) -> None:
    """``s3://`` served by a filesystem the context gives (here a local subtree): listing,
    reading, writing and the sink's moves go through ``pyarrow.fs``, not ``os``."""
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    s3 = pafs.SubTreeFileSystem(str(bucket), pafs.LocalFileSystem())
    assert resolve("s3://data/out/", {"s3": s3}).arrow is s3
    # A source over a directory tree and a sink into another.
    for fmt in ("csv", "json", "parquet"):
        write_input(bucket / "in" / fmt / "sub", fmt)
        run(copy_sql(f"s3://in/{fmt}", fmt, f"s3://copies/{fmt}/"), filesystems={"s3": s3})
        assert copied_rows(bucket / "copies" / fmt) == EXPECTED
    # The exactly-once sink across a crash, state kept locally.
    state = tmp_path / "state"
    first = checkpointed_job("s3://totals/", str(state), filesystems={"s3": s3})
    for _ in range(13):
        first.step()
    assert first.metrics.checkpoints >= 1
    del first
    checkpointed_job("s3://totals/", str(state), filesystems={"s3": s3}).run()
    assert read_csv_rows(bucket / "totals") == expected_totals
    assert not [p for p in (bucket / "totals").iterdir() if p.name.startswith(".")]


def test_a_missing_file_uri_says_which(tmp_path: Path) -> None:
    missing = (tmp_path / "nothing.csv").as_uri()
    with pytest.raises(ConnectorError, match="no such file or directory: 'file:///"):
        run(copy_sql(missing, "csv", f"{tmp_path}/out/"))


@pytest.mark.parametrize(("path", "message"), [
    ("foo://bucket/x.csv", "unknown filesystem 'foo://'"),
    ("file://server/data/x.csv", "names host 'server'"),
])
def test_an_unresolvable_uri_is_refused_at_its_option(path: str, message: str) -> None:
    sql = f"""CREATE TABLE src (id BIGINT)
WITH ('connector' = 'filesystem', 'format' = 'csv',
      'path' = '{path}');
CREATE TABLE out (id BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO out SELECT * FROM src;
"""
    with pytest.raises(SqlError, match=message) as refused:
        clink.compile(sql, name="uri.sql")
    span = refused.value.span
    assert (span.file, span.line, span.col) == ("uri.sql", 3, 7)  # the path option


def test_schemes_are_checked_without_io() -> None:
    assert scheme_of("C:/data/x.csv") is None  # a drive letter, not a scheme
    assert scheme_of("S3://b/k") == "s3"
    assert scheme_of("file:/tmp/x") == "file"
    # S3 and GCS are known schemes: checking them makes no filesystem (no network).
    assert check_location("s3://bucket/key") is None
    assert check_location("gs://bucket/key") is None
    assert "unknown filesystem" in (check_location("ftp://host/x") or "")


def test_the_state_dir_must_be_local() -> None:
    assert RuntimeContext(state_dir="file:///tmp/state").state_dir == Path("/tmp/state")
    assert RuntimeContext(state_dir="rel/state").state_dir == Path("rel/state")
    with pytest.raises(UsageError, match="need a local filesystem.*execution.checkpointing.dir"):
        RuntimeContext(state_dir="s3://bucket/state")
    with pytest.raises(UsageError, match="unknown filesystem"):
        RuntimeContext(state_dir="nope://x")


def test_cli_state_dir_and_from_checkpoint_take_file_uris(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.sql"
    pipeline.write_text("SET 'execution.checkpointing.interval-rows' = '3000';\n"
                        + CHECKPOINTED.format(out=f"{(tmp_path / 'out').as_uri()}/"))
    state = (tmp_path / "state").as_uri()

    def clink_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clink", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)

    done = clink_cli("run", str(pipeline), "--state-dir", state, "--stop-with-checkpoint-after", "2")
    assert done.returncode == 0, done.stderr
    checkpoints = sorted((tmp_path / "state" / "checkpoints").iterdir())
    assert checkpoints
    listed = clink_cli("checkpoints", state)
    assert listed.returncode == 0 and "valid" in listed.stdout, listed.stderr
    done = clink_cli("run", str(pipeline), "--from-checkpoint", checkpoints[-1].as_uri())
    assert done.returncode == 0, done.stderr
    assert "resuming from checkpoint" in done.stderr
    refused = clink_cli("run", str(pipeline), "--state-dir", "s3://bucket/state")
    assert refused.returncode == 2
    assert "SET 'execution.checkpointing.dir' = 's3://bucket/state'" in refused.stderr and "Traceback" not in refused.stderr
