"""The ``redis`` connector: Redis Streams in and out, and hashes written by key and read whole.

A table is one Redis data structure (``'data-structure'``):

- ``stream`` (the default): the stream at key ``'stream'``. As a source, entries are read in ID
  order with ``XRANGE`` (``'scan.fetch-size'`` entries per round trip) from an ID kept in clink's
  checkpoints, not in a consumer group; each entry's fields are matched to the table's columns by
  name and decoded a batch at a time. As a sink, each row is appended with ``XADD``, pipelined.
- ``hash``: one hash per row, at the key ``'key.prefix'`` followed by the row's primary-key
  values joined by ``'key.delimiter'``; its fields are the row's columns. As a sink it upserts by
  the key (``-D`` deletes the hash); as a source it is read whole (``SCAN`` with the prefix,
  then one pipelined ``HGETALL`` per batch of keys); on the right of a lookup join by its primary
  key it is read by key (``RedisHashLookup``: an ``HGETALL`` per key a batch asks for).

Values are text in Redis: written as Flink's ``CAST(x AS STRING)`` writes them, read as
``CAST(text AS type)`` reads them (``clink.runtime.kernels.cast``, a whole column at a time).
``BYTES`` are stored as they are. A NULL is a field left out of the entry (or hash).

Exactly-once stream sink (``'sink.delivery-guarantee' = 'exactly-once'``): rows are held until a
checkpoint; its ``pre_commit`` stores them, as Arrow IPC, in the field ``<checkpoint id>`` of the
hash ``_clink:pending:<stream>`` (in Redis: durable as Redis is, not visible in the stream). Its
``commit`` appends them in one ``MULTI``/``EXEC`` transaction, under ``WATCH`` of the stream and
of the ledger ``_clink:ledger:<stream>``, together with the ledger's ``committed`` checkpoint id
and the range of entry IDs the commit added (``undo:<id>``). The IDs are explicit: one
millisecond past the stream's last generated ID (or now, if later), sequence numbers from 0. A
commit of a checkpoint at or below ``committed`` adds nothing, so a commit repeated after a crash
does not add entries twice; a restore from an older checkpoint deletes (``XDEL``) the ranges that
later commits added, since the run writes those rows again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.errors import ConnectorError, EvaluationError, RecordError
from clink.records import record
from clink.runtime import compute as pc
from clink.runtime import kernels
from clink.runtime.connectors import lookup_cache
from clink.runtime.connectors.base import Connector, OptionSpec, SinkWriter, SourceReader, TableSpec
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE
from clink.runtime.settings import parse_duration

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["REDIS", "RedisHashReader", "RedisHashWriter", "RedisStreamReader", "RedisStreamWriter",
           "StreamId", "parse_options"]

#: Entries (or hash keys) per round trip, unless ``'scan.fetch-size'`` says otherwise.
FETCH_SIZE = 10_000
#: Stream entries per MULTI/EXEC when the rows of a commit (or a batch) are appended.
XADD_CHUNK = 10_000

_CONNECTION = (
    OptionSpec(name="url", description="redis://[:password@]host:port/db (or rediss://, unix://); "
                                       "instead of host, port, database and password"),
    OptionSpec(name="host", description="the Redis server's host", default="localhost"),
    OptionSpec(name="port", description="the Redis server's port", default="6379"),
    OptionSpec(name="database", description="the database number", default="0"),
    OptionSpec(name="password", description="the password (AUTH)"),
    OptionSpec(name="connection.timeout", default="30s",
               description="(clink) the longest a connection attempt or a reply from the server may take"),
    OptionSpec(name="data-structure", description="what a table is in Redis: a stream, or one hash per key",
               default="stream", choices=("stream", "hash")),
    OptionSpec(name="stream", description="the key of the stream (data-structure 'stream')"),
    OptionSpec(name="key.prefix", description="hash keys begin with this (data-structure 'hash'); "
                                              "default: the table's name and the delimiter"),
    OptionSpec(name="key.delimiter", description="between the primary key's values in a hash key", default=":"),
)
SOURCE_OPTIONS = _CONNECTION + (
    OptionSpec(name="scan.startup.mode", description="where reading a stream starts", default="earliest",
               choices=("earliest", "latest", "id")),
    OptionSpec(name="scan.startup.id", description="the first entry ID to read, with scan.startup.mode 'id'"),
    OptionSpec(name="scan.bounded.mode", description="unbounded, or latest: stop at the stream's last entry "
                                                     "when the job started", default="unbounded",
               choices=("unbounded", "latest")),
    OptionSpec(name="scan.fetch-size", description="entries (or hash keys) read per round trip",
               default=str(FETCH_SIZE)),
    OptionSpec(name="scan.ignore-parse-errors", default="false", choices=("true", "false"),
               description="(clink) skip and count stream entries whose values do not read as their columns"),
    OptionSpec(name="scan.dead-letter.stream",
               description="(clink) append stream entries whose values do not read as their columns to this "
                           "stream, with where they came from and why, and go on"),
) + lookup_cache.OPTIONS
SINK_OPTIONS = _CONNECTION + (
    OptionSpec(name="sink.delivery-guarantee", description="stream sink: at-least-once (rows appended as they "
                                                           "come) or exactly-once (appended at each checkpoint)",
               default="at-least-once", choices=("at-least-once", "exactly-once")),
)

_ID = re.compile(r"^(\d+)(?:-(\d+))?$")
_KINDS = pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE])


# --- options --------------------------------------------------------------------------------


@record
class StreamId:
    """A stream entry ID, ``<milliseconds>-<sequence>``, ordered as Redis orders them."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str | bytes) -> StreamId:
        if isinstance(text, bytes):
            text = text.decode()
        m = _ID.match(text.strip())
        if m is None:
            raise ValueError(f"{text!r} is not a stream entry ID (<milliseconds>-<sequence>, e.g. 1700000000000-0)")
        return cls(int(m.group(1)), int(m.group(2) or 0))

    def next(self) -> StreamId:
        """The smallest ID after this one (XRANGE's start is inclusive)."""
        return StreamId(self.ms, self.seq + 1) if self.seq < (1 << 64) - 1 else StreamId(self.ms + 1, 0)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


@record
class RedisOptions:
    url: str | None
    host: str
    port: int
    database: int
    password: str | None
    structure: str
    stream: str | None
    prefix: str | None
    delimiter: str
    startup: str
    startup_id: StreamId | None
    bounded: bool
    fetch: int
    exactly_once: bool
    #: Seconds a connection attempt or a reply may take ('connection.timeout').
    timeout_s: float = 30.0
    #: What a stream entry that does not read does: "fail", "skip" or "dead-letter".
    poison: str = "fail"
    dead_letter: str | None = None

    @property
    def server(self) -> str:
        """The server's address for messages, with the password hidden."""
        if self.url is None:
            return f"{self.host}:{self.port}/{self.database}"
        return re.sub(r"(://[^:@/]*:)[^@/]*@", r"\1***@", self.url)


def _is_flat(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_map(t))


def parse_options(options: Mapping[str, str], table_schema: pa.Schema) -> tuple[RedisOptions | None, dict[str, str]]:
    """Parse and check a redis table's options: the options, or the errors keyed by option."""
    errors: dict[str, str] = {}
    get = options.get

    def integer(name: str, default: str, low: int) -> int:
        text = get(name, default).strip()
        if not text.isdigit() or int(text) < low:
            errors[name] = f"{name!r} must be a whole number of at least {low}, not {text!r}"
            return low
        return int(text)

    url = get("url")
    if url is not None:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            errors["url"] = f"'url' must start with redis://, rediss:// or unix://, not {url!r}"
        for name in ("host", "port", "database", "password"):
            if name in options:
                errors[name] = f"give either 'url' or {name!r}, not both"
    port = integer("port", "6379", 1)
    timeout_ms = 30_000
    try:
        timeout_ms = parse_duration(get("connection.timeout", "30s"))
        if timeout_ms <= 0:
            raise ValueError("'connection.timeout' must be longer than 0")
    except ValueError as e:
        errors["connection.timeout"] = str(e)
    database = integer("database", "0", 0)
    fetch = integer("scan.fetch-size", str(FETCH_SIZE), 1)
    structure = get("data-structure", "stream").strip().lower()
    stream = get("stream")
    if structure == "stream":
        if not stream:
            errors["stream" if "stream" in options else "data-structure"] = (
                "a redis stream table needs the option 'stream' (the key of the stream)")
        for name in ("key.prefix", "key.delimiter"):
            if name in options:
                errors[name] = f"{name!r} applies to 'data-structure' = 'hash', not to a stream"
    else:
        if stream is not None:
            errors["stream"] = "'stream' applies to 'data-structure' = 'stream'; a hash table uses 'key.prefix'"
        for name in ("scan.startup.mode", "scan.startup.id", "scan.bounded.mode", "sink.delivery-guarantee",
                     "scan.ignore-parse-errors", "scan.dead-letter.stream"):
            if name in options:
                errors[name] = (f"{name!r} applies to a stream; a hash table is read whole, and written by key "
                                "(idempotent by nature)")
    if structure == "stream":
        for spec in lookup_cache.OPTIONS:
            if spec.name in options:
                errors[spec.name] = (f"{spec.name!r} applies to a lookup join on 'data-structure' = 'hash'; "
                                     "a stream is read whole by a lookup join")
    lookup_cache.check(options, errors)
    startup = get("scan.startup.mode", "earliest").strip().lower()
    startup_id = None
    if startup == "id":
        if "scan.startup.id" not in options:
            errors["scan.startup.mode"] = "'scan.startup.mode' = 'id' needs 'scan.startup.id' (the first entry ID)"
        else:
            try:
                startup_id = StreamId.parse(options["scan.startup.id"])
            except ValueError as e:
                errors["scan.startup.id"] = str(e)
    elif "scan.startup.id" in options:
        errors["scan.startup.id"] = "'scan.startup.id' needs 'scan.startup.mode' = 'id'"
    poison = "skip" if get("scan.ignore-parse-errors", "false").strip().lower() == "true" else "fail"
    dead_letter = get("scan.dead-letter.stream")
    if dead_letter is not None:
        if not dead_letter:
            errors["scan.dead-letter.stream"] = "'scan.dead-letter.stream' needs the key of a stream"
        elif dead_letter == stream:
            errors["scan.dead-letter.stream"] = "the dead-letter stream must not be the stream the table reads"
        elif poison == "skip":
            errors["scan.dead-letter.stream"] = ("give 'scan.dead-letter.stream' or 'scan.ignore-parse-errors', not "
                                                 "both: a bad entry either goes to the dead-letter stream or is skipped")
        poison = "dead-letter"
    for f in table_schema:
        if not _is_flat(f.type):
            errors["connector"] = (f"column {f.name!r} is a {f.type}; a redis field holds a flat value (a number, "
                                   "string, bytes, date or time), not a ROW, ARRAY or MAP")
    if errors:
        return None, errors
    return RedisOptions(
        url=url, host=get("host", "localhost"), port=port, database=database, password=get("password"),
        structure=structure, stream=stream, prefix=get("key.prefix"), delimiter=get("key.delimiter", ":"),
        startup=startup, startup_id=startup_id,
        bounded=get("scan.bounded.mode", "unbounded").strip().lower() == "latest", fetch=fetch,
        exactly_once=get("sink.delivery-guarantee", "at-least-once").strip().lower() == "exactly-once",
        timeout_s=timeout_ms / 1000, poison=poison, dead_letter=dead_letter,
    ), {}


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check the option values of a redis table; returns messages keyed by option."""
    return parse_options(options, table_schema)[1]


def _parsed(spec: TableSpec, schema: pa.Schema) -> RedisOptions:
    parsed, errors = parse_options(spec.options, schema)
    if parsed is None:
        details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
        raise ConnectorError(f"table {spec.name!r}: bad redis options: {details}")
    return parsed


def connect(opts: RedisOptions, table: str) -> Any:
    """A client of the server ``opts`` name, checked with a PING."""
    try:
        import redis
    except ImportError:
        raise ConnectorError(f"table {table!r}: the redis connector needs the redis client library: "
                             "pip install 'clink[redis]'") from None
    # Every call is bounded: a server that stops answering fails the job after the timeout.
    bounds = {"socket_timeout": opts.timeout_s, "socket_connect_timeout": opts.timeout_s}
    if opts.url is not None:
        client = redis.Redis.from_url(opts.url, **bounds)
    else:
        client = redis.Redis(host=opts.host, port=opts.port, db=opts.database, password=opts.password, **bounds)
    try:
        client.ping()
    except redis.RedisError as e:
        client.close()
        given = opts.password is not None or client.get_connection_kwargs().get("password") is not None
        if isinstance(e, redis.AuthenticationError) or "NOAUTH" in str(e):
            if not given:
                raise ConnectorError(f"table {table!r}: Redis at {opts.server} needs a password: set the "
                                     "'password' option (or put it in 'url')") from None
            raise ConnectorError(f"table {table!r}: Redis at {opts.server} refused the login: {e}; check the "
                                 "'password' option (or the password in 'url')") from None
        raise ConnectorError(f"table {table!r}: cannot reach Redis at {opts.server}: {e}") from None
    return client


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError,)


# --- values ---------------------------------------------------------------------------------


def encode_column(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The values of ``arr`` as Redis field values: text as Flink's CAST to STRING writes it
    (one Arrow cast for the whole column), bytes as they are; NULL stays NULL."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t)):
        return arr
    return kernels.cast(arr, pa.string())


def decode_columns(records: list[dict], schema: pa.Schema, where: str, ids: list | None = None) -> list[pa.Array]:
    """The columns of ``schema`` from ``records`` (field name -> bytes, as the client returns
    them): a missing field is NULL; text is read as CAST(text AS type), a column at a time."""
    columns = []
    for f in schema:
        name = f.name.encode()
        # One pass over the records per column: the client hands each record over as a dict.
        raw = pa.array([r.get(name) for r in records], pa.binary())
        t = f.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            columns.append(raw.cast(t))
            continue
        try:
            text = raw.cast(pa.string())
        except pa.ArrowInvalid:
            raise RecordError(f"field {f.name!r} is not UTF-8 text", file=where) from None
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            columns.append(text.cast(t))
            continue
        try:
            columns.append(kernels.cast(text, t))
        except (EvaluationError, pa.ArrowInvalid) as e:
            bad = kernels._first_bad(text, t) if not pa.types.is_boolean(t) else None
            entry = ""
            if ids is not None and bad is not None:
                entry = f" in entry {ids[text.to_pylist().index(bad)].decode()}"
            raise RecordError(f"{e} in field {f.name!r}{entry}", file=where) from None
    return columns


def _unreadable(values: pa.Array, convert: Any) -> list[tuple[int, str]]:
    """The positions of ``values`` that ``convert`` cannot read, each with the reason: runs of
    good values are converted together, and only a part that fails is halved."""
    try:
        convert(values)
        return []
    except (EvaluationError, pa.ArrowInvalid) as e:
        if len(values) == 1:
            return [(0, str(e).splitlines()[0] if str(e) else type(e).__name__)]
    mid = len(values) // 2
    return _unreadable(values[:mid], convert) + [(mid + j, r) for j, r in _unreadable(values[mid:], convert)]


def bad_entries(records: list[dict], schema: pa.Schema) -> dict[int, str]:
    """The entries of ``records`` with a value that does not read as its column, by position,
    with the first reason found for each (``field 'k': cannot CAST ...``)."""
    bad: dict[int, str] = {}
    for f in schema:
        t = f.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            continue
        name = f.name.encode()
        raw = pa.array([r.get(name) for r in records], pa.binary())

        def convert(part: pa.Array, t: pa.DataType = t) -> None:
            text = part.cast(pa.string())
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                kernels.cast(text, t)

        for i, reason in _unreadable(raw, convert):
            bad.setdefault(i, f"field {f.name!r}: {reason}")
    return bad


def _key_strings(table: pa.Table, key: tuple[str, ...], prefix: str, delimiter: str) -> pa.Array:
    """The hash key of every row: ``prefix`` and the key columns' text joined by ``delimiter``."""
    parts = [kernels.cast(table.column(k).combine_chunks(), pa.string()) for k in key]
    joined = pc.binary_join_element_wise(*parts, delimiter) if len(parts) > 1 else parts[0]
    return pc.binary_join_element_wise(pa.scalar(prefix), joined, "")


# --- stream source --------------------------------------------------------------------------


class RedisStreamReader(SourceReader):
    """Reads one stream in ID order, ``'scan.fetch-size'`` entries per ``XRANGE``.

    The position is the ID of the last entry handed out (and, when bounded, the ID the run stops
    at, fixed when the job first started, so a restored run ends where the first would have).
    """

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        self._spec = spec
        self._opts = _parsed(spec, spec.table_schema)
        self._client = connect(self._opts, spec.name)
        self._key = self._opts.stream
        self._where = f"redis stream {self._key!r}"
        last = self._last_id()
        if self._opts.startup == "earliest":
            self._next = StreamId(0, 0)
        elif self._opts.startup == "latest":
            self._next = last.next()
        else:
            self._next = self._opts.startup_id
        self._end: StreamId | None = last if self._opts.bounded else None
        self.bounded = self._opts.bounded
        self.metrics.update(records_in=0, skipped_records=0)

    def _last_id(self) -> StreamId:
        try:
            info = self._client.xinfo_stream(self._key)
        except _redis_errors() as e:
            if "no such key" in str(e).lower():
                return StreamId(0, 0)
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {self._where} at {self._opts.server}: "
                                 f"{e}") from None
        return StreamId.parse(info["last-generated-id"])

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        end = "+" if self._end is None else str(self._end)
        if self._end is not None and (self._next.ms, self._next.seq) > (self._end.ms, self._end.seq):
            self.finished = True
            return None
        try:
            entries = self._client.xrange(self._key, min=str(self._next), max=end, count=self._opts.fetch)
        except _redis_errors() as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {self._where} at {self._opts.server}: "
                                 f"{e}") from None
        if len(entries) < self._opts.fetch and self._end is not None:
            self.finished = True
        if not entries:
            return None
        ids = [e[0] for e in entries]
        records = [e[1] for e in entries]
        self._next = StreamId.parse(ids[-1]).next()
        if self._opts.poison != "fail":
            bad = bad_entries(records, self._spec.schema)
            if bad:
                self.metrics["skipped_records"] += len(bad)
                if self._opts.dead_letter:
                    self._send_dead_letters([(ids[i], records[i], reason) for i, reason in sorted(bad.items())])
                ids = [x for i, x in enumerate(ids) if i not in bad]
                records = [x for i, x in enumerate(records) if i not in bad]
        try:
            columns = decode_columns(records, self._spec.schema, self._where, ids)
        except RecordError as e:
            e.hint = ("set 'scan.ignore-parse-errors' = 'true' on the table to skip and count bad entries, or set "
                      "'scan.dead-letter.stream' to send them to a stream of their own")
            raise
        self.metrics["records_in"] += len(records)
        return pa.RecordBatch.from_arrays(columns, schema=self._spec.schema) if records else None

    def _send_dead_letters(self, letters: list[tuple[bytes, dict, str]]) -> None:
        """Append each bad entry's fields, as they were, to the dead-letter stream, with fields
        naming where it came from and why, in one round trip, before the rows after it go on
        (at-least-once: a replay from a checkpoint appends them again)."""
        pipe = self._client.pipeline(transaction=False)
        for entry_id, fields, reason in letters:
            pipe.xadd(self._opts.dead_letter, {**fields, "_clink.source.table": self._spec.name,
                                               "_clink.source.stream": self._key,
                                               "_clink.source.id": entry_id, "_clink.error": reason})
        try:
            pipe.execute()
        except _redis_errors() as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot append bad entries to the dead-letter stream "
                                 f"{self._opts.dead_letter!r} ('scan.dead-letter.stream') at {self._opts.server}: "
                                 f"{e}") from None

    def position(self) -> dict:
        return {"next": str(self._next), "end": None if self._end is None else str(self._end)}

    def seek(self, position: dict) -> None:
        self._next = StreamId.parse(position["next"])
        if self._opts.bounded:
            self._end = StreamId.parse(position["end"]) if position.get("end") else self._end
        self.finished = False

    def close(self) -> None:
        self._client.close()


# --- hash source ----------------------------------------------------------------------------


def hgetall(client: Any, keys: list) -> list[dict]:
    """The fields of each hash of ``keys`` (empty for a key without one), in one round trip."""
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    for k in keys:  # one command per key: the client has no multi-key HGETALL
        pipe.hgetall(k)
    return pipe.execute()


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class RedisHashReader(SourceReader):
    """Reads every hash whose key starts with the prefix: ``SCAN`` for the keys, then one
    pipelined ``HGETALL`` per batch of them. Bounded: the table as it is while it is read.

    The position is SCAN's cursor; Redis returns every key that exists for the whole scan, and a
    key twice only while the server resizes its table of keys, so keys seen are remembered and
    handed out once per run.
    """

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        self._spec = spec
        self._opts = _parsed(spec, spec.table_schema)
        self._client = connect(self._opts, spec.name)
        self._prefix = self._opts.prefix if self._opts.prefix is not None else spec.name + self._opts.delimiter
        self._where = f"redis hashes {self._prefix}*"
        self._cursor = 0
        self._seen: set[bytes] = set()
        self.metrics.update(records_in=0)

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        try:
            cursor, keys = self._client.scan(self._cursor, match=_glob_escape(self._prefix) + "*",
                                             count=self._opts.fetch)
            keys = [k for k in dict.fromkeys(keys) if k not in self._seen]
            records = hgetall(self._client, keys)
        except _redis_errors() as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot read {self._where} at {self._opts.server}: "
                                 f"{e}") from None
        self._cursor = int(cursor)
        self._seen.update(keys)
        if self._cursor == 0:
            self.finished = True
        records = [r for r in records if r]  # deleted between SCAN and HGETALL
        if not records:
            return None
        self.metrics["records_in"] += len(records)
        columns = decode_columns(records, self._spec.schema, self._where)
        return pa.RecordBatch.from_arrays(columns, schema=self._spec.schema)

    def position(self) -> dict:
        return {"cursor": self._cursor, "finished": self.finished}

    def seek(self, position: dict) -> None:
        self._cursor = int(position["cursor"])
        self.finished = bool(position.get("finished"))

    def close(self) -> None:
        self._client.close()


# --- stream sink ----------------------------------------------------------------------------


def _bulk(values: pa.Array) -> pa.Array:
    """Each value (binary) as a RESP bulk string, ``$<length>\\r\\n<bytes>\\r\\n``; NULL stays NULL."""
    lengths = pc.cast(pc.cast(pc.binary_length(values), pa.string()), pa.binary())
    return pc.binary_join_element_wise(b"$", lengths, b"\r\n", values, b"\r\n", b"")


def _bulk_of(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


def xadd_commands(rows: pa.Table, key: str, ids: pa.Array | None = None) -> pa.Buffer:
    """``XADD key <id> field value ...`` for every row, in the wire protocol (RESP), back to back:
    built a column at a time with Arrow's string kernels, not a command per row through the
    client. NULLs are fields left out; ``ids``: the entry IDs, or ``*`` (Redis picks) when None."""
    n = rows.num_rows
    counts = np.zeros(n, dtype=np.int64)
    parts = []
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        values = pc.cast(encode_column(column), pa.binary())
        counts += 2 * pc.is_valid(values).to_numpy(zero_copy_only=False)
        parts.append(pc.binary_join_element_wise(_bulk_of(name.encode()), _bulk(values), b""))
    empty = counts == 0
    if empty.any():
        # An entry needs a field: a row of NULLs gets the empty name, which no column has.
        parts.append(pa.array(np.where(empty, b"$0\r\n\r\n$0\r\n\r\n", None), pa.binary()))
        counts[empty] = 2
    arity = pc.cast(pc.cast(pa.array(counts + 3), pa.string()), pa.binary())
    entry_id = _bulk_of(b"*") if ids is None else _bulk(pc.cast(ids, pa.binary()))
    header = pc.binary_join_element_wise(b"*", arity, b"\r\n" + _bulk_of(b"XADD") + _bulk_of(key.encode()),
                                         entry_id, b"")
    commands = pc.binary_join_element_wise(header, *parts, b"", null_handling="replace", null_replacement=b"")
    return concatenated(pc.cast(commands.combine_chunks() if isinstance(commands, pa.ChunkedArray) else commands,
                                pa.large_binary()))


def concatenated(values: pa.Array) -> pa.Buffer:
    """The bytes of a large binary array's values, back to back (its data buffer, not copied)."""
    if len(values) == 0:
        return pa.py_buffer(b"")
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64, count=len(values) + 1, offset=values.offset * 8)
    return values.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def entry_ids(first: StreamId, n: int) -> pa.Array:
    """``<ms>-<seq>`` for ``n`` entries from ``first``, as one Arrow string array."""
    seqs = pc.cast(pa.array(np.arange(first.seq, first.seq + n, dtype=np.uint64)), pa.string())
    return pc.binary_join_element_wise(f"{first.ms}-", seqs, "")


def send_packed(conn: Any, commands: list[bytes | pa.Buffer], replies: int) -> list:
    """Send ``commands`` (already in RESP) on ``conn`` and read ``replies`` replies. A connection
    left with replies unread is closed, so it is never reused in the middle of a conversation."""
    try:
        conn.send_packed_command([memoryview(c) for c in commands])
        return [conn.read_response() for _ in range(replies)]
    except BaseException:
        conn.disconnect()
        raise


class RedisStreamWriter(SinkWriter):
    """Appends rows to a stream: as they come (at-least-once), or per checkpoint in one
    transaction recorded in a ledger (exactly-once; see the module's docstring)."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        if spec.updating:
            raise ConnectorError(f"table {spec.name!r}: a redis stream takes only inserts, but the query produces "
                                 "updates; write them to a table with 'data-structure' = 'hash' and a PRIMARY KEY")
        self._spec = spec
        self._opts = _parsed(spec, spec.schema)
        self._name = spec.name
        self._key = self._opts.stream
        self._ledger = f"_clink:ledger:{self._key}"
        self._pending = f"_clink:pending:{self._key}"
        self._exactly_once = self._opts.exactly_once
        self._undo_kept = int(ctx.get("state.checkpoints.num-retained") or 3) + 1
        self._accept_duplicates = (ctx.get("execution.recovery.accept-duplicates") or "").lower() == "true"
        self._lineage = ""
        self._buffer: list[pa.RecordBatch] = []
        self._client = connect(self._opts, spec.name)
        self.metrics["rows_out"] = 0

    def _fail(self, doing: str, e: BaseException) -> ConnectorError:
        return ConnectorError(f"table {self._name!r}: cannot {doing} redis stream {self._key!r} at "
                              f"{self._opts.server}: {e}")

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.metrics["rows_out"] += batch.num_rows
        if self._exactly_once:
            self._buffer.append(batch)
            return
        try:
            self._append(pa.Table.from_batches([batch]))
        except _redis_errors() as e:
            raise self._fail("append to", e) from None

    def _append(self, rows: pa.Table) -> None:
        """XADD ``rows`` with IDs Redis picks: one round trip per ``XADD_CHUNK`` entries."""
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            for chunk in rows.to_batches(max_chunksize=XADD_CHUNK):
                send_packed(conn, [xadd_commands(pa.Table.from_batches([chunk]), self._key)], chunk.num_rows)
        finally:
            pool.release(conn)

    def close(self) -> None:
        try:
            if self._buffer:
                rows = pa.Table.from_batches(self._buffer)
                self._buffer = []
                # No checkpoints: everything at the end, in one transaction.
                pool = self._client.connection_pool
                conn = pool.get_connection()
                try:
                    multi, exec_ = conn.pack_command("MULTI"), conn.pack_command("EXEC")
                    send_packed(conn, [*multi, xadd_commands(rows, self._key), *exec_], rows.num_rows + 2)
                finally:
                    pool.release(conn)
        except _redis_errors() as e:
            raise self._fail("append to", e) from None
        finally:
            self._client.close()

    def abort(self) -> None:
        self._buffer = []
        self._client.close()

    # -- two-phase commit

    def pre_commit(self, checkpoint_id: int) -> dict | None:
        if not self._exactly_once:
            return None  # every row is in the stream already
        rows = pa.Table.from_batches(self._buffer, schema=self._spec.schema)
        self._buffer = []
        if rows.num_rows:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as w:
                w.write_table(rows)
            try:
                self._client.hset(self._pending, str(checkpoint_id), sink.getvalue().to_pybytes())
            except _redis_errors() as e:
                raise self._fail(f"stage the rows of checkpoint {checkpoint_id} for", e) from None
        return {"rows": rows.num_rows}

    def commit(self, checkpoint_id: int, handle: dict | None) -> None:
        if not self._exactly_once:
            return
        try:
            self._commit_staged(checkpoint_id)
        except _redis_errors() as e:
            raise self._fail(f"commit checkpoint {checkpoint_id} to", e) from None

    def _commit_staged(self, checkpoint_id: int) -> None:
        """Append the staged rows of checkpoints up to ``checkpoint_id``, unless the ledger says
        they were appended already, with the ledger's update, in one transaction."""
        import redis

        while True:
            with self._client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self._ledger, self._key, self._pending)
                    committed = int(pipe.hget(self._ledger, "committed") or 0)
                    staged = sorted(int(c) for c in pipe.hkeys(self._pending) if int(c) <= checkpoint_id)
                    if checkpoint_id <= committed or not staged:
                        pipe.multi()
                        if staged:
                            pipe.hdel(self._pending, *map(str, staged))
                        pipe.execute()
                        return
                    rows = pa.concat_tables([pa.ipc.open_stream(pipe.hget(self._pending, str(c))).read_all()
                                             for c in staged])
                    last = self._last_id(pipe)
                    first = StreamId(max(last.ms + 1, int(time.time() * 1000)), 0)
                    n = rows.num_rows
                    # The undo log keeps the newest commits: every one of a checkpoint after
                    # ``undo_after``, as many as the job keeps checkpoints to fall back to, and one more.
                    undo_after = max(int(pipe.hget(self._ledger, "undo_after") or 0), checkpoint_id - self._undo_kept)
                    forget = [f"undo:{c}" for c in self._undo_ids(pipe) if c <= undo_after]
                    ledger = ["committed", checkpoint_id, "lineage", self._lineage, "undo_after", undo_after,
                              f"undo:{checkpoint_id}", f"{first.ms}-0 {first.ms}-{n - 1}"]
                    conn = pipe.connection
                    tail = [("HSET", self._ledger, *ledger), ("HDEL", self._pending, *map(str, staged))]
                    if forget:
                        tail.append(("HDEL", self._ledger, *forget))
                    packed = [*conn.pack_command("MULTI"), xadd_commands(rows, self._key, entry_ids(first, n)),
                              *conn.pack_commands(tail), *conn.pack_command("EXEC")]
                    replies = send_packed(conn, packed, n + len(tail) + 2)
                    if replies[-1] is None:
                        raise redis.WatchError("the stream or the ledger changed")  # EXEC aborted
                    failed = [r for r in replies[-1] if isinstance(r, Exception)]
                    if failed:
                        raise failed[0]
                    return
                except redis.WatchError:
                    continue  # someone else wrote the stream meanwhile: take its new last ID

    def _undo_ids(self, client: Any) -> list[int]:
        return sorted(int(f[5:]) for f in map(bytes.decode, client.hkeys(self._ledger)) if f.startswith("undo:"))

    def _last_id(self, client: Any) -> StreamId:
        try:
            return StreamId.parse(client.xinfo_stream(self._key)["last-generated-id"])
        except _redis_errors() as e:
            if "no such key" in str(e).lower():
                return StreamId(0, 0)
            raise

    def recover(self, checkpoint_id: int, handle: dict | None, *, lineage: str = "") -> str | None:
        self._lineage = lineage
        if not self._exactly_once:
            return None
        try:
            return self._recover(checkpoint_id, lineage)
        except _redis_errors() as e:
            raise self._fail(f"recover checkpoint {checkpoint_id} of", e) from None

    def _recover(self, checkpoint_id: int, lineage: str) -> str | None:
        client = self._client
        later = [c for c in client.hkeys(self._pending) if int(c) > checkpoint_id]
        if later:  # staged by the crashed run after the checkpoint: replayed from the sources now
            client.hdel(self._pending, *later)
        ledger = {k.decode(): v.decode() for k, v in client.hgetall(self._ledger).items()}
        note = None
        committed = int(ledger.get("committed", 0))
        if ledger and ledger.get("lineage", "") != lineage:
            # Written by another state directory's job: its entries are the stream's data now.
            client.delete(self._ledger)
        elif committed > checkpoint_id:
            note = self._roll_back(checkpoint_id, committed, ledger)
        if checkpoint_id == 0:
            client.delete(self._pending)
            client.delete(self._ledger)  # checkpoint ids start again from 1
        else:
            self._commit_staged(checkpoint_id)
        return note

    def _roll_back(self, checkpoint_id: int, committed: int, ledger: dict[str, str]) -> str:
        """Delete the entries that commits of checkpoints after ``checkpoint_id`` added, newest
        first: the run resumes from ``checkpoint_id`` and appends their rows again."""
        resumed = f"checkpoint {checkpoint_id}" if checkpoint_id else "the start"
        undo_after = int(ledger.get("undo_after", 0))
        if checkpoint_id < undo_after:
            message = (f"table {self._name!r}: redis stream {self._key!r} holds entries of checkpoints up to "
                       f"{committed}, committed after {resumed} which this run resumes from, and only those "
                       f"after checkpoint {undo_after} can be deleted")
            if not self._accept_duplicates:
                raise ConnectorError(f"{message}; resuming would write them twice. Set "
                                     "'execution.recovery.accept-duplicates' = 'true' to resume anyway")
            self._client.delete(self._ledger)
            self._client.hset(self._ledger, mapping={"committed": checkpoint_id, "undo_after": checkpoint_id,
                                                     "lineage": self._lineage})
            return f"{message}; resuming anyway ('execution.recovery.accept-duplicates'): rows may repeat"
        undo = {int(k[5:]): v for k, v in ledger.items() if k.startswith("undo:")}
        later = sorted((c for c in undo if c > checkpoint_id), reverse=True)
        for c in later:
            lo, hi = undo[c].split()
            ids = [e[0] for e in self._client.xrange(self._key, min=lo, max=hi)]
            for start in range(0, len(ids), XADD_CHUNK):
                self._client.xdel(self._key, *ids[start:start + XADD_CHUNK])
            self._client.hdel(self._ledger, f"undo:{c}")
        self._client.hset(self._ledger, "committed", checkpoint_id)
        ids = ", ".join(str(c) for c in reversed(later)) or "none"
        return (f"table {self._name!r}: deleted the entries checkpoint(s) {ids} added to redis stream "
                f"{self._key!r}, committed after {resumed} which this run resumes from; those rows are written again")


# --- hash sink ------------------------------------------------------------------------------


class RedisHashWriter(SinkWriter):
    """Writes one hash per primary key: ``+I``/``+U`` replace the hash, ``-D`` deletes it,
    ``-U`` is left to the ``+U`` that follows. Each batch, reduced to the last change per key, is
    one MULTI/EXEC transaction, so a reader never sees half a batch (nor half a row)."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        rows_schema = pa.schema(list(spec.schema)[:-1]) if spec.updating else spec.schema
        if not spec.primary_key:
            raise ConnectorError(f"table {spec.name!r}: a redis hash table needs a PRIMARY KEY (...) NOT ENFORCED: "
                                 "its values make each hash's key")
        self._spec = spec
        self._opts = _parsed(spec, rows_schema)
        self._name = spec.name
        self._columns = rows_schema.names
        self._key = spec.primary_key
        self._updating = spec.updating
        self._prefix = self._opts.prefix if self._opts.prefix is not None else spec.name + self._opts.delimiter
        self._client = connect(self._opts, spec.name)
        self.metrics["rows_out"] = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        from clink.runtime.connectors.sqlite import last_change_per_key, removes

        self.metrics["rows_out"] += batch.num_rows
        table = pa.Table.from_batches([batch])
        if self._updating:
            kinds = table.column(ROWKIND_COLUMN)
            unknown = pc.invert(pc.is_in(kinds, value_set=_KINDS))
            if pc.any(unknown).as_py():
                raise ConnectorError(f"table {self._name!r}: unknown row kinds in a changelog")
        last = last_change_per_key(table, self._key, self._updating)
        keys = _key_strings(last, self._key, self._prefix, self._opts.delimiter)
        if keys.null_count:
            raise ConnectorError(f"table {self._name!r}: a row's primary key ({', '.join(self._key)}) is NULL; "
                                 "a hash key cannot be made from it")
        deleted = removes(last) if self._updating else np.zeros(last.num_rows, dtype=bool)
        names = [c.encode() for c in self._columns]
        columns = [encode_column(last.column(c)).to_pylist() for c in self._columns]
        try:
            pipe = self._client.pipeline(transaction=True)
            # One DEL (and one HSET) per key: the client sends a command per hash.
            for key, gone, values in zip(keys.to_pylist(), deleted, zip(*columns, strict=True), strict=True):
                pipe.delete(key)
                if not gone:
                    fields = {n: v for n, v in zip(names, values) if v is not None}
                    if fields:
                        pipe.hset(key, mapping=fields)
            pipe.execute()
        except _redis_errors() as e:
            raise ConnectorError(f"table {self._name!r}: cannot write the redis hashes {self._prefix}* at "
                                 f"{self._opts.server}: {e}") from None

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        self._client.close()


# --- lookups --------------------------------------------------------------------------------


class RedisHashLookup(lookup_cache.KeyLookup):
    """The hashes of a batch of primary keys, for a lookup join by the table's PRIMARY KEY: one
    pipelined ``HGETALL`` per key the cache (``lookup_cache.KeyLookup``) lacks. The key columns
    of a row found are the key asked for, whether or not its hash holds them as fields."""

    def __init__(self, spec: TableSpec, keys: tuple[str, ...], ctx: RuntimeContext) -> None:
        super().__init__(spec, keys, ctx.clock, self._query, "redis")
        self._opts = _parsed(spec, spec.table_schema)
        self._client = connect(self._opts, spec.name)
        self._prefix = self._opts.prefix if self._opts.prefix is not None else spec.name + self._opts.delimiter
        self._where = f"redis hashes {self._prefix}*"

    def _query(self, keys: pa.Table) -> pa.Table:
        names = _key_strings(keys, self._spec.primary_key, self._prefix, self._opts.delimiter).to_pylist()
        try:
            records = hgetall(self._client, names)
        except _redis_errors() as e:
            raise ConnectorError(f"table {self._spec.name!r}: cannot look up {self._where}: {e}") from None
        found = np.fromiter((bool(r) for r in records), dtype=bool, count=len(records))
        records = [r for r in records if r]
        columns = decode_columns(records, self._spec.schema, self._where)
        asked = keys.filter(pa.array(found))
        for name in self._keys:
            at = self._spec.schema.get_field_index(name)
            columns[at] = asked.column(name).combine_chunks().cast(self._spec.schema.field(name).type)
        return pa.Table.from_arrays(columns, schema=self._spec.schema)

    def close(self) -> None:
        self._client.close()


def _looks_up(options: Mapping[str, str], primary_key: tuple[str, ...], keys: tuple[str, ...]) -> bool:
    """A hash table is looked up by its whole primary key (its hash keys are made of it); any
    other lookup join, and one on a stream, reads the table whole."""
    hashes = options.get("data-structure", "stream").strip().lower() == "hash"
    return hashes and bool(primary_key) and set(keys) == set(primary_key)


# --- the connector --------------------------------------------------------------------------


def _create_source(spec: TableSpec, ctx: RuntimeContext) -> SourceReader:
    if spec.options.get("data-structure", "stream").strip().lower() == "hash":
        return RedisHashReader(spec, ctx)
    return RedisStreamReader(spec, ctx)


def _create_sink(spec: TableSpec, ctx: RuntimeContext) -> SinkWriter:
    if spec.options.get("data-structure", "stream").strip().lower() == "hash":
        return RedisHashWriter(spec, ctx)
    return RedisStreamWriter(spec, ctx)


REDIS = Connector(
    name="redis",
    description="Redis Streams (read from checkpointed IDs; XADD, exactly-once per checkpoint) and hashes "
                "(upserts by PRIMARY KEY; read by key for lookup joins)",
    source_options=SOURCE_OPTIONS,
    sink_options=SINK_OPTIONS,
    create_source=_create_source,
    create_sink=_create_sink,
    validate=validate,
    create_lookup=RedisHashLookup,
    looks_up=_looks_up,
    upserts=True,
)
