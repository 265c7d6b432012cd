"""Checkpoint directories: atomic completion, verification against the manifest, retention."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from clink.errors import CheckpointCorrupted
from clink.runtime.checkpoint import CheckpointStore


def write(store: CheckpointStore, checkpoint_id: int, fingerprint: str = "f1", *, complete: bool = True) -> None:
    writer = store.begin(checkpoint_id, fingerprint)
    writer.write_bytes("op-3.arrow", bytes(range(256)) * (checkpoint_id + 1))
    writer.write_bytes("sources.json", json.dumps({"1": {"rows": checkpoint_id * 100}}).encode())
    if complete:
        writer.complete()


def test_a_completed_checkpoint_verifies_and_is_the_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    write(store, 1)
    write(store, 2)
    info, warnings = store.latest()
    assert info.id == 2 and info.valid and warnings == []
    opened, manifest = store.open(info.path)
    assert set(manifest["files"]) == {"op-3.arrow", "sources.json"}


def test_a_checkpoint_without_a_manifest_never_counts(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    write(store, 1)
    write(store, 2, complete=False)
    info, warnings = store.latest()
    assert info.id == 1
    assert warnings == ["skipping checkpoint chk-2 has no manifest: it never completed"]


def test_every_flipped_byte_is_detected_and_the_previous_checkpoint_used(tmp_path: Path) -> None:
    rng = random.Random(11)
    store = CheckpointStore(tmp_path, retained=5)
    write(store, 1)
    for flip in range(60):
        write(store, 2)
        files = sorted(p for p in (store.root / "chk-2").iterdir() if p.name != "_manifest.json")
        victim = files[flip % len(files)]
        data = bytearray(victim.read_bytes())
        position = rng.randrange(len(data))
        data[position] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(data))
        info, warnings = store.latest()
        assert info.id == 1, (victim.name, position)
        assert f"file {victim.name!r} does not match its checksum" in warnings[0]


@pytest.mark.parametrize("damage", ["truncate_manifest", "delete_file", "truncate_file", "garbage_manifest"])
def test_damaged_checkpoints_are_refused_with_the_reason(tmp_path: Path, damage: str) -> None:
    store = CheckpointStore(tmp_path)
    write(store, 1)
    write(store, 2)
    path = store.root / "chk-2"
    match damage:
        case "truncate_manifest":
            manifest = path / "_manifest.json"
            manifest.write_bytes(manifest.read_bytes()[:20])
            reason = "the manifest is damaged"
        case "garbage_manifest":
            (path / "_manifest.json").write_text('{"files": 3}')
            reason = "the manifest is damaged"
        case "delete_file":
            (path / "op-3.arrow").unlink()
            reason = "file 'op-3.arrow' is missing"
        case "truncate_file":
            (path / "op-3.arrow").write_bytes(b"x")
            reason = "file 'op-3.arrow' has 1 bytes"
    with pytest.raises(CheckpointCorrupted, match=reason):
        store.open(path)
    info, warnings = store.latest()
    assert info.id == 1 and reason in warnings[0]


def test_the_manifest_records_the_plan_fingerprint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    write(store, 1, fingerprint="old-plan")
    info, _ = store.latest()
    assert info.fingerprint == "old-plan"  # informational: the job decides what fits, by operator


def test_only_the_newest_checkpoints_are_retained(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, retained=2)
    for checkpoint_id in range(1, 6):
        write(store, checkpoint_id)
        store.prune()
    assert [i.id for i in store.list()] == [5, 4]


def test_the_checkpoints_command_lists_each_with_its_status(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = CheckpointStore(tmp_path)
    write(store, 1)
    write(store, 2)
    (store.root / "chk-2" / "op-3.arrow").write_bytes(b"damaged")
    out = subprocess.run([sys.executable, "-m", "clink", "checkpoints", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].split()[0] == "2" and "INVALID: checkpoint chk-2: file 'op-3.arrow' has 7 bytes" in lines[1]
    assert lines[2].split()[0] == "1" and lines[2].endswith("valid")
