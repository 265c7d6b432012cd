"""Python scalar UDFs in the compiler: resolve ``CREATE FUNCTION`` paths, type signatures, bind calls.

A UDF comes from one of two places, and generated code finds it accordingly:

* ``CREATE FUNCTION f AS 'pkg.mod.f' LANGUAGE PYTHON`` — part of the SQL. The compiler imports
  the path now, to type the calls; the generated module imports it again when it loads
  (``U.import_function('pkg.mod', 'f')``), so the module runs without the compiler.
* a ``FunctionRegistry`` given to the compiler (``clink.sql(..., functions=[f])``) — part of the
  caller's context. Generated code looks the function up by name in ``RuntimeContext.functions``.
"""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa

from clink import records
from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.catalog import nearest
from clink.compiler.functions import cast_to
from clink.errors import ClinkError, Span, SqlError
from clink.runtime.udaf import AggregateUdf, TableUdf
from clink.runtime.udf import ScalarFunction, udf

#: The kinds of Python function, by the class that defines one.
_KINDS = ((ScalarFunction, "scalar"), (AggregateUdf, "aggregate"), (TableUdf, "table"))


@records.record(kw_only=True)
class BoundUdf:
    """A UDF known to the binder, with its SQL signature resolved to Arrow types."""

    ref: ir.UdfRef
    returns: pa.DataType
    #: One entry per parameter (None: any type), or None when the number of arguments is free.
    arg_types: tuple[pa.DataType | None, ...] | None
    #: ``scalar``, ``aggregate`` (``clink.udaf``) or ``table`` (``clink.udtf``).
    kind: str = "scalar"
    #: An aggregate function's accumulator: a struct of its fields.
    accumulator: pa.StructType | None = None
    #: A table function's columns (its ``returns`` is a struct of them).
    columns: tuple[tuple[str, pa.DataType], ...] = ()
    #: An aggregate function that can take rows away again (has ``retract``).
    retractable: bool = False

    @property
    def what(self) -> str:
        return {"scalar": "function", "aggregate": "aggregate function", "table": "table function"}[self.kind]


def parse_type(text: str, span: Span | None, what: str) -> pa.DataType:
    """The Arrow type of SQL type text (``'DECIMAL(10, 2)'``), read with the dialect's own grammar."""
    from clink.compiler.parse import parse_script

    try:
        stmt = parse_script(f"CREATE TABLE t (x {text})", "<type>").statements[0]
        (column,) = stmt.columns
        return column.type
    except (SqlError, ValueError, AttributeError):
        raise SqlError(f"{what} is {text!r}, which is not a SQL type", span,
                       "write it as in CREATE TABLE: 'BIGINT', 'STRING', 'DECIMAL(10, 2)', 'ARRAY<INT>'") from None


def bind_function(f: ScalarFunction | AggregateUdf | TableUdf, ref: ir.UdfRef, span: Span | None) -> BoundUdf:
    arg_types = None
    if f.arg_types is not None:
        arg_types = tuple(None if t is None else parse_type(t, span, f"argument {i} of function {ref.name}")
                          for i, t in enumerate(f.arg_types, 1))
    if isinstance(f, AggregateUdf):
        returns = parse_type(f.returns, span, f"the result type of aggregate function {ref.name}")
        fields = [pa.field(n, parse_type(t, span, f"the type of accumulator field {n!r} of {ref.name}"))
                  for n, t in f.accumulator]
        return BoundUdf(ref=ref, returns=returns, arg_types=arg_types, kind="aggregate",
                        accumulator=pa.struct(fields), retractable=f.retractable)
    if isinstance(f, TableUdf):
        columns = tuple((n, parse_type(t, span, f"the type of column {n!r} of table function {ref.name}"))
                        for n, t in f.columns)
        return BoundUdf(ref=ref, returns=pa.struct([pa.field(n, t) for n, t in columns]), arg_types=arg_types,
                        kind="table", columns=columns)
    returns = parse_type(f.returns, span, f"the return type of function {ref.name}")
    return BoundUdf(ref=ref, returns=returns, arg_types=arg_types)


def kind_of(f: Any) -> str:
    return next(kind for cls, kind in _KINDS if isinstance(f, cls))


def registry_function(f: ScalarFunction | AggregateUdf | TableUdf, span: Span | None) -> BoundUdf:
    """A UDF from the caller's ``FunctionRegistry``: looked up by name when the plan runs."""
    ref = ir.UdfRef(name=f.name, vectorized=getattr(f, "vectorized", True), kind=kind_of(f))
    return bind_function(f, ref, span)


def create_function(stmt: ast.CreateFunction) -> BoundUdf:
    """Import the function a ``CREATE FUNCTION`` names, and check it can be called from SQL."""
    if stmt.language not in (None, "PYTHON"):
        raise SqlError(f"functions in {stmt.language} are not supported: clink runs Python functions",
                       stmt.language_span or stmt.span, "write LANGUAGE PYTHON")
    path, span = stmt.path, stmt.path_span or stmt.span
    module, attribute, target = _import(path, span, stmt.name)
    hint = f"decorate it with @clink.udf(returns='...') in {module}"
    if isinstance(target, (ScalarFunction, AggregateUdf, TableUdf)):
        f = target
    elif isinstance(target, type) and callable(getattr(target, "accumulate", None)):
        raise SqlError(f"'{path}' is a class with an accumulate method, but not an aggregate function clink can "
                       "type", span, f"decorate it with @clink.udaf(returns='...', accumulator={{...}}) in {module}")
    elif callable(target) and not isinstance(target, type):
        try:
            f = udf(target, name=stmt.name)
        except ClinkError as exc:
            raise SqlError(f"function {stmt.name} ('{path}'): {exc}", span, hint) from None
    else:
        raise SqlError(f"'{path}' is a {type(target).__name__}, not a function", span, hint)
    ref = ir.UdfRef(name=stmt.name, vectorized=getattr(f, "vectorized", True), module=module, attribute=attribute,
                    kind=kind_of(f), span=stmt.span)
    return bind_function(f, ref, span)


def _import(path: str, span: Span, name: str) -> tuple[str, str, Any]:
    parts = path.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise SqlError(f"function {name} is defined as {path!r}, which is not a dotted path to a Python function",
                       span, "write the module and the function: AS 'mypackage.module.function'")
    module = None
    for i in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:i])
        try:
            module = importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            # A missing module on the way to the path: try a shorter one. A module that imports
            # but needs a package that is missing is a real failure.
            if exc.name is not None and (candidate == exc.name or candidate.startswith(exc.name + ".")):
                continue
            raise _import_failed(path, candidate, exc, span) from None
        except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
            raise _import_failed(path, candidate, exc, span) from None
        else:
            break
    if module is None:
        missing = ".".join(parts[:-1])
        raise SqlError(f"cannot import module {missing!r} for function {name}", span,
                       f"the path is {path!r}; is the package installed, or its directory on PYTHONPATH / sys.path?")
    module_name = ".".join(parts[:i])
    target: Any = module
    for j, part in enumerate(parts[i:], i):
        if not hasattr(target, part):
            owner = ".".join(parts[:j])
            names = [n for n in dir(target) if not n.startswith("_")]
            close = nearest(part, names)
            hint = f"did you mean '{owner}.{close}'?" if close else f"the path is {path!r}"
            raise SqlError(f"{owner!r} has no attribute {part!r} (function {name})", span, hint)
        target = getattr(target, part)
    return module_name, ".".join(parts[i:]), target


def _import_failed(path: str, module: str, exc: BaseException, span: Span) -> SqlError:
    return SqlError(f"importing module {module!r} failed: {type(exc).__name__}: {exc}", span,
                    f"the function's path is {path!r}")


def bind_call(f: BoundUdf, args: list[ir.Expr], span: Span) -> ir.Expr:
    """A call of ``f``: arguments checked against its annotated types (and cast to them)."""
    args = check_args(f, args, span)
    return ir.Call(fn="udf", args=tuple(args), params=(f.ref,), type=f.returns, nullable=True, span=span)


def check_args(f: BoundUdf, args: list[ir.Expr], span: Span) -> list[ir.Expr]:
    """The arguments of a call of ``f``, checked against its declared types and cast to them."""
    name = f.ref.name
    if f.arg_types is not None:
        if len(args) != len(f.arg_types):
            want = len(f.arg_types)
            raise SqlError(f"{f.what} {name} takes {want} argument{'s' if want != 1 else ''}, got {len(args)}", span)
        checked = []
        for i, (arg, want_type) in enumerate(zip(args, f.arg_types, strict=True), 1):
            if want_type is not None and arg.type != want_type:
                if not (T.is_null(arg.type) or T.implicitly_castable(arg.type, want_type)):
                    raise SqlError(f"argument {i} of {name} must be {T.sql_name(want_type)}, got "
                                   f"{T.sql_name(arg.type)}", arg.span or span,
                                   f"cast it: CAST(... AS {T.sql_name(want_type)})")
                arg = cast_to(arg, want_type)
            checked.append(arg)
        args = checked
    # NULL-typed arguments still need a concrete Arrow type to be passed as arrays.
    return [cast_to(a, pa.string()) if T.is_null(a.type) else a for a in args]
