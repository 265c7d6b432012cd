"""Where files live: a local path, or a URI that ``pyarrow.fs`` resolves.

A ``'path'`` option or a state directory is either a plain local path (``data/bids.json``,
``/data/bids``) or a URI: ``file:///data/bids.json`` (how Flink DDL writes local paths), and
``s3://``, ``gs://`` / ``gcs://``, ``hdfs://`` / ``viewfs://``, ``abfs://`` / ``abfss://``
where pyarrow has that filesystem. A ``file://`` URI is the local path it names and behaves
exactly like it. Other URIs go through ``pyarrow.fs``'s generic API (``Files``), which has
neither fsync nor an atomic rename; see docs/connectors.md.

``check_location`` runs while compiling and never touches the network (pyarrow's S3 resolver
asks the bucket's region when a filesystem is made): it checks the scheme only. Resolving the
URI to a filesystem waits for the run (``resolve``), where a ``RuntimeContext`` may supply the
filesystem of a scheme itself (``RuntimeContext.filesystems``: credentials, an endpoint such as
MinIO's, or a test double).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from clink.errors import ConnectorError, UsageError
from clink.records import record

__all__ = ["Files", "check_location", "fsync_directory", "local_directory", "resolve", "scheme_of", "sha256_of"]

#: URI schemes and the ``pyarrow.fs`` class each needs (None: always there).
SCHEMES: dict[str, str | None] = {
    "file": None, "s3": "S3FileSystem", "gs": "GcsFileSystem", "gcs": "GcsFileSystem",
    "hdfs": "HadoopFileSystem", "viewfs": "HadoopFileSystem", "abfs": "AzureFileSystem",
    "abfss": "AzureFileSystem",
}
#: ``scheme://...``, or ``file:/path`` (a form Flink writes too); a drive letter is no scheme.
_SCHEME = re.compile(r"^(?:([A-Za-z][A-Za-z0-9+.-]+)://|(file):/)", re.IGNORECASE)


def scheme_of(text: str) -> str | None:
    """The URI scheme of ``text`` in lower case, or None for a plain path.

    >>> scheme_of("file:///data/bids.json"), scheme_of("data/bids.json")
    ('file', None)
    """
    m = _SCHEME.match(text)
    return (m.group(1) or m.group(2)).lower() if m else None


def check_location(text: str, extra_schemes: tuple[str, ...] = ()) -> str | None:
    """Why ``text`` cannot name a file or directory, or None when it can (no I/O)."""
    scheme = scheme_of(text)
    if scheme is None or scheme in extra_schemes:
        return None
    known = ", ".join(f"{s}://" for s in SCHEMES)
    if scheme not in SCHEMES:
        return f"unknown filesystem {scheme + '://'!r} in {text!r}; use a local path or one of {known}"
    needs = SCHEMES[scheme]
    if needs is not None and not hasattr(pafs, needs):
        return f"{text!r} needs pyarrow's {needs}, which this pyarrow was built without"
    if scheme == "file" and "://" in text:
        host = text.split("://", 1)[1].split("/", 1)[0]
        if host:
            return f"{text!r} names host {host!r}; a file:// URI names a local path: file:///dir/file"
    return None


@record
class Files:
    """A file or directory and the filesystem it is on.

    ``arrow`` is None for the local filesystem: ``path`` is then an ordinary local path, and the
    methods are the ``os`` calls the connector always made (fsync and atomic rename included).
    Otherwise ``path`` is as ``arrow`` names it (``bucket/dir/file`` for S3) and the methods
    go through ``pyarrow.fs``: no fsync (the store's durability is its own), and ``replace`` is
    the store's move (copy and delete on object stores: the target appears whole, but not
    atomically with the source's removal).
    """

    path: str
    uri: str
    arrow: pafs.FileSystem | None = None

    @property
    def local(self) -> bool:
        return self.arrow is None

    def join(self, *parts: str) -> str:
        return os.path.join(*parts) if self.arrow is None else posixpath.join(*parts)

    def dirname(self, path: str) -> str:
        if self.arrow is None:
            return os.path.dirname(path) or "."
        return posixpath.dirname(path.rstrip("/"))

    def _info(self, path: str) -> pafs.FileInfo:
        assert self.arrow is not None
        return self.arrow.get_file_info(path)

    def is_file(self, path: str) -> bool:
        if self.arrow is None:
            return os.path.isfile(path)
        return self._info(path).type == pafs.FileType.File

    def is_dir(self, path: str) -> bool:
        if self.arrow is None:
            return os.path.isdir(path)
        return self._info(path).type == pafs.FileType.Directory

    def exists(self, path: str) -> bool:
        if self.arrow is None:
            return os.path.exists(path)
        return self._info(path).type != pafs.FileType.NotFound

    def makedirs(self, path: str) -> None:
        if self.arrow is None:
            os.makedirs(path, exist_ok=True)
        else:
            self.arrow.create_dir(path, recursive=True)

    def replace(self, source: str, target: str) -> None:
        if self.arrow is None:
            os.replace(source, target)
        else:
            self.arrow.move(source, target)

    def unlink(self, path: str, *, missing_ok: bool = False) -> None:
        if self.arrow is None:
            if missing_ok:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                os.unlink(path)
        elif not missing_ok or self.exists(path):
            self.arrow.delete_file(path)

    def listdir(self, path: str) -> list[str]:
        if self.arrow is None:
            return os.listdir(path)
        return [posixpath.basename(i.path) for i in self.arrow.get_file_info(pafs.FileSelector(path))]

    def folders(self, path: str) -> Iterator[str]:
        """``path`` and every directory below it, but those whose name starts with ``.`` or ``_``
        (hidden, or set aside: ``_rolled_back``) and what is below them."""
        if self.arrow is None:
            for root, dirs, _ in os.walk(path):
                dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
                yield root
            return
        yield path
        base = path.rstrip("/")
        for i in self.arrow.get_file_info(pafs.FileSelector(base, recursive=True)):
            parts = i.path[len(base):].strip("/").split("/")
            if i.type == pafs.FileType.Directory and not any(p.startswith((".", "_")) for p in parts):
                yield i.path

    def files_under(self, path: str) -> list[str]:
        """The visible files under directory ``path`` (names starting with ``.`` or ``_`` are
        skipped, and so are directories so named), sorted by their path below ``path``."""
        if self.arrow is None:
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                found.extend(os.path.join(root, f) for f in files if not f.startswith((".", "_")))
            return sorted(found, key=lambda p: os.path.relpath(p, path).split(os.sep))
        base = path.rstrip("/")
        found = []
        for i in self.arrow.get_file_info(pafs.FileSelector(base, recursive=True)):
            parts = i.path[len(base):].strip("/").split("/")
            if i.type == pafs.FileType.File and not any(p.startswith((".", "_")) for p in parts):
                found.append((parts, i.path))
        return [p for _, p in sorted(found)]

    def open_input(self, path: str) -> str | pa.NativeFile:
        """What pyarrow's readers take: the local path itself, or a random-access file."""
        return path if self.arrow is None else self.arrow.open_input_file(path)

    def open_output(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path, "wb") if self.arrow is None else self.arrow.open_output_stream(path)

    def fsync(self, path: str, *, directory: bool = False) -> None:
        """Make ``path`` durable (locally; a remote store's writes are durable once closed)."""
        if self.arrow is not None:
            return
        try:
            fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
        except OSError:
            if directory:
                return  # some platforms cannot open a directory; the rename is still atomic
            raise
        try:
            os.fsync(fd)
        except OSError:
            if not directory:
                raise
        finally:
            os.close(fd)


def fsync_directory(path: Path) -> None:
    """Make a local directory's entries durable (a file created or renamed in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    """The sha256 of a local file's bytes, in hex, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve(text: str, filesystems: Mapping[str, pafs.FileSystem] | None = None) -> Files:
    """The filesystem and path ``text`` names; raises ``ConnectorError`` when it cannot be reached.

    A plain path stays what it is (relative paths too); ``file://`` gives the local path; a
    scheme in ``filesystems`` uses that filesystem with the rest of the URI as its path; any
    other URI is resolved by ``pyarrow.fs.FileSystem.from_uri``.
    """
    scheme = scheme_of(text)
    if scheme is None:
        return Files(path=text, uri=text)
    problem = check_location(text, tuple(filesystems or ()))
    if problem is not None:
        raise ConnectorError(problem)
    given = (filesystems or {}).get(scheme)
    if given is not None:
        path = text.split("://", 1)[1]
        return Files(path=path.rstrip("/") or path, uri=text, arrow=given)
    try:
        arrow, path = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ConnectorError(f"cannot reach {text!r}: {e}") from None
    if isinstance(arrow, pafs.LocalFileSystem):
        # A trailing '/' still marks a directory, as in a plain path.
        return Files(path=path + ("/" if text.endswith("/") and not path.endswith("/") else ""), uri=text)
    return Files(path=path, uri=text, arrow=arrow)


def local_directory(text: str | os.PathLike[str]) -> Path:
    """A state directory as a local ``Path``: a plain path, or a ``file://`` URI.

    The working files need a local filesystem (SQLite state, checkpoints being written); the
    checkpoints themselves may go elsewhere (``'execution.checkpointing.dir'``). Other URIs get a
    ``UsageError``.
    """
    if isinstance(text, os.PathLike):
        return Path(text)
    scheme = scheme_of(text)
    if scheme is None:
        return Path(text)
    problem = check_location(text)
    if problem is None and scheme != "file":
        problem = (f"the state directory {text!r} is not local: its working files (SQLite state, checkpoints "
                   "being written) need a local filesystem; use a local path or file:///..., and "
                   f"SET 'execution.checkpointing.dir' = '{text}' to keep the checkpoints there")
    if problem is not None:
        raise UsageError(problem)
    _, path = pafs.FileSystem.from_uri(text)
    return Path(path)
