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
    ("SHOW CREATE VIEW cheap;", "SHOW CREATE VIEW is not supported yet"),
    ("RESET 'parallelism.defaults';", "unknown setting 'parallelism.defaults'"),
])
def test_mistakes_are_refused_where_written(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(DDL + text)
    assert info.value.span is not None and info.value.span.line == 4
