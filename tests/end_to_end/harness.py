"""Start, kill and restart `clink run` the way a crash would: SIGKILL at a named point of the
checkpoint protocol (``CLINK_FAULT``, see ``Executor.fault``), or at random moments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: The points of the checkpoint protocol at which ``CLINK_FAULT=<point>:<n>`` kills the process
#: the n-th time it gets there.
FAULT_POINTS = ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                "after_checkpoint_before_sink_commit", "during_sink_commit"]


class Run:
    """One `clink run` of ``sql_file`` with ``--state-dir state``; its standard error goes to a
    file next to the pipeline (a pipe nobody reads while the test waits could fill and stall it)."""

    def __init__(self, sql_file: Path, state: Path, env: dict | None = None) -> None:
        runs = sorted(sql_file.parent.glob("run-*.log"))
        self.log = sql_file.parent / f"run-{len(runs):03d}.log"
        with self.log.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir", str(state)],
                stdout=subprocess.DEVNULL, stderr=err, cwd=sql_file.parent, env={**os.environ, **(env or {})})

    def wait(self) -> int:
        return self.process.wait(timeout=600)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    @property
    def stderr(self) -> str:
        return self.log.read_text()


def run_to_end(sql_file: Path, state: Path) -> str:
    """Run the pipeline to its end (a bounded source); its standard error."""
    run = Run(sql_file, state)
    assert run.wait() == 0, run.stderr
    return run.stderr


def kill_at(sql_file: Path, state: Path, point: str, partial: Callable[[], bool], nth: int = 3) -> None:
    """Run until the ``nth`` time the job reaches ``point``, where it is killed; then run again
    to the end from the state directory. ``partial()`` must say that the killed run left some of
    the output, not all of it: a kill before any commit, or after the last, would not test the
    commits of a restored job."""
    run = Run(sql_file, state, env={"CLINK_FAULT": f"{point}:{nth}"})
    assert run.wait() == -signal.SIGKILL, f"the fault point {point} was never reached:\n{run.stderr}"
    assert partial(), f"the kill at {point} left no output or all of it"
    assert "resuming from checkpoint" in run_to_end(sql_file, state)


def newest_checkpoint(state: Path) -> int:
    """The id of the newest checkpoint with a manifest (0 when none)."""
    folder = state / "checkpoints"
    ids = [int(p.name[4:]) for p in folder.glob("chk-*") if (p / "_manifest.json").exists()] if folder.exists() else []
    return max(ids, default=0)


def soak(sql_file: Path, state: Path, rng: random.Random, kills: int,
         before_run: Callable[[], None] | None = None) -> int:
    """Run to completion, killing the run ``kills`` times on the way; the kills that landed.

    A kill lands at a random moment: a quarter of them a random time after the start (before
    the first checkpoint of the run, often), the others a random time after the run has taken
    one to three checkpoints of its own, so each run gets on and the input lasts for every kill.
    A run that ends before its kill is not counted; the sequence then goes on with the next one.
    """
    landed = 0
    while landed < kills:
        if before_run is not None:
            before_run()
        run = Run(sql_file, state)
        if rng.random() < 0.25:
            deadline = time.monotonic() + rng.uniform(0.2, 2.0)
            while time.monotonic() < deadline and run.process.poll() is None:
                time.sleep(0.01)
        else:
            target = newest_checkpoint(state) + rng.randint(1, 3)
            while newest_checkpoint(state) < target and run.process.poll() is None:
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.3))
        if run.process.poll() is not None:  # it ended first: the input ran out
            assert run.wait() == 0, run.stderr
            return landed
        run.kill()
        landed += 1
    if before_run is not None:
        before_run()
    run_to_end(sql_file, state)
    return landed
