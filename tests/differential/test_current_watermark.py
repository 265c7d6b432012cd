"""CURRENT_WATERMARK(rowtime) in the late-row filter Flink documents for it, over a source whose
rows come out of order: the rows kept, and the watermark each saw, are those a reference computes
from Flink's rule. The reference follows each source subtask: with ``p`` subtasks, subtask ``s``
reads row groups ``s``, ``s + p``, ... (one batch each), and the filter right behind it sees that
subtask's watermark — the largest time it has read before the batch, less the delay — as a
parallel Flink source's chained filter sees its own instance's."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from clink.testing import run_select

BASE = dt.datetime(2024, 1, 1)
GROUP_ROWS = 3
DELAY = dt.timedelta(minutes=2)
# Minutes past BASE, out of order: some rows fall behind what their subtask has seen.
MINUTES = [0, 5, 3, 10, 4, 12, 11, 2, 20, 15, 16, 1, 30, 1, 29, 26, 40, 2, 35, 50, 38, 41, 45, 60]
TABLE = pa.table({"id": pa.array(range(len(MINUTES)), pa.int64()),
                  "ts": pa.array([BASE + dt.timedelta(minutes=m) for m in MINUTES], pa.timestamp("ms"))})
LATE_FILTER = ("SELECT id, CURRENT_WATERMARK(ts) AS wm FROM t "
               "WHERE CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts)")


def _reference(parallelism: int) -> list[tuple]:
    rows = TABLE.to_pylist()
    groups = [rows[i:i + GROUP_ROWS] for i in range(0, len(rows), GROUP_ROWS)]
    kept = []
    for subtask in range(parallelism):
        watermark = None
        for group in groups[subtask::parallelism]:
            kept += [(r["id"], watermark) for r in group if watermark is None or r["ts"] > watermark]
            watermark = max([r["ts"] - DELAY for r in group] + ([watermark] if watermark else []))
    return sorted(kept, key=lambda r: r[0])


def test_the_late_row_filter_keeps_what_flinks_rule_keeps(path: str) -> None:
    parallelism = int(path.partition(":")[2])
    out = run_select(LATE_FILTER, row_group_size=GROUP_ROWS, watermarks={"t": "ts AS ts - INTERVAL '2' MINUTE"},
                     t=TABLE)
    got = sorted((r["id"], r["wm"]) for r in out.to_pylist())
    want = _reference(parallelism)
    assert got == want
    assert len(want) < len(MINUTES) and any(wm is not None for _, wm in want)  # some dropped, some compared


def test_current_watermark_has_the_rowtimes_type_and_feeds_a_computed_column(path: str) -> None:
    ltz = pa.table({"id": TABLE["id"], "ts": TABLE["ts"].cast(pa.timestamp("ms", tz="UTC"))})
    out = run_select("SELECT id, CURRENT_WATERMARK(ts) AS wm FROM t", row_group_size=GROUP_ROWS,
                     watermarks={"t": "ts AS ts - INTERVAL '2' MINUTE"}, t=ltz)
    assert out.schema.field("wm").type == pa.timestamp("ms", tz="UTC")  # TIMESTAMP_LTZ(3), as its argument
    parallelism = int(path.partition(":")[2])
    seen = {i: wm for i, wm in _all_watermarks(parallelism)}
    assert {r["id"]: r["wm"] and r["wm"].replace(tzinfo=None) for r in out.to_pylist()} == seen


def _all_watermarks(parallelism: int) -> list[tuple]:
    rows = TABLE.to_pylist()
    groups = [rows[i:i + GROUP_ROWS] for i in range(0, len(rows), GROUP_ROWS)]
    out = []
    for subtask in range(parallelism):
        watermark = None
        for group in groups[subtask::parallelism]:
            out += [(r["id"], watermark) for r in group]
            watermark = max([r["ts"] - DELAY for r in group] + ([watermark] if watermark else []))
    return out
