"""``clink run/compile/explain -i ddl.sql q.sql``: declarations shared by several pipeline files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import clink
from clink.cli import main
from clink.errors import UsageError
from clink.runtime.context import RuntimeContext

DDL = """CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '6',
  'fields.k.kind' = 'sequence', 'fields.k.start' = '1', 'fields.k.end' = '6');
CREATE VIEW odd AS SELECT k, v FROM t WHERE k % 2 = 1;
SET 'pipeline.max-parallelism' = '64';
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    ddl = tmp_path / "ddl.sql"
    ddl.write_text(DDL)
    query = tmp_path / "q.sql"
    query.write_text("SELECT k FROM odd;\n")
    return ddl, query


def test_run_reads_the_init_script_first(files, capsys: pytest.CaptureFixture[str]) -> None:
    ddl, query = files
    assert main(["run", "--recompile", "-i", str(ddl), str(query)]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("+I")] == [
        "+I[1]", "+I[3]", "+I[5]"]


def test_an_error_in_the_query_points_into_its_own_file(files, capsys: pytest.CaptureFixture[str]) -> None:
    ddl, query = files
    query.write_text("SELECT k FROM od;\n")
    assert main(["explain", "-i", str(ddl), str(query)]) == 2
    err = capsys.readouterr().err
    assert "q.sql:1:15: error: unknown table 'od'" in err and "did you mean 'odd'?" in err


def test_an_error_in_the_init_script_points_into_it(files, capsys: pytest.CaptureFixture[str]) -> None:
    ddl, query = files
    ddl.write_text(DDL.replace("k % 2", "kk % 2"))
    assert main(["compile", "-i", str(ddl), str(query)]) == 2
    err = capsys.readouterr().err
    assert "ddl.sql:3:45: error: unknown column 'kk'" in err and " 3 | CREATE VIEW odd" in err


def test_an_init_script_holds_declarations_only(files, capsys: pytest.CaptureFixture[str]) -> None:
    ddl, query = files
    ddl.write_text(DDL + "SELECT 1 FROM t;\n")
    assert main(["run", "-i", str(ddl), str(query)]) == 2
    err = capsys.readouterr().err
    assert "ddl.sql:5:1: error: an init script may only declare tables, views and functions and SET options" in err


def test_a_missing_init_script_is_a_usage_error(files, capsys: pytest.CaptureFixture[str]) -> None:
    _, query = files
    assert main(["run", "-i", "nope.sql", str(query)]) == 2
    assert "no such file: nope.sql" in capsys.readouterr().err


def test_compiled_plans_take_no_init_script(files, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddl, query = files
    artefact = tmp_path / "q.clk"
    assert main(["compile", "-i", str(ddl), str(query), "-o", str(artefact)]) == 0
    capsys.readouterr()
    assert main(["run", "-i", str(ddl), str(artefact)]) == 2
    assert "--init applies to SQL files" in capsys.readouterr().err
    assert main(["run", str(artefact)]) == 0
    assert "+I[5]" in capsys.readouterr().out


def test_python_api_takes_init_files(files) -> None:
    ddl, query = files
    table = clink.sql(query.read_text(), init=[ddl], context=RuntimeContext(stdout=io.StringIO())).to_arrow()
    assert table.column("k").to_pylist() == [1, 3, 5]
    assert clink.compile(query.read_text(), init=[ddl]).runtime_plan.config["pipeline.max-parallelism"] == "64"
    with pytest.raises(UsageError, match="no such init script"):
        clink.compile("SELECT 1", init=["missing.sql"])
