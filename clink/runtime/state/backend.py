"""The keyed state contract: what an operator may keep per key, and how it is checkpointed.

A ``StateBackend`` opens one ``OperatorState`` per operator, from descriptors that declare each
state's kind, name and Arrow types. Two kinds exist:

- **value state** — one value per key (``ValueState``), with batch forms ``get_many`` /
  ``put_many`` that take key columns and return or take a value column: the forms operators use;
- **table state** — Arrow rows in numbered buckets (``TableState``), each row carrying its key
  group: the form of operators that work on whole batches, such as window aggregation, whose
  buckets are windows and whose rows are partial aggregates per key.

A key is a tuple of scalar values (int, float, bool, str, bytes, Decimal, date, datetime or None)
matching the descriptor's ``key_schema``; where the schema has one field, the bare value may stand
for the 1-tuple. Equal keys are the same key: ``-0.0`` is ``0.0``, every NaN is one key, NULL is
a key like any other. Values are Python values as ``pyarrow`` gives them (see ``codec``).

All state is partitioned into key groups (``keygroups.key_groups``, ``max_parallelism`` of them,
128 by default): ``OperatorState.entries(g)`` lists one group, and ``restore`` can take only some
groups, which is how state is split and merged when parallelism changes.

Checkpoints use three calls, at a barrier for ``checkpoint_id``, in this order:

1. ``commit(checkpoint_id)`` — make the state as it is now the backend's durable state, in one
   step, and remember the id (``committed_checkpoint``); for ``memory`` only the id;
2. ``snapshot(directory)`` — write a self-contained copy of the state as files and return them
   (the checkpoint's manifest checksums them);
3. after a failure, ``restore(files)`` on a freshly opened state — or ``restore(files,
   key_groups=...)`` on each task of a rescaled job.

Every backend passes ``tests/contract/test_state_backends.py``; ``docs/state.md`` describes them.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import pyarrow as pa

from clink import records
from clink.errors import ClinkError
from clink.runtime import compute as pc
from clink.runtime.state import codec
from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM, key_groups

__all__ = [
    "Counted",
    "IncompatibleState",
    "Key",
    "KeyColumns",
    "OperatorState",
    "PrefixedKeys",
    "StateBackend",
    "StateDescriptor",
    "TableState",
    "TableStateDescriptor",
    "ValueState",
    "ValueStateDescriptor",
]


class PrefixedKeys:
    """Key columns whose leading fields (those that choose the key group) repeat: ``prefix`` holds
    those fields' values once per distinct value, ``ids`` each row's position in ``prefix``, and
    ``rest`` the other fields row by row. A state whose descriptor groups by the prefix
    (``group_fields``) may find each distinct prefix once instead of once per row."""

    __slots__ = ("ids", "memo", "prefix", "rest")

    def __init__(self, prefix: Sequence[pa.Array], ids: np.ndarray, rest: Sequence[pa.Array],
                 memo: dict[Any, Any] | None = None) -> None:
        self.prefix = list(prefix)
        self.ids = ids
        self.rest = list(rest)
        #: What a backend worked out from ``prefix`` alone (its hashes), for the next state
        #: given the same prefix: keys built over the same ``prefix`` arrays may share one.
        self.memo: dict[Any, Any] = {} if memo is None else memo

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self) -> list[pa.Array]:
        """The key columns row by row."""
        at = pa.array(self.ids)
        return [*(p.take(at) for p in self.prefix), *self.rest]


@records.record(eq=False)
class Counted:
    """What ``ValueState.add_counts`` did, per distinct key of the batch: ``rows`` one of the
    key's rows, ``before`` and ``after`` its fields (one int64 column each; 0 for a key that
    held no value, and all 0 for a key that holds none now)."""

    rows: np.ndarray
    before: np.ndarray
    after: np.ndarray


def counter_deltas(descriptor: ValueStateDescriptor, deltas: np.ndarray, rows: int) -> np.ndarray:
    """``deltas`` checked for ``ValueState.add_counts``: the value must be a struct of int64
    fields, and ``deltas`` one int64 per field for each of the ``rows`` keys."""
    value_type = descriptor.value_type
    if not pa.types.is_struct(value_type) or any(f.type != pa.int64() for f in value_type):
        raise TypeError(f"add_counts needs a value of int64 fields, state {descriptor.name!r} holds {value_type}")
    deltas = np.asarray(deltas)
    if deltas.shape != (rows, value_type.num_fields) or not np.issubdtype(deltas.dtype, np.integer):
        raise ValueError(f"add_counts needs {rows} rows of {value_type.num_fields} integer deltas, "
                         f"got shape {deltas.shape} of {deltas.dtype}")
    return deltas.astype(np.int64, copy=False)


def distinct_rows(columns: Sequence[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """A dense id per row, equal exactly for rows whose keys are equal (``-0.0`` equal to
    ``0.0``, NaN to NaN, NULL to NULL), and one row of each id."""
    n = len(columns[0])
    ids = np.zeros(n, dtype=np.int64)
    cardinality = 1
    for col in columns:
        if pa.types.is_floating(col.type):
            col = pc.add(col, pa.scalar(0.0, col.type))  # -0.0 + 0.0 is 0.0
            nan = pc.is_nan(col)
            if pc.any(nan).as_py():
                col = pc.if_else(nan, pa.scalar(math.nan, col.type), col)
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        size = max(len(encoded.dictionary), 1)
        if cardinality * size >= 2**62:
            _, ids = np.unique(ids, return_inverse=True)
            ids = ids.reshape(-1)
            cardinality = int(ids.max()) + 1 if n else 1
        ids = ids * size + encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        cardinality *= size
    inverse = np.unique(ids, return_inverse=True)[1].reshape(-1)
    # A row of each id (numpy's return_index costs more than the inverse itself).
    rows = np.empty(int(inverse.max()) + 1 if n else 0, dtype=np.int64)
    rows[inverse] = np.arange(n, dtype=np.int64)
    return inverse, rows


def sum_by_id(ids: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """The sums of the rows of ``values`` (int64, one column per field) per id in ``0..size-1``,
    exactly."""
    if not len(values):
        return np.zeros((size, values.shape[1]), dtype=np.int64)
    out = np.zeros((size, values.shape[1]), dtype=np.int64, order="F")
    if float(np.abs(values).max()) * len(values) < 2.0**53:
        # bincount adds in float64, exact while every partial sum is below 2**53.
        for j in range(values.shape[1]):
            out[:, j] = np.bincount(ids, weights=values[:, j], minlength=size)
        return out
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out[ordered[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


#: A key: one value per field of the key schema.
Key = tuple[Any, ...]
#: Keys of a batch: one array per key field (or the one array of a one-field key), or
#: ``PrefixedKeys`` where the fields that choose the key group repeat.
KeyColumns = pa.Array | pa.ChunkedArray | Sequence[pa.Array | pa.ChunkedArray] | PrefixedKeys

#: The column of table state that holds each row's key group.
KEY_GROUP = "_key_group"
#: The column that names a row's bucket in a snapshot of table state.
NAMESPACE = "_namespace"
#: Column names that snapshots use for their own purposes; key fields may not take them.
RESERVED_NAMES = frozenset({KEY_GROUP, "_value", NAMESPACE})


class IncompatibleState(ClinkError):
    """Stored state does not match what the operator declares (a state's kind or types changed,
    or files from another operator or format were given to ``restore``)."""

    exit_code = 1


# -- descriptors ----------------------------------------------------------------------------------


def _to_key_schema(value: pa.Schema | Sequence[tuple[str, pa.DataType]] | Sequence[pa.Field]) -> pa.Schema:
    return value if isinstance(value, pa.Schema) else pa.schema(value)


def _check_key_schema(instance: object, attribute: records.Field, schema: pa.Schema) -> None:
    if len(schema) == 0:
        raise ValueError(f"{type(instance).__name__}: a key schema needs at least one field")
    for f in schema:
        if f.name in RESERVED_NAMES:
            raise ValueError(f"key field {f.name!r} uses a reserved name; rename it (reserved: "
                             f"{sorted(RESERVED_NAMES)})")
        t = f.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_decimal(t) or pa.types.is_temporal(t)
                or pa.types.is_fixed_size_binary(t)):
            raise ValueError(f"key field {f.name!r} has type {t}; keys are scalars (numbers, strings, "
                             "binary, booleans, decimals, dates, times, timestamps)")


def _check_name(instance: object, attribute: records.Field, name: str) -> None:
    if not name:
        raise ValueError(f"{type(instance).__name__} needs a non-empty name")


def _check_group_fields(instance: ValueStateDescriptor, attribute: records.Field, n: int | None) -> None:
    if n is not None and not 1 <= n <= len(instance.key_schema):
        raise ValueError(f"group_fields must be between 1 and the {len(instance.key_schema)} key field(s), got {n}")


@records.record
class ValueStateDescriptor:
    """One value of ``value_type`` per key of ``key_schema``.

    A key's key group is that of its whole tuple, or, with ``group_fields`` = n, that of its
    first n fields: the keys that share those fields then stay together in one key group
    whatever their other fields (how a COUNT(DISTINCT) files its (key, value) pairs under the
    key's group, so that a rescale moves a key's values with it)."""

    name: str = records.field(validator=_check_name)
    key_schema: pa.Schema = records.field(converter=_to_key_schema, validator=_check_key_schema)
    value_type: pa.DataType
    group_fields: int | None = records.field(default=None, validator=_check_group_fields, kw_only=True)

    kind = "value"

    def signature(self) -> str:
        """The kind and types, as stored with the data and compared on restore."""
        grouped = "" if self.group_fields is None else f" grouped by {self.group_fields}"
        return f"value key=<{_schema_text(self.key_schema)}>{grouped} value={self.value_type}"


def _check_table_schema(instance: object, attribute: records.Field, schema: pa.Schema) -> None:
    index = schema.get_field_index(KEY_GROUP)
    if index < 0 or schema.field(index).type != pa.int32():
        raise ValueError(f"table state needs a {KEY_GROUP!r} column of type int32, got schema <{_schema_text(schema)}>")
    if NAMESPACE in schema.names:
        raise ValueError(f"table state column {NAMESPACE!r} is a reserved name")


@records.record
class TableStateDescriptor:
    """Rows of ``schema`` in buckets numbered by an int64 (the namespace); ``schema`` has a
    ``_key_group`` int32 column that holds each row's key group."""

    name: str = records.field(validator=_check_name)
    schema: pa.Schema = records.field(converter=_to_key_schema, validator=_check_table_schema)

    kind = "table"

    def signature(self) -> str:
        return f"table <{_schema_text(self.schema)}>"


StateDescriptor = ValueStateDescriptor | TableStateDescriptor


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


# -- state handles --------------------------------------------------------------------------------


class ValueState(abc.ABC):
    """One value per key. Storing ``None`` deletes the key (there is no stored NULL), so a missing
    key and a NULL read alike, in the scalar and the batch forms."""

    descriptor: ValueStateDescriptor

    @abc.abstractmethod
    def get(self, key: Key | Any) -> Any:
        """The value of ``key``, or None."""

    @abc.abstractmethod
    def put(self, key: Key | Any, value: Any) -> None:
        """Set the value of ``key``; ``None`` deletes it."""

    @abc.abstractmethod
    def delete(self, key: Key | Any) -> None:
        """Remove ``key``; a missing key is not an error."""

    @abc.abstractmethod
    def get_many(self, keys: KeyColumns) -> pa.Array:
        """The value of each row's key as an array of ``value_type``, NULL where there is none.

        ``keys`` holds one column per key field (a single array for a one-field key), cast to the
        key schema's types if they differ, or is a ``PrefixedKeys``. Rows with equal keys read
        the same value.
        """

    @abc.abstractmethod
    def put_many(self, keys: KeyColumns, values: pa.Array | pa.ChunkedArray) -> None:
        """Set each row's key to the row's value, in row order (the last row of a key wins); a
        NULL value deletes the key."""

    def add_counts(self, keys: KeyColumns, deltas: np.ndarray) -> Counted:
        """For a value of int64 fields only (counters): add each row's ``deltas`` (rows ×
        fields, int64) to its key's fields, and delete the keys whose fields are then all 0. A
        key that holds no value, or a NULL field, counts from 0; the rows of one key add up.
        Returns, per distinct key of the batch, one of its rows and its fields before and after.

        This form reads and writes each key once (``get_many``, then ``put_many``); a backend
        may do it in one pass."""
        columns = KeyHelper(self.descriptor.key_schema, DEFAULT_MAX_PARALLELISM,
                            self.descriptor.group_fields).columns(keys)
        deltas = counter_deltas(self.descriptor, deltas, len(columns[0]))
        if not len(deltas):
            return Counted(np.zeros(0, dtype=np.int64), deltas, deltas)
        ids, first = distinct_rows(columns)
        sums = sum_by_id(ids, deltas, len(first))
        at = pa.array(first)
        picked = [c.take(at) for c in columns]
        old = self.get_many(picked)
        held = old.is_valid().to_numpy(zero_copy_only=False)
        before = np.stack([np.where(held, f.fill_null(0).to_numpy(zero_copy_only=False), 0)
                           for f in old.flatten()], axis=1).astype(np.int64)
        after = before + sums
        keep = (after != 0).any(axis=1)
        if keep.any() or held.any():
            value_type = self.descriptor.value_type
            fields = [pa.array(after[:, j]) for j in range(after.shape[1])]
            self.put_many(picked, pa.StructArray.from_arrays(fields, fields=list(value_type), mask=pa.array(~keep)))
        return Counted(first, before, after)


class TableState(abc.ABC):
    """Arrow tables in buckets named by an int64 namespace (for windows: the window's end).

    A bucket holds the rows added to it, in the order added; it exists while it holds rows.
    Tables given to ``add`` / ``replace`` must have the descriptor's column names and types
    (castable types are cast); the state may keep them as they are, so do not mutate them.
    """

    descriptor: TableStateDescriptor
    #: The most bytes a caller that reads its buckets whole should keep in one bucket, or None for
    #: no bound. A backend that keeps buckets on disk reads a bucket whole into memory, so a
    #: caller that grows buckets by merging them (``KeyedRows``) stops at this size.
    bucket_bytes: int | None = None

    @abc.abstractmethod
    def add(self, namespace: int, table: pa.Table) -> None:
        """Append the rows of ``table`` to bucket ``namespace``."""

    @abc.abstractmethod
    def get(self, namespace: int) -> pa.Table | None:
        """Every row of bucket ``namespace`` in the order added, or None if it holds none."""

    @abc.abstractmethod
    def take(self, namespace: int) -> pa.Table | None:
        """Remove bucket ``namespace`` and return its rows (as ``get``)."""

    def replace(self, namespace: int, table: pa.Table) -> None:
        """Make ``table`` the whole content of bucket ``namespace`` (an empty table removes it)."""
        self.take(namespace)
        self.add(namespace, table)

    #: The namespaces of the buckets that hold rows, ascending (kept up to date by the backend).
    ordered: list[int]

    def namespaces(self, *, after: int | None = None, until: int | None = None) -> list[int]:
        """The buckets that hold rows, ascending; only those ``> after`` and ``<= until`` if given."""
        return namespaces_between(self.ordered, after, until)

    @abc.abstractmethod
    def num_rows(self, namespace: int | None = None) -> int:
        """Rows in bucket ``namespace``, or in all buckets."""

    @abc.abstractmethod
    def parts(self, namespace: int) -> int:
        """How many tables bucket ``namespace`` was built from since it was last replaced (the
        caller's cue to compact it)."""

    @abc.abstractmethod
    def memory_bytes(self) -> int:
        """Bytes of this state held in memory now (for a durable backend, what is not yet written
        or is cached)."""


class OperatorState(abc.ABC):
    """The keyed state of one operator: its named states, and the checkpoint calls.

    Not thread-safe: one task owns it. Use as a context manager, or call ``close``.
    """

    operator_id: str
    max_parallelism: int
    descriptors: dict[str, StateDescriptor]

    @abc.abstractmethod
    def value_state(self, name: str) -> ValueState:
        """The value state declared as ``name``."""

    @abc.abstractmethod
    def table_state(self, name: str) -> TableState:
        """The table state declared as ``name``."""

    @abc.abstractmethod
    def entries(self, key_group: int) -> Iterator[tuple[str, Key, Any]]:
        """Every ``(state name, key, value)`` whose key is in ``key_group``, in no promised order.
        For table state the key is ``(namespace,)`` and the value a ``pa.Table`` of the bucket's
        rows of that key group (buckets without any are left out). Do not write to the state while
        iterating."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Remove every key of every state."""

    @abc.abstractmethod
    def commit(self, checkpoint_id: int) -> None:
        """Make the state as it is now the backend's durable state, in one step, and record
        ``checkpoint_id`` as ``committed_checkpoint``. A crash before it returns leaves the
        previous commit in force."""

    @property
    @abc.abstractmethod
    def committed_checkpoint(self) -> int | None:
        """The id given to the last ``commit`` (durable backends remember it across restarts),
        or None."""

    @abc.abstractmethod
    def snapshot(self, directory: str | Path) -> list[Path]:
        """Write the whole state, as it is now, to new files in ``directory`` (which must exist)
        and return their paths. The files are self-contained and never pickles.

        An incremental backend may instead return pieces in ``directory.parent / "shared"``,
        some written by earlier snapshots (the state is all of them together); pieces are never
        changed once written, and the checkpoint store keeps each while a checkpoint lists it."""

    @abc.abstractmethod
    def restore(self, files: Sequence[str | Path], *, key_groups: Collection[int] | None = None) -> None:
        """Replace the whole state with the union of the snapshots in ``files`` (from this backend
        kind and an operator with the same descriptors), keeping only ``key_groups`` if given.

        Raises ``IncompatibleState`` if a file holds a state whose kind or types differ from this
        operator's, or a state this operator does not declare. A declared state missing from the
        files starts empty.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release files and memory; uncommitted changes of a durable backend are lost."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StateBackend(abc.ABC):
    """A kind of state storage, configured once, opening one ``OperatorState`` per operator."""

    max_parallelism: int = DEFAULT_MAX_PARALLELISM

    @abc.abstractmethod
    def open(self, operator_id: str, descriptors: Iterable[StateDescriptor]) -> OperatorState:
        """Open the state of operator ``operator_id`` with the given states.

        A durable backend reopens what it stored for ``operator_id`` before (as of its last
        commit) and raises ``IncompatibleState`` if the descriptors no longer match it.
        """


# -- helpers shared by the backends ---------------------------------------------------------------


#: The one NaN object keys hold, so that a NaN key finds itself in a dict.
NAN = math.nan


def descriptor_map(operator_id: str, descriptors: Iterable[StateDescriptor]) -> dict[str, StateDescriptor]:
    """The descriptors by name; two states with one name are an error."""
    by_name: dict[str, StateDescriptor] = {}
    for d in descriptors:
        if not isinstance(d, (ValueStateDescriptor, TableStateDescriptor)):
            raise TypeError(f"operator {operator_id!r}: expected a state descriptor, got {d!r}")
        if d.name in by_name:
            raise ValueError(f"operator {operator_id!r} declares state {d.name!r} twice")
        by_name[d.name] = d
    return by_name


def lookup(operator_id: str, descriptors: dict[str, StateDescriptor], name: str, kind: str) -> StateDescriptor:
    """The descriptor of state ``name``, which must be of ``kind``."""
    d = descriptors.get(name)
    if d is None:
        raise KeyError(f"operator {operator_id!r} has no state {name!r}; it declares {sorted(descriptors)}")
    if d.kind != kind:
        raise TypeError(f"state {name!r} of operator {operator_id!r} is {d.kind} state, not {kind} state")
    return d


def _typed(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[pa.DataType]) -> list[pa.Array]:
    out = []
    for col, t in zip(columns, types, strict=True):
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        out.append(col if col.type == t else col.cast(t))
    return out


class KeyHelper:
    """Normalizes keys of one key schema and computes their key groups."""

    def __init__(self, key_schema: pa.Schema, max_parallelism: int, group_fields: int | None = None) -> None:
        self.schema = key_schema
        self.types = key_schema.types
        self.width = len(self.types)
        self.max_parallelism = max_parallelism
        #: How many leading fields decide the key group (``ValueStateDescriptor.group_fields``).
        self.grouped = self.width if group_fields is None else group_fields
        self._floats = [i for i, t in enumerate(self.types) if pa.types.is_floating(t)]

    def key(self, key: Any) -> Key:
        """``key`` as a canonical tuple (a bare value stands for a one-field key)."""
        if not isinstance(key, tuple):
            if self.width != 1:
                raise TypeError(f"expected a key tuple of {self.width} values "
                                f"({_schema_text(self.schema)}), got {key!r}")
            key = (key,)
        elif len(key) != self.width:
            raise TypeError(f"expected a key tuple of {self.width} values ({_schema_text(self.schema)}), "
                            f"got {key!r}")
        if self._floats:
            key = tuple(NAN if (i in self._floats and v is not None and math.isnan(v)) else v
                        for i, v in enumerate(key))
        return key

    def group(self, key: Key) -> int:
        """The key group of one canonical key."""
        columns = [codec.from_pylist([v], t) for v, t in zip(key[: self.grouped], self.types, strict=False)]
        return int(key_groups(columns, self.max_parallelism)[0])

    def columns(self, keys: KeyColumns) -> list[pa.Array]:
        """Key columns as arrays of the key schema's types."""
        if isinstance(keys, PrefixedKeys):
            keys = self.prefixed(keys).columns()
        elif isinstance(keys, (pa.Array, pa.ChunkedArray)):
            keys = [keys]
        keys = list(keys)
        if len(keys) != self.width:
            raise TypeError(f"expected {self.width} key columns ({_schema_text(self.schema)}), got {len(keys)}")
        out = _typed(keys, self.types)
        if len({len(c) for c in out}) > 1:
            raise ValueError(f"key columns have different lengths: {[len(c) for c in out]}")
        return out

    def prefixed(self, keys: PrefixedKeys) -> PrefixedKeys:
        """``keys`` with its columns of the key schema's types; its prefix must be the fields that
        choose the key group."""
        if len(keys.prefix) != self.grouped or len(keys.prefix) + len(keys.rest) != self.width:
            raise TypeError(f"expected {self.grouped} prefix and {self.width - self.grouped} other key columns "
                            f"({_schema_text(self.schema)}), got {len(keys.prefix)} and {len(keys.rest)}")
        rest = _typed(keys.rest, self.types[self.grouped:])
        if any(len(c) != len(keys.ids) for c in rest):
            raise ValueError(f"key columns have different lengths: {[len(keys.ids), *(len(c) for c in rest)]}")
        prefix = _typed(keys.prefix, self.types[: self.grouped])
        if all(a is b for a, b in zip([*prefix, *rest], [*keys.prefix, *keys.rest], strict=True)):
            return keys  # already typed: the same object, and its memo, go on
        if any(a is not b for a, b in zip(prefix, keys.prefix, strict=True)):
            return PrefixedKeys(prefix, keys.ids, rest)  # the prefix changed: what was worked out from it too
        return PrefixedKeys(prefix, keys.ids, rest, keys.memo)

    def batch(self, keys: KeyColumns) -> tuple[list[Key], np.ndarray]:
        """The canonical key tuples of a batch's rows and their key groups."""
        columns = self.columns(keys)
        groups = key_groups(columns[: self.grouped], self.max_parallelism)
        lists = []
        for i, col in enumerate(columns):
            values = codec.to_pylist(col)
            if i in self._floats and col.null_count < len(col):
                values = [NAN if (v is not None and math.isnan(v)) else v for v in values]
            lists.append(values)
        return list(zip(*lists, strict=True)) if lists else [], groups

    def arrays(self, keys: Sequence[Key]) -> list[pa.Array]:
        """Key tuples as one array per key field."""
        if not keys:
            return [pa.array([], t) for t in self.types]
        return [codec.from_pylist(list(col), t) for col, t in zip(zip(*keys, strict=True), self.types, strict=True)]


def values_array(values: pa.Array | pa.ChunkedArray, value_type: pa.DataType, n: int) -> pa.Array:
    """``values`` as one array of ``value_type`` with ``n`` rows."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if values.type != value_type:
        values = values.cast(value_type)
    if len(values) != n:
        raise ValueError(f"{n} keys but {len(values)} values")
    return values


def check_key_group(key_group: int, max_parallelism: int) -> int:
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key group {key_group} is outside 0..{max_parallelism - 1}")
    return int(key_group)


def conform_table(descriptor: TableStateDescriptor, table: pa.Table) -> pa.Table:
    """``table`` with exactly the descriptor's schema: columns in its order, castable types cast,
    metadata dropped. Raises ``ValueError`` naming what differs."""
    schema = descriptor.schema
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(None) if table.schema.metadata else table
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ValueError(f"table state {descriptor.name!r} needs columns {missing}; got {table.column_names}")
    return table.select(schema.names).cast(schema.remove_metadata())


def namespaces_between(ordered: list[int], after: int | None, until: int | None) -> list[int]:
    """The elements of the ascending list ``ordered`` that are ``> after`` and ``<= until``."""
    import bisect

    lo = 0 if after is None else bisect.bisect_right(ordered, after)
    hi = len(ordered) if until is None else bisect.bisect_right(ordered, until)
    return ordered[lo:hi]
