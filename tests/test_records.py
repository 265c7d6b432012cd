"""clink.records against the standard library's dataclasses as the oracle, plus what only records do.

The property builds the same class twice from a drawn description, once as a dataclass and once
as a record, and checks that construction, defaults, equality, hashing, repr, replace/evolve,
freezing and pickling agree, including through a subclass that adds fields.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink import records

VALUES = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none(), st.tuples(st.integers(0, 2)))


@st.composite
def class_specs(draw):
    n = draw(st.integers(0, 5))
    fields = []
    for i in range(n):
        fields.append({"name": f"f{i}", "kind": draw(st.sampled_from(["required", "default", "factory"])),
                       "default": draw(VALUES), "eq": draw(st.booleans()), "repr": draw(st.booleans())})
    return {"fields": fields, "frozen": draw(st.booleans()), "kw_only": draw(st.booleans()),
            "extra": draw(st.lists(st.sampled_from(["required", "default"]), max_size=2))}


def _build(spec, *, as_record: bool, base=None, fields=None, name="Thing"):
    fields = spec["fields"] if fields is None else fields
    namespace: dict = {"__annotations__": {}, "__module__": __name__, "__qualname__": name}
    for f in fields:
        namespace["__annotations__"][f["name"]] = "object"
        if as_record:
            options = {"eq": f["eq"], "repr": f["repr"]}
            if f["kind"] == "default":
                options["default"] = f["default"]
            elif f["kind"] == "factory":
                options["factory"] = functools.partial(tuple, [f["default"]])
            namespace[f["name"]] = records.field(**options)
        else:
            options = {"compare": f["eq"], "repr": f["repr"]}
            if f["kind"] == "default":
                options["default"] = f["default"]
            elif f["kind"] == "factory":
                options["default_factory"] = functools.partial(tuple, [f["default"]])
            namespace[f["name"]] = dataclasses.field(**options)
    cls = type(name, (base,) if base else (), namespace)
    if as_record:
        return records.record(frozen=spec["frozen"], kw_only=spec["kw_only"])(cls)
    return dataclasses.dataclass(frozen=spec["frozen"], kw_only=spec["kw_only"])(cls)


def _both(build):
    outcomes = []
    for as_record in (False, True):
        try:
            outcomes.append(build(as_record))
        except TypeError:
            outcomes.append(TypeError)
    return outcomes


def _make(cls, spec_fields, values, kw_only):
    """An instance from the required fields and every other optional one, positionally where allowed."""
    chosen = {f["name"]: values[i % len(values)] for i, f in enumerate(spec_fields) if f["kind"] == "required"
              or i % 2}
    if kw_only or list(chosen) != [f["name"] for f in spec_fields][:len(chosen)]:
        return cls(**chosen)
    return cls(*chosen.values())


def _compare(d, r):
    assert repr(d) == repr(r)
    assert [f.name for f in dataclasses.fields(d)] == [f.name for f in records.fields(type(r))]
    for f in dataclasses.fields(d):
        assert getattr(d, f.name) == getattr(r, f.name)


@settings(max_examples=300, deadline=None)
@given(class_specs(), st.lists(VALUES, min_size=1, max_size=4), st.lists(VALUES, min_size=1, max_size=4))
def test_records_behave_as_dataclasses(spec, values, other_values):
    dc, rc = _both(lambda as_record: _build(spec, as_record=as_record))
    assert (dc is TypeError) == (rc is TypeError)
    if dc is TypeError:
        return
    assert records.has(rc) and not records.has(dc)
    d1, r1 = _make(dc, spec["fields"], values, spec["kw_only"]), _make(rc, spec["fields"], values, spec["kw_only"])
    d2, r2 = (_make(dc, spec["fields"], other_values, spec["kw_only"]),
              _make(rc, spec["fields"], other_values, spec["kw_only"]))
    _compare(d1, r1)
    _compare(d2, r2)
    assert (d1 == d2) == (r1 == r2)
    assert (d1 != d2) == (r1 != r2)
    assert r1 == copy.copy(r1) == copy.deepcopy(r1)
    assert r1 != object()
    if spec["frozen"]:
        assert hash(r1) == hash(copy.deepcopy(r1))
        if r1 == r2:
            assert hash(r1) == hash(r2)
        for f in spec["fields"]:
            with pytest.raises(AttributeError):
                setattr(r1, f["name"], 1)
    else:
        with pytest.raises(TypeError):
            hash(r1)
        for f in spec["fields"]:
            setattr(d1, f["name"], 1)
            setattr(r1, f["name"], 1)
        _compare(d1, r1)
    if spec["fields"]:
        first = spec["fields"][0]["name"]
        _compare(dataclasses.replace(d2, **{first: "changed"}), records.evolve(r2, **{first: "changed"}))
    required = [f["name"] for f in spec["fields"] if f["kind"] == "required"]
    if required:
        for cls in (dc, rc):
            with pytest.raises(TypeError):
                cls()
    # a subclass that adds fields keeps the base's first
    extra = [{"name": f"g{i}", "kind": kind, "default": i, "eq": True, "repr": True}
             for i, kind in enumerate(spec["extra"])]
    dsub, rsub = _both(lambda as_record: _build(spec, as_record=as_record, base=rc if as_record else dc,
                                                fields=extra, name="Sub"))
    assert (dsub is TypeError) == (rsub is TypeError)
    if dsub is not TypeError:
        everything = spec["fields"] + extra
        _compare(_make(dsub, everything, values, spec["kw_only"]), _make(rsub, everything, values, spec["kw_only"]))


@records.record(kw_only=True)
class Shape:
    name: str = records.field(converter=str)
    sides: int = records.field(validator=lambda self, field, value: _positive(field, value))
    tags: list = records.field(factory=list, eq=False)

    @functools.cached_property
    def label(self) -> str:
        return f"{self.name}/{self.sides}"

    def describe(self) -> str:
        return f"a {self.label}"


def _positive(field, value):
    if value <= 0:
        raise ValueError(f"{field.name} must be positive")


@records.record(kw_only=True)
class Square(Shape):
    side: float = 1.0

    def describe(self) -> str:
        return "square: " + super().describe()


@records.record(frozen=False)
class Counter:
    n: int = 0

    def __post_init__(self) -> None:
        self.n += 1


def test_converters_validators_and_factories_run_in_init():
    shape = Shape(name=5, sides=3)
    assert shape.name == "5" and shape.tags == [] and shape.tags is not Shape(name=5, sides=3).tags
    with pytest.raises(ValueError, match="sides must be positive"):
        Shape(name="x", sides=0)
    with pytest.raises(ValueError):
        records.evolve(shape, sides=-1)
    with pytest.raises(TypeError, match="no field"):
        records.evolve(shape, colour="red")
    with pytest.raises(TypeError):
        Shape("x", 3)  # keyword-only


def test_cached_properties_live_in_slots_and_super_reaches_the_base():
    square = Square(name="sq", sides=4, side=2.0)
    assert not hasattr(square, "__dict__")
    assert square.label == "sq/4" and square.label is square.label
    assert square.describe() == "square: a sq/4"
    assert records.evolve(square, sides=5).label == "sq/5"
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        square.missing  # noqa: B018
    assert [f.name for f in records.fields(Square)] == ["name", "sides", "tags", "side"]
    assert Square(name="a", sides=1, tags=[1]) == Square(name="a", sides=1, tags=[2])
    again = pickle.loads(pickle.dumps(square))
    assert again == square and again.tags == square.tags and again.label == "sq/4"


def test_methods_are_written_on_first_use_and_then_are_plain_functions():
    @records.record
    class Point:
        x: int
        y: int = 0

    assert type(Point.__dict__["__eq__"]).__name__ == "_Lazy"
    assert Point(1) == Point(1, 0) and Point(1) != Point(2)
    assert type(Point.__dict__["__eq__"]).__name__ == "function"
    assert Point.__eq__.__qualname__.endswith("Point.__eq__")
    match Point(3, 4):
        case Point(x, y):
            assert (x, y) == (3, 4)
    assert {Point(1, 2): "a"}[Point(1, 2)] == "a"


def test_post_init_and_mutable_records():
    counter = Counter()
    assert counter.n == 1
    counter.n = 5
    assert counter == Counter(4)


def test_a_required_positional_field_after_a_default_is_refused():
    with pytest.raises(TypeError, match="without a default follows"):
        @records.record
        class Bad:
            a: int = 1
            b: int


def test_records_import_only_the_standard_library():
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import clink.records; "
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['clink']"


def test_a_record_that_defines_eq_alone_still_hashes_its_fields_as_dataclasses_do():
    @records.record
    class Loose:
        x: int
        y: int

        def __eq__(self, other):
            return isinstance(other, Loose) and self.x == other.x

    @dataclasses.dataclass(frozen=True)
    class Oracle:
        x: int
        y: int

        def __eq__(self, other):
            return isinstance(other, Oracle) and self.x == other.x

    assert Loose(1, 2) == Loose(1, 3)
    assert hash(Loose(1, 2)) == hash(Loose(1, 2)) and hash(Oracle(1, 2)) == hash(Oracle(1, 2))
    assert (hash(Loose(1, 2)) == hash(Loose(1, 3))) == (hash(Oracle(1, 2)) == hash(Oracle(1, 3)))


def test_a_cached_property_that_calls_super_reaches_the_base():
    @records.record
    class Base:
        x: int

        def size(self) -> int:
            return self.x

    @records.record
    class Child(Base):
        @functools.cached_property
        def scaled(self) -> int:
            return super().size() * 10

    assert Child(2).scaled == 20
