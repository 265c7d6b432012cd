"""Cold-start guard, run on demand (``pytest -m coldstart``): the machine is shared and noisy, so
it is not part of the default run. It fails when running a compiled artefact to its first row
takes more than three times its target over the ``import pyarrow`` floor (bench/cold_start.py
measures and reports the real figures)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "cold_start.py"


def _bench():
    spec = importlib.util.spec_from_file_location("cold_start", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cold_start"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.coldstart
def test_a_compiled_artefact_reaches_its_first_row_near_the_import_floor(tmp_path: Path) -> None:
    bench = _bench()
    bench.prepare(tmp_path)
    cases = bench.commands(tmp_path)
    floor, clk = [], []
    for _ in range(7):
        floor.append(bench.time_to_first_row(*cases["floor"], tmp_path))
        clk.append(bench.time_to_first_row(*cases["clk"], tmp_path))
    over_ms = (statistics.median(clk) - statistics.median(floor)) * 1000
    limit = 3 * bench.TARGETS["clk"]
    assert over_ms <= limit, f"clink run x.clk takes {over_ms:.0f} ms over `import pyarrow` (guard: {limit} ms)"
