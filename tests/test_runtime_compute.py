"""The runtime's kernel facade (``clink.runtime.compute``) against ``pyarrow.compute`` itself, and
the import guard that keeps a simple compiled pipeline's start cheap."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as real
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime import compute as pc
from clink.runtime.memo import ValueMemo

ints = st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=30)
texts = st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=30)
#: Half hypothesis's default of 100 examples, for the tests whose every example is a column of
#: hundreds or thousands of rows drawn from its values.
MANY_ROWS = settings(max_examples=50, deadline=None)


@given(ints, ints)
def test_binary_kernels_match_pyarrow_compute(a: list, b: list) -> None:
    n = min(len(a), len(b))
    x, y = pa.array(a[:n], pa.int64()), pa.array(b[:n], pa.int64())
    for name in ("add", "subtract", "multiply", "greater", "less_equal", "equal", "max_element_wise"):
        assert getattr(pc, name)(x, y).equals(getattr(real, name)(x, y)), name
    assert pc.and_(pc.greater(x, 0), pc.less(y, 0)).equals(real.and_(real.greater(x, 0), real.less(y, 0)))


@given(texts)
def test_kernels_with_options_match_pyarrow_compute(values: list) -> None:
    s = pa.array(values, pa.string())
    assert pc.utf8_lpad(s, width=5, padding="*").equals(real.utf8_lpad(s, width=5, padding="*"))
    assert pc.utf8_slice_codeunits(s, 1, 3).equals(real.utf8_slice_codeunits(s, 1, 3))
    assert pc.replace_substring(s, "a", "b", max_replacements=1).equals(
        real.replace_substring(s, "a", "b", max_replacements=1))
    assert pc.fill_null(s, "x").equals(real.fill_null(s, "x"))
    assert pc.is_null(s).equals(real.is_null(s))
    assert pc.count(s, mode="all").equals(real.count(s, mode="all"))
    assert pc.binary_join_element_wise(s, "-", s, "").equals(real.binary_join_element_wise(s, "-", s, ""))


@given(ints)
def test_cast_take_filter_and_aggregates_match_pyarrow_compute(values: list) -> None:
    x = pa.array(values, pa.int64())
    assert pc.cast(x, pa.float64()).equals(real.cast(x, pa.float64()))
    assert pc.cast(x, pa.int8(), safe=False).equals(real.cast(x, pa.int8(), safe=False))
    mask = pc.greater(x, 0)
    batch = pa.record_batch([x], names=["x"])
    assert pc.filter(batch, mask, null_selection_behavior="drop").equals(batch.filter(mask))
    indices = pa.array(list(reversed(range(len(values)))), pa.int32())
    assert pc.take(x, indices).equals(real.take(x, indices))
    assert pc.sum(x).equals(real.sum(x)) and pc.min_max(x).equals(real.min_max(x))


def test_options_objects_and_errors_are_pyarrow_s() -> None:
    assert pc.CastOptions is real.CastOptions
    x = pa.array([1.26, 2.5])
    assert pc.round(x, options=pc.RoundOptions(ndigits=1)).equals(real.round(x, ndigits=1))
    assert pc.round(x, options={"ndigits": 1}).equals(real.round(x, ndigits=1))
    with pytest.raises(TypeError, match="add takes 2 positional"):
        pc.add(x)
    with pytest.raises(TypeError, match="both an 'options' argument"):
        pc.round(x, 1, options=pc.RoundOptions(ndigits=1))
    with pytest.raises(AttributeError):
        pc.no_such_kernel  # noqa: B018
    # Helpers that are not kernels come from pyarrow.compute itself.
    assert str(pc.field("a")) == str(real.field("a"))
    assert str(pc.greater(pc.field("a"), 1)) == str(real.greater(real.field("a"), 1))


def test_a_stateless_compiled_pipeline_starts_without_the_heavy_imports(tmp_path: Path) -> None:
    """``clink run x.clk`` of a filter/project over datagen, printed, must not import
    ``pyarrow.compute`` (≈75 ms of wrapper generation), attrs, lark or the compiler."""
    sql = tmp_path / "q.sql"
    sql.write_text(
        "CREATE TABLE orders (id BIGINT, price DOUBLE, region STRING, at TIMESTAMP(3))\n"
        "  WITH ('connector' = 'datagen', 'number-of-rows' = '5', 'seed' = '7');\n"
        "SELECT id, price * 0.908 AS eur, UPPER(region) AS r, at FROM orders WHERE price > 0.1 OR id IS NULL;\n")
    compiled = subprocess.run([sys.executable, "-m", "clink", "compile", str(sql), "-o", str(tmp_path / "q.clk")],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    code = (
        "import sys\n"
        "from clink.cli import main\n"
        "assert main(['run', sys.argv[1]]) == 0\n"
        "heavy = ('pyarrow.compute', 'attrs', 'attr', 'lark', 'clink.compiler', 'clink.grammar', 'rich')\n"
        "loaded = sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + '.' for h in heavy)))\n"
        "print('LOADED', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q.clk")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("+I[") for line in lines) >= 1
    assert lines[-1] == "LOADED []"


def test_compiling_and_running_from_sql_does_not_import_pyarrow_compute(tmp_path: Path) -> None:
    """``clink run q.sql --recompile`` compiles in the process: the compiler checks SIMILAR TO
    patterns and builds constants through the runtime's facade, so ``pyarrow.compute`` (≈75 ms)
    stays unloaded there too."""
    sql = tmp_path / "q.sql"
    sql.write_text(
        "CREATE TABLE orders (id BIGINT, price DOUBLE, region STRING)\n"
        "  WITH ('connector' = 'datagen', 'number-of-rows' = '5', 'seed' = '7');\n"
        "SELECT id, price * 0.908 AS eur, region SIMILAR TO '(a|b)%' AS ab FROM orders WHERE price > 0.1;\n")
    code = (
        "import sys\n"
        "from clink.cli import main\n"
        "assert main(['run', '--recompile', sys.argv[1]]) == 0\n"
        "print('LOADED', sorted(m for m in sys.modules if m == 'pyarrow.compute'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(sql)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("+I[") for line in lines) == 5
    assert lines[-1] == "LOADED []"


pieces = st.lists(st.one_of(st.none(), st.text(alphabet="ab/é,", max_size=9)), max_size=25)


@given(pieces, st.integers(0, 4), st.sampled_from(["/", ",", "é", "ab"]))
def test_split_index_matches_python_split(values: list, index: int, sep: str) -> None:
    """SPLIT_INDEX: the index-th piece, NULL past the last piece, for a NULL and for ''; the
    one-byte separator path (byte arithmetic) and the general one (split_pattern) agree with it."""
    from clink.runtime.kernels import split_index

    def piece(v: str | None) -> str | None:
        if v is None or v == "":
            return None
        parts = v.split(sep)
        return parts[index] if index < len(parts) else None

    array = pa.array(values, pa.string())
    assert split_index(array, sep, index).to_pylist() == [piece(v) for v in values]
    assert split_index(array.slice(1), sep, index).to_pylist() == [piece(v) for v in values[1:]]


def test_kernels_named_like_builtins_do_not_break_the_facade() -> None:
    """Kernels cached as module attributes (any, all, min, max, sum, round, abs, filter) shadow
    Python's builtins inside the module; its own code must not be affected."""
    x = pa.array([1, -2, 3])
    for name in ("any", "all", "min", "max", "sum", "round", "abs", "filter"):
        getattr(pc, name)
    assert pc.any(pc.greater(x, 2)).as_py() is True
    assert pc.add(x, 1).to_pylist() == [2, -1, 4]
    assert pc.if_else(pc.greater(x, 0), 1, 0).to_pylist() == [1, 0, 1]
    assert pc.equal(pa.array(["a", "b"]), "a").to_pylist() == [True, False]


ROW = pa.struct([("a", pa.int64()), ("s", pa.string()), ("b", pa.int64())])


@given(st.lists(st.tuples(st.one_of(st.none(), st.tuples(st.integers(-9, 9), st.text(max_size=4),
                                                           st.one_of(st.none(), st.integers()))),
                          st.one_of(st.none(), st.booleans())), max_size=30), st.integers(0, 5))
def test_filtering_the_fields_read_gives_those_fields_as_a_whole_filter_does(rows: list, offset: int) -> None:
    from clink.runtime import kernels as K

    values = [None if r is None else {"a": r[0], "s": r[1], "b": r[2] if r[2] is None else r[2] % 2**40}
              for r, _ in rows]
    column = pa.array([{"a": 0, "s": "", "b": 0}] * offset + values, ROW).slice(offset)  # an offset struct
    batch = pa.RecordBatch.from_arrays([column, pa.array(range(len(values)), pa.int64())], names=["r", "i"])
    keep = pa.array([k for _, k in rows], pa.bool_())
    whole = K.filter(batch, keep, (0,))
    fields = K.filter(batch, keep, (0,), {0: (0, 2)})
    assert fields.num_rows == whole.num_rows
    for j in (0, 2):
        assert real.struct_field(fields.column(0), [j]).equals(real.struct_field(whole.column(0), [j]))
    assert fields.column(0).is_valid().equals(whole.column(0).is_valid())
    if fields.num_rows < len(values):
        # what is not read is not copied (when every row stays, the batch comes back as it is)
        assert real.struct_field(fields.column(0), [1]).null_count == fields.num_rows
        assert fields.column(1).null_count == fields.num_rows


@MANY_ROWS
@given(st.lists(st.one_of(st.none(), st.integers(-(2**33), 2**33)), min_size=64, max_size=400),
       st.sampled_from(["%Y-%m-%d", "%H:%M", "%Y-%m-%d %H:%M:%S", "%j %a %p", "%M", "%S", "at %H o'clock"]),
       st.integers(1, 7))
def test_date_format_of_many_rows_formats_each_distinct_time_as_strftime(seconds: list, fmt: str, spread: int) -> None:
    from clink.runtime import kernels as K

    # few distinct minutes (the distinct path) or all distinct (the plain one)
    times = [None if s is None else s // 10**spread for s in seconds]
    a = pa.array(times, pa.int64()).cast(pa.timestamp("s"))
    assert K.date_format(a, fmt).equals(real.strftime(a, format=fmt))


def test_regexp_extract_captures_only_the_group_asked_for() -> None:
    """The group asked for is the one named for ``extract_regex``; the others stop capturing, and
    a '(' that is escaped, in a class or opens a non-capturing group is not counted."""
    from clink.runtime.kernels import _name_groups

    pattern = r"(a(?P<x>b)\((c)[(])(?:d)(?i:e)(?<y>f)"
    assert _name_groups(pattern, 2) == (r"(?:a(?P<clink_group>b)\((?:c)[(])(?:d)(?i:e)(?:f)", 4)
    assert _name_groups(pattern, 4) == (r"(?:a(?:b)\((?:c)[(])(?:d)(?i:e)(?P<clink_group>f)", 4)
    assert _name_groups(pattern, 0)[0] == r"(?:a(?:b)\((?:c)[(])(?:d)(?i:e)(?:f)"


# The Python references below are cached: the columns they check repeat their values thousands
# of times, and running Python's own ``re`` and ``str.split`` per row was most of these tests' time.
@functools.lru_cache(maxsize=1 << 16)
def _python_regexp_extract(value: str | None, pattern: str, index: int) -> str | None:
    import re

    if value is None:
        return None
    found = re.search(pattern, value)
    return None if found is None else found.group(index) or ""


@functools.lru_cache(maxsize=1 << 16)
def _python_split_index(value: str | None, separator: str, index: int) -> str | None:
    """SPLIT_INDEX: the piece at ``index``; NULL for NULL, for '' and past the last piece."""
    if not value:
        return None
    pieces = value.split(separator)
    return pieces[index] if index < len(pieces) else None


#: Values that repeat, as a column of URLs or names does, with NULLs, '' and non-ASCII text.
repeating = st.lists(st.one_of(st.none(), st.sampled_from([
    "https://x.com/a/b/c/item.htm?query=1&channel_id=7", "https://x.com/a/b/c/item.htm?query=1",
    "channel_id=12&x=1", "https://x.com/dé/é/日本?channel_id=", "", "/", "a//b", "k=1&channel_id=abc&z=2",
]), st.text(alphabet="a/&=_é", max_size=12)), min_size=1, max_size=40)


@MANY_ROWS
@given(repeating, st.integers(0, 2**32 - 1))
def test_string_functions_per_distinct_value_match_per_row(values: list, seed: int) -> None:
    """REGEXP_EXTRACT and SPLIT_INDEX over a long column of repeating values run once per distinct
    value and take the results back out; they must equal the per-row path and Python's own
    ``re`` and ``str.split``, NULLs, '' and slices included."""
    import numpy as np

    from clink.runtime import kernels as K

    rng = np.random.default_rng(seed)
    rows = [values[i] for i in rng.integers(0, len(values), 3000)]
    array = pa.array(rows, pa.string())
    assert K._distinct(array, K._REGEX_MOST_DISTINCT, ValueMemo()) is not None  # the per-distinct-value path runs
    cases = [("(&|^)channel_id=([^&]*)", 2), ("(&|^)channel_id=([^&]*)", 1), ("(&|^)channel_id=([^&]*)", 0),
             ("(?P<key>[a-z_]+)=(?P<value>[0-9]*)", 2), ("é+", 0), ("(x)?(/)", 1)]

    for column, expected in ((array, rows), (array.slice(7), rows[7:])):
        for pattern, index in cases:
            got = K.regexp_extract(column, pattern, index).to_pylist()
            assert got == [_python_regexp_extract(v, pattern, index) for v in expected], (pattern, index)
        for index in (0, 3, 4):
            assert K.split_index(column, "/", index).to_pylist() == [_python_split_index(v, "/", index)
                                                                     for v in expected]
        assert K.split_index(column, "é", 1).to_pylist() == [_python_split_index(v, "é", 1)
                                                             for v in expected]


def test_string_functions_on_mostly_distinct_values_stay_per_row() -> None:
    """A column whose values hardly repeat is not hashed first: the sample says so."""
    from clink.runtime import kernels as K

    array = pa.array([f"k={i}&channel_id={i * 7}" for i in range(5000)], pa.string())
    assert K._distinct(array, K._REGEX_MOST_DISTINCT, ValueMemo()) is None
    assert K.regexp_extract(array, "(&|^)channel_id=([^&]*)", 2).to_pylist() == [str(i * 7) for i in range(5000)]
    assert K.split_index(array, "=", 2).to_pylist() == [str(i * 7) for i in range(5000)]


@MANY_ROWS
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 60), st.floats(0, 0.5), st.integers(0, 2)),
                min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_string_functions_remember_values_across_calls(batches: list, seed: int) -> None:
    """Batch after batch of a column whose values come from moving windows of one pool (some seen
    before, some new, some NULL, some batches sliced), REGEXP_EXTRACT and SPLIT_INDEX run only on
    the values they have not seen yet: the results must stay those of Python, whatever the
    earlier calls left behind, the limits on what is kept included."""
    import numpy as np

    from clink.runtime import kernels as K

    pool = [f"https://h/{i % 7}/d{i % 13}/item?query=1" + ("" if i % 5 == 0 else f"&channel_id={i}")
            for i in range(200)]
    rng = np.random.default_rng(seed)
    limits = (K._SEEN_MOST_VALUES, K._SEEN_MOST_NEW)
    memo, other = ValueMemo(), ValueMemo()  # one task's memory, and another task's
    try:
        for first, width, nulls, kind in batches:
            if kind == 2:
                K._SEEN_MOST_VALUES, K._SEEN_MOST_NEW = 50, 0.01  # forces starting afresh
            else:
                K._SEEN_MOST_VALUES, K._SEEN_MOST_NEW = limits
            picks = (first + rng.integers(0, width, size=2500)) % len(pool)
            rows = [None if null else pool[i] for null, i in zip(rng.random(2500) < nulls, picks.tolist())]
            array = pa.array(rows, pa.string())
            if kind == 1:
                array, rows = array.slice(3, 2000), rows[3:2003]
            got = K.regexp_extract(array, "(&|^)channel_id=([^&]*)", 2, memo=memo).to_pylist()
            assert got == [_python_regexp_extract(v, "(&|^)channel_id=([^&]*)", 2) for v in rows]
            for index in (3, 2, 4):
                expected = [_python_split_index(v, "/", index) for v in rows]
                assert K.split_index(array, "/", index, memo=memo).to_pylist() == expected
            # The same column once more, filtered: another array with the values seen.
            kept = pc.filter(array, pa.array(rng.random(len(rows)) < 0.9))
            assert K.regexp_extract(kept, "(&|^)channel_id=([^&]*)", 2, memo=memo).to_pylist() == [
                _python_regexp_extract(v, "(&|^)channel_id=([^&]*)", 2) for v in kept.to_pylist()]
            assert not other.seen, "a task's memory of values is its own"
    finally:
        K._SEEN_MOST_VALUES, K._SEEN_MOST_NEW = limits


@given(st.lists(st.one_of(st.none(), st.text(alphabet="aZ_ 9~\x7fÀéßİ", max_size=6)), max_size=20),
       st.integers(0, 3))
def test_lower_and_upper_match_unicode_case_mapping(values: list, start: int) -> None:
    """LOWER and UPPER take the ASCII kernel only when the text is all ASCII, and give what the
    Unicode one gives in either case (slices, whose buffers hold bytes outside them, included)."""
    from clink.runtime import kernels as K

    for array in (pa.array(values, pa.string()), pa.array(values, pa.string()).slice(min(start, len(values))),
                  pa.chunked_array([pa.array(values, pa.string()), pa.array(["ÀB", "ab"])])):
        assert K.lower(array).to_pylist() == real.utf8_lower(array).to_pylist()
        assert K.upper(array).to_pylist() == real.utf8_upper(array).to_pylist()
    ascii_only = pa.array(["Hello", None, "WORLD_1~"], pa.string())
    assert K._ascii(ascii_only) and not K._ascii(pa.array(["é"]))
    assert K.lower(ascii_only).to_pylist() == ["hello", None, "world_1~"]
    assert K.upper(pa.scalar("ß")).as_py() == real.utf8_upper(pa.scalar("ß")).as_py()


def test_case_when_keeps_constant_results_scalar() -> None:
    """CASE with constant results (strings, NULL) and a column ELSE, as q21 has."""
    from clink.runtime import kernels as K

    low = pa.array(["apple", "x", None, "baidu"])
    conditions = [real.equal(low, "apple"), real.equal(low, "baidu")]
    got = K.case_when(conditions, [pa.scalar("0"), pa.scalar(None, pa.string())], pa.array(["a", "b", "c", "d"]),
                      pa.string())
    assert got.to_pylist() == ["0", "b", "c", None]
    assert K.case_when(conditions, [pa.scalar(1, pa.int32()), pa.scalar(3)], pa.scalar(2), pa.int64()).to_pylist() == [
        1, 2, 2, 3]


@settings(max_examples=200)
@given(st.datetimes(min_value=__import__("datetime").datetime(1900, 1, 1)),
       st.integers(0, 9), st.sampled_from(["s", "ms", "us"]), st.booleans())
def test_text_with_more_digits_of_a_second_than_the_type_keeps_is_truncated(when, digits: int, unit: str,
                                                                           iso: bool) -> None:
    """Flink reads up to nine digits of a second and truncates to the type's precision."""
    from clink.runtime import kernels

    fraction = f"{when.microsecond:06d}{(when.microsecond * 7) % 1000:03d}"[:digits]
    text = when.strftime("%Y-%m-%d" + ("T" if iso else " ") + "%H:%M:%S") + (f".{fraction}" if digits else "")
    kept = {"s": 0, "ms": 3, "us": 6}[unit]
    micros = int((fraction + "000000000")[:6]) if digits else 0
    micros = micros // 10 ** (6 - kept) * 10 ** (6 - kept)
    got = kernels.cast(pa.array([text]), pa.timestamp(unit)).to_pylist()[0]
    assert got == when.replace(microsecond=micros)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=200), st.sampled_from(["uint64", "int64", "int32"]))
def test_sorted_unique_is_numpys_unique(values: list[int], dtype: str) -> None:
    import numpy as np

    from clink.runtime.kernels import sorted_unique

    array = np.array(values, dtype=np.uint64).astype(dtype)
    assert sorted_unique(array).tolist() == np.unique(array).tolist()
