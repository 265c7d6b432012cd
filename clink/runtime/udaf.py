"""Python aggregate functions and table functions: their definitions, and the helpers the
operators and generated code call to run them.

An **aggregate function** (``udaf``) is vectorized and mergeable, in the shape of Flink's
``AggregateFunction`` (``createAccumulator`` / ``accumulate`` / ``retract`` / ``merge`` /
``getValue``), but called once per batch rather than once per row. Its accumulator is a set of
typed fields declared in SQL types, so the operators hold the accumulators of many groups as
Arrow columns — one row per group — and checkpoint them with the rest of their state (never
pickled). Every method sees the accumulators of the groups a batch touches, as a dict of
``pyarrow.Array`` by field name, and the *group id* of each input row (a numpy int64 array of
positions into those arrays):

- ``create_accumulator()``: the initial value of each field, as Python values (missing: NULL);
- ``accumulate(acc, groups, *args)``: add the rows (one array per SQL argument) to their
  groups' accumulators; return the new accumulators (a dict of arrays or of anything
  ``pa.array`` accepts, one value per group);
- ``retract(acc, groups, *args)`` (optional): take rows away again — needed over an updating
  input (a GROUP BY over a GROUP BY, say);
- ``merge(acc, groups, other)``: fold other accumulators (``other``: a dict of arrays with one
  row per accumulator, ``groups`` its group ids) into ``acc`` — windows merge the partial
  accumulators of their panes and batches this way;
- ``get_value(acc)``: the result of each group, one value per group.

A **table function** (``udtf``) turns each input row into zero or more rows of declared
columns, like ``UNNEST``: ``FROM t, LATERAL TABLE(f(x)) AS u(a, b)``. Row-wise, it is called
once per row with Python values and yields tuples (or single values when it has one column);
vectorized, it is called once per batch with one array per argument and returns
``(rows, columns)``: the input row of each output row (integers), and one array per column.

This module imports neither the compiler nor lark: SQL type text is checked when a plan is
compiled, and the operators get the Arrow types from the plan.

>>> import numpy as np
>>> @udaf(returns="BIGINT", accumulator={"n": "BIGINT"})
... class CountRows:
...     def create_accumulator(self):
...         return {"n": 0}
...     def accumulate(self, acc, groups, x):
...         return {"n": acc["n"].to_numpy() + np.bincount(groups, minlength=len(acc["n"]))}
...     def merge(self, acc, groups, other):
...         return {"n": acc["n"].to_numpy() + np.bincount(groups, other["n"].to_numpy(), len(acc["n"]))}
...     def get_value(self, acc):
...         return acc["n"]
>>> CountRows.name, CountRows.retractable
('CountRows', False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from clink.errors import PipelineError, UsageError
from clink.records import record
from clink.runtime import compute as pc
from clink.runtime.udf import UdfError, _show, type_name

__all__ = ["AggregateFunction", "AggregateUdf", "AggregateRunner", "TableUdf", "lateral", "udaf", "udtf"]

_REQUIRED = ("create_accumulator", "accumulate", "merge", "get_value")


class AggregateFunction:
    """A base class for Python aggregate functions (optional: any class with the methods will do).

    Subclasses implement ``create_accumulator``, ``accumulate``, ``merge`` and ``get_value``, and
    ``retract`` when they can take rows away; see the module docstring for their arguments.
    """

    def create_accumulator(self) -> Mapping[str, Any]:
        return {}

    def accumulate(self, acc: dict[str, pa.Array], groups: np.ndarray, *args: pa.Array) -> Mapping[str, Any]:
        raise NotImplementedError

    def merge(self, acc: dict[str, pa.Array], groups: np.ndarray, other: dict[str, pa.Array]) -> Mapping[str, Any]:
        raise NotImplementedError

    def get_value(self, acc: dict[str, pa.Array]) -> Any:
        raise NotImplementedError


def _fields(what: str, spec: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    items = tuple((spec.items() if isinstance(spec, Mapping) else spec) or ())
    if not items:
        raise UsageError(f"{what} needs at least one column: pass a dict of names to SQL types, "
                         "e.g. {'total': 'DOUBLE'}")
    out = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(p, str) for p in item)):
            raise UsageError(f"{what}: {item!r} is not a (name, SQL type) pair")
        if not item[0].isidentifier():
            raise UsageError(f"{what}: {item[0]!r} is not a usable name")
        out.append(item)
    if len({n.lower() for n, _ in out}) != len(out):
        raise UsageError(f"{what}: two columns have the same name")
    return tuple(out)


@record(kw_only=True)
class AggregateUdf:
    """A Python aggregate function usable in SQL: an instance ``impl`` with the methods above, its
    SQL name, result type (text), accumulator fields (name, SQL type text), and argument types
    (None where any type is accepted, or None altogether when not declared)."""

    impl: Any
    name: str
    returns: str
    accumulator: tuple[tuple[str, str], ...]
    arg_types: tuple[str | None, ...] | None = None

    @property
    def retractable(self) -> bool:
        return callable(getattr(self.impl, "retract", None))


def udaf(cls: Any = None, *, returns: str | None = None, accumulator: Mapping[str, str] | None = None,
         args: Iterable[str | None] | None = None, name: str | None = None) -> Any:
    """Make a class (or an instance) a SQL aggregate function: ``@udaf(returns=..., accumulator=...)``.

    ``returns`` is the SQL type of the result, ``accumulator`` the accumulator's fields as a dict
    of names to SQL types (``{'total': 'DOUBLE', 'weight': 'DOUBLE'}``); ``args``: the SQL type of
    each argument (None for any type; not given: any number of arguments of any type). A class is
    instantiated without arguments. ``name``: the SQL name (default: the class's name).
    """
    if cls is None:
        return lambda c: udaf(c, returns=returns, accumulator=accumulator, args=args, name=name)
    if isinstance(cls, AggregateUdf):  # another name or signature for a defined function
        return udaf(cls.impl, returns=returns or cls.returns, name=name or cls.name,
                    accumulator=cls.accumulator if accumulator is None else accumulator,
                    args=cls.arg_types if args is None else args)
    impl = cls() if isinstance(cls, type) else cls
    sql_name = name or getattr(cls, "__name__", None) or type(impl).__name__
    if not sql_name.isidentifier():
        raise UsageError(f"cannot use {sql_name!r} as a SQL function name: pass name='...' to clink.udaf")
    missing = [m for m in _REQUIRED if not callable(getattr(impl, m, None))]
    if missing:
        raise UsageError(f"aggregate function {sql_name} lacks {', '.join(missing)}: an aggregate function "
                         "has create_accumulator, accumulate, merge and get_value (and retract, optionally)")
    if not returns:
        raise UsageError(f"aggregate function {sql_name} needs returns='...', the SQL type of its result")
    fields = _fields(f"the accumulator of aggregate function {sql_name}", accumulator)
    arg_types = tuple(args) if args is not None else None
    return AggregateUdf(impl=impl, name=sql_name, returns=returns, accumulator=fields, arg_types=arg_types)


@record(kw_only=True)
class TableUdf:
    """A Python table function usable in SQL: ``fn``, its SQL name, output columns (name, SQL type
    text), argument types as for an ``AggregateUdf``, and its flavour."""

    fn: Callable[..., Any]
    name: str
    columns: tuple[tuple[str, str], ...]
    arg_types: tuple[str | None, ...] | None = None
    vectorized: bool = False

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def udtf(fn: Callable[..., Any] | None = None, *, columns: Mapping[str, str] | None = None,
         args: Iterable[str | None] | None = None, vectorized: bool = False, name: str | None = None) -> Any:
    """Make ``fn`` a SQL table function: ``@udtf(columns={'word': 'STRING', 'n': 'INT'})``.

    Row-wise (the default) ``fn`` is called once per input row with Python values (``None`` for
    NULL) and yields (or returns an iterable of) rows: tuples, or plain values when it has one
    column. ``vectorized=True``: called once per batch with one ``pyarrow.Array`` per argument,
    it returns ``(rows, columns)``, the input row each output row comes from and one array (or
    list) per column. ``args``: the SQL type of each argument; without it the annotations decide
    as for ``clink.udf``, and unannotated parameters accept any type.
    """
    if fn is None:
        return lambda f: udtf(f, columns=columns, args=args, vectorized=vectorized, name=name)
    if not callable(fn):
        raise UsageError(f"clink.udtf needs a function, got {type(fn).__name__}")
    sql_name = name or getattr(fn, "__name__", None)
    if not sql_name or not sql_name.isidentifier():
        raise UsageError(f"cannot use {sql_name!r} as a SQL function name: pass name='...' to clink.udtf")
    fields = _fields(f"table function {sql_name}", columns)
    if args is not None:
        arg_types: tuple[str | None, ...] | None = tuple(args)
    else:
        from clink.runtime.udf import udf

        arg_types = udf(fn, returns="STRING", name=sql_name).arg_types  # only its argument types
    return TableUdf(fn=fn, name=sql_name, columns=fields, arg_types=arg_types, vectorized=vectorized)


# -- running aggregate functions -------------------------------------------------------------------


class AggregateRunner:
    """Calls an ``AggregateUdf`` for an operator: accumulators as dicts of Arrow arrays of the
    types in ``acc_type`` (a struct type, as the plan gives it), results of ``type``; every
    answer the function gives is checked (fields, length, types); a failure, or an exception of
    the function, is a ``PipelineError`` that names it and ``where``, the aggregation's SQL."""

    __slots__ = ("f", "name", "acc_type", "type", "names", "where", "_initial")

    def __init__(self, f: AggregateUdf, acc_type: pa.StructType, type_: pa.DataType, where: str | None = None) -> None:
        self.f = f
        #: The SQL position of the aggregation, named by the ``PipelineError`` a failure raises.
        self.where = where
        self.name = f.name
        self.acc_type = acc_type
        self.type = type_
        self.names = [acc_type.field(i).name for i in range(acc_type.num_fields)]
        declared = [n for n, _ in f.accumulator]
        if declared != self.names:
            raise UsageError(f"aggregate function {f.name} declares the accumulator fields {declared}, but the plan "
                             f"was compiled with {self.names}: compile the plan again")
        initial = self._call("create_accumulator")
        if not isinstance(initial, Mapping):
            raise self._error(f"aggregate function {f.name}: create_accumulator returned a "
                           f"{type(initial).__name__}, not a dict of field values")
        unknown = set(initial) - set(self.names)
        if unknown:
            raise self._error(f"aggregate function {f.name}: create_accumulator gave fields {sorted(unknown)} that the "
                           f"accumulator does not declare (it has {self.names})")
        self._initial = [pa.scalar(initial.get(n), acc_type.field(n).type) for n in self.names]

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.f.impl, method)(*args)
        except Exception as exc:
            raise PipelineError(f"aggregate function {self.name}: {method} raised {type_name(exc)}: {exc}",
                                self.where) from exc

    def _error(self, message: str) -> PipelineError:
        return PipelineError(message, self.where)

    def fresh(self, n: int) -> dict[str, pa.Array]:
        """``n`` new accumulators (``create_accumulator``'s values)."""
        if not n:  # pa.repeat of a nested value (an empty list, say) cannot make none
            return {name: pa.array([], value.type) for name, value in zip(self.names, self._initial, strict=True)}
        return {name: pa.repeat(value, n) if value.is_valid else pa.nulls(n, value.type)
                for name, value in zip(self.names, self._initial, strict=True)}

    def _checked(self, method: str, out: Any, n: int) -> dict[str, pa.Array]:
        if not isinstance(out, Mapping):
            raise self._error(f"aggregate function {self.name}: {method} returned a {type(out).__name__}, not a dict "
                           f"of the accumulator's fields ({', '.join(self.names)})")
        missing = [name for name in self.names if name not in out]
        if missing:
            raise self._error(f"aggregate function {self.name}: {method} returned no field {', '.join(missing)}")
        return {name: self._array(method, f"field {name}", out[name], n, self.acc_type.field(name).type)
                for name in self.names}

    def _array(self, method: str, what: str, values: Any, n: int, type_: pa.DataType) -> pa.Array:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        try:
            if not isinstance(values, pa.Array):
                values = pa.array(values, type=type_)
            elif values.type != type_:
                values = pc.cast(values, type_)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise self._error(f"aggregate function {self.name}: {method} gave {what} values that are not "
                           f"{type_}: {exc}") from exc
        if len(values) != n:
            raise self._error(f"aggregate function {self.name}: {method} gave {len(values)} values of {what} for "
                           f"{n} groups (one per group)")
        return values

    def accumulate(self, acc: dict[str, pa.Array], groups: np.ndarray, args: list[pa.Array],
                   retract: bool = False) -> dict[str, pa.Array]:
        """``acc`` with the rows ``args`` (of group ids ``groups``) added, or taken away."""
        if not len(groups):
            return acc
        method = "retract" if retract else "accumulate"
        n = len(acc[self.names[0]])
        return self._checked(method, self._call(method, dict(acc), groups, *args), n)

    def merge(self, acc: dict[str, pa.Array], groups: np.ndarray, other: dict[str, pa.Array]) -> dict[str, pa.Array]:
        """``acc`` with the accumulators ``other`` (of group ids ``groups``) merged in."""
        if not len(groups):
            return acc
        n = len(acc[self.names[0]])
        return self._checked("merge", self._call("merge", dict(acc), groups, dict(other)), n)

    def partials(self, n: int, groups: np.ndarray, args: list[pa.Array]) -> dict[str, pa.Array]:
        """The accumulators of ``n`` groups made of the rows ``args`` alone."""
        return self.accumulate(self.fresh(n), groups, args)

    def value(self, acc: dict[str, pa.Array]) -> pa.Array:
        n = len(acc[self.names[0]])
        if not n:
            return pa.array([], self.type)
        return self._array("get_value", "the result", self._call("get_value", dict(acc)), n, self.type)


def resolve(function: Any, ctx: Any) -> Any:
    """The function an operator's plan names: the object itself (imported by the generated module
    from a CREATE FUNCTION path) or a name to find in the job's ``RuntimeContext.functions``."""
    return ctx.function(function) if isinstance(function, str) else function


# -- running table functions -----------------------------------------------------------------------


def lateral(f: TableUdf, name: str, batch: pa.RecordBatch, args: list[int], keep: int, types: list[pa.DataType],
            outer: bool = False) -> pa.RecordBatch:
    """Each row of ``batch`` (its first ``keep`` columns) joined with the rows the table function
    ``f`` gives for the values of its columns ``args``; with ``outer`` (``LEFT JOIN LATERAL ...
    ON TRUE``) a row for which it gives none comes out once, padded with NULLs. Output rows keep
    the order of their input rows."""
    n = batch.num_rows
    arrays = [batch.column(i) for i in args]
    if f.vectorized:
        rows, columns = _lateral_vectorized(f, name, arrays, n, types)
    else:
        rows, columns = _lateral_rowwise(f, name, arrays, n, types)
    if outer:
        produced = np.bincount(rows, minlength=n) if len(rows) else np.zeros(n, np.int64)
        empty = np.flatnonzero(produced == 0)
        if len(empty):
            rows = np.concatenate([rows, empty])
            columns = [pa.concat_arrays([c, pa.nulls(len(empty), c.type)]) for c in columns]
            order = np.argsort(rows, kind="stable")
            rows = rows[order]
            picks = pa.array(order)
            columns = [pc.take(c, picks) for c in columns]
    index = pa.array(rows, pa.int64())
    left = [pc.take(batch.column(i), index) for i in range(keep)]
    names = [*batch.schema.names[:keep], *(f"${j}" for j in range(len(columns)))]
    return pa.RecordBatch.from_arrays([*left, *columns], names=names)


def _lateral_rowwise(f: TableUdf, name: str, arrays: list[pa.Array], n: int,
                     types: list[pa.DataType]) -> tuple[np.ndarray, list[pa.Array]]:
    # A row-wise table function is called once per row: that loop is the function's own cost, as
    # for a row-wise scalar function (declare it vectorized=True to avoid it).
    values = [a.to_pylist() for a in arrays]
    inputs = zip(*values) if values else ((),) * n
    width = len(types)
    rows: list[int] = []
    out: list[list[Any]] = [[] for _ in types]
    for position, row in enumerate(inputs):
        try:
            produced = f.fn(*row)
            for item in produced if produced is not None else ():
                if width == 1 and not isinstance(item, tuple):
                    item = (item,)
                if len(item) != width:
                    raise UdfError(f"table function {name} gave the row {_show(tuple(item))}, which has {len(item)} "
                                   f"values; it has {width} column(s)")
                rows.append(position)
                for column, value in zip(out, item, strict=True):
                    column.append(value)
        except UdfError:
            raise
        except Exception as exc:
            raise UdfError(f"table function {name} raised {type_name(exc)}: {exc} (row {position} of the batch, "
                           f"arguments {_show(row)})") from exc
    columns = []
    for j, (values_j, t) in enumerate(zip(out, types, strict=True)):
        try:
            columns.append(pa.array(values_j, type=t))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise UdfError(f"table function {name} gave values of column {j + 1} that are not {t}: {exc}") from exc
    return np.asarray(rows, dtype=np.int64), columns


def _lateral_vectorized(f: TableUdf, name: str, arrays: list[pa.Array], n: int,
                        types: list[pa.DataType]) -> tuple[np.ndarray, list[pa.Array]]:
    try:
        result = f.fn(*arrays)
    except Exception as exc:
        raise UdfError(f"table function {name} raised {type_name(exc)}: {exc} (on a batch of {n} rows)") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UdfError(f"table function {name} returned a {type(result).__name__}; a vectorized table function "
                       "returns (rows, columns): the input row of each output row, and one array per column")
    rows_in, columns_in = result
    if isinstance(rows_in, (pa.Array, pa.ChunkedArray)):
        rows_in = rows_in.to_numpy(zero_copy_only=False)
    rows = np.asarray(rows_in, dtype=np.int64).reshape(-1)
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise UdfError(f"table function {name} returned row numbers outside the batch of {n} rows")
    if len(rows) > 1 and (rows[1:] < rows[:-1]).any():
        order = np.argsort(rows, kind="stable")
    else:
        order = None
    columns_in = list(columns_in)
    if len(columns_in) != len(types):
        raise UdfError(f"table function {name} returned {len(columns_in)} columns; it has {len(types)}")
    columns = []
    for j, (values, t) in enumerate(zip(columns_in, types, strict=True)):
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        try:
            values = values if isinstance(values, pa.Array) else pa.array(values, type=t)
            values = values if values.type == t else pc.cast(values, t)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise UdfError(f"table function {name} returned values of column {j + 1} that are not {t}: "
                           f"{exc}") from exc
        if len(values) != len(rows):
            raise UdfError(f"table function {name} returned {len(values)} values of column {j + 1} for "
                           f"{len(rows)} rows")
        columns.append(values)
    if order is not None:
        rows = rows[order]
        picks = pa.array(order)
        columns = [pc.take(c, picks) for c in columns]
    return rows, columns

