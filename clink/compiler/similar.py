"""``SIMILAR TO`` patterns (SQL regular expressions) translated to RE2, once, at compile time.

A SQL regular expression matches the whole string. Its words, as Flink reads them (Flink's copy
of Calcite's ``sqlToRegexSimilar``, which hands the result to Java's ``Pattern.matches``):

=================  ===========================================================================
``%``              any run of characters, line breaks included
``_``              one character other than a line break (Java's ``.``)
``|  *  +  ?``     alternation and repetition, as in any regular expression
``{m}``, ``{m,}``, repetition counts
``{m,n}``
``( )``            a group
``[...]``          one character of a set: ranges ``a-z``, ``^`` first to negate, and the
                   classes ``[:ALPHA:]`` ``[:UPPER:]`` ``[:LOWER:]`` ``[:DIGIT:]`` ``[:SPACE:]``
                   ``[:WHITESPACE:]`` ``[:ALNUM:]`` (ASCII, as Java's ``\\p{Alpha}`` etc.)
``.``              passed on to Java as it is, so any character other than a line break
``^``              passed on likewise: the start of the string
``$``  ``\\``      themselves
ESCAPE ``c``       ``c`` before a special character (or before ``c``) makes it literal; before
                   anything else it is an error
=================  ===========================================================================

What Java would read in a way RE2 cannot (possessive quantifiers such as ``a*+``, ``(?`` group
constructs) and what Flink would refuse (an unbalanced ``]``, an unknown ``[:class:]``, a
dangling escape) is refused here with the place in the pattern, rather than matched otherwise.

>>> to_re2('a%')
'\\\\A(?:a(?s:.*))\\\\z'
"""

from __future__ import annotations

import re

from clink import records

__all__ = ["PatternError", "to_re2"]

#: The characters that have a meaning in a SQL regular expression (Flink's ``SQL_SIMILAR_SPECIALS``).
SPECIALS = "[]()|^-+*_%?{}"

#: Java's ``.`` (no DOTALL): any character but its line terminators.
_ONE = r"[^\n\r\x{85}\x{2028}\x{2029}]"

#: The named classes Flink accepts inside ``[...]``, as RE2 set members (Java's ASCII meanings).
_CLASSES = {
    "ALPHA": "a-zA-Z", "UPPER": "A-Z", "LOWER": "a-z", "DIGIT": "0-9", "SPACE": " ",
    "WHITESPACE": r" \t\n\x0B\f\r", "ALNUM": "a-zA-Z0-9",
}

_COUNT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_RE2_SPECIALS = set("\\.+*?()|[]{}^$")


@records.record
class PatternError(Exception):
    """A pattern that does not translate: why, and the (0-based) index in the pattern."""

    reason: str
    index: int


def _literal(c: str) -> str:
    return "\\" + c if c in _RE2_SPECIALS else c


def to_re2(pattern: str, escape: str | None = None) -> str:
    """The RE2 pattern that matches the strings ``pattern`` matches, anchored at both ends."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if escape is not None and c == escape:
            out.append(_escaped(pattern, i, escape))
            i += 2
        elif c == "%":
            out.append("(?s:.*)")
            i += 1
        elif c in "_.":
            out.append(_ONE)
            i += 1
        elif c == "[":
            text, i = _set(pattern, i, escape)
            out.append(text)
        elif c == "]":
            raise PatternError("']' closes no '['", i)
        elif c == "{":
            m = _COUNT.match(pattern, i)
            if m is None or (m[3] and int(m[3]) < int(m[1])):
                raise PatternError("'{' must start a repetition count {m}, {m,} or {m,n} (m <= n)", i)
            out.append(m[0])
            i = m.end()
            i = _not_possessive(pattern, i)
        elif c in "*+?":
            if c != "?" or not out or not out[-1].endswith(("*", "+", "?", "}")):
                i = _not_possessive(pattern, i + 1)
            else:
                i += 1
            out.append(c)
        elif c == "(":
            if pattern.startswith("(?", i):
                raise PatternError("'(?' has no meaning in a SQL regular expression", i)
            out.append("(")
            i += 1
        elif c in ")|^":
            out.append(c)
            i += 1
        else:
            # '$', '\' and every other character stand for themselves.
            out.append(_literal(c))
            i += 1
    return r"\A(?:" + "".join(out) + r")\z"


def _not_possessive(pattern: str, i: int) -> int:
    """``i``, after checking that no '+' follows a quantifier (Java's possessive form)."""
    if i < len(pattern) and pattern[i] == "+":
        raise PatternError("a possessive quantifier ('*+', '++', '?+', '}+') is not supported", i)
    return i


def _escaped(pattern: str, i: int, escape: str) -> str:
    if i + 1 >= len(pattern):
        raise PatternError(f"the ESCAPE character {escape!r} ends the pattern", i)
    nxt = pattern[i + 1]
    if nxt not in SPECIALS and nxt != escape:
        raise PatternError(f"the ESCAPE character {escape!r} may precede only a special character "
                           f"({SPECIALS}) or itself, not {nxt!r}", i)
    return _literal(nxt)


def _set(pattern: str, start: int, escape: str | None) -> tuple[str, int]:
    """The RE2 set for the ``[...]`` at ``start``, and the index after its ``]``."""
    out = ["["]
    i = start + 1
    while i < len(pattern):
        c = pattern[i]
        if c == "]":
            if i == start + 1 or (i == start + 2 and pattern[start + 1] == "^"):
                raise PatternError("'[...]' holds no character", start)
            out.append("]")
            return "".join(out), i + 1
        if escape is not None and c == escape:
            out.append(_escaped(pattern, i, escape))
            i += 2
        elif pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2:end] if end >= 0 else ""
            if name.upper() not in _CLASSES or name not in (name.upper(), name.lower()):
                raise PatternError(f"unknown character class; use one of "
                                   f"{', '.join(f'[:{k}:]' for k in _CLASSES)}", i)
            out.append(_CLASSES[name.upper()])
            i = end + 2
        elif c in "-^":
            out.append(c)
            i += 1
        elif c in SPECIALS:
            raise PatternError(f"{c!r} inside '[...]' must be escaped (with an ESCAPE character)", i)
        else:
            out.append(_literal(c))
            i += 1
    raise PatternError("'[' is not closed by ']'", start)
