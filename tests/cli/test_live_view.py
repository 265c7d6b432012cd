"""``clink run``'s live view through a pseudo-terminal: shown when stderr is a terminal, with a
line per operator whose numbers move; absent when stderr is a pipe. And ``--metrics-port``."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

PIPELINE = """\
CREATE TABLE datagen (
  event_type INT,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
  dateTime AS bid.dateTime,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('connector' = 'nexmark', 'events.num' = '{events}', 'first-event.rate' = '{rate}',
        'rate.limited' = 'true');

CREATE TABLE out (auction BIGINT, bids BIGINT, window_end TIMESTAMP(3)) WITH ('connector' = 'blackhole');

INSERT INTO out
SELECT bid.auction, COUNT(*), window_end
FROM TABLE(TUMBLE(TABLE datagen, DESCRIPTOR(dateTime), INTERVAL '1' SECOND))
WHERE event_type = 2
GROUP BY bid.auction, window_start, window_end;
"""

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def write_pipeline(tmp_path, events: int, rate: int):
    path = tmp_path / "q.sql"
    path.write_text(PIPELINE.format(events=events, rate=rate))
    return path


def read_all(fd: int, proc: subprocess.Popen, timeout: float = 90) -> str:
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


def test_the_live_view_shows_operators_on_a_terminal(tmp_path):
    path = write_pipeline(tmp_path, events=30_000, rate=10_000)  # three seconds
    main, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": "140", "LINES": "40", "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "clink", "run", str(path)], stdin=secondary, stdout=secondary,
                            stderr=secondary, env=env, close_fds=True)
    os.close(secondary)
    try:
        text = read_all(main, proc)
    finally:
        os.close(main)
        proc.wait(timeout=60)
    assert proc.returncode == 0, text
    plain = ANSI.sub("", text)
    assert "rows in/s" in plain and "wm lag" in plain
    assert "source:datagen" in plain and "sink:out" in plain
    assert re.search(r"window-\w+", plain)
    # The view was redrawn while rows came: the source's count of rows out took several values.
    counts = set(re.findall(r"source:datagen\s+\S+\s+\S+\s+(\S+)", plain))
    assert len(counts) >= 2, plain
    assert "30000 rows in" in plain  # the summary at the end


def test_no_live_view_when_stderr_is_not_a_terminal(tmp_path):
    path = write_pipeline(tmp_path, events=5_000, rate=50_000)
    out = subprocess.run([sys.executable, "-m", "clink", "run", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rows in/s" not in out.stderr and "\x1b[" not in out.stderr
    assert "5000 rows in" in out.stderr


def test_metrics_port_serves_prometheus_while_running(tmp_path):
    path = write_pipeline(tmp_path, events=40_000, rate=10_000)  # four seconds
    proc = subprocess.Popen([sys.executable, "-m", "clink", "run", str(path), "--metrics-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.match(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", line)
        assert match, line
        time.sleep(1.5)
        seen = []
        for _ in range(2):
            families = {f.name: f for f in text_string_to_metric_families(
                urllib.request.urlopen(match.group(1), timeout=10).read().decode())}
            read = [s.value for s in families["clink_records_out"].samples
                    if s.labels["operator"] == "source:datagen" and s.name == "clink_records_out_total"]
            seen.append(read[0])
            time.sleep(1.2)
        assert 0 < seen[0] < seen[1] <= 40_000
        assert any(s.labels["operator"].startswith("window-") for s in families["clink_state_rows"].samples)
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
