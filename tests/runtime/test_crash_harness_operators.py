"""Crash harness for joins, Top-N, OVER and group aggregates: Nexmark queries run by `clink run`
with checkpoints are killed (SIGKILL) at a point of the checkpoint protocol and at random
moments, restarted from their state directory until they finish; the committed output — CSV
part files for append-only queries, a SQLite table upserted by key for updating ones — must equal
an uninterrupted run's.

`pytest tests/runtime/test_crash_harness_operators.py --soak` kills each query many more times.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nexmark_cases import CSV, QUERIES, SQLITE, output

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nexmark"
EVENTS = 30_000

SETTINGS = """SET 'execution.checkpointing.interval-rows' = '{interval}';
SET 'state.backend' = '{backend}';
"""
#: A checkpoint every 8,000 source rows: the kill inside the second lands mid-run in every query,
#: and a run takes few checkpoints, which cost more than its rows. The random kills take one every
#: 4,000, so that more of them land after one.
INTERVAL = 8000
SOAK_INTERVAL = 4000



def _files(folder: Path, query: str, backend: str = "memory",
           interval: int = INTERVAL) -> tuple[Path, Path, Path]:
    """In ``folder`` (made if needed): the init script (DDL with EVENTS events), the query file,
    and where its output goes. The files name no folder of their own, so the same query and
    backend give the same text in every test: ``clink run`` compiles it once, then finds the
    plan in its cache."""
    folder.mkdir(parents=True, exist_ok=True)
    ddl = folder / "ddl.sql"
    ddl.write_text((BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                                          f"'events.num' = '{EVENTS}', 'batch-size' = '1000'"))
    path = folder / f"{query}.sql"
    path.write_text(SETTINGS.format(interval=interval, backend=backend)
                    + QUERIES[query].format(csv=CSV, sqlite=SQLITE) + "\n")
    return ddl, path, folder / "out"


def _start(ddl: Path, path: Path, state: Path, env: dict | None = None, parallelism: int = 1) -> subprocess.Popen:
    """``clink run -i ddl path`` in the folder that holds both, where the sink writes."""
    assert ddl.parent == path.parent
    return subprocess.Popen([sys.executable, "-m", "clink", "run", "-i", ddl.name, path.name, "--state-dir", str(state),
                             "--parallelism", str(parallelism)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=path.parent,
                            env={**os.environ, **(env or {})})


_REFERENCES: dict[str, list[tuple]] = {}


def _run_here(ddl: Path, path: Path, state: Path) -> None:
    """Run ``clink run -i ddl path`` to its end in this process, as ``_start`` would in another
    (an uninterrupted run needs no process of its own, and saves starting one)."""
    with contextlib.chdir(path.parent):  # where the sink's relative path points
        plan = clink.compile(path.read_text(), name=path.name, init=[ddl])
        Job(plan.runtime_plan, RuntimeContext(state_dir=state, stdout=io.StringIO())).run()


def _reference(query: str, tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    if query not in _REFERENCES:
        folder = tmp_path_factory.mktemp(f"ref-{query}")
        ddl, path, out = _files(folder, query)
        _run_here(ddl, path, folder / "state")
        rows = output(out)
        assert rows, f"{query}: the reference run wrote nothing"
        _REFERENCES[query] = rows
    return _REFERENCES[query]


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_a_kill_inside_a_checkpoint_then_a_restart_gives_the_sameoutput(
        query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference(query, tmp_path_factory)
    backend = "sqlite" if query in ("q4", "q6", "q19", "q20") else "memory"
    ddl, path, out = _files(tmp_path, query, backend)
    state = tmp_path / "state"
    _kill_then_restart(ddl, path, state, "after_checkpoint_before_sink_commit:2")
    assert output(out) == reference


#: The points around a merge of the sqlite backend's change log into its table (docs/state.md).
MERGE_POINTS = ["after_commit_before_merge", "during_merge"]


@pytest.mark.parametrize("point", MERGE_POINTS)
def test_a_kill_around_a_merge_of_the_sqlite_change_log_gives_the_same_output(
        point: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """q4's group aggregates keep value state; with a log fraction of 0 their logs are merged
    after every checkpoint, and the third merge is killed before it starts or before it commits."""
    reference = _reference("q4", tmp_path_factory)
    ddl, path, out = _files(tmp_path, "q4", "sqlite")
    path.write_text("SET 'state.sqlite.log-fraction' = '0';\n" + path.read_text())
    state = tmp_path / "state"
    _kill_then_restart(ddl, path, state, f"{point}:3")
    assert output(out) == reference


def _kill_then_restart(ddl: Path, path: Path, state: Path, fault: str) -> None:
    """Run until the fault point (``'name:n'``) kills the job, then restart it to the end from
    its checkpoint."""
    process = _start(ddl, path, state, env={"CLINK_FAULT": fault})
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, f"the fault point {fault} was never reached"
    process = _start(ddl, path, state)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err


#: One query per kind of state: group aggregate, windows and a join of them, Top-N, session
#: windows, a regular join, OVER, a join with the maximum of each window sent to every subtask
#: (q5, q7: its other input stays where it was made, so each subtask's snapshot holds rows of
#: every key group).
RESCALED = ["q4", "q5", "q7", "q9", "q11", "q20", "over"]


@pytest.mark.parallel
@pytest.mark.parametrize("resume_at", [3, 1])
@pytest.mark.parametrize("query", RESCALED)
def test_a_kill_at_parallelism_2_resumes_at_another_parallelism_with_the_sameoutput(
        query: str, resume_at: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two subtasks per operator, killed inside their second checkpoint; the restart at 3 (or 1)
    subtasks takes each key group's state and each source's share from the two and must write
    exactly what one uninterrupted subtask wrote."""
    reference = _reference(query, tmp_path_factory)
    backend = "sqlite" if query in ("q4", "q7", "q20") else "memory"
    ddl, path, out = _files(tmp_path, query, backend)
    state = tmp_path / "state"
    process = _start(ddl, path, state, env={"CLINK_FAULT": "after_checkpoint_before_sink_commit:2"}, parallelism=2)
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, f"{query}: the fault point was never reached"
    process = _start(ddl, path, state, parallelism=resume_at)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert output(out) == reference


def _newest_checkpoint(state: Path) -> int:
    folder = state / "checkpoints"
    if not folder.is_dir():
        return 0
    done = [int(p.name[4:]) for p in folder.glob("chk-*") if (p / "_manifest.json").exists()]
    return max(done, default=0)


def _kill_after_a_checkpoint(process: subprocess.Popen, state: Path, rng: random.Random) -> bool:
    """SIGKILL the job a random moment after its next one or two checkpoints complete (so the kill
    lands while rows flow, whatever the machine's speed); False if it finished first."""
    target = _newest_checkpoint(state) + rng.randint(1, 2)
    while process.poll() is None:
        if _newest_checkpoint(state) >= target:
            time.sleep(rng.uniform(0.0, 0.05))
            if process.poll() is not None:
                return False
            process.send_signal(signal.SIGKILL)
            process.wait()
            return True
        time.sleep(0.005)
    return False


@pytest.mark.slow  # a soak: .ci/run runs it after the default suite
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_random_kills_give_the_sameoutput(query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                           request: pytest.FixtureRequest) -> None:
    reference = _reference(query, tmp_path_factory)
    seeds = 6 if request.config.getoption("--soak") else 1
    kills = 0
    for seed in range(seeds):
        rng = random.Random(f"{query}-{seed}")
        ddl, path, out = _files(tmp_path / f"run{seed}", query, interval=SOAK_INTERVAL)
        state = tmp_path / f"state{seed}"
        for attempt in range(6):
            process = _start(ddl, path, state)
            if attempt < 5 and _kill_after_a_checkpoint(process, state, rng):
                kills += 1
                continue
            process.wait(timeout=300)
            assert process.returncode == 0, process.stderr.read()
            break
        assert output(out) == reference, f"{query}: output differs after kills (seed {seed})"
    print(f"{query}: {kills} kills over {seeds} runs")
    assert kills > 0, f"{query}: no kill landed before the job finished: the test proved nothing"
