"""The ``datagen`` source: random or sequential rows, generated a whole batch at a time.

The semantics follow Flink's ``datagen`` connector:

- without ``number-of-rows`` and without a bounded ``sequence`` field the source never ends;
- ``rows-per-second`` throttles the output against the context's clock; a bounded table whose
  rate was not set explicitly is not throttled, so a bounded run finishes as fast as it can;
- each column is ``random`` (the default) or a ``sequence`` from ``start`` to ``end``
  (inclusive); a sequence with an ``end`` bounds the table as ``number-of-rows`` does, and the
  table ends at the first of the two limits.

Output is reproducible: rows are generated in blocks of ``batch-size`` rows, and the random
stream of a block depends only on ``seed``, the column's position in the table and the block's
number. The same seed therefore gives the same rows whatever the throttling, the projection or
the timing of the polls. Random temporal values are drawn from a window that ends at a fixed
instant, 2024-01-01 00:00:00, rather than at the wall-clock time.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.errors import ConnectorError
from clink.records import record
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, OptionSpec, TableSpec
from clink.runtime.connectors.blocks import BlockReader
from clink.runtime.connectors.randoms import Randoms

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["DATAGEN", "DatagenReader"]

#: Random temporal values end here, so that output does not depend on when a job runs.
ANCHOR_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
_DAY_MS = 86_400_000
_ALPHABET = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
_MAX_NESTED_LENGTH = 3
_UNITS_PER_MS = {"s": 1e-3, "ms": 1, "us": 1_000, "ns": 1_000_000}

SOURCE_OPTIONS = (
    OptionSpec(name="number-of-rows", description="rows to generate; absent means the table never ends"),
    OptionSpec(name="rows-per-second", default="10000",
               description="upper bound on the output rate; not applied to a bounded table unless set"),
    OptionSpec(name="seed", default="0", description="random seed; the same seed gives the same rows"),
    OptionSpec(name="batch-size", default="8192", description="rows per generated batch"),
    OptionSpec(name="fields.#.kind", default="random", choices=("random", "sequence"),
               description="how the column is generated"),
    OptionSpec(name="fields.#.min", description=(
        "smallest random value: a number, or an ISO date/time for temporal columns "
        "(default: the type's range for integers, 0 for floating point)")),
    OptionSpec(name="fields.#.max", description=(
        "largest random value: a number, or an ISO date/time for temporal columns "
        "(default: the type's range for integers, 1 for floating point)")),
    OptionSpec(name="fields.#.max-past", description=(
        "random timestamps and dates lie within this many milliseconds before 2024-01-01 00:00:00 "
        "(default: one day for timestamps, 365 days for dates)")),
    OptionSpec(name="fields.#.start", default="0", description="first value of a sequence"),
    OptionSpec(name="fields.#.end", description="last value of a sequence (inclusive); bounds the table"),
    OptionSpec(name="fields.#.length", default="10",
               description="length of random strings and byte strings"),
    OptionSpec(name="fields.#.null-rate", default="0.0",
               description="fraction of rows that are null, 0.0 to 1.0"),
)


@record(kw_only=True)
class FieldOptions:
    """The generation settings of one column, already parsed."""

    kind: str = "random"
    min: float | int | None = None
    max: float | int | None = None
    max_past: int | None = None
    start: int = 0
    end: int | None = None
    length: int = 10
    null_rate: float = 0.0


DEFAULT_FIELD = FieldOptions()


# --- option parsing -------------------------------------------------------------------------


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)


def _is_sequence_type(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t))


def _parse_bound(text: str, t: pa.DataType) -> float | int:
    """A ``min``/``max`` value in the column's unit: ms for timestamps and times, days for dates."""
    if _is_temporal(t):
        try:
            if pa.types.is_time(t):
                value = dt.time.fromisoformat(text)
                seconds = (value.hour * 60 + value.minute) * 60 + value.second
                return seconds * 1000 + value.microsecond // 1000
            if pa.types.is_date(t):
                return (dt.date.fromisoformat(text) - dt.date(1970, 1, 1)).days
            stamp = dt.datetime.fromisoformat(text.replace(" ", "T").removesuffix("Z"))
            return (stamp.replace(tzinfo=None) - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1)
        except ValueError:
            raise ValueError(
                f"expected an ISO date or time such as '2024-01-01 12:00:00', found {text!r}") from None
    if pa.types.is_integer(t):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, found {text!r}") from None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, found {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, found {text!r}")
    return value


def _int_range(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def _parse_field(name: str, t: pa.DataType, options: Mapping[str, str]) -> FieldOptions:
    """Parse the ``fields.<name>.*`` options of one column; raises ``ValueError`` naming the option."""
    prefix = f"fields.{name}."
    raw = {k[len(prefix):]: v for k, v in options.items()
           if k.startswith(prefix) and "." not in k[len(prefix):]}
    values: dict[str, object] = {}

    def fail(key: str, message: str) -> ValueError:
        return ValueError(f"{prefix}{key}: {message}")

    kind = raw.get("kind", "random").strip().lower()
    if kind not in ("random", "sequence"):
        raise fail("kind", f"expected 'random' or 'sequence', found {raw['kind']!r}")
    values["kind"] = kind
    if kind == "sequence" and not _is_sequence_type(t):
        raise fail("kind", f"a sequence needs a numeric or string column, and {name!r} is {t}")
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    applies = {"min": numeric or _is_temporal(t), "max": numeric or _is_temporal(t),
               "max-past": pa.types.is_timestamp(t) or pa.types.is_date(t),
               "length": pa.types.is_string(t) or pa.types.is_binary(t)}
    for key, ok in applies.items():
        if key in raw and not ok:
            raise fail(key, f"does not apply to column {name!r} of type {t}")
    for key in ("min", "max"):
        if key in raw:
            try:
                values[key] = _parse_bound(raw[key], t)
            except ValueError as e:
                raise fail(key, str(e)) from None
    for key, attr in (("max-past", "max_past"), ("start", "start"), ("end", "end"), ("length", "length")):
        if key in raw:
            try:
                values[attr] = int(raw[key])
            except ValueError:
                raise fail(key, f"expected an integer, found {raw[key]!r}") from None
            if key in ("max-past", "length") and values[attr] < 0:  # type: ignore[operator]
                raise fail(key, f"must not be negative, found {raw[key]!r}")
    if "null-rate" in raw:
        try:
            rate = float(raw["null-rate"])
        except ValueError:
            rate = math.nan
        if not 0.0 <= rate <= 1.0:
            raise fail("null-rate", f"expected a number from 0.0 to 1.0, found {raw['null-rate']!r}")
        values["null_rate"] = rate
    field = FieldOptions(**values)  # type: ignore[arg-type]
    if field.min is not None and field.max is not None and field.min > field.max:
        raise fail("min", f"is greater than fields.{name}.max ({raw['min']} > {raw['max']})")
    if kind == "sequence":
        if field.end is not None and field.end < field.start:
            raise fail("end", f"is smaller than fields.{name}.start ({field.end} < {field.start})")
        if pa.types.is_integer(t):
            lo, hi = _int_range(t)
            for key, v in (("start", field.start), ("end", field.end)):
                if v is not None and not lo <= v <= hi:
                    raise fail(key, f"{v} does not fit the column type {t}")
    return field


@record(kw_only=True)
class DatagenConfig:
    number_of_rows: int | None
    rows_per_second: float | None  # None: not throttled
    seed: int
    batch_size: int
    fields: Mapping[str, FieldOptions]


def _parse(options: Mapping[str, str],
           table_schema: pa.Schema) -> tuple[DatagenConfig | None, dict[str, str]]:
    """Parse datagen's options; returns the config, or ``None`` and the errors keyed by option."""
    errors: dict[str, str] = {}

    def integer(key: str, default: int | None, minimum: int) -> int | None:
        if key not in options:
            return default
        try:
            value = int(options[key])
        except ValueError:
            errors[key] = f"expected an integer, found {options[key]!r}"
            return default
        if value < minimum:
            errors[key] = f"must be at least {minimum}, found {value}"
        return value

    number_of_rows = integer("number-of-rows", None, 0)
    seed = integer("seed", 0, -(2**63))
    batch_size = integer("batch-size", 8192, 1)
    rate: float | None = 10000.0
    if "rows-per-second" in options:
        try:
            rate = float(options["rows-per-second"])
        except ValueError:
            rate = math.nan
        if not (rate > 0 and math.isfinite(rate)):
            errors["rows-per-second"] = f"expected a positive number, found {options['rows-per-second']!r}"

    names = set(table_schema.names)
    for key in options:
        if key.startswith("fields."):
            column = key[len("fields."):].rpartition(".")[0]
            # Options on nested fields (``fields.s.x.kind``) are accepted and ignored.
            if column not in names and column.split(".")[0] not in names:
                errors[key] = f"no column {column!r} in the table; columns: {', '.join(table_schema.names)}"

    fields: dict[str, FieldOptions] = {}
    for f in table_schema:
        if (problem := _unsupported(f.type)) is not None:
            errors[f"fields.{f.name}.kind"] = f"datagen cannot generate column {f.name!r}: {problem}"
            continue
        try:
            fields[f.name] = _parse_field(f.name, f.type, options)
        except ValueError as e:
            key, _, message = str(e).partition(": ")
            errors[key] = message
    if errors:
        return None, errors

    bounded = number_of_rows is not None or any(
        fo.kind == "sequence" and fo.end is not None for fo in fields.values())
    if bounded and "rows-per-second" not in options:
        rate = None
    return DatagenConfig(number_of_rows=number_of_rows, rows_per_second=rate, seed=seed or 0,
                         batch_size=batch_size or 8192, fields=fields), {}


def _unsupported(t: pa.DataType) -> str | None:
    if (pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
            or pa.types.is_decimal128(t) or pa.types.is_string(t) or pa.types.is_binary(t)
            or pa.types.is_date32(t) or pa.types.is_time(t) or pa.types.is_timestamp(t)):
        return None
    if pa.types.is_struct(t):
        for child in t:
            if (problem := _unsupported(child.type)) is not None:
                return problem
        return None
    if pa.types.is_map(t):
        return _unsupported(t.key_type) or _unsupported(t.item_type)
    if pa.types.is_list(t):
        return _unsupported(t.value_type)
    return f"type {t} is not supported"


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check datagen's option values against the table; returns messages keyed by option."""
    return _parse(options, table_schema)[1]


# --- generation -----------------------------------------------------------------------------


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    """An Arrow validity bitmap from a numpy "is null" mask (``None`` when nothing is null)."""
    if mask is None or not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask, bitorder="little"))


def _fixed(values: np.ndarray, t: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    """A fixed-width array of type ``t`` over ``values`` (already of ``t``'s width). Built from
    buffers: ``pa.array`` on a numpy array first imports ``numpy.ma`` (20 ms of cold start)."""
    values = np.ascontiguousarray(values)
    assert values.dtype.itemsize * 8 == t.bit_width, (values.dtype, t)
    return pa.Array.from_buffers(t, len(values), [_validity(mask), pa.py_buffer(values)])


def _text(rng: Randoms, n: int, length: int, t: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    if pa.types.is_string(t):
        data = _ALPHABET[rng.integers(0, len(_ALPHABET), size=n * length, dtype=np.uint8)]
    else:
        data = rng.integers(0, 256, size=n * length, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * length, length, dtype=np.int32)
    return pa.Array.from_buffers(t, n, [_validity(mask), pa.py_buffer(offsets), pa.py_buffer(data)])


def _decimal(unscaled: np.ndarray, t: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    words = np.empty((len(unscaled), 2), dtype=np.int64)
    words[:, 0] = unscaled
    words[:, 1] = unscaled >> 63  # sign extension into the high word of the 128-bit value
    return pa.Array.from_buffers(t, len(unscaled), [_validity(mask), pa.py_buffer(words)])


def _lengths_to_offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def generate(t: pa.DataType, rng: Randoms, n: int, field: FieldOptions = DEFAULT_FIELD,
             row_start: int = 0) -> pa.Array:
    """Generate ``n`` values of type ``t``; ``row_start`` is the row number of the first (sequences).

    >>> generate(pa.int32(), Randoms(0), 3, FieldOptions(kind="sequence", start=5)).to_pylist()
    [5, 6, 7]
    """
    mask: np.ndarray | None = None
    if field.null_rate > 0:
        mask = rng.random(n) < field.null_rate

    if field.kind == "sequence":
        seq = np.arange(field.start + row_start, field.start + row_start + n, dtype=np.int64)
        if pa.types.is_decimal(t):
            return _decimal(seq * 10**t.scale, t, mask)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pc.cast(pa.array(seq, mask=mask), t)
        return _fixed(seq.astype(t.to_pandas_dtype()), t, mask)

    if pa.types.is_boolean(t):
        return pa.array(rng.integers(0, 2, size=n, dtype=np.uint8).astype(bool), mask=mask)
    if pa.types.is_integer(t):
        lo, hi = _int_range(t)
        lo = int(field.min) if field.min is not None else lo
        hi = int(field.max) if field.max is not None else hi
        values = rng.integers(lo, hi, size=n, dtype=t.to_pandas_dtype(), endpoint=True)
        return _fixed(values, t, mask)
    if pa.types.is_floating(t):
        # With one bound given, the other is one unit away, so the range is never empty.
        if field.min is not None:
            lo_f = float(field.min)
            hi_f = float(field.max) if field.max is not None else lo_f + 1
        else:
            hi_f = float(field.max) if field.max is not None else 1.0
            lo_f = hi_f - 1
        return _fixed(rng.uniform(lo_f, hi_f, n).astype(t.to_pandas_dtype()), t, mask)
    if pa.types.is_decimal(t):
        digits = min(t.precision, 18)  # unscaled values are drawn as int64
        bound = 10**digits - 1
        scale = 10**t.scale
        lo = max(-bound, int(decimal.Decimal(field.min) * scale)) if field.min is not None else -bound
        hi = min(bound, int(decimal.Decimal(field.max) * scale)) if field.max is not None else bound
        return _decimal(rng.integers(lo, hi, size=n, dtype=np.int64, endpoint=True), t, mask)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _text(rng, n, field.length, t, mask)
    if pa.types.is_date(t):
        past = field.max_past if field.max_past is not None else 365 * _DAY_MS
        hi = int(field.max) if field.max is not None else ANCHOR_MS // _DAY_MS
        lo = int(field.min) if field.min is not None else hi - past // _DAY_MS
        values = rng.integers(lo, hi, size=n, dtype=np.int32 if t.bit_width == 32 else np.int64, endpoint=True)
        if t.bit_width == 64:  # date64 counts milliseconds
            values = values * _DAY_MS
        return _fixed(values, t, mask)
    if pa.types.is_time(t):
        lo = int(field.min) if field.min is not None else 0
        hi = int(field.max) if field.max is not None else _DAY_MS - 1
        ms = rng.integers(lo, hi, size=n, dtype=np.int64, endpoint=True)
        values = (ms * _UNITS_PER_MS[t.unit]).astype(np.int64) if t.unit != "s" else ms // 1000
        return _fixed(values.astype(np.int32 if t.bit_width == 32 else np.int64), t, mask)
    if pa.types.is_timestamp(t):
        past = field.max_past if field.max_past is not None else _DAY_MS
        hi = int(field.max) if field.max is not None else ANCHOR_MS
        lo = int(field.min) if field.min is not None else hi - past
        # Draw in the column's own unit so sub-millisecond digits are random too.
        per_ms = _UNITS_PER_MS[t.unit]
        if t.unit == "s":
            values = rng.integers(lo // 1000, hi // 1000, size=n, dtype=np.int64, endpoint=True)
        else:
            values = rng.integers(lo * int(per_ms), hi * int(per_ms), size=n, dtype=np.int64, endpoint=True)
        return _fixed(values, t, mask)
    if pa.types.is_struct(t):
        children = [generate(child.type, rng, n) for child in t]
        struct_mask = pa.array(mask) if mask is not None else None
        return pa.StructArray.from_arrays(children, fields=list(t), mask=struct_mask)
    if pa.types.is_list(t) or pa.types.is_map(t):
        lengths = rng.integers(0, _MAX_NESTED_LENGTH, size=n, dtype=np.int32, endpoint=True)
        if mask is not None:
            lengths[mask] = 0
        offsets = pa.array(_lengths_to_offsets(lengths))
        total = int(lengths.sum())
        arrow_mask = pa.array(mask) if mask is not None else None
        if pa.types.is_map(t):
            keys = generate(t.key_type, rng, total)
            items = generate(t.item_type, rng, total)
            return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=arrow_mask)
        values = generate(t.value_type, rng, total)
        return pa.ListArray.from_arrays(offsets, values, type=t, mask=arrow_mask)
    raise ConnectorError(f"datagen cannot generate type {t}")


class DatagenReader(BlockReader):
    """Polls out generated rows, throttled to ``rows-per-second`` against ``ctx.clock``."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        config, errors = _parse(spec.options, spec.table_schema)
        if config is None:
            details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
            raise ConnectorError(f"table {spec.name!r}: bad datagen options: {details}")
        self._config = config
        self._schema = spec.schema
        self._columns = [(spec.table_schema.get_field_index(f.name), f) for f in spec.schema]
        total = config.number_of_rows
        for fo in config.fields.values():
            if fo.kind == "sequence" and fo.end is not None:
                span = fo.end - fo.start + 1
                total = span if total is None else min(total, span)
        self._start_blocks(batch_size=config.batch_size, total=total, rate=config.rows_per_second, clock=ctx.clock,
                           subtask=spec.subtask, parallelism=spec.parallelism)

    def _make_block(self, index: int, rows: int) -> pa.RecordBatch:
        # Rows are a pure function of (seed, column, block index): the count of rows given out
        # says exactly where to continue.
        arrays = []
        for position, f in self._columns:
            rng = Randoms(self._config.seed, position, index)
            arrays.append(generate(f.type, rng, rows, self._config.fields[f.name],
                                   row_start=index * self._config.batch_size))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


DATAGEN = Connector(
    name="datagen",
    description="random or sequential rows, generated (bounded with 'number-of-rows')",
    source_options=SOURCE_OPTIONS,
    create_source=DatagenReader,
    validate=validate,
    splittable=True,
)
