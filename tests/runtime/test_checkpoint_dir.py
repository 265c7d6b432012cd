"""Checkpoints elsewhere than the state directory (``'execution.checkpointing.dir'``, Flink's key):
another local folder, or a bucket on a real S3-protocol server (moto's, on a loopback port)
reached through ``pyarrow.fs`` by the URI alone. A job that crashes resumes from there to exactly
an uninterrupted run's output; a damaged newest checkpoint is passed over for the one before; a
checkpoint named by its URI is resumed from; the state directory keeps no copies behind."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import clink
from clink.errors import SqlError
from clink.runtime.checkpoint.store import CheckpointStore
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from tests.runtime.test_uri_paths import CHECKPOINTED, read_csv_rows


def job(out: Path, state: Path | None, config: dict) -> Job:
    plan = clink.compile(CHECKPOINTED.format(out=f"{out}/"), name="ckpt.sql").runtime_plan
    return Job(plan, RuntimeContext(config={"execution.checkpointing.interval-rows": "3000", **config},
                                    state_dir=state, stdout=io.StringIO()))


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("reference")
    plan = clink.compile(CHECKPOINTED.format(out=f"{out}/"), name="ckpt.sql").runtime_plan
    Job(plan, RuntimeContext(stdout=io.StringIO())).run()
    rows = read_csv_rows(out)
    assert len(rows) > 50
    return rows


def crash_after(first: Job, steps: int) -> None:
    for _ in range(steps):
        first.step()
    assert first.metrics.checkpoints >= 2
    # A crash: nothing closed, committed or cleaned up.


def s3_listing(uri: str) -> list[str]:
    fs, path = pafs.FileSystem.from_uri(uri)
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path):].strip("/") for i in found if i.type == pafs.FileType.File)


def leftovers(state: Path) -> list[str]:
    """What the state directory holds of checkpoints kept elsewhere: nothing, once they are written
    (staging) or restored from (downloads)."""
    return sorted(str(p.relative_to(state)) for name in ("checkpoint-staging", "checkpoint-downloads")
                  for p in (state / name).rglob("*") if p.is_file())


def test_checkpoints_in_another_local_folder(tmp_path: Path, expected: list[tuple]) -> None:
    where = tmp_path / "shared" / "checkpoints"
    config = {"execution.checkpointing.dir": where.as_uri()}
    crash_after(job(tmp_path / "out", tmp_path / "state", config), 22)
    assert sorted(where.glob("chk-*/_manifest.json")), "no checkpoint in the checkpoint directory"
    assert not (tmp_path / "state" / "checkpoints").exists()
    resumed = job(tmp_path / "out", tmp_path / "state", config)
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected


@pytest.mark.parametrize("state_dir", [True, False], ids=["with-state-dir", "checkpoint-dir-only"])
def test_checkpoints_on_s3_resume_a_crashed_job_exactly(tmp_path: Path, expected: list[tuple], s3_uri,
                                                         state_dir: bool) -> None:
    uri = s3_uri("jobs/totals")
    config = {"execution.checkpointing.dir": uri, "state.checkpoints.num-retained": "2"}
    state = tmp_path / "state" if state_dir else None
    crash_after(job(tmp_path / "out", state, config), 22)
    files = s3_listing(uri)
    manifests = [f for f in files if f.endswith("/_manifest.json")]
    assert len(manifests) == 2, files  # two retained, older ones removed from the bucket
    assert "_lineage" in files
    if state is not None:
        assert leftovers(state) == [] and not (state / "checkpoints").exists()
    resumed = job(tmp_path / "out", state, config)
    newest = max(int(m.split("/")[0].removeprefix("chk-")) for m in manifests)
    assert resumed.metrics.restored_from == newest
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected
    if state is not None:
        assert leftovers(state) == []


def test_a_damaged_newest_checkpoint_on_s3_is_passed_over(tmp_path: Path, expected: list[tuple], s3_uri) -> None:
    uri = s3_uri("totals")
    config = {"execution.checkpointing.dir": uri}
    crash_after(job(tmp_path / "out", tmp_path / "state", config), 22)
    fs, path = pafs.FileSystem.from_uri(uri)
    manifests = [f for f in s3_listing(uri) if f.endswith("/_manifest.json")]
    newest = max(int(m.split("/")[0].removeprefix("chk-")) for m in manifests)
    state_file = next(f for f in s3_listing(uri) if f.startswith(f"chk-{newest}/")
                      and not f.endswith(("_manifest.json", "job.json")))
    target = f"{path}/{state_file}"
    with fs.open_input_stream(target) as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    with fs.open_output_stream(target) as f:
        f.write(bytes(data))
    resumed = job(tmp_path / "out", tmp_path / "state", config)
    assert resumed.metrics.restored_from == newest - 1
    assert any("does not match its checksum" in w for w in resumed.warnings), resumed.warnings
    assert any(f"chk-{newest}" in f for f in s3_listing(uri) if f.startswith("_rolled_back/"))
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected
    assert leftovers(tmp_path / "state") == []


def test_a_checkpoint_named_by_its_s3_uri_is_resumed_from(tmp_path: Path, expected: list[tuple], s3_uri) -> None:
    uri = s3_uri("totals")
    first = job(tmp_path / "out", tmp_path / "state", {"execution.checkpointing.dir": uri})
    crash_after(first, 22)
    store = CheckpointStore.of(first.ctx)
    info, _ = store.latest()
    store.release(info)
    assert info.location.startswith("s3://") and "/chk-" in info.location and "endpoint_override" in info.location
    # Another state directory, the checkpoint given by its URI.
    resumed = job(tmp_path / "out", tmp_path / "other", {"execution.savepoint.path": info.location})
    assert resumed.metrics.restored_from == info.id
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected


def test_a_checkpoint_directory_clink_cannot_reach_is_refused_where_it_is_set(tmp_path: Path) -> None:
    sql = "SET 'execution.checkpointing.dir' = 'ftp://host/checkpoints';\n" + CHECKPOINTED.format(out=f"{tmp_path}/")
    with pytest.raises(SqlError, match="unknown filesystem 'ftp://'") as refused:
        clink.compile(sql, name="ckpt.sql")
    assert (refused.value.span.line, refused.value.span.col) == (1, 37)


def test_clink_run_resumes_from_a_checkpoint_given_by_its_s3_uri(tmp_path: Path, expected: list[tuple],
                                                                 s3_uri) -> None:
    import subprocess
    import sys

    uri = s3_uri("totals")
    pipeline = tmp_path / "p.sql"
    pipeline.write_text("SET 'execution.checkpointing.interval-rows' = '3000';\n"
                        f"SET 'execution.checkpointing.dir' = '{uri}';\n"
                        + CHECKPOINTED.format(out=f"{tmp_path / 'out'}/"))

    def clink_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clink", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)

    done = clink_cli("run", str(pipeline), "--stop-with-checkpoint-after", "2")
    assert done.returncode == 0, done.stderr
    checkpoints = [f.split("/")[0] for f in s3_listing(uri) if f.endswith("/_manifest.json")]
    assert checkpoints == ["chk-1", "chk-2", "chk-3"], checkpoints  # the third: the stop's
    base, _, query = uri.partition("?")
    # An older one than the newest: what checkpoint 3 committed is rolled back and written again.
    done = clink_cli("run", str(pipeline), "--from-checkpoint", f"{base}/chk-2?{query}")
    assert done.returncode == 0, done.stderr
    assert "resuming from checkpoint 2" in done.stderr
    assert read_csv_rows(tmp_path / "out") == expected


def test_incremental_sqlite_checkpoints_on_s3_share_their_pieces_and_resume_exactly(
        tmp_path: Path, expected: list[tuple], s3_uri) -> None:
    """The sqlite backend's pieces go to ``shared/`` in the bucket once each; pruning leaves
    exactly those the kept checkpoints list; a crashed job resumes from them exactly."""
    import json

    uri = s3_uri("jobs/incremental")
    config = {"execution.checkpointing.dir": uri, "state.checkpoints.num-retained": "2", "state.backend": "sqlite"}
    state = tmp_path / "state"
    crash_after(job(tmp_path / "out", state, config), 22)
    files = s3_listing(uri)
    manifests = [f for f in files if f.endswith("/_manifest.json")]
    assert len(manifests) == 2, files
    pieces = {f for f in files if f.startswith("shared/")}
    assert any(f.endswith(".delta.sqlite") for f in pieces), files
    fs, path = pafs.FileSystem.from_uri(uri)
    listed = set()
    for manifest in manifests:
        with fs.open_input_stream(f"{path}/{manifest}") as f:
            listed |= {f"shared/{name}" for name in json.loads(f.read())["shared"]}
    assert pieces == listed
    assert leftovers(state) == []
    resumed = job(tmp_path / "out", state, config)
    assert resumed.metrics.restored_from == max(int(m.split("/")[0].removeprefix("chk-")) for m in manifests)
    resumed.run()
    assert read_csv_rows(tmp_path / "out") == expected
    assert leftovers(state) == []
