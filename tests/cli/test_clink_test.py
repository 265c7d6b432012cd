"""``clink test`` and the pytest plugin: a pipeline's cases run against in-memory inputs.

The TUMBLE case is Flink's own example (docs/content/docs/dev/table/sql/queries/window-tvf.md in
apache/flink): the ``Bid`` rows it prints are the input, its printed aggregate is the expected
output. The pipeline reads Bid from Kafka and writes to JDBC, with no broker and no database:
a case replaces sources and sinks. Exit codes: 0 every case passed, 1 one failed (its diff is
printed), 2 a mistake in the case file or the SQL, shown at its place.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.cli import main

pytest_plugins = ["pytester"]

BID = """\
CREATE TABLE Bid (
  bidtime TIMESTAMP(3),
  price   DECIMAL(10, 2),
  item    STRING,
  WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '127.0.0.1:9',
        'format' = 'json');

CREATE TABLE totals (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(38, 2))
  WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:9/shop', 'table-name' = 'totals');

INSERT INTO totals
SELECT window_start, window_end, SUM(price) AS price
FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end;
"""

# Flink's Bid table, as its documentation prints it.
BID_ROWS = """\
        - {bidtime: "2020-04-15 08:05:00", price: 4.00, item: C}
        - {bidtime: "2020-04-15 08:07:00", price: 2.00, item: A}
        - {bidtime: "2020-04-15 08:09:00", price: 5.00, item: D}
        - {bidtime: "2020-04-15 08:11:00", price: 3.00, item: B}
        - {bidtime: "2020-04-15 08:13:00", price: 1.00, item: E}
        - {bidtime: "2020-04-15 08:17:00", price: 6.00, item: F}
"""

TUMBLE_CASES = f"""\
cases:
  - name: tumble over Flink's Bid table
    input:
      Bid:
{BID_ROWS}    expect:
      totals:
        - {{window_start: "2020-04-15 08:00:00", window_end: "2020-04-15 08:10:00", price: 11.00}}
        - {{window_start: "2020-04-15 08:10:00", window_end: "2020-04-15 08:20:00", price: 10.00}}
"""

WORDS = """\
CREATE TABLE words (w STRING) WITH ('connector' = 'datagen');
SELECT w, COUNT(*) AS n FROM words GROUP BY w;
"""

CHANGELOG_CASES = """\
cases:
  - name: counts change as words arrive
    input:
      - words: [{w: hello}]
      - words: [{w: world}, {w: hello}]
    expect:
      query_1:
        changelog:
          - +I: {w: hello, n: 1}
          - -U: {w: hello, n: 1}
          - +U: {w: hello, n: 2}
          - +I: {w: world, n: 1}
  - name: the final counts
    input:
      - words: [{w: hello}]
      - words: [{w: world}, {w: hello}]
    expect:
      query_1: [{w: world, n: 1}, {w: hello, n: 2}]
"""

PROCTIME = """\
CREATE TABLE clicks (item STRING) WITH ('connector' = 'datagen');
SELECT item, TUMBLE_START(p, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
FROM (SELECT *, PROCTIME() AS p FROM clicks)
GROUP BY item, TUMBLE(p, INTERVAL '10' SECOND);
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def clink_test(tmp_path: Path, sql: str, cases: str, capsys, *, cases_name: str = "cases.yaml"):
    """Run ``clink test`` in this process: (exit code, standard output, standard error)."""
    code = main(["test", str(write(tmp_path, "pipeline.sql", sql)), str(write(tmp_path, cases_name, cases))])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_flink_tumble_example_passes(tmp_path, capsys):
    code, out, err = clink_test(tmp_path, BID, TUMBLE_CASES, capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("PASS  tumble over Flink's Bid table  (") and lines[0].endswith(" ms)")
    assert lines[-1] == "1 case: 1 passed, 0 failed"


def test_a_wrong_total_fails_with_the_missing_and_unexpected_rows(tmp_path, capsys):
    wrong = TUMBLE_CASES.replace("price: 10.00}", "price: 12.50}")
    code, out, _ = clink_test(tmp_path, BID, wrong, capsys)
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL  tumble over Flink's Bid table  (")
    assert ("  totals: 1 row missing, 1 row unexpected (- expected but not produced, + produced but not expected)\n"
            '    - {window_start: "2020-04-15 08:10:00", window_end: "2020-04-15 08:20:00", price: 12.50}\n'
            '    + {window_start: "2020-04-15 08:10:00", window_end: "2020-04-15 08:20:00", price: 10.00}\n') in out
    assert out.splitlines()[-1] == "1 case: 0 passed, 1 failed"


def test_watermark_steps_fire_windows_before_the_input_ends(tmp_path, capsys):
    """Without the end of input, only the watermark closes a window. The first three bids move
    it to 08:08:59 (the WATERMARK clause): no window has ended. The step at 08:10 fires the
    first; the later bids move it to 08:16:59, which closes no other."""
    rows = BID_ROWS.splitlines(keepends=True)
    cases = f"""\
cases:
  - name: the watermark step fires the first window
    end_of_input: false
    input:
      Bid:
{"".join(rows[:3])}        - watermark: "2020-04-15 08:10:00"
{"".join(rows[3:])}    expect:
      totals:
        - {{window_start: "2020-04-15 08:00:00", window_end: "2020-04-15 08:10:00", price: 11.00}}
  - name: without it no window has fired
    end_of_input: false
    input:
      Bid:
{"".join(rows[:3])}    expect:
      totals: []
"""
    code, out, _ = clink_test(tmp_path, BID, cases, capsys)
    assert code == 0, out
    assert out.splitlines()[-1] == "2 cases: 2 passed, 0 failed"


def test_changelog_of_an_updating_query(tmp_path, capsys):
    code, out, _ = clink_test(tmp_path, WORDS, CHANGELOG_CASES, capsys)
    assert code == 0, out
    assert out.splitlines()[-1] == "2 cases: 2 passed, 0 failed"


def test_a_changelog_that_differs_is_shown_as_a_diff(tmp_path, capsys):
    wrong = CHANGELOG_CASES.replace("- +U: {w: hello, n: 2}", "- +U: {w: hello, n: 3}")
    code, out, _ = clink_test(tmp_path, WORDS, wrong, capsys)
    assert code == 1
    assert ("  query_1: the changelog differs (- expected, + produced)\n"
            '      +I{w: "hello", n: 1}\n'
            '      -U{w: "hello", n: 1}\n'
            '    - +U{w: "hello", n: 3}\n'
            '    + +U{w: "hello", n: 2}\n'
            '      +I{w: "world", n: 1}\n') in out
    assert out.splitlines()[-1] == "2 cases: 1 passed, 1 failed"


def test_proctime_windows_follow_the_advance_steps(tmp_path, capsys):
    cases = """\
cases:
  - name: ten seconds later is the next window
    clock: "2020-04-15 08:00:00"
    input:
      clicks:
        - {item: A}
        - {item: A}
        - advance: 10 s
        - {item: A}
        - {item: B}
    expect:
      query_1:
        - {item: A, ws: "2020-04-15 08:00:00", n: 2}
        - {item: A, ws: "2020-04-15 08:00:10", n: 1}
        - {item: B, ws: "2020-04-15 08:00:10", n: 1}
  - name: without an advance every row is in the first window
    clock: "2020-04-15 08:00:00"
    input:
      clicks: [{item: A}, {item: A}, {item: A}]
    expect:
      query_1: [{item: A, ws: "2020-04-15 08:00:00", n: 3}]
"""
    code, out, _ = clink_test(tmp_path, PROCTIME, cases, capsys)
    assert code == 0, out
    assert out.splitlines()[-1] == "2 cases: 2 passed, 0 failed"


def test_a_json_case_file_needs_no_yaml(tmp_path, capsys, monkeypatch):
    import yaml

    data = json.dumps(yaml.safe_load(CHANGELOG_CASES))
    monkeypatch.setitem(sys.modules, "yaml", None)  # PyYAML is not installed
    code, out, _ = clink_test(tmp_path, WORDS, data, capsys, cases_name="cases.json")
    assert code == 0, out


def test_a_yaml_case_file_without_pyyaml_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)
    code, out, err = clink_test(tmp_path, WORDS, CHANGELOG_CASES, capsys)
    assert code == 2
    assert "pip install 'clink[testing]'" in err


@pytest.mark.parametrize(("cases", "message"), [
    pytest.param("""\
cases:
  - name: typo
    input:
      word:
        - {w: hello}
    expect:
      query_1: []
""", ["cases.yaml:4:7: error: case 'typo': the pipeline reads no table 'word' (it reads: words)",
      " 4 |       word:", "hint: did you mean 'words'?"], id="unknown table"),
    pytest.param("""\
cases:
  - name: wrong type
    input:
      words:
        - {w: hello}
        - {w: [1, 2]}
    expect:
      query_1: []
""", ["cases.yaml:6:11: error: case 'wrong type': a row does not fit table 'words': column 'w' is STRING, "
      "and the pushed list<item: int64> values do not convert"], id="wrong column type"),
    pytest.param("""\
cases:
  - name: no such output
    expect:
      query_2: []
""", ["cases.yaml:4:7: error: case 'no such output': the pipeline has no output 'query_2' (its outputs: "
      "query_1; a bare SELECT is query_1, query_2, …)"], id="unknown output"),
    pytest.param("""\
cases:
  - name: ok
    expect: {query_1: []}
  - name: misspelt
    expct: {query_1: []}
""", ["cases.yaml:4:5: error: case 'misspelt': a case has no key 'expct'", "hint: did you mean 'expect'?"],
        id="unknown key"),
    pytest.param("""\
cases:
  - name: broken
    input: {words: [{w: a}
""", ["cases.yaml:4:1: error: not valid YAML: expected ',' or ']'"], id="yaml syntax"),
    pytest.param("""\
cases:
  - name: bad column
    expect:
      query_1: [{w: a, nn: 1}]
""", ["cases.yaml:4:24: error: case 'bad column': output 'query_1' has no column 'nn' (its columns: w, n)",
      "hint: did you mean 'n'?"], id="unknown expected column"),
    pytest.param("""\
cases:
  - name: no event time
    input:
      words: [{watermark: "2020-04-15 08:00:00"}]
    expect: {query_1: []}
""", ["case 'no event time': table 'words' has no event time (no WATERMARK clause)"], id="watermark without time"),
])
def test_bad_case_files_exit_2_at_their_place(tmp_path, capsys, cases, message):
    code, out, err = clink_test(tmp_path, WORDS, cases, capsys)
    assert code == 2
    assert out == ""
    for part in message:
        assert part in err, err


def test_bad_sql_exits_2_at_its_place(tmp_path, capsys):
    code, _, err = clink_test(tmp_path, "CREATE TABLE words (w STRING) WITH ('connector' = 'datagen');\n"
                                        "SELECT nope FROM words;\n", CHANGELOG_CASES, capsys)
    assert code == 2
    assert err.startswith("pipeline.sql:2:8: error: unknown column 'nope'")


def test_the_command_line_exit_code_and_no_traceback(tmp_path):
    sql = write(tmp_path, "pipeline.sql", BID)
    cases = write(tmp_path, "cases.yaml", TUMBLE_CASES.replace("price: 11.00", "price: 11.50"))
    done = subprocess.run([sys.executable, "-m", "clink", "test", str(sql), str(cases)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "FAIL  tumble over Flink's Bid table" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_pytest_plugin_runs_each_case_as_an_item(pytester):
    pytester.makefile(".sql", words=WORDS)
    pytester.makefile(".clink.yaml", words=CHANGELOG_CASES.replace("query_1: [{w: world, n: 1},", "query_1: [{w: world, n: 2},"))
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*words.clink.yaml::counts change as words arrive PASSED*",
        "*words.clink.yaml::the final counts FAILED*",
        "*query_1: 1 row missing, 1 row unexpected*",
        '*- {w: "world", n: 2}',
        '*+ {w: "world", n: 1}',
    ])
    assert "Traceback" not in result.stdout.str()


def test_cases_helper_for_parametrize(pytester):
    pytester.makefile(".sql", words=WORDS)
    pytester.makefile(".yaml", cases=CHANGELOG_CASES.replace("- +U: {w: hello, n: 2}", "- +U: {w: hello, n: 7}"))
    pytester.makepyfile(test_words="""
        import pytest
        import clink.testing

        @pytest.mark.parametrize("case", clink.testing.cases("words.sql", "cases.yaml"))
        def test_words(case):
            case.check()
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_words?counts change as words arrive? FAILED*",
                                 "*CaseFailed: FAIL  counts change as words arrive*",
                                 "*- +U{w: \"hello\", n: 7}*"])


UPSERT = """\
CREATE TABLE words (w STRING) WITH ('connector' = 'datagen');
CREATE TABLE best (w STRING, n BIGINT, PRIMARY KEY (w) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'best', 'properties.bootstrap.servers' = '127.0.0.1:9',
        'key.format' = 'json', 'value.format' = 'json');
INSERT INTO best SELECT w, COUNT(*) AS n FROM words GROUP BY w;
SELECT w, n FROM best;
"""


def test_final_rows_of_a_keyed_sink_and_a_chosen_case(tmp_path, capsys):
    cases = """\
cases:
  - name: the last count of each word
    input:
      - words: [{w: hello}]
      - words: [{w: world}, {w: hello}]
    expect:
      best: [{w: hello, n: 2}, {w: world, n: 1}]
  - name: never run
    expect:
      best: [{w: nothing, n: 0}]
"""
    code, out, _ = clink_test(tmp_path, UPSERT, cases, capsys)
    assert code == 1 and "FAIL  never run" in out
    code = main(["test", str(tmp_path / "pipeline.sql"), str(tmp_path / "cases.yaml"), "-k",
                 "the last count of each word"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert out.splitlines()[-1] == "1 case: 1 passed, 0 failed"


def test_a_changelog_source_refuses_rows_before_any_case_runs(tmp_path, capsys):
    cases = """\
cases:
  - name: fine
    input: {words: [{w: a}]}
    expect: {best: [{w: a, n: 1}]}
  - name: rows for a changelog
    input:
      best: [{w: a, n: 1}]
    expect:
      query_1: []
"""
    code, out, err = clink_test(tmp_path, UPSERT, cases, capsys)
    assert code == 2
    assert out == ""  # not even the first case ran
    assert err.startswith("cases.yaml:7:14: error: case 'rows for a changelog': table 'best' reads a changelog "
                          "('upsert-kafka')")


def test_values_in_the_query_stay_its_own(tmp_path, capsys):
    sql = ("CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\n"
           "SELECT a FROM t UNION ALL SELECT * FROM (VALUES (7), (8)) AS v(a);\n")
    cases = """\
cases:
  - name: rows of the table and of VALUES
    input: {t: [{a: 1}]}
    expect: {query_1: [{a: 1}, {a: 7}, {a: 8}]}
"""
    code, out, _ = clink_test(tmp_path, sql, cases, capsys)
    assert code == 0, out


def test_ordered_rows_compare_in_order(tmp_path, capsys):
    sql = "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\nSELECT a * 10 AS b FROM t;\n"
    cases = """\
cases:
  - name: in order
    input: {t: [{a: 1}, {a: 2}, {a: 3}]}
    expect:
      query_1: {rows: [{b: 10}, {b: 20}, {b: 30}], ordered: true}
  - name: out of order
    input: {t: [{a: 1}, {a: 2}, {a: 3}]}
    expect:
      query_1: {rows: [{b: 20}, {b: 10}, {b: 30}], ordered: true}
  - name: out of order, as a multiset
    input: {t: [{a: 1}, {a: 2}, {a: 3}]}
    expect:
      query_1: [{b: 20}, {b: 10}, {b: 30}]
"""
    code, out, _ = clink_test(tmp_path, sql, cases, capsys)
    assert code == 1
    assert out.splitlines()[-1] == "3 cases: 2 passed, 1 failed"
    assert "FAIL  out of order  (" in out
    assert "  query_1: the rows differ (- expected, + produced)\n" in out


@settings(max_examples=15)
@given(words=st.lists(st.sampled_from(["a", "b", "c"]), max_size=12),
       cuts=st.lists(st.integers(0, 12), max_size=4))
def test_final_counts_match_whatever_the_batches(tmp_path_factory, words, cuts):
    """However the words are split into batches, the final rows of the updating count are the
    counts of the words; and a count one too high fails."""
    from clink._cases import load_case_file, pipeline_plan, run_case

    tmp = tmp_path_factory.mktemp("prop")
    bounds = sorted({0, len(words), *(c for c in cuts if c <= len(words))})
    groups = [{"words": [{"w": w} for w in words[lo:hi]]} for lo, hi in zip(bounds, bounds[1:])]
    counts = Counter(words)
    right = [{"w": w, "n": n} for w, n in counts.items()]
    wrong = [{"w": w, "n": n + 1} for w, n in counts.items()] or [{"w": "a", "n": 1}]
    data = {"cases": [{"name": "right", "input": groups, "expect": {"query_1": right}},
                      {"name": "wrong", "input": groups, "expect": {"query_1": wrong}}]}
    path = write(tmp, "cases.json", json.dumps(data))
    plan = pipeline_plan(write(tmp, "words.sql", WORDS))
    first, second = (run_case(plan, case) for case in load_case_file(path).cases)
    assert first.passed, first.report
    assert not second.passed


def test_advance_watermark_fires_an_embedded_jobs_window():
    import clink

    plan = clink.compile(BID.split("CREATE TABLE totals")[0].replace(
        "'connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '127.0.0.1:9',\n"
        "        'format' = 'json'", "'connector' = 'push'")
        + "SELECT window_start, SUM(price) AS price FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
          "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end", name="bids.sql")
    job = plan.start()
    job.push("Bid", [{"bidtime": "2020-04-15 08:05:00", "price": 4}])
    assert job.poll() is None
    job.advance_watermark("Bid", 1586938200000)  # 2020-04-15 08:10:00
    assert [r["price"] for r in job.poll().to_pylist()] == [Decimal("4.00")]


def _table(nulls: float, seed: int) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [{"k": None if rng.random() < nulls else rng.randrange(4),
             "v": None if rng.random() < nulls else rng.randrange(-50, 50)} for _ in range(40)]


@pytest.mark.parametrize("nulls", [0.0, 0.5], ids=["dense", "null-heavy"])
def test_expected_rows_from_duckdb_pass_and_a_changed_one_fails(tmp_path, capsys, nulls):
    """A case whose expected rows are DuckDB's answer for the same rows, fed in batches of three,
    passes; with one value changed it fails and names that row. NULL keys and NULL sums compare
    as equal to NULL, as SQL's GROUP BY groups them."""
    from tests.shared_duckdb import connect

    rows = _table(nulls, seed=17)
    db = connect()
    db.execute("CREATE TEMP TABLE t (k INTEGER, v INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(r["k"], r["v"]) for r in rows])
    want = db.execute("SELECT k, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS lo FROM t GROUP BY k").fetchall()
    expected = [{"k": k, "c": c, "s": None if s is None else int(s), "lo": lo} for k, c, s, lo in want]
    sql = ("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen');\n"
           "SELECT k, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS lo FROM t GROUP BY k;\n")
    batches = [{"t": rows[i:i + 3]} for i in range(0, len(rows), 3)]
    changed = [dict(expected[0], c=expected[0]["c"] + 1), *expected[1:]]
    cases = {"cases": [{"name": "as DuckDB", "input": batches, "expect": {"query_1": expected}},
                       {"name": "one count off", "input": batches, "expect": {"query_1": changed}}]}
    code, out, _ = clink_test(tmp_path, sql, json.dumps(cases), capsys, cases_name="cases.json")
    assert code == 1
    assert "PASS  as DuckDB  (" in out
    assert "FAIL  one count off  (" in out
    assert "  query_1: 1 row missing, 1 row unexpected" in out
    k = "null" if expected[0]["k"] is None else expected[0]["k"]
    assert f"    - {{k: {k}, c: {expected[0]['c'] + 1}, " in out


def test_a_pipeline_that_fails_fails_the_case(tmp_path, capsys):
    sql = "CREATE TABLE t (s STRING) WITH ('connector' = 'datagen');\nSELECT CAST(s AS INT) AS n FROM t;\n"
    cases = """\
cases:
  - name: not a number
    input: {t: [{s: "12"}, {s: twelve}]}
    expect: {query_1: [{n: 12}]}
"""
    code, out, _ = clink_test(tmp_path, sql, cases, capsys)
    assert code == 1
    assert "FAIL  not a number  (" in out
    assert "  the pipeline failed: cannot CAST 'twelve' to INT" in out
