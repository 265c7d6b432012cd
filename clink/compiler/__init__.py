"""The compiler: SQL text → typed IR → rewrites → physical plan → generated Python module."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from clink import records
from clink.compiler import ast
from clink.compiler.bind import bind_script
from clink.compiler.codegen.module import generate_module
from clink.compiler.explain import explain, explain_logical
from clink.compiler.parse import parse_script
from clink.compiler.physical import plan_physical
from clink.compiler.rewrite import run_rewrites
from clink.errors import SqlError
from clink.runtime.connectors.base import ConnectorRegistry
from clink.runtime.udf import FunctionRegistry

__all__ = ["CompiledPlan", "compile_file", "compile_text"]


@records.record(kw_only=True)
class CompiledPlan:
    """The compiler's output: the generated module's ``source`` and the plan as text."""

    name: str
    source: str
    fingerprint: str
    explain_text: str
    rewrite_trace: tuple[str, ...] = ()

    def explain(self) -> str:
        return self.explain_text


def compile_text(text: str, *, name: str = "<sql>", connectors: ConnectorRegistry | None = None,
                 functions: FunctionRegistry | None = None,
                 init: Sequence[tuple[str, str]] = ()) -> CompiledPlan:
    """Compile every statement of ``text`` into one module.

    ``init``: (name, text) of scripts whose statements come first — declarations only (CREATE
    TABLE / VIEW / FUNCTION, SET), as a SQL client's init file: shared DDL that several pipeline
    files use. Errors in them point into their own file.

    ``functions`` are Python UDFs the SQL may call besides those it creates with ``CREATE
    FUNCTION``; the generated module looks them up in ``RuntimeContext.functions`` (docs/udf.md).

    >>> plan = compile_text("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', "
    ...                     "'number-of-rows' = '3'); SELECT a + 1 AS b FROM t;")
    >>> "def chain_2" in plan.source
    True
    """
    if connectors is None:
        from clink.runtime.connectors import default_registry

        connectors = default_registry()
    declarations: list = []
    for init_name, init_text in init:
        init_script = parse_script(init_text, init_name)
        for stmt in init_script.statements:
            if not isinstance(stmt, ast.CreateTable | ast.CreateView | ast.CreateFunction | ast.SetStmt):
                raise SqlError("an init script may only declare tables, views and functions and SET options",
                               stmt.span, f"move this statement into {name}")
        declarations.extend(init_script.statements)
    script = parse_script(text, name)
    if declarations:
        script = records.evolve(script, statements=(*declarations, *script.statements))
    bound = bind_script(script, connectors, functions)
    roots = []
    trace: list[str] = []
    for stmt in bound.statements:
        steps: list = []
        roots.append(run_rewrites(stmt.sink, trace=steps))
        trace.extend(f"-- after {rule}\n{explain_logical(rel)}" for rule, rel in steps)
    roots_t = tuple(roots)
    physical = plan_physical(bound, roots_t)
    text_plan = explain(roots_t, physical)
    explains = tuple(
        explain((root,), plan_physical(bound, (root,)))
        for root, stmt in zip(roots_t, bound.statements, strict=True) if stmt.explain
    )
    # Pipelines run only for statements that are not EXPLAIN.
    runnable = tuple(root for root, stmt in zip(roots_t, bound.statements, strict=True) if not stmt.explain)
    physical_run = plan_physical(bound, runnable)
    config = dict(bound.config)
    fingerprint = hashlib.sha256(
        (text_plan + repr(sorted(config.items())) + "\n".join(explains)
         # Where CREATE FUNCTION finds its functions is part of the plan (absent: no change).
         + ("\n".join(bound.udf_paths) if bound.udf_paths else "")).encode()
    ).hexdigest()[:16]
    source = generate_module(physical_run, name=name, sources={**dict(init), name: text}, fingerprint=fingerprint,
                             config=config, explains=explains,
                             tables={table: entry.info for table, entry in bound.catalog.tables.items()})
    return CompiledPlan(name=name, source=source, fingerprint=fingerprint, explain_text=text_plan,
                        rewrite_trace=tuple(trace))


def compile_file(path: str | Path, *, connectors: ConnectorRegistry | None = None,
                 functions: FunctionRegistry | None = None, init: Sequence[str | Path] = ()) -> CompiledPlan:
    path = Path(path)
    return compile_text(path.read_text(encoding="utf-8"), name=path.name, connectors=connectors,
                        functions=functions, init=[(Path(p).name, Path(p).read_text(encoding="utf-8")) for p in init])
