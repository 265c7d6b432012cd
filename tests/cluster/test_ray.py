"""The same plans on Ray: worker actors joined by the Flight data plane give the rows of one local
process; a worker process killed (SIGKILL) or stalled (SIGSTOP) mid-run is replaced, the job goes on
from the last complete checkpoint, and the committed output is exactly an uninterrupted run's.

One Ray runtime serves the whole module (started here, on this machine's loopback address)."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import ray
from nexmark_cases import BENCH, CSV, QUERIES, SQLITE, assert_local_run_gives, output

import clink
from clink.cluster import onray
from clink.cluster.onray import submit
from clink.errors import PipelineError
from clink.runtime.artefact import artefact_bytes
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

EVENTS = 40_000
pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _ray(ray_cluster):
    return ray_cluster


def _compiled(query: str, folder: Path, *, events: int = EVENTS, extra: str = "", rate: int | None = None,
              limited: bool = False) -> clink.Plan:
    """The query over ``events`` Nexmark events; ``rate``: events per second of event time, and with
    ``limited`` of wall-clock time too, so that the job lasts ``events / rate`` seconds at least
    (the rows depend on the rate, not on the limit)."""
    ddl = (BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                                  f"'events.num' = '{events}', 'batch-size' = '1000'"
                                                  + (", 'rate.limited' = 'true'" if limited else ""))
    if rate is not None:
        ddl = ddl.replace("'10000'", f"'{rate}'")
    text = ddl + extra + QUERIES[query].format(csv=CSV.replace("'out/'", f"'{folder / 'out'}/'"),
                                               sqlite=SQLITE.replace("'out.db'", f"'{folder / 'out.db'}'"))
    return clink.compile(text, name=f"{query}.sql")


def _reference(plan: clink.Plan, folder: Path) -> list[tuple]:
    Job(plan.runtime_plan, RuntimeContext(stdout=io.StringIO(), state_dir=folder / "ref-state")).run()
    rows = output(folder / "out")
    assert rows, "the reference run wrote nothing"
    return rows


def _submit(plan: clink.Plan, *, workers: int, state_dir: Path | None = None, config: dict | None = None):
    artefact = artefact_bytes(module_source=plan.source, plan=plan.runtime_plan)
    return submit(artefact, config={**plan.runtime_plan.config, "parallelism.default": str(workers),
                                    **(config or {})},
                  state_dir=str(state_dir) if state_dir else None, workers=workers, parallelism=workers,
                  fingerprint=plan.fingerprint, host="127.0.0.1")


def _move_aside(folder: Path) -> None:
    for path in (folder / "out", folder / "out.db"):
        if path.exists():
            path.rename(path.with_name(path.name + ".ref"))


@pytest.mark.parametrize("query", ["q4", "q5", "q7", "q20"])
def test_two_ray_workers_give_the_rows_of_one_process(query: str, tmp_path: Path) -> None:
    plan = _compiled(query, tmp_path)
    expected = _reference(plan, tmp_path)
    _move_aside(tmp_path)
    outcome = _submit(plan, workers=2, state_dir=tmp_path / "state",
                      config={"execution.checkpointing.interval": "200 ms"}).result()
    assert outcome["attempts"] == 1 and outcome["checkpoints"] >= 1, "\n".join(outcome["failures"])
    assert output(tmp_path / "out") == expected


def _kill_workers(job, kills: int, seed: str, sig: int = signal.SIGKILL, pause: tuple[float, float] = (0.4, 1.2)):
    """Kill a worker of the job's current attempt ``kills`` times, each after a seeded random pause
    once that attempt's workers are up; return how many kills landed."""
    rng = random.Random(seed)
    landed = 0
    seen: set[int] = set()
    while landed < kills:
        pids = job.worker_pids()
        if not pids or set(pids) & seen:
            if job.done():
                break
            time.sleep(0.05)
            continue
        time.sleep(rng.uniform(*pause))
        if job.done():
            break
        victim = rng.choice(pids)
        try:
            os.kill(victim, sig)
        except ProcessLookupError:
            continue
        seen.update(pids)
        landed += 1
    return landed


def _killed(query: str, tmp_path: Path, *, seconds: int, kills: int, pause: tuple[float, float]) -> None:
    """Run ``query`` on two workers for ``seconds`` at least (its sources limited to 100,000 events
    a second), kill one of the current attempt's workers ``kills`` times; the output must be
    exactly the uninterrupted run's, after exactly one restart per kill."""
    settings = (f"SET 'restart-strategy.fixed-delay.attempts' = '{kills + 10}';\n"
                "SET 'restart-strategy.fixed-delay.delay' = '50 ms';\n")
    expected = _reference(_compiled(query, tmp_path, events=seconds * 100_000, rate=100_000), tmp_path)
    plan = _compiled(query, tmp_path, events=seconds * 100_000, extra=settings, rate=100_000, limited=True)
    _move_aside(tmp_path)
    job = _submit(plan, workers=2, state_dir=tmp_path / "state",
                  config={"execution.checkpointing.interval": "300 ms"})
    landed = _kill_workers(job, kills, seed=f"{query}-{kills}", pause=pause)
    outcome = job.result()
    assert landed == kills, f"only {landed} kills landed before the job ended: make the job longer"
    assert outcome["attempts"] == kills + 1
    assert output(tmp_path / "out") == expected


def test_checkpoints_on_s3_carry_a_job_over_killed_workers(tmp_path: Path, s3_uri) -> None:
    """No shared state directory: the checkpoints are in an S3 bucket every worker reaches by its
    URI ('execution.checkpointing.dir'); each worker keeps its working files to itself."""
    import pyarrow.fs as pafs

    settings = ("SET 'restart-strategy.fixed-delay.attempts' = '10';\n"
                "SET 'restart-strategy.fixed-delay.delay' = '50 ms';\n")
    expected = _reference(_compiled("q5", tmp_path, events=600_000, rate=100_000), tmp_path)
    plan = _compiled("q5", tmp_path, events=600_000, extra=settings, rate=100_000, limited=True)
    _move_aside(tmp_path)
    uri = s3_uri("q5")
    job = _submit(plan, workers=2, config={"execution.checkpointing.interval": "300 ms",
                                           "execution.checkpointing.dir": uri})
    landed = _kill_workers(job, 2, seed="s3", pause=(1.0, 1.5))
    outcome = job.result()
    assert landed == 2 and outcome["attempts"] == 3, outcome["failures"]
    assert output(tmp_path / "out") == expected
    fs, path = pafs.FileSystem.from_uri(uri)
    names = [i.path[len(path):] for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))]
    assert any(n.endswith("/_manifest.json") for n in names), names


@pytest.mark.parametrize("query", ["q7", "q20"])
def test_killed_workers_are_replaced_and_the_output_is_exactly_once(query: str, tmp_path: Path) -> None:
    _killed(query, tmp_path, seconds=10, kills=3, pause=(0.4, 1.2))


@pytest.mark.slow
@pytest.mark.parametrize("query", ["q7", "q20", "q5"])
def test_ten_killed_workers_at_random_moments(query: str, tmp_path: Path) -> None:
    _killed(query, tmp_path, seconds=40, kills=10, pause=(0.2, 1.5))


def test_a_stalled_worker_is_found_by_its_missing_heartbeat(tmp_path: Path) -> None:
    plan = _compiled("q7", tmp_path, events=400_000,
                     extra="SET 'restart-strategy.fixed-delay.delay' = '50 ms';\n"
                           "SET 'cluster.heartbeat.timeout' = '2 s';\n")
    expected = _reference(plan, tmp_path)
    _move_aside(tmp_path)
    job = _submit(plan, workers=2, state_dir=tmp_path / "state",
                  config={"execution.checkpointing.interval": "300 ms"})
    while not job.worker_pids():
        time.sleep(0.05)
    time.sleep(0.5)
    stalled = job.worker_pids()[1]
    os.kill(stalled, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        outcome = job.result()
    finally:
        try:
            os.kill(stalled, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert outcome["attempts"] == 2
    assert "did not answer for 2 s" in outcome["failures"][0]
    assert time.monotonic() - stopped_at > 2
    assert output(tmp_path / "out") == expected


def test_a_pipeline_error_on_a_worker_fails_the_job_with_its_sql_position(tmp_path: Path) -> None:
    text = ("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5000');\n"
            f"CREATE TABLE out (a INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path}/out/', "
            "'format' = 'csv');\nINSERT INTO out SELECT CAST(CONCAT('x', CAST(a AS STRING)) AS INT) FROM t;")
    plan = clink.compile(text, name="cast.sql")
    with pytest.raises(PipelineError, match=r"cannot CAST[\s\S]*cast.sql:3:"):
        _submit(plan, workers=2).result()


def test_a_clients_next_job_runs_on_the_actors_of_its_last_clean_one(tmp_path: Path) -> None:
    """Workers of a job that ended cleanly run the same client's next job (no new processes), with
    the next job's own rows; those of a failed job are not kept."""
    counted = clink.compile("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '3000', "
                            "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '3000');\n"
                            f"CREATE TABLE out (a INT) WITH ('connector' = 'filesystem', 'path' = "
                            f"'{tmp_path}/out/', 'format' = 'csv');\nINSERT INTO out SELECT a FROM t WHERE a % 1000 = 0;")
    first = _submit(counted, workers=2)
    first.result()
    kept = set(first.worker_pids())
    second = _submit(counted, workers=2)
    assert second.result()["attempts"] == 1 and set(second.worker_pids()) == kept
    assert sorted(output(tmp_path / "out")) == [(v,) for v in ("1000", "1000", "2000", "2000", "3000", "3000")]
    failing = clink.compile("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '50');\n"
                            f"CREATE TABLE out (a INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path}/bad/', "
                            "'format' = 'csv');\nINSERT INTO out SELECT CAST(CONCAT('x', CAST(a AS STRING)) AS INT) "
                            "FROM t;")
    failed = _submit(failing, workers=2)
    with pytest.raises(PipelineError):
        failed.result()
    assert set(failed.worker_pids()) == kept
    after = _submit(counted, workers=2)
    after.result()
    assert not set(after.worker_pids()) & kept


def test_clink_run_submits_to_a_running_ray_cluster(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl.sql"
    ddl.write_text((BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'", "'events.num' = '50000'"))
    query = tmp_path / "q7.sql"
    query.write_text(QUERIES["q7"].format(csv=CSV, sqlite=SQLITE) + "\n")
    address = ray.get_runtime_context().gcs_address
    run = subprocess.run([sys.executable, "-m", "clink", "run", "-i", "ddl.sql", "q7.sql", "--target", "ray",
                          "--ray-address", address, "-p", "2"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "on 2 worker(s)" in run.stderr
    assert_local_run_gives(output(tmp_path / "out"), tmp_path, "q7.sql")


def test_what_print_sinks_write_on_the_workers_comes_back_to_clink_run(tmp_path: Path) -> None:
    """A print sink on Ray writes in the worker's process; its lines come back to the terminal of
    ``clink run``, on standard output or (``'standard-error' = 'true'``) standard error."""
    (tmp_path / "p.sql").write_text(
        "CREATE TABLE t (id BIGINT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '3000', "
        "'batch-size' = '100', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000', "
        "'fields.v.min' = '0', 'fields.v.max' = '9');\n"
        "CREATE TABLE shown (id BIGINT, v INT) WITH ('connector' = 'print', 'print-identifier' = 'out');\n"
        "CREATE TABLE noted (id BIGINT) WITH ('connector' = 'print', 'standard-error' = 'true');\n"
        "INSERT INTO shown SELECT id, v FROM t WHERE v < 5;\n"
        "INSERT INTO noted SELECT id FROM t WHERE id % 1000 = 0;\n")

    def run(*extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "clink", "run", "p.sql", *extra], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    local = run()
    on_ray = run("--target", "ray", "--ray-address", ray.get_runtime_context().gcs_address, "-p", "2")
    printed = sorted(line for line in on_ray.stdout.splitlines() if line.startswith("out> "))
    assert len(printed) > 1000 and printed == sorted(local.stdout.splitlines())
    noted = sorted(line for line in on_ray.stderr.splitlines() if line.startswith("+I["))
    assert noted == ["+I[1000]", "+I[2000]", "+I[3000]"]


def _wait_for_workers(job, count: int, other_than: set[int] = frozenset()) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = job.worker_pids()
        if len(pids) == count and not set(pids) & other_than and job.status()["workers"]:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"the job never ran on {count} workers")


def test_rescale_from_one_to_four_to_two_gives_the_rows_of_parallelism_one(tmp_path: Path) -> None:
    expected = _reference(_compiled("q20", tmp_path, events=800_000, rate=100_000), tmp_path)
    plan = _compiled("q20", tmp_path, events=800_000, rate=100_000, limited=True)  # 8 s at least
    _move_aside(tmp_path)
    job = _submit(plan, workers=1, state_dir=tmp_path / "state")
    first = _wait_for_workers(job, 1)
    time.sleep(0.5)
    job.rescale(4)
    second = _wait_for_workers(job, 4, set(first))
    time.sleep(0.5)
    job.rescale(2)
    _wait_for_workers(job, 2, set(second))
    outcome = job.result()
    assert not outcome["failures"] and outcome["attempts"] == 3
    assert any("rescaled from 1 to 4" in line for line in outcome["log"])
    assert any("rescaled from 4 to 2" in line for line in outcome["log"])
    assert output(tmp_path / "out") == expected


def test_submit_jobs_and_stop_with_checkpoint_then_go_on_locally(tmp_path: Path) -> None:
    """``clink submit`` leaves the job running on the cluster; ``clink jobs`` lists it; ``clink stop
    --with-checkpoint`` stops it with its output committed up to a checkpoint, from which a local
    ``clink run`` with the same state directory ends with exactly the uninterrupted rows."""
    ddl = tmp_path / "ddl.sql"
    # 400,000 events at 50,000 a second: the job runs for about 8 s, long enough to be stopped.
    ddl.write_text((BENCH / "ddl.sql").read_text()
                   .replace("'events.num' = '10000000'", "'events.num' = '400000', 'rate.limited' = 'true'")
                   .replace("'10000'", "'50000'"))
    query = tmp_path / "q7.sql"
    query.write_text(QUERIES["q7"].format(csv=CSV, sqlite=SQLITE) + "\n")
    address = ray.get_runtime_context().gcs_address

    def clink_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clink", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)

    submitted = clink_cli("submit", "-i", "ddl.sql", "q7.sql", "--ray-address", address, "-p", "2",
                          "--state-dir", "state", "--set", "metrics.port=0")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    job = onray.RayJob.find(job_id)
    _wait_for_workers(job, 2)
    listed = clink_cli("jobs", "--ray-address", address)
    assert job_id in listed.stdout and "running" in listed.stdout
    shown = clink_cli("jobs", job_id, "--ray-address", address)
    assert "worker 1 (subtasks 1 of each operator)" in shown.stdout, shown.stdout + shown.stderr
    # Each worker serves its own subtasks' metrics; clink jobs shows every operator's.
    assert "rows in/s" in shown.stdout and "source:datagen ×2" in shown.stdout, shown.stdout
    workers = job.status()["workers"]
    for worker, live in workers.items():
        scraped = scrape_prometheus(live["metrics_url"])
        read = [s.value for s in scraped["clink_records_out"].samples if s.name == "clink_records_out_total"
                and s.labels["operator"] == "source:datagen"]
        assert read and read[0] > 0
        assert {s.labels["worker"] for s in scraped["clink_records_out"].samples} == {str(worker)}
    stopped = clink_cli("stop", job_id, "--with-checkpoint", "--ray-address", address)
    assert stopped.returncode == 0 and "stopped" in stopped.stderr and "with checkpoint" in stopped.stderr, stopped.stderr
    assert job.status()["state"] == "stopped"
    resumed = clink_cli("run", "-i", "ddl.sql", "q7.sql", "--state-dir", "state")
    assert resumed.returncode == 0 and "resuming from checkpoint" in resumed.stderr, resumed.stderr
    assert_local_run_gives(output(tmp_path / "out"), tmp_path, "q7.sql")


def test_plan_start_on_ray_polls_rows_and_stops_with_a_checkpoint_a_local_start_goes_on_from(
        tmp_path: Path) -> None:
    """``plan.start(config={'execution.target': 'ray'})``: the rows of a bare SELECT come back from
    the workers to ``poll``; ``stop()`` ends the job with a checkpoint; ``plan.start`` in this
    process from the same state directory gives the rest: together exactly the rows of one
    uninterrupted run, none twice."""
    ddl = ((BENCH / "ddl.sql").read_text()
           .replace("'events.num' = '10000000'", "'events.num' = '400000', 'batch-size' = '1000'"))
    select = ("SELECT auction, window_start, COUNT(*) AS bids, MAX(price) AS top FROM TABLE(TUMBLE(TABLE bid, "
              "DESCRIPTOR(dateTime), INTERVAL '1' SECOND)) GROUP BY auction, window_start, window_end;")
    expected = clink.sql(ddl.replace("'10000'", "'50000'") + select).to_arrow()
    limited = ddl.replace("'events.num' = '400000'", "'events.num' = '400000', 'rate.limited' = 'true'")
    plan = clink.compile(limited.replace("'10000'", "'50000'") + select, name="bids.sql")  # 8 s at least
    state = tmp_path / "state"
    polled = []
    job = plan.start(state_dir=state, config={"execution.target": "ray", "parallelism.default": "2",
                                              "execution.checkpointing.interval": "300 ms"})
    assert job.queries == ["query_1"]
    with pytest.raises(clink.UsageError, match="nothing to step"):
        job.step()
    first = job.poll(timeout=60)
    assert first is not None and first.num_rows > 0, "no rows came back from the workers"
    polled.append(first)
    stopped_at = job.stop()
    assert stopped_at is not None and job.finished
    polled.extend(iter(lambda: job.poll(), None))
    metrics = job.metrics()
    assert metrics.stopped_at == stopped_at and 0 < sum(metrics.records_in.values()) < 400_000, metrics
    assert job.stop() is None  # stopped already
    rest = plan.start(state_dir=state, background=True)
    assert rest.metrics().restored_from == stopped_at
    rest.wait()
    polled.extend(iter(lambda: rest.poll(), None))
    got = pa.Table.from_batches(polled, schema=expected.schema)
    assert got.num_rows == expected.num_rows
    assert sorted(got.to_pylist(), key=repr) == sorted(expected.to_pylist(), key=repr)


def scrape_prometheus(url: str) -> dict:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(urllib.request.urlopen(url, timeout=10).read().decode())}


def test_clink_state_reads_the_checkpoint_of_a_cluster_job(tmp_path: Path) -> None:
    """The job master's checkpoint records each operator's kind and state layout as a local one does:
    ``clink state`` reads the group aggregate's state of both workers from it, and it holds the final
    count and maximum of every key (a run in this process is the reference)."""
    ddl = (BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'", "'events.num' = '20000'")
    select = "SELECT auction, COUNT(*) AS bids, MAX(price) AS top FROM bid GROUP BY auction"
    plan = clink.compile(ddl + "CREATE TABLE out (auction BIGINT, bids BIGINT, top BIGINT) WITH ('connector' = "
                         f"'blackhole');\nINSERT INTO out {select};", name="counts.sql")
    state = tmp_path / "state"
    _submit(plan, workers=2, state_dir=state).result()

    def clink_state(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "clink", "state", str(state), *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    import json

    listed = [json.loads(line) for line in clink_state("--format", "json").splitlines()]
    (group,) = [row for row in listed if row["kind"] == "group"]
    expected = clink.sql(ddl + select + ";").to_arrow()
    assert group["rows"] == expected.num_rows
    kept = pa.Table.from_pylist([json.loads(line) for line in
                                 clink_state("--operator", group["operator"], "--format", "json").splitlines()])
    assert kept.column_names[:2] == ["auction", "COUNT(*)"]  # aggregates by their SQL (the view's, for price)
    got = sorted(zip(*(kept.column(i).to_pylist() for i in range(3)), strict=True))
    assert got == sorted(zip(*(expected.column(c).to_pylist() for c in ("auction", "bids", "top")), strict=True))


def _dashboard_url(proc: subprocess.Popen) -> str:
    for _ in range(200):
        line = proc.stderr.readline()
        if line.startswith("dashboard: "):
            return line.removeprefix("dashboard: ").strip()
        if not line and proc.poll() is not None:
            break
    raise AssertionError("no dashboard address printed")


def _get_json(url: str) -> dict:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def test_the_dashboard_of_a_job_on_ray(tmp_path: Path) -> None:
    """``clink run --target ray --ui`` serves the job's dashboard from this process, with the numbers
    of both workers' subtasks as the job master has them; ``clink jobs JOB --ui`` serves the same
    for a submitted job, until it ends."""
    ddl = tmp_path / "ddl.sql"
    ddl.write_text((BENCH / "ddl.sql").read_text()
                   .replace("'events.num' = '10000000'", "'events.num' = '300000', 'rate.limited' = 'true'")
                   .replace("'10000'", "'50000'"))  # six seconds at least
    query = tmp_path / "q7.sql"
    query.write_text(QUERIES["q7"].format(csv=CSV, sqlite=SQLITE) + "\n")
    address = ray.get_runtime_context().gcs_address
    run = subprocess.Popen([sys.executable, "-m", "clink", "run", "-i", "ddl.sql", "q7.sql", "--target", "ray",
                            "--ray-address", address, "-p", "2", "--ui"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        url = _dashboard_url(run)
        plan = _get_json(url + "api/plan")
        assert any(node["operator"] == "source:datagen" for node in plan["nodes"])
        assert [s["name"] for s in plan["sources"]] == ["q7.sql"] and "TUMBLE" in plan["sources"][0]["text"]
        # The workers' numbers reach the job master in steps (a heartbeat's worth of rows, about
        # a second apart, sometimes two): sampled until they move on from the first seen.
        seen = []
        for _ in range(40):
            snapshot = _get_json(url + "api/metrics")
            source = [row for row in snapshot["subtasks"] if row["operator"] == "source:datagen"]
            if len(source) == 2 and all(row["records_out"] > 0 for row in source):
                seen.append(sum(row["records_out"] for row in source))
                if seen[-1] != seen[0]:
                    break
            time.sleep(0.5)
        assert len(seen) >= 2 and 0 < seen[0] < seen[-1], seen
        assert snapshot["state"] == "running"
    finally:
        _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err


def test_clink_jobs_ui_shows_a_submitted_job_until_it_stops(tmp_path: Path) -> None:
    ddl = tmp_path / "ddl.sql"
    ddl.write_text((BENCH / "ddl.sql").read_text()
                   .replace("'events.num' = '10000000'", "'events.num' = '2000000', 'rate.limited' = 'true'")
                   .replace("'10000'", "'50000'"))  # forty seconds: stopped long before
    query = tmp_path / "q7.sql"
    query.write_text(QUERIES["q7"].format(csv=CSV, sqlite=SQLITE) + "\n")
    address = ray.get_runtime_context().gcs_address
    submitted = subprocess.run([sys.executable, "-m", "clink", "submit", "-i", "ddl.sql", "q7.sql", "--ray-address",
                                address, "-p", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    _wait_for_workers(onray.RayJob.find(job_id), 2)
    shown = subprocess.Popen([sys.executable, "-m", "clink", "jobs", job_id, "--ray-address", address, "--ui"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _dashboard_url(shown)
        assert [s["name"] for s in _get_json(url + "api/plan")["sources"]] == ["q7.sql"]
        for _ in range(30):
            snapshot = _get_json(url + "api/metrics")
            if sum(row["records_out"] for row in snapshot["subtasks"] if row["operator"] == "source:datagen"):
                break
            time.sleep(1)
        assert snapshot["state"] == "running" and {row["subtask"] for row in snapshot["subtasks"]} == {0, 1}
        stopped = subprocess.run([sys.executable, "-m", "clink", "stop", job_id, "--ray-address", address],
                                 capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        out, err = shown.communicate(timeout=120)  # it ends with the job
    finally:
        if shown.poll() is None:
            shown.kill()
    assert shown.returncode == 0, err
    assert f"job {job_id}" in out
