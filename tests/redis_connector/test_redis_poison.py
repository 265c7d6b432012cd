"""Stream entries whose values do not read as their columns, under each policy of the redis
stream source: fail naming the entry, skip and count ('scan.ignore-parse-errors'), or append
them to a dead-letter stream ('scan.dead-letter.stream'). The entries are written to a real
server; what came through, what was counted and what the dead-letter stream holds are read back."""

from __future__ import annotations

import datetime as dt
import random

import pytest
import redis

import clink
from clink.errors import RecordError, SqlError


def source_sql(redis_url: str, **options: str) -> str:
    opts = {"connector": "redis", "url": redis_url, "stream": "s", "scan.bounded.mode": "latest",
            "scan.fetch-size": "7", **options}
    return (f"CREATE TABLE s (k BIGINT, v DOUBLE, d DATE) WITH "
            f"({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})")


def mixed(r: redis.Redis, n: int, seed: int) -> tuple[list[int], dict[bytes, dict]]:
    """``n`` entries, about a fifth bad in one field or another; the good keys, and the bad
    entries by ID."""
    rng = random.Random(seed)
    good, bad = [], {}
    for k in range(n):
        fields = {"k": str(k), "v": f"{k}.5", "d": "2026-01-31"}
        if rng.random() < 0.2:
            field, value = rng.choice([("k", "one"), ("v", "x1"), ("d", "2026-13-01"), ("k", b"\xff\xfe")])
            fields[field] = value
            bad[r.xadd("s", fields)] = fields
        else:
            r.xadd("s", fields)
            good.append(k)
    assert good and bad
    return good, bad


def test_fail_names_the_entry_and_the_options_to_go_on(r: redis.Redis, redis_url: str) -> None:
    r.xadd("s", {"k": "1", "v": "1", "d": "2026-01-01"})
    bad = r.xadd("s", {"k": "1", "v": "x", "d": "2026-01-01"}).decode()
    with pytest.raises(RecordError) as info:
        clink.sql([source_sql(redis_url), "SELECT k, v, d FROM s"]).to_pylist()
    assert f"field 'v' in entry {bad}" in str(info.value)
    rendered = info.value.render()
    assert "'scan.ignore-parse-errors' = 'true'" in rendered and "'scan.dead-letter.stream'" in rendered


@pytest.mark.parametrize("seed", range(3))
def test_skip_and_count_reads_every_good_entry(r: redis.Redis, redis_url: str, seed: int) -> None:
    good, bad = mixed(r, 60, seed)
    result = clink.sql([source_sql(redis_url, **{"scan.ignore-parse-errors": "true"}), "SELECT k, v, d FROM s"])
    rows = result.to_pylist()
    assert rows == [{"k": k, "v": k + 0.5, "d": dt.date(2026, 1, 31)} for k in good]
    assert result.metrics.skipped_records == {"s": len(bad)}


def test_dead_letter_stream_gets_each_bad_entry_with_its_origin(r: redis.Redis, redis_url: str) -> None:
    good, bad = mixed(r, 50, 7)
    result = clink.sql([source_sql(redis_url, **{"scan.dead-letter.stream": "s-bad"}), "SELECT k, v, d FROM s"])
    assert [row["k"] for row in result.to_pylist()] == good
    assert result.metrics.skipped_records == {"s": len(bad)}
    letters = r.xrange("s-bad")
    assert len(letters) == len(bad)
    for _, fields in letters:
        origin = fields.pop(b"_clink.source.id")
        assert fields.pop(b"_clink.source.stream") == b"s" and fields.pop(b"_clink.source.table") == b"s"
        reason = fields.pop(b"_clink.error").decode()
        sent = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in bad[origin].items()}
        assert fields == sent
        # The reason names the field that was spoilt, the one whose value is not the good one.
        spoilt = [k for k in ("k", "v", "d") if sent[k.encode()] in (b"one", b"x1", b"2026-13-01", b"\xff\xfe")]
        assert reason.startswith(f"field {spoilt[0]!r}: "), reason


@pytest.mark.parametrize(("options", "option", "message"), [
    ({"scan.dead-letter.stream": "s"}, "scan.dead-letter.stream", "must not be the stream"),
    ({"scan.dead-letter.stream": "x", "scan.ignore-parse-errors": "true"}, "scan.dead-letter.stream", "not both"),
    ({"scan.ignore-parse-errors": "maybe"}, "scan.ignore-parse-errors", "must be one of"),
])
def test_poison_options_are_checked_at_compile_time_at_their_position(redis_url: str, options: dict, option: str,
                                                                      message: str) -> None:
    ddl = source_sql(redis_url, **options)
    with pytest.raises(SqlError, match=message) as info:
        clink.compile([ddl, "SELECT k FROM s"])
    assert ddl[info.value.span.col - 1:].startswith(repr(option))


def test_poison_options_are_refused_on_a_hash_table(redis_url: str) -> None:
    ddl = (f"CREATE TABLE h (k BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ('connector' = 'redis', "
           f"'url' = '{redis_url}', 'data-structure' = 'hash', 'scan.ignore-parse-errors' = 'true')")
    with pytest.raises(SqlError, match="applies to a stream") as info:
        clink.compile([ddl, "SELECT k FROM h"])
    assert ddl[info.value.span.col - 1:].startswith("'scan.ignore-parse-errors'")
