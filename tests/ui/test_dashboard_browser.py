"""The dashboard in headless Chromium: ``clink run --ui`` runs Nexmark's q5 (hot items) at a
limited rate with checkpoints every second; the page, opened over the DevTools protocol
(tests/ui/browser.py), must show the query's operators, numbers that move between two looks,
checkpoints as they complete, the SQL linked to the operators, and the job's end. A screenshot
is kept as a test artefact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.ui.browser import Browser, keep_artefact

Q5 = """CREATE TABLE datagen (
  event_type INT,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
  dateTime AS bid.dateTime,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('connector' = 'nexmark', 'rate.limited' = 'true', 'first-event.rate' = '2000',
        'batch-size' = '200');

CREATE VIEW bid AS
SELECT bid.auction, bid.bidder, bid.price, dateTime FROM datagen WHERE event_type = 2;

CREATE TABLE hot_items (auction BIGINT, num BIGINT) WITH ('connector' = 'blackhole');

INSERT INTO hot_items
SELECT AuctionBids.auction, AuctionBids.num
FROM (
    SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
        FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn;
"""

# What the page shows, read from its DOM.
OPERATORS = "[...document.querySelectorAll('#graph .node')].map(g => g.dataset.operator)"
ROWS = "[...document.querySelectorAll('#operators tbody tr')].map(tr => tr.dataset.operator)"
VALUE = ("Number(document.querySelector('#operators tr[data-operator=\"{op}\"] td[data-metric=\"{metric}\"]')"
         ".dataset.value)")
CHECKPOINTS = "[...document.querySelectorAll('#checkpoints tbody tr')].map(tr => Number(tr.dataset.checkpoint))"
STATE = "document.getElementById('job-state').dataset.state"


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(Q5.splitlines(), 1) if text in line)


def test_the_page_shows_a_running_nexmark_query_and_its_end(tmp_path: Path):
    pipeline = tmp_path / "q5.sql"
    pipeline.write_text(Q5)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run = subprocess.Popen(
        [sys.executable, "-m", "clink", "run", str(pipeline), "--ui", "--state-dir", str(tmp_path / "state"),
         "--set", "execution.checkpointing.interval=1s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    browser = None
    try:
        url = None
        while url is None:
            line = run.stderr.readline()
            assert line, f"clink run ended before printing the dashboard's address (exit {run.wait()})"
            if line.startswith("dashboard: "):
                url = line.removeprefix("dashboard: ").strip()
        browser = Browser(tmp_path / "chromium")
        browser.open(url)
        browser.wait_for(f"{OPERATORS}.length > 0 && "
                         f"document.querySelectorAll('#operators tbody tr').length === {OPERATORS}.length")

        # The graph: every node of the plan, the query's own operators among them.
        operators = browser.evaluate(OPERATORS)
        assert operators[0] == "source:datagen" and operators[-1] == "sink:hot_items"
        kinds = browser.evaluate("[...document.querySelectorAll('#graph .node')].map(g => g.dataset.kind)")
        assert kinds.count("window") == 2 and kinds.count("join") == 1
        assert sorted(browser.evaluate(ROWS)) == sorted(operators)
        edges = browser.evaluate("document.querySelectorAll('#graph path.edge').length")
        assert edges == len(operators)  # a chain of nodes and one join of two inputs: n - 1 + 1

        # The SQL: each line an operator came from is linked to it; hovering it highlights the box.
        join = next(op for op, kind in zip(operators, kinds, strict=True) if kind == "join")
        sink_line = line_of("INSERT INTO hot_items")
        linked = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.sql-line[data-operators]')]"
            ".map(l => [l.dataset.line, l.dataset.operators]))")
        assert linked[str(sink_line)] == "sink:hot_items"
        assert linked[str(line_of("FROM datagen WHERE event_type = 2"))] == "source:datagen"
        windows = [op for op, kind in zip(operators, kinds, strict=True) if kind == "window"]
        assert linked == {  # the window counting bids per auction feeds both sides of the join
            str(line_of("FROM datagen WHERE event_type = 2")): "source:datagen",
            str(sink_line): "sink:hot_items",
            str(line_of("FROM (")): join,
            str(line_of("SELECT auction, COUNT(*) AS num")): windows[0],
            str(line_of("SELECT MAX(CountBids.num)")): windows[1],
        }
        browser.evaluate(f"document.querySelector('.sql-line[data-line=\"{sink_line}\"]')"
                         ".dispatchEvent(new MouseEvent('mouseenter'))")
        assert browser.evaluate("[...document.querySelectorAll('#graph .node.highlight')]"
                                ".map(g => g.dataset.operator)") == ["sink:hot_items"]

        # Two looks a few seconds apart: rows move, the watermark moves, checkpoints complete.
        first_rows = browser.wait_for(VALUE.format(op="source:datagen", metric="records_in"))
        first_mark = browser.wait_for(VALUE.format(op="source:datagen", metric="watermark"))
        first_seq = int(browser.evaluate("document.body.dataset.seq"))
        (tmp_path / "dom-1.html").write_text(browser.evaluate("document.documentElement.outerHTML"))
        browser.wait_for(f"{CHECKPOINTS}.length >= 2", timeout=60)
        browser.wait_for(f"{VALUE.format(op='sink:hot_items', metric='records_in')} > 0", timeout=60)
        (tmp_path / "dom-2.html").write_text(browser.evaluate("document.documentElement.outerHTML"))
        assert int(browser.evaluate("document.body.dataset.seq")) > first_seq
        assert browser.evaluate(VALUE.format(op="source:datagen", metric="records_in")) > first_rows
        assert browser.evaluate(VALUE.format(op="source:datagen", metric="watermark")) > first_mark
        assert browser.evaluate(STATE) == "running"
        checkpoints = browser.evaluate(CHECKPOINTS)
        assert checkpoints == sorted(checkpoints, reverse=True) == list(range(checkpoints[0], 0, -1))
        size = browser.evaluate("Number(document.querySelector('#checkpoints tbody tr td[data-metric=\"size_bytes\"]')"
                                ".dataset.value)")
        assert size > 0
        state_rows = sum(browser.evaluate(VALUE.format(op=op, metric="state_rows"))
                         for op, kind in zip(operators, kinds, strict=True) if kind == "window")
        assert state_rows > 0
        shot = browser.screenshot(tmp_path / "dashboard-q5.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"dashboard screenshot: {keep_artefact(shot)}")

        # Stopped with a checkpoint (SIGTERM): the page is sent the final state before the server ends.
        run.send_signal(signal.SIGTERM)
        assert browser.wait_for(f"{STATE} === 'stopped' && {STATE}", timeout=60) == "stopped"
        assert run.wait(timeout=60) == 0
        assert browser.evaluate(f"{CHECKPOINTS}[0]") > checkpoints[0]  # the stop's own checkpoint
        time.sleep(0.5)
        assert browser.evaluate(STATE) == "stopped"  # the stream's end does not mark it disconnected
    finally:
        if browser is not None:
            browser.close()
        if run.poll() is None:
            run.kill()
            run.wait()
