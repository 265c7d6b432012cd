"""LISTAGG and COLLECT in a GROUP BY without a window, as aggregate functions of the ``udaf``
contract (``clink/runtime/udaf.py``): the group operator keeps their accumulators as Arrow
columns with the other aggregates' and checkpoints them alike. (Window aggregations compute
both natively; this module is for the updating GROUP BY.)

- ``LISTAGG(value [, separator])``: the accumulator is the text so far; a batch's non-NULL values
  are joined per group in arrival order and appended. It cannot take a value away again, so over
  an updating input the compiler refuses it.
- ``LISTAGG`` over an updating input (``LISTAGG_RETRACT``): the accumulator is the list of the
  values so far, as Flink's retracting LISTAGG keeps it; a retraction takes out the first equal
  value of its group (an update's new value then goes to the end), the text is joined when read.
- ``COLLECT(value)``: the accumulator is the multiset as a ``MAP<value, INT>`` of counts (Flink's
  MULTISET); a batch (or a retraction, with -1) is added by one Arrow ``group_by`` over (group,
  value) of the old entries and the new rows, entries whose count reaches 0 dropped.

Everything is vectorized over the batch; no method loops over rows or groups in Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.udaf import udaf

__all__ = ["COLLECT", "LISTAGG", "LISTAGG_RETRACT"]


def _placed(values: pa.Array, at: np.ndarray, n: int) -> pa.Array:
    """``values`` at positions ``at`` of an array of ``n`` (NULL elsewhere)."""
    index = np.full(n, -1, dtype=np.int64)
    index[at] = np.arange(len(at))
    return values.take(pa.array(index, mask=index < 0))


def _joined(groups: np.ndarray, values: pa.Array, separator: str, n: int) -> pa.Array:
    """Per group (0 .. n-1) its non-NULL ``values`` in order joined by ``separator``; NULL for a
    group without one."""
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    if not valid.any():
        return pa.nulls(n, pa.string())
    g = groups[valid]
    order = np.argsort(g, kind="stable")
    g = g[order]
    v = values.filter(pa.array(valid)).take(pa.array(order)).cast(pa.string())
    present, starts = np.unique(g, return_index=True)
    lists = pa.ListArray.from_arrays(pa.array(np.append(starts, len(g)), pa.int32()), v)
    return _placed(pc.binary_join(lists, separator), present, n)


def _entries(bag: pa.MapArray, owner_of_row: np.ndarray) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """The entries of the maps ``bag``: the owner of each (``owner_of_row`` of its map), its key
    and its count."""
    as_list = bag.cast(pa.list_(pa.struct([pa.field("key", bag.type.key_type, nullable=False),
                                           pa.field("value", bag.type.item_type)])))
    lengths = pc.fill_null(pc.list_value_length(as_list), 0).to_numpy(zero_copy_only=False)
    entries = pc.list_flatten(as_list)
    return np.repeat(owner_of_row, lengths), entries.field(0), entries.field(1)


def _append(old: pa.Array, new: pa.Array, separator: str) -> pa.Array:
    both = pc.binary_join_element_wise(old, new, separator, null_handling="emit_null")
    return pc.coalesce(both, old, new)


class _ListAgg:
    def create_accumulator(self):
        return {"text": None}

    def accumulate(self, acc, groups, values, separator=None):
        sep = separator[0].as_py() if separator is not None and len(separator) else ","
        old = acc["text"]
        return {"text": _append(old, _joined(groups, values, sep, len(old)), sep)}

    def merge(self, acc, groups, other):
        # The separator is not in the accumulator: the texts meet with the default one only when
        # partial accumulators are merged, which a GROUP BY without a window never does.
        old = acc["text"]
        return {"text": _append(old, _joined(groups, other["text"], ",", len(old)), ",")}

    def get_value(self, acc):
        return acc["text"]


def _list_entries(lists: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """The items of ``lists`` (a NULL list has none) and the list (row) each belongs to."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    return np.repeat(np.arange(len(lists), dtype=np.int64), lengths), pc.list_flatten(lists)


class _ListAggRetract:
    def create_accumulator(self):
        return {"items": [], "sep": None}

    def _change(self, acc, groups, values, separator, sign: int) -> dict:
        """``acc`` with the non-NULL ``values`` (each of its row's group) appended (``sign`` 1) or
        each taking out the first equal item of its group (``sign`` -1)."""
        items: pa.ListArray = acc["items"]
        n = len(items)
        owners, old = _list_entries(items)
        valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
        rows = np.asarray(groups, dtype=np.int64)[valid]
        new = values.filter(pa.array(valid)).cast(pa.string())
        if sign > 0:
            owners = np.concatenate([owners, rows])
            kept = pa.concat_arrays([old, new]) if len(new) else old
        else:
            # Each item's rank among the equal items of its group, in list order; an item goes
            # when its rank is below the number of equal values retracted from its group.
            codes = pc.dictionary_encode(pa.concat_arrays([old, new])).indices.to_numpy(zero_copy_only=False)
            item_code, gone_code = codes[:len(old)].astype(np.int64), codes[len(old):].astype(np.int64)
            width = int(codes.max()) + 1 if len(codes) else 1
            item_key = owners * width + item_code
            order = np.lexsort((np.arange(len(item_key)), item_key))
            sorted_keys = item_key[order]
            first = np.searchsorted(sorted_keys, sorted_keys, side="left")
            rank = np.empty(len(item_key), dtype=np.int64)
            rank[order] = np.arange(len(item_key)) - first
            gone_keys, gone_counts = np.unique(rows * width + gone_code, return_counts=True)
            at = np.searchsorted(gone_keys, item_key)
            found = (at < len(gone_keys)) & (gone_keys[np.minimum(at, len(gone_keys) - 1)] == item_key)
            drop = found & (rank < gone_counts[np.minimum(at, len(gone_keys) - 1)])
            owners, kept = owners[~drop], old.filter(pa.array(~drop))
        order = np.argsort(owners, kind="stable")
        offsets = np.searchsorted(owners[order], np.arange(n + 1), side="left").astype(np.int32)
        sep = separator[0].as_py() if separator is not None and len(separator) else ","
        return {"items": pa.ListArray.from_arrays(pa.array(offsets), kept.take(pa.array(order))),
                "sep": pa.repeat(pa.scalar(sep, pa.string()), n)}

    def accumulate(self, acc, groups, values, separator=None):
        return self._change(acc, groups, values, separator, 1)

    def retract(self, acc, groups, values, separator=None):
        return self._change(acc, groups, values, separator, -1)

    def merge(self, acc, groups, other):
        owners, items = _list_entries(other["items"])
        return self._change(acc, np.asarray(groups, dtype=np.int64)[owners], items, other["sep"], 1)

    def get_value(self, acc):
        items, sep = acc["items"], acc["sep"]
        if not len(items):
            return pa.array([], pa.string())
        text = pc.binary_join(items, sep[0].as_py() if sep.null_count < len(sep) else ",")
        empty = pc.equal(pc.fill_null(pc.list_value_length(items), 0), 0)
        return pc.if_else(empty, pa.scalar(None, pa.string()), text)


class _Collect:
    def create_accumulator(self):
        return {"bag": {}}

    def _add(self, acc, groups, values, counts) -> dict:
        """The bags of ``acc`` with ``values`` (each of its row's group) counted ``counts`` times."""
        bag: pa.MapArray = acc["bag"]
        n = len(bag)
        old_owners, old_keys, old_counts = _entries(bag, np.arange(n, dtype=np.int64))
        valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
        table = pa.table({
            "g": pa.concat_arrays([pa.array(old_owners), pa.array(groups[valid].astype(np.int64))]),
            "k": pa.concat_arrays([old_keys, values.filter(pa.array(valid)).cast(bag.type.key_type)]),
            "c": pa.concat_arrays([old_counts.cast(pa.int64()), pa.array(np.asarray(counts)[valid].astype(np.int64))]),
        })
        summed = table.group_by(["g", "k"], use_threads=False).aggregate([("c", "sum")])
        kept = summed.filter(pc.not_equal(summed["c_sum"], 0))
        kept = kept.take(pc.sort_indices(kept, sort_keys=[("g", "ascending"), ("k", "ascending")]))
        g = kept["g"].to_numpy()
        offsets = np.searchsorted(g, np.arange(n + 1), side="left").astype(np.int32)
        new = pa.MapArray.from_arrays(pa.array(offsets), kept["k"].combine_chunks().cast(bag.type.key_type),
                                      kept["c_sum"].combine_chunks().cast(bag.type.item_type))
        return {"bag": new}

    def accumulate(self, acc, groups, values):
        return self._add(acc, groups, values, np.ones(len(values), dtype=np.int64))

    def retract(self, acc, groups, values):
        return self._add(acc, groups, values, np.full(len(values), -1, dtype=np.int64))

    def merge(self, acc, groups, other):
        owners, keys, counts = _entries(other["bag"], np.asarray(groups, dtype=np.int64))
        return self._add(acc, owners, keys, counts.cast(pa.int64()).to_numpy(zero_copy_only=False))

    def get_value(self, acc):
        return acc["bag"]


#: The group operator imports these by path (the generated module names them).
LISTAGG = udaf(_ListAgg, name="LISTAGG", returns="STRING", accumulator={"text": "STRING"})
LISTAGG_RETRACT = udaf(_ListAggRetract, name="LISTAGG", returns="STRING",
                       accumulator={"items": "ARRAY<STRING>", "sep": "STRING"})
COLLECT = udaf(_Collect, name="COLLECT", returns="MAP<STRING, INT>", accumulator={"bag": "MAP<STRING, INT>"})
