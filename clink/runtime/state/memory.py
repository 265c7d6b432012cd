"""The ``memory`` state backend: value state in columns under a hash index, table state as Arrow tables.

Value state is ``columnar.ColumnarValues``: key and value columns in numpy and Arrow, found by a
vectorized hash table over the key columns; the scalar forms go through the batch forms with one
row. A snapshot is one Arrow IPC file per state holding every entry with its key group, written
from the columns; ``commit`` records the id only, since nothing here outlives the process.
"""

from __future__ import annotations

import itertools
import urllib.parse
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.state import codec
from clink.runtime.state.backend import (
    KEY_GROUP,
    NAMESPACE,
    Counted,
    IncompatibleState,
    Key,
    KeyColumns,
    KeyHelper,
    OperatorState,
    PrefixedKeys,
    StateBackend,
    StateDescriptor,
    TableState,
    TableStateDescriptor,
    ValueState,
    ValueStateDescriptor,
    check_key_group,
    conform_table,
    counter_deltas,
    descriptor_map,
    lookup,
    values_array,
)
from clink.runtime.state.columnar import ColumnarValues, num_rows
from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM

__all__ = ["MemoryOperatorState", "MemoryStateBackend", "split_by_namespace"]

#: Version of the snapshot file layout (schema metadata ``clink.state.format``).
SNAPSHOT_FORMAT = "1"
VALUE = "_value"


class MemoryStateBackend(StateBackend):
    """Keyed state in memory: columns under a hash index (value state), Arrow tables (table state).

    >>> import pyarrow as pa
    >>> d = ValueStateDescriptor("count", [("user", pa.string())], pa.int64())
    >>> with MemoryStateBackend().open("agg", [d]) as state:
    ...     counts = state.value_state("count")
    ...     counts.put_many(pa.array(["a", "b", None]), pa.array([1, 2, 3]))
    ...     counts.get_many(pa.array([None, "a", "c"])).to_pylist()
    [3, 1, None]
    """

    def __init__(self, *, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> None:
        if max_parallelism <= 0:
            raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
        self.max_parallelism = max_parallelism

    def open(self, operator_id: str, descriptors: Iterable[StateDescriptor]) -> MemoryOperatorState:
        return MemoryOperatorState(operator_id, descriptor_map(operator_id, descriptors), self.max_parallelism)


class _MemoryValueState(ValueState):
    """Values in columns indexed by a hash table over the keys (``columnar.ColumnarValues``):
    the batch forms are vectorized, and no Python object is kept per key."""

    def __init__(self, descriptor: ValueStateDescriptor, max_parallelism: int) -> None:
        self.descriptor = descriptor
        self.keys = KeyHelper(descriptor.key_schema, max_parallelism, descriptor.group_fields)
        self.store = ColumnarValues(descriptor.key_schema.types, descriptor.value_type, max_parallelism,
                                    group_fields=descriptor.group_fields)

    def clear_all(self) -> None:
        self.store.clear()

    def _one(self, key: Any) -> list[pa.Array]:
        return self.keys.arrays([self.keys.key(key)])

    def get(self, key: Any) -> Any:
        return codec.to_pylist(self.store.get(self._one(key)))[0]

    def put(self, key: Any, value: Any) -> None:
        self.store.put(self._one(key), codec.from_pylist([value], self.descriptor.value_type))

    def delete(self, key: Any) -> None:
        self.store.put(self._one(key), pa.nulls(1, self.descriptor.value_type))

    def get_many(self, keys: KeyColumns) -> pa.Array:
        return self.store.get(self._columns(keys))

    def put_many(self, keys: KeyColumns, values: pa.Array | pa.ChunkedArray) -> None:
        columns = self._columns(keys)
        self.store.put(columns, values_array(values, self.descriptor.value_type, num_rows(columns)))

    def add_counts(self, keys: KeyColumns, deltas: np.ndarray) -> Counted:
        columns = self._columns(keys)
        return self.store.add_counts(columns, counter_deltas(self.descriptor, deltas, num_rows(columns)))

    def _columns(self, keys: KeyColumns) -> list[pa.Array] | PrefixedKeys:
        # The store finds a repeated prefix once per distinct value when it groups by it. Keys
        # already of the key types stay the same object, so a write of the keys just read is
        # recognised as such (``ColumnarValues.put``).
        if isinstance(keys, PrefixedKeys) and self.store.prefix is not None:
            return self.keys.prefixed(keys)
        return self.keys.columns(keys)

    def group_entries(self, key_group: int) -> Iterator[tuple[Key, Any]]:
        """``(key, value)`` of every key in ``key_group``, as Python values."""
        slots = self.store.slots_of_group(key_group)
        if not len(slots):
            return
        keys = [self.keys.key(k) for k in zip(*(codec.to_pylist(a) for a in self.store.key_arrays(slots)),
                                              strict=True)]
        yield from zip(keys, codec.to_pylist(self.store.value_array(slots)), strict=True)


#: Tables of at least this many rows are measured (``nbytes``); smaller ones are estimated.
_MEASURED_ROWS = 256


class _MemoryTableState(TableState):
    """Buckets as lists of tables, oldest first. The sorted list of namespaces is made when it is
    asked for after a change (a state of many buckets — session windows — adds and removes far
    more often than it lists them, and keeping a list sorted costs a move of it per change)."""

    def __init__(self, descriptor: TableStateDescriptor, max_parallelism: int) -> None:
        self.descriptor = descriptor
        self.buckets: dict[int, list[pa.Table]] = {}
        self._ordered: list[int] | None = []
        self._parts: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self._rows = 0
        self._bytes = 0
        #: Bytes per row, learnt from the tables large enough to measure: a small slice of a big
        #: table takes ~20 us to measure (``nbytes`` walks its buffers), more than the add itself.
        self._row_bytes = 16.0 * len(descriptor.schema)
        self._large = 0

    @property
    def ordered(self) -> list[int]:  # type: ignore[override]
        if self._ordered is None:
            self._ordered = sorted(self.buckets)
        return self._ordered

    def add(self, namespace: int, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = conform_table(self.descriptor, table)
        namespace = int(namespace)
        bucket = self.buckets.get(namespace)
        if bucket is None:
            bucket = self.buckets[namespace] = []
            self._parts[namespace] = 0
            self._ordered = None
        bucket.append(table)
        self._parts[namespace] += 1
        self._rows += table.num_rows
        if table.num_rows >= _MEASURED_ROWS:
            self._large += 1
        if table.num_rows >= _MEASURED_ROWS and (self._large <= 16 or self._large % 64 == 0):
            # Measured on the first 16 tables large enough, then on one in 64: a merge of two
            # stored tables of many chunks takes longer to measure than to add.
            size = table.nbytes
            self._row_bytes = size / table.num_rows
        else:
            size = round(table.num_rows * self._row_bytes)
        self._sizes[namespace] = self._sizes.get(namespace, 0) + size
        self._bytes += size

    def get(self, namespace: int) -> pa.Table | None:
        bucket = self.buckets.get(int(namespace))
        if not bucket:
            return None
        return bucket[0] if len(bucket) == 1 else pa.concat_tables(bucket)

    def take(self, namespace: int) -> pa.Table | None:
        namespace = int(namespace)
        table = self.get(namespace)
        bucket = self.buckets.pop(namespace, None)
        if bucket is None:
            return None
        del self._parts[namespace]
        self._ordered = None
        for part in bucket:
            self._rows -= part.num_rows
        self._bytes -= self._sizes.pop(namespace, 0)
        return table

    def num_rows(self, namespace: int | None = None) -> int:
        if namespace is None:
            return self._rows
        return sum(part.num_rows for part in self.buckets.get(int(namespace), ()))

    def parts(self, namespace: int) -> int:
        return self._parts.get(int(namespace), 0)

    def memory_bytes(self) -> int:
        return self._bytes

    def clear_all(self) -> None:
        self.buckets.clear()
        self._ordered = []
        self._parts.clear()
        self._sizes.clear()
        self._rows = self._bytes = 0

    def group_rows(self, key_group: int) -> Iterator[tuple[int, pa.Table]]:
        for namespace in self.ordered:
            table = self.get(namespace)
            assert table is not None
            rows = table.filter(pc.equal(table[KEY_GROUP], key_group))
            if rows.num_rows:
                yield namespace, rows


_KINDS: dict[str, type] = {"value": _MemoryValueState, "table": _MemoryTableState}


class MemoryOperatorState(OperatorState):
    """The states of one operator, in memory."""

    def __init__(self, operator_id: str, descriptors: dict[str, StateDescriptor], max_parallelism: int) -> None:
        self.operator_id = operator_id
        self.max_parallelism = max_parallelism
        self.descriptors = descriptors
        self._stores: dict[str, Any] = {
            name: _KINDS[d.kind](d, max_parallelism) for name, d in descriptors.items()  # type: ignore[arg-type]
        }
        self._share_prefixes()
        self._committed: int | None = None

    def _share_prefixes(self) -> None:
        """Empty value states grouped by fields of the same types share one store of those
        fields' values (``ColumnarValues.share_prefix``)."""
        grouped = [s.store for s in self._stores.values() if isinstance(s, _MemoryValueState) and s.store.prefix is not None]
        for i, store in enumerate(grouped):
            for first in grouped[:i]:
                if store.share_prefix(first):
                    break

    def value_state(self, name: str) -> ValueState:
        lookup(self.operator_id, self.descriptors, name, "value")
        return self._stores[name]  # type: ignore[return-value]

    def table_state(self, name: str) -> TableState:
        lookup(self.operator_id, self.descriptors, name, "table")
        return self._stores[name]  # type: ignore[return-value]

    def entries(self, key_group: int) -> Iterator[tuple[str, Key, Any]]:
        g = check_key_group(key_group, self.max_parallelism)
        for name, store in self._stores.items():
            if isinstance(store, _MemoryTableState):
                for namespace, rows in store.group_rows(g):
                    yield name, (namespace,), rows
                continue
            for key, value in store.group_entries(g):
                yield name, key, value

    def clear(self) -> None:
        for store in self._stores.values():
            store.clear_all()
        self._share_prefixes()

    def commit(self, checkpoint_id: int) -> None:
        self._committed = int(checkpoint_id)

    @property
    def committed_checkpoint(self) -> int | None:
        return self._committed

    def close(self) -> None:
        self.clear()

    # -- snapshot and restore ----------------------------------------------------------------------

    def snapshot(self, directory: str | Path) -> list[Path]:
        directory = Path(directory)
        files = []
        for index, (name, store) in enumerate(self._stores.items()):
            table = _to_table(store, self.operator_id, self.max_parallelism)
            path = directory / f"{_quote(self.operator_id)}.{index}.{_quote(name)}.arrow"
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            files.append(path)
        return files

    def restore(self, files: Sequence[str | Path], *, key_groups: Collection[int] | None = None) -> None:
        tables = [_read_table(Path(f), self.descriptors, self.max_parallelism) for f in files]
        self.clear()
        wanted = None if key_groups is None else pa.array(sorted(set(key_groups)), pa.int32())
        for name, table in tables:
            if wanted is not None:
                table = table.filter(pc.is_in(table[KEY_GROUP], value_set=wanted))
            _load(self._stores[name], table)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_")


def _table_schema(d: StateDescriptor) -> list[pa.Field]:
    if isinstance(d, TableStateDescriptor):
        return [pa.field(NAMESPACE, pa.int64(), nullable=False), *d.schema.remove_metadata()]
    return [*d.key_schema, pa.field(KEY_GROUP, pa.int32(), nullable=False), pa.field(VALUE, d.value_type)]


def _to_table(store: Any, operator_id: str, max_parallelism: int) -> pa.Table:
    d = store.descriptor
    metadata = {
        "clink.state.format": SNAPSHOT_FORMAT,
        "clink.state.backend": "memory",
        "clink.state.operator": operator_id,
        "clink.state.name": d.name,
        "clink.state.signature": d.signature(),
        "clink.state.max_parallelism": str(max_parallelism),
    }
    schema = pa.schema(_table_schema(d), metadata=metadata)
    if isinstance(store, _MemoryTableState):
        tables = []
        for namespace in store.ordered:
            table = store.get(namespace)
            assert table is not None
            tables.append(table.add_column(0, NAMESPACE, pa.array(np.full(table.num_rows, namespace, np.int64))))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables).cast(schema)
    slots = store.store.live_slots()
    columns = [*store.store.key_arrays(slots), pa.array(store.store.groups_of(slots), pa.int32()),
               store.store.value_array(slots)]
    return pa.Table.from_arrays(columns, schema=schema)


def _read_table(path: Path, descriptors: dict[str, StateDescriptor], max_parallelism: int) -> tuple[str, pa.Table]:
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise IncompatibleState(f"{path} is not a readable memory-state snapshot: {e}") from e
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if meta.get("clink.state.backend") != "memory" or meta.get("clink.state.format") != SNAPSHOT_FORMAT:
        raise IncompatibleState(f"{path} is not a memory-state snapshot of format {SNAPSHOT_FORMAT} "
                                f"(backend {meta.get('clink.state.backend')!r}, "
                                f"format {meta.get('clink.state.format')!r})")
    name = meta.get("clink.state.name", "")
    d = descriptors.get(name)
    if d is None:
        raise IncompatibleState(f"{path} holds state {name!r}, which the operator does not declare "
                                f"(it declares {sorted(descriptors)})")
    if meta.get("clink.state.signature") != d.signature():
        raise IncompatibleState(f"state {name!r} in {path} was stored as {meta.get('clink.state.signature')}, "
                                f"but the operator declares {d.signature()}")
    if meta.get("clink.state.max_parallelism") != str(max_parallelism):
        raise IncompatibleState(f"{path} was written with max_parallelism "
                                f"{meta.get('clink.state.max_parallelism')}, this state has {max_parallelism}")
    return name, table


def _load(store: Any, table: pa.Table) -> None:
    d = store.descriptor
    if isinstance(store, _MemoryTableState):
        table = table.replace_schema_metadata(None)
        for namespace, rows in split_by_namespace(table):
            store.add(namespace, rows)
        return
    width = len(d.key_schema)
    table = table.combine_chunks()
    # Each file holds a key once, and files of one state hold disjoint key groups: one write.
    store.put_many([table.column(i) for i in range(width)], table[VALUE])


def split_by_namespace(table: pa.Table, column: str = NAMESPACE) -> list[tuple[int, pa.Table]]:
    """Cut a table into one table per value of its namespace column (ascending), without that
    column, keeping row order within each namespace."""
    if table.num_rows == 0:
        return []
    values = table[column].to_numpy()
    rest = table.drop_columns([column])
    if (values[1:] < values[:-1]).any():
        order = np.argsort(values, kind="stable")
        rest = rest.take(order)
        values = values[order]
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(values)]
    return [(int(values[lo]), rest.slice(lo, hi - lo)) for lo, hi in itertools.pairwise(bounds)]
