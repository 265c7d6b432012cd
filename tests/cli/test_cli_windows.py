"""The command line with event time: explain shows window operators, run prints results and
the end-of-run summary with the watermark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SQL = """CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
WITH ('connector' = 'datagen', 'number-of-rows' = '200', 'seed' = '3',
      'fields.auction.min' = '1', 'fields.auction.max' = '2', 'fields.price.min' = '1', 'fields.price.max' = '9');
SELECT auction, window_start, COUNT(*) AS n, MAX(price) AS top
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' DAY))
GROUP BY window_start, window_end, auction;
"""


def clink(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clink", *args], capture_output=True, text=True, timeout=120)


def test_explain_shows_the_window_operator(tmp_path: Path) -> None:
    path = tmp_path / "w.sql"
    path.write_text(SQL)
    out = clink("explain", str(path))
    assert out.returncode == 0, out.stderr
    assert "WindowAggregate TUMBLE(size=1 d) state keys=[auction]" in out.stdout
    assert "hash(auction)" in out.stdout


def test_run_prints_window_rows_and_the_watermark(tmp_path: Path) -> None:
    path = tmp_path / "w.sql"
    path.write_text(SQL)
    out = clink("run", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith("+I[") for line in lines)
    # datagen's timestamps lie within one day before 2024-01-01: two auctions, one or two days.
    assert sum(int(line.split(", ")[2]) for line in lines) == 200
    assert "200 rows in" in out.stderr and "watermark end of input" in out.stderr
    assert "0 late rows dropped" in out.stderr
    assert "Traceback" not in out.stderr
