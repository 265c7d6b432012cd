"""Helpers for tests: run a query over in-memory Arrow tables.

``run_select("SELECT a + 1 AS b FROM t", t=table)`` declares each table as a Parquet file in a
temporary directory (so the data goes through a real connector), runs the query, and returns
its rows as a ``pyarrow.Table``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from clink.runtime.context import RuntimeContext


def sql_type(t: pa.DataType) -> str:
    """The SQL spelling of an Arrow type, as a CREATE TABLE column type."""
    from clink.compiler.types import sql_name

    return sql_name(t).replace("DECIMAL(", "DECIMAL(").replace("INTERVAL DAY TO SECOND", "BIGINT")


def table_ddl(name: str, table: pa.Table | pa.Schema, path: str | Path, fmt: str = "parquet",
              watermark: str | None = None) -> str:
    """CREATE TABLE for ``table`` stored at ``path``; ``watermark`` is a WATERMARK clause's
    ``FOR col AS expr`` part, e.g. ``"ts AS ts - INTERVAL '1' SECOND"``."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    columns = [f"`{f.name}` {sql_type(f.type)}{'' if f.nullable else ' NOT NULL'}" for f in schema]
    if watermark:
        columns.append(f"WATERMARK FOR {watermark}")
    body = ",\n  ".join(columns)
    return (f"CREATE TABLE `{name}` (\n  {body}\n) WITH ('connector' = 'filesystem', "
            f"'path' = '{path}', 'format' = '{fmt}')")


def run_select(query: str, *, context: RuntimeContext | None = None, watermarks: dict[str, str] | None = None,
               row_group_size: int | None = None, **tables: pa.Table) -> pa.Table:
    """Run one ``SELECT`` over ``tables`` (name → Arrow table) and return its rows.

    ``watermarks`` gives tables event time (name → ``"ts AS ts - INTERVAL '1' SECOND"``);
    ``row_group_size`` sets how many rows the source reads at a time (so, watermark steps).
    """
    from clink.api import sql

    with tempfile.TemporaryDirectory(prefix="clink-test-") as tmp:
        ddl = []
        for name, table in tables.items():
            path = Path(tmp) / f"{name}.parquet"
            pq.write_table(table, path, row_group_size=row_group_size)
            ddl.append(table_ddl(name, table, path, watermark=(watermarks or {}).get(name)))
        script = ";\n".join([*ddl, query])
        return sql(script, context=context, name="test.sql").to_arrow()
