"""The parser tables are cached in the user's private cache directory and reused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = "from clink.grammar import parser, cache_path; parser(); print(cache_path())"


def test_the_tables_are_cached_privately_and_reused(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    cache = Path(first.stdout.strip())
    assert cache.parent == tmp_path / "clink" and cache.exists()
    assert (cache.parent.stat().st_mode & 0o077) == 0, "the cache directory is private"
    written = cache.stat().st_mtime_ns
    second = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert cache.stat().st_mtime_ns == written, "the second process loads the tables instead of rebuilding them"


def test_without_a_writable_cache_directory_the_parser_still_builds(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocked)}
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
