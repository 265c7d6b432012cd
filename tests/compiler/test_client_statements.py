"""What a SQL client user types to look around (SHOW, DESCRIBE, SHOW CREATE TABLE, RESET,
EXPLAIN PLAN FOR): answered as rows of a query, refused with a position when wrong."""

from __future__ import annotations

import pytest

import clink
from clink.errors import SqlError

DDL = ("CREATE TABLE Bid (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, cost AS price * 2, "
       "WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND, PRIMARY KEY (item) NOT ENFORCED) "
       "WITH ('connector' = 'datagen', 'number-of-rows' = '3');\n"
       "CREATE TABLE Out (item STRING, n BIGINT) WITH ('connector' = 'blackhole');\n"
       "CREATE VIEW cheap AS SELECT item, price FROM Bid WHERE price < 10;\n")


def _rows(text: str) -> list[tuple]:
    return [tuple(r.values()) for r in clink.sql(DDL + text).to_arrow().to_pylist()]


def test_show_lists_tables_views_and_functions() -> None:
    assert _rows("SHOW TABLES;") == [("Bid",), ("Out",)]
    assert _rows("SHOW VIEWS;") == [("cheap",)]
    functions = [name for (name,) in _rows("SHOW FUNCTIONS;")]
    assert {"UPPER", "COUNT", "TUMBLE", "CARDINALITY", "ROW"} <= set(functions) and functions == sorted(functions)
    assert clink.sql("SHOW VIEWS;").to_arrow().num_rows == 0


def test_one_catalog_and_one_database_named_as_flinks_defaults() -> None:
    assert clink.sql("SHOW CATALOGS;").to_arrow().to_pylist() == [{"catalog name": "default_catalog"}]
    assert clink.sql("SHOW DATABASES;").to_arrow().to_pylist() == [{"database name": "default_database"}]
    assert _rows("SHOW CURRENT CATALOG;") == [("default_catalog",)]
    assert _rows("USE CATALOG default_catalog;\nUSE default_database;\nSHOW CURRENT DATABASE;") == [
        ("default_database",)]
    # The words stay usable as names.
    assert _rows("SELECT 1 AS catalog, 2 AS `database`, 3 AS use;") == [(1, 2, 3)]
    for text, message, col in (("USE db1;", "database 'db1' does not exist: clink has one catalog", 1),
                               ("USE CATALOG hive;", "catalog 'hive' does not exist", 1),
                               ("CREATE CATALOG c WITH ('type' = 'hive');", "CREATE CATALOG c: clink has one catalog",
                                1)):
        with pytest.raises(SqlError, match=message) as exc:
            clink.sql(DDL + text)
        assert exc.value.span is not None and exc.value.span.line == 4 and exc.value.span.col == col


def test_describe_shows_flinks_columns() -> None:
    table = clink.sql(DDL + "DESCRIBE Bid;").to_arrow()
    assert table.column_names == ["name", "type", "null", "key", "extras", "watermark"]
    assert [tuple(r.values()) for r in table.to_pylist()] == [
        ("bidtime", "TIMESTAMP(3) *ROWTIME*", True, None, None, "(bidtime - INTERVAL '1' SECOND)"),
        ("price", "DECIMAL(10, 2)", True, None, None, None),
        ("item", "STRING", False, "PRI(item)", None, None),  # a PRIMARY KEY column is NOT NULL
        ("cost", "DECIMAL(21, 2)", True, None, "AS (price * 2)", None),
    ]
    assert _rows("DESC cheap;") == [("item", "STRING", False, None, None, None),
                                    ("price", "DECIMAL(10, 2)", True, None, None, None)]


def test_show_create_table_gives_ddl_that_declares_the_same_table() -> None:
    (ddl,) = _rows("SHOW CREATE TABLE Bid;")[0]
    again = ddl.replace("`Bid`", "`Bid2`") + ";\nDESCRIBE Bid2;"
    assert [tuple(r.values()) for r in clink.sql(again).to_arrow().to_pylist()] == _rows("DESCRIBE Bid;")


def test_show_create_view_gives_the_statement_as_written() -> None:
    assert _rows("SHOW CREATE VIEW cheap;") == [("CREATE VIEW cheap AS SELECT item, price FROM Bid WHERE price < 10",)]


def test_reset_takes_settings_back_to_their_defaults() -> None:
    plan = clink.compile("SET 'parallelism.default' = '3';\nSET 'table.exec.state.ttl' = '1 h';\n"
                         "RESET 'parallelism.default';\nSELECT 1;")
    assert plan.runtime_plan.config == {"table.exec.state.ttl": "1 h"}
    plan = clink.compile("SET 'parallelism.default' = '3';\nRESET;\nSELECT 1;")
    assert plan.runtime_plan.config == {}


def test_explain_plan_for_is_explain() -> None:
    assert clink.compile("EXPLAIN PLAN FOR SELECT 1;").explain() == clink.compile("EXPLAIN SELECT 1;").explain()


@pytest.mark.parametrize(("text", "message"), [
    ("DESCRIBE Bids;", "unknown table 'Bids'"),
    ("SHOW CREATE VIEW Bid;", "'Bid' is a table"),
    ("SHOW CREATE TABLE cheap;", "'cheap' is a view"),
    ("RESET 'parallelism.defaults';", "unknown setting 'parallelism.defaults'"),
])
def test_mistakes_are_refused_where_written(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(DDL + text)
    assert info.value.span is not None and info.value.span.line == 4


SOURCE = ("CREATE TABLE src (k INT, v STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
          "'fields.k.kind' = 'sequence', 'fields.k.start' = '1', 'fields.k.end' = '3');\n")


def _csv_rows(folder) -> list[list[str]]:
    import csv

    return sorted(row for path in sorted(folder.iterdir()) if path.name.startswith("part-")
                  for row in csv.reader(path.open()))


def test_create_table_as_declares_the_querys_columns_and_fills_the_table(tmp_path) -> None:
    out = tmp_path / "out"
    script = (SOURCE + f"CREATE TABLE t WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv') "
              "AS SELECT k * 10 AS k10, CAST(k AS STRING) AS s FROM src WHERE k > 1;\nDESCRIBE t;")
    described = [tuple(r.values())[:3] for r in clink.sql(script).to_arrow().to_pylist()]
    assert described == [("k10", "INT", True), ("s", "STRING", True)]
    assert _csv_rows(out) == [["20", "2"], ["30", "3"]]


def test_a_statement_set_runs_its_inserts_together(tmp_path) -> None:
    """Flink's EXECUTE STATEMENT SET BEGIN ... END, and the SQL client's BEGIN STATEMENT SET; ... END;."""
    for begin, end in (("EXECUTE STATEMENT SET BEGIN\n", "END;"), ("BEGIN STATEMENT SET;\n", "END;")):
        a, b = tmp_path / f"a{len(begin)}", tmp_path / f"b{len(begin)}"
        script = (SOURCE + f"CREATE TABLE a (k INT) WITH ('connector' = 'filesystem', 'path' = '{a}/', 'format' = 'csv');\n"
                  f"CREATE TABLE b (k INT) WITH ('connector' = 'filesystem', 'path' = '{b}/', 'format' = 'csv');\n"
                  f"{begin}INSERT INTO a SELECT k FROM src;\nINSERT INTO b SELECT k + 1 FROM src;\n{end}")
        clink.sql(script).run()
        assert _csv_rows(a) == [["1"], ["2"], ["3"]] and _csv_rows(b) == [["2"], ["3"], ["4"]]


@pytest.mark.parametrize(("text", "message"), [
    ("BEGIN STATEMENT SET;\nSELECT 1;\nEND;", "a statement set holds INSERT statements only"),
    ("END;", "END without BEGIN STATEMENT SET"),
    ("BEGIN STATEMENT SET;\nINSERT INTO Out SELECT item, 1 FROM Bid;", "BEGIN STATEMENT SET without END"),
    ("CREATE TABLE Out WITH ('connector' = 'blackhole') AS SELECT 1 AS x;", "table or view 'Out' already exists"),
])
def test_statement_mistakes_are_refused(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message):
        clink.compile(DDL + text)


def test_create_table_like_starts_from_another_tables_declaration() -> None:
    """Flink's default LIKE: the source's columns, watermark, key and options, then the new
    columns; the new options override."""
    text = DDL + ("CREATE TABLE Bid2 (doubled AS price * 2) WITH ('number-of-rows' = '5') LIKE Bid;\n"
                  "DESCRIBE Bid2;")
    rows = [tuple(r.values()) for r in clink.sql(text).to_arrow().to_pylist()]
    assert rows == _rows("DESCRIBE Bid;") + [("doubled", "DECIMAL(21, 2)", True, None, "AS (price * 2)", None)]
    (ddl,) = [tuple(r.values()) for r in clink.sql(text.replace("DESCRIBE Bid2;", "SHOW CREATE TABLE Bid2;"))
              .to_arrow().to_pylist()][0]
    assert "'number-of-rows' = '5'" in ddl and "'connector' = 'datagen'" in ddl and "WATERMARK FOR `bidtime`" in ddl


@pytest.mark.parametrize(("text", "message"), [
    ("CREATE TABLE t2 WITH ('connector' = 'blackhole') LIKE Nope;", "LIKE Nope: no table of that name"),
    ("CREATE TABLE t3 WITH ('connector' = 'blackhole');", "table 't3' declares no column"),
])
def test_bad_likes_are_refused(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message):
        clink.compile(DDL + text)
