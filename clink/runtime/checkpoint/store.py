"""Checkpoints on disk: ``<state-dir>/checkpoints/chk-<n>/``, files first, manifest last.

A checkpoint directory holds one file per piece of state (operator state, source positions,
sink pre-commit handles) and ``_manifest.json``: format version, clink version, checkpoint id,
creation time, plan fingerprint, and the size and sha256 of every file. The manifest is written
last and atomically (temporary file, fsync, rename, fsync of the directory), so a directory
without one is an unfinished checkpoint, never a valid one. Reading verifies every file against
the manifest: a flipped byte, a truncated or missing file is reported, naming the file, and the
checkpoint is not used.

The checkpoints may live elsewhere than the state directory (``'execution.checkpointing.dir'``):
another local path (a shared mount every worker sees), or a ``pyarrow.fs`` URI (``s3://``,
``gs://``, ``hdfs://``, ...). The state directory then keeps the working files: a checkpoint's
files are written to a staging folder there, hashed and uploaded; restoring downloads a
checkpoint to a folder there and verifies it like a local one. On such stores the manifest is
uploaded under a temporary name and moved into place (a whole object; no fsync), and moving a
checkpoint aside copies its files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from clink import records
from clink.errors import CheckpointCorrupted, UsageError
from clink.runtime.fs import Files, fsync_directory, resolve, sha256_of
from clink.runtime.sealed import seal, unseal
from clink.runtime.settings import checkpoint_location

#: 2: the manifest carries its own checksum (``manifest_sha256``). 3: it may list shared pieces
#: (``shared``); a manifest without any is still written as 2, so older readers keep reading it.
FORMAT_VERSION = 3
READABLE_VERSIONS = (2, 3)
MANIFEST = "_manifest.json"
_PREFIX = "chk-"
_LINEAGE = "_lineage"
#: Where checkpoints (and sink output) newer than the one a job resumed from are moved.
ROLLED_BACK = "_rolled_back"
#: Under the state directory, with a checkpoint store elsewhere: checkpoints being written, and
#: checkpoints downloaded to restore from.
STAGING = "checkpoint-staging"
DOWNLOADS = "checkpoint-downloads"
#: Beside the checkpoint directories: pieces of state that several checkpoints use (incremental
#: snapshots). A manifest lists those it uses under ``shared``; a piece goes once no kept
#: checkpoint lists it.
SHARED = "shared"


def checkpoint_file(path: Path, name: str) -> Path:
    """The local path of file ``name`` of the checkpoint in folder ``path``: its own file, or
    ``shared/<piece>`` in the shared folder beside it."""
    return path.parent / name if name.startswith(SHARED + "/") else path / name


def _digest(path: Path, *, sync: bool) -> dict:
    """A written file's size and checksum, as the manifest records them (made durable first)."""
    if sync:
        with path.open("rb") as f:
            os.fsync(f.fileno())
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


@records.record(kw_only=True)
class CheckpointInfo:
    """One checkpoint directory as found on disk, valid or not (``problem`` says why not)."""

    id: int
    #: A local folder holding the checkpoint's files (a downloaded copy, from a remote store).
    path: Path
    created_ms: int | None
    size: int
    problem: str | None = None
    fingerprint: str | None = None
    #: Where the checkpoint is: its local path, or its URI on a remote store.
    location: str = ""

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
        self.path = store.staging(checkpoint_id, fresh=True)
        store.discard(checkpoint_id)  # a leftover of a crash before it completed: it never counted
        self._files: dict[str, dict] = {}
        self._shared: dict[str, dict] = {}

    def include(self, paths: list[Path]) -> list[str]:
        """Record the files a snapshot wrote (``add`` for the checkpoint's own, ``share`` for
        pieces in the shared folder); return the names the checkpoint lists them by."""
        names, digests = self.store.include(self.id, paths)
        for name in names:
            self.record(name, digests[name])
        return names

    def file(self, name: str) -> Path:
        """The path to write the file ``name`` to; call ``add(name)`` once it is written."""
        if "/" in name or name.startswith("_") or name in (".", ".."):
            raise ValueError(f"invalid checkpoint file name {name!r}")
        return self.path / name

    def add(self, name: str) -> None:
        """Record a file written at ``file(name)``: make it durable (fsync, or the upload to a
        remote store) and note its size and checksum."""
        self._files.update(self.store.put(self.id, [self.file(name)]))

    def record(self, name: str, digest: dict) -> None:
        """Record a file another process wrote and put in the store (``CheckpointStore.put``,
        or ``include`` for a shared piece, named ``shared/<piece>``)."""
        if name.startswith(SHARED + "/"):
            self.file(name.split("/", 1)[1])  # checks the name
            self._shared[name.split("/", 1)[1]] = digest
            return
        self.file(name)  # checks the name
        self._files[name] = digest

    def write_bytes(self, name: str, data: bytes) -> None:
        self.file(name).write_bytes(data)
        self.add(name)

    def complete(self, *, before_rename=None) -> CheckpointInfo:
        """Write the manifest atomically; from now on the checkpoint exists."""
        manifest = {
            "format_version": FORMAT_VERSION if self._shared else 2,
            "clink_version": _clink_version(),
            "checkpoint_id": self.id,
            "created_ms": int(time.time() * 1000),
            "plan_fingerprint": self.fingerprint,
            "files": self._files,
            **({"shared": self._shared} if self._shared else {}),
            **({"extra": self.extra} if self.extra else {}),
        }
        store = self.store
        sealed = seal(manifest)
        # The checkpoint's size: its files and its manifest, what its folder holds.
        size = sum(f["size"] for f in self._files.values()) + len(sealed)
        if store.remote is not None:
            remote = store.remote
            folder = remote.join(remote.path, self.path.name)
            with remote.open_output(remote.join(folder, f"{MANIFEST}.tmp")) as f:
                f.write(sealed)
            if before_rename is not None:
                before_rename()
            remote.replace(remote.join(folder, f"{MANIFEST}.tmp"), remote.join(folder, MANIFEST))
            shutil.rmtree(self.path, ignore_errors=True)
            return CheckpointInfo(id=self.id, path=self.path, created_ms=manifest["created_ms"], size=size,
                                  fingerprint=self.fingerprint, location=store.location_of(self.id))
        temporary = self.path / f"{MANIFEST}.tmp"
        with temporary.open("wb") as f:
            f.write(sealed)
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(temporary, self.path / MANIFEST)
        fsync_directory(self.path)
        fsync_directory(store.root)
        # (Every file was hashed as it was added: not read again here.)
        return CheckpointInfo(id=self.id, path=self.path, created_ms=manifest["created_ms"], size=size,
                              fingerprint=self.fingerprint, location=str(self.path))


def _clink_version() -> str:
    from clink._version import __version__

    return __version__


class CheckpointStore:
    """The checkpoints of one job: under ``<state_dir>/checkpoints``, or at ``location`` (a local
    path or a ``pyarrow.fs`` URI; ``filesystems`` as ``RuntimeContext.filesystems``)."""

    def __init__(self, state_dir: str | Path | None, *, retained: int = 3, location: str | None = None,
                 filesystems: Mapping | None = None) -> None:
        if retained < 1:
            raise UsageError(f"'state.checkpoints.num-retained' must be at least 1, got {retained}")
        self.retained = retained
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.filesystems = filesystems
        #: Size and checksum of shared pieces this store wrote or verified, by name: a piece
        #: another checkpoint lists again is not read again.
        self._pieces: dict[str, dict] = {}
        #: The store's files when it is not local (None: ``root`` is a local folder).
        self.remote: Files | None = None
        files = resolve(location, filesystems) if location else None
        if files is not None and not files.local:
            if self.state_dir is None:
                raise UsageError(f"checkpoints at {location!r} need a local state directory for their working "
                                 "files (clink run --state-dir DIR, or RuntimeContext(state_dir=...))")
            self.remote = files
            self.root = files.uri.partition("?")[0].rstrip("/")
            files.makedirs(files.path)
        else:
            if files is None and self.state_dir is None:
                raise UsageError("checkpoints need a state directory or 'execution.checkpointing.dir'")
            self.root = Path(files.path) if files is not None else self.state_dir / "checkpoints"
            self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def of(cls, ctx) -> CheckpointStore:
        """The checkpoint store a job with ``ctx`` (a ``RuntimeContext``) writes to and restores from."""
        return cls(ctx.state_dir, retained=int(ctx.get("state.checkpoints.num-retained") or 3),
                   location=checkpoint_location(ctx.config), filesystems=ctx.filesystems)

    def where(self, *parts: str) -> str:
        """A place in the store, for messages."""
        return "/".join([str(self.root), *parts])

    def location_of(self, checkpoint_id: int) -> str:
        """Where checkpoint ``checkpoint_id`` is: a local path, or its URI (with the store's query)."""
        name = f"{_PREFIX}{checkpoint_id}"
        if self.remote is None:
            return str(self.root / name)
        _, mark, query = self.remote.uri.partition("?")
        return f"{self.root}/{name}{mark}{query}"

    # -- writing

    def begin(self, checkpoint_id: int, fingerprint: str, extra: dict | None = None) -> CheckpointWriter:
        return CheckpointWriter(self, checkpoint_id, fingerprint, extra)

    def staging(self, checkpoint_id: int, *, fresh: bool = False) -> Path:
        """The local folder a checkpoint's files are written to: the checkpoint itself in a local
        store, else a folder under the state directory from which ``put`` uploads them."""
        name = f"{_PREFIX}{checkpoint_id}"
        path = self.root / name if self.remote is None else self.state_dir / STAGING / name
        if fresh and path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def put(self, checkpoint_id: int, paths: list[Path]) -> dict[str, dict]:
        """Make files written to ``staging(checkpoint_id)`` part of the checkpoint (fsync, or
        upload and remove the local copy); return each one's size and checksum by name."""
        digests = {}
        for path in paths:
            digests[path.name] = _digest(path, sync=self.remote is None)
            if self.remote is not None:
                remote = self.remote
                target = remote.join(remote.path, f"{_PREFIX}{checkpoint_id}", path.name)
                with path.open("rb") as f, remote.open_output(target) as out:
                    shutil.copyfileobj(f, out, 1 << 20)
                path.unlink()
        return digests

    def include(self, checkpoint_id: int, paths: list[Path]) -> tuple[list[str], dict[str, dict]]:
        """Make a snapshot's files part of checkpoint ``checkpoint_id``: files in its staging
        folder as ``put`` does, pieces in the shared folder beside it once (hashed, and uploaded
        to a remote store, the first time). Returns the names the manifest lists them by, and
        each one's size and checksum."""
        names, digests, own = [], {}, []
        for path in paths:
            if path.parent.name != SHARED:
                own.append(path)
                names.append(path.name)
                continue
            name = f"{SHARED}/{path.name}"
            names.append(name)
            digest = self._pieces.get(path.name)
            if digest is None:
                digest = self._pieces[path.name] = _digest(path, sync=False)  # (synced when written)
                if self.remote is not None:
                    remote = self.remote
                    target = remote.join(remote.path, SHARED, path.name)
                    remote.makedirs(remote.join(remote.path, SHARED))
                    with path.open("rb") as f, remote.open_output(target) as out:
                        shutil.copyfileobj(f, out, 1 << 20)
                    path.unlink()
            digests[name] = digest
        digests.update(self.put(checkpoint_id, own))
        return names, digests

    def discard(self, checkpoint_id: int) -> None:
        """Remove what an unfinished checkpoint ``checkpoint_id`` left in a remote store."""
        if self.remote is not None:
            folder = self.remote.join(self.remote.path, f"{_PREFIX}{checkpoint_id}")
            if self.remote.exists(folder):
                self.remote.arrow.delete_dir(folder)

    # -- reading

    def _directories(self) -> Iterator[tuple[int, Path | str]]:
        if self.remote is not None:
            for name in self._remote_names(self.remote.path):
                if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
                    yield int(name[len(_PREFIX):]), self.remote.join(self.remote.path, name)
            return
        for path in self.root.iterdir():
            if path.is_dir() and path.name.startswith(_PREFIX) and path.name[len(_PREFIX):].isdigit():
                yield int(path.name[len(_PREFIX):]), path

    def _remote_names(self, folder: str) -> list[str]:
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(folder, allow_not_found=True)
        return [posix_name(i.path) for i in self.remote.arrow.get_file_info(selector)]

    def info(self, path: Path | str, *, hash_files: bool = True) -> CheckpointInfo:
        """Verify one checkpoint directory against its manifest (from a remote store: a copy,
        downloaded to the state directory; ``release`` removes it)."""
        if self.remote is not None and not isinstance(path, Path):
            return self._download(self.remote, str(path), self.root)
        checkpoint_id = int(path.name[len(_PREFIX):])
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        location = str(path) if self.remote is None else self.location_of(checkpoint_id)
        try:
            manifest = self._verified_manifest(path, hash_files=hash_files)
        except CheckpointCorrupted as exc:
            return CheckpointInfo(id=checkpoint_id, path=path, created_ms=None, size=size, problem=str(exc),
                                  location=location)
        return CheckpointInfo(id=checkpoint_id, path=path, created_ms=manifest.get("created_ms"), size=size,
                              fingerprint=manifest.get("plan_fingerprint"), location=location)

    def _download(self, files: Files, folder: str, root_uri: str) -> CheckpointInfo:
        name = posix_name(folder)
        # Without a state directory (checkpoints in a local folder, this one given by its URI):
        # the system's temporary folder.
        downloads = (self.state_dir or Path(tempfile.gettempdir())) / DOWNLOADS
        downloads.mkdir(parents=True, exist_ok=True)
        # A folder of its own: workers sharing the state directory download at the same time.
        local = Path(tempfile.mkdtemp(dir=downloads)) / name
        local.mkdir()
        import pyarrow.fs as pafs

        for i in files.arrow.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            if i.type == pafs.FileType.File:
                with files.arrow.open_input_stream(i.path) as f, (local / posix_name(i.path)).open("wb") as out:
                    shutil.copyfileobj(f, out, 1 << 20)
        # The shared pieces it lists, into a shared folder beside the copy (a damaged manifest
        # lists none: verifying the copy reports it).
        shared = local.parent / SHARED
        for name in _shared_names(local / MANIFEST):
            source = folder.rstrip("/").rsplit("/", 1)[0] + f"/{SHARED}/{name}"
            shared.mkdir(exist_ok=True)
            try:
                with files.arrow.open_input_stream(source) as f, (shared / name).open("wb") as out:
                    shutil.copyfileobj(f, out, 1 << 20)
            except (OSError, FileNotFoundError):
                pass  # missing: verifying the copy reports it
        info = self.info(local)
        _, mark, query = files.uri.partition("?")
        return records.evolve(info, location=f"{root_uri}/{name}{mark}{query}")

    def release(self, info: CheckpointInfo) -> None:
        """Remove the downloaded copy of a checkpoint from a remote store, once restored from."""
        if info.path.parent.parent.name == DOWNLOADS:
            shutil.rmtree(info.path.parent, ignore_errors=True)

    def _verified_manifest(self, path: Path, *, hash_files: bool = True) -> dict:
        """The manifest of checkpoint folder ``path``, with every file it lists checked: present,
        of the size recorded and (``hash_files``) of the sha256 recorded."""
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise CheckpointCorrupted(f"checkpoint {path.name} has no manifest: it never completed")
        data = manifest_path.read_bytes()
        try:
            # The seal first: a flipped byte in the version is damage, not another format.
            manifest = unseal(data)
            version = manifest["format_version"]
            files = manifest["files"]
            int(manifest["checkpoint_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupted(f"checkpoint {path.name}: the manifest is damaged ({exc})") from None
        if version not in READABLE_VERSIONS:
            raise CheckpointCorrupted(f"checkpoint {path.name} has format version {version}; "
                                      f"this clink reads versions {', '.join(map(str, READABLE_VERSIONS))}")
        for name, expected in files.items():
            file = path / name
            if not file.is_file():
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} is missing")
            if file.stat().st_size != expected.get("size"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} has {file.stat().st_size} bytes, "
                                          f"the manifest says {expected.get('size')}")
            if hash_files and sha256_of(file) != expected.get("sha256"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: file {name!r} does not match its checksum")
        for name, expected in manifest.get("shared", {}).items():
            file = path.parent / SHARED / name
            if not file.is_file():
                raise CheckpointCorrupted(f"checkpoint {path.name}: shared piece {name!r} is missing")
            if file.stat().st_size != expected.get("size"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: shared piece {name!r} has {file.stat().st_size} "
                                          f"bytes, the manifest says {expected.get('size')}")
            if not hash_files:
                continue
            if sha256_of(file) != expected.get("sha256"):
                raise CheckpointCorrupted(f"checkpoint {path.name}: shared piece {name!r} does not match its checksum")
            self._pieces[name] = {"size": expected["size"], "sha256": expected["sha256"]}
        return manifest

    def manifest(self, info: CheckpointInfo) -> dict:
        """The manifest of a checkpoint ``info`` or ``latest`` found valid (verified then)."""
        return unseal((info.path / MANIFEST).read_bytes())

    def list(self) -> list[CheckpointInfo]:
        """Every checkpoint directory, newest first, each verified (downloaded, from a remote
        store: the copies stay until ``release``)."""
        return [self.info(path) for _, path in sorted(self._directories(), reverse=True)]

    def open(self, path: str | Path) -> tuple[CheckpointInfo, dict]:
        """Verify a checkpoint (a local path, or a URI); return it and its manifest. Whether its
        state fits the pipeline is the job's to decide (by operator, see
        ``executor._Checkpointing.check_compatible``). A remote checkpoint is downloaded first."""
        if isinstance(path, str):
            files = resolve(path, self.filesystems)
            if not files.local:
                base = files.uri.partition("?")[0].rstrip("/")
                if not files.is_dir(files.path):
                    raise UsageError(f"no checkpoint at {base}")
                info = self._download(files, files.path, base.rsplit("/", 1)[0])
                if not info.valid:
                    self.release(info)
                    raise CheckpointCorrupted(info.problem)
                return info, self.manifest(info)
            path = files.path
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
        if self.remote is not None:
            remote = self.remote
            path = remote.join(remote.path, _LINEAGE)
            if not remote.exists(path):
                if any(True for _ in self._directories()):
                    return ""
                import uuid

                with remote.open_output(path + ".tmp") as f:
                    f.write(uuid.uuid4().hex[:16].encode("ascii"))
                remote.replace(path + ".tmp", path)
            with remote.arrow.open_input_stream(path) as f:
                return f.read().decode("ascii").strip()
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
        fsync_directory(self.root)
        return path.read_text(encoding="ascii").strip()

    def set_aside_after(self, checkpoint_id: int) -> list[int]:
        """Move the checkpoints newer than ``checkpoint_id`` (damaged ones a restore skipped, or
        newer ones when an older checkpoint was chosen) to ``checkpoints/_rolled_back/``: the job
        goes on from ``checkpoint_id``, and a later restore must not find them. Returns their ids."""
        moved = []
        for other, path in sorted(self._directories()):
            if other <= checkpoint_id:
                continue
            if self.remote is not None:
                self._move_remote(path, self.remote.join(self.remote.path, ROLLED_BACK, posix_name(path)))
                moved.append(other)
                continue
            target = self.root / ROLLED_BACK / path.name
            target.parent.mkdir(exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(path, target)
            moved.append(other)
        if moved and self.remote is None:
            fsync_directory(self.root)
        return moved

    def _move_remote(self, folder: str, target: str) -> None:
        """Move a checkpoint's files one by one (a store may not move folders), manifest first:
        the folder left behind, should this stop halfway, is no checkpoint."""
        remote = self.remote
        if remote.exists(target):
            remote.arrow.delete_dir(target)
        remote.makedirs(target)
        names = sorted(self._remote_names(folder), key=lambda n: n != MANIFEST)
        for name in names:
            remote.replace(remote.join(folder, name), remote.join(target, name))
        remote.arrow.delete_dir(folder)

    def latest(self) -> tuple[CheckpointInfo | None, list[str]]:
        """The newest valid checkpoint, and a warning for each newer one skipped."""
        warnings = []
        for _, path in sorted(self._directories(), reverse=True):
            info = self.info(path)
            if not info.valid:
                self.release(info)
                warnings.append(f"skipping {info.problem}")
                continue
            return info, warnings
        return None, warnings

    def _complete(self) -> list[int]:
        """The ids of the checkpoints with a manifest, newest first (a remote store's are not
        downloaded to be verified: only restoring reads them)."""
        if self.remote is None:
            # Checked by their files' sizes, not hashed: pruning after every checkpoint would
            # otherwise read every kept checkpoint again. A restore hashes what it reads.
            return [i.id for i in (self.info(path, hash_files=False)
                                   for _, path in sorted(self._directories(), reverse=True)) if i.valid]
        return sorted((n for n, path in self._directories()
                       if self.remote.exists(self.remote.join(path, MANIFEST))), reverse=True)

    def prune(self) -> None:
        """Keep the newest ``retained`` complete checkpoints; remove older ones and stale leftovers."""
        keep = set(self._complete()[: self.retained])
        newest = max(keep, default=-1)
        for checkpoint_id, path in self._directories():
            if checkpoint_id in keep:
                continue
            if self.remote is not None:
                if checkpoint_id > newest and not self.remote.exists(self.remote.join(path, MANIFEST)):
                    continue  # possibly being written right now
                self.remote.arrow.delete_dir(path)
                continue
            if checkpoint_id > newest and not (path / MANIFEST).exists():
                continue  # possibly being written right now
            shutil.rmtree(path, ignore_errors=True)
        self._prune_shared(keep, newest)

    def _prune_shared(self, keep: set[int], newest: int) -> None:
        """Remove the shared pieces no kept checkpoint lists (reference counting over the kept
        manifests). A piece newer than the newest complete checkpoint may belong to one being
        written, and stays."""
        used: set[str] = set()
        if self.remote is not None:
            remote = self.remote
            folder = remote.join(remote.path, SHARED)
            names = self._remote_names(folder)
            if not names:
                return
            for checkpoint_id in keep:
                try:
                    with remote.arrow.open_input_stream(remote.join(remote.path, f"{_PREFIX}{checkpoint_id}",
                                                                    MANIFEST)) as f:
                        used.update(_shared_names_of(f.read()))
                except OSError:
                    return  # unreadable: remove nothing
            for name in names:
                if name not in used and _piece_id(name) <= newest:
                    remote.arrow.delete_file(remote.join(folder, name))
                    self._pieces.pop(name, None)
            return
        folder = self.root / SHARED
        if not folder.is_dir():
            return
        for checkpoint_id in keep:
            used.update(_shared_names(self.root / f"{_PREFIX}{checkpoint_id}" / MANIFEST))
        for piece in folder.iterdir():
            if piece.name not in used and _piece_id(piece.name) <= newest:
                piece.unlink(missing_ok=True)
                self._pieces.pop(piece.name, None)


def _shared_names_of(data: bytes) -> list[str]:
    try:
        return list(json.loads(data.decode("utf-8")).get("shared", {}))
    except (ValueError, AttributeError):
        return []


def _shared_names(manifest: Path) -> list[str]:
    """The shared pieces a manifest lists (none if it cannot be read)."""
    try:
        return _shared_names_of(manifest.read_bytes())
    except OSError:
        return []


def _piece_id(name: str) -> int:
    """The checkpoint a shared piece was cut for: its name starts with it (``00000007.<...>``)."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def posix_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]

