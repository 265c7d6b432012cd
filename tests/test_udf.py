"""Python scalar UDFs: registration from Python and from SQL, typing, NULLs, errors, compiled modules."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import clink
from clink.errors import PipelineError, SqlError, UsageError
from clink.runtime.context import RuntimeContext
from clink.runtime.udf import FunctionRegistry

ROWS = [{"id": i, "s": s, "x": x} for i, (s, x) in enumerate(
    [("banana", 1.5), (None, 2.0), ("apple", None), ("cherry", -3.25), ("", 10.0)])]


def push_sql(query: str) -> str:
    return "CREATE TABLE t (id BIGINT, s STRING, x DOUBLE) WITH ('connector' = 'push');\n" + query


def run(query: str, rows=ROWS, **kwargs) -> list[dict]:
    job = clink.compile(push_sql(query), name="q.sql", **kwargs).start()
    job.push("t", rows)
    job.run_until_idle()
    return job.poll().to_pylist()


@clink.udf
def count_a(s: str) -> int:
    return None if s is None else s.count("a")


@clink.udf(returns="DOUBLE", vectorized=True)
def scaled(x, factor):
    return pc.multiply(x, factor)


def test_row_wise_udf_in_select_and_where_matches_python() -> None:
    out = run("SELECT id, count_a(s) AS n FROM t WHERE count_a(s) > 0", functions=[count_a])
    expected = [{"id": r["id"], "n": r["s"].count("a")} for r in ROWS if r["s"] and r["s"].count("a") > 0]
    assert out == expected


def test_vectorized_udf_in_select_and_where_matches_pyarrow() -> None:
    out = run("SELECT id, scaled(x, 2.0) AS y FROM t WHERE scaled(x, 1.0) > 0", functions=[scaled])
    xs = pa.array([r["x"] for r in ROWS], pa.float64())
    keep = pc.fill_null(pc.greater(xs, 0), False)
    expected = pc.multiply(xs, 2.0).filter(keep).to_pylist()
    assert [r["y"] for r in out] == expected


def test_row_wise_udf_gets_none_for_null() -> None:
    seen = []

    @clink.udf(returns="STRING")
    def show(s):
        seen.append(s)
        return "null" if s is None else s

    out = run("SELECT show(s) AS v FROM t", functions=[show])
    assert None in seen
    assert [r["v"] for r in out] == ["null" if r["s"] is None else r["s"] for r in ROWS]


def test_return_type_from_annotations_and_from_returns() -> None:
    def f(a: int, b: float, c: str, d: bool, e: bytes, g: dt.date, h: dt.datetime, k: decimal.Decimal) -> str | None:
        return None

    u = clink.udf(f)
    assert u.returns == "STRING"
    assert u.arg_types == ("BIGINT", "DOUBLE", "STRING", "BOOLEAN", "BYTES", "DATE", "TIMESTAMP(6)", "DECIMAL(38, 18)")
    assert clink.udf(f, returns="INT").returns == "INT"
    with pytest.raises(UsageError, match="returns="):
        clink.udf(lambda x: x, name="ident")
    schema = clink.compile(push_sql("SELECT count_a(s) AS n, scaled(x, 2.0) AS y FROM t"),
                           functions=[count_a, scaled]).runtime_plan.sinks[0].schema
    assert schema.field("n").type == pa.int64() and schema.field("y").type == pa.float64()


def test_annotated_argument_types_are_checked_at_bind_time() -> None:
    with pytest.raises(SqlError, match="argument 1 of count_a must be STRING, got BIGINT") as info:
        clink.compile(push_sql("SELECT count_a(id) FROM t"), name="q.sql", functions=[count_a])
    assert str(info.value.span) == "q.sql:2:16"
    with pytest.raises(SqlError, match="takes 1 argument, got 2"):
        clink.compile(push_sql("SELECT count_a(s, s) FROM t"), functions=[count_a])


def test_unknown_function_suggests_registered_udf() -> None:
    with pytest.raises(SqlError, match="unknown function COUNT_B") as info:
        clink.compile(push_sql("SELECT count_b(s) FROM t"), functions=[count_a])
    assert "COUNT_A" in (info.value.hint or "")


def test_udf_through_runtime_context_and_sql() -> None:
    ctx = RuntimeContext(functions=FunctionRegistry.of([count_a]))
    sql = ("CREATE TABLE t (s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
           "'fields.s.length' = '5'); SELECT s, count_a(s) AS n FROM t")
    rows = clink.sql(sql, context=ctx).to_pylist()
    assert [r["n"] for r in rows] == [r["s"].count("a") for r in rows]


def test_exception_in_udf_is_a_pipeline_error_with_function_row_and_position() -> None:
    @clink.udf(returns="BIGINT")
    def boom(s):
        if s == "apple":
            raise ValueError("no apples")
        return 1

    with pytest.raises(PipelineError) as info:
        run("SELECT id,\n  boom(s) AS b FROM t", functions=[boom])
    message = str(info.value)
    assert "function boom raised ValueError: no apples" in message
    assert "row 2 of the batch, arguments ('apple')" in message
    assert info.value.where.startswith("q.sql:3:3")


def test_vectorized_udf_with_wrong_length_or_type_is_a_clear_error() -> None:
    short = clink.udf(lambda x: x.slice(1), returns="DOUBLE", vectorized=True, name="short")
    with pytest.raises(PipelineError, match="function short returned 4 values for a batch of 5 rows"):
        run("SELECT short(x) FROM t", functions=[short])
    wrong = clink.udf(lambda x: ["a"] * len(x), returns="DOUBLE", vectorized=True, name="wrong")
    with pytest.raises(PipelineError, match="function wrong returned"):
        run("SELECT wrong(x) FROM t", functions=[wrong])


def test_udf_result_feeds_a_window_aggregate() -> None:
    @clink.udf(returns="BIGINT")
    def tens(v):
        return v * 10

    sql = ("CREATE TABLE e (v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'push');\n"
           "SELECT window_start, SUM(tens(v)) AS total FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
           "GROUP BY window_start, window_end")
    job = clink.compile(sql, functions=[tens]).start()
    base = dt.datetime(2024, 1, 1)
    job.push("e", [{"v": v, "ts": base + dt.timedelta(seconds=20 * v)} for v in range(1, 6)])
    job.close_input("e")
    job.run_until_idle()
    rows = []
    while (batch := job.poll()) is not None:
        rows += batch.to_pylist()
    # Seconds 20, 40 | 60, 80, 100: per minute, the sum of ten times v.
    assert [r["total"] for r in rows] == [10 * (1 + 2), 10 * (3 + 4 + 5)]


@pytest.fixture
def udf_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "udfpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "strings.py").write_text(textwrap.dedent("""
        import clink
        import pyarrow.compute as pc

        @clink.udf(returns="BIGINT")
        def count_char(s, c):
            return None if s is None else s.count(c)

        @clink.udf(returns="STRING", vectorized=True)
        def shout(s):
            return pc.utf8_upper(s)

        def plain(s: str) -> int:
            return len(s or "")

        NOT_A_FUNCTION = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


CREATE = ("CREATE TEMPORARY FUNCTION count_char AS 'udfpkg.strings.count_char' LANGUAGE PYTHON;\n"
          "CREATE FUNCTION shout AS 'udfpkg.strings.shout' LANGUAGE PYTHON;\n"
          "CREATE FUNCTION plain AS 'udfpkg.strings.plain';\n")


def test_create_function_from_sql(udf_package: Path) -> None:
    out = run(CREATE + "SELECT count_char(s, 'a') AS n, shout(s) AS u, plain(s) AS p FROM t")
    assert out == [{"n": None if r["s"] is None else r["s"].count("a"),
                    "u": None if r["s"] is None else r["s"].upper(),
                    "p": len(r["s"] or "")} for r in ROWS]
    source = clink.compile(push_sql(CREATE + "SELECT count_char(s, 'a') FROM t"), name="q.sql").source
    assert "UDF_COUNT_CHAR = U.import_function('udfpkg.strings', 'count_char', name='count_char')  # q.sql:2:1" \
        in source


@pytest.mark.parametrize(("path", "message", "hint"), [
    ("nopkg.mod.f", "cannot import module 'nopkg.mod'", "nopkg.mod.f"),
    ("udfpkg.strings.count_chr", "'udfpkg.strings' has no attribute 'count_chr'", "udfpkg.strings.count_char"),
    ("udfpkg.strings.NOT_A_FUNCTION", "is a int, not a function", "clink.udf"),
    ("count_char", "not a dotted path", "module"),
])
def test_create_function_errors_are_positioned(udf_package: Path, path: str, message: str, hint: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(f"CREATE FUNCTION f AS '{path}' LANGUAGE PYTHON", name="f.sql")
    assert str(info.value.span) == "f.sql:1:22"
    assert hint in (info.value.hint or "")


def test_create_function_rejects_other_languages_and_builtin_names(udf_package: Path) -> None:
    with pytest.raises(SqlError, match="JAVA are not supported"):
        clink.compile("CREATE FUNCTION f AS 'udfpkg.strings.plain' LANGUAGE JAVA")
    with pytest.raises(SqlError, match="UPPER is a built-in function"):
        clink.compile("CREATE FUNCTION UPPER AS 'udfpkg.strings.plain' LANGUAGE PYTHON")


def test_compiled_module_imports_the_function_by_path_in_a_fresh_process(udf_package: Path, tmp_path: Path) -> None:
    sql_file = tmp_path / "p.sql"
    sql_file.write_text(
        CREATE + "CREATE TABLE src (s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '4', "
        "'fields.s.length' = '6');\n"
        "CREATE TABLE out (s STRING, n BIGINT, u STRING) WITH ('connector' = 'filesystem', 'path' = "
        f"'{tmp_path / 'out'}', 'format' = 'csv');\n"
        "INSERT INTO out SELECT s, count_char(s, 'a'), shout(s) FROM src;\n")
    module = tmp_path / "plan.py"
    done = subprocess.run([sys.executable, "-m", "clink", "compile", str(sql_file), "-o", str(module)], check=False,
                          capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(udf_package), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "U.import_function('udfpkg.strings', 'shout'" in module.read_text()
    script = ("import sys\nfrom clink.runtime.loader import load_plan_file\n"
              "from clink.runtime.executor import run_plan\nfrom clink.runtime.context import RuntimeContext\n"
              f"run_plan(load_plan_file({str(module)!r}), RuntimeContext())\n"
              "print(any(m.startswith('clink.compiler') for m in sys.modules))\n")
    ran = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                         env={"PYTHONPATH": str(udf_package), "PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"
    out = tmp_path / "out"
    written = out.read_text() if out.is_file() else "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    lines = list(csv.reader(io.StringIO(written)))
    assert len(lines) == 4
    assert all(int(n) == s.count("a") and u == s.upper() for s, n, u in lines)
