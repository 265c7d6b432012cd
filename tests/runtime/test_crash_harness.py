"""Crash harness: `clink run` of a windowed pipeline with an exactly-once file sink is killed
with SIGKILL at random moments (and at each named point of the checkpoint protocol), restarted
from its state directory until it finishes; the committed output must equal an uninterrupted
run's, row for row.

`pytest tests/runtime/test_crash_harness.py --soak` runs hundreds of kill points. A failure
prints the seed that replays it.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SQL = """
SET 'execution.checkpointing.interval-rows' = '3000';
SET 'state.backend' = '{backend}';
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' DAY)
WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}', 'seed' = '21', 'batch-size' = '500',{rate}
      'fields.auction.min' = '1', 'fields.auction.max' = '20', 'fields.price.min' = '1', 'fields.price.max' = '999');
CREATE TABLE totals (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT, total BIGINT)
WITH ('connector' = 'filesystem', 'path' = 'out/', 'format' = 'csv');
INSERT INTO totals
SELECT auction, window_start, COUNT(*), MAX(price), SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '30' MINUTE))
GROUP BY window_start, window_end, auction;
"""

FAULT_POINTS = ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                "after_checkpoint_before_sink_commit", "during_sink_commit"]


def committed_rows(folder: Path) -> list[tuple]:
    rows = []
    for path in sorted(folder.iterdir()):
        if not path.name.startswith((".", "_")):  # hidden, and rolled back
            rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def clink_run(sql_file: Path, state: Path | None, env: dict | None = None) -> subprocess.Popen:
    """``clink run`` of ``sql_file`` in its own folder, where its sink writes."""
    args = [sys.executable, "-m", "clink", "run", sql_file.name]
    if state is not None:
        args += ["--state-dir", str(state)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=sql_file.parent, env={**os.environ, **(env or {})})


BACKENDS = ["memory", "sqlite"]

#: Rows for the runs killed at a named point or stopped: ten checkpoints, rows before and after
#: each point. Random kills need a run that lasts longer, so that most of them land in it: its
#: source is throttled, so that an uninterrupted run lasts about three seconds however fast the
#: engine or the machine is.
ROWS = 30_000
LONG_ROWS = 60_000
LONG_RATE = 20_000


def pipeline(folder: Path, backend: str = "memory", rows: int = ROWS) -> tuple[Path, Path]:
    """The pipeline's file in ``folder`` (made if needed) and the folder its sink writes to.

    The sink's path is relative, so every test's file holds the same text for a backend and a
    number of rows: ``clink run`` compiles it once and then finds the plan in its cache."""
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    rate = f" 'rows-per-second' = '{LONG_RATE}'," if rows == LONG_ROWS else ""
    sql_file.write_text(SQL.format(backend=backend, rows=rows, rate=rate))
    return sql_file, folder / "out"


def _reference(rows: int, tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    """The output of one uninterrupted run over ``rows`` rows."""
    folder = tmp_path_factory.mktemp("reference")
    sql_file, out = pipeline(folder, rows=rows)
    process = clink_run(sql_file, folder / "state")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    output = committed_rows(out)
    assert len(output) > 500
    return output


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    return _reference(ROWS, tmp_path_factory)


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    return _reference(LONG_ROWS, tmp_path_factory)


def run_until_done(sql_file: Path, state: Path, rng: random.Random, *, attempts: int = 8) -> int:
    """Start, kill at a random moment, restart; the last attempt runs to the end. Returns how
    many times the job was killed."""
    kills = 0
    for attempt in range(attempts):
        process = clink_run(sql_file, state)
        if attempt < attempts - 1:
            try:
                # Start-up (imports, compiling the SQL) takes about half a second: most kills
                # land while rows flow and checkpoints are taken.
                process.wait(timeout=rng.uniform(0.4, 2.5))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills += 1
                continue
        else:
            process.wait(timeout=120)
        assert process.returncode == 0, process.stderr.read()
        return kills
    raise AssertionError("the job never finished")


def kill_points(request: pytest.FixtureRequest) -> int:
    return 300 if request.config.getoption("--soak") else 20


@pytest.mark.slow  # a soak: .ci/run runs it after the default suite
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_kills_give_exactly_once_output(tmp_path: Path, long_reference: list[tuple], backend: str,
                                               request: pytest.FixtureRequest) -> None:
    """Kill points are counted over runs: each seed's run is killed until it finishes."""
    kills, seed = 0, 0
    while (kills < kill_points(request) or seed < 5) and seed < 100:
        rng = random.Random(seed)
        sql_file, out = pipeline(tmp_path / f"run{seed}", backend, LONG_ROWS)
        kills += run_until_done(sql_file, tmp_path / f"state{seed}", rng)
        assert committed_rows(out) == long_reference, f"{backend}: output differs after kills, seed {seed}"
        seed += 1
    print(f"{backend}: {kills} kills over {seed} runs")
    assert kills >= kill_points(request), f"only {kills} kills landed in {seed} runs: the test proved too little"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_of_the_protocol_gives_exactly_once_output(tmp_path: Path, reference: list[tuple],
                                                                        point: str, backend: str) -> None:
    sql_file, out = pipeline(tmp_path, backend)
    state = tmp_path / "state"
    process = clink_run(sql_file, state, env={"CLINK_FAULT": f"{point}:3"})
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert committed_rows(out) == reference


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_with_checkpoint_then_continue(tmp_path: Path, reference: list[tuple], backend: str) -> None:
    sql_file, out = pipeline(tmp_path, backend)
    state = tmp_path / "state"
    process = subprocess.run([sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir", str(state),
                              "--stop-with-checkpoint-after", "3"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert process.returncode == 0, process.stderr
    assert "stopped with checkpoint 4" in process.stderr
    assert committed_rows(out) != reference  # stopped early: not all output yet
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert committed_rows(out) == reference


def test_sigterm_stops_with_a_checkpoint(tmp_path: Path, reference: list[tuple]) -> None:
    sql_file, out = pipeline(tmp_path)
    state = tmp_path / "state"
    process = clink_run(sql_file, state)
    # Once rows flow (a first checkpoint is complete), whatever the machine's speed.
    while process.poll() is None and not list((state / "checkpoints").glob("chk-*/_manifest.json")):
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert committed_rows(out) == reference
