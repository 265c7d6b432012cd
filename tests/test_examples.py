"""Every pipeline in examples/ compiles and runs to the end."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import clink
from clink.runtime.context import RuntimeContext

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.sql"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    out = io.StringIO()
    result = clink.sql(path.read_text(), name=path.name, context=RuntimeContext(stdout=out))
    metrics = result.run()
    assert sum(metrics.records_out.values()) > 0


def test_quickstart_prints_the_expected_rows() -> None:
    out = io.StringIO()
    text = (Path(__file__).parent.parent / "examples" / "quickstart.sql").read_text()
    clink.sql(text, context=RuntimeContext(stdout=out)).run()
    # 20 generated orders (seed 42, so the rows are known), those above 10 kept, as README shows.
    assert out.getvalue().splitlines() == QUICKSTART_ROWS


QUICKSTART_ROWS = [
    "+I[1, 22.78, H6]", "+I[2, 20.78, RT]", "+I[3, 59.66, NF]", "+I[4, 48.27, 9T]", "+I[5, 17.66, TW]",
    "+I[6, 81.52, JB]", "+I[7, 67.61, BC]", "+I[8, 44.13, 7P]", "+I[9, 19.01, V4]", "+I[10, 23.71, S6]",
    "+I[11, 25.6, I8]", "+I[12, 29.63, XN]", "+I[13, 72.45, UK]", "+I[14, 49.46, QA]", "+I[15, 77.53, T6]",
    "+I[16, 29.15, DX]", "+I[17, 23.94, Y2]", "+I[18, 23.36, NR]", "+I[19, 62.55, RU]", "+I[20, 85.14, AO]",
]
