"""Queryable state: ``job.state(uid)`` on a running job and ``clink state DIR`` on its checkpoint.

A group aggregate and a window aggregate run over generated rows (a dense table and a NULL-heavy
one), pushed in small batches; at a checkpoint the state table must equal DuckDB's GROUP BY over
the rows pushed so far (for the window: over the windows not yet fired), on the memory and the
sqlite backend, at parallelism 1 and 2; and ``clink state`` must read the same table from that
checkpoint."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clink
from clink.cli import main
from clink.errors import UsageError
from tests.shared_duckdb import assert_same_rows, connect

DDL = """\
CREATE TABLE t (
  k  BIGINT,
  x  BIGINT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'push');
"""
GROUP = ("SELECT k, COUNT(*) AS n, COUNT(x) AS c, SUM(x) AS s, AVG(x) AS a, MIN(x) AS lo, MAX(x) AS hi, "
         "COUNT(DISTINCT x) AS d FROM t GROUP BY k;\n")
GROUP_DUCK = ("SELECT k, COUNT(*), COUNT(x), SUM(x), CAST(TRUNC(AVG(x)) AS BIGINT), MIN(x), MAX(x), "
              "COUNT(DISTINCT x) FROM rows GROUP BY k")
WINDOW = ("SELECT k, window_start, window_end, COUNT(*) AS n, SUM(x) AS s, MAX(x) AS hi, AVG(x) AS a "
          "FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)) "
          "GROUP BY window_start, window_end, k;\n")
TUMBLE = WINDOW.replace("HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)",
                        "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)")
T0 = np.datetime64("2024-01-01T00:00:00", "ms")


def make_rows(n: int, *, null_heavy: bool, seed: int = 3) -> pa.Table:
    """``n`` rows in event-time order (none late), over about two minutes."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 25, n)
    x = rng.integers(-50, 50, n)
    ts = T0 + np.sort(rng.integers(0, 120_000, n)).astype("timedelta64[ms]")
    k_null = rng.random(n) < (0.3 if null_heavy else 0.0)
    x_null = rng.random(n) < (0.4 if null_heavy else 0.0)
    return pa.table({"k": pa.array(k, mask=k_null), "x": pa.array(x, mask=x_null), "ts": ts})


def push_in_batches(job, rows: pa.Table, size: int) -> None:
    for start in range(0, rows.num_rows, size):
        job.push("t", rows.slice(start, size))
        job.run_until_idle()


def operator(job, kind: str) -> str:
    (uid,) = [o["id"] for o in job.operators() if o["kind"] == kind]
    return uid


def duck(query: str, rows: pa.Table) -> list[tuple]:
    con = connect()
    con.register("rows", rows)
    return con.execute(query).fetchall()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("null_heavy", [False, True], ids=["dense", "nulls"])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_group_state_at_a_checkpoint_equals_duckdb(tmp_path: Path, backend: str, null_heavy: bool,
                                                    parallelism: int) -> None:
    rows = make_rows(3000, null_heavy=null_heavy)
    job = clink.compile(DDL + GROUP, name="group.sql").start(
        state_dir=tmp_path, config={"state.backend": backend, "parallelism.default": str(parallelism)})
    uid = operator(job, "group")
    read = 1700
    push_in_batches(job, rows.slice(0, read), 97)
    job.checkpoint()
    state = job.state(uid)
    assert state.column_names == ["k", "COUNT(*)", "COUNT(x)", "SUM(x)", "AVG(x)", "MIN(x)", "MAX(x)",
                                  "COUNT(DISTINCT x)"]
    assert_same_rows(state, duck(GROUP_DUCK, rows.slice(0, read)))

    out = tmp_path / "state.parquet"
    assert main(["state", str(tmp_path), "--operator", uid, "--format", "parquet", "-o", str(out)]) == 0
    assert pq.read_table(out).equals(state)

    # The state goes on with the job: more rows, a newer state, still DuckDB's.
    push_in_batches(job, rows.slice(read), 211)
    assert_same_rows(job.state(uid), duck(GROUP_DUCK, rows))
    job.close_input("t")
    job.wait()


def open_windows_duck(rows: pa.Table, watermark_ms: int) -> list[tuple]:
    # Each row is in the four 20-second windows that start at the 5-second marks before it.
    query = f"""
        SELECT k, make_timestamp(w * 1000), make_timestamp((w + 20000) * 1000),
               COUNT(*), SUM(x), MAX(x), CAST(TRUNC(AVG(x)) AS BIGINT)
        FROM (SELECT *, (epoch_ms(ts::TIMESTAMP) // 5000) * 5000 - j * 5000 AS w
              FROM rows, range(4) AS r(j))
        WHERE w + 20000 > {watermark_ms}
        GROUP BY k, w"""
    return duck(query, rows)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("null_heavy", [False, True], ids=["dense", "nulls"])
def test_window_state_holds_the_open_windows_as_duckdb_computes_them(tmp_path: Path, backend: str,
                                                                       null_heavy: bool) -> None:
    rows = make_rows(2000, null_heavy=null_heavy, seed=11)
    job = clink.compile(DDL + WINDOW, name="window.sql").start(state_dir=tmp_path, config={"state.backend": backend})
    uid = operator(job, "window")
    read = 1234
    pushed = rows.slice(0, read)
    push_in_batches(job, pushed, 50)
    job.checkpoint()
    state = job.state(uid)
    watermark = int(pushed["ts"].cast(pa.int64()).to_numpy().max()) - 1000
    expected = open_windows_duck(pushed, watermark)
    assert len({r[1] for r in expected}) == 4  # four windows are open
    assert_same_rows(state, expected)

    out = tmp_path / "state.csv"
    assert main(["state", str(tmp_path), "--operator", uid, "--format", "csv", "-o", str(out)]) == 0
    import pyarrow.csv as csv

    read_back = csv.read_csv(out, convert_options=csv.ConvertOptions(column_types=state.schema))
    assert read_back.equals(state)
    job.close_input("t")
    job.wait()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), read=st.integers(0, 400), batch=st.integers(1, 120),
       null_heavy=st.booleans())
def test_group_state_equals_duckdb_wherever_the_input_stops(tmp_path_factory, seed: int, read: int, batch: int,
                                                            null_heavy: bool) -> None:
    rows = make_rows(400, null_heavy=null_heavy, seed=seed).slice(0, read)
    job = clink.compile(DDL + GROUP, name="group.sql").start()
    push_in_batches(job, rows, batch)
    assert_same_rows(job.state(operator(job, "group")), duck(GROUP_DUCK, rows))
    job.close_input("t")
    job.wait()


def test_the_state_table_is_an_arrow_stream_duckdb_reads(tmp_path: Path) -> None:
    rows = make_rows(500, null_heavy=True)
    job = clink.compile(DDL + GROUP, name="group.sql").start()
    push_in_batches(job, rows, 64)
    state = job.state(operator(job, "group"))

    class Stream:  # nothing but the Arrow PyCapsule stream interface
        def __arrow_c_stream__(self, requested_schema=None):
            return state.__arrow_c_stream__(requested_schema)

    con = connect()
    con.register("stream", Stream())
    got = con.execute('SELECT k, "COUNT(*)", "SUM(x)" FROM stream').fetchall()
    expected = duck("SELECT k, COUNT(*), SUM(x) FROM rows GROUP BY k", rows)
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    job.close_input("t")
    job.wait()


def test_an_unknown_operator_names_those_there_are() -> None:
    job = clink.compile(DDL + GROUP + WINDOW, name="two.sql").start()
    kinds = {o["kind"] for o in job.operators()}
    assert {"source", "group", "window", "sink"} <= kinds
    assert all(o["position"].startswith("two.sql:") for o in job.operators())
    with pytest.raises(UsageError, match=r"no stateful operator 'group-x'; the operators with state are: "
                                         r"group-\w+, window-\w+"):
        job.state("group-x")
    job.close_input("t")
    job.wait()
    with pytest.raises(UsageError, match="has ended"):
        job.state(operator(job, "group"))


def test_clink_state_lists_the_operators_of_a_checkpoint(tmp_path: Path, capsys) -> None:
    rows = make_rows(300, null_heavy=False)
    job = clink.compile(DDL + GROUP + WINDOW, name="two.sql").start(state_dir=tmp_path)
    push_in_batches(job, rows, 100)
    job.checkpoint()
    group, window = operator(job, "group"), operator(job, "window")
    sizes = {group: job.state(group).num_rows, window: job.state(window).num_rows}
    capsys.readouterr()
    assert main(["state", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for uid, n in sizes.items():
        line = next(line for line in out.splitlines() if uid in line)
        assert line.split("│")[-2].strip() == str(n)
    assert main(["state", str(tmp_path), "--operator", "nope"]) == 2
    assert "the operators with state are: " in capsys.readouterr().err
    assert main(["state", str(tmp_path), "--operator", group, "--format", "json", "-o", str(tmp_path / "s.json")]) == 0
    assert len((tmp_path / "s.json").read_text().splitlines()) == sizes[group]
    assert main(["state", str(tmp_path / "nothing")]) == 2
    job.close_input("t")
    job.wait()


def test_dates_of_window_state_are_wall_clock_timestamps() -> None:
    job = clink.compile(DDL + TUMBLE, name="w.sql").start()
    job.push("t", [{"k": 1, "x": 4, "ts": "2024-01-01 00:00:03"}, {"k": 1, "x": 6, "ts": "2024-01-01 00:00:05"}])
    job.run_until_idle()
    (row,) = job.state(operator(job, "window")).to_pylist()
    assert row == {"k": 1, "window_start": dt.datetime(2024, 1, 1), "window_end": dt.datetime(2024, 1, 1, 0, 0, 10),
                   "COUNT(*)": 2, "SUM(x)": 10, "MAX(x)": 6, "AVG(x)": 5}
    job.close_input("t")
    job.wait()


def test_a_result_of_clink_sql_shows_its_state_between_batches() -> None:
    sql = ("CREATE TABLE g (k BIGINT, x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '2000', "
           "'batch-size' = '250', 'seed' = '5', 'fields.k.min' = '1', 'fields.k.max' = '9', "
           "'fields.x.min' = '-5', 'fields.x.max' = '5');\n"
           "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM g GROUP BY k;\n")
    result = clink.sql(sql)
    (uid,) = [o["id"] for o in result.operators() if o["kind"] == "group"]
    seen, checked = [], 0
    batches = iter(result)
    for batch in batches:
        # The state after a batch holds each key's newest +I / +U row of the changelog so far.
        seen.append(batch)
        latest = {}
        for row in pa.Table.from_batches(seen).to_pylist():
            if row["_rowkind"] in ("+I", "+U"):
                latest[row["k"]] = (row["k"], row["n"], row["s"])
        try:
            state = result.state(uid)
        except UsageError as exc:  # the step that gave the last batch ended the job
            assert "has ended" in str(exc) and next(batches, None) is None
            break
        assert_same_rows(state, list(latest.values()))
        checked += 1
    assert checked > 1


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_join_shows_each_sides_stored_rows(tmp_path: Path, backend: str) -> None:
    sql = ("CREATE TABLE a (k BIGINT, x BIGINT) WITH ('connector' = 'push');\n"
           "CREATE TABLE b (k BIGINT, y STRING) WITH ('connector' = 'push');\n"
           "SELECT a.k, x, y FROM a JOIN b ON a.k = b.k;\n")
    job = clink.compile(sql, name="j.sql").start(state_dir=tmp_path, config={"state.backend": backend})
    left = [{"k": 1, "x": 5}, {"k": 2, "x": 6}, {"k": 1, "x": 9}, {"k": None, "x": 3}]
    job.push("a", left)
    job.push("b", [{"k": 1, "y": "p"}])
    job.run_until_idle()
    uid = operator(job, "join")
    state = job.state(uid)
    assert sorted(state["_state"].to_pylist()) == ["left"] * 3 + ["right"]  # a NULL key joins nothing
    sides = job.state(uid, state="left")
    assert sorted(zip(sides["c0"].to_pylist(), sides["c1"].to_pylist())) == [(1, 5), (1, 9), (2, 6)]
    with pytest.raises(UsageError, match="keeps no state 'middle'; it keeps: left, right"):
        job.state(uid, state="middle")
    job.checkpoint()
    out = tmp_path / "join.parquet"
    assert main(["state", str(tmp_path), "--operator", uid, "--format", "parquet", "-o", str(out)]) == 0
    assert pq.read_table(out).equals(state)
    job.stop()
