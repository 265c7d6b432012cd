"""Incremental sqlite checkpoints on the cluster's workers (threads joined in memory,
``cluster.local``): each worker cuts its operators' pieces into the shared folder, the job master
lists them in the manifest, and a restart after a failed worker — on the workers again, then in
one process at another parallelism — writes exactly an uninterrupted run's rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from nexmark_cases import output
from test_workers import _assert_checkpoints_intact, _fail_after, _plan, _reference

from clink.cluster.local import run_in_threads
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

SETTINGS = ("SET 'execution.checkpointing.interval' = '20 ms';\n"
            "SET 'restart-strategy.fixed-delay.delay' = '10 ms';\n"
            "SET 'state.backend' = 'sqlite';\n")


@pytest.mark.parametrize("query", ["q4", "q20"])
def test_a_failed_worker_restarts_from_incremental_checkpoints_exactly(
        query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    expected = _reference(query, tmp_path_factory)
    state = tmp_path / "state"
    master = run_in_threads(_plan(query, tmp_path, SETTINGS),
                            RuntimeContext(stdout=io.StringIO(), state_dir=state, config={"parallelism.default": "2"}),
                            workers=2, on_attempt=_fail_after(2, checkpoints=2))
    assert master.attempt == 2 and "lost its network" in master.failures[0], "\n".join(master.failures)
    assert output(tmp_path / "out") == expected
    _assert_checkpoints_intact(state)
    manifests = [json.loads(p.read_text()) for p in state.glob("checkpoints/chk-*/_manifest.json")]
    pieces = {name for m in manifests for name in m.get("shared", {})}
    assert any(name.endswith(".delta.sqlite") for name in pieces), pieces
    assert {p.name for p in (state / "checkpoints" / "shared").iterdir()} == pieces  # nothing unlisted kept
    # and the cluster's checkpoint goes on in one process at another parallelism
    job = Job(_plan(query, tmp_path, SETTINGS), RuntimeContext(stdout=io.StringIO(), state_dir=state,
                                                               config={"parallelism.default": "3"}))
    assert job.metrics.restored_from is not None
    job.run()
    assert output(tmp_path / "out") == expected
