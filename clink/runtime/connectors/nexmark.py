"""The ``nexmark`` source: the event stream of the Nexmark benchmark, generated a block at a time.

One table holds every event. ``event_type`` says which of the three ``ROW`` columns is set (0
``person``, 1 ``auction``, 2 ``bid``); the other two are NULL. The generator follows the
Nexmark specification as the nexmark-flink benchmark implements it:

- events are numbered from 0; event ``n`` is a person, an auction or a bid according to
  ``n % 50`` and the proportions 1:3:46 (``person.proportion`` and friends);
- event ``n`` happens at ``base-time + floor(n * 1e6 / rate) / 1000`` milliseconds, so event time
  depends on the event number only, never on the wall clock;
- person and auction ids count up from 1000 in the order the events are generated; a bid names
  a "hot" auction (the first of the last block of 100) with probability
  ``1 - 1/bid.hot-ratio.auctions``, otherwise one of the last 100 auctions or up to 10 ahead of
  the newest; bidders and sellers are chosen the same way from the last 1000 people;
- prices are ``round(10 ** (6u) * 100)`` with ``u`` uniform in [0, 1): cents from 1.00 to 1M;
- ``extra`` pads each event to its average size (``*.avg-size``), within 20% either way.

Output is reproducible: the random draws of a block of ``batch-size`` events depend only on
``seed``, the block's number and the kind of event, so the same seed gives the same events
whatever the projection, the throttling or the timing of the polls, and ``seek`` resumes exactly.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink import records
from clink.errors import ConnectorError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, OptionSpec, TableSpec, widen_struct
from clink.runtime.connectors.blocks import BlockReader

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["NEXMARK", "NEXMARK_SCHEMA", "NexmarkConfig", "NexmarkGenerator", "NexmarkReader"]

PERSON, AUCTION, BID = 0, 1, 2
_KINDS = ("person", "auction", "bid")

_TS = pa.timestamp("ms")
NEXMARK_SCHEMA = pa.schema([
    pa.field("event_type", pa.int32()),
    pa.field("person", pa.struct([
        ("id", pa.int64()), ("name", pa.string()), ("emailAddress", pa.string()),
        ("creditCard", pa.string()), ("city", pa.string()), ("state", pa.string()),
        ("dateTime", _TS), ("extra", pa.string()),
    ])),
    pa.field("auction", pa.struct([
        ("id", pa.int64()), ("itemName", pa.string()), ("description", pa.string()),
        ("initialBid", pa.int64()), ("reserve", pa.int64()), ("dateTime", _TS), ("expires", _TS),
        ("seller", pa.int64()), ("category", pa.int64()), ("extra", pa.string()),
    ])),
    pa.field("bid", pa.struct([
        ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()), ("channel", pa.string()),
        ("url", pa.string()), ("dateTime", _TS), ("extra", pa.string()),
    ])),
])

#: Event time starts here unless 'base-time' says otherwise (the instant datagen anchors on too).
DEFAULT_BASE_TIME_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z

# Constants of the Nexmark generator.
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_RATIO = 100  # hot sellers, bidders and auctions are the first of each block of 100 ids
ID_LEAD = 10  # random person and auction ids may run this far ahead of the newest one
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
NUM_CHANNELS = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle",
             "Kent", "Cheyenne")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
# Bytes an event counts before its 'extra' (ids, numbers and timestamps count 8 bytes each).
_BID_FIXED_SIZE = 8 + 8 + 8 + 8
_AUCTION_FIXED_SIZE = 8 + 8 + 8 + 8 + 8 + 8
_PERSON_FIXED_SIZE = 8

_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
_DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)
# Arrow scalars made once: converting a Python str on every call costs a failed import each time.
_AT, _EMPTY, _DOT_COM = pa.scalar("@"), pa.scalar(""), pa.scalar(".com")
_TRIM_SPACES = pc.TrimOptions(" ")

SOURCE_OPTIONS = (
    OptionSpec(name="events.num", description="events to generate; absent or 0: the stream never ends"),
    OptionSpec(name="first-event.rate", default="10000",
               description="events per second of event time: event n happens n / rate seconds after 'base-time'"),
    OptionSpec(name="rate", description="another name for 'first-event.rate'"),
    OptionSpec(name="next-event.rate",
               description="accepted so that nexmark-flink DDL runs unchanged; the rate stays 'first-event.rate'"),
    OptionSpec(name="rate.limited", default="false", choices=("true", "false"),
               description="true: emit events no faster than the rate, against the clock"),
    OptionSpec(name="base-time", default="2024-01-01 00:00:00",
               description="event time of the first event: an ISO timestamp (UTC) or milliseconds since the epoch"),
    OptionSpec(name="seed", default="0", description="random seed; the same seed gives the same events"),
    OptionSpec(name="batch-size", default="65536", description="events per generated block"),
    OptionSpec(name="person.proportion", default="1", description="people among each proportion total of events"),
    OptionSpec(name="auction.proportion", default="3", description="auctions among each proportion total of events"),
    OptionSpec(name="bid.proportion", default="46", description="bids among each proportion total of events"),
    OptionSpec(name="bid.hot-ratio.auctions", default="2",
               description="a bid is for a hot auction with probability 1 - 1/ratio"),
    OptionSpec(name="bid.hot-ratio.bidders", default="4",
               description="a bid is by a hot bidder with probability 1 - 1/ratio"),
    OptionSpec(name="auction.hot-ratio.sellers", default="4",
               description="an auction is by a hot seller with probability 1 - 1/ratio"),
    OptionSpec(name="person.avg-size", default="200b", description="average size of a person, 'extra' included"),
    OptionSpec(name="auction.avg-size", default="500b", description="average size of an auction, 'extra' included"),
    OptionSpec(name="bid.avg-size", default="100b", description="average size of a bid, 'extra' included"),
)


@records.record(kw_only=True)
class NexmarkConfig:
    """The generator's settings, already parsed and checked."""

    events: int | None = None  # None: never ends
    rate: int = 10_000
    rate_limited: bool = False
    base_time_ms: int = DEFAULT_BASE_TIME_MS
    seed: int = 0
    batch_size: int = 65_536
    proportions: tuple[int, int, int] = (1, 3, 46)
    hot_auctions: int = 2
    hot_bidders: int = 4
    hot_sellers: int = 4
    avg_sizes: tuple[int, int, int] = (200, 500, 100)  # person, auction, bid

    @property
    def total_proportion(self) -> int:
        return sum(self.proportions)

    @property
    def inter_event_delay_us(self) -> float:
        return 1_000_000.0 / self.rate


# --- option parsing -------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+)\s*(b|bytes|k|kb|kib|m|mb|mib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "bytes": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20}


def _parse(options: Mapping[str, str]) -> tuple[NexmarkConfig | None, dict[str, str]]:
    """Parse the options; returns the config, or ``None`` and error messages keyed by option."""
    errors: dict[str, str] = {}
    values: dict[str, object] = {}

    def integer(key: str, minimum: int, maximum: int = 2**63 - 1) -> int | None:
        if key not in options:
            return None
        try:
            value = int(options[key].strip())
        except ValueError:
            errors[key] = f"option {key!r} must be an integer, found {options[key]!r}"
            return None
        if not minimum <= value <= maximum:
            errors[key] = f"option {key!r} must be from {minimum} to {maximum}, found {value}"
            return None
        return value

    if (events := integer("events.num", 0)) is not None:
        values["events"] = events or None  # 0 means "as many as possible", as in Nexmark
    if "rate" in options and "first-event.rate" in options and options["rate"] != options["first-event.rate"]:
        errors["rate"] = ("options 'rate' and 'first-event.rate' name the same setting and disagree "
                          f"({options['rate']!r} and {options['first-event.rate']!r}); keep one")
    for key in ("first-event.rate", "rate"):
        if (rate := integer(key, 1, 1_000_000_000)) is not None:
            values["rate"] = rate
    integer("next-event.rate", 1, 1_000_000_000)  # checked, not used (see its description)
    if "rate.limited" in options:
        flag = options["rate.limited"].strip().lower()
        if flag not in ("true", "false"):
            errors["rate.limited"] = f"option 'rate.limited' must be 'true' or 'false', found {options['rate.limited']!r}"
        values["rate_limited"] = flag == "true"
    if "base-time" in options:
        text = options["base-time"].strip()
        try:
            values["base_time_ms"] = int(text)
        except ValueError:
            try:
                stamp = dt.datetime.fromisoformat(text.replace(" ", "T").removesuffix("Z"))
                if stamp.tzinfo is not None:
                    stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
                values["base_time_ms"] = (stamp - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1)
            except ValueError:
                errors["base-time"] = ("option 'base-time' must be an ISO timestamp such as '2024-01-01 00:00:00' "
                                       f"or milliseconds since the epoch, found {options['base-time']!r}")
    if (seed := integer("seed", -(2**63))) is not None:
        values["seed"] = seed
    if (batch := integer("batch-size", 1, 1 << 22)) is not None:
        values["batch_size"] = batch
    proportions = [integer(f"{kind}.proportion", 0, 1_000_000) for kind in _KINDS]
    merged = tuple(p if p is not None else d for p, d in zip(proportions, NexmarkConfig().proportions, strict=True))
    if not any(f"{kind}.proportion" in errors for kind in _KINDS):
        if merged[0] == 0 or merged[1] == 0:
            key = "person.proportion" if merged[0] == 0 else "auction.proportion"
            errors[key] = (f"option {key!r} must be at least 1: bids and auctions refer to people and auctions, "
                           "so the stream needs some")
        values["proportions"] = merged
    for key, attr in (("bid.hot-ratio.auctions", "hot_auctions"), ("bid.hot-ratio.bidders", "hot_bidders"),
                      ("auction.hot-ratio.sellers", "hot_sellers")):
        if (ratio := integer(key, 1, 1_000_000)) is not None:
            values[attr] = ratio
    sizes = list(NexmarkConfig().avg_sizes)
    for i, kind in enumerate(_KINDS):
        key = f"{kind}.avg-size"
        if key in options:
            m = _SIZE.match(options[key])
            size = int(m[1]) * _SIZE_UNITS[m[2].lower() if m[2] else None] if m else -1
            if not 0 <= size <= 1 << 20:
                errors[key] = (f"option {key!r} must be a size from 0 to 1mb such as '100b' or '2kb', "
                               f"found {options[key]!r}")
            sizes[i] = size
    values["avg_sizes"] = tuple(sizes)
    if errors:
        return None, errors
    return NexmarkConfig(**values), {}  # type: ignore[arg-type]


def _check_schema(table_schema: pa.Schema) -> str | None:
    """Why the declared columns cannot be generated, or None. Columns and ROW fields may be left
    out or reordered, but each must have its Nexmark name and type."""
    for f in table_schema:
        if f.name not in NEXMARK_SCHEMA.names:
            return (f"the nexmark connector has no column {f.name!r}; its columns are "
                    f"{', '.join(NEXMARK_SCHEMA.names)} (see docs/connectors.md)")
        expected = NEXMARK_SCHEMA.field(f.name).type
        if not pa.types.is_struct(expected):
            if f.type != expected:
                return f"nexmark column {f.name!r} must be INT, found {f.type}"
            continue
        if not pa.types.is_struct(f.type):
            return f"nexmark column {f.name!r} must be a ROW<...> of {f.name} fields, found {f.type}"
        known = {child.name: child.type for child in expected}
        for child in f.type:
            if child.name not in known:
                return (f"nexmark column {f.name!r} has no field {child.name!r}; its fields are "
                        f"{', '.join(known)}")
            if child.type != known[child.name]:
                sql = {pa.int64(): "BIGINT", pa.string(): "STRING", _TS: "TIMESTAMP(3)"}[known[child.name]]
                return f"field {f.name}.{child.name} of the nexmark table must be {sql}, found {child.type}"
    return None


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check option values and the declared columns; returns messages keyed by option."""
    errors = _parse(options)[1]
    if (problem := _check_schema(table_schema)) is not None:
        errors["columns"] = problem  # not an option: reported at the CREATE TABLE statement
    return errors


# --- vectorized building blocks -------------------------------------------------------------


def _fixed(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """An array of type ``t`` over ``values``, from buffers (``pa.array`` on numpy is slower)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(t, len(values), [None, pa.py_buffer(values)])


def _strings(offsets: np.ndarray, data: pa.Buffer | np.ndarray) -> pa.Array:
    """A string array over int32 ``offsets`` (length + 1) and ``data``."""
    if isinstance(data, np.ndarray):
        data = pa.py_buffer(data)
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), data])


def _offsets_and_data(array: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """The int32 offsets (length + 1, not necessarily from 0) and the data buffer of a string array."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    data = array.buffers()[2]
    return offsets, data if data is not None else pa.py_buffer(b"")


def _lengths_to_offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _word_table(special: int) -> np.ndarray:
    """Characters by 16-bit random value: ``special`` with probability 5041/65536 (1/13 within
    0.01%), otherwise a lowercase letter (each within 0.05% of 1/26 of the rest)."""
    values = np.arange(1 << 16)
    return np.where(values < 5041, special, _LETTERS[values % 26]).astype(np.uint8)


_WORD_CHARS = {ord(" "): _word_table(ord(" ")), ord("_"): _word_table(ord("_"))}


def _words(rng: np.random.Generator, count: int, max_length: int, special: int) -> pa.Array:
    """``count`` Nexmark strings: 3 to ``max_length - 1`` characters, each ``special`` with
    probability 1/13 and otherwise a lowercase letter; surrounding spaces trimmed."""
    lengths = rng.integers(3, max_length, size=count, dtype=np.int32)
    offsets = _lengths_to_offsets(lengths)
    draws = rng.integers(0, 1 << 16, size=int(offsets[-1]), dtype=np.uint16)
    words = _strings(offsets, np.take(_WORD_CHARS[special], draws))
    return pc.utf8_trim(words, options=_TRIM_SPACES) if special == ord(" ") else words


def _pick_strings(offsets: np.ndarray, data: pa.Buffer, rows: np.ndarray, others_empty: bool) -> tuple[np.ndarray, pa.Buffer]:
    """Offsets and data of the strings ``rows`` (ascending) of the strings ``offsets`` and
    ``data``: the same data when the strings of the other rows are empty, else a copy."""
    if others_empty:
        return np.take(offsets, np.append(rows, rows[-1] + 1)), data
    return _offsets_and_data(_strings(offsets, data).take(pa.array(rows)))


def _blend(use_first: np.ndarray, first: np.ndarray | int, second: np.ndarray) -> np.ndarray:
    """``np.where(use_first, first, second)`` for int64, by arithmetic (several times faster on a
    random mask)."""
    return second + use_first.astype(np.int64) * (first - second)


def _java_round(x: np.ndarray) -> np.ndarray:
    """Java's ``Math.round``: halves round up."""
    return np.floor(x + 0.5).astype(np.int64)


def _prices(u: np.ndarray) -> np.ndarray:
    """Prices in cents from ``u`` uniform in [0, 1): ``round(10 ** (6u) * 100)``, so every order of
    magnitude from 1.00 to 1,000,000.00 is equally likely."""
    return _java_round(np.exp(u * (6.0 * math.log(10.0))) * 100.0)


def _bit_reverse32(values: np.ndarray) -> np.ndarray:
    """Java's ``Integer.reverse`` on non-negative ints below 2**31, as int32."""
    v = values.astype(np.uint32)
    out = np.zeros_like(v)
    for bit in range(32):
        out |= ((v >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    return out.view(np.int32)


# --- the generator --------------------------------------------------------------------------


class NexmarkGenerator:
    """Generates whole blocks of ``batch-size`` events as Arrow arrays, for the fields asked for.

    Everything random about one kind of event in one block comes from one generator seeded with
    (seed, block, kind) and is drawn in a fixed order whether or not a field is asked for, so a
    projection never changes the values. A block is always generated whole, so the first events
    of a longer stream are those of a shorter one.
    """

    def __init__(self, config: NexmarkConfig) -> None:
        self.config = config
        self._seed = config.seed % 2**64
        tables = np.random.default_rng([self._seed, 2**32 + 1])
        self._names = pa.array([f"{f} {l}" for f in FIRST_NAMES for l in LAST_NAMES], pa.string())
        self._name_lengths = np.array([len(s) for s in self._names.to_pylist()], dtype=np.int64)
        self._cities = pa.array(US_CITIES, pa.string())
        self._city_lengths = np.array([len(s) for s in US_CITIES], dtype=np.int64)
        self._states = pa.array(US_STATES, pa.string())
        self._state_lengths = np.array([len(s) for s in US_STATES], dtype=np.int64)
        self._channels, self._urls = self._channel_table(tables)
        # 'extra' is cut from a pool of letters long enough for the longest 'extra' column a block can have.
        fixed_sizes = (_PERSON_FIXED_SIZE, _AUCTION_FIXED_SIZE, _BID_FIXED_SIZE)
        per_block = [-(-config.batch_size // config.total_proportion) * p for p in config.proportions]
        longest = [max(0, size - fixed) * 6 // 5 + 1 for fixed, size in zip(fixed_sizes, config.avg_sizes, strict=True)]
        most = max(k * m for k, m in zip(per_block, longest, strict=True))
        self._pool = pa.py_buffer(_LETTERS[tables.integers(0, 26, size=most + (1 << 16), dtype=np.uint8)])
        # Which kind an event is, and where it stands among its epoch's people and auctions, repeat
        # every proportion total of events: a block reads them from these cycles at its phase.
        n, total = config.batch_size, config.total_proportion
        p, a, _ = config.proportions
        position = np.arange(n + total + 1, dtype=np.int64)
        offset = position % total
        self._steps = np.arange(n, dtype=np.int64)
        self._cycle_epoch = position // total
        self._cycle_kind = np.where(offset < p, PERSON, np.where(offset < p + a, AUCTION, BID)).astype(np.int32)
        self._cycle_person = np.minimum(offset, p - 1)
        self._cycle_auction = np.where(offset < p, -1, np.minimum(offset - p, a - 1))
        self._cycle_before = []  # events of each kind before each position
        for code in (PERSON, AUCTION, BID):
            before = np.zeros(len(position) + 1, dtype=np.int64)
            np.cumsum(self._cycle_kind == code, out=before[1:])
            self._cycle_before.append(before)

    def _channel_table(self, rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
        """Channel names and their URLs: channels 0..9999, then the hot channels."""
        count = NUM_CHANNELS + len(HOT_CHANNELS)
        parts = [_words(rng, count, 5, ord("_")) for _ in range(3)]
        base = pc.binary_join_element_wise("https://www.nexmark.com", *parts, "item.htm?query=1", "/")
        numbers = np.arange(NUM_CHANNELS, dtype=np.int64)
        ids = pc.cast(_fixed(np.abs(_bit_reverse32(numbers)).astype(np.int64), pa.int64()), pa.string())
        # Nine channels in ten carry their number in the URL; abs(MIN_VALUE) stays negative, as in Java.
        with_id = rng.integers(0, 10, size=NUM_CHANNELS) > 0
        suffix = pc.if_else(pa.array(with_id), pc.binary_join_element_wise("&channel_id=", ids, ""), "")
        urls = pa.concat_arrays([
            pc.binary_join_element_wise(base.slice(0, NUM_CHANNELS), suffix, ""),
            base.slice(NUM_CHANNELS),
        ])
        channels = pa.concat_arrays([
            pc.binary_join_element_wise("channel-", pc.cast(pa.array(numbers), pa.string()), ""),
            pa.array(HOT_CHANNELS, pa.string()),
        ])
        return channels, urls

    def _extra(self, rng: np.random.Generator, u: np.ndarray, current: np.ndarray | int, average: int,
               keep: np.ndarray | None = None) -> tuple[np.ndarray, pa.Buffer]:
        """Offsets and data of 'extra' strings that pad events of ``current`` bytes to ``average``
        bytes on average, 20% either way (empty when ``current`` is larger); ``u`` is uniform in
        [0, 1), one per event; rows where ``keep`` is false get ''. The text is lowercase filler
        cut from a seeded pool of letters."""
        want = average - np.asarray(current, dtype=np.int64)
        delta = np.floor(np.maximum(want, 0) * 0.2 + 0.5).astype(np.int64)
        lengths = np.maximum(want - delta, 0) + (u * (2 * delta)).astype(np.int64)
        if keep is not None:
            lengths *= keep
        offsets = _lengths_to_offsets(lengths)
        start = int(rng.integers(0, max(len(self._pool) - int(offsets[-1]), 1)))
        return offsets, self._pool.slice(start)

    # -- one block

    def event_times(self, events: np.ndarray) -> np.ndarray:
        """The event time (ms since the epoch) of events numbered ``events``."""
        return self.config.base_time_ms + (events * self.config.inter_event_delay_us).astype(np.int64) // 1000

    def kinds(self, index: int) -> np.ndarray:
        """The kind of each event of block ``index`` (0 person, 1 auction, 2 bid)."""
        phase = index * self.config.batch_size % self.config.total_proportion
        return self._cycle_kind[phase:phase + self.config.batch_size]

    def block(self, index: int, columns: Mapping[str, tuple[str, ...] | None],
              rows: np.ndarray | None = None) -> dict[str, pa.Array]:
        """The arrays of block ``index`` (events ``index * batch-size`` on) for ``columns``:
        column name -> the ROW's field names wanted (None for ``event_type``). ``rows``: the
        events of the block to make (ascending positions in it), None for all. Every random
        draw of the block is made either way, so a row holds the values a full block gives it;
        a kind none of whose events is among ``rows`` is not generated at all."""
        config = self.config
        n = config.batch_size
        p, a, _ = config.proportions
        first_epoch, phase = divmod(index * n, config.total_proportion)
        cycle = slice(phase, phase + n)
        kind = self._cycle_kind[cycle]
        times = self.event_times

        @functools.cache
        def block_ids() -> _Ids:
            """Every event's ids, made once a kind is generated (not for the event time alone)."""
            events = index * n + self._steps
            epoch = first_epoch + self._cycle_epoch[cycle]
            return _Ids(
                events=events,
                timestamps=times(events),
                # The newest person and auction (base 0) at each event: its own id for a person (an auction).
                last_person=epoch * p + self._cycle_person[cycle],
                last_auction=epoch * a + self._cycle_auction[cycle],
            )

        picked_kind = kind if rows is None else kind[rows]
        picked_times: np.ndarray | None = None  # made when first needed
        m = len(picked_kind)
        out: dict[str, pa.Array] = {}
        for name, fields in columns.items():
            if fields is None:
                out[name] = _fixed(picked_kind, pa.int32())
                continue
            code = _KINDS.index(name)
            mask = picked_kind == code
            rng = np.random.default_rng([self._seed, index, code])
            struct_type = pa.struct([NEXMARK_SCHEMA.field(name).type.field(f) for f in fields])
            if set(fields) <= {"dateTime"}:
                # Every event's time is its timestamp: a query that reads only the dateTime of
                # a kind (the table's computed event time does) needs no generation.
                if picked_times is None:
                    picked_times = block_ids().timestamps if rows is None else times(index * n + rows)
                children = [self._full(picked_times, child.type) for child in struct_type]
            elif not mask.any():
                # No event of this kind among the rows: the ROW is NULL in every one.
                children = [pa.nulls(m, child.type) for child in struct_type]
            elif code == BID:
                # Bids are most events: computed for every event, then only the rows' values
                # taken (fewer arrays than the inputs), with no scatter.
                of_kind = kind == code
                every = rows is None or int(np.count_nonzero(mask)) == int(np.count_nonzero(of_kind))
                values = self._bids(rng, block_ids(), set(fields), of_kind, rows, every)
                children = [self._full(values[f], child.type) for f, child in zip(fields, struct_type, strict=True)]
            else:
                of_kind = np.flatnonzero(kind == code)
                make = self._persons if code == PERSON else self._auctions
                values = make(rng, block_ids().take(of_kind), set(fields))
                before = self._cycle_before[code][phase:phase + n + 1] - self._cycle_before[code][phase]
                every = rows is None or len(of_kind) == int(np.count_nonzero(mask))
                children = [self._expand(values[f], of_kind, before, n, child.type, rows, every)
                            for f, child in zip(fields, struct_type, strict=True)]
            validity = None if rows is not None and mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))
            out[name] = pa.Array.from_buffers(struct_type, m, [validity], children=children)
        return out

    @staticmethod
    def _full(values: np.ndarray | tuple[np.ndarray, pa.Buffer], t: pa.DataType) -> pa.Array:
        if isinstance(values, tuple):
            return _strings(values[0], values[1])
        return _fixed(values, t)

    @staticmethod
    def _expand(values: np.ndarray | tuple[np.ndarray, pa.Buffer], of_kind: np.ndarray, before: np.ndarray,
                n: int, t: pa.DataType, rows: np.ndarray | None = None, every: bool = True) -> pa.Array:
        """Spread one kind's values (numpy, or string offsets and data), those of events
        ``of_kind``, over all ``n`` events of the block, or over ``rows`` of them (``every``: they
        hold every event of the kind); the events of other kinds, null in the ROW, hold 0 or ''."""
        if isinstance(values, tuple):
            offsets, data = values
            if rows is None:
                return _strings(np.take(offsets, before), data)
            if every:
                # Each row's string ends where the next row of the kind starts: no copy.
                return _strings(np.take(offsets, np.append(before[rows], before[rows[-1] + 1])), data)
            return _strings(np.take(offsets, before), data).take(pa.array(rows))
        full = np.zeros(n, dtype=np.int64)
        full[of_kind] = values
        return _fixed(full if rows is None else full[rows], t)

    def _some_person(self, u: np.ndarray, last_person: np.ndarray) -> np.ndarray:
        """A random person id (base 0) from ``u`` in [0, 1): one of the last 1000 people, or up to 10 ahead."""
        people = last_person + 1
        active = np.minimum(people, NUM_ACTIVE_PEOPLE)
        return people - active + (u * (active + ID_LEAD)).astype(np.int64)

    # Each kind draws a matrix of uniforms, one row per random choice. A choice made with
    # probability 1/ratio and the value it then needs share one uniform: given u < 1/ratio,
    # u * ratio is again uniform in [0, 1). Choices among few values use float32 uniforms;
    # prices, spread over eight orders of magnitude, use float64.

    def _persons(self, rng: np.random.Generator, ids: _Ids, wanted: set[str]) -> dict:
        k = len(ids.events)
        u = rng.random((4, k), dtype=np.float32)
        first_word = _words(rng, k, 7, ord(" "))
        second_word = _words(rng, k, 5, ord(" "))
        card = rng.integers(0, 10_000, size=(k, 4))
        name = (u[0] * len(self._names)).astype(np.int64)
        city = (u[1] * len(US_CITIES)).astype(np.int64)
        state = (u[2] * len(US_STATES)).astype(np.int64)
        email = pc.binary_join_element_wise(pc.binary_join_element_wise(first_word, second_word, _AT), _EMPTY, _DOT_COM)
        email_parts = _offsets_and_data(email)
        out: dict = {"id": ids.last_person + FIRST_PERSON_ID, "dateTime": ids.timestamps,
                     "emailAddress": email_parts}
        if "name" in wanted:
            out["name"] = _offsets_and_data(self._names.take(_fixed(name, pa.int64())))
        if "creditCard" in wanted:
            # "dddd dddd dddd dddd", built as a fixed-width character matrix.
            chars = np.full((k, 4, 5), ord(" "), dtype=np.uint8)
            for position, power in enumerate((1000, 100, 10, 1)):
                chars[:, :, position] = np.take(_DIGITS, (card // power) % 10)
            text = np.ascontiguousarray(chars.reshape(k, 20)[:, :19])
            out["creditCard"] = (np.arange(0, 19 * (k + 1), 19, dtype=np.int32), pa.py_buffer(text))
        if "city" in wanted:
            out["city"] = _offsets_and_data(self._cities.take(_fixed(city, pa.int64())))
        if "state" in wanted:
            out["state"] = _offsets_and_data(self._states.take(_fixed(state, pa.int64())))
        size = (_PERSON_FIXED_SIZE + np.take(self._name_lengths, name) + np.diff(email_parts[0]) + 19
                + np.take(self._city_lengths, city) + np.take(self._state_lengths, state))
        out["extra"] = self._extra(rng, u[3], size, self.config.avg_sizes[PERSON])
        return out

    def _auctions(self, rng: np.random.Generator, ids: _Ids, wanted: set[str]) -> dict:
        k = len(ids.events)
        config = self.config
        u = rng.random((4, k), dtype=np.float32)
        price_u = rng.random((2, k))
        item = _words(rng, k, 20, ord(" "))
        description = _words(rng, k, 100, ord(" "))
        # Seller: hot (the first of the newest block of 100 people), or a random active person.
        seller_u = u[0] * config.hot_sellers
        seller = _blend(seller_u >= 1, (ids.last_person // HOT_RATIO) * HOT_RATIO,
                        self._some_person(seller_u, ids.last_person))
        initial = _prices(price_u[0])
        # An auction lasts on average until NUM_IN_FLIGHT_AUCTIONS more auctions have started.
        ahead = NUM_IN_FLIGHT_AUCTIONS * config.total_proportion // config.proportions[AUCTION]
        later = config.base_time_ms + ((ids.events + ahead) * config.inter_event_delay_us).astype(np.int64) // 1000
        horizon = later - ids.timestamps
        expires = ids.timestamps + 1 + (u[1] * np.maximum(horizon * 2, 1)).astype(np.int64)
        item_parts, description_parts = _offsets_and_data(item), _offsets_and_data(description)
        size = _AUCTION_FIXED_SIZE + np.diff(item_parts[0]) + np.diff(description_parts[0])
        return {
            "id": ids.last_auction + FIRST_AUCTION_ID,
            "itemName": item_parts,
            "description": description_parts,
            "initialBid": initial,
            "reserve": initial + _prices(price_u[1]),
            "dateTime": ids.timestamps,
            "expires": expires,
            "seller": seller + FIRST_PERSON_ID,
            "category": (u[2] * NUM_CATEGORIES).astype(np.int64) + FIRST_CATEGORY_ID,
            "extra": self._extra(rng, u[3], size, config.avg_sizes[AUCTION]),
        }

    def _bids(self, rng: np.random.Generator, ids: _Ids, wanted: set[str], mask: np.ndarray,
              rows: np.ndarray | None = None, every: bool = True) -> dict:
        """Bid fields for every event of the block (``ids``; ``mask``: the bids), or for ``rows``
        of them (``every``: they hold every bid)."""
        config = self.config
        # Every draw is made whatever is wanted, so that each field's values do not depend on
        # which others are read; only the work of turning them into fields is skipped.
        u = rng.random((4, len(ids.events)), dtype=np.float32)
        price_u = rng.random(len(ids.events))
        extra = None
        if "extra" in wanted:
            # Its one draw (where the text starts) depends on the whole block's bids.
            extra = self._extra(rng, u[3], _BID_FIXED_SIZE, config.avg_sizes[BID], keep=mask)
            if rows is not None:
                extra = _pick_strings(*extra, rows, every)
        out: dict = {"dateTime": ids.timestamps if rows is None else ids.timestamps[rows]}
        if "auction" in wanted:
            # Hot (the first of the newest block of 100), or one of the last 100 or up to 10 ahead.
            auction_u = u[0] * config.hot_auctions
            recent = np.minimum(ids.last_auction, NUM_IN_FLIGHT_AUCTIONS)
            some_auction = ids.last_auction - recent + (auction_u * (recent + 1 + ID_LEAD)).astype(np.int64)
            auction = _blend(auction_u >= 1, (ids.last_auction // HOT_RATIO) * HOT_RATIO, some_auction)
            out["auction"] = (auction if rows is None else auction[rows]) + FIRST_AUCTION_ID
        if "bidder" in wanted:
            # Hot (the second of the newest block of 100 people, so that hot bidders are not hot
            # sellers), or a random active person.
            bidder_u = u[1] * config.hot_bidders
            bidder = _blend(bidder_u >= 1, (ids.last_person // HOT_RATIO) * HOT_RATIO + 1,
                            self._some_person(bidder_u, ids.last_person))
            out["bidder"] = (bidder if rows is None else bidder[rows]) + FIRST_PERSON_ID
        if "price" in wanted:
            out["price"] = _prices(price_u if rows is None else price_u[rows])
        if "channel" in wanted or "url" in wanted:
            # Half the bids come from one of the hot channels, the rest from one of 10,000.
            channel_u = u[2] * 2
            channel = _blend(channel_u >= 1, NUM_CHANNELS + ((channel_u - 1) * len(HOT_CHANNELS)).astype(np.int64),
                             (channel_u * NUM_CHANNELS).astype(np.int64))
            index = _fixed(channel if rows is None else channel[rows], pa.int64())
            if "channel" in wanted:
                out["channel"] = _offsets_and_data(self._channels.take(index))
            if "url" in wanted:
                out["url"] = _offsets_and_data(self._urls.take(index))
        if extra is not None:
            out["extra"] = extra
        return out


@records.record
class _Ids:
    """Per event of a block: its number, its event time, and the newest person and auction ids."""

    events: np.ndarray
    timestamps: np.ndarray
    last_person: np.ndarray
    last_auction: np.ndarray

    def take(self, rows: np.ndarray) -> _Ids:
        return _Ids(*(np.take(values, rows) for values in
                      (self.events, self.timestamps, self.last_person, self.last_auction)))


# --- the reader -----------------------------------------------------------------------------


class NexmarkReader(BlockReader):
    """Polls out Nexmark events a block at a time; with 'rate.limited', no faster than the rate."""

    # Events are a pure function of (seed, block, kind): the count given out says where to go on.
    position_key = "events"

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        config, errors = _parse(spec.options)
        if (problem := _check_schema(spec.table_schema)) is not None:
            errors["columns"] = problem
        if config is None or errors:
            details = "; ".join(errors.values())
            raise ConnectorError(f"table {spec.name!r}: bad nexmark table: {details}")
        if (problem := _check_schema(spec.schema)) is not None:
            raise ConnectorError(f"table {spec.name!r}: {problem}")
        self._config = config
        self._schema = spec.schema
        #: Per column, the ROW fields generated: those the plan reads (``TableSpec.fields``); the
        #: others are null. A query of bids alone then makes no people or auctions (the table's
        #: event time reads their ``dateTime``, which is the event's timestamp).
        self._columns: dict[str, tuple[str, ...] | None] = {}
        for f in spec.schema:
            if pa.types.is_struct(f.type):
                read = spec.fields.get(f.name)
                self._columns[f.name] = tuple(c.name for c in f.type if read is None or c.name in read)
            else:
                self._columns[f.name] = None
        self._generator = NexmarkGenerator(config)
        #: The kinds of event the plan keeps (``TableSpec.kept_values`` of ``event_type``), or
        #: None for all: the reader makes only their rows; the plan's filter stays above it.
        kept = spec.kept_values.get("event_type") if "event_type" in spec.schema.names else None
        self._kinds = None if kept is None else tuple(k for k in kept if isinstance(k, int) and 0 <= k < len(_KINDS))
        self._keeps = np.isin(np.arange(len(_KINDS)), self._kinds or ())  # by kind: made or not
        self._kept: np.ndarray | None = None  # the events of the current block that are made
        self._time_rows: pa.RecordBatch | None = None
        self._left_out = 0  # events of the last poll not made
        self._start_blocks(batch_size=config.batch_size, total=config.events,
                           rate=config.rate if config.rate_limited else None, clock=ctx.clock,
                           subtask=spec.subtask, parallelism=spec.parallelism)

    def poll(self) -> pa.RecordBatch | None:
        self._time_rows = None
        self._left_out = 0
        return super().poll()

    def time_rows(self) -> pa.RecordBatch | None:
        return self._time_rows

    def left_out(self) -> int:
        return self._left_out

    def _make_block(self, index: int, rows: int) -> pa.RecordBatch:
        if self._kinds is None:
            return self._batch(self._generator.block(index, self._columns))
        kinds = self._generator.kinds(index)[:rows]
        self._kept = np.flatnonzero(self._keeps[kinds])
        return self._batch(self._generator.block(index, self._columns, self._kept))

    def _slice(self, block: pa.RecordBatch, offset: int, count: int) -> pa.RecordBatch:
        if self._kinds is None:
            return super()._slice(block, offset, count)
        assert self._kept is not None
        low, high = (int(i) for i in np.searchsorted(self._kept, [offset, offset + count]))
        last = offset + count - 1
        self._left_out = count - (high - low)
        if high == low or self._kept[high - 1] != last:
            # The chunk's last event is of a kind left out: made alone, so that the watermark
            # moves to its time as it would in a run that kept every event.
            self._time_rows = self._time_row(self._block_index, last)
        return block if low == 0 and high == block.num_rows else block.slice(low, high - low)

    def _time_row(self, index: int, row: int) -> pa.RecordBatch:
        """Event ``row`` of block ``index`` alone, as a full run makes it. Unless the plan reads
        more than its kind's dateTime, built directly (this runs for most batches of a source
        that keeps few kinds): its event_type, its kind's dateTime, NULL elsewhere."""
        kind = int(self._generator.kinds(index)[row])
        name = _KINDS[kind]
        read = self._columns.get(name) or ()
        if not set(read) <= {"dateTime"}:
            return self._batch(self._generator.block(index, self._columns, np.array([row], dtype=np.int64)))
        time = self._generator.event_times(np.array([index * self._config.batch_size + row], dtype=np.int64))
        columns = []
        for f in self._schema:
            if not pa.types.is_struct(f.type):
                columns.append(_fixed(np.array([kind], dtype=np.int32), pa.int32()))
            elif f.name != name:
                columns.append(pa.nulls(1, f.type))
            else:
                children = [_fixed(time, c.type) if c.name in read else pa.nulls(1, c.type) for c in f.type]
                columns.append(pa.StructArray.from_arrays(children, fields=list(f.type)))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _batch(self, arrays: dict[str, pa.Array]) -> pa.RecordBatch:
        columns = [arrays[f.name] if arrays[f.name].type == f.type else widen_struct(arrays[f.name], f.type)
                   for f in self._schema]
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


NEXMARK = Connector(
    name="nexmark",
    description="the Nexmark benchmark's events: people, auctions and bids (bounded with 'events.num')",
    source_options=SOURCE_OPTIONS,
    create_source=NexmarkReader,
    validate=validate,
    splittable=True,
    # Ids count up with the events, whichever subtask generates them.
    unique_fields=(("person", "id"), ("auction", "id")),
)
