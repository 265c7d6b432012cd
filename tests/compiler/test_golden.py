"""Golden files: each case folder holds input.sql and the expected ir.txt and module.py.

After an intended change, regenerate with `pytest tests/compiler/test_golden.py --update-golden`
and review the diff as you would review code.

A second test loads every checked-in module.py and runs its ``PLAN`` over the case's small,
bounded datagen tables, so a golden cannot drift into code that does not run.
"""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import pyarrow as pa
import pytest

from clink.compiler import compile_file
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.loader import load_generated, plan_of

CASES = sorted(p for p in (Path(__file__).parent.parent / "golden").iterdir() if p.is_dir())


#: A run of these few rows takes well under a second; longer means it hangs.
RUN_DEADLINE_S = 5.0


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_golden(case: Path, update_golden: bool) -> None:
    plan = compile_file(case / "input.sql")
    check_golden(case / "ir.txt", plan.explain(), update=update_golden)
    check_golden(case / "module.py", plan.source, update=update_golden)


def check_golden(path: Path, actual: str, *, update: bool) -> None:
    if update:
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing: run with --update-golden, then review it"
    assert actual == path.read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_golden_module_runs(case: Path) -> None:
    module_path = case / "module.py"
    assert module_path.exists(), f"{module_path} is missing: run with --update-golden, then review it"
    source = module_path.read_text()
    fingerprint = hashlib.sha256(source.encode()).hexdigest()[:16]
    plan = plan_of(load_generated(source, name=case.name, fingerprint=fingerprint), str(module_path))

    stdout = io.StringIO()
    results: dict[str, list[pa.RecordBatch]] = {}
    ctx = RuntimeContext(stdout=stdout,
                         on_result=lambda name, batch: results.setdefault(name, []).append(batch))
    # What run_plan does, with a deadline, so a plan that never ends fails instead of hanging.
    job = Job(plan, ctx)
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not job.finished:
        if time.monotonic() > deadline:
            job.cancel()
            pytest.fail(f"{case.name}: the plan did not finish within {RUN_DEADLINE_S} s")
        if not job.step():
            time.sleep(0.001)

    assert sum(job.metrics.records_in.values()) > 0
    for sink in plan.sinks:
        if sink.connector == "print":
            lines = stdout.getvalue().splitlines()
            assert lines, f"print sink {sink.table!r} wrote nothing"
            assert all("+I[" in line for line in lines), lines
        elif sink.connector == "collect":
            batches = results.get(sink.table)
            assert batches, f"query {sink.table!r} returned no rows"
            assert all(b.schema.equals(sink.schema) for b in batches)
