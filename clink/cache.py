"""The user's private cache: compiled parser tables, and plans compiled from SQL files.

Everything lives in ``$XDG_CACHE_HOME/clink`` (or ``~/.cache/clink``), a directory only its
owner can read or write (mode 0700): the parser cache is a pickle and a cached plan is Python
code, so neither may sit where another user could plant one. Without such a directory nothing
is cached and everything is built each time.

**The plan cache** makes ``clink run pipeline.sql`` skip the compiler when it has compiled the
very same text before, as Python's ``__pycache__`` does for modules: the key is the sha256 of
the SQL text, the name it is reported under, the clink version, the Python version, and the
size and modification time of every compiler and grammar file (so a changed compiler never runs
a stale plan). A script with ``CREATE FUNCTION`` is not cached: its plan depends on Python code
elsewhere. Entries are written atomically, read back only when their own checksum matches, and
the oldest are removed beyond ``MAX_PLANS``. ``clink run --recompile`` (or
``CLINK_PLAN_CACHE=0``) compiles afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

__all__ = ["MAX_PLANS", "cache_dir", "cached_plan_source", "store_plan_source"]

#: How many compiled plans are kept; the least recently written go first.
MAX_PLANS = 64

_PACKAGE = Path(__file__).resolve().parent
_CREATE_FUNCTION = re.compile(r"\bCREATE\s+(TEMPORARY\s+)?(SYSTEM\s+)?FUNCTION\b", re.IGNORECASE)


def cache_dir(*parts: str) -> Path | None:
    """The private cache directory (or a folder inside it), made if needed; None if there is no
    private, writable place."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(root, "clink", *parts)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    return folder


def _compiler_stamp() -> str:
    """Size and mtime of every file that decides what SQL compiles to."""
    from clink._version import __version__

    stamps = [__version__, sys.version]
    for folder in ("compiler", "grammar"):
        for dirpath, dirnames, filenames in os.walk(_PACKAGE / folder):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".py", ".lark")):
                    st = os.stat(os.path.join(dirpath, name))
                    stamps.append(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}")
    # What a generated module builds its plan from.
    st = os.stat(_PACKAGE / "runtime" / "plan.py")
    stamps.append(f"runtime/plan.py:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(stamps)


def _entry(text: str, name: str) -> Path | None:
    if os.environ.get("CLINK_PLAN_CACHE", "1") == "0" or _CREATE_FUNCTION.search(text):
        return None
    folder = cache_dir("plans")
    if folder is None:
        return None
    key = hashlib.sha256(f"{_compiler_stamp()}\0{name}\0{text}".encode()).hexdigest()
    return folder / f"{key[:32]}.json"


def cached_plan_source(text: str, name: str) -> tuple[str, str] | None:
    """The generated module and fingerprint cached for this SQL text, or None."""
    entry = _entry(text, name)
    if entry is None:
        return None
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        source, fingerprint = data["source"], data["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.get("sha256") != hashlib.sha256(source.encode()).hexdigest():
        return None
    return source, fingerprint


def store_plan_source(text: str, name: str, source: str, fingerprint: str) -> None:
    """Remember the module compiled from this SQL text (silently does nothing if it cannot)."""
    entry = _entry(text, name)
    if entry is None:
        return
    data = {"fingerprint": fingerprint, "sha256": hashlib.sha256(source.encode()).hexdigest(), "source": source}
    tmp = entry.with_name(f"{entry.stem}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, entry)
        others = sorted((p for p in entry.parent.glob("*.json") if p != entry), key=lambda p: p.stat().st_mtime_ns)
        for old in others[:max(0, len(others) - (MAX_PLANS - 1))]:
            old.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)

