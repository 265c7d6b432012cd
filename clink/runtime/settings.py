"""The settings clink implements (``SET 'key' = 'value'``, ``--set key=value``) and their parsers.

One table, read by the compiler (a ``SET`` of an unknown key, or of a value its parser refuses,
is a positioned SQL error), by the command line (``--set``) and by the runtime. A setting that is
not in the table does nothing in clink, so it is refused rather than accepted and ignored.

Durations are read by one parser, :func:`parse_duration`, with Flink's units: ``500 ms``,
``10 s``, ``1 min``, ``1 h``, ``1 hour``, ``2 hours``, ``1 d``; a bare number is milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["SETTINGS", "Setting", "check_setting", "checkpoint_location", "close_settings", "parse_duration",
           "parse_size", "parse_time_zone"]

# Flink's TimeUtils labels, per unit (plural and singular, long and short).
_UNITS: dict[str, int] = {}
for _labels, _ms in (
    (("ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
):
    for _label in _labels:
        _UNITS[_label] = _ms

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_duration(text: str) -> int:
    """Milliseconds in a duration such as ``'5 s'``, ``'500 ms'``, ``'1 hour'``; a bare number is ms.

    >>> parse_duration("2 hours"), parse_duration("1 min"), parse_duration("250")
    (7200000, 60000, 250)

    Raises ``ValueError`` with a message that says how to write one.
    """
    m = _DURATION.fullmatch(text.lower())
    if m is None or (m[2] and m[2] not in _UNITS):
        raise ValueError(f"cannot read the duration {text!r}; write it like '500 ms', '10 s', '1 min', "
                         "'1 h' or '2 hours'")
    return round(float(m[1]) * _UNITS.get(m[2], 1))


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|k|mb|m|gb|g)?\s*")
_SIZE_UNITS = {None: 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes in a size such as ``'64 mb'``, ``'512kb'``, ``'1 gb'``; a bare number is bytes."""
    m = _SIZE.fullmatch(text.lower())
    if m is None:
        raise ValueError(f"cannot read the size {text!r}; write it like '64 mb' or '512 kb'")
    return int(float(m[1]) * _SIZE_UNITS[m[2]])


_GMT_OFFSET = re.compile(r"(?:GMT|UTC)([+-])(\d{1,2})(?::?(\d{2}))?")


def parse_time_zone(text: str) -> str:
    """The Arrow time zone of a session time zone id, as Flink takes it (``table.local-time-zone``).

    A tz database id (``'Asia/Shanghai'``, ``'America/Los_Angeles'``, with daylight saving time),
    ``'UTC'``, or a fixed offset written ``'GMT+08:00'`` (``'UTC-3'`` also reads). Abbreviations
    such as ``'PST'`` and bare offsets such as ``'+08:00'`` are refused, as Flink refuses them.

    >>> parse_time_zone("Asia/Shanghai"), parse_time_zone("GMT+08:00"), parse_time_zone("UTC")
    ('Asia/Shanghai', '+08:00', 'UTC')
    """
    import zoneinfo

    name = text.strip()
    if m := _GMT_OFFSET.fullmatch(name):
        hours, minutes = int(m[2]), int(m[3] or 0)
        if hours > 18 or minutes > 59:
            raise ValueError(f"the offset of {text!r} is out of range (at most 18 hours)")
        return f"{m[1]}{hours:02d}:{minutes:02d}"
    if name.upper() in ("UTC", "GMT"):
        return "UTC"
    # A region id: two or more letters, a slash; three-letter abbreviations are ambiguous.
    if "/" in name and not name.startswith("/") and ".." not in name:
        try:
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
        else:
            return name
    raise ValueError(f"unknown time zone {text!r}; write a tz database id such as 'Asia/Shanghai' or "
                     "'America/Los_Angeles', 'UTC', or a fixed offset such as 'GMT+08:00'")


def _time_zone(text: str) -> None:
    parse_time_zone(text)


def _duration(text: str) -> None:
    parse_duration(text)


def _positive_int(text: str) -> None:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"expected a whole number of at least 1, got {text!r}")


def _fraction(text: str) -> None:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise ValueError(f"expected a number from 0 to 1, got {text!r}")


def _parallelism(text: str) -> None:
    _positive_int(text)


def _choice(*allowed: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        if text.strip().lower() not in allowed:
            raise ValueError(f"expected one of {', '.join(repr(a) for a in allowed)}, got {text!r}")

    return check


def _port(text: str) -> None:
    if not text.strip().isdigit() or int(text) > 65535:
        raise ValueError("a port number between 0 and 65535")


def _any(text: str) -> None:
    return None


def _location(text: str) -> None:
    """A local path or a URI of a filesystem clink reaches (the scheme only: no I/O)."""
    from clink.runtime.fs import check_location

    problem = check_location(text)
    if problem is not None:
        raise ValueError(problem)


class Setting(NamedTuple):
    """One setting: its key, what it does (for messages and docs), and a check of its value.
    (A named tuple: settings are read on every run path, and a tuple class costs nothing to define.)"""

    key: str
    description: str
    check: Callable[[str], None] = _any


SETTINGS: dict[str, Setting] = {s.key: s for s in (
    Setting("pipeline.name", "the job's name, shown in logs and checkpoints"),
    Setting("pipeline.max-parallelism", "the number of key groups keyed state is split into (128)",
            _positive_int),
    Setting("parallelism.default", "subtasks of every operator", _parallelism),
    Setting("execution.runtime-mode", "streaming (clink runs every pipeline as a stream)", _choice("streaming")),
    Setting("execution.checkpointing.interval", "time between checkpoints", _duration),
    Setting("execution.checkpointing.interval-rows", "source rows between checkpoints", _positive_int),
    Setting("execution.checkpointing.dir", "where checkpoints are written (a local path or a pyarrow.fs "
            "URI: s3://, gs://, hdfs://, ...); the state directory's checkpoints/ folder by default",
            _location),
    Setting("state.checkpoints.dir", "the older name of 'execution.checkpointing.dir'", _location),
    Setting("execution.savepoint.path", "the checkpoint to resume from (a local path or a pyarrow.fs URI)",
            _location),
    Setting("execution.recovery.accept-duplicates", "resume from an older checkpoint even where a sink cannot "
            "roll back what later checkpoints committed", _choice("true", "false")),
    Setting("state.backend", "where keyed state lives", _choice("memory", "hashmap", "sqlite")),
    Setting("state.checkpoints.num-retained", "how many complete checkpoints are kept", _positive_int),
    Setting("state.sqlite.cache-size", "how much sqlite state stays in memory", parse_size),
    Setting("state.sqlite.log-fraction", "a sqlite value state's change log is merged into its table once it "
            "holds this share of the table's rows (0.05; 0 merges after every checkpoint)", _fraction),
    Setting("state.backend.incremental", "sqlite checkpoints copy only what changed since the previous one "
            "('true'); 'false' copies the whole database each time", _choice("true", "false")),
    Setting("state.backend.local-recovery", "a restart keeps the sqlite working databases a clean stop left "
            "when they hold the checkpoint restored ('true')", _choice("true", "false")),
    Setting("table.exec.state.ttl", "keyed state not updated for this long is forgotten", _duration),
    Setting("table.exec.mini-batch.enabled", "group aggregations take their input in mini-batches "
            "(docs/sql.md)", _choice("true", "false")),
    Setting("table.exec.mini-batch.allow-latency", "the longest a row waits in a mini-batch", _duration),
    Setting("table.exec.mini-batch.size", "the most rows of a mini-batch", _positive_int),
    Setting("table.exec.source.cdc-events-duplicate", "a changelog source may deliver a change twice: its "
            "changes pass through ChangelogNormalize by the table's primary key", _choice("true", "false")),
    Setting("table.exec.source.idle-timeout", "a source split silent this long stops holding back "
            "the watermark", _duration),
    Setting("table.exec.allowed-lateness", "how late a row may be and still update its window", _duration),
    Setting("table.exec.late-events", "what happens to late rows", _choice("drop", "side-output")),
    Setting("table.exec.late-events.table", "the table late rows go to with 'side-output'"),
    Setting("table.local-time-zone", "the session time zone: how TIMESTAMP_LTZ values read as wall-clock "
            "times, and where windows over them start (UTC)", _time_zone),
    Setting("execution.target", "where the job runs: 'local' (this process) or 'ray' (worker processes on a "
            "Ray cluster, docs/cluster.md)", _choice("local", "ray")),
    Setting("ray.address", "the Ray cluster to run on ('auto', or HOST:PORT); without it, a Ray runtime "
            "is started for the job and stopped after it"),
    Setting("cluster.heartbeat.timeout", "a worker that does not answer for this long has failed (10 s)",
            _duration),
    Setting("restart-strategy.type", "what a failed cluster job does: 'fixed-delay' (restart from the "
            "last checkpoint) or 'none'", _choice("none", "fixed-delay", "fixeddelay", "off", "disable")),
    Setting("restart-strategy.fixed-delay.attempts", "restarts before the job fails (3)", _positive_int),
    Setting("restart-strategy.fixed-delay.delay", "time between a failure and the restart (1 s)", _duration),
    Setting("test.fault-point", "crash at a named point (for crash tests)"),
    Setting("metrics.enabled", "measure busy and blocked time, bytes and latency per operator ('true'); "
            "'false' counts rows only", _choice("true", "false")),
    Setting("metrics.port", "serve the job's metrics to Prometheus on this port (0: any free one; on a "
            "cluster, worker i takes the port plus i); needs clink[metrics]", _port),
    Setting("metrics.host", "the address the metrics endpoint binds (127.0.0.1)"),
)}


def checkpoint_location(config) -> str | None:
    """Where checkpoints go when not under the state directory: Flink's
    ``'execution.checkpointing.dir'``, or its older name ``'state.checkpoints.dir'``."""
    return config.get("execution.checkpointing.dir") or config.get("state.checkpoints.dir") or None


def check_setting(key: str, value: str) -> str | None:
    """Why ``SET key = value`` cannot be taken, or None when it can."""
    setting = SETTINGS.get(key)
    if setting is None:
        return f"unknown setting {key!r}: clink does not implement it"
    try:
        setting.check(value)
    except ValueError as exc:
        return f"{key!r}: {exc}"
    return None


def close_settings(key: str) -> list[str]:
    """Known keys that look like ``key`` (for a did-you-mean hint)."""
    import difflib

    return difflib.get_close_matches(key, list(SETTINGS), n=3, cutoff=0.6)
