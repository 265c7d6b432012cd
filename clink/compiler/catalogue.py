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

from clink import records

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


@records.record
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


#: Why the ranking functions that need a whole partition are not here.
_BATCH_ONLY = ("Flink computes it only in batch mode (execution.runtime-mode = batch), over a partition's "
               "every row; clink runs every pipeline as a stream, where a partition is never complete")
_PROCESSING_TIME = "processing time, read once per batch; never moved by the optimizer"

ENTRIES: tuple[Entry, ...] = (
    # ---------------------------------------------------------------- comparison
    yes("comparison", "value1 = value2, <>, !=, >, >=, <, <=",
        "BOOLEAN; NULL when a side is NULL. Both sides are brought to a common type; comparing a STRING "
        "with a number is an error (CAST one side)"),
    yes("comparison", "value IS [NOT] NULL", "BOOLEAN, never NULL"),
    yes("comparison", "value1 IS [NOT] DISTINCT FROM value2",
        "BOOLEAN, never NULL: `<>` (`=`) where NULL equals NULL and differs from any value"),
    yes("comparison", "value1 [NOT] BETWEEN [ASYMMETRIC | SYMMETRIC] value2 AND value3",
        "`x >= a AND x <= b` (with NOT around it; ASYMMETRIC is the default); SYMMETRIC is "
        "`(x >= a AND x <= b) OR (x >= b AND x <= a)`, so `12 BETWEEN SYMMETRIC 15 AND 12` is TRUE and "
        "`12 BETWEEN SYMMETRIC NULL AND 12` is NULL"),
    yes("comparison", "string1 [NOT] LIKE string2 [ESCAPE char]",
        "`%` any run, `_` one character; the pattern must be a constant"),
    yes("comparison", "string1 [NOT] SIMILAR TO string2 [ESCAPE char]",
        "BOOLEAN: whether all of `string1` matches the SQL regular expression `string2` (a constant): `%` any "
        "run, `_` one character, `|` `*` `+` `?` `{m,n}` `( )` `[...]` (with `[:ALPHA:]`, `[:DIGIT:]`, ...); "
        "as in Flink, `.` is any character. The ESCAPE character makes the next special character literal"),
    yes("comparison", "value1 [NOT] IN (value2 [, value3]*)",
        "TRUE if some item equals value1; otherwise NULL if value1 or an item is NULL (`1 NOT IN (2, NULL)` "
        "is NULL); otherwise FALSE"),
    yes("comparison", "EXISTS (sub-query)", "rewritten into a join (see [Queries](#queries))"),
    yes("comparison", "value [NOT] IN (sub-query)", "rewritten into a join, with SQL's NULL rules"),
    # ---------------------------------------------------------------- logical
    yes("logical", "boolean1 OR boolean2, boolean1 AND boolean2, NOT boolean",
        "three-valued: `FALSE AND NULL` is FALSE, `TRUE OR NULL` is TRUE, otherwise NULL propagates"),
    yes("logical", "boolean IS [NOT] TRUE, boolean IS [NOT] FALSE", "BOOLEAN, never NULL"),
    yes("logical", "boolean IS [NOT] UNKNOWN", "as `boolean IS [NOT] NULL`; never NULL"),
    # ---------------------------------------------------------------- arithmetic
    yes("arithmetic", "+ numeric, - numeric", "same type"),
    yes("arithmetic", "numeric1 + numeric2, -, *, /, %",
        "the wider type; integer `/` truncates toward zero; `/` and `%` by zero give NULL; integer "
        "overflow fails the pipeline; DECIMAL is exact (see [Operators and NULL](#operators-and-null))"),
    yes("arithmetic", "POWER(numeric1, numeric2)", "DOUBLE", "POWER"),
    yes("arithmetic", "ABS(numeric)", "same type as the argument", "ABS"),
    yes("arithmetic", "SQRT(numeric)", "DOUBLE (NaN for a negative number)", "SQRT"),
    yes("arithmetic", "LN(numeric)",
        "DOUBLE (Java's Math: NaN outside the domain, -Infinity for LN(0))", "LN"),
    yes("arithmetic", "LOG10(numeric)",
        "DOUBLE (Java's Math: NaN outside the domain, -Infinity for LN(0))", "LOG10"),
    yes("arithmetic", "LOG2(numeric)",
        "DOUBLE (Java's Math: NaN outside the domain, -Infinity for LN(0))", "LOG2"),
    yes("arithmetic", "LOG(numeric2), LOG(numeric1, numeric2)",
        "DOUBLE; LOG(x) is LN(x); a base of 1 or less fails the pipeline, as in Flink", "LOG"),
    yes("arithmetic", "EXP(numeric)", 'DOUBLE', "EXP"),
    yes("arithmetic", "CEIL(numeric), CEILING(numeric)", "same type as the argument", "CEIL", "CEILING"),
    yes("arithmetic", "FLOOR(numeric)", "same type as the argument", "FLOOR"),
    yes("arithmetic", "SIN(numeric)", 'DOUBLE', "SIN"),
    yes("arithmetic", "SINH(numeric)", 'DOUBLE', "SINH"),
    yes("arithmetic", "COS(numeric)", 'DOUBLE', "COS"),
    yes("arithmetic", "TAN(numeric)", 'DOUBLE', "TAN"),
    yes("arithmetic", "TANH(numeric)", 'DOUBLE', "TANH"),
    yes("arithmetic", "COT(numeric)", 'DOUBLE', "COT"),
    yes("arithmetic", "ASIN(numeric)", 'DOUBLE', "ASIN"),
    yes("arithmetic", "ACOS(numeric)", 'DOUBLE', "ACOS"),
    yes("arithmetic", "ATAN(numeric)", 'DOUBLE', "ATAN"),
    yes("arithmetic", "ATAN2(numeric1, numeric2)", 'DOUBLE', "ATAN2"),
    yes("arithmetic", "COSH(numeric)", 'DOUBLE', "COSH"),
    yes("arithmetic", "DEGREES(numeric)", 'DOUBLE', "DEGREES"),
    yes("arithmetic", "RADIANS(numeric)", 'DOUBLE', "RADIANS"),
    yes("arithmetic", "SIGN(numeric)", "-1, 0 or 1 in the argument's type", "SIGN"),
    yes("arithmetic", "ROUND(numeric [, int])",
        "rounded to `int` decimals (default 0, negative rounds left of the point), halves away from zero; "
        "same type. A DOUBLE is judged by the shortest decimal that prints it, as in Flink: `ROUND(1.005, 2)` "
        "is 1.01 although 1.005 is stored a little below the half", "ROUND"),
    yes("arithmetic", "MOD(numeric1, numeric2)", "as `numeric1 % numeric2`", "MOD"),
    yes("arithmetic", "PI()", 'DOUBLE', "PI"),
    yes("arithmetic", "E()", 'DOUBLE', "E"),
    no("arithmetic", "RAND(), RAND(int)",
       "a random number would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "RAND", instead="a value derived from a key column, such as MD5(CAST(id AS STRING))"),
    no("arithmetic", "RAND_INTEGER(int), RAND_INTEGER(int1, int2)",
       "a random number would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "RAND_INTEGER", instead="ABS(id * 2654435761) % n over a key column"),
    no("arithmetic", "UUID()",
       "a random identifier would differ when a pipeline is replayed from a checkpoint, which breaks "
       "exactly-once results", "UUID", instead="MD5(CAST(key AS STRING))"),
    yes("arithmetic", "BIN(int)",
        "STRING: the integer in binary (a negative one in 64-bit two's complement, as Java's "
        "Long.toBinaryString)", "BIN"),
    yes("arithmetic", "HEX(numeric), HEX(string)",
        "STRING: an integer in upper-case hexadecimal (negative: 64-bit two's complement), a string's "
        "UTF-8 bytes two digits each", "HEX"),
    yes("arithmetic", "TRUNCATE(numeric [, int])",
        "cut toward zero to `int` decimals (default 0, negative cuts left of the point), same type; a "
        "DOUBLE is cut on the shortest decimal that prints it (`TRUNCATE(1.15, 2)` is 1.15); constant "
        "`int`", "TRUNCATE"),
    # ---------------------------------------------------------------- string
    yes("string", "string1 || string2", "STRING; NULL if a side is NULL"),
    yes("string", "CHAR_LENGTH(string), CHARACTER_LENGTH(string)", "INT: characters (not bytes)",
        "CHAR_LENGTH", "CHARACTER_LENGTH"),
    yes("string", "UPPER(string), LOWER(string)", "STRING", "UPPER", "LOWER"),
    yes("string", "POSITION(string1 IN string2)", "as LOCATE(string1, string2)", "POSITION"),
    yes("string", "TRIM(string), TRIM([BOTH | LEADING | TRAILING] [string1] FROM string2)",
        "`string` without leading and trailing spaces; the FROM form removes the characters of the "
        "constant `string1` (a space when left out) from both ends, the start or the end", "TRIM"),
    yes("string", "LTRIM(string), RTRIM(string)", "without leading / trailing spaces", "LTRIM", "RTRIM"),
    yes("string", "REPEAT(string, int)", "STRING: `string` `int` times; '' for 0 or less", "REPEAT"),
    yes("string", "REGEXP_REPLACE(string1, string2, string3)",
        "every match of the regex replaced; `$1` in the replacement is a group. Constant regex and "
        "replacement, RE2 syntax checked at compile time", "REGEXP_REPLACE"),
    yes("string", "OVERLAY(string1 PLACING string2 FROM int1 [FOR int2])",
        "`string1` with its `int2` characters from the `int1`-th (as many as a constant `string2` has, "
        "when FOR is left out) replaced by `string2`; constant positions", "OVERLAY"),
    yes("string", "SUBSTRING(string, int1 [, int2]), SUBSTR(string, int1 [, int2])",
        "1-based, constant positions, as Flink reads them: a start of 0 is the first character; a negative "
        "start counts from the end (`SUBSTRING('hello', -3, 2)` is `'ll'`); a start outside the string gives "
        "`''`; also written `SUBSTRING(s FROM i [FOR n])`", "SUBSTRING", "SUBSTR"),
    yes("string", "REPLACE(string1, string2, string3)",
        "every `string2` replaced; constant `string2` and `string3`; an empty `string2` leaves `string1` as it "
        "is", "REPLACE"),
    yes("string", "REGEXP_EXTRACT(string1, string2 [, int])",
        "group `int` of the first match of `string2` in `string1`: 0 (the default) is the whole match; NULL "
        "when nothing matches or there is no such group. Constant pattern and index; the pattern is RE2 "
        "syntax, checked at compile time (no lookarounds or backreferences). A group that takes no part in "
        "the match (`(a)\\|(b)` on `'b'`, group 1) gives `''`", "REGEXP_EXTRACT"),
    yes("string", "INITCAP(string)",
        "each word's first character upper case, the rest lower case; a word is a run of ASCII letters "
        "and digits, as in Flink", "INITCAP"),
    yes("string", "CONCAT(string1, string2, ...)", "joined strings; NULL if any argument is NULL", "CONCAT"),
    yes("string", "CONCAT_WS(string1, string2, string3, ...)",
        "the non-NULL strings joined by `string1`; NULL only if `string1` is ('' if all the others are)",
        "CONCAT_WS"),
    yes("string", "LPAD(string1, int, string2)",
        "STRING: `string1` after repeats of `string2` up to `int` characters, or cut to `int`; NULL for a"
        " negative length or an empty `string2`; constant length and padding. Lengths count code points "
        "(Java counts a character outside the BMP as two)", "LPAD"),
    yes("string", "RPAD(string1, int, string2)", 'as LPAD, padded on the right', "RPAD"),
    yes("string", "FROM_BASE64(string)",
        "STRING: the decoded bytes read as UTF-8; text that is not base64 fails the pipeline, naming it",
        "FROM_BASE64"),
    yes("string", "TO_BASE64(string)", 'STRING: the base64 of the UTF-8 bytes', "TO_BASE64"),
    yes("string", "ASCII(string)", "INT: the code of the first character (0 for '')", "ASCII"),
    yes("string", "CHR(int)",
        "STRING: the Latin-1 character of `int` modulo 256 (`CHR(353)` is 'a'); '' for a negative number",
        "CHR"),
    yes("string", "DECODE(binary, string)", "STRING: the bytes read in the character set `string`, a constant: "
        "'US-ASCII', 'ISO-8859-1', 'UTF-8', 'UTF-16BE', 'UTF-16LE' or 'UTF-16'", "DECODE"),
    yes("string", "ENCODE(string1, string2)", "BYTES: `string1` written in the character set `string2` (as "
        "DECODE's)", "ENCODE"),
    yes("string", "INSTR(string1, string2)",
        "INT: the 1-based character position of the first `string2` in `string1`, 0 if none; constant "
        "`string2`", "INSTR"),
    yes("string", "LEFT(string, int)",
        "the first `int` characters; '' for a negative `int`; constant `int`", "LEFT"),
    yes("string", "RIGHT(string, int)",
        "the last `int` characters; '' for a negative `int`; constant `int`", "RIGHT"),
    yes("string", "LOCATE(string1, string2 [, int])",
        "INT: the position of `string1` in `string2` at or after character `int` (default 1); 0 if none "
        "or `int` < 1; constant `string1` and `int`", "LOCATE"),
    yes("string", "PARSE_URL(string1, string2 [, string3])",
        "the part `string2` (HOST, PATH, QUERY, REF, PROTOCOL, FILE, AUTHORITY, USERINFO; a constant) of the "
        "URL `string1`, or with `string3` that QUERY parameter's value; NULL where there is none", "PARSE_URL"),
    yes("string", "REGEXP(string1, string2)",
        "BOOLEAN: whether some (maybe empty) part of `string1` matches; constant regex, RE2 syntax",
        "REGEXP"),
    yes("string", "REVERSE(string)", 'the characters in reverse order', "REVERSE"),
    yes("string", "SPLIT_INDEX(string1, string2, int)",
        "the piece at 0-based `int` of `string1` split on `string2`; NULL if there is none (an empty string "
        "has none, a negative index never matches); a separator at either end gives an empty first or last "
        "piece; constant separator and index", "SPLIT_INDEX"),
    yes("string", "STR_TO_MAP(string1 [, string2, string3])",
        "MAP<STRING, STRING>: `string1` split into entries on `string2` and each into key and value on the "
        "first `string3` (constant regular expressions, ',' and '=' by default); an entry without one has a "
        "NULL value; a key given twice keeps its last value", "STR_TO_MAP"),
    # ---------------------------------------------------------------- temporal
    yes("temporal", "DATE string, TIME string, TIMESTAMP string",
        "literals: `DATE '2024-01-31'`, `TIME '12:30:00'`, `TIMESTAMP '2024-01-31 12:30:00.250'`"),
    yes("temporal", "INTERVAL string range",
        "`INTERVAL '5' SECOND`, `INTERVAL '1:30' HOUR TO MINUTE`, `INTERVAL '2-10' YEAR TO MONTH` (see "
        "[Literals](#literals))"),
    yes("temporal", "LOCALTIME", f"TIME(0): the time of day in the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "LOCALTIMESTAMP", f"TIMESTAMP(3): the wall clock of the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_TIME", f"TIME(3): the time of day in the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_DATE", f"DATE: today in the session time zone; {_PROCESSING_TIME}"),
    yes("temporal", "CURRENT_TIMESTAMP", f"TIMESTAMP_LTZ(3): {_PROCESSING_TIME}"),
    yes("temporal", "NOW()", "as CURRENT_TIMESTAMP", "NOW"),
    yes("temporal", "CURRENT_ROW_TIMESTAMP()",
        "TIMESTAMP_LTZ(3): the processing time of each row, as PROCTIME()", "CURRENT_ROW_TIMESTAMP"),
    yes("temporal", "EXTRACT(timeintervalunit FROM temporal)",
        "BIGINT; units YEAR QUARTER MONTH WEEK (ISO) DAY HOUR MINUTE SECOND MILLISECOND, DAYOFWEEK "
        "(Sunday = 1), DAYOFYEAR"),
    yes("temporal", "YEAR(date), QUARTER(date), MONTH(date), WEEK(date), DAYOFYEAR(date), DAYOFMONTH(date), "
        "DAYOFWEEK(date)", "as EXTRACT", "YEAR", "QUARTER", "MONTH", "WEEK", "DAYOFYEAR", "DAYOFMONTH",
        "DAYOFWEEK"),
    yes("temporal", "HOUR(timestamp), MINUTE(timestamp), SECOND(timestamp)", "as EXTRACT", "HOUR", "MINUTE",
        "SECOND"),
    yes("temporal", "FLOOR(timepoint TO timeintervalunit)",
        "a TIMESTAMP or DATE rounded down to a whole MILLISECOND SECOND MINUTE HOUR DAY WEEK (from Sunday) MONTH "
        "QUARTER or YEAR, in its own type; a TIMESTAMP_LTZ is refused (CAST it AS TIMESTAMP(3))"),
    yes("temporal", "CEIL(timepoint TO timeintervalunit)",
        "as FLOOR, rounded up (a value on a boundary stays)"),
    yes("temporal", "(timepoint1, temporal1) OVERLAPS (timepoint2, temporal2)",
        "BOOLEAN, as Calcite expands it: a `temporal` that is a DAY-TIME interval ends its period at "
        "`timepoint + temporal`; each pair is put in order; then `end1 >= start2 AND end2 >= start1` (periods "
        "that touch overlap; NULL as those comparisons give it). DATE, TIME (wrapping at midnight), TIMESTAMP "
        "or TIMESTAMP_LTZ, one kind in all four places"),
    yes("temporal", "DATE_FORMAT(timestamp, string)",
        "STRING; Java pattern letters yyyy yy MM MMM dd HH hh mm ss SSS (SSS only at the end) a EEE D, text "
        "in '...'", "DATE_FORMAT"),
    yes("temporal", "TIMESTAMPADD(timeintervalunit, interval, timepoint)",
        "`timepoint` moved by `interval` units (MILLISECOND SECOND MINUTE HOUR DAY WEEK MONTH QUARTER "
        "YEAR), in its own type; months are calendar months, the day kept or the month's last day taken "
        "(Jan 31 + 1 MONTH is Feb 28 or 29). A DATE takes units of a day or more; a TIMESTAMP_LTZ no "
        "MONTH, QUARTER or YEAR", "TIMESTAMPADD"),
    yes("temporal", "TIMESTAMPDIFF(timepointunit, timepoint1, timepoint2)",
        "INT: whole units from `timepoint1` to `timepoint2`, truncated toward zero; MONTH, QUARTER and "
        "YEAR count as Flink's subtractMonths (Jan 31 to Feb 28 is a month; on the last day the time of "
        "day must be reached, for negative differences too). A TIMESTAMP_LTZ is read as its wall clock in"
        " the session time zone", "TIMESTAMPDIFF"),
    yes("temporal", "CONVERT_TZ(string1, string2, string3)",
        "STRING `yyyy-MM-dd HH:mm:ss`: the wall clock `string1` in zone `string2` as shown in `string3` "
        "(`CONVERT_TZ('1970-01-01 00:00:00', 'UTC', 'America/Los_Angeles')` is `'1969-12-31 16:00:00'`); "
        "constant zones, written as for `table.local-time-zone`", "CONVERT_TZ"),
    yes("temporal", "FROM_UNIXTIME(numeric [, string])",
        "STRING: epoch seconds as the wall clock of the session time zone, in the format (default "
        "'yyyy-MM-dd HH:mm:ss'; pattern letters as DATE_FORMAT)", "FROM_UNIXTIME"),
    yes("temporal", "UNIX_TIMESTAMP()", f"BIGINT: the epoch seconds of the {_PROCESSING_TIME}"),
    yes("temporal", "UNIX_TIMESTAMP(string1 [, string2])",
        "BIGINT: epoch seconds of the wall clock `string1` in the session time zone, or in the zone it "
        "gives (pattern letter X); format by default 'yyyy-MM-dd HH:mm:ss', letters yyyy MM dd HH mm ss "
        "SSS X and text in '...'; text after the pattern is ignored, and a string that does not parse "
        "gives -9223372036854775808, as in Flink", "UNIX_TIMESTAMP"),
    yes("temporal", "TO_DATE(string1 [, string2])",
        "DATE read with the format (default 'yyyy-MM-dd'; letters as UNIX_TIMESTAMP); NULL when the "
        "string does not spell a day", "TO_DATE"),
    yes("temporal", "TO_TIMESTAMP_LTZ(numeric, precision)",
        "TIMESTAMP_LTZ(3): epoch seconds (precision 0) or milliseconds (3, the default); a fraction of a "
        "millisecond is dropped. Any other precision is an error", "TO_TIMESTAMP_LTZ"),
    yes("temporal", "TO_TIMESTAMP(string1 [, string2])",
        "TIMESTAMP(3): without a format, the string as CAST reads it; with one (letters as "
        "UNIX_TIMESTAMP) the whole string must match; NULL when it does not spell a time", "TO_TIMESTAMP"),
    yes("temporal", "CURRENT_WATERMARK(rowtime)",
        "the current watermark of the subtask that evaluates it, as the rowtime's type with precision 3 "
        "(TIMESTAMP(3) or TIMESTAMP_LTZ(3)); NULL before its first watermark. The argument must be a rowtime "
        "attribute; in WHERE, SELECT and computed columns, never moved by the optimizer; in a query that "
        "aggregates it is refused", "CURRENT_WATERMARK"),
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
    yes("conditional", "IFNULL(input, null_replacement)",
        "the replacement where `input` is NULL; NULL only if the replacement is", "IFNULL"),
    yes("conditional", "IS_ALPHA(string)",
        "BOOLEAN, never NULL: all characters letters (FALSE for '' and NULL)", "IS_ALPHA"),
    yes("conditional", "IS_DECIMAL(string)",
        "BOOLEAN, never NULL: the string spells a number (`[+-]digits[.digits][e[+-]digits]`)", "IS_DECIMAL"),
    yes("conditional", "IS_DIGIT(string)",
        "BOOLEAN, never NULL: all characters digits (FALSE for '' and NULL)", "IS_DIGIT"),
    yes("conditional", "GREATEST(value1 [, value2]*)",
        "the largest argument, in their common type; NULL if any argument is NULL", "GREATEST"),
    yes("conditional", "LEAST(value1 [, value2]*)",
        "the smallest argument; NULL if any argument is NULL", "LEAST"),
    # ---------------------------------------------------------------- conversion
    yes("conversion", "CAST(value AS type)",
        "see [CASE and CAST](#case-and-cast); a value that does not convert fails the pipeline, naming it"),
    yes("conversion", "TRY_CAST(value AS type)", "as CAST, but NULL where CAST would fail"),
    yes("conversion", "TYPEOF(input [, force_serializable])",
        "STRING: the argument's SQL type, with NOT NULL when it cannot be NULL (a string literal is "
        "STRING here, CHAR(n) in Flink); a constant", "TYPEOF"),
    # ---------------------------------------------------------------- collection
    yes("collection", "CARDINALITY(array), CARDINALITY(map)", "INT: its number of elements", "CARDINALITY"),
    yes("collection", "array '[' int ']'", "element `int`, 1-based; NULL out of range"),
    yes("collection", "ELEMENT(array)", "its one element; NULL if empty; more than one fails the pipeline",
        "ELEMENT"),
    yes("collection", "map '[' value ']'",
        "the value for the key; NULL if absent; the key must be a constant"),
    yes("collection", "ARRAY_CONTAINS(haystack, needle)",
        "BOOLEAN: whether an element equals `needle` (cast to the element type; a NULL needle finds a NULL "
        "element); NULL for a NULL array", "ARRAY_CONTAINS"),
    yes("collection", "ARRAY_DISTINCT(haystack)", "each element once (NULL too), in the order they first come; "
        "NULL for a NULL array", "ARRAY_DISTINCT"),
    yes("collection", "ARRAY_POSITION(haystack, needle)", "INT: the 1-based position of the first element "
        "equal to `needle`, 0 if none; NULL if either is NULL", "ARRAY_POSITION"),
    yes("collection", "ARRAY_REMOVE(haystack, needle)", "without the elements equal to `needle` (a NULL "
        "needle removes NULLs), in their order; NULL for a NULL array", "ARRAY_REMOVE"),
    yes("collection", "ARRAY_REVERSE(haystack)", "the elements in reverse order; NULL for a NULL array",
        "ARRAY_REVERSE"),
    yes("collection", "MAP_KEYS(map)", "ARRAY of the keys, in the map's order", "MAP_KEYS"),
    yes("collection", "MAP_VALUES(map)", "ARRAY of the values, in the map's order", "MAP_VALUES"),
    yes("collection", "MAP_FROM_ARRAYS(array_of_keys, array_of_values)", "the MAP of each key to the value at "
        "its place; NULL if either array is NULL; arrays of different lengths, or a NULL key, fail the "
        "pipeline", "MAP_FROM_ARRAYS"),
    # ---------------------------------------------------------------- json
    yes("json", "string IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]",
        "BOOLEAN, never NULL: whether the string is JSON (of that kind; VALUE, the default, is any); FALSE "
        "for NULL. NaN and Infinity are not JSON, as in Flink"),
    yes("json", "JSON_EXISTS(jsonValue, path [{TRUE | FALSE | UNKNOWN | ERROR} ON ERROR])",
        "BOOLEAN: whether the path finds a value that is not JSON's null; FALSE ON ERROR by default. A path "
        "is `[lax | strict] $` then `.name`, `['name']`, `[n]`, `[n, m]`, `[*]`, `.*`; without a mode it is "
        "strict (a miss is an error), as in Flink. The path must be a constant and is checked at compile time",
        "JSON_EXISTS"),
    yes("json", "JSON_STRING(value)",
        "STRING: the value as JSON text (strings quoted, ARRAY as an array, MAP and ROW as objects); NULL for "
        "NULL. Dates and times are refused (CAST them AS STRING)", "JSON_STRING"),
    yes("json", "JSON_VALUE(jsonValue, path [RETURNING type] [... ON EMPTY] [... ON ERROR])",
        "the scalar the path finds, as STRING or the RETURNING type (one CAST reads from text). Nothing found "
        "(in lax mode also an object or array) is EMPTY; text that is not JSON, a strict miss, a non-scalar "
        "and a value that does not convert are ERROR; each gives NULL (the default), fails the pipeline "
        "(ERROR), or gives its DEFAULT expression", "JSON_VALUE"),
    yes("json", "JSON_QUERY(jsonValue, path [... WRAPPER] [... ON EMPTY] [... ON ERROR])",
        "STRING: the object or array the path finds as compact JSON text (`[1,2]`); WITH [UNCONDITIONAL] "
        "ARRAY WRAPPER wraps what it finds in an array, WITH CONDITIONAL ARRAY WRAPPER unless it is one; a "
        "scalar must be wrapped. ON EMPTY / ON ERROR: NULL (the default), EMPTY ARRAY, EMPTY OBJECT or ERROR",
        "JSON_QUERY"),
    yes("json", "JSON_OBJECT([[KEY] key VALUE value]* [{NULL | ABSENT} ON NULL])",
        "STRING: a JSON object of the pairs in their order; keys are non-NULL string constants; NULL ON NULL "
        "by default; a value made by JSON_OBJECT or JSON_ARRAY goes in as JSON, not as a string",
        "JSON_OBJECT"),
    yes("json", "JSON_OBJECTAGG([KEY] key VALUE value [{NULL | ABSENT} ON NULL])",
        "STRING, never NULL: a JSON object of each row's key (a string; a NULL key fails the job) and value, "
        "its members ordered by key; NULL ON NULL by default; a value made by JSON_OBJECT or JSON_ARRAY goes in "
        "as JSON. A key that comes twice in a group fails the job, as in Flink. In GROUP BY (over an updating "
        "input too) and window aggregations; with OVER it is refused", "JSON_OBJECTAGG"),
    yes("json", "JSON_ARRAY([value]* [{NULL | ABSENT} ON NULL])",
        "STRING: a JSON array of the values; ABSENT ON NULL by default; nested JSON_OBJECT / JSON_ARRAY go in "
        "as JSON", "JSON_ARRAY"),
    yes("json", "JSON_ARRAYAGG(items [{NULL | ABSENT} ON NULL])",
        "STRING, never NULL: a JSON array of the items in arrival order (`[]` when every one is left out); "
        "ABSENT ON NULL by default; nested JSON_OBJECT / JSON_ARRAY go in as JSON. In GROUP BY (over an "
        "updating input too: a retraction takes out one equal item) and window aggregations, HOP and SESSION "
        "included; with OVER it is refused", "JSON_ARRAYAGG"),
    # ---------------------------------------------------------------- value construction and access
    yes("valueconstruction", "ROW(value1 [, value2]*), (value1, value2 [, ...])",
        "a ROW whose fields are named `EXPR$0`, `EXPR$1`, ... (as Flink names them)", "ROW"),
    yes("valueconstruction", "ARRAY '[' value1 [, value2]* ']'", "items cast to their common type"),
    yes("valueconstruction", "MAP '[' value1, value2 [, value3, value4]* ']'",
        "keys and values each cast to their common type"),
    yes("valueaccess", "tableName.compositeType.field", "the field of a ROW"),
    yes("valueaccess", "tableName.compositeType.*", "every field of a ROW as a column (a select item only)"),
    # ---------------------------------------------------------------- grouping
    yes("grouping", "GROUP_ID()",
        "BIGINT: with a grouping set written more than once (GROUPING SETS, ROLLUP, CUBE), 0 in the rows of "
        "its first occurrence, 1 in those of its second, ...; 0 in a plain GROUP BY", "GROUP_ID"),
    yes("grouping", "GROUPING(expression1 [, expression2]*), GROUPING_ID(expression1 [, expression2]*)",
        "with GROUPING SETS, ROLLUP and CUBE: the bits of the expressions left out of the grouping set, the "
        "first argument highest", "GROUPING", "GROUPING_ID"),
    # ---------------------------------------------------------------- hash functions
    yes("hashfunctions", "MD5(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "MD5"),
    yes("hashfunctions", "SHA1(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "SHA1"),
    yes("hashfunctions", "SHA224(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "SHA224"),
    yes("hashfunctions", "SHA256(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "SHA256"),
    yes("hashfunctions", "SHA384(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "SHA384"),
    yes("hashfunctions", "SHA512(string)", 'STRING: the lower-case hex digest of the UTF-8 bytes', "SHA512"),
    yes("hashfunctions", "SHA2(string, hashLength)",
        "as SHA224 / SHA256 / SHA384 / SHA512 by `hashLength`, a constant 224, 256, 384 or 512", "SHA2"),
    # ---------------------------------------------------------------- aggregate
    yes("aggregate", "COUNT([ALL] expression | DISTINCT expression1 [, expression2]*), COUNT(*), COUNT(1)",
        "BIGINT, never NULL; COUNT(DISTINCT ...) of one expression", "COUNT"),
    yes("aggregate", "AVG([ALL] expression)", "the argument's type (AVG of integers truncates toward zero)",
        "AVG"),
    yes("aggregate", "SUM([ALL] expression)",
        "the argument's type; DECIMAL(p, s) gives DECIMAL(38, s)", "SUM"),
    yes("aggregate", "MAX([ALL] expression), MIN([ALL] expression)", "the argument's type", "MAX", "MIN"),
    yes("aggregate", "STDDEV_POP(expression), STDDEV_SAMP(expression), VAR_POP(expression), "
        "VAR_SAMP(expression)", "in window aggregations", "STDDEV_POP", "STDDEV_SAMP", "VAR_POP", "VAR_SAMP"),
    yes("aggregate", "COLLECT([ALL] expression)",
        "Flink's MULTISET as a MAP<T, INT>, each distinct non-NULL value and how many rows hold it (an "
        "empty map when there is none); in window aggregations and GROUP BY (over an updating input too). "
        "DISTINCT, and COLLECT with OVER, are refused", "COLLECT"),
    yes("aggregate", "VARIANCE([ALL | DISTINCT] expression)",
        "VAR_SAMP's synonym, where VAR_SAMP runs (in window aggregations); DISTINCT is refused", "VARIANCE"),
    yes("aggregate", "RANK(), DENSE_RANK(), ROW_NUMBER()",
        "OVER (PARTITION BY ... ORDER BY ...) as Top-N or deduplication (see [Top-N](#top-n-and-deduplication-"
        "row_number-rank-dense_rank))", "RANK", "DENSE_RANK", "ROW_NUMBER"),
    no("aggregate", "LEAD(expression [, offset] [, default])",
       "reads rows after the current one, which a stream has not seen yet", "LEAD",
       instead="LAG over the other order, or a self-join"),
    yes("aggregate", "LAG(expression [, offset] [, default])",
        "OVER (PARTITION BY ... ORDER BY time): `expression` of the row `offset` (1) rows before in the "
        "partition, else `default` (NULL); constant offset and default. Beside other OVER aggregates their "
        "window must be ROWS BETWEEN n PRECEDING AND CURRENT ROW with n >= offset", "LAG"),
    yes("aggregate", "FIRST_VALUE(expression), LAST_VALUE(expression)", "in window aggregations",
        "FIRST_VALUE", "LAST_VALUE"),
    yes("aggregate", "LISTAGG(expression [, separator])",
        "STRING, the non-NULL strings in arrival order joined by the separator (a constant, ',' by default); "
        "NULL when there is none. In window aggregations and GROUP BY (over an updating input a retraction "
        "takes out the first equal value); with OVER it is refused", "LISTAGG"),
    no("aggregate", "CUME_DIST()", _BATCH_ONLY, "CUME_DIST"),
    no("aggregate", "PERCENT_RANK()", _BATCH_ONLY, "PERCENT_RANK"),
    no("aggregate", "NTILE(n)", _BATCH_ONLY, "NTILE"),
    # ---------------------------------------------------------------- catalog
    yes("catalog", "CURRENT_DATABASE()",
        "STRING 'default_database': clink has one database, named as Flink's default one",
        "CURRENT_DATABASE"),
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
