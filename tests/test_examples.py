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
    lines = out.getvalue().splitlines()
    # 20 generated orders, those above 10 kept; ids are a sequence, so the rows are known in order.
    assert 0 < len(lines) <= 20
    assert all(line.startswith("+I[") for line in lines)
    ids = [int(line[3:].split(",")[0]) for line in lines]
    assert ids == sorted(ids) and set(ids) <= set(range(1, 21))
