"""The ``kafka`` and ``upsert-kafka`` connectors, on the ``confluent-kafka`` client.

Reading. The source lists the partitions of its topics (``'topic'``: one name or several
separated by ``;``, or ``'topic-pattern'``: a regular expression matched against the topics
that exist when the job starts) and assigns them to its subtasks itself: partition ``i`` of the
sorted list goes to subtask ``i % parallelism``. There is no consumer-group rebalancing. The
next offset of every partition is the source's position in clink's checkpoints; a restore seeks
there, at any parallelism. After a checkpoint completes the offsets are also committed to the
consumer group (``'properties.group.id'``), as a courtesy for monitoring; they are never read
back except by ``'scan.startup.mode' = 'group-offsets'`` on a fresh start.

``'scan.startup.mode'`` picks where a fresh start begins, ``'scan.bounded.mode'`` where each
partition ends (``unbounded``: never). ``timestamp`` modes take the earliest offset whose record
timestamp is at least the given one; the source checks this on the records themselves too, so it
holds even on a broker that answers timestamp lookups roughly.

Messages are read in batches of up to ``BATCH_MESSAGES``; their values (and keys, with
``'key.format'``) are decoded together (``kafka_formats``). A message whose value is NULL (a
tombstone) is skipped by ``kafka``; ``upsert-kafka`` reads it as the deletion of its key.
A message that does not decode fails the job (naming topic/partition:offset), or with Flink's
``[key.|value.]<format>.ignore-parse-errors`` is skipped and counted, or with clink's
``'scan.dead-letter.topic'`` is written there raw, with headers saying where it came from and
why, before the rows after it go on (at-least-once: a replay writes it again).

Bad weather. Every call that waits for the brokers is bounded by ``'connection.timeout'``.
librdkafka reports unreachable brokers only to an error callback, so the source notes those
events and, while no message comes, asks the brokers for metadata every ``HEALTH_CHECK_S``:
brokers that went away or hang fail the job after the timeout instead of leaving it idle.

Writing. ``'sink.delivery-guarantee'``: ``none`` hands rows to the client as they come;
``at-least-once`` also waits, at each checkpoint, until the broker has them; ``exactly-once``
writes the rows of each checkpoint in one Kafka transaction when the checkpoint completes.
Until then they are held by the sink, and at the checkpoint (``pre_commit``) staged as an Arrow
IPC file in the state directory, so that a crash between the checkpoint and its commit commits
them on restore. The transaction also commits the checkpoint's id as an offset of a ledger
consumer group (``send_offsets_to_transaction``), atomically with the rows: a restore that finds
the id there knows the transaction committed, and does not write it again. Readers see each row
once with ``isolation.level`` = ``read_committed``.

``upsert-kafka`` writes the primary key as the message key; ``+I`` and ``+U`` rows as values,
``-D`` rows as tombstones (NULL values), and drops ``-U`` rows that a change of their key follows
in the batch (the ``+U`` replaces the value); a ``-U`` that is its key's last change is a tombstone.

Changelogs. With ``debezium-json`` or ``canal-json`` values (``cdc_formats``) a kafka table is a
changelog source: each message gives changes, and batches end with their row kinds. An
upsert-kafka source gives each key's new row as ``+U`` and a tombstone as ``-D``; the plan
normalizes those by key (``operators/normalize.py``). The watermark is kept per partition: the
reader names its partitions (``splits``) and the partition of each row (``split_rows``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink import records
from clink.errors import ConnectorError, RecordError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, OptionSpec, SinkWriter, SourceReader, TableSpec
from clink.runtime.connectors.cdc_formats import (
    CHANGELOG_FORMATS,
    FORMAT_METADATA,
    UNREAD_METADATA,
    decode_changelog,
)
from clink.runtime.connectors.filesystem import BadValue
from clink.runtime.connectors.kafka_formats import FORMATS, decode, encode, format_problem
from clink.runtime.plan import (
    APPEND_ONLY,
    DELETE,
    INSERT,
    ROWKIND_COLUMN,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    UPDATING,
    ChangelogMode,
)
from clink.runtime.settings import parse_duration

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["KAFKA", "UPSERT_KAFKA", "KafkaSinkWriter", "KafkaSourceReader", "parse_settings"]

#: Messages asked of the client per poll.
BATCH_MESSAGES = 10_000
#: Seconds one poll waits for messages: short, since the executor polls every source in turn.
POLL_TIMEOUT_S = 0.02
#: An exactly-once sink with a state directory keeps at most this many bytes of a checkpoint's
#: rows in memory; the rest wait in the checkpoint's file.
SPILL_BYTES = 64 << 20
#: Rows encoded into messages at a time when a transaction writes a checkpoint's rows.
PRODUCE_ROWS = 100_000
#: Seconds to wait for the broker in calls that need an answer (metadata, offsets, commits),
#: and the longest the brokers may be unreachable before the job fails ('connection.timeout').
BROKER_TIMEOUT_S = 30.0
#: Seconds between checks, while no message comes, that the brokers still answer.
HEALTH_CHECK_S = 5.0
#: The option that carries the table's METADATA columns to the connector (set by the compiler,
#: never by a user: it is no OptionSpec, so a WITH clause that names it is refused).
METADATA_OPTION = "clink.metadata-columns"
#: Metadata a source fills, with the SQL type Flink gives it.
METADATA_KEYS = {"topic": pa.string(), "partition": pa.int32(), "offset": pa.int64(),
                 "timestamp": pa.timestamp("ms", "UTC"), "timestamp-type": pa.string()}

STARTUP_MODES = ("earliest-offset", "latest-offset", "group-offsets", "timestamp", "specific-offsets")
BOUNDED_MODES = ("unbounded", "latest-offset", "group-offsets", "timestamp", "specific-offsets")
DELIVERY = ("none", "at-least-once", "exactly-once")
PARTITIONERS = ("default", "fixed", "round-robin")

_COMMON = (
    OptionSpec(name="topic", description="topic name(s) to read or write, several separated by ';'"),
    OptionSpec(name="properties.bootstrap.servers", required=True,
               description="the Kafka brokers, host:port[,host:port...]"),
    OptionSpec(name="properties.#", description="any Kafka client property, passed through to confluent-kafka"),
    OptionSpec(name="key.format", description="format of the message key: json, csv or raw"),
    OptionSpec(name="key.fields", description="the columns written to / read from the key, separated by ';'"),
    OptionSpec(name="value.format", description="format of the message value: json, csv or raw"),
    OptionSpec(name="value.fields-include", default="ALL", choices=("ALL", "EXCEPT_KEY"),
               description="ALL: the value holds every column; EXCEPT_KEY: every column but the key fields"),
    OptionSpec(name="csv.field-delimiter", default=",", description="CSV field separator, one character"),
    OptionSpec(name="key.csv.field-delimiter", default=",", description="CSV field separator of the key"),
    OptionSpec(name="value.csv.field-delimiter", default=",", description="CSV field separator of the value"),
    OptionSpec(name="connection.timeout", default="30s",
               description="(clink) the longest a call waits for the brokers, and the longest they may be "
                           "unreachable, before the job fails"),
)
_SOURCE = (
    OptionSpec(name="topic-pattern", description="a regular expression: read every topic whose name matches"),
    OptionSpec(name="scan.startup.mode", default="group-offsets", choices=STARTUP_MODES,
               description="where a fresh start reads from"),
    OptionSpec(name="scan.startup.timestamp-millis", description="with 'timestamp': epoch milliseconds"),
    OptionSpec(name="scan.startup.specific-offsets",
               description="with 'specific-offsets': 'partition:0,offset:42;partition:1,offset:300'"),
    OptionSpec(name="scan.bounded.mode", default="unbounded", choices=BOUNDED_MODES,
               description="where each partition ends (unbounded: never)"),
    OptionSpec(name="scan.bounded.timestamp-millis", description="with 'timestamp': epoch milliseconds"),
    OptionSpec(name="scan.bounded.specific-offsets",
               description="with 'specific-offsets': 'partition:0,offset:42;partition:1,offset:300'"),
)
#: Flink's format options that skip a message that does not decode (and count it), by the
#: format they belong to; ``key.``/``value.`` in front name one side of the message.
IGNORE_PARSE_ERRORS = tuple(
    OptionSpec(name=f"{side}{fmt}.ignore-parse-errors", default="false", choices=("true", "false"),
               description=f"skip and count {side or 'value '}messages that do not decode as {fmt}")
    for fmt in ("json", "csv") for side in ("", "key.", "value."))
#: clink's own: where a source sends the messages it cannot decode.
DEAD_LETTER_OPTION = "scan.dead-letter.topic"
_POISON = (
    *IGNORE_PARSE_ERRORS,
    OptionSpec(name=DEAD_LETTER_OPTION,
               description="(clink) write messages that do not decode to this topic, raw, with headers naming "
                           "where they came from and why, and go on"),
)
_SINK = (
    OptionSpec(name="sink.delivery-guarantee", default="at-least-once", choices=DELIVERY,
               description="none, at-least-once, or exactly-once (a transaction per checkpoint)"),
    OptionSpec(name="sink.transactional-id-prefix",
               description="with exactly-once: the prefix of the sink's Kafka transactional id"),
)
_PARTITIONER = OptionSpec(
    name="sink.partitioner", default="default", choices=PARTITIONERS,
    description="which partition a message goes to: default (by the key's hash; without a key, as the client "
                "spreads them), fixed (each sink subtask to one partition), round-robin (each message to the next)")
KAFKA_OPTIONS = (*_COMMON, OptionSpec(name="format",
                                      description="format of the message value (same as value.format)"))


# --- options ---------------------------------------------------------------------------------


@records.record(kw_only=True)
class Settings:
    """A kafka table's options, parsed."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    client: dict[str, str] = records.field(factory=dict)
    value_format: str = "json"
    key_format: str | None = None
    key_fields: tuple[str, ...] = ()
    value_fields: tuple[str, ...] = ()
    metadata: dict[str, str] = records.field(factory=dict)
    startup: str = "group-offsets"
    startup_ts: int | None = None
    startup_offsets: dict[int, int] = records.field(factory=dict)
    bounded: str = "unbounded"
    bounded_ts: int | None = None
    bounded_offsets: dict[int, int] = records.field(factory=dict)
    delivery: str = "at-least-once"
    transactional_prefix: str | None = None
    key_delimiter: str = ","
    value_delimiter: str = ","
    #: debezium-json: the changes are under "payload" (Kafka Connect's schemas.enable).
    schema_include: bool = False
    #: canal-json: regular expressions the "database" and "table" of a change must match.
    canal_database: str | None = None
    canal_table: str | None = None
    #: What a message that does not decode does, per side ("value", "key"): "fail" the job,
    #: "skip" it (and count it), or go to the dead-letter topic ("dead-letter").
    poison: dict[str, str] = records.field(factory=lambda: {"value": "fail", "key": "fail"})
    dead_letter: str | None = None
    #: Seconds a call waits for the brokers, and they may stay unreachable ('connection.timeout').
    timeout_s: float = BROKER_TIMEOUT_S

    @property
    def changelog(self) -> bool:
        """The value format carries changes (+I, -U, +U, -D), not rows."""
        return self.value_format in CHANGELOG_FORMATS


def _offsets(text: str) -> dict[int, int]:
    """``'partition:0,offset:42;partition:1,offset:300'`` as {0: 42, 1: 300}."""
    result = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        m = re.fullmatch(r"partition\s*:\s*(\d+)\s*,\s*offset\s*:\s*(\d+)", part)
        if m is None:
            raise ValueError(f"expected 'partition:<n>,offset:<n>', found {part!r}")
        result[int(m[1])] = int(m[2])
    return result


def parse_metadata(text: str) -> dict[str, str]:
    """The METADATA columns as the compiler passes them: ``'col=key;col=key'``."""
    return dict(item.split("=", 1) for item in text.split(";") if item)


def _metadata_problem(key: str, value_format: str) -> str | None:
    """Why a kafka table with values of ``value_format`` cannot fill METADATA FROM ``key``."""
    if key in METADATA_KEYS:
        return None
    own = FORMAT_METADATA.get(value_format, {})
    offered = ", ".join([*METADATA_KEYS, *(f"value.{k}" for k in own)])
    if key.startswith("value."):
        bare = key[len("value."):]
        if bare in own:
            return None
        if bare in UNREAD_METADATA.get(value_format, {}):
            return (f"the {value_format!r} metadata {key!r} ({UNREAD_METADATA[value_format][bare]}) is not read by "
                    f"clink; it reads {offered}")
        formats = [f for f in FORMAT_METADATA if bare in FORMAT_METADATA[f] or bare in UNREAD_METADATA[f]]
        if formats:
            return f"{key!r} is metadata of the {' and '.join(map(repr, formats))} format, and the value format is " \
                   f"{value_format!r}; this table has {offered}"
    return f"kafka has no metadata {key!r}; this table has {offered}"


#: Every METADATA key the compiler lets a kafka table declare; which apply depends on the value
#: format, checked with the table's options.
ALL_METADATA = (*METADATA_KEYS, *dict.fromkeys(
    f"value.{k}" for f in CHANGELOG_FORMATS for k in (*FORMAT_METADATA[f], *UNREAD_METADATA[f])))


def parse_settings(options: Mapping[str, str], table_schema: pa.Schema, *, upsert: bool,
                   primary_key: tuple[str, ...] = ()) -> tuple[Settings | None, dict[str, str]]:
    """Parse and check a kafka or upsert-kafka table's options; the settings, or errors by option."""
    errors: dict[str, str] = {}
    name = "upsert-kafka" if upsert else "kafka"
    topics = tuple(t.strip() for t in options.get("topic", "").split(";") if t.strip())
    pattern = options.get("topic-pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            errors["topic-pattern"] = f"not a regular expression: {e}"
        if topics:
            errors["topic-pattern"] = "give 'topic' or 'topic-pattern', not both"
    elif not topics:
        errors["topic"] = f"the {name} connector needs a 'topic' (or 'topic-pattern' to read several)"
    if not options.get("properties.bootstrap.servers", "").strip():
        errors["properties.bootstrap.servers"] = "needs the brokers, host:port[,host:port...]"
    client = {k[len("properties."):]: v for k, v in options.items() if k.startswith("properties.")}
    if "format" in options and "value.format" in options:
        errors["format"] = "give 'format' or 'value.format', not both"
    value_format = options.get("value.format", options.get("format", "")).strip().lower()
    if value_format in CHANGELOG_FORMATS and upsert:
        errors["value.format" if "value.format" in options else "format"] = (
            f"upsert-kafka reads and writes {', '.join(FORMATS)} values; the {value_format!r} changelog format is "
            "read by the 'kafka' connector")
    elif value_format not in FORMATS and value_format not in CHANGELOG_FORMATS:
        if value_format in ("avro", "protobuf", "avro-confluent", "maxwell-json",
                            "ogg-json"):
            errors["value.format" if "value.format" in options else "format"] = (
                f"the {value_format!r} format is not implemented by clink's kafka connector; use one of "
                f"{', '.join(FORMATS + CHANGELOG_FORMATS)}")
        else:
            errors["value.format" if "value.format" in options else "format"] = (
                f"the {name} connector needs 'value.format' (or 'format'): one of "
                f"{', '.join(FORMATS + (() if upsert else CHANGELOG_FORMATS))}")
    for key in options:
        fmt = key.split(".", 1)[0]
        if fmt in CHANGELOG_FORMATS and fmt != value_format:
            errors[key] = f"{key!r} is an option of the {fmt!r} format, and the value format is {value_format!r}"
    schema_include = options.get("debezium-json.schema-include", "false").strip().lower()
    if schema_include not in ("true", "false"):
        errors["debezium-json.schema-include"] = f"expected true or false, found {schema_include!r}"
    for key in ("canal-json.database.include", "canal-json.table.include"):
        if key in options:
            try:
                re.compile(options[key])
            except re.error as e:
                errors[key] = f"not a regular expression: {e}"
    key_format = options.get("key.format")
    key_format = key_format.strip().lower() if key_format is not None else None
    if key_format in CHANGELOG_FORMATS:
        errors["key.format"] = (f"the {key_format!r} format describes changes and is a value format; the key is "
                                f"one of {', '.join(FORMATS)}")
    physical = list(table_schema.names)
    metadata = parse_metadata(options.get(METADATA_OPTION, ""))
    for column, key in metadata.items():
        problem = _metadata_problem(key, value_format)
        if problem is not None:
            errors["connector"] = f"column {column!r}: {problem}"
    physical = [n for n in physical if n not in metadata]
    if upsert:
        if not primary_key:
            errors["connector"] = ("an upsert-kafka table needs PRIMARY KEY (...) NOT ENFORCED: the key of its "
                                   "messages")
        if key_format is None:
            errors["key.format"] = "upsert-kafka needs 'key.format', the format of the primary key in the message key"
        if "key.fields" in options:
            errors["key.fields"] = "upsert-kafka writes the PRIMARY KEY to the key; remove 'key.fields'"
        key_fields = tuple(primary_key)
    else:
        key_fields = tuple(k.strip() for k in options.get("key.fields", "").split(";") if k.strip())
        if key_fields and key_format is None:
            errors["key.fields"] = "'key.fields' needs 'key.format'"
        if key_format is not None and not key_fields:
            errors["key.format"] = "'key.format' needs 'key.fields', the columns of the key"
    for k in key_fields:
        if k not in physical:
            errors["key.fields"] = f"key field {k!r} is not a physical column of the table"
    include = options.get("value.fields-include", "ALL").strip().upper()
    value_fields = tuple(n for n in physical if include == "ALL" or n not in key_fields)
    by_name = {f.name: f for f in table_schema}
    for fmt, fields, key in ((value_format, value_fields, "value.format"), (key_format, key_fields, "key.format")):
        if fmt in CHANGELOG_FORMATS:
            fmt = "json"  # the rows inside a change are JSON objects
        if fmt in FORMATS and not errors.get(key):
            problem = format_problem(fmt, pa.schema([by_name[n] for n in fields if n in by_name]))
            if problem is not None:
                errors[key if key in options or key == "key.format" else "format"] = problem
    settings: dict[str, Any] = {}
    for mode_key, modes, prefix in (("scan.startup.mode", STARTUP_MODES, "startup"),
                                    ("scan.bounded.mode", BOUNDED_MODES, "bounded")):
        default = "earliest-offset" if upsert and prefix == "startup" else (
            "group-offsets" if prefix == "startup" else "unbounded")
        mode = options.get(mode_key, default).strip().lower()
        if mode not in modes:
            errors[mode_key] = f"expected one of {', '.join(modes)}, found {options[mode_key]!r}"
        settings[prefix] = mode
        base = mode_key.rsplit(".", 1)[0]
        ts_key, offsets_key = f"{base}.timestamp-millis", f"{base}.specific-offsets"
        if mode == "timestamp":
            try:
                settings[f"{prefix}_ts"] = int(options.get(ts_key, ""))
            except ValueError:
                errors[ts_key] = f"'{mode_key}' = 'timestamp' needs '{ts_key}', epoch milliseconds"
        elif ts_key in options:
            errors[ts_key] = f"'{ts_key}' is read only with '{mode_key}' = 'timestamp'"
        if mode == "specific-offsets":
            try:
                settings[f"{prefix}_offsets"] = _offsets(options.get(offsets_key, ""))
                if not settings[f"{prefix}_offsets"]:
                    raise ValueError(f"'{mode_key}' = 'specific-offsets' needs '{offsets_key}'")
            except ValueError as e:
                errors[offsets_key] = str(e)
        elif offsets_key in options:
            errors[offsets_key] = f"'{offsets_key}' is read only with '{mode_key}' = 'specific-offsets'"
    delivery = options.get("sink.delivery-guarantee", "at-least-once").strip().lower()
    prefix = options.get("sink.transactional-id-prefix")
    if delivery == "exactly-once" and not (prefix or "").strip():
        errors["sink.delivery-guarantee"] = ("'exactly-once' needs 'sink.transactional-id-prefix', unique to this "
                                             "sink among the jobs writing to the cluster")
    poison, dead_letter = _poison_policy(options, value_format, key_format, topics, errors)
    timeout_ms = int(BROKER_TIMEOUT_S * 1000)
    try:
        timeout_ms = parse_duration(options.get("connection.timeout", "30s"))
        if timeout_ms < 1000:
            raise ValueError("'connection.timeout' must be at least 1 s")
    except ValueError as e:
        errors["connection.timeout"] = str(e)
    delimiters = {}
    for key in ("key.csv.field-delimiter", "value.csv.field-delimiter"):
        value = options.get(key, options.get("csv.field-delimiter", ","))
        value = {"\\t": "\t", "tab": "\t"}.get(value, value)
        if len(value) != 1 or value in '"\r\n':
            errors[key if key in options else "csv.field-delimiter"] = f"expected one character, found {value!r}"
        delimiters[key.split(".")[0]] = value
    if errors:
        return None, errors
    return Settings(topics=topics, pattern=pattern, client=client, value_format=value_format,
                    schema_include=schema_include == "true", canal_database=options.get("canal-json.database.include"),
                    canal_table=options.get("canal-json.table.include"),
                    key_format=key_format, key_fields=key_fields, value_fields=value_fields, metadata=metadata,
                    delivery=delivery, transactional_prefix=prefix, key_delimiter=delimiters["key"],
                    value_delimiter=delimiters["value"], poison=poison, dead_letter=dead_letter,
                    timeout_s=timeout_ms / 1000, **settings), {}


def _poison_policy(options: Mapping[str, str], value_format: str, key_format: str | None,
                   topics: tuple[str, ...], errors: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """What each side of a message does when it does not decode, from Flink's
    ``[key.|value.]<format>.ignore-parse-errors`` and clink's ``scan.dead-letter.topic``."""
    poison = {"value": "fail", "key": "fail"}
    formats = {"value": value_format, "key": key_format}
    for key, text in options.items():
        if not key.endswith(".ignore-parse-errors"):
            continue
        parts = key[:-len(".ignore-parse-errors")].split(".")
        side = parts[0] if len(parts) == 2 else "value"
        fmt = parts[-1]
        if formats.get(side) != fmt:
            errors[key] = (f"{key!r} is an option of the {fmt!r} format, and the {side} format is "
                           f"{formats.get(side)!r}")
            continue
        if text.strip().lower() not in ("true", "false"):
            errors[key] = f"expected true or false, found {text!r}"
        elif text.strip().lower() == "true":
            poison[side] = "skip"
    dead_letter = options.get(DEAD_LETTER_OPTION)
    if dead_letter is not None:
        dead_letter = dead_letter.strip()
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", dead_letter):
            errors[DEAD_LETTER_OPTION] = (f"expected one topic name (letters, digits, '.', '_', '-'), "
                                          f"found {options[DEAD_LETTER_OPTION]!r}")
        elif dead_letter in topics:
            errors[DEAD_LETTER_OPTION] = "the dead-letter topic must not be a topic the table reads"
        elif "skip" in poison.values():
            errors[DEAD_LETTER_OPTION] = ("give 'scan.dead-letter.topic' or '...ignore-parse-errors', not both: a "
                                          "bad message either goes to the dead-letter topic or is skipped")
        else:
            poison = {"value": "dead-letter", "key": "dead-letter"}
    return poison, dead_letter


def _validator(upsert: bool):
    def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
        """Check a kafka table's option values; returns messages keyed by option."""
        # The primary key is not known here: upsert-kafka checks it when it starts.
        errors = {k: v for k, v in parse_settings(options, table_schema, upsert=upsert,
                                                  primary_key=("?",) if upsert else ())[1].items()
                  if not (upsert and k == "key.fields" and "not a physical column" in v)}
        if role == "sink":
            value_format = options.get("value.format", options.get("format", "")).strip().lower()
            if value_format in CHANGELOG_FORMATS:
                errors.setdefault("value.format" if "value.format" in options else "format", (
                    f"clink reads the {value_format!r} format but does not write it; write json "
                    "(an updating query: to an upsert-kafka table)"))
            if "topic-pattern" in options:
                errors.setdefault("topic-pattern", "a kafka sink writes one 'topic'; 'topic-pattern' can only be read")
            elif ";" in options.get("topic", "").strip(" ;"):
                errors.setdefault("topic", "a kafka sink writes one 'topic'; several topics can only be read")
        return errors
    return validate


def _settings_or_raise(spec: TableSpec, *, upsert: bool) -> Settings:
    physical = pa.schema([f for f in spec.table_schema if f.name != ROWKIND_COLUMN])
    settings, errors = parse_settings(spec.options, physical, upsert=upsert, primary_key=spec.primary_key)
    if settings is None:
        details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
        raise ConnectorError(f"table {spec.name!r}: bad {'upsert-kafka' if upsert else 'kafka'} options: {details}")
    return settings


def _client_module():
    try:
        import confluent_kafka
    except ImportError:
        raise ConnectorError("the kafka connectors need the confluent-kafka client: "
                             "pip install 'clink[kafka]'") from None
    return confluent_kafka


#: librdkafka's codes for a failed login (SASL, SSL).
_LOGIN_FAILED = (-169, -181)  # _AUTHENTICATION, _SSL


def _broker_problem(settings: Settings, error: Any) -> str:
    """The client's error, and which options to look at when it is about the login or the
    connection (the password is never part of either)."""
    text = str(error)
    code = error.code() if hasattr(error, "code") else None
    if code in _LOGIN_FAILED or "authenticat" in text.lower() or "sasl" in text.lower():
        return (f"{text}; the brokers refused the login: check 'properties.security.protocol', "
                "'properties.sasl.mechanism', 'properties.sasl.username' and 'properties.sasl.password'")
    if any(k.startswith(("sasl.", "security.", "ssl.")) for k in settings.client) and "transport" in text.lower():
        return (f"{text}; the connection failed with the login settings given: check "
                "'properties.security.protocol' and 'properties.sasl.*' (a broker that does not speak the "
                "mechanism closes the connection)")
    return text


def _check(error: Any, doing: str, table: str) -> None:
    if error is not None:
        raise ConnectorError(f"table {table!r}: cannot {doing}: {error}")


# --- source ----------------------------------------------------------------------------------

#: What a decoder raises on a payload it cannot read.
_UNREADABLE = (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue)

#: Client properties only a consumer takes; a dead-letter producer leaves them out.
_CONSUMER_ONLY = ("group.", "isolation.level", "auto.offset.reset", "enable.auto.", "auto.commit.",
                  "enable.partition.eof", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.",
                  "fetch.", "queued.", "partition.assignment.strategy", "check.crcs")


def _producer_config(client: Mapping[str, str]) -> dict[str, str]:
    """The table's client properties (servers, security, timeouts) that a producer takes."""
    return {k: v for k, v in client.items() if not k.startswith(_CONSUMER_ONLY)}


def _unreadable(read: Any, payloads: list[bytes]) -> list[tuple[int, str]]:
    """The positions of the payloads ``read`` cannot decode, each with the reason. Runs of good
    payloads are decoded together: the list is halved only where decoding fails."""
    try:
        read(payloads)
        return []
    except _UNREADABLE as e:
        if len(payloads) == 1:
            return [(0, str(e).splitlines()[0] if str(e) else type(e).__name__)]
    mid = len(payloads) // 2
    return _unreadable(read, payloads[:mid]) + [(mid + j, r) for j, r in _unreadable(read, payloads[mid:])]



class _Places:
    """Where each row of a batch came from — (topic, partition, offset) for position ``i`` — built
    only for the rows a message or a metadata column asks about, not a tuple per message."""

    def __init__(self, topics: list[str], partitions: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> None:
        self.topics, self.partitions, self.offsets, self.idx = topics, partitions, offsets, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int) -> tuple[str, int, int]:
        j = self.idx[i]
        return self.topics[j], int(self.partitions[j]), int(self.offsets[j])

    def select(self, positions: np.ndarray) -> _Places:
        return _Places(self.topics, self.partitions, self.offsets, self.idx[positions])

    def topic_array(self) -> pa.Array:
        return pc.take(pa.array(self.topics, pa.string()), pa.array(self.idx, pa.int64()))


class KafkaSourceReader(SourceReader):
    """Reads this subtask's partitions of the table's topics, from offsets it keeps itself."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext, *, upsert: bool = False) -> None:
        super().__init__()
        ck = _client_module()
        self._ck = ck
        self._spec = spec
        self._upsert = upsert
        s = self._settings = _settings_or_raise(spec, upsert=upsert)
        self._name = spec.name
        config = {"enable.auto.commit": "false", "enable.partition.eof": "false",
                  "group.id": f"clink-{spec.name}", **s.client, "error_cb": self._on_error}
        self._timeout = s.timeout_s
        #: When every broker was first seen down (None: they answer), and a failed login.
        self._down_since: float | None = None
        self._refused: Any = None
        self._checked_at = time.monotonic()
        # The Java client's 'max.poll.records' (librdkafka has none): messages per poll.
        self._batch = int(config.pop("max.poll.records", BATCH_MESSAGES))
        self._group = config["group.id"]
        try:
            self._consumer = ck.Consumer(config)
        except ck.KafkaException as e:
            raise ConnectorError(f"table {spec.name!r}: cannot create the Kafka consumer: {e}") from None
        self.bounded = s.bounded != "unbounded"
        self.metrics.update(records_in=0, skipped_records=0)
        #: The producer of dead letters, made at the first bad message.
        self._dead_letters: Any = None
        try:
            everything = self._partitions()
        except ConnectorError:
            self._consumer.close()  # else its threads go on reconnecting for the life of the process
            raise
        self._mine = [tp for i, tp in enumerate(everything) if i % spec.parallelism == spec.subtask]
        #: Next offset to read, per (topic, partition) of this subtask.
        self._next: dict[tuple[str, int], int] = {}
        #: Offset each partition ends at (bounded), and partitions still skipping records older
        #: than the startup timestamp.
        self._stop: dict[tuple[str, int], int] = {}
        self._skipping: set[tuple[str, int]] = set()
        self._done: set[tuple[str, int]] = set()
        try:
            self._start()
        except ConnectorError:
            self._consumer.close()
            raise
        self._committable: dict[str, int] | None = None
        #: Per row of the last batch, the index of its partition in ``splits()``, and those.
        self._last_splits: np.ndarray | None = None
        self._split_names: tuple[str, ...] | None = None
        # What the plan reads: value columns, key columns, metadata, in the order of spec.schema.
        by_name = {f.name: f for f in spec.table_schema}
        self._value_schema = pa.schema([by_name[n] for n in s.value_fields])
        self._key_schema = pa.schema([by_name[n] for n in s.key_fields])
        self._schema = spec.schema
        #: The value format's metadata the table reads (Flink's keys after 'value.').
        self._format_metadata = tuple(k[len("value."):] for k in s.metadata.values() if k.startswith("value."))

    # -- partitions and offsets

    def _partitions(self) -> list[tuple[str, int]]:
        s = self._settings
        try:
            meta = self._consumer.list_topics(timeout=self._timeout)
        except self._ck.KafkaException as e:
            problem = self._refused if self._refused is not None else e.args[0]
            raise ConnectorError(f"table {self._name!r}: cannot list the topics of "
                                 f"{s.client.get('bootstrap.servers')!r} (waited up to {self._timeout:g} s, "
                                 f"'connection.timeout'): {_broker_problem(s, problem)}") from None
        if s.dead_letter and s.dead_letter not in meta.topics:
            raise ConnectorError(f"table {self._name!r}: no dead-letter topic {s.dead_letter!r} "
                                 f"('{DEAD_LETTER_OPTION}') in {s.client.get('bootstrap.servers')!r}; "
                                 "create it first")
        if s.pattern is not None:
            # Never the dead-letter topic: its messages would come back as bad ones.
            topics = sorted(t for t in meta.topics if re.fullmatch(s.pattern, t) and t != s.dead_letter)
        else:
            topics = list(s.topics)
            missing = [t for t in topics if t not in meta.topics]
            if missing:
                raise ConnectorError(f"table {self._name!r}: no topic {', '.join(map(repr, missing))} in "
                                     f"{s.client.get('bootstrap.servers')!r}")
        return [(t, p) for t in topics for p in sorted(meta.topics[t].partitions)]

    def _watermarks(self, tp: tuple[str, int]) -> tuple[int, int]:
        try:
            return self._consumer.get_watermark_offsets(self._ck.TopicPartition(*tp), timeout=self._timeout,
                                                        cached=False)
        except self._ck.KafkaException as e:
            raise ConnectorError(f"table {self._name!r}: cannot read the offsets of {tp[0]}/{tp[1]}: {e}") from None

    def _for_times(self, ts: int) -> dict[tuple[str, int], int]:
        ck = self._ck
        if not self._mine:
            return {}
        found = self._consumer.offsets_for_times([ck.TopicPartition(t, p, ts) for t, p in self._mine],
                                                 timeout=self._timeout)
        return {(f.topic, f.partition): f.offset for f in found}

    def _committed(self, reset: str | None) -> dict[tuple[str, int], int]:
        ck = self._ck
        if not self._mine:
            return {}
        found = self._consumer.committed([ck.TopicPartition(t, p) for t, p in self._mine], timeout=self._timeout)
        result = {}
        for f in found:
            tp = (f.topic, f.partition)
            if f.offset >= 0:
                result[tp] = f.offset
            elif reset in ("earliest", "smallest", "beginning"):
                result[tp] = self._watermarks(tp)[0]
            elif reset in ("latest", "largest", "end"):
                result[tp] = self._watermarks(tp)[1]
            else:
                raise ConnectorError(
                    f"table {self._name!r}: the consumer group {self._group!r} has no committed offset for "
                    f"{tp[0]}/{tp[1]} ('scan.startup.mode' = 'group-offsets'); set "
                    "'properties.auto.offset.reset' = 'earliest' or 'latest', or another 'scan.startup.mode'")
        return result

    def _start(self) -> None:
        """Resolve where each partition starts and ends, as offsets, and assign them."""
        s = self._settings
        if s.startup == "group-offsets":
            self._next = self._committed(s.client.get("auto.offset.reset"))
        elif s.startup == "timestamp":
            found = self._for_times(s.startup_ts)
            for tp in self._mine:
                low, high = self._watermarks(tp)
                self._next[tp] = found.get(tp, -1) if found.get(tp, -1) >= 0 else high
                self._skipping.add(tp)
        else:
            for tp in self._mine:
                low, high = self._watermarks(tp)
                if s.startup == "specific-offsets" and tp[1] in s.startup_offsets:
                    self._next[tp] = s.startup_offsets[tp[1]]
                else:
                    self._next[tp] = high if s.startup == "latest-offset" else low
        if s.bounded == "latest-offset":
            self._stop = {tp: self._watermarks(tp)[1] for tp in self._mine}
        elif s.bounded == "group-offsets":
            self._stop = self._committed("latest")
        elif s.bounded == "timestamp":
            # The end is the first record at or after the timestamp, found on the records as they
            # come (``poll``); until then the partition's end offset now bounds it.
            self._stop = {tp: self._watermarks(tp)[1] for tp in self._mine}
        elif s.bounded == "specific-offsets":
            for tp in self._mine:
                self._stop[tp] = s.bounded_offsets.get(tp[1], self._watermarks(tp)[1])
        self._assign()

    def _assign(self) -> None:
        ck = self._ck
        self._done = {tp for tp in self._mine if tp in self._stop and self._next[tp] >= self._stop[tp]}
        live = [ck.TopicPartition(t, p, self._next[(t, p)]) for t, p in self._mine if (t, p) not in self._done]
        try:
            self._consumer.assign(live)
        except ck.KafkaException as e:
            raise ConnectorError(f"table {self._name!r}: cannot assign partitions: {e}") from None
        self.finished = self.bounded and len(self._done) == len(self._mine)

    def position(self) -> dict:
        offsets = {f"{t}:{p}": n for (t, p), n in self._next.items()}
        self._committable = offsets
        return {"offsets": offsets, "stops": {f"{t}:{p}": n for (t, p), n in self._stop.items()},
                "skipping": sorted(f"{t}:{p}" for t, p in self._skipping)}

    def seek(self, position: dict) -> None:
        self.seek_shares([position])

    def seek_shares(self, positions: list[dict]) -> None:
        """Every partition belongs to one subtask of the earlier run: merged, the positions
        give each partition's offset, whatever the parallelism was."""
        offsets: dict[str, int] = {}
        stops: dict[str, int] = {}
        skipping: set[str] = set()
        for position in positions:
            offsets.update(position.get("offsets", {}))
            stops.update(position.get("stops", {}))
            skipping.update(position.get("skipping", ()))
        for tp in self._mine:
            key = f"{tp[0]}:{tp[1]}"
            if key in offsets:
                self._next[tp] = int(offsets[key])
                if key not in skipping:
                    self._skipping.discard(tp)
            if key in stops:
                self._stop[tp] = int(stops[key])
        self._assign()

    def metrics_position(self) -> dict:
        """The next offset of each partition (``position`` without noting it for the commit)."""
        return {f"{t}:{p}": n for (t, p), n in self._next.items()}

    def split_lag(self) -> dict[str, int]:
        """Per partition, messages between the next offset and the end the broker gave with the
        last fetch (librdkafka's cached high watermark: no request to the broker)."""
        lags = {}
        for tp, offset in list(self._next.items()):
            try:
                _, high = self._consumer.get_watermark_offsets(self._ck.TopicPartition(*tp), cached=True)
            except self._ck.KafkaException:
                continue
            if high >= 0:
                lags[f"{tp[0]}:{tp[1]}"] = max(high - offset, 0)
        return lags

    def splits(self) -> tuple[str, ...]:
        """This subtask's partitions that have not ended (or ended with the last batch): the
        watermark is kept per partition."""
        if self._split_names is None:
            return tuple(f"{t}:{p}" for t, p in self._mine if (t, p) not in self._done)
        return self._split_names

    def split_rows(self) -> np.ndarray | None:
        return self._last_splits

    def checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit the offsets of the completed checkpoint to the consumer group, for monitoring
        only: a restore reads its offsets from the checkpoint."""
        if not self._committable:
            return
        ck = self._ck
        offsets = [ck.TopicPartition(key.rsplit(":", 1)[0], int(key.rsplit(":", 1)[1]), n)
                   for key, n in self._committable.items()]
        with contextlib.suppress(ck.KafkaException):
            self._consumer.commit(offsets=offsets, asynchronous=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._consumer.close()
        if self._dead_letters is not None:
            with contextlib.suppress(Exception):
                self._dead_letters.flush(self._timeout)

    # -- reading

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        if self.bounded and not self._mine:
            self.finished = True
            return None
        try:
            messages = self._consumer.consume(num_messages=self._batch, timeout=POLL_TIMEOUT_S)
        except self._ck.KafkaException as e:
            raise ConnectorError(f"table {self._name!r}: cannot read from Kafka: {e}") from None
        if self._refused is not None:
            raise ConnectorError(f"table {self._name!r}: cannot read from "
                                 f"{self._settings.client.get('bootstrap.servers')!r}: "
                                 f"{_broker_problem(self._settings, self._refused)}")
        if not messages:
            self._split_names = None
            self._check_ends()
            self._check_brokers()
            return None
        self._down_since = None
        # The client hands messages over one by one: these calls are the only per-message work,
        # each mapped over the batch in C (no Python frame per message); everything after is on
        # whole arrays.
        message = self._ck.Message
        n = len(messages)
        errors = list(map(message.error, messages))
        if errors.count(None) != n:
            m = next(m for m, e in zip(messages, errors) if e is not None)
            raise ConnectorError(f"table {self._name!r}: reading {m.topic()}/{m.partition()}: {m.error()}")
        # A subtask reading one topic (or one partition) knows each message's without asking.
        single_topic = len({t for t, _ in self._mine}) == 1
        topics = [self._mine[0][0]] * n if single_topic else list(map(message.topic, messages))
        partitions = (np.full(n, self._mine[0][1], np.int32) if len(self._mine) == 1
                      else np.fromiter(map(message.partition, messages), np.int32, n))
        offsets = np.fromiter(map(message.offset, messages), np.int64, n)
        # Record timestamps only where something reads them (a timestamp mode, a metadata column).
        stamps = list(map(message.timestamp, messages)) if self._reads_times else None
        times = (np.fromiter((t[1] if t[0] else -1 for t in stamps), np.int64, len(messages))
                 if stamps is not None else None)
        keep = np.ones(len(messages), bool)
        groups: dict[tuple[str, int], np.ndarray] = {}
        topic_array = None if single_topic else np.array(topics, dtype=object)
        for topic in ([topics[0]] if single_topic else set(topics)):
            in_topic = np.ones(n, bool) if single_topic else topic_array == topic
            for p in np.unique(partitions[in_topic]):
                groups[(topic, int(p))] = np.flatnonzero(in_topic & (partitions == p))
        for tp, rows in groups.items():
            if tp not in self._next or tp in self._done:
                keep[rows] = False
                continue
            if tp in self._skipping:
                # Records before the first one at or after the startup timestamp are not read.
                reached = np.flatnonzero(times[rows] >= self._settings.startup_ts)
                first = reached[0] if len(reached) else len(rows)
                keep[rows[:first]] = False
                if len(reached):
                    self._skipping.discard(tp)
            if tp in self._stop:
                stop = self._stop[tp]
                if self._settings.bounded == "timestamp":
                    late = np.flatnonzero(times[rows] >= self._settings.bounded_ts)
                    if len(late):
                        stop = min(stop, int(offsets[rows[late[0]]]))
                beyond = offsets[rows] >= stop
                keep[rows[beyond]] = False
                if beyond.any():
                    self._stop[tp] = stop
                    self._finish_partition(tp)
            self._next[tp] = max(self._next[tp], int(offsets[rows[keep[rows]]].max()) + 1) if keep[rows].any() \
                else self._next[tp]
            if tp in self._stop and self._next[tp] >= self._stop[tp]:
                self._finish_partition(tp)
        values = list(map(message.value, messages))
        keys = (list(map(message.key, messages)) if self._settings.key_format is not None or self._settings.dead_letter
                else None)
        # Each message's partition as an index into splits() (as the executor reads it after
        # this poll: the partitions not ended, one that ended with this batch included).
        live = {tp: i for i, tp in enumerate(tp for tp in self._mine if tp not in self._done or tp in groups)}
        self._split_names = tuple(f"{t}:{p}" for t, p in live)
        split_of = np.zeros(len(messages), np.int64)
        for tp, rows in groups.items():
            split_of[rows] = live.get(tp, 0)
        if self.bounded and len(self._done) == len(self._mine):
            self.finished = True
        idx = np.flatnonzero(keep)
        if not len(idx):
            return None
        batch = self._rows(idx, values, keys, topics, partitions, offsets, times, stamps, split_of)
        self.metrics["records_in"] += batch.num_rows
        return batch if batch.num_rows else None

    def _on_error(self, error: Any) -> None:
        """The client's error events (its own thread; only noted here, acted on in ``poll``)."""
        if error.code() in _LOGIN_FAILED or error.fatal():
            self._refused = self._refused or error
        elif error.code() == -187 and self._down_since is None:  # _ALL_BROKERS_DOWN
            self._down_since = time.monotonic()

    def _check_brokers(self) -> None:
        """While no message comes, ask the brokers now and then whether they answer: a source
        whose brokers went away (or hang) fails after 'connection.timeout', not never."""
        now = time.monotonic()
        due = now - self._checked_at >= HEALTH_CHECK_S
        if not due and (self._down_since is None or now - self._down_since < self._timeout):
            return
        topic = self._mine[0][0] if self._mine else None
        try:
            self._consumer.list_topics(topic, timeout=self._timeout)
        except self._ck.KafkaException as e:
            raise ConnectorError(f"table {self._name!r}: the Kafka brokers "
                                 f"{self._settings.client.get('bootstrap.servers')!r} did not answer for "
                                 f"{self._timeout:g} s ('connection.timeout'): "
                                 f"{_broker_problem(self._settings, e.args[0])}") from None
        self._down_since = None
        self._checked_at = time.monotonic()

    @property
    def _reads_times(self) -> bool:
        """Whether this poll needs the records' timestamps: skipping to a startup timestamp,
        stopping at a bounded one, or a metadata column that holds them."""
        s = self._settings
        return bool(self._skipping) or s.bounded == "timestamp" or any(
            key in ("timestamp", "timestamp-type") for key in s.metadata.values())

    def _finish_partition(self, tp: tuple[str, int]) -> None:
        if tp in self._done:
            return
        self._done.add(tp)
        with contextlib.suppress(self._ck.KafkaException):
            self._consumer.pause([self._ck.TopicPartition(*tp)])

    def _check_ends(self) -> None:
        """Nothing came: a bounded partition whose fetch position passed its end (transaction
        markers take offsets that no record has) is done."""
        if not self.bounded:
            return
        ck = self._ck
        waiting = [tp for tp in self._mine if tp not in self._done]
        if waiting:
            for f in self._consumer.position([ck.TopicPartition(*tp) for tp in waiting]):
                tp = (f.topic, f.partition)
                if f.offset >= 0 and f.offset >= self._stop.get(tp, f.offset + 1):
                    self._next[tp] = max(self._next[tp], min(f.offset, self._stop[tp]))
                    self._finish_partition(tp)
        if len(self._done) == len(self._mine):
            self.finished = True

    def _reader(self, fmt: str, schema: pa.Schema, delimiter: str) -> Any:
        """A function that decodes a list of payloads in ``fmt`` (raising one of ``_UNREADABLE``)."""
        s = self._settings
        if fmt in CHANGELOG_FORMATS:
            def read(part: list[bytes]) -> Any:
                return decode_changelog(fmt, part, schema, schema_include=s.schema_include,
                                        database=s.canal_database, table=s.canal_table,
                                        metadata=self._format_metadata)
        else:
            fields = self._spec.fields

            def read(part: list[bytes]) -> Any:
                return decode(fmt, part, schema, csv_delimiter=delimiter, fields=fields)
        return read

    def _decode(self, fmt: str, payloads: list[bytes], schema: pa.Schema, delimiter: str,
                where: _Places) -> Any:
        read = self._reader(fmt, schema, delimiter)
        try:
            return read(payloads)
        except _UNREADABLE:
            pass
        # Some message is bad: bisect to find the first, decoding runs of good ones in bulk.
        lo, hi = 0, len(payloads)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                read(payloads[lo:mid])
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue):
                hi = mid
        topic, partition, offset = where[lo]
        text = payloads[lo][:80].decode(errors="replace")
        try:
            read(payloads[lo:lo + 1])
            reason = ""
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, BadValue) as e:
            reason = f": {e}" if fmt in CHANGELOG_FORMATS else ""
        raise RecordError(f"cannot read {text!r} as {fmt} with columns ({', '.join(schema.names)}){reason}",
                          file=f"{topic}/{partition}", line=offset, table=self._name, hint=self._hint(fmt))

    def _hint(self, fmt: str) -> str:
        option = f"{fmt}.ignore-parse-errors" if fmt != "raw" else None
        skip = f"set '{option}' = 'true' on the table to skip and count bad messages, or " if option else ""
        return f"{skip}set '{DEAD_LETTER_OPTION}' to send them to a topic of their own"

    def _poison(self, idx: np.ndarray, values: list, keys: list | None, where: _Places,
                tombstone: np.ndarray) -> np.ndarray:
        """Which of the messages at ``idx`` do not decode, under a policy that goes on without
        them (skip, dead letter): those are counted, sent to the dead-letter topic if asked,
        and marked in the mask returned. With the policy ``fail`` nothing is looked for here:
        decoding raises the error."""
        s = self._settings
        bad = np.zeros(len(idx), bool)
        reasons: dict[int, str] = {}
        if s.poison["value"] != "fail":
            positions = np.flatnonzero(~tombstone)
            read = self._reader(s.value_format, self._value_schema, s.value_delimiter)
            for j, reason in _unreadable(read, [values[idx[i]] for i in positions]):
                bad[positions[j]] = True
                reasons[int(positions[j])] = f"value: {reason}"
        if s.key_format is not None and keys is not None and s.poison["key"] != "fail":
            kept = [keys[i] for i in idx]
            for i in np.flatnonzero([k is None for k in kept]):
                bad[i] = True
                reasons.setdefault(int(i), "the message has no key, and the table reads columns from the key")
            positions = np.flatnonzero(~bad)
            read = self._reader(s.key_format, self._key_schema, s.key_delimiter)
            for j, reason in _unreadable(read, [kept[i] for i in positions]):
                bad[positions[j]] = True
                reasons[int(positions[j])] = f"key: {reason}"
        if not bad.any():
            return bad
        self.metrics["skipped_records"] += int(bad.sum())
        if s.dead_letter:
            self._send_dead_letters([(where[i], idx[i], reasons[i]) for i in sorted(reasons)], values, keys)
        return bad

    def _send_dead_letters(self, letters: list, values: list, keys: list | None) -> None:
        """Write each bad message, raw, to the dead-letter topic, with headers that say where it
        came from and why, and wait until the broker has them all. The write is synchronous:
        the rows after a bad message go on only once its dead letter is stored, so none is
        lost (after a crash, the replay from the last checkpoint may write some again)."""
        if self._dead_letters is None:
            config = _producer_config(self._settings.client)
            config.setdefault("message.timeout.ms", str(int(self._timeout * 1000)))
            self._dead_letters = self._ck.Producer(config)
        failures: list[Any] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(error)

        for (topic, partition, offset), i, reason in letters:
            headers = [("clink.source.table", self._name.encode()), ("clink.source.topic", topic.encode()),
                       ("clink.source.partition", str(partition).encode()),
                       ("clink.source.offset", str(offset).encode()), ("clink.error", reason.encode())]
            try:
                self._dead_letters.produce(self._settings.dead_letter, value=values[i],
                                           key=keys[i] if keys is not None else None, headers=headers,
                                           on_delivery=delivered)
            except (self._ck.KafkaException, BufferError) as e:
                failures.append(e)
                break
        left = self._dead_letters.flush(self._timeout)
        if failures or left:
            problem = failures[0] if failures else f"{left} messages not acknowledged in {self._timeout:g} s"
            raise ConnectorError(f"table {self._name!r}: cannot write bad messages to the dead-letter topic "
                                 f"{self._settings.dead_letter!r} ('{DEAD_LETTER_OPTION}'): {problem}")

    def _rows(self, idx: np.ndarray, values: list, keys: list | None, topics: list[str], partitions: np.ndarray,
              offsets: np.ndarray, times: np.ndarray, stamps: list, split_of: np.ndarray) -> pa.RecordBatch:
        s = self._settings
        kept_values = values if len(idx) == len(values) else [values[i] for i in idx]
        where = _Places(topics, partitions, offsets, idx)
        tombstones = kept_values.count(None)
        tombstone = (np.fromiter((v is None for v in kept_values), bool, len(kept_values)) if tombstones
                     else np.zeros(len(kept_values), bool))
        if not self._upsert and tombstones:
            # A NULL value carries no row for the plain kafka source (Flink skips it likewise).
            self.metrics["skipped_records"] += int(tombstone.sum())
            idx = idx[~tombstone]
            kept_values = [v for v in kept_values if v is not None]
            where = where.select(np.flatnonzero(~tombstone))
            tombstone = np.zeros(len(idx), bool)
        if s.poison["value"] != "fail" or s.poison["key"] != "fail":
            bad = self._poison(idx, values, keys, where, tombstone)
            if bad.any():
                good = np.flatnonzero(~bad)
                idx, tombstone, where = idx[good], tombstone[good], where.select(good)
                kept_values = [values[i] for i in idx]
        present = [v for v in kept_values if v is not None] if tombstone.any() else kept_values
        value_table = self._decode(s.value_format, present, self._value_schema, s.value_delimiter,
                                   where.select(np.flatnonzero(~tombstone)))
        kinds = None
        if s.changelog:
            # A message holds none, one or several changes: the rest of the row (key, metadata)
            # follows the message each change comes from.
            value_table, kinds, origin = value_table
            idx = idx[origin]
            where = where.select(origin)
            tombstone = np.zeros(len(idx), bool)
        if tombstone.any():
            # Tombstones (upsert-kafka deletes) have no value columns: NULL rows in their places.
            positions = np.cumsum(~tombstone) - 1
            take = pa.array(np.where(tombstone, -1, positions)).cast(pa.int64())
            take = pc.if_else(pa.array(tombstone), pa.scalar(None, pa.int64()), take)
            value_table = value_table.take(take)
        key_table = None
        if s.key_format is not None and keys is not None:
            kept_keys = [keys[i] for i in idx]
            if any(k is None for k in kept_keys):
                bad = where[next(i for i, k in enumerate(kept_keys) if k is None)]
                raise RecordError("the message has no key, and the table reads columns from the key",
                                  file=f"{bad[0]}/{bad[1]}", line=bad[2], table=self._name)
            key_table = self._decode(s.key_format, kept_keys, self._key_schema, s.key_delimiter, where)
        meta = {"topic": where.topic_array,
                "partition": lambda: pa.array(partitions[idx], pa.int32()),
                "offset": lambda: pa.array(offsets[idx], pa.int64()),
                "timestamp": lambda: pa.array(np.where(times[idx] >= 0, times[idx], 0), pa.int64(),
                                              mask=times[idx] < 0).cast(pa.timestamp("ms", "UTC")),
                "timestamp-type": lambda: pa.array(
                    [("NoTimestampType", "CreateTime", "LogAppendTime")[stamps[i][0]] for i in idx], pa.string())}
        self._last_splits = split_of[idx]
        columns = []
        for f in self._schema:
            if f.name == ROWKIND_COLUMN:
                if kinds is None:
                    kinds = np.where(tombstone, DELETE, "+U" if self._upsert else "+I")
                columns.append(pa.array(kinds, pa.string()))
            elif f.name in s.metadata:
                key = s.metadata[f.name]
                column = value_table.column(key).combine_chunks() if key not in meta else meta[key]()
                columns.append(pc.cast(column, f.type))
            elif key_table is not None and f.name in s.key_fields and (
                    f.name not in s.value_fields or self._upsert):
                columns.append(key_table.column(f.name).combine_chunks())
            else:
                columns.append(value_table.column(f.name).combine_chunks())
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


# --- sink ------------------------------------------------------------------------------------


class KafkaSinkWriter(SinkWriter):
    """Writes rows as messages of one topic, with the delivery guarantee the table asks for."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext, *, upsert: bool = False) -> None:
        super().__init__()
        ck = self._ck = _client_module()
        s = self._settings = _settings_or_raise(spec, upsert=upsert)
        self._name = spec.name
        self._upsert = upsert
        if s.changelog:
            raise ConnectorError(f"table {spec.name!r}: clink reads the {s.value_format!r} format but does not write "
                                 "it; write json (an updating query: to an upsert-kafka table)")
        if s.pattern is not None or len(s.topics) != 1:
            raise ConnectorError(f"table {spec.name!r}: a kafka sink writes one 'topic'; "
                                 f"{'topic-pattern' if s.pattern else 'several topics'} can only be read")
        self._partitioner = (spec.options.get("sink.partitioner") or "default").strip().lower()
        self._subtask = spec.subtask
        #: round-robin: the partition the next message goes to.
        self._next_partition = spec.subtask
        self._partition_count: int | None = None
        if s.metadata:
            raise ConnectorError(f"table {spec.name!r}: a kafka sink cannot write the METADATA columns "
                                 f"{', '.join(s.metadata)}; write to a table without them")
        self._topic = s.topics[0]
        self._schema = spec.schema
        self._updating = spec.updating
        if spec.updating and not upsert:
            raise ConnectorError(f"table {spec.name!r}: the kafka sink takes inserts only; write updates with the "
                                 "'upsert-kafka' connector and a PRIMARY KEY")
        config: dict[str, Any] = _producer_config(s.client)
        self._timeout = s.timeout_s
        # A message the brokers do not take is given up on (and the job fails) after the timeout,
        # not after librdkafka's five minutes; a transaction's messages within its own timeout.
        limit = int(self._timeout * 1000)
        if s.delivery == "exactly-once":
            limit = min(limit, int(config.get("transaction.timeout.ms", 60_000)))
        config.setdefault("message.timeout.ms", str(limit))
        config["error_cb"] = self._on_error
        self._exactly_once = s.delivery == "exactly-once"
        self._accept_duplicates = (ctx.get("execution.recovery.accept-duplicates") or "").lower() == "true"
        #: Where an exactly-once sink stages (and spills) a checkpoint's rows; None otherwise.
        self._staging: Path | None = None
        if self._exactly_once:
            config["transactional.id"] = f"{s.transactional_prefix}-0"
            self._ledger_group = f"{s.transactional_prefix}-clink-ledger"
            token = hashlib.sha256(f"{spec.name}/{s.transactional_prefix}".encode()).hexdigest()[:12]
            self._staging = Path(ctx.state_dir) / "kafka-sink" / token if ctx.state_dir is not None else None
        self._config = config
        try:
            self._producer = ck.Producer(config)
        except ck.KafkaException as e:
            raise ConnectorError(f"table {spec.name!r}: cannot create the Kafka producer: {e}") from None
        self._initialised = False
        #: The ledger's committed checkpoint once read from the broker, then kept up to date by
        #: this writer's own commits (a producer fencing this one makes its next commit fail).
        self._ledger_committed: int | None = None
        #: The consumer whose group metadata each transaction commits the ledger offset with.
        self._ledger_consumer: Any = None
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        #: Exactly-once with a state directory: rows of the checkpoint under way beyond
        #: SPILL_BYTES go to this Arrow file (``pending.tmp``), which pre_commit renames.
        self._spill: tuple[Any, Any] | None = None
        self._spilled_rows = 0
        self._failure: Any = None
        self.metrics["rows_out"] = 0

    # -- messages

    def _on_error(self, error: Any) -> None:
        if (error.code() in _LOGIN_FAILED or error.fatal()) and self._failure is None:
            self._failure = _broker_problem(self._settings, error)

    def _new_ledger_consumer(self) -> Any:
        """A consumer of the ledger group, with the table's connection and login settings."""
        config = {k: v for k, v in self._config.items()
                  if k not in ("transactional.id", "message.timeout.ms", "error_cb", "transaction.timeout.ms")
                  and not k.startswith(("linger.", "batch.", "queue.buffering.", "enable.idempotence", "acks",
                                        "compression.", "retries", "retry."))}
        return self._ck.Consumer({**config, "group.id": self._ledger_group, "enable.auto.commit": "false"})

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None and self._failure is None:
            self._failure = error

    def _messages(self, table: pa.Table) -> tuple[list, list | None]:
        """The values and keys of ``table``'s rows (an upsert sink: tombstones for deletes)."""
        s = self._settings
        deletes = None
        if self._updating:
            # A -U is dropped when a change of its key follows it in the batch (its +U replaces the
            # value); one that is its key's last change (a filter kept its +U away) deletes the key,
            # as Flink's upsert sinks read it.
            kinds = table.column(ROWKIND_COLUMN)
            before = pc.equal(kinds, UPDATE_BEFORE).to_numpy(zero_copy_only=False)
            if before.any():
                order = np.arange(table.num_rows, dtype=np.int64)
                last = (table.select(list(s.key_fields)).append_column("__row", pa.array(order))
                        .group_by(list(s.key_fields), use_threads=False).aggregate([("__row", "max")]))
                is_last = np.zeros(table.num_rows, dtype=bool)
                is_last[last.column("__row_max").to_numpy()] = True
                table = table.filter(pa.array(~before | is_last))
            kinds = table.column(ROWKIND_COLUMN)
            deletes = pc.or_(pc.equal(kinds, DELETE), pc.equal(kinds, UPDATE_BEFORE)).to_numpy(zero_copy_only=False)
        values = encode(s.value_format, table.select(list(s.value_fields)), csv_delimiter=s.value_delimiter)
        if deletes is not None and deletes.any():
            values = [None if d else v for v, d in zip(values, deletes, strict=True)]
        keys = (encode(s.key_format, table.select(list(s.key_fields)), csv_delimiter=s.key_delimiter)
                if s.key_format is not None else None)
        return values, keys

    def _produce(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        values, keys = self._messages(table)
        produce, topic, report = self._producer.produce, self._topic, self._on_delivery
        partitions = self._partitions(len(values))
        # The client takes one message per call: this loop is the one per-row step of the sink.
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            where = {} if partitions is None else {"partition": int(partitions[i])}
            while True:
                try:
                    produce(topic, value=value, key=key, on_delivery=report, **where)
                    break
                except BufferError:
                    self._producer.poll(0.05)  # the client's queue is full: let it send
        self._producer.poll(0)

    def _partitions(self, n: int) -> np.ndarray | None:
        """The partition of each of ``n`` messages ('sink.partitioner'; None: the client's choice)."""
        if self._partitioner == "default":
            return None
        if self._partition_count is None:
            try:
                meta = self._producer.list_topics(self._topic, timeout=self._timeout)
                self._partition_count = len(meta.topics[self._topic].partitions)
            except self._ck.KafkaException as e:
                raise ConnectorError(f"table {self._name!r}: cannot read the partitions of {self._topic!r}: {e}") \
                    from None
            if not self._partition_count:
                raise ConnectorError(f"table {self._name!r}: the topic {self._topic!r} has no partitions "
                                     "('sink.partitioner' needs them; does the topic exist?)")
        if self._partitioner == "fixed":
            return np.full(n, self._subtask % self._partition_count)
        first = self._next_partition
        self._next_partition = (first + n) % self._partition_count
        return (first + np.arange(n)) % self._partition_count

    def _flush(self) -> None:
        left = self._producer.flush(self._timeout)
        if left:
            login = ""
            if any(k.startswith(("sasl.", "security.", "ssl.")) for k in self._settings.client):
                login = ("; if the brokers are up, check the login: 'properties.security.protocol' and "
                         "'properties.sasl.*'")
            raise ConnectorError(f"table {self._name!r}: {left} messages were not delivered to "
                                 f"{self._topic!r} at {self._config['bootstrap.servers']!r} in {self._timeout:g} s "
                                 f"('connection.timeout'){login}")
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise ConnectorError(f"table {self._name!r}: cannot write to {self._topic!r}: {failure}")

    def write(self, batch: pa.RecordBatch) -> None:
        self.metrics["rows_out"] += batch.num_rows
        if not batch.num_rows:
            return
        if self._exactly_once:
            if batch.schema != self._schema:
                # A batch may differ from the table in nullability only (VALUES gives NOT NULL
                # columns): the held batches must share one schema to be joined at the commit.
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)
            self._buffer.append(batch)
            self._buffered_bytes += batch.nbytes
            if self._staging is not None and self._buffered_bytes >= SPILL_BYTES:
                self._spill_buffer()
        else:
            self._produce(pa.Table.from_batches([batch]))

    def _take_buffer(self) -> pa.Table:
        table = pa.Table.from_batches(self._buffer, schema=self._schema)
        self._buffer = []
        self._buffered_bytes = 0
        return table

    def _spill_buffer(self) -> None:
        """Move the buffered rows to the checkpoint's file, so a checkpoint of many rows does not
        hold them all in memory until it is taken."""
        if self._spill is None:
            self._staging.mkdir(parents=True, exist_ok=True)
            sink = pa.OSFile(str(self._staging / "pending.tmp"), "wb")
            self._spill = (sink, pa.ipc.new_file(sink, self._schema))
        writer = self._spill[1]
        for batch in self._buffer:
            writer.write_batch(batch)
            self._spilled_rows += batch.num_rows
        self._buffer = []
        self._buffered_bytes = 0

    def _end_spill(self) -> tuple[Path, int]:
        """Write what is buffered to the file and close it: its path and its rows."""
        self._spill_buffer()
        sink, writer = self._spill
        writer.close()
        sink.close()
        rows, self._spill, self._spilled_rows = self._spilled_rows, None, 0
        return self._staging / "pending.tmp", rows

    def _drop_spill(self) -> None:
        if self._spill is not None:
            with contextlib.suppress(Exception):
                self._spill[1].close()
                self._spill[0].close()
            self._spill, self._spilled_rows = None, 0
        if self._staging is not None:
            (self._staging / "pending.tmp").unlink(missing_ok=True)

    def close(self) -> None:
        try:
            if self._exactly_once:
                if self._spill is not None:
                    path, _ = self._end_spill()
                    with pa.memory_map(str(path)) as source:
                        self._transaction(pa.ipc.open_file(source).read_all(), None)
                    path.unlink()
                else:
                    rows = self._take_buffer()
                    if rows.num_rows:
                        self._transaction(rows, None)
            self._flush()
        finally:
            self._close_ledger()

    def abort(self) -> None:
        self._buffer = []
        self._buffered_bytes = 0
        self._drop_spill()
        with contextlib.suppress(Exception):
            self._producer.purge()
        self._close_ledger()

    def _close_ledger(self) -> None:
        if self._ledger_consumer is not None:
            consumer, self._ledger_consumer = self._ledger_consumer, None
            with contextlib.suppress(Exception):
                consumer.close()

    # -- exactly-once: one transaction per checkpoint, with the ledger

    def _init(self) -> None:
        if not self._initialised:
            try:
                # Fences a producer of a crashed run with the same transactional id, and aborts
                # what it had left open.
                self._producer.init_transactions(self._timeout)
            except self._ck.KafkaException as e:
                raise ConnectorError(f"table {self._name!r}: cannot start Kafka transactions "
                                     f"(transactional id {self._config['transactional.id']!r}): {e}") from None
            self._initialised = True

    def _ledger(self) -> int:
        """The newest checkpoint whose transaction committed (0: none)."""
        ck = self._ck
        consumer = self._new_ledger_consumer()
        try:
            (found,) = consumer.committed([ck.TopicPartition(self._topic, 0)], timeout=self._timeout)
            return max(found.offset, 0)
        except ck.KafkaException as e:
            raise ConnectorError(f"table {self._name!r}: cannot read the commit ledger (consumer group "
                                 f"{self._ledger_group!r}): {e}") from None
        finally:
            consumer.close()

    def _transaction(self, rows: pa.Table, checkpoint_id: int | None) -> None:
        ck = self._ck
        self._init()
        try:
            self._producer.begin_transaction()
            for start in range(0, rows.num_rows, PRODUCE_ROWS):  # encoded a slice at a time
                self._produce(rows.slice(start, PRODUCE_ROWS))
            if checkpoint_id is not None:
                if self._ledger_consumer is None:
                    # One for the writer's life: a consumer per commit cost a connection each time.
                    self._ledger_consumer = self._new_ledger_consumer()
                self._producer.send_offsets_to_transaction([ck.TopicPartition(self._topic, 0, checkpoint_id)],
                                                           self._ledger_consumer.consumer_group_metadata(),
                                                           self._timeout)
            self._producer.commit_transaction(self._timeout)
        except ck.KafkaException as e:
            with contextlib.suppress(ck.KafkaException):
                self._producer.abort_transaction(self._timeout)
            raise ConnectorError(f"table {self._name!r}: the Kafka transaction of "
                                 f"{'checkpoint ' + str(checkpoint_id) if checkpoint_id else 'the last rows'} "
                                 f"failed: {e}") from None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise ConnectorError(f"table {self._name!r}: cannot write to {self._topic!r}: {failure}")
        if checkpoint_id is not None:
            self._ledger_committed = checkpoint_id

    def _staged(self) -> dict[int, Path]:
        if self._staging is None or not self._staging.is_dir():
            return {}
        return {int(p.stem.split("-")[1]): p for p in self._staging.glob("chk-*.arrow")}

    def pre_commit(self, checkpoint_id: int) -> dict | None:
        if not self._exactly_once:
            self._flush()
            return None
        if self._staging is None:
            raise ConnectorError(f"table {self._name!r}: an exactly-once kafka sink needs a state directory")
        if self._spill is None:
            self._spill_buffer()  # opens the file, even for a checkpoint without rows
        temp, rows = self._end_spill()
        with open(temp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temp, self._staging / f"chk-{checkpoint_id}.arrow")
        return {"rows": rows}

    def commit(self, checkpoint_id: int, handle: dict | None) -> None:
        if not self._exactly_once:
            return
        staged = {n: p for n, p in self._staged().items() if n <= checkpoint_id}
        if not staged:
            return
        committed = self._ledger() if self._ledger_committed is None else self._ledger_committed
        for n in sorted(staged):
            if n > committed:
                with pa.memory_map(str(staged[n])) as source:
                    rows = pa.ipc.open_file(source).read_all()  # mapped, not copied
                    self._transaction(rows, n)
            staged[n].unlink()

    def recover(self, checkpoint_id: int, handle: dict | None, *, lineage: str = "") -> str | None:
        if not self._exactly_once:
            return None
        if lineage:
            # Checkpoint ids start again at 1 in a new state directory: each keeps its own ledger.
            self._ledger_group = f"{self._settings.transactional_prefix}-clink-ledger-{lineage[:16]}"
            self._close_ledger()
        self._init()
        self._drop_spill()  # rows of a checkpoint the crashed run never took: the run replays them
        for n, path in self._staged().items():
            if n > checkpoint_id:
                path.unlink()  # the run replays these rows
        committed = self._ledger_committed = self._ledger()
        if committed > checkpoint_id and checkpoint_id > 0:
            message = (f"table {self._name!r}: the topic {self._topic!r} holds the transactions of checkpoints up to "
                       f"{committed}, committed after checkpoint {checkpoint_id} which this run resumes from, and "
                       "Kafka cannot take committed messages back")
            if not self._accept_duplicates:
                raise ConnectorError(f"{message}; resuming would write them twice. Set "
                                     "'execution.recovery.accept-duplicates' = 'true' to resume anyway")
            return f"{message}; resuming anyway ('execution.recovery.accept-duplicates'): rows may repeat"
        self.commit(checkpoint_id, handle)
        return None


def _source(upsert: bool):
    return lambda spec, ctx: KafkaSourceReader(spec, ctx, upsert=upsert)


def _sink(upsert: bool):
    return lambda spec, ctx: KafkaSinkWriter(spec, ctx, upsert=upsert)


def _kafka_changelog(options: Mapping[str, str]) -> ChangelogMode:
    """A kafka table read with a changelog value format is an updating source."""
    fmt = options.get("value.format", options.get("format", "")).strip().lower()
    return UPDATING if fmt in CHANGELOG_FORMATS else APPEND_ONLY


#: Options of the changelog value formats (source only).
_CHANGELOG_OPTIONS = (
    OptionSpec(name="debezium-json.schema-include", default="false", choices=("true", "false"),
               description="debezium-json: each message holds {schema, payload}, the change under 'payload'"),
    OptionSpec(name="canal-json.database.include",
               description="canal-json: read only the changes whose 'database' matches this regular expression"),
    OptionSpec(name="canal-json.table.include",
               description="canal-json: read only the changes whose 'table' matches this regular expression"),
    *(OptionSpec(name=f"{fmt}.ignore-parse-errors", default="false", choices=("true", "false"),
                 description=f"{fmt}: skip and count messages that do not decode")
      for fmt in CHANGELOG_FORMATS),
)


KAFKA = Connector(
    name="kafka",
    description="messages of Kafka topics (confluent-kafka): json, csv or raw; exactly-once by transactions",
    source_options=(*KAFKA_OPTIONS, *_SOURCE, *_CHANGELOG_OPTIONS, *_POISON),
    sink_options=(*KAFKA_OPTIONS, *_SINK, _PARTITIONER),
    create_source=_source(False),
    create_sink=_sink(False),
    validate=_validator(False),
    splittable=True,
    metadata=ALL_METADATA,
    metadata_problem=lambda options, key: _metadata_problem(
        key, options.get("value.format", options.get("format", "")).strip().lower()),
    source_changelog=_kafka_changelog,
)

#: What an upsert-kafka source reads: each key's new row (+U) or its deletion (-D); the plan
#: normalizes them into a full changelog by key (``ChangelogNormalize``).
UPSERTS = ChangelogMode(frozenset({INSERT, UPDATE_AFTER, DELETE}))

UPSERT_KAFKA = Connector(
    name="upsert-kafka",
    description="a Kafka topic as a table keyed by PRIMARY KEY: values upsert, tombstones delete",
    source_options=(*_COMMON, *(o for o in _SOURCE if o.name.startswith("scan.bounded.")), *_POISON),
    sink_options=(*_COMMON, *_SINK),
    create_source=_source(True),
    create_sink=_sink(True),
    validate=_validator(True),
    upserts=True,
    source_changelog=lambda options: UPSERTS,
)
