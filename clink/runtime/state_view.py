"""Queryable state: a stateful operator's keyed state as one readable Arrow table.

Two readers share this module: ``job.state("group-3cd3ffbaf2")`` on a running job, which reads
the operators' open state between two steps, and ``clink state DIR --operator ID``, which reads
the same operator from a checkpoint. Both go the same way, so they agree:

1. ``raw_tables``: each state of the operator as an Arrow table — a value state as its key
   columns, ``_key_group`` and ``_value``; a table state as ``_namespace`` and its columns —
   read through the state contract (``OperatorState.entries``), whichever the backend.
2. ``readable``: the tables an operator's *view* (``view_of``, a small JSON-able description
   stored with each checkpoint) turns into what the SQL means: for a group aggregate one row per
   key, the key columns under their SQL names and the current value of each aggregate; for a
   window aggregate one row per open window and key, with ``window_start`` and ``window_end``.
   Other operators (joins, Top-N, OVER, ...) show their states as stored (``raw``).

A checkpoint does not hold the plan, so what step 2 needs — the descriptors of the states and
the view — is written into ``job.json`` beside each operator's files (``view`` and ``states``,
added in clink 0.1 without changing anything older checkpoints hold; a checkpoint without them
lists its operators but cannot show their state).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.errors import UsageError
from clink.runtime import compute as pc
from clink.runtime.state.backend import (
    KEY_GROUP,
    NAMESPACE,
    KeyHelper,
    StateDescriptor,
    TableStateDescriptor,
    ValueStateDescriptor,
)
from clink.runtime.state.codec import from_pylist

if TYPE_CHECKING:
    from clink.runtime.plan import Node
    from clink.runtime.state.backend import OperatorState

__all__ = ["STATE_FORMATS", "descriptors_from_json", "descriptors_json", "raw_tables", "readable",
           "read_checkpoint_operator", "view_of", "write_table"]

_VALUE = "_value"
#: Aggregates whose current value a view computes from the accumulators (the others are left out).
_GROUP_FNS = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max")
_WINDOW_FNS = ("count_star", "count", "sum", "avg", "min", "max")
#: Output formats of ``clink state -o``.
STATE_FORMATS = ("csv", "json", "parquet")


# -- descriptors and views, as stored in job.json ------------------------------------------------


def _schema_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode()


def _schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def descriptors_json(descriptors: Iterable[StateDescriptor]) -> list[dict]:
    """The operator's state descriptors as JSON values (Arrow schemas in IPC, base64)."""
    out = []
    for d in descriptors:
        if isinstance(d, ValueStateDescriptor):
            schema = pa.schema([*d.key_schema, pa.field(_VALUE, d.value_type)])
        else:
            schema = d.schema
        item = {"name": d.name, "kind": d.kind, "schema": _schema_b64(schema)}
        if getattr(d, "group_fields", None) is not None:
            item["group_fields"] = d.group_fields
        out.append(item)
    return out


def descriptors_from_json(items: Sequence[dict]) -> list[StateDescriptor]:
    out: list[StateDescriptor] = []
    for item in items:
        schema = _schema_from_b64(item["schema"])
        if item["kind"] == "value":
            keys = pa.schema(list(schema)[:-1])
            out.append(ValueStateDescriptor(item["name"], keys, schema.field(_VALUE).type,
                                            group_fields=item.get("group_fields")))
        else:
            out.append(TableStateDescriptor(item["name"], schema))
    return out


def view_of(node: Node, kind: str) -> dict:
    """What ``readable`` needs to know of a plan node: its kind, the names and types of its
    output, its aggregates and window."""
    from clink.runtime.plan import ROWKIND_COLUMN, GroupAggregate, WindowAggregate

    view: dict[str, Any] = {"kind": kind}
    if isinstance(node, GroupAggregate | WindowAggregate):
        schema = pa.schema([f for f in node.schema if f.name != ROWKIND_COLUMN])
        # The aggregates are named by their SQL text (``SUM(price)``), from the operator's meaning
        # (``GROUP BY (auction) computing COUNT(*), SUM(price)``); the SELECT's aliases are applied
        # after the operator and are not part of it.
        texts = _split_top(node.meaning.partition(" computing ")[2]) if " computing " in node.meaning else []
        if len(texts) != len(node.aggs):
            texts = [f.name for f in schema][-len(node.aggs):] if node.aggs else []
        view.update(schema=_schema_b64(schema), keys=len(node.keys), names=texts,
                    aggs=[[a.fn, a.filter is not None] for a in node.aggs])
        if isinstance(node, WindowAggregate):
            w = node.window
            view["window"] = {"kind": w.kind, "size": w.size, "slide": w.slide, "offset": w.offset}
    return view


def _split_top(text: str) -> list[str]:
    """``text`` cut at the commas outside parentheses and quotes."""
    parts, depth, quote, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "'":
            quote = not quote
        elif not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
        elif not quote and depth == 0 and ch == ",":
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if tail else parts


# -- reading state -------------------------------------------------------------------------------


def raw_tables(states: Sequence[OperatorState], descriptors: Sequence[StateDescriptor],
               max_parallelism: int) -> dict[str, pa.Table]:
    """Each state of an operator (over all of its subtasks' ``states``) as one Arrow table."""
    values: dict[str, tuple[list, list, list]] = {
        d.name: ([], [], []) for d in descriptors if isinstance(d, ValueStateDescriptor)}
    parts: dict[str, list[pa.Table]] = {d.name: [] for d in descriptors if isinstance(d, TableStateDescriptor)}
    for state in states:
        for g in range(max_parallelism):
            # The contract hands value state out as Python values, key group by key group; a
            # query of the state is not on the data path, and no batch form reads a whole state.
            for name, key, value in state.entries(g):
                if name in parts:
                    parts[name].append(value.add_column(0, NAMESPACE, pa.array(
                        np.full(value.num_rows, key[0], np.int64))))
                elif name in values:
                    keys, groups, vals = values[name]
                    keys.append(key)
                    groups.append(g)
                    vals.append(value)
    out: dict[str, pa.Table] = {}
    for d in descriptors:
        if isinstance(d, ValueStateDescriptor):
            keys, groups, vals = values[d.name]
            columns = [*KeyHelper(d.key_schema, max_parallelism, d.group_fields).arrays(keys),
                       pa.array(np.asarray(groups, dtype=np.int32), pa.int32()), from_pylist(vals, d.value_type)]
            names = [*d.key_schema.names, KEY_GROUP, _VALUE]
            out[d.name] = pa.Table.from_arrays(columns, names=names)
        else:
            schema = pa.schema([pa.field(NAMESPACE, pa.int64()), *d.schema.remove_metadata()])
            tables = [t.select(schema.names).cast(schema) for t in parts[d.name]]
            out[d.name] = pa.concat_tables(tables) if tables else schema.empty_table()
    return out


def readable(view: dict, raw: dict[str, pa.Table]) -> pa.Table:
    """The state tables ``raw`` of an operator as what its SQL means (see the module docstring)."""
    if view.get("kind") == "group" and "groups" in raw and "schema" in view:
        return _group_view(view, raw["groups"])
    if view.get("kind") == "window" and "windows" in raw and "schema" in view:
        return _window_view(view, raw["windows"])
    return _raw_view(raw)


def _raw_view(raw: dict[str, pa.Table]) -> pa.Table:
    """Every state as stored, one after another, with a ``_state`` column naming it (and, when
    there are several, each column prefixed with its state's name); the value of a value state
    spread into its fields."""
    tables = []
    for name, table in raw.items():
        if _VALUE in table.column_names and pa.types.is_struct(table[_VALUE].type):
            value = table[_VALUE].combine_chunks()
            table = table.drop_columns([_VALUE])
            for j in range(value.type.num_fields):
                table = table.append_column(value.type.field(j).name, value.field(j))
        if len(raw) > 1:
            # The states' columns may share names with other types (a join's sides): each keeps its own.
            table = table.rename_columns([f"{name}.{c}" for c in table.column_names])
        tables.append(table.add_column(0, "_state", pa.array([name] * table.num_rows, pa.string())))
    if not tables:
        return pa.table({"_state": pa.array([], pa.string())})
    return pa.concat_tables(tables, promote_options="permissive")


def _group_view(view: dict, table: pa.Table) -> pa.Table:
    from clink.runtime.operators.group import _average

    schema = _schema_from_b64(view["schema"])
    width = view["keys"]
    acc = table[_VALUE].combine_chunks()
    fields = {acc.type.field(j).name: acc.field(j) for j in range(acc.type.num_fields)}
    columns, names = [], []
    for j in range(width):
        columns.append(table.column(j).cast(schema.field(j).type))
        names.append(schema.field(j).name)
    for i, (fn, filtered) in enumerate(view["aggs"]):
        if fn not in _GROUP_FNS:
            continue
        type_ = schema.field(width + i).type
        n, s, x = (f"a{i}_{p}" for p in "nsx")
        if fn == "count_star" and not filtered:
            value = fields["rows"]
        elif fn in ("count_star", "count"):
            value = fields[n]
        elif fn == "count_distinct":
            value = fields[f"a{i}_d"]
        elif fn == "sum":
            value = pc.if_else(pc.greater(fields[n], 0), fields[s], pa.scalar(None, fields[s].type))
        elif fn == "avg":
            value = _average(fields[s], fields[n], type_)
        else:
            value = fields[x]
        columns.append(value.cast(type_))
        names.append(_agg_name(view, schema, width + i, i))
    return _sorted(pa.Table.from_arrays(columns, names=names), names[:width])


def _window_view(view: dict, table: pa.Table) -> pa.Table:
    schema = _schema_from_b64(view["schema"])
    width = view["keys"]
    window = view["window"]
    keys = [f"_k{j}" for j in range(width)]
    session = window["kind"] == "session"
    group = [NAMESPACE, *keys] + (["_ws"] if session else [])
    aggregations = []
    for i, (fn, _) in enumerate(view["aggs"]):
        if fn in ("count_star", "count", "avg"):
            aggregations.append((f"_a{i}_n", "sum"))
        if fn in ("sum", "avg"):
            aggregations.append((f"_a{i}_s", "sum", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)))
        if fn in ("min", "max"):
            aggregations.append((f"_a{i}_x", fn))
    # Several parts of one window (batches not merged yet, several subtasks) sum up as the window's
    # own merge does when it fires.
    merged = table.group_by(group, use_threads=False).aggregate(aggregations)
    merged = merged.rename_columns([c.rsplit("_", 1)[0] if c.startswith("_a") else c for c in merged.column_names])
    ends = merged[NAMESPACE].to_numpy().astype(np.int64, copy=False)
    if session:
        starts = merged["_ws"].to_numpy().astype(np.int64, copy=False)
    elif window["kind"] == "cumulate":
        starts = (ends - 1) - np.mod(ends - 1 - window["offset"], window["size"])
    else:
        starts = ends - window["size"]
    columns, names = [], []
    for j in range(width):
        columns.append(merged[keys[j]].cast(schema.field(j).type))
        names.append(schema.field(j).name)
    for offset, values in enumerate((starts, ends)):
        f = schema.field(width + offset)
        columns.append(pa.array(values, pa.int64()).cast(pa.timestamp("ms")).cast(f.type))
        names.append(f.name)
    base = width + 3
    for i, (fn, _) in enumerate(view["aggs"]):
        if fn not in _WINDOW_FNS:
            continue
        type_ = schema.field(base + i).type
        if fn in ("count_star", "count"):
            value = pc.fill_null(merged[f"_a{i}_n"], 0)
        elif fn == "avg":
            from clink.runtime.operators.group import _average

            value = _average(pc.fill_null(merged[f"_a{i}_s"], 0).combine_chunks(),
                             merged[f"_a{i}_n"].combine_chunks(), type_)
        elif fn == "sum":
            value = merged[f"_a{i}_s"]
        else:
            value = merged[f"_a{i}_x"]
        columns.append(value.cast(type_))
        names.append(_agg_name(view, schema, base + i, i))
    return _sorted(pa.Table.from_arrays(columns, names=names), [*names[:width + 2]])


def _agg_name(view: dict, schema: pa.Schema, column: int, i: int) -> str:
    names = view.get("names") or []
    return names[i] if i < len(names) else schema.field(column).name


def _sorted(table: pa.Table, by: list[str]) -> pa.Table:
    """In key order, so that two reads of the same state are equal tables."""
    if not by or table.num_rows == 0:
        return table
    return table.sort_by([(name, "ascending", "at_start") for name in by])


# -- reading a checkpoint ------------------------------------------------------------------------


def read_checkpoint_operator(path: Path, uid: str, entry: dict, max_parallelism: int) -> pa.Table:
    """Operator ``uid``'s state in the checkpoint directory ``path`` (its ``job.json`` entry
    ``entry``), read by restoring its files into a scratch state of the backend that wrote them."""
    import shutil
    import tempfile

    if "states" not in entry:
        raise UsageError(f"operator {uid}: this checkpoint does not record the layout of its state (it was "
                         "written by an older clink); a checkpoint of this version does")
    descriptors = descriptors_from_json(entry["states"])
    shares = entry["subtasks"] if "subtasks" in entry else [{"files": entry["files"]}]
    from clink.runtime.checkpoint.store import checkpoint_file

    files = [checkpoint_file(path, name) for share in shares for name in share["files"]
             if not name.endswith(".replica.arrow")]
    scratch = tempfile.mkdtemp(prefix="clink-state-view-")
    try:
        if any(f.suffix == ".sqlite" for f in files):
            from clink.runtime.state.sqlite import SqliteStateBackend

            backend = SqliteStateBackend(scratch, max_parallelism=max_parallelism)
        else:
            from clink.runtime.state.memory import MemoryStateBackend

            backend = MemoryStateBackend(max_parallelism=max_parallelism)
        state = backend.open(uid, descriptors)
        try:
            state.restore(files)
            return readable(entry.get("view", {}), raw_tables([state], descriptors, max_parallelism))
        finally:
            state.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_table(table: pa.Table, fmt: str, out: str | Path) -> None:
    """Write ``table`` as ``fmt`` (csv, json: one object per line, parquet) to ``out``."""
    if fmt == "csv":
        import pyarrow.csv as csv

        csv.write_csv(table, str(out))
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, str(out))
    elif fmt == "json":
        import json

        with open(out, "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, default=str) + "\n")
    else:
        raise UsageError(f"unknown format {fmt!r}; choose one of: {', '.join(STATE_FORMATS)}")
