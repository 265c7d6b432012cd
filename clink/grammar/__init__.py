"""The dialect's grammar and its parser.

``parser()`` builds the LALR parser once per process; Lark caches the tables on disk keyed by
the grammar's hash, so a later process loads them instead of rebuilding them.
"""

from __future__ import annotations

import functools
from pathlib import Path

import lark

GRAMMAR_PATH = Path(__file__).with_name("clink.lark")


@functools.cache
def parser() -> lark.Lark:
    """The dialect's parser: LALR(1), one lexer for the whole text (a reserved word is never a name), positions on every tree node."""
    return lark.Lark.open(
        str(GRAMMAR_PATH),
        parser="lalr",
        lexer="basic",
        propagate_positions=True,
        maybe_placeholders=False,
        cache=True,
    )
