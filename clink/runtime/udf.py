"""Python scalar functions (UDFs): their definition, the registry that carries them, and the
helpers generated code calls to evaluate them (``U.<name>``).

A UDF is a ``ScalarFunction``: a Python callable with a SQL name, a SQL return type (text such as
``'BIGINT'``), optional SQL argument types, and a flavour. A **vectorized** UDF gets one
``pyarrow.Array`` per argument, all as long as the batch, and returns an array of that length. A
**row-wise** UDF is called once per row with Python values (``None`` for NULL) and returns a
Python value; its loop over the rows (``rowwise``) is the one per-row Python loop in clink, and
its cost is the UDF's own.

This module imports neither the compiler nor lark: SQL type text is checked when a plan is
compiled, not here.

>>> @udf(returns="BIGINT")
... def plus_one(x):
...     return None if x is None else x + 1
>>> plus_one.name, plus_one.returns, plus_one.vectorized
('plus_one', 'BIGINT', False)
>>> plus_one(41)
42
"""

from __future__ import annotations

import datetime as dt
import decimal
import importlib
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from clink.errors import EvaluationError, UsageError
from clink.records import evolve, record
from clink.runtime import compute as pc

__all__ = ["FunctionRegistry", "ScalarFunction", "UdfError", "import_function", "rowwise", "udf", "vectorized"]

#: SQL types of the Python annotations a UDF may carry. ``bool`` comes before ``int`` because it is one.
_ANNOTATION_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "BOOLEAN"),
    (int, "BIGINT"),
    (float, "DOUBLE"),
    (str, "STRING"),
    (bytes, "BYTES"),
    (dt.datetime, "TIMESTAMP(6)"),  # microseconds, as Python keeps them
    (dt.date, "DATE"),
    (dt.time, "TIME"),
    (decimal.Decimal, "DECIMAL(38, 18)"),
)
_ANNOTATION_NAMES = {t.__name__: sql for t, sql in _ANNOTATION_TYPES} | {
    f"{t.__module__}.{t.__name__}": sql for t, sql in _ANNOTATION_TYPES
} | {"datetime.datetime": "TIMESTAMP(6)", "datetime.date": "DATE", "dt.datetime": "TIMESTAMP(6)",
     "dt.date": "DATE", "Decimal": "DECIMAL(38, 18)"}


def sql_type_of_annotation(annotation: Any) -> str | None:
    """The SQL type text for a Python annotation (``int`` → ``'BIGINT'``), or None if it names no
    SQL type (no annotation, ``Any``, ``pa.Array``). ``X | None`` and ``Optional[X]`` give X's type.

    >>> sql_type_of_annotation(int), sql_type_of_annotation("str | None"), sql_type_of_annotation(list)
    ('BIGINT', 'STRING', None)
    """
    if annotation is inspect.Parameter.empty or annotation is None:
        return None
    if isinstance(annotation, str):
        parts = [p.strip() for p in annotation.replace("Optional[", "").rstrip("]").split("|")]
        parts = [p for p in parts if p != "None"]
        return _ANNOTATION_NAMES.get(parts[0]) if len(parts) == 1 else None
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return sql_type_of_annotation(members[0]) if len(members) == 1 else None
    for python_type, sql in _ANNOTATION_TYPES:
        if annotation is python_type:
            return sql
    return None


@record(kw_only=True)
class ScalarFunction:
    """A Python function usable in SQL.

    ``returns`` is the SQL type of its result (text); ``arg_types`` the SQL type of each argument,
    None where any type is accepted, or None altogether when the signature is unknown (``*args``).
    Calling the object calls the function, so a decorated function stays usable from Python.
    """

    fn: Callable[..., Any]
    name: str
    returns: str
    arg_types: tuple[str | None, ...] | None
    vectorized: bool = False

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def udf(fn: Callable[..., Any] | None = None, *, returns: str | None = None, vectorized: bool = False,
        name: str | None = None) -> Any:
    """Make ``fn`` a SQL scalar function; usable as ``@udf``, ``@udf(returns=...)`` or ``udf(fn, ...)``.

    ``returns`` is SQL type text (``'BIGINT'``, ``'DECIMAL(10, 2)'``, ``'ARRAY<STRING>'``); without
    it the return annotation decides (int → BIGINT, float → DOUBLE, str → STRING, bool → BOOLEAN,
    bytes → BYTES, datetime → TIMESTAMP(6), date → DATE, Decimal → DECIMAL(38, 18)). Annotated
    parameters are type-checked where the function is called in SQL; others accept any type.
    Row-wise (the default) calls ``fn`` once per row with Python values, ``None`` for NULL;
    ``vectorized=True`` calls it once per batch with ``pyarrow`` arrays. ``name`` is the SQL name
    (default: ``fn.__name__``).

    >>> def shout(s: str) -> str:
    ...     return s.upper() + "!"
    >>> f = udf(shout)
    >>> f.returns, f.arg_types
    ('STRING', ('STRING',))
    """
    if fn is None:
        return lambda f: udf(f, returns=returns, vectorized=vectorized, name=name)
    if isinstance(fn, ScalarFunction):
        return evolve(fn, name=name or fn.name, returns=returns or fn.returns,
                            vectorized=vectorized or fn.vectorized)
    if not callable(fn):
        raise UsageError(f"clink.udf needs a function, got {type(fn).__name__}")
    sql_name = name or getattr(fn, "__name__", None)
    if not sql_name or not sql_name.isidentifier():
        raise UsageError(f"cannot use {sql_name!r} as a SQL function name: pass name='...' to clink.udf")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    hints: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to their text below
        hints = dict(getattr(fn, "__annotations__", {}) or {})
    if returns is None:
        returns = sql_type_of_annotation(hints.get("return", inspect.Parameter.empty))
        if returns is None:
            raise UsageError(f"cannot tell which SQL type function {sql_name} returns: pass returns='BIGINT' "
                             "(or the type it returns) to clink.udf, or annotate its return type")
    arg_types: tuple[str | None, ...] | None = None
    if signature is not None and not any(
            p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in signature.parameters.values()):
        arg_types = tuple(sql_type_of_annotation(hints.get(p.name, inspect.Parameter.empty))
                          for p in signature.parameters.values())
    return ScalarFunction(fn=fn, name=sql_name, returns=returns, arg_types=arg_types, vectorized=vectorized)


class FunctionRegistry:
    """The Python UDFs a pipeline may call, by SQL name (case-insensitive).

    It travels like the ``ConnectorRegistry``: given to the compiler, which types the calls, and
    in ``RuntimeContext.functions``, where generated code finds the functions when it runs.
    """

    __slots__ = ("_functions",)

    def __init__(self, functions: dict[str, ScalarFunction] | None = None) -> None:
        self._functions: dict[str, ScalarFunction] = dict(functions or {})

    def __repr__(self) -> str:
        return f"FunctionRegistry({self.names()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FunctionRegistry) and self._functions == other._functions

    __hash__ = None  # type: ignore[assignment]  # mutable

    @classmethod
    def of(cls, functions: FunctionRegistry | Iterable[Any] | None) -> FunctionRegistry:
        """A registry from a registry, or from functions (plain callables are passed to ``udf``)."""
        if isinstance(functions, FunctionRegistry):
            return functions
        registry = cls()
        for f in functions or ():
            registry.register(f)
        return registry

    def register(self, function: ScalarFunction | Callable[..., Any]) -> ScalarFunction:
        from clink.runtime.udaf import AggregateUdf, TableUdf

        f = function if isinstance(function, (ScalarFunction, AggregateUdf, TableUdf)) else udf(function)
        existing = self._functions.get(f.name.upper())
        if existing is not None and existing is not f and getattr(existing, "fn", existing) is not getattr(f, "fn", f):
            raise UsageError(f"two functions are named {f.name}: give one another name with clink.udf(name=...)")
        self._functions[f.name.upper()] = f
        return f

    def get(self, name: str) -> ScalarFunction | None:
        return self._functions.get(name.upper())

    def names(self) -> list[str]:
        return sorted(f.name for f in self._functions.values())

    def merged(self, other: FunctionRegistry) -> FunctionRegistry:
        """This registry with ``other``'s functions added (``other`` wins on a shared name)."""
        return FunctionRegistry(functions={**self._functions, **other._functions})

    def __iter__(self) -> Iterator[ScalarFunction]:
        return iter(self._functions.values())

    def __len__(self) -> int:
        return len(self._functions)


class UdfError(EvaluationError):
    """A UDF raised an exception or returned something unusable: fails the pipeline."""


def import_function(module: str, attribute: str, *, name: str) -> Callable[..., Any]:
    """The function ``module.attribute`` (``attribute`` may be dotted), imported when a plan that
    uses it is loaded (``CREATE FUNCTION ... AS 'module.attribute'``)."""
    try:
        target: Any = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise UsageError(f"the plan calls function {name}, defined as '{module}.{attribute}', which cannot be "
                         f"imported here: {type(exc).__name__}: {exc} (is its package installed, or its "
                         "directory on PYTHONPATH?)") from exc
    return target


def _as_array(value: Any, n: int, type: pa.DataType) -> pa.Array:
    if isinstance(value, pa.Scalar):
        if value.type != type:
            value = pc.cast(value, type)
        return pa.repeat(value, n) if value.is_valid else pa.nulls(n, type)
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    return value


def _result(name: str, out: Any, n: int, type: pa.DataType) -> pa.Array:
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if not isinstance(out, pa.Array):
        try:
            out = pa.array(out, type=type)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise UdfError(f"function {name} returned a value that is not {type}: {exc}") from exc
    if len(out) != n:
        raise UdfError(f"function {name} returned {len(out)} values for a batch of {n} rows "
                       "(a vectorized function returns one value per input row)")
    if out.type != type:
        try:
            out = pc.cast(out, type)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise UdfError(f"function {name} returned {out.type} values, which do not convert to {type}: "
                           f"{exc}") from exc
    return out


def vectorized(f: Callable[..., Any], name: str, args: list[Any], n: int, type: pa.DataType) -> pa.Array:
    """Call a vectorized UDF once on the whole batch: ``args`` as arrays of ``n`` values (constants
    are spread over the batch), result checked for length and converted to ``type``."""
    arrays = [_as_array(a, n, a.type) for a in args]
    try:
        out = f(*arrays)
    except Exception as exc:
        raise UdfError(f"function {name} raised {type_name(exc)}: {exc} (on a batch of {n} rows)") from exc
    return _result(name, out, n, type)


def rowwise(f: Callable[..., Any], name: str, args: list[Any], n: int, type: pa.DataType) -> pa.Array:
    """Call a row-wise UDF once per row with Python values (``None`` for NULL).

    This loop is the UDF's own cost: the only place clink runs Python once per row. Declare the
    function ``vectorized=True`` to avoid it.
    """
    columns = [_as_array(a, n, a.type).to_pylist() for a in args]
    rows = zip(*columns) if columns else ((),) * n
    out: list[Any] = []
    append = out.append
    for position, row in enumerate(rows):
        try:
            append(f(*row))
        except Exception as exc:
            raise UdfError(f"function {name} raised {type_name(exc)}: {exc} (row {position} of the batch, "
                           f"arguments {_show(row)})") from exc
    try:
        return pa.array(out, type=type)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        # Error path only: find the first value that does not convert, to name it.
        for position, value in enumerate(out):
            try:
                pa.array([value], type=type)
            except (pa.ArrowException, TypeError, ValueError):
                raise UdfError(f"function {name} returned {value!r} (row {position} of the batch), which is "
                               f"not a {type} value") from exc
        raise UdfError(f"function {name} returned values that are not {type}: {exc}") from exc


def type_name(exc: BaseException) -> str:
    return type(exc).__name__


def _show(row: tuple[Any, ...]) -> str:
    text = "(" + ", ".join(repr(v) for v in row) + ")"
    return text if len(text) <= 200 else text[:197] + "..."
