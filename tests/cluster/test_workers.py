"""The cluster's job master and workers, with workers as threads joined in memory (``cluster.local``):
a plan's subtasks spread over workers give the rows of one process; checkpoints put together by the
job master from every worker's parts restore, locally and at another parallelism; a worker that
fails mid-run is restarted with the others from the last complete checkpoint, and the committed
output is exactly an uninterrupted run's."""

from __future__ import annotations

import io
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from nexmark_cases import BENCH, CSV, QUERIES, SQLITE, output

import clink
from clink.cluster.local import run_in_threads
from clink.cluster.master import JobFailed
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

EVENTS = 20_000
CASES = ["q4", "q5", "q7", "q9", "q11", "q20", "over"]


def _plan(query: str, folder: Path, extra: str = ""):
    """The query's plan, its sink writing under ``folder``."""
    ddl = (BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                                  f"'events.num' = '{EVENTS}', 'batch-size' = '500'")
    text = ddl + extra + QUERIES[query].format(csv=CSV.replace("'out/'", f"'{folder / 'out'}/'"),
                                               sqlite=SQLITE.replace("'out.db'", f"'{folder / 'out.db'}'"))
    return clink.compile(text, name=f"{query}.sql").runtime_plan


_REFERENCES: dict[str, list[tuple]] = {}


def _reference(query: str, tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    if query not in _REFERENCES:
        folder = tmp_path_factory.mktemp(f"ref-{query}")
        Job(_plan(query, folder), RuntimeContext(stdout=io.StringIO())).run()
        _REFERENCES[query] = output(folder / "out")
        assert _REFERENCES[query], f"{query}: the reference run wrote nothing"
    return _REFERENCES[query]


@pytest.mark.parametrize("query", CASES)
def test_two_workers_give_the_rows_of_one_process(query: str, tmp_path: Path,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    expected = _reference(query, tmp_path_factory)
    run_in_threads(_plan(query, tmp_path), RuntimeContext(stdout=io.StringIO(),
                                                          config={"parallelism.default": "2"}), workers=2)
    assert output(tmp_path / "out") == expected


def _fail_after(steps: int, checkpoints: int = 1, pause: float = 0.01):
    """An ``on_attempt`` that makes worker 1 of the first attempt fail ``steps`` rounds after its
    ``checkpoints``-th checkpoint has committed; ``pause``: seconds each of its rounds lasts at
    least (so that checkpoints come before the job ends, on a busy machine too)."""
    def on_attempt(attempt: int, workers) -> None:
        if attempt == 1:
            workers[1].on_job = fail

    def fail(job) -> None:
        step, commit = job.step, job.commit_checkpoint
        left = [steps]

        def failing_step() -> bool:
            if pause:
                time.sleep(pause)
            if job.metrics.checkpoints >= checkpoints:
                left[0] -= 1
                if left[0] < 0:
                    raise ConnectionError("worker 1 lost its network")
            return step()

        def counting_commit(checkpoint_id: int, handles: dict) -> None:
            commit(checkpoint_id, handles)
            job.metrics.checkpoints += 1

        job.step, job.commit_checkpoint = failing_step, counting_commit
    return on_attempt


@pytest.mark.parametrize("query", CASES)
def test_a_failed_worker_restarts_the_job_from_the_last_checkpoint(
        query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    expected = _reference(query, tmp_path_factory)
    steps = random.Random(query).randrange(0, 5)
    plan = _plan(query, tmp_path, "SET 'execution.checkpointing.interval' = '20 ms';\n"
                                  "SET 'restart-strategy.fixed-delay.delay' = '10 ms';\n")
    master = run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), state_dir=tmp_path / "state",
                                                 config={"parallelism.default": "2"}),
                            workers=2, on_attempt=_fail_after(steps))
    assert master.attempt == 2 and "lost its network" in master.failures[0], "\n".join(master.failures)
    assert output(tmp_path / "out") == expected
    _assert_checkpoints_intact(tmp_path / "state")


def _assert_checkpoints_intact(state: Path) -> None:
    """Every checkpoint the job completed still matches its manifest: no worker wrote into one
    after it had sent its parts (a barrier passing a stateless subtask later once began a second
    set of parts, which wrote the state of subtasks that ended afterwards over the files)."""
    from clink.runtime.checkpoint import CheckpointStore

    infos = [i for i in CheckpointStore(state).list() if (i.path / "_manifest.json").exists()]
    assert infos and all(i.valid for i in infos), [i.problem for i in infos if not i.valid]


@pytest.mark.parametrize("query", ["q5", "q7", "q20"])
def test_a_cluster_checkpoint_resumes_in_one_process_at_another_parallelism(
        query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stopped for good after a checkpoint (no restarts left), the job goes on in one process at
    parallelism 3 from what the two workers wrote, to exactly the uninterrupted output."""
    expected = _reference(query, tmp_path_factory)
    plan = _plan(query, tmp_path, "SET 'execution.checkpointing.interval' = '20 ms';\n"
                                  "SET 'restart-strategy.type' = 'none';\n")
    state = tmp_path / "state"
    with pytest.raises(JobFailed, match="lost its network"):
        run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), state_dir=state,
                                            config={"parallelism.default": "2"}),
                       workers=2, on_attempt=_fail_after(3))
    assert any(state.glob("checkpoints/chk-*/_manifest.json")), "no checkpoint completed before the failure"
    job = Job(plan, RuntimeContext(stdout=io.StringIO(), state_dir=state, config={"parallelism.default": "3"}))
    assert job.metrics.restored_from is not None
    job.run()
    assert output(tmp_path / "out") == expected


@pytest.mark.parametrize("query", ["q7", "q20"])
def test_a_damaged_newest_checkpoint_is_passed_over_without_duplicates(
        query: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A job on two workers stops for good after a few checkpoints; a byte of the newest one's
    state is flipped. The next run resumes from the checkpoint before (saying why), takes back
    what the damaged one committed, and writes exactly the uninterrupted rows."""
    expected = _reference(query, tmp_path_factory)
    plan = _plan(query, tmp_path, "SET 'execution.checkpointing.interval' = '20 ms';\n"
                                  "SET 'restart-strategy.type' = 'none';\n")
    state = tmp_path / "state"
    ctx = RuntimeContext(stdout=io.StringIO(), state_dir=state, config={"parallelism.default": "2"})
    with pytest.raises(JobFailed, match="lost its network"):
        run_in_threads(plan, ctx, workers=2, on_attempt=_fail_after(2, checkpoints=3, pause=0.02))
    complete = sorted(int(p.parent.name.removeprefix("chk-")) for p in state.glob("checkpoints/chk-*/_manifest.json"))
    assert len(complete) >= 2, f"only checkpoints {complete} completed before the failure"
    newest = state / "checkpoints" / f"chk-{complete[-1]}"
    victim = max((p for p in newest.iterdir() if p.name not in ("job.json", "_manifest.json")),
                 key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    master = run_in_threads(plan, ctx, workers=2)
    assert master.restored_from == complete[-2]
    assert any(f"checkpoint {newest.name}: file {victim.name!r} does not match its checksum" in w
               for w in master.warnings), master.warnings
    assert (state / "checkpoints" / "_rolled_back" / newest.name).is_dir()
    assert output(tmp_path / "out") == expected


def test_a_pipeline_error_fails_the_job_without_restarts(tmp_path: Path) -> None:
    text = ("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5000');\n"
            f"CREATE TABLE out (a INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path}/out/', "
            "'format' = 'csv');\nINSERT INTO out SELECT CAST(CONCAT('x', CAST(a AS STRING)) AS INT) FROM t;")
    plan = clink.compile(text, name="cast.sql").runtime_plan
    with pytest.raises(JobFailed) as raised:
        run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), config={"parallelism.default": "2"}),
                       workers=2)
    assert "cannot CAST" in str(raised.value) and "cast.sql:3:" in str(raised.value)
    assert "restart" not in str(raised.value)


def test_what_a_worker_of_an_earlier_attempt_says_is_refused(tmp_path: Path,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """A worker of the failed first attempt that comes back during the second: its failure, its
    parts of a checkpoint and its end are ignored (were they taken, the job would restart again,
    or complete a checkpoint without the current workers' state, or end early)."""
    expected = _reference("q7", tmp_path_factory)
    plan = _plan("q7", tmp_path, "SET 'execution.checkpointing.interval' = '20 ms';\n"
                                 "SET 'restart-strategy.fixed-delay.delay' = '10 ms';\n")
    masters = []
    fail = _fail_after(1)

    def on_attempt(attempt: int, workers) -> None:
        fail(attempt, workers)
        if attempt == 2:
            master = masters[0]
            master.report(1, 1, "failed", "ConnectionError: back from the dead")
            master.report(1, 0, "checkpoint", (master.coordinator.next_id,
                                               {"sources": {}, "operators": {}, "sinks": {}, "signatures": {}}))
            master.report(1, 0, "finished", {})
            master.report(1, 1, "closed", {})

    master = run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), state_dir=tmp_path / "state"), workers=2,
                            on_attempt=on_attempt, on_master=masters.append)
    assert master.attempt == 2 and len(master.failures) == 1, master.failures
    assert output(tmp_path / "out") == expected


def test_a_stop_with_checkpoint_then_a_rescale_in_threads(tmp_path: Path,
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    """Rescale 2 → 3 while running, then stop with a checkpoint; a local run at parallelism 1 goes
    on from it to exactly the uninterrupted rows."""
    expected = _reference("q20", tmp_path_factory)
    plan = _plan("q20", tmp_path)
    commands = []

    def on_attempt(attempt: int, workers) -> None:
        if attempt == 1:
            workers[0].on_job = lambda job: commands[0].command("rescale", 3)
        elif attempt == 2:
            workers[0].on_job = lambda job: commands[0].command("stop", True)

    master = run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), state_dir=tmp_path / "state"), workers=2,
                            on_attempt=on_attempt, on_master=commands.append)
    assert master.state == "stopped" and master.stopped_at is not None and master.workers == 3
    assert not master.failures
    job = Job(plan, RuntimeContext(stdout=io.StringIO(), state_dir=tmp_path / "state"))
    assert job.metrics.restored_from == master.stopped_at
    job.run()
    assert output(tmp_path / "out") == expected


def test_cluster_settings_that_cannot_apply_are_refused(tmp_path: Path) -> None:
    """A target clink does not have is a positioned SQL error; a Ray address, or the Ray target,
    for a job that runs in this process, and a row-counted checkpoint interval on a cluster, are
    refused with what to do instead: none is accepted and ignored."""
    from clink.errors import SqlError, UsageError

    table = "CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\nSELECT a FROM t;"
    with pytest.raises(SqlError) as bad:
        clink.compile("SET 'execution.target' = 'yarn';\n" + table, name="target.sql")
    assert "target.sql:1:" in bad.value.render({}) and "'local', 'ray'" in str(bad.value)
    with pytest.raises(UsageError, match="'ray.address' is set, and the job runs in this process"):
        clink.sql(table, config={"ray.address": "127.0.0.1:6379"}).to_arrow()
    with pytest.raises(UsageError, match="clink run --target ray"):
        Job(clink.compile(table).runtime_plan, RuntimeContext(config={"execution.target": "ray"}))
    plan = _plan("q7", tmp_path, "SET 'execution.checkpointing.interval-rows' = '1000';\n")
    with pytest.raises(UsageError, match="set 'execution.checkpointing.interval'"):
        run_in_threads(plan, RuntimeContext(stdout=io.StringIO(), state_dir=tmp_path / "state"), workers=2)
    assert not (tmp_path / "out").exists() or not output(tmp_path / "out")


def test_what_lives_only_in_this_process_is_refused_for_a_job_on_ray() -> None:
    """A clock or a filesystem given in the RuntimeContext cannot reach Ray's workers: refused
    before anything starts, not dropped (the job would run with another clock, or fail to reach
    its paths on the workers)."""
    import pyarrow.fs as pafs

    from clink.errors import UsageError

    table = "CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\nSELECT a FROM t;"
    ray = {"execution.target": "ray"}
    with pytest.raises(UsageError, match="reads the workers' own clocks"):
        clink.sql(table, config=ray, context=RuntimeContext(clock=lambda: 0)).to_arrow()
    with pytest.raises(UsageError, match="RuntimeContext.filesystems cannot reach them"):
        clink.sql(table, config=ray, context=RuntimeContext(filesystems={"s3": pafs.LocalFileSystem()})).to_arrow()
    with pytest.raises(UsageError, match="reads the workers' own clocks"):
        clink.compile(table).start(config=ray, context=RuntimeContext(clock=lambda: 0))
    pushed = "CREATE TABLE t (a INT) WITH ('connector' = 'push');\nSELECT a FROM t;"
    with pytest.raises(UsageError, match="push table.* t take their rows from this process"):
        clink.compile(pushed).start(config=ray)


def test_a_failure_is_told_in_one_line_by_its_exception_not_its_traceback() -> None:
    from clink.cluster.master import headline

    reason = ("worker 1: Traceback (most recent call last):\n  File \"op.py\", line 3, in step\n    x()\n"
              "OSError: disk I/O error")
    assert headline(reason) == "worker 1: OSError: disk I/O error"
    assert headline("worker 0: UsageError: a wrong zone\nhint") == "worker 0: UsageError: a wrong zone"


def test_an_idle_source_releases_the_watermark_in_the_other_workers_too(tmp_path: Path) -> None:
    """Two sources in worker 0 feed an event-time temporal join (keyed: its subtask 1 runs in
    worker 1), which emits a row once the watermark of both inputs has passed it; the versioned
    side goes silent. After its idle timeout its channel stops holding the join's watermark back
    in both workers (the idleness crosses in band with the rows), so every key's rows come out."""
    import threading

    from clink.runtime.connectors import default_registry
    from clink.runtime.connectors.base import Connector, OptionSpec, SourceReader

    second = 1000
    busy = [(k, t * second) for t in (1, 4, 12, 15) for k in range(6)]
    feeds = {"busy": busy, "quiet": [(0, 2 * second)]}

    class Feed(SourceReader):
        bounded = False  # has nothing after its rows, and never ends

        def __init__(self, rows: list[tuple[int, int]]) -> None:
            super().__init__()
            self.rows = list(rows)

        def poll(self):
            if not self.rows:
                return None
            k, t = self.rows.pop(0)
            return pa.record_batch([pa.array([k], pa.int64()), pa.array([t], pa.int64()).cast(pa.timestamp("ms"))],
                                   names=["k", "ts"])

    registry = default_registry()
    registry.register(Connector(
        name="feed", description="test feed", source_options=(OptionSpec(name="which", description=""),),
        create_source=lambda spec, ctx: Feed(feeds[spec.options["which"]])))
    sql = """
        CREATE TABLE busy (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'feed', 'which' = 'busy');
        CREATE TABLE quiet (k BIGINT, ts TIMESTAMP(3), PRIMARY KEY (k) NOT ENFORCED, WATERMARK FOR ts AS ts)
        WITH ('connector' = 'feed', 'which' = 'quiet', 'scan.watermark.idle-timeout' = '10 s');
        SELECT b.k, b.ts, q.ts AS version FROM busy AS b LEFT JOIN quiet FOR SYSTEM_TIME AS OF b.ts AS q ON b.k = q.k;
    """
    plan = clink.compile(sql, name="idle.sql", connectors=registry).runtime_plan
    now = [0]
    rows: list[tuple] = []
    ctx = RuntimeContext(connectors=registry, clock=lambda: now[0], stdout=io.StringIO(),
                         on_result=lambda name, batch: rows.extend(
                             (r["k"], r["ts"].second, r["version"] and r["version"].second) for r in batch.to_pylist()))
    masters = []
    thread = threading.Thread(target=run_in_threads, args=(plan, ctx),
                              kwargs={"workers": 2, "on_master": masters.append}, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)  # every row read; the quiet side's watermark (2 s) holds the later rows back
        assert sorted(rows) == [(k, 1, None) for k in range(6)]
        now[0] = 11 * second  # the quiet source has had no rows for longer than its idle timeout
        deadline = time.monotonic() + 20
        while len(rows) < len(busy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(rows) == sorted((k, t // second, 2 if k == 0 and t >= 2 * second else None) for k, t in busy)
    finally:
        masters[0].command("stop", False)
        thread.join(30)
