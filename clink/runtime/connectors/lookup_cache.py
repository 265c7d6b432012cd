"""Lookups by key with Flink's partial cache, shared by the connectors that serve lookup joins.

A connector that reads rows by key gives a function from a table of distinct, non-NULL keys to
the table's rows with those keys; ``KeyLookup`` puts the cache in front of it. With
``'lookup.cache' = 'PARTIAL'`` the rows of each key asked for are kept (also that a key has
none, unless ``'lookup.partial-cache.cache-missing-key' = 'false'``), up to
``'lookup.partial-cache.max-rows'`` keys, least recently used first out, each until it expires
``'lookup.partial-cache.expire-after-write'`` after it was read or
``'lookup.partial-cache.expire-after-access'`` after it was last used; only the keys the cache
lacks reach the server.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from clink.errors import ConnectorError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import OptionSpec, TableSpec
from clink.runtime.settings import parse_duration

OPTIONS = (
    OptionSpec(name="lookup.cache", default="NONE", choices=("NONE", "PARTIAL"),
               description="keep looked-up rows in memory (PARTIAL) or ask the server every time (NONE)"),
    OptionSpec(name="lookup.partial-cache.max-rows", description="keys the lookup cache holds at most"),
    OptionSpec(name="lookup.partial-cache.expire-after-write",
               description="how long a cached key is kept after it was read"),
    OptionSpec(name="lookup.partial-cache.expire-after-access",
               description="how long a cached key is kept after it was last used"),
    OptionSpec(name="lookup.partial-cache.cache-missing-key", default="true", choices=("true", "false"),
               description="cache that a key has no row, too"),
)


def count(options: Mapping[str, str], key: str, errors: dict[str, str], *, minimum: int = 0) -> int | None:
    """The whole number of option ``key`` (None when not given); a bad one goes to ``errors``."""
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        errors[key] = f"{text!r} is not a whole number of at least {minimum}"
        return None
    return value


def duration(options: Mapping[str, str], key: str, errors: dict[str, str]) -> int | None:
    """The duration of option ``key`` in milliseconds (None when not given)."""
    text = options.get(key)
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as e:
        errors[key] = str(e)
        return None


def check(options: Mapping[str, str], errors: dict[str, str]) -> None:
    """Check the cache options' values, adding messages keyed by option."""
    count(options, "lookup.partial-cache.max-rows", errors, minimum=1)
    duration(options, "lookup.partial-cache.expire-after-write", errors)
    duration(options, "lookup.partial-cache.expire-after-access", errors)


class KeyLookup:
    """``lookup(keys)``: the rows (``spec.schema``) whose key columns ``keys`` names hold one of
    the given keys, asked of ``query`` (distinct non-NULL keys in, their rows out) through the
    partial cache the table's options describe. ``metrics`` counts queries, hits and misses."""

    def __init__(self, spec: TableSpec, keys: tuple[str, ...], clock: Callable[[], int],
                 query: Callable[[pa.Table], pa.Table], connector: str) -> None:
        errors: dict[str, str] = {}
        max_rows = count(spec.options, "lookup.partial-cache.max-rows", errors, minimum=1)
        after_write = duration(spec.options, "lookup.partial-cache.expire-after-write", errors)
        after_access = duration(spec.options, "lookup.partial-cache.expire-after-access", errors)
        if errors:
            details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
            raise ConnectorError(f"table {spec.name!r}: bad {connector} options: {details}")
        missing = [k for k in keys if k not in spec.schema.names]
        if missing:
            raise ConnectorError(f"table {spec.name!r}: lookup key {', '.join(map(repr, missing))} is not a column")
        self._spec = spec
        self._keys = keys
        self._query = query
        self._cached = (spec.options.get("lookup.cache") or "NONE").upper() == "PARTIAL"
        self._max_rows = max_rows
        self._after_write = after_write  # milliseconds, as the clock counts
        self._after_access = after_access
        self._cache_missing = (spec.options.get("lookup.partial-cache.cache-missing-key") or "true").lower() == "true"
        self._clock = clock
        #: key tuple -> (its rows, written at, last used at), least recently used first.
        self._cache: OrderedDict[tuple, tuple[pa.Table, float, float]] = OrderedDict()
        self.metrics = {"queries": 0, "cache_hits": 0, "cache_misses": 0}

    def lookup(self, keys: pa.Table) -> pa.Table:
        keys = keys.select(list(self._keys))
        keys = keys.group_by(list(self._keys), use_threads=False).aggregate([])  # each key once
        keys = keys.filter(_all_valid(keys))  # a NULL key matches nothing
        if not self._cached:
            return self._ask(keys)
        now = self._clock()
        found: list[pa.Table] = []
        wanted = np.zeros(keys.num_rows, dtype=bool)
        # One dictionary probe per distinct key of the batch: the cache is keyed by Python values.
        for i, key in enumerate(zip(*(c.to_pylist() for c in keys.columns))):
            entry = self._cache.get(key)
            if entry is not None and not self._expired(entry, now):
                self._cache[key] = (entry[0], entry[1], now)
                self._cache.move_to_end(key)
                found.append(entry[0])
            else:
                wanted[i] = True
        self.metrics["cache_hits"] += int(keys.num_rows - wanted.sum())
        self.metrics["cache_misses"] += int(wanted.sum())
        if wanted.any():
            asked = keys.filter(pa.array(wanted))
            rows = self._ask(asked)
            found.append(rows)
            self._remember(asked, rows, now)
        return pa.concat_tables(found).combine_chunks() if found else self._spec.schema.empty_table()

    def _ask(self, keys: pa.Table) -> pa.Table:
        if keys.num_rows == 0:
            return self._spec.schema.empty_table()
        self.metrics["queries"] += 1
        return self._query(keys)

    def _expired(self, entry: tuple[pa.Table, float, float], now: float) -> bool:
        return bool((self._after_write and now - entry[1] >= self._after_write)
                    or (self._after_access and now - entry[2] >= self._after_access))

    def _remember(self, asked: pa.Table, rows: pa.Table, now: float) -> None:
        index = "__row"
        positions = rows.select(list(self._keys)).append_column(index, pa.array(np.arange(rows.num_rows)))
        grouped = positions.group_by(list(self._keys), use_threads=False).aggregate([(index, "list")])
        by_key = dict(zip(zip(*(grouped.column(k).to_pylist() for k in self._keys)),
                          grouped.column(f"{index}_list").to_pylist()))
        for key in zip(*(c.to_pylist() for c in asked.columns)):
            taken = by_key.get(key)
            if taken is None and not self._cache_missing:
                continue
            self._cache[key] = (rows.take(pa.array(taken or [], pa.int64())), now, now)
            self._cache.move_to_end(key)
        while self._max_rows is not None and len(self._cache) > self._max_rows:
            self._cache.popitem(last=False)


def _all_valid(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    valid = pa.array(np.ones(table.num_rows, dtype=bool))
    for column in table.columns:
        valid = pc.and_(valid, pc.is_valid(column))
    return valid
