"""A job that stops at any moment and restarts from its state directory writes, in the end,
exactly the output of a job that never stopped: no duplicate and no lost row."""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path

import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

SQL = """
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '12', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '5', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE totals (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}/', 'format' = 'csv');
INSERT INTO totals
SELECT auction, window_start, COUNT(*), MAX(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, auction;
"""


def committed_rows(folder: Path) -> list[tuple]:
    rows = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")):
            continue  # in progress or pending (not visible), or rolled back
        rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def job(out: Path, state: Path | None, every: int | None = None, backend: str = "memory") -> Job:
    plan = clink.compile(SQL.format(out=out), name="ckpt.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": str(every)} if every else {}
    return Job(plan, RuntimeContext(config={**config, "state.backend": backend}, state_dir=state,
                                    stdout=io.StringIO()))


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("reference")
    job(out, None).run()
    rows = committed_rows(out)
    assert len(rows) > 50
    return rows


@pytest.mark.parametrize("crash_after_steps", [1, 7, 13, 22, 38])
def test_a_job_killed_at_any_step_resumes_exactly_once(tmp_path: Path, expected: list[tuple],
                                                       crash_after_steps: int) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    first = job(out, state, every=3000)
    for _ in range(crash_after_steps):
        first.step()
    # A crash: nothing is closed, committed or cleaned up; in-progress and pending files stay.
    del first
    resumed = job(out, state, every=3000)
    resumed.run()
    assert committed_rows(out) == expected
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_checkpoints_are_taken_and_restored(tmp_path: Path, expected: list[tuple]) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    first = job(out, state, every=3000)
    for _ in range(20):
        first.step()
    assert first.metrics.checkpoints >= 2
    second = job(out, state, every=3000)
    assert second.metrics.restored_from == first.metrics.checkpoints
    second.run()
    assert committed_rows(out) == expected


def test_a_changed_pipeline_refuses_the_old_checkpoints(tmp_path: Path) -> None:
    from clink.errors import IncompatibleCheckpoint

    out, state = tmp_path / "out", tmp_path / "state"
    first = job(out, state, every=3000)
    for _ in range(10):
        first.step()
    changed = SQL.format(out=out).replace("GROUP BY window_start, window_end, auction",
                                          "GROUP BY window_start, window_end, auction, price")
    changed = changed.replace("SELECT auction, window_start, COUNT(*), MAX(price)",
                              "SELECT auction, window_start, COUNT(*), price")
    plan = clink.compile(changed, name="ckpt.sql").runtime_plan
    with pytest.raises(IncompatibleCheckpoint) as refused:
        Job(plan, RuntimeContext(config={"execution.checkpointing.interval-rows": "3000"}, state_dir=state,
                                 stdout=io.StringIO()))
    message = str(refused.value)
    assert re.search(r"operator window-[0-9a-f]{10} \(at ckpt.sql:8:1\)", message), message
    # What the state holds, and what the pipeline needs: types, then the SQL of keys and aggregates.
    assert "GROUP BY (int64) computing count_star(), max(int64) as GROUP BY (auction) computing COUNT(*), " \
           "MAX(price)" in message
    assert "GROUP BY (int64, int64) computing count_star() as GROUP BY (auction, price) computing COUNT(*)" in message
    assert "--state-dir" in message


def test_an_aggregate_of_another_column_of_the_same_type_is_refused(tmp_path: Path) -> None:
    """SUM(v) -> SUM(w): the same types and layout, other values. It used to restore silently."""
    from clink.errors import IncompatibleCheckpoint

    out, state = tmp_path / "out", tmp_path / "state"
    first = job(out, state, every=3000)
    while first.metrics.checkpoints < 1:
        first.step()
    changed = SQL.format(out=out).replace("MAX(price)", "MAX(auction)")
    with pytest.raises(IncompatibleCheckpoint) as refused:
        Job(clink.compile(changed, name="ckpt.sql").runtime_plan,
            RuntimeContext(config={"execution.checkpointing.interval-rows": "3000"}, state_dir=state,
                           stdout=io.StringIO()))
    message = str(refused.value)
    assert "computing COUNT(*), MAX(price)" in message and "computing COUNT(*), MAX(auction)" in message
    assert "(at ckpt.sql:8:1)" in message


TWO = """
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '12', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '5', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE cheap (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}/cheap/', 'format' = 'csv');
CREATE TABLE dear (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}/dear/', 'format' = 'csv');
{first}
{second}
"""
CHEAP = ("INSERT INTO cheap SELECT auction, window_start, COUNT(*), MAX(price) FROM TABLE(TUMBLE(TABLE bid, "
         "DESCRIPTOR(ts), INTERVAL '1' HOUR)) WHERE price < 50 GROUP BY window_start, window_end, auction;")
DEAR = ("INSERT INTO dear SELECT auction, window_start, COUNT(*), MAX(price) FROM TABLE(TUMBLE(TABLE bid, "
        "DESCRIPTOR(ts), INTERVAL '1' HOUR)) WHERE price >= 50 GROUP BY window_start, window_end, auction;")


def test_swapping_two_inserts_keeps_each_operators_state(tmp_path: Path) -> None:
    """Two INSERTs whose windows look alike (same types, same aggregates): swapped, each window
    operator must get its own state back (positional ids swapped them), and the output must be
    that of a run that never stopped."""
    config = {"execution.checkpointing.interval-rows": "3000"}
    reference = tmp_path / "reference"
    Job(clink.compile(TWO.format(out=reference, first=CHEAP, second=DEAR)).runtime_plan,
        RuntimeContext(config={}, stdout=io.StringIO())).run()
    out, state = tmp_path / "out", tmp_path / "state"
    first = Job(clink.compile(TWO.format(out=out, first=CHEAP, second=DEAR)).runtime_plan,
                RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    while first.metrics.checkpoints < 3:
        first.step()
    del first
    swapped = Job(clink.compile(TWO.format(out=out, first=DEAR, second=CHEAP)).runtime_plan,
                  RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    assert swapped.metrics.restored_from == 3
    swapped.run()
    for table in ("cheap", "dear"):
        assert committed_rows(out / table) == committed_rows(reference / table), table
        assert len(committed_rows(reference / table)) > 50


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_stateless_change_keeps_the_state(tmp_path: Path, backend: str, expected: list[tuple]) -> None:
    """A WHERE added before the window, renamed output columns: the window operator keeps its id
    and state signature, so the run continues from the checkpoint. (The filter passes every row,
    so the output must be exactly that of the unchanged pipeline.)"""
    out, state = tmp_path / "out", tmp_path / "state"
    config = {"execution.checkpointing.interval-rows": "3000", "state.backend": backend}
    plan = clink.compile(SQL.format(out=out), name="ckpt.sql").runtime_plan
    first = Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    while first.metrics.checkpoints < 2:
        first.step()
    del first
    changed = SQL.format(out=out).replace("GROUP BY window_start", "WHERE price > 0 GROUP BY window_start")
    changed = changed.replace("COUNT(*), MAX(price)", "COUNT(*) AS cnt, MAX(price) AS top")
    assert changed != SQL.format(out=out)
    plan = clink.compile(changed, name="ckpt.sql").runtime_plan
    resumed = Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    assert resumed.metrics.restored_from == 2
    resumed.run()
    assert committed_rows(out) == expected


#: Byte flips per backend; with the manifest truncated and a state file deleted, over 200 damaged
#: checkpoints in all.
FLIPS = 100


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def crashed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A job that took three checkpoints (and committed their output), went on a little and
    crashed: its output and state directories, to copy and damage."""
    backend = request.param
    folder = tmp_path_factory.mktemp(f"crashed-{backend}")
    first = job(folder / "out", folder / "state", every=3000, backend=backend)
    while first.metrics.checkpoints < 3:
        first.step()
    first.step()
    del first
    return backend, folder


def resume_damaged(crashed: tuple[str, Path], tmp_path: Path, damage) -> tuple[Job, str]:
    """Copy the crashed job, damage its newest checkpoint with ``damage(directory)`` (which
    returns the problem the warning must name), and open the job on it."""
    backend, folder = crashed
    shutil.copytree(folder, tmp_path / "job")
    newest = max((tmp_path / "job" / "state" / "checkpoints").glob("chk-*"), key=lambda p: int(p.name.split("-")[1]))
    problem = damage(newest)
    resumed = job(tmp_path / "job" / "out", tmp_path / "job" / "state", every=3000, backend=backend)
    assert resumed.metrics.restored_from == int(newest.name.split("-")[1]) - 1, "the damage went unnoticed"
    assert any(problem in w for w in resumed.warnings), (problem, resumed.warnings)
    return resumed, problem


@pytest.mark.slow  # a soak: .ci/run runs it after the default suite
def test_every_flipped_byte_is_found_and_the_run_falls_back_exactly_once(
        crashed: tuple[str, Path], tmp_path: Path, expected: list[tuple]) -> None:
    """Flip one random bit in each file of the newest checkpoint in turn; each time the
    checkpoint before it is used, sinks skip the ids they committed, and the output is exact."""
    import random

    rng = random.Random(crashed[0])
    for flip in range(FLIPS):
        def flip_a_bit(newest: Path) -> str:
            files = sorted(p for p in newest.iterdir())
            victim = files[flip % len(files)]
            data = bytearray(victim.read_bytes())
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
            victim.write_bytes(bytes(data))
            return "manifest" if victim.name == "_manifest.json" else f"file {victim.name!r}"

        case = tmp_path / str(flip)
        resumed, _ = resume_damaged(crashed, case, flip_a_bit)
        resumed.run()
        assert committed_rows(case / "job" / "out") == expected, f"flip {flip}"
        shutil.rmtree(case)


def test_a_truncated_manifest_is_found(crashed: tuple[str, Path], tmp_path: Path, expected: list[tuple]) -> None:
    def truncate(newest: Path) -> str:
        manifest = newest / "_manifest.json"
        manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
        return "the manifest is damaged"

    resumed, _ = resume_damaged(crashed, tmp_path, truncate)
    resumed.run()
    assert committed_rows(tmp_path / "job" / "out") == expected


def test_a_deleted_state_file_is_found(crashed: tuple[str, Path], tmp_path: Path, expected: list[tuple]) -> None:
    def delete_state(newest: Path) -> str:
        own = [p for p in newest.iterdir() if p.suffix in (".arrow", ".sqlite")]
        if not own:  # incremental sqlite state: the piece the newest checkpoint cut, in shared/
            import json

            piece = max(json.loads((newest / "_manifest.json").read_text())["shared"])
            (newest.parent / "shared" / piece).unlink()
            return f"shared piece {piece!r} is missing"
        (victim,) = own
        victim.unlink()
        return f"file {victim.name!r} is missing"

    resumed, _ = resume_damaged(crashed, tmp_path, delete_state)
    resumed.run()
    assert committed_rows(tmp_path / "job" / "out") == expected


def test_an_unknown_state_backend_is_a_clear_error(tmp_path: Path) -> None:
    from clink.errors import UsageError

    with pytest.raises(UsageError, match="unknown state backend 'rocksdb'.*memory, sqlite"):
        job(tmp_path / "out", None, backend="rocksdb")


def test_sqlite_state_without_a_state_directory_uses_a_scratch_directory(tmp_path: Path,
                                                                         expected: list[tuple]) -> None:
    run = job(tmp_path / "out", None, backend="sqlite")
    scratch = Path(run._scratch)
    assert list(scratch.glob("*.sqlite")), "the window operator's database is in the scratch directory"
    run.run()
    assert committed_rows(tmp_path / "out") == expected
    assert not scratch.exists()


def test_stop_with_checkpoint_after_the_end_takes_none(tmp_path: Path, expected: list[tuple]) -> None:
    finished = job(tmp_path / "out", tmp_path / "state", every=3000)
    finished.run()
    taken = finished.metrics.checkpoints
    assert finished.stop_with_checkpoint() is None
    assert finished.metrics.checkpoints == taken
    assert committed_rows(tmp_path / "out") == expected


def test_a_connector_without_options_says_so() -> None:
    from clink.errors import SqlError

    with pytest.raises(SqlError, match="unknown option 'rate' for connector 'push'") as e:
        clink.compile("CREATE TABLE t (a INT) WITH ('connector' = 'push', 'rate' = '1'); SELECT a FROM t")
    assert e.value.hint == "the 'push' connector takes no other options"


def test_a_uid_hint_carries_state_across_a_renamed_sink(tmp_path: Path) -> None:
    """Renaming the sink table changes the operator's derived uid (the checkpoint is refused);
    naming the operator with /*+ UID('...') */ in both versions keeps its state."""
    from clink.errors import IncompatibleCheckpoint

    config = {"execution.checkpointing.interval-rows": "3000"}
    out, state = tmp_path / "out", tmp_path / "state"
    named = SQL.format(out=out).replace("SELECT auction,", "SELECT /*+ UID('totals') */ auction,")
    first = Job(clink.compile(named, name="ckpt.sql").runtime_plan,
                RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    while first.metrics.checkpoints < 2:
        first.step()
    del first
    renamed = named.replace("totals (auction", "totals_v2 (auction").replace("INSERT INTO totals",
                                                                          "INSERT INTO totals_v2")
    resumed = Job(clink.compile(renamed, name="ckpt.sql").runtime_plan,
                  RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))
    assert "window:totals" in resumed.uids.values() and resumed.metrics.restored_from == 2
    resumed.run()
    # Without the hint the same rename is refused: the operator is another one.
    plain_state = tmp_path / "plain"
    first = job(tmp_path / "plain-out", plain_state, every=3000)
    while first.metrics.checkpoints < 1:
        first.step()
    unnamed = SQL.format(out=tmp_path / "plain-out").replace("totals (auction", "totals_v2 (auction").replace(
        "INSERT INTO totals", "INSERT INTO totals_v2")
    with pytest.raises(IncompatibleCheckpoint, match="holds no state for operator window-"):
        Job(clink.compile(unnamed, name="ckpt.sql").runtime_plan,
            RuntimeContext(config=config, state_dir=plain_state, stdout=io.StringIO()))


def test_checkpoints_go_on_after_one_source_has_ended(tmp_path: Path) -> None:
    """A short table and a long one into one sink: checkpoints are taken after the short one has
    ended, and a crash after them resumes exactly once (the ended source stays ended)."""
    text = SQL.replace("INSERT INTO totals\nSELECT", "CREATE TABLE short (auction BIGINT, price BIGINT, ts TIMESTAMP(3), "
                       "WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen', 'number-of-rows' = '600', "
                       "'batch-size' = '300', 'seed' = '5', 'fields.auction.min' = '1', 'fields.auction.max' = '5');\n"
                       "CREATE VIEW both_tables AS SELECT * FROM bid UNION ALL SELECT * FROM short;\n"
                       "INSERT INTO totals\nSELECT")
    text = text.replace("FROM TABLE(TUMBLE(TABLE bid,", "FROM TABLE(TUMBLE(TABLE both_tables,")

    def start(out: Path, state: Path) -> Job:
        plan = clink.compile(text.format(out=out), name="two.sql").runtime_plan
        return Job(plan, RuntimeContext(config={"execution.checkpointing.interval-rows": "2000"}, state_dir=state,
                                        stdout=io.StringIO()))

    reference = start(tmp_path / "ref", tmp_path / "ref-state")
    reference.run()
    expected = committed_rows(tmp_path / "ref")
    first = start(tmp_path / "out", tmp_path / "state")
    short = next(n.id for n in first.plan.sources if n.table == "short")
    while short not in first._ended:
        first.step()
    taken = first.metrics.checkpoints
    while first.metrics.checkpoints < taken + 2 and not first.finished:
        first.step()
    assert not first.finished, "no checkpoint after the short table ended"
    del first  # a crash after two checkpoints taken with one source ended
    resumed = start(tmp_path / "out", tmp_path / "state")
    assert resumed.metrics.restored_from == taken + 2
    resumed.run()
    assert committed_rows(tmp_path / "out") == expected


MINI_BATCH_SQL = """
CREATE TABLE t (k INT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5000', 'batch-size' = '100',
                                       'seed' = '3', 'fields.k.min' = '1', 'fields.k.max' = '9');
CREATE TABLE shown (k INT, n BIGINT, s BIGINT) WITH ('connector' = 'print');
INSERT INTO shown SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k;
"""


def _last_per_key(printed: str) -> dict[str, str]:
    """The last value each key was given in a printed changelog (``+I[k, n, s]``, ``+U[...]``)."""
    last = {}
    for line in printed.splitlines():
        if line[:2] in ("+I", "+U"):
            key, _, rest = line[3:-1].partition(", ")
            last[key] = rest
    return last


def test_a_checkpoint_takes_the_rows_waiting_in_a_mini_batch(tmp_path: Path) -> None:
    """Rows that wait in a group aggregation's mini-batch when a checkpoint is taken are
    aggregated before its state is written: a job resumed from it ends with every row counted."""
    plan = clink.compile(MINI_BATCH_SQL, name="mb.sql").runtime_plan
    whole = io.StringIO()
    Job(plan, RuntimeContext(stdout=whole)).run()
    config = {"table.exec.mini-batch.enabled": "true", "table.exec.mini-batch.allow-latency": "1 h",
              "table.exec.mini-batch.size": "100000"}
    first = Job(plan, RuntimeContext(config=config, state_dir=tmp_path / "state", stdout=io.StringIO()))
    for _ in range(5):
        first.step()
    assert sum(first._minibatch_rows.values()) == 500  # five batches wait
    first.checkpoint()
    assert sum(first._minibatch_rows.values()) == 0
    for _ in range(5):
        first.step()
    del first  # a crash: the rows read after the checkpoint are read again
    resumed = io.StringIO()
    Job(plan, RuntimeContext(config=config, state_dir=tmp_path / "state", stdout=resumed)).run()
    assert _last_per_key(resumed.getvalue()) == _last_per_key(whole.getvalue())
    assert len(_last_per_key(whole.getvalue())) == 9


def test_a_mini_batch_goes_once_its_first_row_has_waited_allow_latency() -> None:
    """By the context clock: rows that wait less than 'allow-latency' stay; once the first has
    waited that long, the mini-batch is aggregated and its changes go out."""
    now = [0]
    config = {"table.exec.mini-batch.enabled": "true", "table.exec.mini-batch.allow-latency": "1 s",
              "table.exec.mini-batch.size": "100000"}
    printed = io.StringIO()
    plan = clink.compile(MINI_BATCH_SQL, name="mb.sql").runtime_plan
    job = Job(plan, RuntimeContext(config=config, stdout=printed, clock=lambda: now[0]))
    job.step()
    waiting = sum(job._minibatch_rows.values())
    assert waiting > 0 and printed.getvalue() == ""
    now[0] += 999
    job.step()
    assert sum(job._minibatch_rows.values()) >= waiting and printed.getvalue() == ""
    now[0] += 1
    job.step()
    assert sum(job._minibatch_rows.values()) == 0
    assert len(_last_per_key(printed.getvalue())) == 9
