"""Flink's built-in functions in clink against DuckDB (or, where DuckDB has no such function or
means something else, a Python reference written from Flink's definition).

Each case runs over the dense and the NULL-heavy table of ``test_vs_duckdb`` (``make_table``),
read in batches of 97 rows, so a function sees many small batches and batches that are all NULL.

Where the dialects differ, the reference translates Flink's meaning:

- ``GREATEST`` / ``LEAST`` are NULL if any argument is: DuckDB skips NULLs, hence a CASE;
- ``REPEAT(s, n)`` of a NULL ``n`` is NULL: DuckDB's is too, but its GREATEST would not be;
- ``REGEXP_REPLACE`` replaces every match and writes a group as ``$1``: DuckDB takes the ``'g'``
  flag and ``\\1``;
- ``TIMESTAMPDIFF`` of months counts as Flink's ``subtractMonths`` (from Jan 31 to Feb 28 is a
  month; a month ends at its time of day): DuckDB's ``datediff`` counts boundaries, hence a
  Python reference that runs Flink's loop as written;
- ``TRUNCATE`` of a DOUBLE cuts its shortest decimal form (``1.15`` to one place is 1.1, to two
  1.15): a Python reference through ``decimal``;
- ``INITCAP``, ``IS_ALPHA`` / ``IS_DIGIT`` / ``IS_DECIMAL``, ``CHR``, ``LOCATE`` with a start and
  ``TO_BASE64`` have no DuckDB twin: Python references.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from test_vs_duckdb import TABLES, describe, duckdb_rows, normalize

from clink.testing import run_select

BATCH_ROWS = 97

Reference = str | Callable[[pa.Table], list[tuple]] | None


def _rows(table: pa.Table, *columns: str) -> list[dict[str, Any]]:
    return table.select(["id", *columns]).to_pylist()


def _truncate(x: float | None, digits: int) -> float | None:
    if x is None:
        return None
    quantum = decimal.Decimal(1).scaleb(-digits)
    return float(decimal.Decimal(repr(x)).quantize(quantum, rounding=decimal.ROUND_DOWN))


def _initcap(s: str | None) -> str | None:
    # Flink's (Calcite's) rule, as its documentation states it: a word is a run of ASCII letters
    # and digits; its first character is upper-cased, the rest lower-cased.
    if s is None:
        return None
    out, start = [], True
    for c in s:
        alnum = c.isascii() and c.isalnum()
        if not alnum:
            start = True
            out.append(c)
            continue
        out.append(c.upper() if start else c.lower())
        start = False
    return "".join(out)


def _contains(items: list, needle: Any) -> bool:
    """Flink's ARRAY_CONTAINS of a non-NULL array: a NULL needle finds a NULL element."""
    return any(x is None for x in items) if needle is None else needle in items


def _add_months(day: dt.date, months: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    first = dt.date(year, month + 1, 1)
    following = dt.date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1)
    return dt.date(year, month + 1, min(day.day, (following - first).days))


def _subtract_months_days(d0: dt.date, d1: dt.date) -> int:
    # Flink's SqlFunctionUtils.subtractMonths(int, int), loop and all.
    if d0 < d1:
        return -_subtract_months_days(d1, d0)
    m = (d0 - d1).days // 31
    while True:
        if _add_months(d1, m) >= d0:
            return m
        if _add_months(d1, m + 1) > d0:
            return m
        m += 1


def _subtract_months(t0: dt.datetime, t1: dt.datetime) -> int:
    # Flink's subtractMonths(long, long): whole days first, then the time of day on the last one.
    x = _subtract_months_days(t0.date(), t1.date())
    if _add_months(t1.date(), x) == t0.date() and t0.time() < t1.time():
        x -= 1
    return x


def _timestampdiff(table: pa.Table) -> list[tuple]:
    out = []
    anchor = dt.datetime(2023, 1, 31, 12, 0, 0)
    for r in _rows(table, "ts"):
        ts = r["ts"]
        if ts is None:
            out.append((r["id"], None, None, None, None, None))
            continue
        months = _subtract_months(ts, anchor)
        ms = int((ts - anchor) / dt.timedelta(milliseconds=1))
        trunc = lambda a, b: -(-a // b) if a < 0 else a // b  # noqa: E731 - Java's integer division
        out.append((r["id"], months, trunc(months, 12), trunc(months, 3), trunc(ms, 86_400_000),
                    trunc(ms, 1000)))
    return out


def _python(fn: Callable[[dict[str, Any]], tuple], *columns: str) -> Callable[[pa.Table], list[tuple]]:
    return lambda table: [(r["id"], *fn(r)) for r in _rows(table, *columns)]


def _none_or(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else f(v)


_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _is_json(text: str | None, kind: Callable[[Any], bool]) -> bool:
    if text is None:
        return False
    try:
        value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return False
    return kind(value)


def _locate(needle: str, s: str | None, start: int) -> int | None:
    if s is None:
        return None
    found = s.find(needle, start - 1)
    return found + 1 if found >= 0 else 0


CASES: list[tuple[str, str, Reference]] = [
    # -- comparison: DuckDB has no BETWEEN SYMMETRIC, so the reference spells out Calcite's
    # definition; DuckDB's SIMILAR TO takes a regular expression, so the reference is each SQL
    # pattern written by hand as the regular expression it means (matched whole).
    ("between_symmetric",
     "SELECT id, i BETWEEN j AND 100, i BETWEEN SYMMETRIC j AND 100, i NOT BETWEEN SYMMETRIC j AND b, "
     "d BETWEEN ASYMMETRIC j AND i, i NOT BETWEEN j AND b FROM t",
     "SELECT id, i BETWEEN j AND 100, (i >= j AND i <= 100) OR (i >= 100 AND i <= j), "
     "NOT ((i >= j AND i <= b) OR (i >= b AND i <= j)), d BETWEEN j AND i, NOT (i BETWEEN j AND b) FROM t"),
    ("similar_to",
     "SELECT id, s SIMILAR TO '%o%', s SIMILAR TO '_%', s SIMILAR TO '(a|b|o|O)+%', s NOT SIMILAR TO '[a-f]%', "
     "s SIMILAR TO '%[[:DIGIT:]]{2,}%', s SIMILAR TO '%!%%' ESCAPE '!', s SIMILAR TO '%\\_%' ESCAPE '\\', "
     "s SIMILAR TO '[^ ]*', s SIMILAR TO '%_b%|x%', s SIMILAR TO 'a.%', s SIMILAR TO '[[:UPPER:]][[:LOWER:]]+%', "
     "s SIMILAR TO '(_|%)?_{3}' FROM t",
     "SELECT id, s SIMILAR TO '.*o.*', s SIMILAR TO '.+', s SIMILAR TO '(a|b|o|O)+.*', NOT (s SIMILAR TO '[a-f].*'), "
     "s SIMILAR TO '.*[0-9]{2,}.*', s SIMILAR TO '.*%.*', s SIMILAR TO '.*_.*', "
     "s SIMILAR TO '[^ ]*', s SIMILAR TO '.*.b.*|x.*', s SIMILAR TO 'a..*', s SIMILAR TO '[A-Z][a-z]+.*', "
     "s SIMILAR TO '(.|.*)?.{3}' FROM t"),
    # -- arithmetic
    ("logarithms",
     "SELECT id, LN(ABS(d) + 1), LOG10(ABS(d) + 1), LOG2(ABS(d) + 1), LOG(ABS(d) + 1), LOG(3, ABS(d) + 1), "
     "EXP(d / 100) FROM t",
     "SELECT id, ln(abs(d) + 1), log10(abs(d) + 1), log2(abs(d) + 1), ln(abs(d) + 1), log(3, abs(d) + 1), "
     "exp(d / 100) FROM t"),
    ("trigonometry",
     "SELECT id, SIN(d), COS(d), TAN(d), COT(d), ASIN(SIN(d)), ACOS(COS(d)), ATAN(d), ATAN2(d, i), "
     "SINH(d / 100), COSH(d / 100), TANH(d / 100), DEGREES(d), RADIANS(d) FROM t WHERE d <> 0",
     "SELECT id, sin(d), cos(d), tan(d), cot(d), asin(sin(d)), acos(cos(d)), atan(d), atan2(d, i), "
     "sinh(d / 100), cosh(d / 100), tanh(d / 100), degrees(d), radians(d) FROM t WHERE d <> 0"),
    ("sign_pi_e", "SELECT id, SIGN(i), SIGN(d), SIGN(b), PI() * 2, E() FROM t",
     "SELECT id, sign(i), sign(d), sign(b), pi() * 2, exp(1) FROM t"),
    ("truncate_double",
     "SELECT id, TRUNCATE(d, 1), TRUNCATE(d, 2), TRUNCATE(d), TRUNCATE(d, -1) FROM t",
     _python(lambda r: (_truncate(r["d"], 1), _truncate(r["d"], 2), _truncate(r["d"], 0), _truncate(r["d"], -1)),
             "d")),
    ("truncate_integer", "SELECT id, TRUNCATE(i, -1), TRUNCATE(b, -3), TRUNCATE(i) FROM t",
     "SELECT id, CAST(trunc(i / 10) * 10 AS INT), CAST(trunc(b / 1000) * 1000 AS BIGINT), i FROM t"),
    ("bin_hex", "SELECT id, BIN(b), HEX(b), HEX(i), HEX(s) FROM t",
     "SELECT id, bin(b), hex(b), hex(CAST(i AS BIGINT)), hex(s) FROM t"),
    # -- strings
    ("repeat_reverse", "SELECT id, REPEAT(s, j), REPEAT(s, 2), REVERSE(s) FROM t",
     "SELECT id, CASE WHEN j < 0 AND s IS NOT NULL THEN '' ELSE repeat(s, j) END, repeat(s, 2), reverse(s) FROM t"),
    ("regexp_functions",
     "SELECT id, REGEXP(s, 'o+'), REGEXP_REPLACE(s, '[aeiou]', 'X'), REGEXP_REPLACE(s, '(_)(.)', '$2$1') FROM t",
     "SELECT id, regexp_matches(s, 'o+'), regexp_replace(s, '[aeiou]', 'X', 'g'), "
     "regexp_replace(s, '(_)(.)', '\\2\\1', 'g') FROM t"),
    ("initcap", "SELECT id, INITCAP(s) FROM t", _python(lambda r: (_initcap(r["s"]),), "s")),
    ("concat_ws", "SELECT id, CONCAT_WS('-', s, UPPER(s), NULLIF(s, 'o')), CONCAT_WS(s, 'a', 'b') FROM t",
     "SELECT id, concat_ws('-', s, upper(s), nullif(s, 'o')), CASE WHEN s IS NOT NULL THEN 'a' || s || 'b' END "
     "FROM t"),
    ("pad", "SELECT id, LPAD(s, 6, 'xy'), RPAD(s, 4, '.'), LPAD(s, 0, 'x'), RPAD(s, 1, 'ab') FROM t "
     "WHERE s NOT LIKE '%🙂%'",
     "SELECT id, lpad(s, 6, 'xy'), rpad(s, 4, '.'), '', rpad(s, 1, 'ab') FROM t WHERE s NOT LIKE '%🙂%'"),
    ("base64", "SELECT id, TO_BASE64(s), FROM_BASE64(TO_BASE64(s)) FROM t",
     _python(lambda r: (_none_or(lambda s: base64.b64encode(s.encode()).decode())(r["s"]), r["s"]), "s")),
    ("ascii_chr", "SELECT id, ASCII(s), CHR(i), CHR(j + 100) FROM t",
     _python(lambda r: (_none_or(lambda s: ord(s[0]) if s else 0)(r["s"]),
                        _none_or(lambda n: chr(n & 255) if n >= 0 else "")(r["i"]),
                        _none_or(lambda n: chr((n + 100) & 255))(r["j"])), "s", "i", "j")),
    ("instr_locate", "SELECT id, INSTR(s, 'o'), INSTR(s, '_b'), LOCATE('_', s), LOCATE('_', s, 3), "
     "LOCATE('', s) FROM t",
     _python(lambda r: (_locate("o", r["s"], 1), _locate("_b", r["s"], 1), _locate("_", r["s"], 1),
                        _locate("_", r["s"], 3), _locate("", r["s"], 1)), "s")),
    ("instr_vs_duckdb", "SELECT id, INSTR(s, 'o'), INSTR(s, 'é') FROM t",
     "SELECT id, instr(s, 'o'), instr(s, 'é') FROM t"),
    ("left_right", "SELECT id, LEFT(s, 3), RIGHT(s, 2), LEFT(s, -1), RIGHT(s, 0) FROM t",
     "SELECT id, left(s, 3), right(s, 2), CASE WHEN s IS NOT NULL THEN '' END, "
     "CASE WHEN s IS NOT NULL THEN '' END FROM t"),
    # -- collections: arrays built from the columns (NULLs among the elements), a Python reference
    # written from Flink's definitions (DuckDB's list functions treat NULL needles otherwise).
    ("array_functions",
     "SELECT id, ARRAY_CONTAINS(ARRAY[i, j, i + 1], j), ARRAY_CONTAINS(ARRAY[i, j], CAST(NULL AS BIGINT)), "
     "ARRAY_POSITION(ARRAY[i, j, j], j), ARRAY_REMOVE(ARRAY[i, j, i], i), ARRAY_REVERSE(ARRAY[i, j, 7]), "
     "ARRAY_DISTINCT(ARRAY[i, j, i, j]) FROM t",
     _python(lambda r: (_contains([r["i"], r["j"], _none_or(lambda n: n + 1)(r["i"])], r["j"]),
                        _contains([r["i"], r["j"]], None),
                        None if r["j"] is None else ([r["i"], r["j"], r["j"]].index(r["j"]) + 1),
                        [x for x in [r["i"], r["j"], r["i"]] if x != r["i"] or (x is None) != (r["i"] is None)],
                        [7, r["j"], r["i"]],
                        list(dict.fromkeys([r["i"], r["j"], r["i"], r["j"]]))), "i", "j")),
    # -- conditional
    ("ifnull", "SELECT id, IFNULL(i, j), IFNULL(s, 'none') FROM t", "SELECT id, ifnull(i, j), ifnull(s, 'none') FROM t"),
    ("is_kind", "SELECT id, IS_ALPHA(s), IS_DIGIT(s), IS_DECIMAL(s) FROM t",
     _python(lambda r: (bool(r["s"]) and r["s"].isalpha(), bool(r["s"]) and r["s"].isdigit(),
                        r["s"] is not None and _DECIMAL_TEXT.fullmatch(r["s"]) is not None), "s")),
    ("greatest_least",
     "SELECT id, GREATEST(i, j, 0), LEAST(i, j), GREATEST(d, b), LEAST(s, 'm'), GREATEST(ts, TIMESTAMP '2023-01-01 "
     "00:00:00') FROM t",
     "SELECT id, CASE WHEN i IS NOT NULL AND j IS NOT NULL THEN greatest(i, j, 0) END, "
     "CASE WHEN i IS NOT NULL AND j IS NOT NULL THEN least(i, j) END, "
     "CASE WHEN d IS NOT NULL AND b IS NOT NULL THEN greatest(d, b) END, CASE WHEN s IS NOT NULL THEN least(s, 'm') END, "
     "CASE WHEN ts IS NOT NULL THEN greatest(ts, TIMESTAMP '2023-01-01 00:00:00') END FROM t"),
    # -- hashes
    ("hashes", "SELECT id, MD5(s), SHA1(s), SHA256(s), SHA2(s, 256) FROM t",
     "SELECT id, md5(s), sha1(s), sha256(s), sha256(s) FROM t"),
    # -- temporal
    # CAST(ts AS TIME) is Flink's TIME(0): whole seconds, hence DuckDB's date_trunc.
    ("time_plus_interval",
     "SELECT id, CAST(ts AS TIME) + INTERVAL '1' MINUTE * i, CAST(ts AS TIME) - INTERVAL '1' HOUR * j, "
     "INTERVAL '90' MINUTE + CAST(ts AS TIME) FROM t",
     "SELECT id, tm + to_minutes(i), tm - to_hours(j), to_minutes(90) + tm "
     "FROM (SELECT id, i, j, CAST(date_trunc('second', ts) AS TIME) AS tm FROM t) AS q"),
    # DuckDB has no OVERLAPS: the reference spells out Calcite's expansion (each pair put in order
    # by CASE, then e1 >= s2 AND e2 >= s1), the periods' lengths from the columns (negative too).
    ("overlaps",
     "SELECT id, (ts, INTERVAL '1' HOUR * j) OVERLAPS (TIMESTAMP '2023-06-01 00:00:00', TIMESTAMP '2022-01-01 "
     "00:00:00'), (dt, INTERVAL '1' DAY * j) OVERLAPS (DATE '2023-01-01', DATE '2023-03-01'), "
     "(CAST(ts AS TIME), INTERVAL '1' MINUTE * i) OVERLAPS (TIME '12:00:00', TIME '13:00:00'), "
     "(ts, CAST(dt AS TIMESTAMP)) OVERLAPS (TIMESTAMP '2022-01-01 00:00:00', INTERVAL '30' DAY) FROM t",
     "SELECT id, "
     "  (CASE WHEN s0 <= e0 THEN e0 ELSE s0 END) >= TIMESTAMP '2022-01-01 00:00:00'"
     "  AND TIMESTAMP '2023-06-01 00:00:00' >= (CASE WHEN s0 <= e0 THEN s0 ELSE e0 END), "
     "  (CASE WHEN d0 <= d1 THEN d1 ELSE d0 END) >= DATE '2023-01-01'"
     "  AND DATE '2023-03-01' >= (CASE WHEN d0 <= d1 THEN d0 ELSE d1 END), "
     "  (CASE WHEN t0 <= t1 THEN t1 ELSE t0 END) >= TIME '12:00:00'"
     "  AND TIME '13:00:00' >= (CASE WHEN t0 <= t1 THEN t0 ELSE t1 END), "
     "  (CASE WHEN ts <= CAST(dt AS TIMESTAMP) THEN CAST(dt AS TIMESTAMP) ELSE ts END) >= TIMESTAMP '2022-01-01 00:00:00'"
     "  AND TIMESTAMP '2022-01-31 00:00:00' >= (CASE WHEN ts <= CAST(dt AS TIMESTAMP) THEN ts ELSE CAST(dt AS TIMESTAMP) END) "
     "FROM (SELECT id, ts, dt, ts AS s0, ts + to_hours(j) AS e0, dt AS d0, CAST(dt + to_days(j) AS DATE) AS d1, "
     "CAST(date_trunc('second', ts) AS TIME) AS t0, CAST(date_trunc('second', ts) AS TIME) + to_minutes(i) AS t1 "
     "FROM t) AS q"),
    ("timestampadd",
     "SELECT id, TIMESTAMPADD(MONTH, j, ts), TIMESTAMPADD(YEAR, 1, ts), TIMESTAMPADD(QUARTER, j, dt), "
     "TIMESTAMPADD(HOUR, j, ts), TIMESTAMPADD(SECOND, i, ts), TIMESTAMPADD(DAY, j, dt), TIMESTAMPADD(WEEK, 2, ts) "
     "FROM t",
     "SELECT id, ts + to_months(j), ts + to_years(1), CAST(dt + to_months(3 * j) AS DATE), ts + to_hours(j), "
     "ts + to_seconds(i), CAST(dt + to_days(j) AS DATE), ts + to_weeks(2) FROM t"),
    ("timestampdiff",
     "SELECT id, TIMESTAMPDIFF(MONTH, TIMESTAMP '2023-01-31 12:00:00', ts), "
     "TIMESTAMPDIFF(YEAR, TIMESTAMP '2023-01-31 12:00:00', ts), TIMESTAMPDIFF(QUARTER, TIMESTAMP '2023-01-31 12:00:00', ts), "
     "TIMESTAMPDIFF(DAY, TIMESTAMP '2023-01-31 12:00:00', ts), TIMESTAMPDIFF(SECOND, TIMESTAMP '2023-01-31 12:00:00', ts) "
     "FROM t",
     _timestampdiff),
    ("timestampdiff_day_dates", "SELECT id, TIMESTAMPDIFF(DAY, dt, DATE '2024-01-01'), TIMESTAMPDIFF(HOUR, ts, ts) "
     "FROM t", "SELECT id, DATE '2024-01-01' - dt, CASE WHEN ts IS NOT NULL THEN 0 END FROM t"),
    ("to_date_to_timestamp",
     "SELECT id, TO_DATE(DATE_FORMAT(ts, 'dd/MM/yyyy'), 'dd/MM/yyyy'), TO_DATE(CAST(dt AS STRING)), "
     "TO_TIMESTAMP(DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss')), "
     "TO_TIMESTAMP(DATE_FORMAT(ts, 'yyyy/MM/dd HH:mm:ss.SSS'), 'yyyy/MM/dd HH:mm:ss.SSS'), TO_DATE(s) FROM t",
     "SELECT id, CAST(ts AS DATE), dt, date_trunc('second', ts), ts, NULL FROM t"),
    # -- JSON: documents made from the columns (JSON_OBJECT is DuckDB's json_object with NULL ON NULL)
    ("json_object_array",
     "SELECT id, JSON_OBJECT('i' VALUE i, 's' VALUE s, 'd' VALUE d, 'f' VALUE flag), "
     "JSON_ARRAY(i, s NULL ON NULL), JSON_ARRAY(j, s), JSON_STRING(r), JSON_STRING(s) FROM t",
     "SELECT id, json_object('i', i, 's', s, 'd', d, 'f', flag), json_array(i, s), "
     "CASE WHEN j IS NULL AND s IS NULL THEN '[]' WHEN j IS NULL THEN json_array(s) "
     "WHEN s IS NULL THEN json_array(j) ELSE json_array(j, s) END, to_json(r), to_json(s) FROM t"),
    ("json_value_query_exists",
     "SELECT id, JSON_VALUE(doc, '$.s'), JSON_VALUE(doc, '$.i' RETURNING INT), JSON_VALUE(doc, '$.d' RETURNING DOUBLE), "
     "JSON_VALUE(doc, 'lax $.missing' DEFAULT 'none' ON EMPTY), JSON_QUERY(doc, '$.a'), JSON_QUERY(doc, 'lax $.a[*]'), "
     "JSON_VALUE(doc, '$.a[1]' RETURNING INT), JSON_EXISTS(doc, '$.i'), JSON_EXISTS(doc, '$.a[5]') "
     "FROM (SELECT id, JSON_OBJECT('i' VALUE i, 's' VALUE s, 'd' VALUE d, 'a' VALUE JSON_ARRAY(j, i NULL ON NULL)) "
     "AS doc FROM t) AS q",
     "SELECT id, json_extract_string(doc, '$.s'), CAST(json_extract(doc, '$.i') AS INT), "
     "CAST(json_extract(doc, '$.d') AS DOUBLE), 'none', json_extract(doc, '$.a'), json_extract(doc, '$.a'), "
     "CAST(json_extract(doc, '$.a[1]') AS INT), i IS NOT NULL, FALSE "
     "FROM (SELECT id, i, json_object('i', i, 's', s, 'd', d, 'a', json_array(j, i)) AS doc FROM t) AS q"),
    ("is_json", "SELECT id, s IS JSON, s IS JSON SCALAR, s IS NOT JSON OBJECT, CONCAT('[', s, ']') IS JSON ARRAY FROM t",
     _python(lambda r: (_is_json(r["s"], lambda v: True), _is_json(r["s"], lambda v: not isinstance(v, (dict, list))),
                        not _is_json(r["s"], lambda v: isinstance(v, dict)),
                        _is_json(None if r["s"] is None else f"[{r['s']}]", lambda v: isinstance(v, list))), "s")),
    ("unix_timestamp_from_unixtime",
     "SELECT id, UNIX_TIMESTAMP(DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss')), FROM_UNIXTIME(b * 1000), "
     "FROM_UNIXTIME(b, 'yyyy/MM/dd HH') FROM t",
     "SELECT id, CAST(epoch(date_trunc('second', ts)) AS BIGINT), "
     "strftime(make_timestamp(b * 1000 * 1000000), '%Y-%m-%d %H:%M:%S'), "
     "strftime(make_timestamp(b * 1000000), '%Y/%m/%d %H') FROM t"),
]


@pytest.fixture(scope="module", params=sorted(TABLES))
def table(request: pytest.FixtureRequest) -> pa.Table:
    return TABLES[request.param]


@pytest.mark.parametrize(("clink_sql", "reference"), [pytest.param(c[1], c[2], id=c[0]) for c in CASES])
def test_matches_reference(clink_sql: str, reference: Reference, table: pa.Table) -> None:
    ours = Counter(tuple(normalize(v) for v in row.values())
                   for row in run_select(clink_sql, row_group_size=BATCH_ROWS, t=table).to_pylist())
    if callable(reference):
        theirs = Counter(tuple(normalize(v) for v in row) for row in reference(table))
    else:
        theirs = duckdb_rows(reference or clink_sql, table)
    assert ours == theirs, describe(ours, theirs)


def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ---------------------------------------------------------------- LISTAGG and COLLECT over windows

# Every row arrives before the watermark passes its window (the lateness allowed is the whole
# table's span), so each window holds its rows in arrival order: the file's, by id.
_EVERY_ROW = {"t": "ts AS ts - INTERVAL '3000' DAY"}
_DAILY = "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' DAY)) GROUP BY j, window_start, window_end"


def test_listagg_over_windows_matches_duckdb(table: pa.Table, path: str) -> None:
    ours = run_select(f"SELECT j, window_start, LISTAGG(s), LISTAGG(s, ' | ') FILTER (WHERE i > 0), COUNT(*) {_DAILY}",
                      row_group_size=BATCH_ROWS, watermarks=_EVERY_ROW, t=table)
    theirs = duckdb_rows(
        "SELECT j, date_trunc('day', ts), string_agg(s, ',' ORDER BY id), "
        "string_agg(s, ' | ' ORDER BY id) FILTER (WHERE i > 0), count(*) FROM t WHERE ts IS NOT NULL "
        "GROUP BY j, date_trunc('day', ts)", table)
    got = Counter(tuple(normalize(v) for v in row.values()) for row in ours.to_pylist())
    if path != "local:1":
        # LISTAGG joins values in arrival order, and rows read by several source subtasks arrive
        # interleaved (as in Flink, the order is then not defined): compare the values joined.
        def values(rows: Counter) -> Counter:
            return Counter(tuple(tuple(sorted(v.split(sep))) if isinstance(v, str) else v
                                 for v, sep in zip(row, (None, None, ",", " | ", None), strict=True))
                           for row in rows.elements())
        got, theirs = values(got), values(theirs)
    assert got == theirs, describe(got, theirs)


def test_collect_over_windows_counts_each_value(table: pa.Table) -> None:
    ours = run_select(f"SELECT j, window_start, COLLECT(s), COLLECT(i) {_DAILY}", row_group_size=BATCH_ROWS,
                      watermarks=_EVERY_ROW, t=table)
    got = Counter((r["j"], r["window_start"], tuple(sorted(r["EXPR$2"])), tuple(sorted(r["EXPR$3"])))
                  for r in ours.to_pylist())
    con_rows = duckdb_rows("SELECT j, date_trunc('day', ts), map_entries(histogram(s)), map_entries(histogram(i)) "
                           "FROM t WHERE ts IS NOT NULL GROUP BY j, date_trunc('day', ts)", table)
    want = Counter()
    for (j, day, s_hist, i_hist), count in con_rows.items():
        # map_entries gives {key, value} structs, which ``normalize`` made (("key", k), ("value", v)).
        entries = lambda h: tuple(sorted((dict(e)["key"], dict(e)["value"]) for e in (h or ())))  # noqa: E731
        want[(j, day, entries(s_hist), entries(i_hist))] += count
    assert got == want, describe(got, want)


# ---------------------------------------------------------------- LISTAGG and COLLECT in a GROUP BY


def test_listagg_and_collect_in_a_group_by_match_duckdb(table: pa.Table, path: str) -> None:
    """Without a window: an updating result, each key's text and multiset kept up to date."""
    ours = run_select("SELECT j, LISTAGG(s) AS l, LISTAGG(s, ' | ') FILTER (WHERE i > 0) AS f, COLLECT(i) AS c, "
                      "COUNT(*) AS n FROM t GROUP BY j", row_group_size=BATCH_ROWS, t=table)
    theirs = duckdb_rows("SELECT j, string_agg(s, ',' ORDER BY id), string_agg(s, ' | ' ORDER BY id) FILTER "
                         "(WHERE i > 0), map_entries(histogram(i)), count(*) FROM t GROUP BY j", table)

    def entries(bag) -> tuple:
        return tuple(sorted((dict(e)["key"], dict(e)["value"]) if isinstance(e, tuple) and isinstance(e[0], tuple)
                            else tuple(e) for e in (bag or ())))

    def texts(value, sep):
        # Several source subtasks interleave a key's rows: compare the values joined, not their order.
        return value if value is None or path == "local:1" else tuple(sorted(value.split(sep)))

    got = Counter((r["j"], texts(r["l"], ","), texts(r["f"], " | "), entries(r["c"]), r["n"])
                  for r in ours.to_pylist())
    want = Counter()
    for (j, l, f, c, n), count in theirs.items():
        want[(j, texts(l, ","), texts(f, " | "), entries(c), n)] += count
    assert got == want, describe(got, want)


def test_listagg_over_an_updating_input_matches_duckdb(table: pa.Table) -> None:
    """Over a GROUP BY's revised rows LISTAGG takes a value back out of its text (the order of a
    text's values follows the updates, so the values are compared, not their order)."""
    query = ("SELECT n, LISTAGG(s, '/') AS l, COUNT(*) AS c FROM (SELECT s, COUNT(*) AS n FROM t GROUP BY s) "
             "GROUP BY n")
    ours = run_select(query, row_group_size=BATCH_ROWS, t=table)
    theirs = duckdb_rows(query.replace("LISTAGG(s, '/')", "string_agg(s, '/')"), table)

    def values(text):
        return None if text is None else tuple(sorted(text.split("/")))

    got = Counter((r["n"], values(r["l"]), r["c"]) for r in ours.to_pylist())
    want = Counter()
    for (n, l, c), count in theirs.items():
        want[(n, values(l), c)] += count
    assert got == want, describe(got, want)


def test_listagg_over_an_updating_input_takes_out_the_first_equal_value(path: str) -> None:
    """Flink's retracting LISTAGG: a retraction takes out the first equal value of the text, and the
    value an update brings goes to its end. (With several subtasks the inner GROUP BY's changes
    arrive interleaved, so the order of the values is not defined: then only the values count.)"""
    def text(value: str) -> str:
        return value if path == "local:1" else ",".join(sorted(value.split(",")))

    t = pa.table({"k": pa.array(["a", "b", "c", "b", "a", "d"]), "v": pa.array([1, 1, 1, 2, 2, 1], pa.int64())})
    rows = run_select("SELECT g, LISTAGG(k, ',') AS ks FROM (SELECT k, MAX(v) % 2 AS g FROM t GROUP BY k) GROUP BY g",
                      row_group_size=1, t=t).to_pylist()
    assert sorted((r["g"], text(r["ks"])) for r in rows) == [(0, text("b,a")), (1, "c,d")]
    # Counts 1; 1,1; 1,2 (y's 1 out, its 2 in); 1,2,1; then x's 1 out (the first one) and its 2 in.
    t = pa.table({"k": pa.array(["x", "y", "y", "z", "x"])})
    rows = run_select("SELECT LISTAGG(CAST(n AS STRING)) AS ns FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k)",
                      row_group_size=1, t=t).to_pylist()
    assert [text(r["ns"]) for r in rows] == [text("2,1,2")]
    # A NULL taken back (it never went in).
    t = pa.table({"k": pa.array(["x", None, None], pa.string())})
    rows = run_select("SELECT n, LISTAGG(k) AS ks FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) GROUP BY n",
                      row_group_size=1, t=t).to_pylist()
    assert sorted((r["n"], r["ks"]) for r in rows) == [(1, "x"), (2, None)]


def test_collect_over_an_updating_input_takes_values_back() -> None:
    """COLLECT retracts, and so does LISTAGG."""
    t = pa.table({"k": pa.array([1, 2, 1, None, 1, 2], pa.int64())})
    rows = run_select("SELECT n, COLLECT(k) AS ks FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) GROUP BY n",
                      row_group_size=2, t=t).to_pylist()
    assert sorted((r["n"], sorted(r["ks"])) for r in rows) == [(1, []), (2, [(2, 1)]), (3, [(1, 1)])]
    rows = run_select("SELECT n, LISTAGG(CAST(k AS STRING)) AS ks FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) "
                      "GROUP BY n", row_group_size=2, t=t).to_pylist()
    assert sorted((r["n"], r["ks"]) for r in rows) == [(1, None), (2, "2"), (3, "1")]


# ---------------------------------------------------------------- JSON_OBJECTAGG and JSON_ARRAYAGG

# Each aggregate against DuckDB's json_group_array / json_group_object over the same rows. Results
# are compared as parsed JSON: an object as its members (clink orders them by key, DuckDB by
# arrival), an array in order where the rows arrive in the file's order (one source subtask) and
# as a multiset where several source subtasks interleave them. DuckDB keeps NULLs (NULL ON NULL);
# ABSENT ON NULL is its FILTER on the value. The keys are ids, unique per group as Flink demands.
_JSON_AGGREGATES = ("JSON_ARRAYAGG(s), JSON_ARRAYAGG(i NULL ON NULL), JSON_ARRAYAGG(d) FILTER (WHERE i > 0), "
                    "JSON_OBJECTAGG(KEY CAST(id AS STRING) VALUE s), "
                    "JSON_OBJECTAGG(CAST(id AS STRING) VALUE JSON_OBJECT('b' VALUE b, 'f' VALUE flag) ABSENT ON NULL)")
_DUCK_JSON_AGGREGATES = (
    "json_array_of(list(s ORDER BY id) FILTER (WHERE s IS NOT NULL)), json_array_of(list(i ORDER BY id)), "
    "json_array_of(list(d ORDER BY id) FILTER (WHERE i > 0 AND d IS NOT NULL)), "
    "json_group_object(CAST(id AS VARCHAR), s), json_group_object(CAST(id AS VARCHAR), json_object('b', b, 'f', flag))")


def _duckdb_json_rows(sql: str, table: pa.Table) -> Counter:
    # DuckDB's json_group_array is a macro, which takes no ORDER BY or FILTER: its list, written as
    # JSON ('[]' where the FILTER leaves no row, as for clink's group whose rows are all left out).
    return duckdb_rows("CREATE OR REPLACE TEMP MACRO json_array_of(l) AS COALESCE(CAST(to_json(l) AS VARCHAR), '[]'); "
                       + sql, table)


def _parsed(row: tuple, ordered: bool) -> tuple:
    """A row whose JSON texts are parsed: objects as sorted members, arrays in order or sorted."""
    def value(v: Any) -> Any:
        if not isinstance(v, str) or v[:1] not in "[{":
            return v
        doc = json.loads(v)
        if isinstance(doc, dict):
            return tuple(sorted((k, json.dumps(normalize(x), sort_keys=True)) for k, x in doc.items()))
        items = [json.dumps(normalize(x), sort_keys=True) for x in doc]
        return tuple(items if ordered else sorted(items))

    return tuple(value(v) for v in row)


def test_json_aggregates_in_a_group_by_match_duckdb(table: pa.Table, path: str) -> None:
    ours = run_select(f"SELECT j, {_JSON_AGGREGATES}, COUNT(*) FROM t GROUP BY j", row_group_size=BATCH_ROWS, t=table)
    theirs = _duckdb_json_rows(f"SELECT j, {_DUCK_JSON_AGGREGATES}, count(*) FROM t GROUP BY j", table)
    ordered = path == "local:1"
    got = Counter(_parsed(tuple(r.values()), ordered) for r in ours.to_pylist())
    want = Counter(_parsed(r, ordered) for r in theirs.elements())
    assert got == want, describe(got, want)


def test_json_aggregates_over_windows_match_duckdb(table: pa.Table, path: str) -> None:
    ours = run_select(f"SELECT j, window_start, {_JSON_AGGREGATES} {_DAILY}", row_group_size=BATCH_ROWS,
                      watermarks=_EVERY_ROW, t=table)
    theirs = _duckdb_json_rows(f"SELECT j, date_trunc('day', ts), {_DUCK_JSON_AGGREGATES} FROM t WHERE ts IS NOT NULL "
                         "GROUP BY j, date_trunc('day', ts)", table)
    ordered = path == "local:1"
    got = Counter(_parsed(tuple(normalize(v) for v in r.values()), ordered) for r in ours.to_pylist())
    want = Counter(_parsed(r, ordered) for r in theirs.elements())
    assert got == want, describe(got, want)


def test_json_aggregates_over_an_updating_input_take_rows_back(table: pa.Table) -> None:
    """Over a GROUP BY's changelog: each revised count leaves its old group (a retraction takes
    its item, or its member, out) and joins its new one."""
    inner = "SELECT j, COUNT(*) AS c FROM t GROUP BY j"
    ours = run_select(f"SELECT c, JSON_ARRAYAGG(j NULL ON NULL), JSON_OBJECTAGG(KEY COALESCE(CAST(j AS STRING), "
                      f"'none') VALUE j) FROM ({inner}) AS q GROUP BY c", row_group_size=BATCH_ROWS, t=table)
    theirs = duckdb_rows(f"SELECT c, json_group_array(j), json_group_object(COALESCE(CAST(j AS VARCHAR), 'none'), j) "
                         f"FROM ({inner}) AS q GROUP BY c", table)
    got = Counter(_parsed(tuple(r.values()), False) for r in ours.to_pylist())
    want = Counter(_parsed(r, False) for r in theirs.elements())
    assert len(want) > 3 and got == want, describe(got, want)
