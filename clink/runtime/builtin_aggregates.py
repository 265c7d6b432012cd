"""LISTAGG and COLLECT in a GROUP BY without a window, and JSON_OBJECTAGG and JSON_ARRAYAGG in
any aggregation, as aggregate functions of the ``udaf`` contract (``clink/runtime/udaf.py``): the
group operator keeps their accumulators as Arrow columns with the other aggregates' and
checkpoints them alike, and a window aggregation keeps them in its partial rows and merges those.
(Window aggregations compute LISTAGG and COLLECT natively.)

- ``LISTAGG(value [, separator])``: the accumulator is the text so far; a batch's non-NULL values
  are joined per group in arrival order and appended. It cannot take a value away again, so over
  an updating input the compiler refuses it.
- ``LISTAGG`` over an updating input (``LISTAGG_RETRACT``): the accumulator is the list of the
  values so far, as Flink's retracting LISTAGG keeps it; a retraction takes out the first equal
  value of its group (an update's new value then goes to the end), the text is joined when read.
- ``COLLECT(value)``: the accumulator is the multiset as a ``MAP<value, INT>`` of counts (Flink's
  MULTISET); a batch (or a retraction, with -1) is added by one Arrow ``group_by`` over (group,
  value) of the old entries and the new rows, entries whose count reaches 0 dropped.
- ``JSON_ARRAYAGG(item)``: the accumulator is the list of the items' JSON texts in arrival order
  (the compiler turns each value into JSON text, or ``null`` for NULL ON NULL; a NULL it passes
  on is left out). A retraction takes away the first equal text of its group.
- ``JSON_OBJECTAGG(key, value)``: the accumulator is a list of (key, JSON text, count) entries
  sorted by key and text, kept as COLLECT keeps its counts, so that a row and its retraction
  cancel whatever order they come in. A NULL key fails the aggregation; a key counted more than
  once (two rows, or two values) fails it when its result is asked for, as Flink's fails on a
  duplicate key. The object lists its members by key.

Everything is vectorized over the batch; no method loops over rows or groups in Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import functions as F
from clink.runtime import kernels as K
from clink.runtime.udaf import udaf

__all__ = ["COLLECT", "JSON_ARRAYAGG", "JSON_OBJECTAGG", "LISTAGG", "LISTAGG_RETRACT"]


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
        elif not len(new):  # only NULLs taken back: they were never in the list
            kept = old
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
        # The separator is the call's constant; a group that has not taken a value yet has none.
        given = pc.drop_null(sep)
        text = pc.binary_join(items, given[0].as_py() if len(given) else ",")
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


def _flat(lists: pa.Array, owner_of_row: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """The elements of ``lists``, each with its owner (``owner_of_row`` of its list)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    return np.repeat(np.asarray(owner_of_row, dtype=np.int64), lengths), pc.list_flatten(lists)


def _lists(owners: np.ndarray, values: pa.Array, n: int) -> pa.ListArray:
    """``n`` lists (one per group) of ``values``, whose ``owners`` are sorted."""
    offsets = np.searchsorted(owners, np.arange(n + 1), side="left").astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _wrapped(lists: pa.Array, opening: str, closing: str) -> pa.Array:
    """Each list of JSON texts joined by commas between ``opening`` and ``closing``."""
    return pc.binary_join_element_wise(opening, pc.binary_join(lists, ","), closing, "")


class _JsonArrayAgg:
    def create_accumulator(self):
        return {"items": []}

    def accumulate(self, acc, groups, items):
        old: pa.ListArray = acc["items"]
        n = len(old)
        owners, values = _flat(old, np.arange(n))
        valid = pc.is_valid(items).to_numpy(zero_copy_only=False)
        g = np.concatenate([owners, np.asarray(groups, dtype=np.int64)[valid]])
        v = pa.concat_arrays([values.cast(pa.string()), items.filter(pa.array(valid)).cast(pa.string())])
        order = np.argsort(g, kind="stable")  # old items first, then the batch's in arrival order
        return {"items": _lists(g[order], v.take(pa.array(order)), n)}

    def retract(self, acc, groups, items):
        valid = pc.is_valid(items).to_numpy(zero_copy_only=False)
        if not valid.any():
            return acc
        old: pa.ListArray = acc["items"]
        n = len(old)
        owners, values = _flat(old, np.arange(n))
        m = len(owners)
        gone = np.asarray(groups, dtype=np.int64)[valid]
        # One id per (group, text) over the held items and the retracted ones: each retracted
        # row takes away the first held item of its id that no earlier one took.
        ids, count = K.group_ids([pa.array(np.concatenate([owners, gone])),
                                  pa.concat_arrays([values.cast(pa.string()),
                                                    items.filter(pa.array(valid)).cast(pa.string())])], m + len(gone))
        held, taken = ids[:m], np.bincount(ids[m:], minlength=count)
        order = np.argsort(held, kind="stable")
        ranked = held[order]
        rank = np.empty(m, dtype=np.int64)
        rank[order] = np.arange(m) - np.searchsorted(ranked, ranked, side="left")
        keep = rank >= taken[held]
        return {"items": _lists(owners[keep], values.filter(pa.array(keep)), n)}

    def merge(self, acc, groups, other):
        owners, values = _flat(other["items"], groups)
        return self.accumulate(acc, owners, values)

    def get_value(self, acc):
        return _wrapped(acc["items"], "[", "]")


def _field(entries: pa.Array, i: int) -> pa.Array:
    return pc.struct_field(entries, [i])


_ENTRY = pa.struct([pa.field("k", pa.string()), pa.field("v", pa.string()), pa.field("n", pa.int64())])


class _JsonObjectAgg:
    def create_accumulator(self):
        return {"entries": []}

    def _add(self, acc, groups, keys, values, counts) -> dict:
        """The entries of ``acc`` with (``keys``, ``values``) of ``groups`` counted ``counts`` times."""
        old: pa.ListArray = acc["entries"]
        n = len(old)
        owners, entries = _flat(old, np.arange(n))
        table = pa.table({
            "g": pa.concat_arrays([pa.array(owners, pa.int64()), pa.array(np.asarray(groups, dtype=np.int64))]),
            "k": pa.concat_arrays([_field(entries, 0), keys.cast(pa.string())]),
            "v": pa.concat_arrays([_field(entries, 1), values.cast(pa.string())]),
            "n": pa.concat_arrays([_field(entries, 2), pa.array(np.asarray(counts, dtype=np.int64))]),
        })
        summed = table.group_by(["g", "k", "v"], use_threads=False).aggregate([("n", "sum")])
        kept = summed.filter(pc.not_equal(summed["n_sum"], 0))
        kept = kept.take(pc.sort_indices(kept, sort_keys=[("g", "ascending"), ("k", "ascending"), ("v", "ascending")]))
        held = pa.StructArray.from_arrays([kept[c].combine_chunks() for c in ("k", "v", "n_sum")], fields=list(_ENTRY))
        return {"entries": _lists(kept["g"].to_numpy(), held, n)}

    def accumulate(self, acc, groups, keys, values):
        if keys.null_count:
            raise ValueError("a key is NULL; JSON_OBJECTAGG needs a non-NULL key on every row it aggregates "
                             "(filter the NULL keys out, or COALESCE them)")
        present = pc.is_valid(values)  # ABSENT ON NULL: the compiler passes a NULL value on
        rows = present.to_numpy(zero_copy_only=False)
        return self._add(acc, np.asarray(groups)[rows], keys.filter(present), values.filter(present),
                         np.ones(int(rows.sum()), dtype=np.int64))

    def retract(self, acc, groups, keys, values):
        present = pc.and_(pc.is_valid(keys), pc.is_valid(values))
        rows = present.to_numpy(zero_copy_only=False)
        return self._add(acc, np.asarray(groups)[rows], keys.filter(present), values.filter(present),
                         np.full(int(rows.sum()), -1, dtype=np.int64))

    def merge(self, acc, groups, other):
        owners, entries = _flat(other["entries"], groups)
        return self._add(acc, owners, _field(entries, 0), _field(entries, 1),
                         _field(entries, 2).to_numpy(zero_copy_only=False))

    def get_value(self, acc):
        lists: pa.ListArray = acc["entries"]
        n = len(lists)
        owners, entries = _flat(lists, np.arange(n))
        counts = _field(entries, 2).to_numpy(zero_copy_only=False)
        live = counts > 0  # a count below 0 waits for the row its retraction came before
        picks = pa.array(live)
        owners, keys, values = owners[live], _field(entries, 0).filter(picks), _field(entries, 1).filter(picks)
        ids, count = K.group_ids([pa.array(owners), keys], len(owners))
        totals = np.bincount(ids, weights=counts[live], minlength=count)
        if (totals > 1).any():
            key = keys[int(np.flatnonzero(totals[ids] > 1)[0])].as_py()
            raise ValueError(f"Key '{key}' is already present. Duplicate keys are not allowed in JSON_OBJECTAGG: "
                             "make the keys of each group unique")
        members = pc.binary_join_element_wise(F.json_text(keys), values, ":")
        return _wrapped(_lists(owners, members, n), "{", "}")


#: The group operator imports these by path (the generated module names them).
LISTAGG = udaf(_ListAgg, name="LISTAGG", returns="STRING", accumulator={"text": "STRING"})
LISTAGG_RETRACT = udaf(_ListAggRetract, name="LISTAGG", returns="STRING",
                       accumulator={"items": "ARRAY<STRING>", "sep": "STRING"})
COLLECT = udaf(_Collect, name="COLLECT", returns="MAP<STRING, INT>", accumulator={"bag": "MAP<STRING, INT>"})
JSON_ARRAYAGG = udaf(_JsonArrayAgg, name="JSON_ARRAYAGG", returns="STRING", accumulator={"items": "ARRAY<STRING>"})
JSON_OBJECTAGG = udaf(_JsonObjectAgg, name="JSON_OBJECTAGG", returns="STRING",
                      accumulator={"entries": "ARRAY<ROW<k STRING, v STRING, n BIGINT>>"})
