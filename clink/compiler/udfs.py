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

import attrs
import pyarrow as pa

from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.catalog import nearest
from clink.compiler.functions import cast_to
from clink.errors import ClinkError, Span, SqlError
from clink.runtime.udf import ScalarFunction, udf


@attrs.frozen(kw_only=True)
class BoundUdf:
    """A UDF known to the binder, with its SQL signature resolved to Arrow types."""

    ref: ir.UdfRef
    returns: pa.DataType
    #: One entry per parameter (None: any type), or None when the number of arguments is free.
    arg_types: tuple[pa.DataType | None, ...] | None


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


def bind_function(f: ScalarFunction, ref: ir.UdfRef, span: Span | None) -> BoundUdf:
    returns = parse_type(f.returns, span, f"the return type of function {ref.name}")
    arg_types = None
    if f.arg_types is not None:
        arg_types = tuple(None if t is None else parse_type(t, span, f"argument {i} of function {ref.name}")
                          for i, t in enumerate(f.arg_types, 1))
    return BoundUdf(ref=ref, returns=returns, arg_types=arg_types)


def registry_function(f: ScalarFunction, span: Span | None) -> BoundUdf:
    """A UDF from the caller's ``FunctionRegistry``: looked up by name when the plan runs."""
    return bind_function(f, ir.UdfRef(name=f.name, vectorized=f.vectorized), span)


def create_function(stmt: ast.CreateFunction) -> BoundUdf:
    """Import the function a ``CREATE FUNCTION`` names, and check it can be called from SQL."""
    if stmt.language not in (None, "PYTHON"):
        raise SqlError(f"functions in {stmt.language} are not supported: clink runs Python functions",
                       stmt.language_span or stmt.span, "write LANGUAGE PYTHON")
    path, span = stmt.path, stmt.path_span or stmt.span
    module, attribute, target = _import(path, span, stmt.name)
    hint = f"decorate it with @clink.udf(returns='...') in {module}"
    if isinstance(target, ScalarFunction):
        f = target
    elif callable(target) and not isinstance(target, type):
        try:
            f = udf(target, name=stmt.name)
        except ClinkError as exc:
            raise SqlError(f"function {stmt.name} ('{path}'): {exc}", span, hint) from None
    else:
        raise SqlError(f"'{path}' is a {type(target).__name__}, not a function", span, hint)
    ref = ir.UdfRef(name=stmt.name, vectorized=f.vectorized, module=module, attribute=attribute, span=stmt.span)
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
    name = f.ref.name
    if f.arg_types is not None:
        if len(args) != len(f.arg_types):
            want = len(f.arg_types)
            raise SqlError(f"function {name} takes {want} argument{'s' if want != 1 else ''}, got {len(args)}", span)
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
    args = [cast_to(a, pa.string()) if T.is_null(a.type) else a for a in args]
    return ir.Call(fn="udf", args=tuple(args), params=(f.ref,), type=f.returns, nullable=True, span=span)
