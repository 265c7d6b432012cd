"""Helpers for tests: run a query over in-memory Arrow tables, and run a pipeline's test cases.

``run_select("SELECT a + 1 AS b FROM t", t=table)`` declares each table as a Parquet file in a
temporary directory (so the data goes through a real connector), runs the query, and returns
its rows as a ``pyarrow.Table``.

``cases("pipeline.sql", "cases.yaml")`` gives the cases of a case file (docs/testing.md) for
``pytest.mark.parametrize``; ``case.check()`` fails with the same difference ``clink test``
prints. This module is also a pytest plugin (entry point ``pytest11``, installed with
``clink[testing]``): it collects ``*.clink.yaml`` / ``*.clink.json`` files, each case one test.
It loads on every pytest run, so it imports nothing heavy until such a file is collected.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from clink._cases import Case, Outcome
    from clink.runtime.context import RuntimeContext
    from clink.runtime.plan import Plan as RuntimePlan


def sql_type(t: pa.DataType) -> str:
    """The SQL spelling of an Arrow type, as a CREATE TABLE column type."""
    from clink.compiler.types import sql_name

    return sql_name(t).replace("DECIMAL(", "DECIMAL(").replace("INTERVAL DAY TO SECOND", "BIGINT")


def table_ddl(name: str, table: pa.Table | pa.Schema, path: str | Path, fmt: str = "parquet",
              watermark: str | None = None) -> str:
    """CREATE TABLE for ``table`` stored at ``path``; ``watermark`` is a WATERMARK clause's
    ``FOR col AS expr`` part, e.g. ``"ts AS ts - INTERVAL '1' SECOND"``."""
    import pyarrow as pa

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
    import pyarrow.parquet as pq

    from clink.api import sql

    with tempfile.TemporaryDirectory(prefix="clink-test-") as tmp:
        ddl = []
        for name, table in tables.items():
            path = Path(tmp) / f"{name}.parquet"
            pq.write_table(table, path, row_group_size=row_group_size)
            ddl.append(table_ddl(name, table, path, watermark=(watermarks or {}).get(name)))
        script = ";\n".join([*ddl, query])
        return sql(script, context=context, name="test.sql").to_arrow()


# --- pipeline test cases (docs/testing.md) ------------------------------------------------------

#: The file names the pytest plugin collects: a case file named after its pipeline
#: (``orders.clink.yaml`` tests ``orders.sql`` in the same directory, unless it names another
#: with ``pipeline:``).
CASE_FILE_SUFFIXES = (".clink.yaml", ".clink.yml", ".clink.json")

#: Plans compiled in this process, by the pipeline's path and text: the cases of one pipeline
#: share one compile (and later runs hit the plan cache on disk).
_plans: dict[tuple[str, str], RuntimePlan] = {}


class CaseFailed(AssertionError):
    """A case produced other rows than it expects (the message is the difference), or the
    pipeline failed while running it."""


class CaseError(Exception):
    """A case that could not run: a mistake in its case file or in the pipeline's SQL (the message
    shows the place, as ``clink test`` does)."""


class PipelineCase:
    """One case of a case file, with the pipeline it tests: what ``cases()`` gives.

    ``run()`` returns the ``Outcome``; ``check()`` raises ``CaseFailed`` with the difference
    unless the case passes, and ``CaseError`` for a mistake in the case file or the SQL.
    """

    def __init__(self, pipeline: Path, case: Case, sources: dict[str, str]) -> None:
        self.pipeline = pipeline
        self.case = case
        self._sources = sources

    @property
    def name(self) -> str:
        return self.case.name

    def run(self) -> Outcome:
        from clink._cases import pipeline_plan, run_case
        from clink.errors import ClinkError

        try:
            text = self.pipeline.read_text(encoding="utf-8")
            key = (str(self.pipeline.resolve()), text)
            plan = _plans.get(key)
            if plan is None:
                plan = _plans[key] = pipeline_plan(self.pipeline, self._sources)
            return run_case(plan, self.case)
        except OSError as exc:
            raise CaseError(f"cannot read the pipeline {self.pipeline}: {exc.strerror or exc}") from None
        except ClinkError as exc:
            raise CaseError(exc.render(self._sources)) from None

    def check(self) -> None:
        outcome = self.run()
        if not outcome.passed:
            raise CaseFailed(f"{outcome.line()}\n{outcome.report}")

    def __repr__(self) -> str:
        return f"<clink case {self.case.name!r} of {self.pipeline.name}>"


def cases(pipeline: str | Path, case_file: str | Path) -> list[Any]:
    """The cases of ``case_file`` for ``pipeline``, ready for ``pytest.mark.parametrize``
    (each a ``pytest.param`` with the case's name as its id, under pytest).

    Relative paths are taken from the directory of the file that calls ``cases``::

        @pytest.mark.parametrize("case", clink.testing.cases("orders.sql", "orders_cases.yaml"))
        def test_orders(case):
            case.check()

    A mistake in the case file raises ``CaseError`` here, so collection reports it.
    """
    from clink._cases import load_case_file
    from clink.errors import ClinkError

    caller = sys._getframe(1).f_globals.get("__file__")
    base = Path(caller).parent if caller else Path.cwd()
    pipeline_path, cases_path = base / pipeline, base / case_file
    sources: dict[str, str] = {}
    try:
        loaded = load_case_file(cases_path, sources)
    except ClinkError as exc:
        raise CaseError(exc.render(sources)) from None
    found = [PipelineCase(pipeline_path, case, sources) for case in loaded.cases]
    pytest = sys.modules.get("pytest")
    if pytest is None:
        return found
    return [pytest.param(case, id=case.name) for case in found]


def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    """The plugin's hook: a ``*.clink.yaml`` (``.yml``, ``.json``) file is a file of cases."""
    if not file_path.name.endswith(CASE_FILE_SUFFIXES):
        return None
    return _pytest_classes()[0].from_parent(parent, path=file_path)


@functools.cache
def _pytest_classes() -> tuple[type, type]:
    """The plugin's collector and item classes, made on first use: pytest is imported only when a
    case file is collected."""
    import pytest

    class ClinkCaseFile(pytest.File):
        """A case file: one item per case."""

        def collect(self):
            from clink._cases import load_case_file
            from clink.errors import ClinkError

            sources: dict[str, str] = {}
            try:
                loaded = load_case_file(self.path, sources)
            except ClinkError as exc:
                raise CaseError(exc.render(sources)) from None
            suffix = next(s for s in CASE_FILE_SUFFIXES if self.path.name.endswith(s))
            pipeline = loaded.pipeline or self.path.with_name(self.path.name[: -len(suffix)] + ".sql")
            for case in loaded.cases:
                yield ClinkCase.from_parent(self, name=case.name, case=PipelineCase(pipeline, case, sources))

        def repr_failure(self, excinfo):
            if isinstance(excinfo.value, CaseError):
                return str(excinfo.value)
            return super().repr_failure(excinfo)

    class ClinkCase(pytest.Item):
        """One case: passes when every expected output produced what the case says."""

        def __init__(self, *, case: PipelineCase, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.case = case

        def runtest(self) -> None:
            self.case.check()

        def repr_failure(self, excinfo):
            if isinstance(excinfo.value, (CaseFailed, CaseError)):
                return str(excinfo.value)
            return super().repr_failure(excinfo)

        def reportinfo(self):
            return self.path, (self.case.case.line or 1) - 1, f"clink case {self.name}"

    return ClinkCaseFile, ClinkCase
