"""``pyarrow.compute`` without its import cost: the runtime's way to call Arrow kernels.

``import pyarrow.compute`` builds a Python wrapper, with a generated docstring, for each of the
several hundred registered kernels — about 75 ms on a small machine, more than everything else
a compiled pipeline needs to start. This module gives the same call forms, built on first use
of each name from the registry of ``pyarrow._compute`` (which ``pyarrow`` loads anyway)::

    from clink.runtime import compute as pc
    pc.multiply(price, pa.scalar(0.908))        # positional arguments, then options
    pc.round(x, ndigits=2)                      # option keywords
    pc.cast(x, pa.int64(), safe=False)

Names that are not kernels (``field``, ``scalar``, ``top_k_unstable``, …) come from
``pyarrow.compute`` itself, imported the first time one is asked for. Runtime code uses this
module, never ``pyarrow.compute`` directly, and calls kernels through it rather than through
the Arrow methods that import ``pyarrow.compute`` behind the scenes (``Array.cast``,
``.filter``, ``.take``, ``.sort``, ``.unique``, ``.is_null``, ``.fill_null``, arithmetic
operators on arrays).

>>> import pyarrow as pa
>>> multiply(pa.array([1, 2]), 3).to_pylist()
[3, 6]
>>> cast(pa.array([1.9]), pa.int64(), safe=False).to_pylist()
[1]
"""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyarrow import _compute
from pyarrow._compute import CastOptions, Expression, call_function, function_registry

#: Python keywords that ``pyarrow.compute`` spells with a trailing underscore.
_REWRITES = {"and_": "and", "or_": "or"}
_REGISTRY = function_registry()


#: Python values Arrow would type by inference, typed here instead: ``pa.scalar(0)`` without a
#: type tries (and fails) to import an optional date library on every call, ~25x the cost of a
#: typed scalar — significant for a kernel called per batch with a literal argument.
_PYTHON_TYPES = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary()}


def _typed(args: tuple) -> tuple:
    # builtins.any: this module's own globals gain an ``any`` kernel once someone asks for it.
    if not builtins.any(type(a) in _PYTHON_TYPES for a in args):
        return args
    out = []
    for a in args:
        t = _PYTHON_TYPES.get(type(a))
        if t is not None and (t is not _PYTHON_TYPES[int] or -(2**63) <= a < 2**63):
            a = pa.scalar(a, t)
        out.append(a)
    return tuple(out)


def _wrap(exposed: str, func: Any) -> Callable[..., Any]:
    name = func.name
    arity = func.arity
    class_name = func._doc.options_class
    options_class = getattr(_compute, class_name) if class_name else None

    if options_class is None:
        def call(*args: Any, memory_pool: Any = None) -> Any:
            if arity is not Ellipsis and len(args) != arity:
                raise TypeError(f"{exposed} takes {arity} positional argument(s), but {len(args)} were given")
            if args and isinstance(args[0], Expression):
                return Expression._call(name, list(args))
            return func.call(_typed(args), None, memory_pool)
    else:
        def call(*args: Any, memory_pool: Any = None, options: Any = None, **kwargs: Any) -> Any:
            option_args: tuple = ()
            if arity is not Ellipsis:
                if len(args) < arity:
                    raise TypeError(f"{exposed} takes {arity} positional argument(s), but {len(args)} were given")
                args, option_args = args[:arity], args[arity:]
            if option_args or kwargs:
                if options is not None:
                    raise TypeError(f"{exposed!r} called with both an 'options' argument and option values")
                options = options_class(*option_args, **kwargs)
            elif isinstance(options, dict):
                options = options_class(**options)
            if args and isinstance(args[0], Expression):
                return Expression._call(name, list(args), options)
            return func.call(_typed(args), options, memory_pool)

    call.__name__ = call.__qualname__ = exposed
    call.__doc__ = f"The Arrow kernel {name!r} (see pyarrow.compute.{exposed})."
    return call


def cast(arr: Any, target_type: Any = None, safe: bool | None = None, options: Any = None,
         memory_pool: Any = None) -> Any:
    """``pyarrow.compute.cast``: ``safe=False`` allows overflow and truncation."""
    if options is None:
        target_type = pa.lib.ensure_type(target_type)
        options = CastOptions.unsafe(target_type) if safe is False else CastOptions.safe(target_type)
    return call_function("cast", [arr], options, memory_pool)


def take(data: Any, indices: Any, *, boundscheck: bool = True, memory_pool: Any = None) -> Any:
    """``pyarrow.compute.take``: rows (or values) of ``data`` at ``indices``."""
    return call_function("take", [data, indices], _compute.TakeOptions(boundscheck=boundscheck), memory_pool)


def fill_null(values: Any, fill_value: Any) -> Any:
    """``pyarrow.compute.fill_null``: each null of ``values`` replaced by ``fill_value``."""
    if not isinstance(fill_value, (pa.Array, pa.ChunkedArray, pa.Scalar)):
        fill_value = pa.scalar(fill_value, type=values.type)
    elif values.type != fill_value.type:
        fill_value = pa.scalar(fill_value.as_py(), type=values.type)
    return call_function("coalesce", [values, fill_value])


def __getattr__(exposed: str) -> Any:
    if exposed.startswith("__"):
        raise AttributeError(exposed)
    value = getattr(_compute, exposed, None)
    if value is None:
        try:
            func = _REGISTRY.get_function(_REWRITES.get(exposed, exposed))
        except (KeyError, pa.ArrowKeyError):
            func = None
        if func is not None and func.kind != "hash_aggregate":
            value = _wrap(exposed, func)
        else:
            # Not a kernel: one of pyarrow.compute's own helpers (field, scalar, top_k_unstable…).
            value = getattr(importlib.import_module("pyarrow.compute"), exposed)
    globals()[exposed] = value
    return value
