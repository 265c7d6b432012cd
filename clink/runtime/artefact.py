"""The compiled artefact: one ``.clk`` file (a zip) that ``clink run``, applications and cluster
workers execute.

Members:

- ``plan.py`` — the generated module (the only code in the artefact; it defines ``PLAN``);
- ``explain.txt`` — the logical and physical plans, for ``clink inspect``;
- ``manifest.json`` — artefact format and version, clink version, plan name and fingerprint, the
  source SQL, the schemas of every source and sink, the stable operator ids, and the size and
  sha256 of every other member; sealed with a checksum of its own bytes (``sealed``).

Loading verifies the manifest's checksum, the format version, the clink version (same major and
minor) and every member against the manifest before the module runs; nothing in an artefact is
a pickle. This module is part of the runtime: it never imports the compiler or lark.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

from clink.errors import ClinkError
from clink.records import record
from clink.runtime.plan import Plan
from clink.runtime.sealed import seal, unseal

__all__ = ["Artefact", "InvalidArtefact", "artefact_bytes", "read_artefact", "write_artefact"]

FORMAT = "clink-artefact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MODULE = "plan.py"
EXPLAIN = "explain.txt"
SUFFIX = ".clk"


class InvalidArtefact(ClinkError):
    """A file that is not a valid artefact for this clink: damaged, tampered with, or compiled
    by an incompatible version."""

    exit_code = 2


@record
class Artefact:
    """A verified artefact: its manifest and members."""

    path: Path
    manifest: dict
    module_source: str
    explain: str

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def fingerprint(self) -> str:
        return self.manifest["plan_fingerprint"]

    def plan(self) -> Plan:
        """Run the module and return its plan."""
        from clink.runtime.loader import load_generated, plan_of

        module = load_generated(self.module_source, name=self.name, fingerprint=self.fingerprint)
        return plan_of(module, str(self.path))


def _schema_json(schema) -> list[dict]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def write_artefact(path: str | Path, *, module_source: str, plan: Plan, sql: str, explain: str,
                   clink_version: str) -> Path:
    """Write the artefact of a compiled plan (``plan`` is the module's loaded ``PLAN``)."""
    data = artefact_bytes(module_source=module_source, plan=plan, sql=sql, explain=explain,
                          clink_version=clink_version)
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    temporary.replace(path)
    return path


def artefact_bytes(*, module_source: str, plan: Plan, sql: str = "", explain: str = "",
                   clink_version: str | None = None) -> bytes:
    """The bytes of a compiled plan's artefact (what ``write_artefact`` writes, and what a cluster
    deploys to its workers)."""
    from clink.runtime.executor import stable_ids

    if clink_version is None:
        from clink._version import __version__ as clink_version

    members = {MODULE: module_source.encode(), EXPLAIN: explain.encode()}
    uids = stable_ids(plan)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "clink_version": clink_version,
        "name": plan.name,
        "plan_fingerprint": plan.fingerprint,
        "sql": sql,
        "sources": [{"id": uids[s.id], "table": s.table, "connector": s.connector, "schema": _schema_json(s.schema)}
                    for s in plan.sources],
        "sinks": [{"id": uids[s.id], "table": s.table, "connector": s.connector, "schema": _schema_json(s.schema)}
                  for s in plan.sinks],
        "operators": sorted(uid for node_id, uid in uids.items()
                            if not uid.startswith(("source:", "sink:"))),
        "members": {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                    for name, data in members.items()},
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, seal(manifest))
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def read_artefact(path: str | Path, *, clink_version: str | None = None) -> Artefact:
    """Open and verify an artefact; raises ``InvalidArtefact`` saying what is wrong."""
    if clink_version is None:
        from clink._version import __version__ as clink_version
    path = Path(path)
    where = str(path)
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if MANIFEST not in names:
                raise InvalidArtefact(f"{where} is not a clink artefact: it has no {MANIFEST}")
            data = {name: z.read(name) for name in names}
    except FileNotFoundError:
        raise InvalidArtefact(f"no such file: {where}") from None
    except (zipfile.BadZipFile, OSError, zipfile.LargeZipFile, ValueError) as exc:
        raise InvalidArtefact(f"{where} is not a readable clink artefact ({exc})") from None
    try:
        manifest = unseal(data[MANIFEST])
    except ValueError as exc:
        raise InvalidArtefact(f"{where}: the manifest is damaged or was edited ({exc})") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidArtefact(f"{where} has format {manifest.get('format')!r} version "
                              f"{manifest.get('format_version')!r}; this clink reads {FORMAT!r} version "
                              f"{FORMAT_VERSION}")
    built = str(manifest.get("clink_version", "?"))
    if _minor(built) != _minor(clink_version):
        runs_on = ".".join(_minor(built)) + ".x"
        raise InvalidArtefact(f"{where} was compiled by clink {built} and runs on clink {runs_on}; this is "
                              f"clink {clink_version}. Compile the SQL again with this clink (the SQL is in "
                              "the manifest: clink inspect shows it).")
    members = manifest.get("members", {})
    for name in sorted(members):
        if name not in data:
            raise InvalidArtefact(f"{where}: member {name!r} is missing")
        digest = hashlib.sha256(data[name]).hexdigest()
        if digest != members[name].get("sha256") or len(data[name]) != members[name].get("size"):
            raise InvalidArtefact(f"{where}: member {name!r} does not match its checksum (the file was "
                                  "changed after it was compiled)")
    extra = sorted(names - set(members) - {MANIFEST})
    if extra:
        raise InvalidArtefact(f"{where}: members {extra} are not in the manifest")
    if MODULE not in members:
        raise InvalidArtefact(f"{where}: the manifest lists no {MODULE}")
    return Artefact(path=path, manifest=manifest, module_source=data[MODULE].decode("utf-8"),
                    explain=data.get(EXPLAIN, b"").decode("utf-8"))
