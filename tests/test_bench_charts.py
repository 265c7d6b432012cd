"""The benchmarks' charts: the rates they plot, and PNG files drawn from a run's samples."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_charts import latency_charts, throughput_series  # noqa: E402


def test_throughput_is_the_rate_between_samples():
    samples = [[0.0, 0, 100], [0.5, 50_000, 100], [1.5, 250_000, 100], [1.5, 250_000, 100]]
    assert throughput_series(samples) == ([0.5, 1.5], [100_000.0, 200_000.0])


def test_latency_charts_are_png_files(tmp_path):
    results = {
        "q0": {"p50": 8.0, "p99": 14.0, "samples": [[0.5 * i, 50_000 * i, (200 + i) * 2**20] for i in range(10)]},
        "q5": {"p50": 4100.0, "p99": 4600.0, "samples": [[0.5 * i, 40_000 * i, (250 + 2 * i) * 2**20]
                                                          for i in range(10)]},
    }
    paths = latency_charts(results, tmp_path / "charts", rate=100_000)
    assert [p.name for p in paths] == ["latency.png", "throughput.png", "rss.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
