"""The dialect's grammar and its parser.

``parser()`` builds the LALR parser once per process. Building the tables takes about half a
second, so Lark caches them on disk and a later process loads them instead: in the user's own
cache directory (``$XDG_CACHE_HOME/clink`` or ``~/.cache/clink``), not in the shared temporary
directory, because Lark's cache file is a pickle and must not be one that another user could
plant. Lark checks the grammar's sha256 stored in the file before using it; a changed grammar
rebuilds and rewrites it. Where no cache directory can be made, the tables are built each time.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import lark

from clink.cache import cache_dir

GRAMMAR_PATH = Path(__file__).with_name("clink.lark")


def cache_path() -> Path | None:
    """Where the parser tables are cached, or None if there is no private place for them."""
    folder = cache_dir()
    if folder is None:
        return None
    version = f"{sys.version_info[0]}{sys.version_info[1]}"
    return folder / f"parser-lark{lark.__version__}-py{version}.cache"


@functools.cache
def parser() -> lark.Lark:
    """The dialect's parser: LALR(1), one lexer for the whole text (a reserved word is never a name), positions on every tree node."""
    cache = cache_path()
    return lark.Lark.open(
        str(GRAMMAR_PATH),
        parser="lalr",
        lexer="basic",
        propagate_positions=True,
        maybe_placeholders=False,
        cache=str(cache) if cache is not None else False,
    )
