"""The dashboard's server: what /api/plan, /api/metrics and /events answer for a running job,
checked against the job's own metrics table (through DuckDB) and its SQL; the token off the
loopback address; ``clink run --ui`` from the command line. The page itself is driven in
Chromium by test_dashboard_browser.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clink
from clink import cli
from clink.errors import UsageError
from clink.ui import serve
from clink.ui.server import _LARGEST as LARGEST, _SUMMED as SUMMED, fold_subtasks

WINDOWED = """CREATE TABLE bids (
  auction BIGINT,
  price   BIGINT,
  ts      TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'push');

SELECT auction, window_start, COUNT(*) AS bids, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
"""

CAST = ("CREATE TABLE t (id BIGINT, s STRING) WITH ('connector' = 'push');\n"
        "SELECT id, CAST(s AS INT) AS n FROM t;\n")


def bids(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ms = np.sort(rng.integers(0, 60_000, n))
    return pa.table({
        "auction": pa.array(rng.integers(0, 25, n), pa.int64()),
        "price": pa.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 100, n)), pa.int64()),
        "ts": pa.array(np.datetime64("2024-01-01", "ms") + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
    })


def get(url: str, headers: dict | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def get_json(url: str):
    return json.loads(get(url)[2])


def events(url: str, count: int, until=lambda snapshot: True, limit: int = 30) -> list[dict]:
    """Read snapshots from the event stream at ``url`` until ``count`` of them satisfy ``until``
    (or ``limit`` were read: then the test fails on what it got)."""
    got, matching = [], 0
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                assert line == "", line  # events are separated by one empty line
                continue
            got.append(json.loads(line[6:]))
            matching += bool(until(got[-1]))
            if matching >= count or len(got) >= limit:
                break
    return got


def source_rows(snapshot: dict) -> int:
    return sum(r["records_in"] for r in snapshot["operators"] if r["kind"] == "source")


def test_events_stream_a_snapshot_a_second_that_follows_the_job():
    job = clink.compile(WINDOWED, name="windowed.sql").start(background=True)
    with serve(job, sql=WINDOWED, name="windowed.sql") as board:
        first = events(board.url + "events", 1)[0]
        assert first["state"] == "running" and source_rows(first) == 0
        data = bids(3000, 1)
        job.push("bids", data)
        later = events(board.url + "events", 2, until=lambda s: source_rows(s) == data.num_rows)
        seqs = [s["seq"] for s in later]
        assert seqs == sorted(set(seqs)) and seqs[0] >= first["seq"]
        assert sum(s["seq"] > first["seq"] for s in later) >= 2  # two new snapshots, one a second
        last = later[-1]
        source = next(r for r in last["operators"] if r["kind"] == "source")
        assert source["records_out"] == data.num_rows and source["operator"] == "source:bids"
        assert source["watermark"] == int(data["ts"][-1].value) - 1000  # ts - INTERVAL '1' SECOND
        window = [r for r in last["operators"] if r["kind"] == "window"]
        # The window reads partial counts (made per key and pane before the exchange), not rows.
        assert len(window) == 1 and window[0]["records_in"] > 0
        assert window[0]["state_rows"] > 0  # the windows of the last 10 s wait for the watermark
        job.close_input("bids")
        job.wait(timeout=30)
    assert job.finished


def test_closing_sends_the_final_state_and_ends_the_open_streams():
    job = clink.compile(WINDOWED, name="windowed.sql").start(background=True)
    board = serve(job, sql=WINDOWED, name="windowed.sql")
    seen: list[dict] = []
    response = urllib.request.urlopen(board.url + "events", timeout=10)

    def read() -> None:
        for raw in response:
            if raw.startswith(b"data: "):
                seen.append(json.loads(raw[6:]))

    reader = threading.Thread(target=read)
    reader.start()
    job.push("bids", bids(500, 3))
    job.close_input("bids")
    job.wait(timeout=30)
    board.close()
    reader.join(timeout=10)
    assert not reader.is_alive()  # the stream ended with the server
    assert seen[0]["state"] == "running" and seen[-1]["state"] == "finished"
    assert source_rows(seen[-1]) == 500
    assert refused(board.port)


def test_operator_totals_are_the_subtask_rows_summed_as_duckdb_sums_them():
    job = clink.compile(WINDOWED, name="windowed.sql").start(config={"parallelism.default": "2"})
    data = bids(4000, 2)
    job.push("bids", data)
    job.run_until_idle()
    with serve(job, sql=WINDOWED, name="windowed.sql") as board:
        snapshot = get_json(board.url + "api/metrics")
        table = pa.table(job.metrics())
    assert snapshot["state"] == "running"
    subtasks = duckdb.sql("""
        SELECT operator, COUNT(*) AS subtasks, SUM(records_in) AS records_in, SUM(records_out) AS records_out,
               SUM(state_rows) AS state_rows, SUM(state_bytes) AS state_bytes, SUM(late_records) AS late_records,
               MIN(epoch_ms(watermark)) AS watermark, MAX(watermark_lag_ms) AS lag
        FROM "table" GROUP BY operator ORDER BY operator""").fetchall()
    assert any(row[1] == 2 for row in subtasks)  # some operators do run as two subtasks
    ours = sorted((r["operator"], r["subtasks"], r["records_in"], r["records_out"], r["state_rows"],
                   r["state_bytes"], r["late_records"], r["watermark"]) for r in snapshot["operators"])
    assert ours == [row[:8] for row in subtasks]
    assert len(snapshot["subtasks"]) == table.num_rows


def test_the_plan_names_operators_as_the_metrics_do_and_places_them_in_the_sql():
    job = clink.compile(WINDOWED, name="windowed.sql").start()
    with serve(job, sql=WINDOWED, name="windowed.sql") as board:
        plan = get_json(board.url + "api/plan")
        metrics = pa.table(job.metrics())
    assert plan["sources"] == [{"name": "windowed.sql", "text": WINDOWED}]
    assert {n["operator"] for n in plan["nodes"]} == set(metrics.column("operator").to_pylist())
    depth = {n["id"]: n["depth"] for n in plan["nodes"]}
    assert {(e["from"], e["to"]) for e in plan["edges"]} == {(i, n["id"]) for n in plan["nodes"] for i in n["inputs"]}
    assert all(depth[e["to"]] > depth[e["from"]] for e in plan["edges"])
    lines = WINDOWED.splitlines()
    placed = {n["kind"]: lines[n["line"] - 1][n["col"] - 1:] for n in plan["nodes"] if n["line"]}
    assert placed["source"].startswith("TABLE bids, DESCRIPTOR(ts)")
    assert placed["window"].startswith("SELECT auction, window_start")
    assert placed["sink"].startswith("SELECT auction, window_start")
    assert [n["label"] for n in plan["nodes"] if n["kind"] == "window"] == [
        "GROUP BY (auction) computing COUNT(*), SUM(price)"]
    # Rows go to the window's subtasks by its key, and to the one sink subtask.
    assert [n["label"] for n in plan["nodes"] if n["kind"] == "exchange"] == ["hash(auction)", "single"]
    for node in plan["nodes"]:
        assert (node["line"] is None) == (node["span"] == "")
        if node["line"]:
            assert node["span"].startswith(f"windowed.sql:{node['line']}:{node['col']}")


def test_a_failed_job_shows_its_error_with_the_sql_position():
    job = clink.compile(CAST, name="cast.sql").start(background=True)
    with serve(job, sql=CAST, name="cast.sql") as board:
        job.push("t", [{"id": 1, "s": "12"}, {"id": 2, "s": "twelve"}])
        with pytest.raises(clink.PipelineError):
            job.wait(timeout=10)
        failed = events(board.url + "events", 1, until=lambda s: s["state"] == "failed")[-1]
    error = failed["error"]
    assert error["position"] == "cast.sql:2:12"
    assert error["message"] == "cannot CAST 'twelve' to INT"
    assert error["text"].startswith("cast.sql:2:12: error: pipeline failed: cannot CAST 'twelve' to INT\n")
    assert error["text"].splitlines()[1:3] == [" 2 | SELECT id, CAST(s AS INT) AS n FROM t;",
                                               "   |            ^^^^^^^^^^^^^^"]


nullable = st.none() | st.integers(0, 10**6)
subtask_rows = st.lists(st.fixed_dictionaries({
    "operator": st.sampled_from(["source:t", "window-1", "sink:s"]),
    **{c: st.integers(0, 10**6) for c in ("records_in", "records_out", "bytes_in", "bytes_out", "late_records",
                                          "skipped_records", "state_rows", "state_bytes")},
    **{c: st.floats(0, 1e6) for c in ("records_in_per_s", "records_out_per_s", "busy_ms", "backpressured_ms",
                                      "alignment_ms")},
    **{c: st.floats(0, 1) for c in ("busy_ratio", "backpressured_ratio")},
    **{c: nullable for c in ("watermark", "watermark_lag_ms", "latency_p50_ms", "latency_p99_ms",
                             "ingestion_latency_p50_ms", "ingestion_latency_p99_ms")},
}), max_size=12)


@settings(max_examples=60)
@given(rows=subtask_rows)
def test_folding_subtasks_is_a_group_by_operator(rows):
    folded = fold_subtasks(rows)
    assert [r["operator"] for r in folded] == list(dict.fromkeys(r["operator"] for r in rows))
    if not rows:
        return
    con = duckdb.connect()
    con.register("subtasks", pa.Table.from_pylist(rows))
    summed = ", ".join(f"SUM({c})" for c in SUMMED)
    largest = ", ".join(f"MAX({c})" for c in LARGEST)
    expected = {row[0]: row[1:] for row in con.execute(
        f"SELECT operator, COUNT(*), {summed}, {largest}, MIN(watermark) FROM subtasks GROUP BY operator").fetchall()}
    for r in folded:
        got = (r["subtasks"], *(r[c] for c in SUMMED), *(r[c] for c in LARGEST), r["watermark"])
        want = expected[r["operator"]]
        assert [g is None for g in got] == [w is None for w in want]
        assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None], rel=1e-9)


FAILING = """CREATE TABLE words (id BIGINT, s STRING)
  WITH ('connector' = 'datagen', 'number-of-rows' = '50', 'fields.s.length' = '6');

CREATE TABLE numbers (id BIGINT, n INT) WITH ('connector' = 'blackhole');

INSERT INTO numbers
SELECT id, CAST(s AS INT) FROM words;
"""


def test_a_run_that_raises_shows_the_error_and_how_far_it_got():
    # As clink run --ui does it: the runtime Job runs in this thread; its error is handed over.
    from clink.runtime.context import RuntimeContext
    from clink.runtime.executor import Job

    job = Job(clink.compile(FAILING, name="failing.sql").runtime_plan, RuntimeContext())
    board = serve(job, sql=FAILING, name="failing.sql")
    stream = urllib.request.urlopen(board.url + "events", timeout=10)
    with pytest.raises(clink.PipelineError) as raised:
        job.run()
    board.fail(raised.value)
    board.close()
    last = [json.loads(raw[6:]) for raw in stream if raw.startswith(b"data: ")][-1]
    assert last["state"] == "failed"
    assert last["error"]["position"] == f"failing.sql:{FAILING.splitlines().index('SELECT id, CAST(s AS INT) FROM words;') + 1}:12"
    assert "cannot CAST" in last["error"]["message"]
    assert source_rows(last) > 0  # the counters were brought up to date after the failure


# -- who may ask ----------------------------------------------------------------------------------

def status_of(url: str, headers: dict | None = None) -> int:
    try:
        return get(url, headers)[0]
    except urllib.error.HTTPError as exc:
        return exc.code


def test_off_the_loopback_address_every_request_needs_the_token(monkeypatch):
    monkeypatch.delenv("CLINK_UI_TOKEN", raising=False)
    job = clink.compile(WINDOWED, name="windowed.sql").start()
    with serve(job, sql=WINDOWED, host="0.0.0.0") as board:
        assert board.token and f"?token={board.token}" in board.url
        base = f"http://127.0.0.1:{board.port}"
        for path in ("/", "/api/plan", "/api/metrics", "/events", "/static/app.js", "/static/style.css"):
            assert status_of(base + path) == 401, path
            assert status_of(base + path + "?token=not-it") == 401, path
            assert status_of(base + path, {"Authorization": "Bearer not-it"}) == 401, path
            assert status_of(base + path, {"Cookie": "clink_ui_token=not-it"}) == 401, path
        status, headers, body = get(board.url)
        assert status == 200 and b'<svg id="graph"' in body
        cookie = headers["Set-Cookie"].split(";")[0]
        assert cookie == f"clink_ui_token={board.token}" and "HttpOnly" in headers["Set-Cookie"]
        assert status_of(base + "/static/app.js", {"Cookie": cookie}) == 200
        assert status_of(base + "/api/plan", {"Authorization": f"Bearer {board.token}"}) == 200
        assert events(f"{base}/events?token={board.token}", 1)[0]["state"] == "running"
        first_token = board.token
    with serve(job, host="0.0.0.0") as board:  # a new server, a new random token
        assert board.token != first_token
        assert status_of(f"http://127.0.0.1:{board.port}/api/plan?token={first_token}") == 401
    monkeypatch.setenv("CLINK_UI_TOKEN", "a-token-the-user-chose")
    with serve(job, host="0.0.0.0") as board:
        assert board.token == "a-token-the-user-chose"
        assert status_of(f"http://127.0.0.1:{board.port}/api/plan?token=a-token-the-user-chose") == 200
        assert status_of(f"http://127.0.0.1:{board.port}/api/plan") == 401


def test_on_the_loopback_address_only_loopback_host_names_are_answered():
    job = clink.compile(WINDOWED, name="windowed.sql").start()
    with serve(job) as board:
        assert board.token is None and board.url == f"http://127.0.0.1:{board.port}/"
        assert status_of(board.url + "api/plan") == 200
        assert status_of(board.url + "api/plan", {"Host": f"localhost:{board.port}"}) == 200
        # A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) is refused.
        assert status_of(board.url + "api/plan", {"Host": f"rebind.example:{board.port}"}) == 403
        assert status_of(board.url + "static/../server.py") == 404
        assert status_of(board.url + "static/server.py") == 404


# -- clink run --ui ---------------------------------------------------------------------------------

BOUNDED = """CREATE TABLE datagen (
  event_type INT,
  bid ROW<auction BIGINT, price BIGINT, dateTime TIMESTAMP(3)>
) WITH ('connector' = 'nexmark', 'events.num' = '5000');

CREATE TABLE counts (auction BIGINT, bids BIGINT) WITH ('connector' = 'blackhole');

INSERT INTO counts
SELECT bid.auction, COUNT(*) FROM datagen WHERE event_type = 2 GROUP BY bid.auction;
"""


def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_clink_run_ui_serves_while_the_job_runs_and_ends_with_it(tmp_path, capsys):
    path = tmp_path / "bounded.sql"
    path.write_text(BOUNDED)
    assert cli.main(["run", str(path), "--ui", "--ui-port", "0"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("dashboard: "))
    url = line.removeprefix("dashboard: ")
    assert url.startswith("http://127.0.0.1:") and url.endswith("/")
    assert refused(int(url.rsplit(":", 1)[1].strip("/")))
    assert "5000 rows in" in err


def test_clink_submit_has_no_ui_a_submitted_job_is_shown_by_clink_jobs(tmp_path, capsys):
    path = tmp_path / "bounded.sql"
    path.write_text(BOUNDED)
    with pytest.raises(SystemExit) as exited:
        cli.main(["submit", str(path), "--ui", "--ray-address", "127.0.0.1:1"])
    assert exited.value.code == 2 and "unrecognized arguments: --ui" in capsys.readouterr().err


def test_clink_run_ui_port_taken_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "bounded.sql"
    path.write_text(BOUNDED)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["run", str(path), "--ui", "--ui-port", str(port)]) == 2
    assert f"cannot serve the dashboard on 127.0.0.1:{port}" in capsys.readouterr().err


def test_the_dashboard_serves_on_an_ipv6_loopback_address():
    job = clink.compile(WINDOWED, name="windowed.sql").start()
    try:
        board = serve(job, host="::1")
    except UsageError as exc:  # a machine without IPv6 says so; the test then checks that message
        assert "cannot serve the dashboard on ::1:0" in str(exc)
        return
    with board:
        assert board.url == f"http://[::1]:{board.port}/" and board.token is None
        assert get_json(board.url + "api/metrics")["state"] == "running"


def test_only_a_job_of_this_process_is_served():
    class Elsewhere:  # as a job on Ray looks from here: a handle, no runtime Job inside
        _job = object()

    with pytest.raises(UsageError, match="the dashboard shows a job that runs in this process, not Elsewhere"):
        serve(Elsewhere())


def test_the_runtime_never_imports_the_dashboard_and_the_dashboard_never_the_compiler():
    check = ("import sys, clink.runtime, clink.runtime.executor, clink.runtime.loader; "
             "assert not [m for m in sys.modules if m.startswith('clink.ui')]; "
             "import clink.ui.server; "
             "print(sorted(m for m in sys.modules if m == 'lark' or m.startswith(('lark.', 'clink.compiler', "
             "'clink.grammar'))))")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
