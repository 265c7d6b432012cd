"""Checkpoints on disk: ``<state-dir>/checkpoints/chk-<n>/``, files first, manifest last.

A checkpoint directory holds one file per piece of state (operator state, source positions,
sink pre-commit handles) and ``_manifest.json``: format version, clink version, checkpoint id,
creation time, plan fingerprint, and the size and sha256 of every file. The manifest is written
last and atomically (temporary file, fsync, rename, fsync of the directory), so a directory
without one is an unfinished checkpoint, never a valid one. Reading verifies every file against
the manifest: a flipped byte, a truncated or missing file is reported, naming the file, and the
checkpoint is not used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from clink.errors import CheckpointCorrupted, UsageError
from clink.runtime.sealed import seal, unseal

#: 2: the manifest carries its own checksum (``manifest_sha256``).
FORMAT_VERSION = 2
MANIFEST = "_manifest.json"
_PREFIX = "chk-"
_LINEAGE = "_lineage"
#: Where checkpoints (and sink output) newer than the one a job resumed from are moved.
ROLLED_BACK = "_rolled_back"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@attrs.frozen(kw_only=True)
class CheckpointInfo:
    """One checkpoint directory as found on disk, valid or not (``problem`` says why not)."""

    id: int
    path: Path
    created_ms: int | None
    size: int
    problem: str | None = None
    fingerprint: str | None = None

    @property
    def valid(self) -> bool:
        return self.problem is None


class CheckpointWriter:
    """Collects the files of one checkpoint; ``complete()`` writes the manifest that makes it count."""

    def __init__(self, store: CheckpointStore, checkpoint_id: int, fingerprint: str, extra: dict | None) -> None:
        self.store = store
        self.id = checkpoint_id
        self.fingerprint = fingerprint
        self.extra = dict(extra or {})
        self.path = store.root / f"{_PREFIX}{checkpoint_id}"
        if self.path.exists():
            # A leftover of a crash before this checkpoint completed: it never counted.
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        self._files: dict[str, dict] = {}

    def file(self, name: str) -> Path:
        """The path to write the file ``name`` to; call ``add(name)`` once it is written."""
        if "/" in name or name.startswith("_") or name in (".", ".."):
            raise ValueError(f"invalid checkpoint file name {name!r}")
        return self.path / name

    def add(self, name: str) -> None:
        """Record a file written at ``file(name)``: fsync it and note its size and checksum."""
        path = self.file(name)
        with path.open("rb") as f:
            os.fsync(f.fileno())
        self._files[name] = {"size": path.stat().st_size, "sha256": _sha256(path)}

    def write_bytes(self, name: str, data: bytes) -> None:
        self.file(name).write_bytes(data)
        self.add(name)

    def complete(self, *, before_rename=None) -> CheckpointInfo:
        """Write the manifest atomically; from now on the checkpoint exists."""
        manifest = {
            "format_version": FORMAT_VERSION,
            "clink_version": _clink_version(),
            "checkpoint_id": self.id,
            "created_ms": int(time.time() * 1000),
            "plan_fingerprint": self.fingerprint,
            "files": self._files,
            **({"extra": self.extra} if self.extra else {}),
        }
        temporary = self.path / f"{MANIFEST}.tmp"
        with temporary.open("wb") as f:
            f.write(seal(manifest))
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(temporary, self.path / MANIFEST)
        _fsync_dir(self.path)
        _fsync_dir(self.store.root)
        return self.store.info(self.path)


def _clink_version() -> str:
    from clink._version import __version__

    return __version__


class CheckpointStore:
    """The checkpoints of one job under ``<state_dir>/checkpoints``."""

    def __init__(self, state_dir: str | Path, *, retained: int = 3) -> None:
        if retained < 1:
            raise UsageError(f"'state.checkpoints.num-retained' must be at least 1, got {retained}")
        self.root = Path(state_dir) / "checkpoints"
        self.root.mkdir(parents=True, exist_ok=True)
        self.retained = retained

    def begin(self, checkpoint_id: int, fingerprint: str, extra: dict | None = None) -> CheckpointWriter:
        return CheckpointWriter(self, checkpoint_id, fingerprint, extra)

    def _directories(self) -> Iterator[tuple[int, Path]]:
        for path in self.root.iterdir():
            if path.is_dir() and path.name.startswith(_PREFIX) and path.name[len(_PREFIX):].isdigit():
                yield int(path.name[len(_PREFIX):]), path

    def info(self, path: Path) -> CheckpointInfo:
        """Verify one checkpoint directory against its manifest."""
        checkpoint_id = int(path.name[len(_PREFIX):])
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        try:
            manifest = self._verified_manifest(path)
        except CheckpointCorrupted as exc:
            return CheckpointInfo(id=checkpoint_id, path=path, created_ms=None, size=size, problem=str(exc))
        return CheckpointInfo(id=checkpoint_id, path=path, created_ms=manifest.get("created_ms"), size=size,
                              fingerprint=manifest.get("plan_fingerprint"))

    def _verified_manifest(self, path: Path) -> dict:
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise CheckpointCorrupted(f"checkpoint {path.name} has no manifest: it never completed")
        data = manifest_path.read_bytes()
        try:
            version = json.loads(data.decode("utf-8"))["format_version"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupted(f"checkpoint {path.name}: the manifest is damaged ({exc})") from None
        if version != FORMAT_VERSION:
            raise CheckpointCorrupted(f"checkpoint {path.name} has format version {version}; "
                                      f"this clink reads version {FORMAT_VERSION}")
        try:
            manifest = unseal(data)
            files = manifest["files"]
            int(manifest["checkpoint_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupted(f"checkpoint {path.name}: the manifest is damaged ({exc})") from None
        for name, expected in files.items():
            file = path / name
            if not file.is_file():
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} is missing")
            if file.stat().st_size != expected.get("size"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} has {file.stat().st_size} bytes, "
                                          f"the manifest says {expected.get('size')}")
            if _sha256(file) != expected.get("sha256"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} does not match its checksum")
        return manifest

    def list(self) -> list[CheckpointInfo]:
        """Every checkpoint directory, newest first, each verified."""
        return [self.info(path) for _, path in sorted(self._directories(), reverse=True)]

    def open(self, path: str | Path) -> tuple[CheckpointInfo, dict]:
        """Verify a checkpoint; return it and its manifest. Whether its state fits the pipeline
        is the job's to decide (by operator, see ``executor._Checkpointing.check_compatible``)."""
        path = Path(path)
        if not path.is_dir():
            raise UsageError(f"no checkpoint at {path}")
        manifest = self._verified_manifest(path)
        return self.info(path), manifest

    def lineage(self) -> str:
        """The token of this state directory's line of checkpoints, which sinks carry in what they
        commit so that they tell their own commits from another job's.

        Made (atomically) when the store holds no checkpoint yet; a state directory written before
        there were tokens has checkpoints and no token, and its lineage is ``""``.
        """
        path = self.root / _LINEAGE
        if path.exists():
            return path.read_text(encoding="ascii").strip()
        if any(True for _ in self._directories()):
            return ""
        import uuid

        temporary = self.root / f"{_LINEAGE}.tmp"
        temporary.write_text(uuid.uuid4().hex[:16], encoding="ascii")
        with temporary.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
        _fsync_dir(self.root)
        return path.read_text(encoding="ascii").strip()

    def set_aside_after(self, checkpoint_id: int) -> list[int]:
        """Move the checkpoints newer than ``checkpoint_id`` (damaged ones a restore skipped, or
        newer ones when an older checkpoint was chosen) to ``checkpoints/_rolled_back/``: the job
        goes on from ``checkpoint_id``, and a later restore must not find them. Returns their ids."""
        moved = []
        for other, path in sorted(self._directories()):
            if other <= checkpoint_id:
                continue
            target = self.root / ROLLED_BACK / path.name
            target.parent.mkdir(exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(path, target)
            moved.append(other)
        if moved:
            _fsync_dir(self.root)
        return moved

    def latest(self) -> tuple[CheckpointInfo | None, list[str]]:
        """The newest valid checkpoint, and a warning for each newer one skipped."""
        warnings = []
        for info in self.list():
            if not info.valid:
                warnings.append(f"skipping {info.problem}")
                continue
            return info, warnings
        return None, warnings

    def prune(self) -> None:
        """Keep the newest ``retained`` complete checkpoints; remove older ones and stale leftovers."""
        complete = [i for i in self.list() if i.valid]
        keep = {i.id for i in complete[: self.retained]}
        newest = max(keep, default=-1)
        for checkpoint_id, path in self._directories():
            if checkpoint_id in keep:
                continue
            if checkpoint_id > newest and not (path / MANIFEST).exists():
                continue  # possibly being written right now
            shutil.rmtree(path, ignore_errors=True)
