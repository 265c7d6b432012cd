"""Records: value classes whose methods are written the first time they are used.

A record is a class of named fields with a generated ``__init__``, ``__repr__``, ``__eq__`` and
``__hash__``, like an attrs or dataclasses class. The difference is when those methods are made.
attrs and dataclasses write each method's source and ``compile()`` it while the class statement
runs, about 0.7 ms a class; the compiler and the plan define some 200 such classes, so a process
that compiles one query paid ~150 ms before its first token was read. Here the class statement
only records its fields and puts a small descriptor in each method's place; the descriptor
writes the method on its first lookup and replaces itself with it, so a class pays for the
methods it uses, when it uses them, and afterwards calls them at the same speed as attrs'.

    @record(kw_only=True)
    class Column:
        name: str
        nullable: bool = True
        tags: list[str] = field(factory=list)

Options: ``frozen`` (default True: assignment raises :class:`FrozenError`; a frozen record that
compares equal hashes equal), ``kw_only`` (every field keyword-only), ``eq`` (False keeps identity
equality), ``init``. Fields (:func:`field`): ``default``, ``factory``, ``eq`` and ``repr`` (left out
of equality and hashing, or of the repr), ``kw_only``, ``converter`` (applied to the argument),
``validator`` (called as ``validator(instance, field, value)`` once every field is set). A
``__post_init__`` method runs at the end of ``__init__``. Methods written in the class body are kept.

Every record has ``__slots__`` (no ``__dict__``), pickles and copies, and supports ``match``
keyword patterns. A ``functools.cached_property`` keeps its value in a slot of its own name (so
a subclass cannot reach a base's cached value through ``super()``). :func:`fields`,
:func:`evolve` and :func:`has` stand for ``attrs.fields``, ``attrs.evolve`` and ``attrs.has``.
"""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Field", "FrozenError", "evolve", "field", "fields", "has", "record"]

T = TypeVar("T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenError(AttributeError):
    """Assignment to a field of a frozen record."""


class Field:
    """One field of a record: its name and how it is initialised, compared and shown."""

    __slots__ = ("converter", "default", "eq", "factory", "init", "kw_only", "name", "repr", "validator")

    def __init__(self, *, default: Any = MISSING, factory: Callable[[], Any] | None = None, eq: bool = True,
                 repr: bool = True, kw_only: bool | None = None, converter: Callable[[Any], Any] | None = None,
                 validator: Callable[[Any, Field, Any], None] | None = None, init: bool = True,
                 name: str = "") -> None:
        if default is not MISSING and factory is not None:
            raise TypeError("a field takes a default or a factory, not both")
        self.name = name
        self.default = default
        self.factory = factory
        self.eq = eq
        self.repr = repr
        self.kw_only = kw_only
        self.converter = converter
        self.validator = validator
        self.init = init

    def named(self, name: str, kw_only: bool) -> Field:
        """This field's options for the field ``name`` of a class whose default is ``kw_only``."""
        named = copy.copy(self)
        named.name = name
        if named.kw_only is None:
            named.kw_only = kw_only
        return named

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING or self.factory is not None

    def __repr__(self) -> str:
        return f"Field(name={self.name!r})"


def field(*, default: Any = MISSING, factory: Callable[[], Any] | None = None, eq: bool = True, repr: bool = True,
          kw_only: bool | None = None, converter: Callable[[Any], Any] | None = None,
          validator: Callable[[Any, Field, Any], None] | None = None, init: bool = True) -> Any:
    """A field's options, assigned in the class body: ``tags: list[str] = field(factory=list)``."""
    return Field(default=default, factory=factory, eq=eq, repr=repr, kw_only=kw_only, converter=converter,
                 validator=validator, init=init)


def fields(cls: type) -> tuple[Field, ...]:
    """The fields of a record class, base classes' first."""
    try:
        return cls.__record_fields__  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"{cls!r} is not a record class") from None


def has(cls: type) -> bool:
    return isinstance(cls, type) and hasattr(cls, "__record_fields__")


def evolve(instance: T, **changes: Any) -> T:
    """A copy of ``instance`` with ``changes`` applied, made through ``__init__`` (so converters and validators run)."""
    cls = type(instance)
    args = {}
    for f in fields(cls):
        if f.init:
            args[f.name] = changes.pop(f.name) if f.name in changes else getattr(instance, f.name)
    if changes:
        raise TypeError(f"{cls.__qualname__} has no field {', '.join(sorted(changes))}")
    return cls(**args)


def _is_class_var(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


@typing.dataclass_transform(field_specifiers=(field, Field), frozen_default=True)
def record(cls: type[T] | None = None, /, *, frozen: bool = True, kw_only: bool = False, eq: bool = True,
           init: bool = True) -> Any:
    """Make ``cls`` a record (see the module's text); used as ``@record`` or ``@record(kw_only=True)``."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, frozen=frozen, kw_only=kw_only, eq=eq, init=init)

    return wrap if cls is None else wrap(cls)


def _make(cls: type, *, frozen: bool, kw_only: bool, eq: bool, init: bool) -> type:
    own = cls.__dict__
    inherited: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__record_fields__", ()):
            inherited[f.name] = f
    declared: dict[str, Field] = {}
    for name, annotation in own.get("__annotations__", {}).items():
        if _is_class_var(annotation):
            continue
        value = own.get(name, MISSING)
        spec = value if isinstance(value, Field) else Field(default=value)
        declared[name] = spec.named(name, kw_only)
    all_fields = {**inherited, **declared}
    positional_default = None
    for f in all_fields.values():
        if not f.init or f.kw_only:
            continue
        if f.has_default:
            positional_default = f.name
        elif positional_default is not None:
            raise TypeError(f"{cls.__qualname__}: field {f.name!r} without a default follows "
                            f"{positional_default!r}, which has one")

    namespace = {key: value for key, value in own.items() if key not in declared and key not in ("__dict__", "__weakref__")}
    # a cached_property needs an instance __dict__; here its value goes in a slot of its name,
    # filled by __getattr__ on the first read, after which reads are plain slot reads
    cached = {key: value.func for key, value in namespace.items() if isinstance(value, functools.cached_property)}
    for key in cached:
        del namespace[key]
    if cached:
        namespace["__record_cached__"] = {**getattr(cls, "__record_cached__", {}), **cached}
        namespace.setdefault("__getattr__", _cached_getattr)
    namespace["__qualname__"] = cls.__qualname__
    namespace["__slots__"] = tuple(name for name in declared if name not in inherited) + tuple(cached)
    namespace["__record_fields__"] = tuple(all_fields.values())
    namespace["__record_options__"] = (frozen, eq)
    namespace["__match_args__"] = tuple(f.name for f in all_fields.values() if f.init and not f.kw_only)
    made = []
    for method, wanted in (("__init__", init), ("__repr__", True), ("__eq__", eq)):
        if wanted and method not in own:
            namespace[method] = _Lazy(method)
            made.append(method)
    # a class body that defines __eq__ alone gets __hash__ = None from Python: not a hash of its own
    own_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if not own_hash:
        if eq and frozen:
            namespace["__hash__"] = _Lazy("__hash__")
            made.append("__hash__")
        elif eq:
            namespace["__hash__"] = None
    if frozen:
        namespace.setdefault("__setattr__", _frozen_setattr)
        namespace.setdefault("__delattr__", _frozen_delattr)
    namespace.setdefault("__getstate__", _getstate)
    namespace.setdefault("__setstate__", _setstate)
    new = type(cls)(cls.__name__, cls.__bases__, namespace)
    for method in made:
        new.__dict__[method].owner = new
    # methods of the class body that use super() or __class__ close over the class they were
    # defined in; point them at the class that replaces it
    for value in [*namespace.values(), *cached.values()]:
        function = getattr(value, "__func__", value)
        if isinstance(value, property):
            function = value.fget
        for cell in getattr(function, "__closure__", None) or ():
            try:
                if cell.cell_contents is cls:
                    cell.cell_contents = new
            except ValueError:  # an empty cell
                pass
    return new


def _cached_getattr(self: Any, name: str) -> Any:
    function = type(self).__record_cached__.get(name)
    if function is None:
        raise AttributeError(f"{type(self).__qualname__!r} object has no attribute {name!r}")
    value = function(self)
    object.__setattr__(self, name, value)
    return value


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenError(f"cannot assign to field {name!r} of a frozen {type(self).__qualname__}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r} of a frozen {type(self).__qualname__}")


def _getstate(self: Any) -> tuple:
    return tuple(getattr(self, f.name, MISSING) for f in type(self).__record_fields__)


def _setstate(self: Any, state: tuple) -> None:
    for f, value in zip(type(self).__record_fields__, state):
        if value is not MISSING:
            object.__setattr__(self, f.name, value)


class _Lazy:
    """Stands in a record class for one of its generated methods until the first lookup."""

    __slots__ = ("method", "owner")

    def __init__(self, method: str) -> None:
        self.method = method
        self.owner: type | None = None

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        cls = self.owner
        assert cls is not None
        function = _WRITERS[self.method](cls)
        setattr(cls, self.method, function)
        return function if instance is None else function.__get__(instance, owner)


def _define(cls: type, name: str, source: str, env: dict[str, Any]) -> Callable:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<record {cls.__module__}.{cls.__qualname__}.{name}>", "exec"), env, namespace)  # noqa: S102 - methods written here from field names
    function = namespace[name]
    function.__qualname__ = f"{cls.__qualname__}.{name}"
    function.__module__ = cls.__module__
    return function


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None] | None:
    """The slot's own setter (a third faster than ``object.__setattr__``), if ``name`` is a slot."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return found.__set__ if isinstance(found, types.MemberDescriptorType) else None
    return None


def _write_init(cls: type) -> Callable:
    frozen = cls.__record_options__[0]
    env: dict[str, Any] = {"MISSING": MISSING, "_set": object.__setattr__}
    positional, keyword, body, checks = [], [], [], []
    for i, f in enumerate(cls.__record_fields__):
        if f.init:
            if f.factory is not None:
                env[f"_factory_{i}"] = f.factory
                parameter = f"{f.name}=MISSING"
                body.append(f"    if {f.name} is MISSING:\n        {f.name} = _factory_{i}()")
            elif f.default is not MISSING:
                env[f"_default_{i}"] = f.default
                parameter = f"{f.name}=_default_{i}"
            else:
                parameter = f.name
            (keyword if f.kw_only else positional).append(parameter)
            value = f.name
        elif f.factory is not None:
            env[f"_factory_{i}"] = f.factory
            value = f"_factory_{i}()"
        elif f.default is not MISSING:
            env[f"_default_{i}"] = f.default
            value = f"_default_{i}"
        else:
            continue
        if f.converter is not None:
            env[f"_convert_{i}"] = f.converter
            value = f"_convert_{i}({value})"
        if not frozen:
            body.append(f"    self.{f.name} = {value}")
        elif (setter := _slot_setter(cls, f.name)) is not None:
            env[f"_set_{i}"] = setter
            body.append(f"    _set_{i}(self, {value})")
        else:
            body.append(f"    _set(self, {f.name!r}, {value})")
        if f.validator is not None:
            env[f"_validate_{i}"] = f.validator
            env[f"_field_{i}"] = f
            checks.append(f"    _validate_{i}(self, _field_{i}, self.{f.name})")
    post = ["    self.__post_init__()"] if hasattr(cls, "__post_init__") else []
    parameters = ["self", *positional] + (["*", *keyword] if keyword else [])
    lines = body + checks + post or ["    pass"]
    source = f"def __init__({', '.join(parameters)}):\n" + "\n".join(lines) + "\n"
    return _define(cls, "__init__", source, env)


def _write_repr(cls: type) -> Callable:
    shown = [f.name for f in cls.__record_fields__ if f.repr]
    parts = ", ".join(f"{name}={{self.{name}!r}}" for name in shown)
    source = f"def __repr__(self):\n    return f'{{type(self).__qualname__}}({parts})'\n"
    return _define(cls, "__repr__", source, {})


def _compared(cls: type) -> list[str]:
    return [f.name for f in cls.__record_fields__ if f.eq]


def _write_eq(cls: type) -> Callable:
    # a chain of ==, not a comparison of two tuples: a third faster, and no tuples built
    compared = " and\n        ".join(f"self.{n} == other.{n}" for n in _compared(cls)) or "True"
    source = ("def __eq__(self, other):\n"
              "    if other.__class__ is not self.__class__:\n"
              "        return NotImplemented\n"
              f"    return (\n        {compared}\n    )\n")
    return _define(cls, "__eq__", source, {})


def _write_hash(cls: type) -> Callable:
    values = "".join(f"self.{n}, " for n in _compared(cls))
    source = f"def __hash__(self):\n    return hash((_salt, {values}))\n"
    return _define(cls, "__hash__", source, {"_salt": cls.__qualname__})


_WRITERS: dict[str, Callable[[type], Callable]] = {
    "__init__": _write_init, "__repr__": _write_repr, "__eq__": _write_eq, "__hash__": _write_hash}
