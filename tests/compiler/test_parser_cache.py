"""The parser tables are cached in the user's private cache directory, reused, and rebuilt when
the file is damaged; they are a marshal file of literals keyed by the grammar and Lark's version."""

from __future__ import annotations

import hashlib
import marshal
import os
import subprocess
import sys
from pathlib import Path

import lark
import pytest

from clink.grammar import GRAMMAR_PATH

CODE = (
    "from clink.grammar import parser, cache_path; "
    "from clink.compiler.parse import parse_script; "
    "p = parser(); "
    "assert parse_script('SELECT a + 1 AS b FROM t WHERE c;', 'q.sql').statements; "
    "print(cache_path())"
)


def _run(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_tables_are_cached_privately_and_reused(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    cache = Path(_run(env))
    assert cache.parent == tmp_path / "clink" and cache.exists()
    assert (cache.parent.stat().st_mode & 0o077) == 0, "the cache directory is private"
    written = cache.stat().st_mtime_ns
    _run(env)
    assert cache.stat().st_mtime_ns == written, "the second process loads the tables instead of rebuilding them"
    assert [p.name for p in cache.parent.iterdir() if p.is_file()] == [cache.name], "no temporary file is left"


def test_the_file_is_named_by_the_grammar_hash_and_the_lark_version(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from clink.grammar import cache_path

    digest = hashlib.sha256(GRAMMAR_PATH.read_bytes()).hexdigest()
    name = cache_path().name
    assert digest[:20] in name and f"lark{lark.__version__}" in name
    assert cache_path("0" * 64) != cache_path(), "another grammar reads other tables"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tables file built once for this module's tests (a build takes seconds)."""
    home = tmp_path_factory.mktemp("cache")
    return Path(_run({**os.environ, "XDG_CACHE_HOME": str(home)}))


def test_the_file_holds_marshalled_literals_not_a_pickle(built: Path) -> None:
    cache = built
    head, _, body = cache.read_bytes().partition(b"\n")
    assert head == b"clink-parser-tables/1 " + hashlib.sha256(body).hexdigest().encode()
    tables = marshal.loads(body)
    assert tables["grammar"] == hashlib.sha256(GRAMMAR_PATH.read_bytes()).hexdigest()
    assert tables["lark"] == lark.__version__

    def plain(value: object) -> bool:
        if isinstance(value, dict):
            return all(plain(k) and plain(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, str | int | float | bool | bytes)

    assert plain(tables)


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "empty", "not marshal", "other grammar"])
def test_a_damaged_file_is_detected_and_rebuilt(tmp_path: Path, built: Path, damage: str) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    (tmp_path / "clink").mkdir(mode=0o700)
    cache = tmp_path / "clink" / built.name
    good = built.read_bytes()
    head, _, body = good.partition(b"\n")
    if damage == "truncated":
        bad = good[: len(good) // 2]
    elif damage == "flipped byte":
        middle = len(good) // 2
        bad = good[:middle] + bytes([good[middle] ^ 0x40]) + good[middle + 1:]
    elif damage == "empty":
        bad = b""
    elif damage == "not marshal":  # a correct checksum over a body that does not decode
        junk = b"\xff" * 64
        bad = b"clink-parser-tables/1 " + hashlib.sha256(junk).hexdigest().encode() + b"\n" + junk
    else:  # well formed, checksum right, but made for another grammar
        tables = marshal.loads(body)
        tables["grammar"] = "0" * 64
        other = marshal.dumps(tables)
        bad = b"clink-parser-tables/1 " + hashlib.sha256(other).hexdigest().encode() + b"\n" + other
    cache.write_bytes(bad)
    assert Path(_run(env)) == cache  # ...and it parsed a statement
    head, _, body = cache.read_bytes().partition(b"\n")
    assert head == b"clink-parser-tables/1 " + hashlib.sha256(body).hexdigest().encode(), "rebuilt and rewritten"
    assert marshal.loads(body)["grammar"] == hashlib.sha256(GRAMMAR_PATH.read_bytes()).hexdigest()


def test_without_a_writable_cache_directory_the_parser_still_builds(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert _run({**os.environ, "XDG_CACHE_HOME": str(blocked)}) == "None"


def test_the_memo_is_loaded_into_the_objects_lark_would_make(built: Path) -> None:
    from clink.grammar import _memo_objects

    tables = marshal.loads(built.read_bytes().partition(b"\n")[2])
    theirs = lark.Lark._load_from_dict(tables["data"], tables["memo"])
    ours = lark.Lark._load_from_dict(tables["data"], _memo_objects(tables["memo"]))

    def rule(r) -> tuple:
        options = tuple(getattr(r.options, f) for f in r.options.__serialize_fields__)
        symbols = tuple((type(s).__name__, s.name, getattr(s, "filter_out", None)) for s in [r.origin, *r.expansion])
        return symbols, r.order, r.alias, options, hash(r)

    def terminal(t) -> tuple:
        return t.name, type(t.pattern).__name__, t.pattern.value, t.pattern.flags, t.pattern.raw, t.priority, \
            t.pattern.min_width, t.pattern.max_width

    assert len(ours.rules) == len(theirs.rules) > 500
    assert [rule(r) for r in ours.rules] == [rule(r) for r in theirs.rules]
    assert [terminal(t) for t in ours.terminals] == [terminal(t) for t in theirs.terminals]
    # anything it does not know is left to Lark's own loader
    assert _memo_objects({0: {"__type__": "Unknown"}}) is None
