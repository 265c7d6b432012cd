"""Flink's built-in functions, one entry each, and what clink does with them.

``ENTRIES`` follows Flink's ``docs/data/sql_functions.yml`` (its SQL forms; the Table API forms
have no SQL spelling and are left out), category by category. Each entry says whether clink
supports the construct and, where it does not, why and what to write instead. Two things are
made from this one table, so they cannot drift apart:

- the function reference in ``docs/sql.md`` (between the ``catalogue`` markers), written by
  ``python -m clink.compiler.catalogue --write docs/sql.md`` and checked by a test;
- the error for a call of a Flink function clink does not support (``unsupported``), which names
  the function and says what to write instead, rather than "unknown function".

>>> unsupported("UUID").instead
'MD5(CAST(key AS STRING))'
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs

#: Flink's categories, in the order of its documentation, with their headings.
CATEGORIES = {
    "comparison": "Comparison",
    "logical": "Logical",
    "arithmetic": "Arithmetic",
    "string": "String",
    "temporal": "Temporal",
    "conditional": "Conditional",
    "conversion": "Type conversion",
    "collection": "Collections",
    "json": "JSON",
    "valueconstruction": "Value construction",
    "valueaccess": "Value access",
    "grouping": "Grouping",
    "hashfunctions": "Hash functions",
    "aggregate": "Aggregate and window functions",
    "catalog": "Catalog",
}


@attrs.frozen
class Entry:
    """One construct of Flink's function catalogue.

    ``names``: the function names a call is looked up by (empty for operators and syntax).
    ``note``: for a supported construct, its result and the rules a user needs; otherwise why
    clink does not support it. ``instead``: what to write instead, where there is something.
    """

    category: str
    sql: str
    supported: bool
    note: str
    names: tuple[str, ...] = ()
    instead: str | None = None


def yes(category: str, sql: str, note: str, *names: str) -> Entry:
    return Entry(category, sql, True, note, names)


def no(category: str, sql: str, reason: str, *names: str, instead: str | None = None) -> Entry:
    return Entry(category, sql, False, reason, names, instead)


_PROCESSING_TIME = "processing time, read once per batch; never moved by the optimizer"

ENTRIES: tuple[Entry, ...] = (
    # ---------------------------------------------------------------- comparison
    yes("comparison", "value1 = value2, <>, !=, >, >=, <, <=",
        "BOOLEAN; NULL when a side is NULL. Both sides are brought to a common type; comparing a STRING "
        "with a number is an error (CAST one side)"),
    yes("comparison", "value IS [NOT] NULL", "BOOLEAN, never NULL"),
    no("comparison", "value1 IS [NOT] DISTINCT FROM value2", "not implemented yet",
       instead="COALESCE(a = b, a IS NULL AND b IS NULL)"),
    yes("comparison", "value1 [NOT] BETWEEN value2 AND value3",
        "`x >= a AND x <= b` (with NOT around it); ASYMMETRIC and SYMMETRIC are not accepted"),
    yes("comparison", "string1 [NOT] LIKE string2 [ESCAPE char]",
        "`%` any run, `_` one character; the pattern must be a constant"),
    no("comparison", "string1 [NOT] SIMILAR TO string2 [ESCAPE char]",
       "SQL regular expressions are not implemented", instead="REGEXP(s, '^(...)$')"),
    yes("comparison", "value1 [NOT] IN (value2 [, value3]*)",
        "TRUE if some item equals value1; otherwise NULL if value1 or an item is NULL (`1 NOT IN (2, NULL)` "
        "is NULL); otherwise FALSE"),
    yes("comparison", "EXISTS (sub-query)", "rewritten into a join (see [Queries](#queries))"),
    yes("comparison", "value [NOT] IN (sub-query)", "rewritten into a join, with SQL's NULL rules"),
    # ---------------------------------------------------------------- logical
    yes("logical", "boolean1 OR boolean2, boolean1 AND boolean2, NOT boolean",
        "three-valued: `FALSE AND NULL` is FALSE, `TRUE OR NULL` is TRUE, otherwise NULL propagates"),
    yes("logical", "boolean IS [NOT] TRUE, boolean IS [NOT] FALSE", "BOOLEAN, never NULL"),
    no("logical", "boolean IS [NOT] UNKNOWN", "not implemented yet", instead="boolean IS [NOT] NULL"),
    # ---------------------------------------------------------------- arithmetic
    yes("arithmetic", "+ numeric, - numeric", "same type"),
    yes("arithmetic", "numeric1 + numeric2, -, *, /, %",
        "the wider type; integer `/` truncates toward zero; `/` and `%` by zero give NULL; integer "
        "overflow fails the pipeline; DECIMAL is exact (see [Operators and NULL](#operators-and-null))"),
    yes("arithmetic", "POWER(numeric1, numeric2)", "DOUBLE", "POWER"),
    yes("arithmetic", "ABS(numeric)", "same type as the argument", "ABS"),
    yes("arithmetic", "SQRT(numeric)", "DOUBLE (NaN for a negative number)", "SQRT"),
    no("arithmetic", "LN(numeric)", "not implemented yet", "LN"),
    no("arithmetic", "LOG10(numeric)", "not implemented yet", "LOG10"),
    no("arithmetic", "LOG2(numeric)", "not implemented yet", "LOG2"),
    no("arithmetic", "LOG(numeric2), LOG(numeric1, numeric2)", "not implemented yet", "LOG"),
    no("arithmetic", "EXP(numeric)", "not implemented yet", "EXP"),
    yes("arithmetic", "CEIL(numeric), CEILING(numeric)", "same type as the argument", "CEIL", "CEILING"),
    yes("arithmetic", "FLOOR(numeric)", "same type as the argument", "FLOOR"),
    no("arithmetic", "SIN(numeric)", "not implemented yet", "SIN"),
    no("arithmetic", "SINH(numeric)", "not implemented yet", "SINH"),
    no("arithmetic", "COS(numeric)", "not implemented yet", "COS"),
    no("arithmetic", "TAN(numeric)", "not implemented yet", "TAN"),
    no("arithmetic", "TANH(numeric)", "not implemented yet", "TANH"),
    no("arithmetic", "COT(numeric)", "not implemented yet", "COT"),
    no("arithmetic", "ASIN(numeric)", "not implemented yet", "ASIN"),
    no("arithmetic", "ACOS(numeric)", "not implemented yet", "ACOS"),
    no("arithmetic", "ATAN(numeric)", "not implemented yet", "ATAN"),
    no("arithmetic", "ATAN2(numeric1, numeric2)", "not implemented yet", "ATAN2"),
    no("arithmetic", "COSH(numeric)", "not implemented yet", "COSH"),
    no("arithmetic", "DEGREES(numeric)", "not implemented yet", "DEGREES"),
    no("arithmetic", "RADIANS(numeric)", "not implemented yet", "RADIANS"),
    no("arithmetic", "SIGN(numeric)", "not implemented yet", "SIGN"),
    yes("arithmetic", "ROUND(numeric [, int])",
        "rounded to `int` decimals (default 0, negative rounds left of the point), halves away from zero; "
        "same type. A DOUBLE is judged by the shortest decimal that prints it, as in Flink: `ROUND(1.005, 2)` "
        "is 1.01 although 1.005 is stored a little below the half", "ROUND"),
    yes("arithmetic", "MOD(numeric1, numeric2)", "as `numeric1 % numeric2`", "MOD"),
    no("arithmetic", "PI()", "not implemented yet", "PI"),
    no("arithmetic", "E()", "not implemented yet", "E"),
    no("arithmetic", "RAND(), RAND(int)",
       "a random number would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "RAND", instead="a value derived from a key column, such as MD5(CAST(id AS STRING))"),
    no("arithmetic", "RAND_INTEGER(int), RAND_INTEGER(int1, int2)",
       "a random number would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "RAND_INTEGER", instead="ABS(id * 2654435761) % n over a key column"),
    no("arithmetic", "UUID()",
       "a random identifier would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "UUID", instead="MD5(CAST(key AS STRING))"),
    no("arithmetic", "BIN(int)", "not implemented yet", "BIN"),
    no("arithmetic", "HEX(numeric), HEX(string)", "not implemented yet", "HEX"),
    no("arithmetic", "TRUNCATE(numeric [, int])", "not implemented yet", "TRUNCATE"),
    # ---------------------------------------------------------------- string
    yes("string", "string1 || string2", "STRING; NULL if a side is NULL"),
    yes("string", "CHAR_LENGTH(string), CHARACTER_LENGTH(string)", "INT: characters (not bytes)",
        "CHAR_LENGTH", "CHARACTER_LENGTH"),
    yes("string", "UPPER(string), LOWER(string)", "STRING", "UPPER", "LOWER"),
    no("string", "POSITION(string1 IN string2)", "not implemented yet", instead="INSTR(string2, string1)"),
    yes("string", "TRIM(string)",
        "`string` without leading and trailing spaces; the forms `TRIM([BOTH | LEADING | TRAILING] "
        "chars FROM string)` are not accepted (write LTRIM / RTRIM)", "TRIM"),
    yes("string", "LTRIM(string), RTRIM(string)", "without leading / trailing spaces", "LTRIM", "RTRIM"),
    no("string", "REPEAT(string, int)", "not implemented yet", "REPEAT"),
    no("string", "REGEXP_REPLACE(string1, string2, string3)", "not implemented yet", "REGEXP_REPLACE"),
    no("string", "OVERLAY(string1 PLACING string2 FROM int1 [FOR int2])",
       "the PLACING syntax is not implemented",
       instead="CONCAT(SUBSTRING(s, 1, int1 - 1), string2, SUBSTRING(s, int1 + int2))"),
    yes("string", "SUBSTRING(string, int1 [, int2]), SUBSTR(string, int1 [, int2])",
        "1-based, constant positions, as Flink reads them: a start of 0 is the first character; a negative "
        "start counts from the end (`SUBSTRING('hello', -3, 2)` is `'ll'`); a start outside the string gives "
        "`''`. The form `SUBSTRING(s FROM i FOR n)` is not accepted", "SUBSTRING", "SUBSTR"),
    yes("string", "REPLACE(string1, string2, string3)",
        "every `string2` replaced; constant `string2` and `string3`; an empty `string2` leaves `string1` as it "
        "is", "REPLACE"),
    yes("string", "REGEXP_EXTRACT(string1, string2 [, int])",
        "group `int` of the first match of `string2` in `string1`: 0 (the default) is the whole match; NULL "
        "when nothing matches or there is no such group. Constant pattern and index; the pattern is RE2 "
        "syntax, checked at compile time (no lookarounds or backreferences). A group that takes no part in "
        "the match (`(a)\\|(b)` on `'b'`, group 1) gives `''`", "REGEXP_EXTRACT"),
    no("string", "INITCAP(string)", "not implemented yet", "INITCAP"),
    yes("string", "CONCAT(string1, string2, ...)", "joined strings; NULL if any argument is NULL", "CONCAT"),
    no("string", "CONCAT_WS(string1, string2, string3, ...)", "not implemented yet", "CONCAT_WS"),
    no("string", "LPAD(string1, int, string2)", "not implemented yet", "LPAD"),
    no("string", "RPAD(string1, int, string2)", "not implemented yet", "RPAD"),
    no("string", "FROM_BASE64(string)", "not implemented yet", "FROM_BASE64"),
    no("string", "TO_BASE64(string)", "not implemented yet", "TO_BASE64"),
    no("string", "ASCII(string)", "not implemented yet", "ASCII"),
    no("string", "CHR(int)", "not implemented yet", "CHR"),
    no("string", "DECODE(binary, string)", "not implemented", "DECODE",
       instead="CAST(binary AS STRING), which reads UTF-8"),
    no("string", "ENCODE(string1, string2)", "not implemented", "ENCODE",
       instead="CAST(string AS BYTES), which writes UTF-8"),
    no("string", "INSTR(string1, string2)", "not implemented yet", "INSTR"),
    no("string", "LEFT(string, int)", "not implemented yet", "LEFT"),
    no("string", "RIGHT(string, int)", "not implemented yet", "RIGHT"),
    no("string", "LOCATE(string1, string2 [, int])", "not implemented yet", "LOCATE"),
    no("string", "PARSE_URL(string1, string2 [, string3])", "not implemented", "PARSE_URL",
       instead="REGEXP_EXTRACT, e.g. REGEXP_EXTRACT(url, '^[a-z]+://([^/:?#]+)', 1) for the host"),
    no("string", "REGEXP(string1, string2)", "not implemented yet", "REGEXP"),
    no("string", "REVERSE(string)", "not implemented yet", "REVERSE"),
    yes("string", "SPLIT_INDEX(string1, string2, int)",
        "the piece at 0-based `int` of `string1` split on `string2`; NULL if there is none (an empty string "
        "has none, a negative index never matches); a separator at either end gives an empty first or last "
        "piece; constant separator and index", "SPLIT_INDEX"),
    no("string", "STR_TO_MAP(string1 [, string2, string3])", "not implemented", "STR_TO_MAP",
       instead="SPLIT_INDEX to take pieces of the string"),
    # ---------------------------------------------------------------- temporal
    yes("temporal", "DATE string, TIME string, TIMESTAMP string",
        "literals: `DATE '2024-01-31'`, `TIME '12:30:00'`, `TIMESTAMP '2024-01-31 12:30:00.250'`"),
    yes("temporal", "INTERVAL string range",
        "`INTERVAL '5' SECOND`, `INTERVAL '1:30' HOUR TO MINUTE`, `INTERVAL '2-10' YEAR TO MONTH` (see "
        "[Literals](#literals))"),
    no("temporal", "LOCALTIME", "not implemented", instead="CAST(LOCALTIMESTAMP AS TIME)"),
    yes("temporal", "LOCALTIMESTAMP", f"TIMESTAMP(3): the wall clock of the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_TIME", f"TIME(3): the time of day in the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_DATE", f"DATE: today in the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_TIMESTAMP", f"TIMESTAMP_LTZ(3): {_PROCESSING_TIME}"),
    yes("temporal", "NOW()", "as CURRENT_TIMESTAMP", "NOW"),
    no("temporal", "CURRENT_ROW_TIMESTAMP()", "not implemented yet", "CURRENT_ROW_TIMESTAMP",
       instead="PROCTIME() or CURRENT_TIMESTAMP"),
    yes("temporal", "EXTRACT(timeintervalunit FROM temporal)",
        "BIGINT; units YEAR QUARTER MONTH WEEK (ISO) DAY HOUR MINUTE SECOND MILLISECOND, DAYOFWEEK "
        "(Sunday = 1), DAYOFYEAR"),
    yes("temporal", "YEAR(date), QUARTER(date), MONTH(date), WEEK(date), DAYOFYEAR(date), DAYOFMONTH(date), "
        "DAYOFWEEK(date)", "as EXTRACT", "YEAR", "QUARTER", "MONTH", "WEEK", "DAYOFYEAR", "DAYOFMONTH",
        "DAYOFWEEK"),
    yes("temporal", "HOUR(timestamp), MINUTE(timestamp), SECOND(timestamp)", "as EXTRACT", "HOUR", "MINUTE",
        "SECOND"),
    no("temporal", "FLOOR(timepoint TO timeintervalunit)", "not implemented yet",
       instead="a TUMBLE window, or DATE_FORMAT to the unit"),
    no("temporal", "CEIL(timepoint TO timeintervalunit)", "not implemented yet"),
    no("temporal", "(timepoint1, temporal1) OVERLAPS (timepoint2, temporal2)", "the OVERLAPS syntax is not "
       "implemented", instead="start1 <= end2 AND start2 <= end1"),
    yes("temporal", "DATE_FORMAT(timestamp, string)",
        "STRING; Java pattern letters yyyy yy MM MMM dd HH hh mm ss SSS (SSS only at the end) a EEE D, text "
        "in '...'", "DATE_FORMAT"),
    no("temporal", "TIMESTAMPADD(timeintervalunit, interval, timepoint)", "not implemented yet",
       "TIMESTAMPADD", instead="timepoint + INTERVAL 'n' unit"),
    no("temporal", "TIMESTAMPDIFF(timepointunit, timepoint1, timepoint2)", "not implemented yet",
       "TIMESTAMPDIFF"),
    yes("temporal", "CONVERT_TZ(string1, string2, string3)",
        "STRING `yyyy-MM-dd HH:mm:ss`: the wall clock `string1` in zone `string2` as shown in `string3` "
        "(`CONVERT_TZ('1970-01-01 00:00:00', 'UTC', 'America/Los_Angeles')` is `'1969-12-31 16:00:00'`); "
        "constant zones, written as for `table.local-time-zone`", "CONVERT_TZ"),
    no("temporal", "FROM_UNIXTIME(numeric [, string])", "not implemented yet", "FROM_UNIXTIME"),
    no("temporal", "UNIX_TIMESTAMP()", "not implemented yet", instead="CAST(CURRENT_TIMESTAMP AS BIGINT)"),
    no("temporal", "UNIX_TIMESTAMP(string1 [, string2])", "not implemented yet", "UNIX_TIMESTAMP"),
    no("temporal", "TO_DATE(string1 [, string2])", "not implemented yet", "TO_DATE",
       instead="CAST(string AS DATE)"),
    yes("temporal", "TO_TIMESTAMP_LTZ(numeric, precision)",
        "TIMESTAMP_LTZ(3): epoch seconds (precision 0) or milliseconds (3, the default); a fraction of a "
        "millisecond is dropped. Any other precision is an error", "TO_TIMESTAMP_LTZ"),
    no("temporal", "TO_TIMESTAMP(string1 [, string2])", "not implemented yet", "TO_TIMESTAMP",
       instead="CAST(string AS TIMESTAMP(3))"),
    no("temporal", "CURRENT_WATERMARK(rowtime)", "an operator's watermark is not visible to expressions",
       "CURRENT_WATERMARK", instead="a WATERMARK declaration with the lateness you accept; late rows are "
       "dropped by the window operators"),
    # ---------------------------------------------------------------- conditional
    yes("conditional", "CASE value WHEN value1 [, value2]* THEN result ... [ELSE result] END",
        "compares `value = valueX`; all results are brought to one type; without ELSE NULL"),
    yes("conditional", "CASE WHEN condition THEN result ... [ELSE result] END",
        "the first TRUE condition wins (a NULL condition is not TRUE)"),
    yes("conditional", "NULLIF(value1, value2)", "NULL if `value1 = value2`, else `value1`", "NULLIF"),
    yes("conditional", "COALESCE(value1 [, value2]*)", "the first non-NULL argument (NULL only if all are)",
        "COALESCE"),
    yes("conditional", "IF(condition, true_value, false_value)",
        "`true_value` when the condition is TRUE, else `false_value` (a NULL condition picks `false_value`)",
        "IF"),
    no("conditional", "IFNULL(input, null_replacement)", "not implemented yet", "IFNULL",
       instead="COALESCE(input, null_replacement)"),
    no("conditional", "IS_ALPHA(string)", "not implemented yet", "IS_ALPHA"),
    no("conditional", "IS_DECIMAL(string)", "not implemented yet", "IS_DECIMAL"),
    no("conditional", "IS_DIGIT(string)", "not implemented yet", "IS_DIGIT"),
    no("conditional", "GREATEST(value1 [, value2]*)", "not implemented yet", "GREATEST"),
    no("conditional", "LEAST(value1 [, value2]*)", "not implemented yet", "LEAST"),
    # ---------------------------------------------------------------- conversion
    yes("conversion", "CAST(value AS type)",
        "see [CASE and CAST](#case-and-cast); a value that does not convert fails the pipeline, naming it"),
    yes("conversion", "TRY_CAST(value AS type)", "as CAST, but NULL where CAST would fail"),
    no("conversion", "TYPEOF(input [, force_serializable])", "not implemented yet", "TYPEOF"),
    # ---------------------------------------------------------------- collection
    yes("collection", "CARDINALITY(array), CARDINALITY(map)", "INT: its number of elements", "CARDINALITY"),
    yes("collection", "array '[' int ']'", "element `int`, 1-based; NULL out of range"),
    no("collection", "ELEMENT(array)", "not implemented", "ELEMENT", instead="array[1]"),
    yes("collection", "map '[' value ']'", "the value for the key; NULL if absent; the key must be a constant"),
    no("collection", "ARRAY_CONTAINS(haystack, needle)", "not implemented", "ARRAY_CONTAINS",
       instead="EXISTS over CROSS JOIN UNNEST(haystack)"),
    no("collection", "ARRAY_DISTINCT(haystack)", "not implemented", "ARRAY_DISTINCT"),
    no("collection", "ARRAY_POSITION(haystack, needle)", "not implemented", "ARRAY_POSITION",
       instead="UNNEST(haystack) WITH ORDINALITY"),
    no("collection", "ARRAY_REMOVE(haystack, needle)", "not implemented", "ARRAY_REMOVE"),
    no("collection", "ARRAY_REVERSE(haystack)", "not implemented", "ARRAY_REVERSE"),
    no("collection", "MAP_KEYS(map)", "not implemented yet", "MAP_KEYS"),
    no("collection", "MAP_VALUES(map)", "not implemented yet", "MAP_VALUES"),
    no("collection", "MAP_FROM_ARRAYS(array_of_keys, array_of_values)", "not implemented", "MAP_FROM_ARRAYS",
       instead="MAP[key1, value1, ...]"),
    # ---------------------------------------------------------------- json
    no("json", "string IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]", "not implemented yet"),
    no("json", "JSON_EXISTS(jsonValue, path [{TRUE | FALSE | UNKNOWN | ERROR} ON ERROR])",
       "not implemented yet", "JSON_EXISTS"),
    no("json", "JSON_STRING(value)", "not implemented yet", "JSON_STRING"),
    no("json", "JSON_VALUE(jsonValue, path [RETURNING type] [... ON EMPTY] [... ON ERROR])",
       "not implemented yet", "JSON_VALUE"),
    no("json", "JSON_QUERY(jsonValue, path [... WRAPPER] [... ON EMPTY] [... ON ERROR])",
       "not implemented yet", "JSON_QUERY"),
    no("json", "JSON_OBJECT([[KEY] key VALUE value]* [{NULL | ABSENT} ON NULL])", "not implemented yet",
       "JSON_OBJECT"),
    no("json", "JSON_OBJECTAGG([KEY] key VALUE value [{NULL | ABSENT} ON NULL])",
       "JSON aggregates are not implemented", "JSON_OBJECTAGG"),
    no("json", "JSON_ARRAY([value]* [{NULL | ABSENT} ON NULL])", "not implemented yet", "JSON_ARRAY"),
    no("json", "JSON_ARRAYAGG(items [{NULL | ABSENT} ON NULL])", "JSON aggregates are not implemented",
       "JSON_ARRAYAGG"),
    # ---------------------------------------------------------------- value construction and access
    yes("valueconstruction", "ROW(value1 [, value2]*), (value1, value2 [, ...])",
        "a ROW whose fields are named `EXPR$0`, `EXPR$1`, ... (as Flink names them)", "ROW"),
    yes("valueconstruction", "ARRAY '[' value1 [, value2]* ']'", "items cast to their common type"),
    yes("valueconstruction", "MAP '[' value1, value2 [, value3, value4]* ']'",
        "keys and values each cast to their common type"),
    yes("valueaccess", "tableName.compositeType.field", "the field of a ROW"),
    yes("valueaccess", "tableName.compositeType.*", "every field of a ROW as a column (a select item only)"),
    # ---------------------------------------------------------------- grouping
    no("grouping", "GROUP_ID()", "not implemented", "GROUP_ID", instead="GROUPING_ID(...)"),
    yes("grouping", "GROUPING(expression1 [, expression2]*), GROUPING_ID(expression1 [, expression2]*)",
        "with GROUPING SETS, ROLLUP and CUBE: the bits of the expressions left out of the grouping set, the "
        "first argument highest", "GROUPING", "GROUPING_ID"),
    # ---------------------------------------------------------------- hash functions
    no("hashfunctions", "MD5(string)", "not implemented yet", "MD5"),
    no("hashfunctions", "SHA1(string)", "not implemented yet", "SHA1"),
    no("hashfunctions", "SHA224(string)", "not implemented yet", "SHA224"),
    no("hashfunctions", "SHA256(string)", "not implemented yet", "SHA256"),
    no("hashfunctions", "SHA384(string)", "not implemented yet", "SHA384"),
    no("hashfunctions", "SHA512(string)", "not implemented yet", "SHA512"),
    no("hashfunctions", "SHA2(string, hashLength)", "not implemented yet", "SHA2"),
    # ---------------------------------------------------------------- aggregate
    yes("aggregate", "COUNT([ALL] expression | DISTINCT expression1 [, expression2]*), COUNT(*), COUNT(1)",
        "BIGINT, never NULL; COUNT(DISTINCT ...) of one expression", "COUNT"),
    yes("aggregate", "AVG([ALL] expression)", "the argument's type (AVG of integers truncates toward zero)",
        "AVG"),
    yes("aggregate", "SUM([ALL] expression)", "the argument's type; DECIMAL(p, s) gives DECIMAL(38, s)", "SUM"),
    yes("aggregate", "MAX([ALL] expression), MIN([ALL] expression)", "the argument's type", "MAX", "MIN"),
    yes("aggregate", "STDDEV_POP(expression), STDDEV_SAMP(expression), VAR_POP(expression), "
        "VAR_SAMP(expression)", "in window aggregations", "STDDEV_POP", "STDDEV_SAMP", "VAR_POP", "VAR_SAMP"),
    no("aggregate", "COLLECT([ALL | DISTINCT] expression)", "not implemented yet", "COLLECT"),
    no("aggregate", "VARIANCE([ALL | DISTINCT] expression)", "not implemented", "VARIANCE",
       instead="VAR_SAMP(expression)"),
    yes("aggregate", "RANK(), DENSE_RANK(), ROW_NUMBER()",
        "OVER (PARTITION BY ... ORDER BY ...) as Top-N or deduplication (see [Top-N](#top-n-and-deduplication-"
        "row_number-rank-dense_rank))", "RANK", "DENSE_RANK", "ROW_NUMBER"),
    no("aggregate", "LEAD(expression [, offset] [, default])", "not implemented", "LEAD"),
    no("aggregate", "LAG(expression [, offset] [, default])", "not implemented", "LAG"),
    yes("aggregate", "FIRST_VALUE(expression), LAST_VALUE(expression)", "in window aggregations",
        "FIRST_VALUE", "LAST_VALUE"),
    no("aggregate", "LISTAGG(expression [, separator])", "not implemented yet", "LISTAGG"),
    no("aggregate", "CUME_DIST()", "not implemented", "CUME_DIST"),
    no("aggregate", "PERCENT_RANK()", "not implemented", "PERCENT_RANK"),
    no("aggregate", "NTILE(n)", "not implemented", "NTILE"),
    # ---------------------------------------------------------------- catalog
    no("catalog", "CURRENT_DATABASE()", "not implemented yet", "CURRENT_DATABASE"),
)


def _by_name() -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for e in ENTRIES:
        for n in e.names:
            out.setdefault(n, e)
    return out


_BY_NAME = _by_name()


def unsupported(name: str) -> Entry | None:
    """The catalogue's entry for a call of ``name`` when it is a Flink function clink does not support."""
    e = _BY_NAME.get(name.upper())
    return e if e is not None and not e.supported else None


def refusal(name: str, entry: Entry) -> tuple[str, str | None]:
    """The message and hint for a call of ``name``, which ``entry`` says clink does not support."""
    hint = f"write {entry.instead} instead" if entry.instead else None
    return f"clink does not support {name}: {entry.note}", hint


START = "<!-- catalogue: generated by `python -m clink.compiler.catalogue --write docs/sql.md`; do not edit -->"
END = "<!-- catalogue: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The function reference of ``docs/sql.md``: one table per Flink category."""
    lines = [START, ""]
    supported = sum(e.supported for e in ENTRIES)
    lines.append(f"Of the {len(ENTRIES)} SQL constructs of Flink's function reference, clink supports "
                 f"{supported}. Unless noted, a function returns NULL when any argument is NULL. Calling one "
                 "that clink does not support is an error at the call that says what to write instead.")
    for key, heading in CATEGORIES.items():
        entries = [e for e in ENTRIES if e.category == key]
        if not entries:
            continue
        lines += ["", f"### {heading}", "", "| Flink SQL | clink |", "| --- | --- |"]
        for e in entries:
            if e.supported:
                what = e.note
            else:
                what = f"**not supported**: {e.note}" + (f"; write `{e.instead}` instead" if e.instead else "")
            lines.append(f"| `{_cell(e.sql)}` | {_cell(what)} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def rewrite(doc: str) -> str:
    """``doc`` with the text between the catalogue markers replaced by ``markdown()``."""
    head, start, rest = doc.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError("the document has no catalogue markers")
    return head + markdown().rstrip("\n") + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clink.compiler.catalogue",
                                     description="Print clink's function reference (from Flink's catalogue).")
    parser.add_argument("--write", metavar="MARKDOWN", type=Path,
                        help="replace the catalogue section of this file (docs/sql.md) instead of printing")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(markdown())
        return 0
    args.write.write_text(rewrite(args.write.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
