"""Falling back to an older checkpoint: what later checkpoints committed must not stay as duplicates.

A job is killed inside a checkpoint, so the checkpoints before it completed and their output was
committed; then one byte of the newest complete checkpoint is flipped. The restart skips it,
resumes from the one before — and must roll back what the damaged one committed, since the run
writes those rows again. The same holds for `--from-checkpoint` naming an older checkpoint. For
every exactly-once sink (CSV part files, an appending SQLite table, a SQLite table upserted by
key) the output must equal an uninterrupted run's, row for row.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from clink.errors import ConnectorError
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.sqlite import SqliteSinkWriter
from clink.runtime.context import RuntimeContext
from nexmark_cases import CSV, QUERIES, SQLITE, output as _output
from test_crash_harness_operators import _start

BENCH = Path(__file__).resolve().parents[2] / "bench" / "nexmark"
EVENTS = 15_000

# Append-only q20 into each sink that can hold it, and q18 (updating) into a keyed SQLite table.
CASES = {
    "csv": ("q20", "{csv}"),
    "sqlite-append": ("q20", "{sqlite}"),
    "sqlite-upsert": ("q18", "{sqlite}"),
}


#: Checkpoints every 2,000 rows: the kills after the fourth or the sixth land mid-run.
INTERVAL = "SET 'execution.checkpointing.interval-rows' = '2000';\n"


def _files(folder: Path, case: str, backend: str, settings: str) -> tuple[Path, Path, Path]:
    """The init script, the job's file and its sink's output, in ``folder``. The sink's path is
    relative to the folder the job runs in (see ``_start``), so the reference and a test with the
    same backend and settings run the same text, which ``clink run`` compiles once."""
    query, sink = CASES[case]
    ddl = folder / "ddl.sql"
    ddl.write_text((BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                                          f"'events.num' = '{EVENTS}', 'batch-size' = '1000'"))
    text = QUERIES[query]
    if sink == "{sqlite}":
        text = text.replace("{csv}", "{sqlite}")
    text = text.format(csv=CSV, sqlite=SQLITE)
    path = folder / "job.sql"
    path.write_text(f"SET 'state.backend' = '{backend}';\n{settings}{text}\n")
    return ddl, path, folder / "out"


_REFERENCES: dict[str, list[tuple]] = {}


def _reference(case: str, tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    """The case's output from one uninterrupted run."""
    if case not in _REFERENCES:
        folder = tmp_path_factory.mktemp(f"ref-{case}")
        ddl, path, out = _files(folder, case, "memory", INTERVAL)
        process = _start(ddl, path, folder / "state")
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        _REFERENCES[case] = _output(out)
        assert len(_REFERENCES[case]) > 100, f"{case}: the reference run wrote too little to prove anything"
    return _REFERENCES[case]


def _flip_a_byte(checkpoint: Path, which: str) -> None:
    files = sorted(p for p in checkpoint.iterdir() if p.is_file() and p.name != "_manifest.json")
    target = checkpoint / "job.json" if which == "job.json" else max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))


def _complete_checkpoints(state: Path) -> list[Path]:
    folder = state / "checkpoints"
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.name.startswith("chk-") and (p / "_manifest.json").exists()]


def _newest_complete(state: Path) -> Path:
    return max(_complete_checkpoints(state), key=lambda p: int(p.name[4:]))


def _committed_something(out: Path) -> bool:
    if out.with_suffix(".db").exists():
        with sqlite3.connect(out.with_suffix(".db")) as conn:
            return bool(conn.execute("SELECT name FROM sqlite_master WHERE name = 'out'").fetchone()
                        and conn.execute("SELECT COUNT(*) FROM out").fetchone()[0])
    return out.exists() and any(p.name.startswith("part-") for p in out.iterdir())


@pytest.mark.parametrize("which", ["job.json", pytest.param("largest state file", marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_kill_in_a_checkpoint_then_a_damaged_newest_checkpoint_gives_the_same_output(
        case: str, backend: str, which: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference(case, tmp_path_factory)
    ddl, path, out = _files(tmp_path, case, backend, INTERVAL)
    state = tmp_path / "state"
    process = _start(ddl, path, state, env={"CLINK_FAULT": "after_barrier:4"})  # checkpoints 1-3 committed
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, "the fault point was never reached"
    assert _committed_something(out), "nothing was committed before the kill: the test would prove nothing"
    newest = _newest_complete(state)
    assert newest.name == "chk-3"
    _flip_a_byte(newest, which)
    process = _start(ddl, path, state)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "skipping checkpoint chk-3" in err
    assert "resuming from checkpoint 2" in err
    assert "checkpoint(s) 3" in err  # the sink says what it rolled back, in one line
    assert _output(out) == reference
    if case == "csv":
        assert list((out / "_rolled_back" / "chk-3").iterdir()), "rolled-back part files are kept, not deleted"


@pytest.mark.parametrize("case", sorted(CASES))
def test_resuming_from_an_older_checkpoint_by_name_gives_the_same_output(
        case: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    reference = _reference(case, tmp_path_factory)
    ddl, path, out = _files(tmp_path, case, "memory", INTERVAL + "SET 'state.checkpoints.num-retained' = '5';\n")
    state = tmp_path / "state"
    process = _start(ddl, path, state, env={"CLINK_FAULT": "after_barrier:6"})
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL
    older = state / "checkpoints" / "chk-2"
    assert (older / "_manifest.json").exists()
    process = subprocess.run([sys.executable, "-m", "clink", "run", "-i", ddl.name, path.name, "--state-dir", str(state),
                              "--from-checkpoint", str(older)], capture_output=True, text=True, timeout=300,
                             cwd=path.parent)
    assert process.returncode == 0, process.stderr
    assert "resuming from checkpoint 2" in process.stderr
    assert _output(out) == reference
    # The newer checkpoints were set aside: a crash now must not resume from one of them.
    assert (state / "checkpoints" / "_rolled_back" / "chk-5").is_dir()


THROTTLED = """SET 'execution.checkpointing.interval' = '300 ms';
CREATE TABLE s (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}', 'rows-per-second' = '20000',
    'batch-size' = '500', 'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '{rows}');
CREATE TABLE out (a BIGINT, b BIGINT) WITH ({sink});
INSERT INTO out SELECT a, a * 2 FROM s;
"""


def _throttled(tmp_path: Path, sink: str, rows: int) -> tuple[Path, Path, Path]:
    """A job whose source gives 20,000 rows a second: its file, its output and its state directory."""
    out = tmp_path / "out"
    options = (f"'connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv'" if sink == "csv"
               else f"'connector' = 'sqlite', 'path' = '{out}.db'")
    path = tmp_path / "p.sql"
    path.write_text(THROTTLED.format(sink=options, rows=rows))
    return path, out, tmp_path / "state"


@pytest.mark.parametrize("sink", ["csv", "sqlite"])
def test_a_kill_after_timed_checkpoints_and_damage_give_the_same_output(sink: str, tmp_path: Path) -> None:
    """The scenario below once, at a known moment: checkpoints every 300 ms, SIGKILL as soon as
    two have completed (the source throttled to a second and a half of rows), the newest damaged,
    restart; every row exactly once."""
    path, out, state = _throttled(tmp_path, sink, rows=30_000)
    process = subprocess.Popen([sys.executable, "-m", "clink", "run", str(path), "--state-dir", str(state)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while len(_complete_checkpoints(state)) < 2:
        assert process.poll() is None, f"the job ended before two checkpoints: {process.stderr.read()}"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    damaged = _newest_complete(state)
    _flip_a_byte(damaged, "job.json")
    done = subprocess.run([sys.executable, "-m", "clink", "run", str(path), "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"skipping checkpoint {damaged.name}" in done.stderr
    assert sorted(int(r[0]) for r in _output(out)) == list(range(1, 30_001))


@pytest.mark.slow  # a soak: .ci/run runs it after the default suite
@pytest.mark.parametrize("sink", ["csv", "sqlite"])
def test_random_kills_with_a_time_interval_and_damage_give_the_same_output(sink: str, tmp_path: Path) -> None:
    """The reported scenario: checkpoints every 300 ms, SIGKILL mid-run (a source throttled to about
    three seconds of rows), the newest checkpoint damaged, restart; every row exactly once."""
    path, out, state = _throttled(tmp_path, sink, rows=60_000)
    rng = random.Random(sink)
    damaged = 0
    for _ in range(6):
        process = subprocess.Popen([sys.executable, "-m", "clink", "run", str(path), "--state-dir", str(state)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            process.wait(timeout=rng.uniform(1.2, 2.0))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            if len(_complete_checkpoints(state)) >= 2:
                _flip_a_byte(_newest_complete(state), "job.json")
                damaged += 1
            continue
        assert process.returncode == 0, process.stderr.read()
        break
    else:
        done = subprocess.run([sys.executable, "-m", "clink", "run", str(path), "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert damaged >= 1, "no kill landed after two checkpoints: the test proved nothing"
    rows = _output(out)
    assert sorted(int(r[0]) for r in rows) == list(range(1, 60_001))


# ---------------------------------------------------------------- the SQLite sink's undo log, directly

KV = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _writer(path: Path, keyed: bool, config: dict[str, str] | None = None) -> SqliteSinkWriter:
    spec = TableSpec(name="t", schema=KV, table_schema=KV, options={"path": str(path)},
                     primary_key=("k",) if keyed else ())
    return SqliteSinkWriter(spec, RuntimeContext(config=config or {}))


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT k, v FROM t").fetchall())


@pytest.mark.parametrize("keyed", [False, True])
def test_the_undo_log_takes_back_later_commits(tmp_path: Path, keyed: bool) -> None:
    path = tmp_path / "u.db"
    w = _writer(path, keyed)
    assert w.recover(0, None, lineage="L") is None
    snapshots = {}
    for n in range(1, 6):
        w.write(pa.record_batch([pa.array([n % 3, 10 + n]), pa.array([f"v{n}", f"w{n}"])], schema=KV))
        w.commit(n, w.pre_commit(n))
        snapshots[n] = _rows(path)
    note = _writer(path, keyed).recover(2, None, lineage="L")
    assert note is not None and "checkpoint(s) 3, 4, 5" in note
    assert _rows(path) == snapshots[2]


def test_a_commit_beyond_the_undo_log_is_refused_unless_duplicates_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    w = _writer(path, False, {"state.checkpoints.num-retained": "1"})  # undo kept for 2 commits
    w.recover(0, None, lineage="L")
    for n in range(1, 6):
        w.write(pa.record_batch([pa.array([n]), pa.array([f"v{n}"])], schema=KV))
        w.commit(n, w.pre_commit(n))
    with pytest.raises(ConnectorError, match="'execution.recovery.accept-duplicates'") as info:
        _writer(path, False).recover(1, None, lineage="L")
    assert "checkpoints up to 5" in str(info.value) and "table 't'" in str(info.value)
    assert len(_rows(path)) == 5  # refused: nothing changed
    note = _writer(path, False, {"execution.recovery.accept-duplicates": "true"}).recover(1, None, lineage="L")
    assert note is not None and "rows may repeat" in note


def test_another_state_directorys_commits_are_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    w = _writer(path, False)
    w.recover(0, None, lineage="old")
    w.write(pa.record_batch([pa.array([1]), pa.array(["a"])], schema=KV))
    w.commit(1, w.pre_commit(1))
    # A new job (a fresh state directory) writing the same table keeps what is there.
    assert _writer(path, False).recover(0, None, lineage="new") is None
    assert _rows(path) == [(1, "a")]


def test_a_fresh_state_directory_does_not_collide_with_old_part_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ddl = tmp_path / "t.sql"
    ddl.write_text("SET 'execution.checkpointing.interval-rows' = '100';\n"
                   "CREATE TABLE s (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '250', "
                   "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '250', 'batch-size' = '50');\n"
                   f"CREATE TABLE o (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv');\n"
                   "INSERT INTO o SELECT a FROM s;\n")
    for state in ("state1", "state2"):
        done = subprocess.run([sys.executable, "-m", "clink", "run", str(ddl), "--state-dir", str(tmp_path / state)],
                              capture_output=True, text=True, timeout=120, env=os.environ)
        assert done.returncode == 0, done.stderr
    values = sorted(int(line) for p in out.iterdir() if p.name.startswith("part-") for line in p.read_text().split())
    assert values == sorted(list(range(1, 251)) * 2)  # two jobs, two copies: neither run's rows were lost
