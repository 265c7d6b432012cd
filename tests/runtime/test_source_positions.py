"""Replayable sources: a reader that seeks to a recorded position gives exactly the rows that
followed it, so a restored job neither repeats nor skips input."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from clink.runtime.connectors.base import ConnectorRegistry, TableSpec
from clink.runtime.connectors.datagen import DatagenReader
from clink.runtime.connectors.filesystem import FileSourceReader
from clink.runtime.context import RuntimeContext

SCHEMA = pa.schema([pa.field("a", pa.int64()), pa.field("s", pa.string())])
CTX = RuntimeContext(connectors=ConnectorRegistry())


def drain(reader) -> list[dict]:
    rows = []
    while not reader.finished:
        batch = reader.poll()
        if batch is not None:
            rows.extend(batch.to_pylist())
    return rows


def read_with_restart(make, cut_after_polls: int) -> list[dict]:
    first = make()
    rows = []
    for _ in range(cut_after_polls):
        batch = first.poll()
        if batch is not None:
            rows.extend(batch.to_pylist())
    position = first.position()
    first.close()
    second = make()
    second.seek(position)
    return rows + drain(second)


@settings(max_examples=25, deadline=None)
@given(cut=st.integers(0, 12), batch_size=st.integers(1, 40))
def test_datagen_resumes_exactly(cut: int, batch_size: int) -> None:
    spec = TableSpec(name="t", schema=SCHEMA, table_schema=SCHEMA,
                     options={"number-of-rows": "157", "seed": "4", "batch-size": str(batch_size)})
    make = lambda: DatagenReader(spec, CTX)  # noqa: E731
    assert read_with_restart(make, cut) == drain(make())


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_files_resume_exactly(tmp_path: Path, fmt: str) -> None:
    table = pa.table({"a": pa.array(range(5000), pa.int64()), "s": pa.array([f"v{i}" for i in range(5000)])})
    folder = tmp_path / "in"
    folder.mkdir()
    for part in range(3):
        chunk = table.slice(part * 1700, 1700)
        if fmt == "csv":
            pa_csv.write_csv(chunk, folder / f"part-{part}.csv",
                             write_options=pa_csv.WriteOptions(include_header=False))
        else:
            pq.write_table(chunk, folder / f"part-{part}.parquet", row_group_size=300)
    spec = TableSpec(name="t", schema=SCHEMA, table_schema=SCHEMA, options={"path": str(folder), "format": fmt})
    make = lambda: FileSourceReader(spec, CTX)  # noqa: E731
    expected = drain(make())
    assert len(expected) == 5000
    for cut in (0, 1, 2, 3, 5):
        assert read_with_restart(make, cut) == expected
