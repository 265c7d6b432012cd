"""Incremental sqlite checkpoints through the crash harness, and local recovery end to end.

Jobs on the sqlite backend (incremental by default) are killed between two increments, at each
named point of the checkpoint protocol, and restarted; then a shared delta piece of the newest
checkpoint is damaged: the restart must detect it by its checksum, fall back to the checkpoint
before, roll back what the damaged one committed and write exactly the rows of an uninterrupted
run. Local recovery: a job stopped with a checkpoint restarts on its own working databases when
they match, and restores from the checkpoint when one was damaged — with the same output.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nexmark_cases import output as _output
from test_checkpoint_fallback import INTERVAL, _files, _newest_complete, _reference, _start

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job


def _manifest(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "_manifest.json").read_text())


def _deltas(checkpoint: Path) -> list[str]:
    return [name for name in _manifest(checkpoint).get("shared", {}) if name.endswith(".delta.sqlite")]


@pytest.mark.parametrize("fault", ["after_barrier:4", "after_state_written_before_commit:4",
                                   "during_manifest_rename:4", "after_checkpoint_before_sink_commit:4",
                                   "during_sink_commit:3"])
@pytest.mark.parametrize("case", ["csv", "sqlite-upsert"])
def test_a_kill_between_two_increments_then_a_restart_gives_the_same_output(
        case: str, fault: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference(case, tmp_path_factory)
    ddl, path, out = _files(tmp_path, case, "sqlite", INTERVAL)
    state = tmp_path / "state"
    process = _start(ddl, path, state, env={"CLINK_FAULT": fault})
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, "the fault point was never reached"
    newest = _newest_complete(state)
    assert _deltas(newest), "the checkpoints before the kill are not incremental: the test proves nothing"
    process = _start(ddl, path, state)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert _output(out) == reference


@pytest.mark.parametrize("case", ["csv", "sqlite-upsert"])
def test_a_damaged_increment_is_detected_and_the_fallback_is_exact(
        case: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference(case, tmp_path_factory)
    ddl, path, out = _files(tmp_path, case, "sqlite", INTERVAL)
    state = tmp_path / "state"
    process = _start(ddl, path, state, env={"CLINK_FAULT": "after_barrier:5"})  # checkpoints 1-4 complete
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL
    newest = _newest_complete(state)
    assert newest.name == "chk-4"
    older = set(_manifest(state / "checkpoints" / "chk-3")["shared"])
    mine = [name for name in _deltas(newest) if name not in older]
    assert mine, "checkpoint 4 wrote no delta of its own"
    piece = state / "checkpoints" / "shared" / mine[0]
    data = bytearray(piece.read_bytes())
    data[len(data) // 2] ^= 0x01
    piece.write_bytes(bytes(data))
    process = _start(ddl, path, state)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "skipping checkpoint chk-4" in err and "shared piece" in err and "checksum" in err
    assert "resuming from checkpoint 3" in err
    assert _output(out) == reference


def _run_here(ddl: Path, path: Path, state: Path, **config) -> Job:
    with contextlib.chdir(path.parent):
        plan = clink.compile(path.read_text(), name=path.name, init=[ddl])
        job = Job(plan.runtime_plan, RuntimeContext(state_dir=state, stdout=io.StringIO(), config=config))
        job.run()
        return job


@pytest.mark.parametrize("damage", [None, "working database"])
def test_a_restart_after_a_stop_keeps_the_working_databases_unless_damaged(
        damage: str | None, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference("sqlite-upsert", tmp_path_factory)
    ddl, path, out = _files(tmp_path, "sqlite-upsert", "sqlite", INTERVAL)
    state = tmp_path / "state"
    # A stop with a checkpoint, in a process of its own; then the restart in this one.
    stopped = subprocess.run([sys.executable, "-m", "clink", "run", "-i", ddl.name, path.name, "--state-dir",
                              str(state), "--stop-with-checkpoint-after", "3"], capture_output=True, text=True,
                             timeout=300, cwd=path.parent, check=False)
    assert stopped.returncode == 0, stopped.stderr
    working = sorted((state / "state").glob("*.sqlite"))
    assert working and all(p.with_name(p.name + ".local").exists() for p in working)
    if damage:
        data = bytearray(working[0].read_bytes())
        data[len(data) // 2] ^= 0x01
        working[0].write_bytes(bytes(data))
    stopped_at = int(_newest_complete(state).name[4:])
    job = _run_here(ddl, path, state)
    assert job.metrics.restored_from == stopped_at
    notes = job.metrics.local_recovery
    assert notes and len(notes) == len(working)
    if damage:
        assert sum(note != "local" for note in notes.values()) == 1
        assert any("checksum" in note for note in notes.values())
        assert any("not reused" in w for w in job.warnings)
    else:
        assert set(notes.values()) == {"local"}
    assert _output(out) == reference
