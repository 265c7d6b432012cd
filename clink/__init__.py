"""clink: a streaming SQL engine that is a library first and a cluster second.

The public surface is small: ``clink.sql``, ``clink.compile``, ``clink.load``, ``Result``,
``Plan``, ``clink.udf``, ``clink.udaf`` and ``clink.udtf`` with ``FunctionRegistry`` (Python functions in SQL), and the error classes. ``import clink`` loads neither the compiler nor lark; they are
imported the first time SQL is compiled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clink._version import __version__

from clink.errors import (  # noqa: E402
    ClinkError,
    CompilerBug,
    ConnectorError,
    PipelineError,
    RecordError,
    SqlError,
    SqlErrors,
    UsageError,
)

if TYPE_CHECKING:
    from clink.api import AggregateFunction, FunctionRegistry, Plan, Result, compile, load, sql, udaf, udf, udtf

__all__ = [
    "AggregateFunction",
    "ClinkError",
    "CompilerBug",
    "ConnectorError",
    "FunctionRegistry",
    "PipelineError",
    "Plan",
    "RecordError",
    "Result",
    "SqlError",
    "SqlErrors",
    "UsageError",
    "__version__",
    "compile",
    "load",
    "sql",
    "udaf",
    "udf",
    "udtf",
]

_API = {"sql", "compile", "load", "Result", "Plan", "udf", "udaf", "udtf", "AggregateFunction", "FunctionRegistry"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from clink import api

        return getattr(api, name)
    raise AttributeError(f"module 'clink' has no attribute {name!r}")
