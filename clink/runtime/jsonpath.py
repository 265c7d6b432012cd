"""SQL/JSON path expressions, read as Flink reads them (Calcite's JSON functions over Jayway
JsonPath), and the JSON functions that take them.

A path is ``[lax | strict] $`` followed by steps: ``.name``, ``['name']`` or ``["name"]`` (also
written ``.['name']``), ``[n]`` (negative counts from the end), ``[n, m]``, ``[*]`` and ``.*``.
Without a mode a path is *strict*, as in Calcite. A path with ``*`` or a list of indexes is
indefinite: it gives a list of what it finds. A definite path that finds nothing is an error in
strict mode and finds NULL in lax mode; so does text that is not JSON. JSON's ``null`` found by a
definite path counts as nothing found, as in Flink.

Parsing JSON is per value and in Python (Arrow has no JSON-text kernel): the callers in
``clink.runtime.functions`` run these once per distinct value of a batch.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

__all__ = ["JsonPathError", "Path", "dumps", "evaluate", "loads", "parse"]


class JsonPathError(ValueError):
    """A strict path found nothing, or stepped into a value of the wrong kind."""


Path = tuple[str, tuple[tuple, ...], bool]  # (mode, steps, definite)

_MODE = re.compile(r"^\s*(strict|lax)\s+(.+)$", re.IGNORECASE | re.DOTALL)
_NAME = re.compile(r"[^.\[\]\s]+")
_INDEXES = re.compile(r"\s*-?[0-9]+\s*(,\s*-?[0-9]+\s*)*")


@functools.lru_cache(maxsize=256)
def parse(spec: str) -> Path:
    """``spec`` as (mode, steps, definite); ValueError says what in it is not understood."""
    m = _MODE.match(spec)
    mode, text = (m[1].lower(), m[2].strip()) if m else ("strict", spec.strip())
    if not text.startswith("$"):
        raise ValueError(f"a JSON path starts with $ (after an optional lax or strict), got {spec!r}")
    steps: list[tuple] = []
    definite = True
    i = 1
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c == ".":
            if text.startswith("..", i):
                raise ValueError("deep scan (..) is not supported in JSON paths")
            i += 1
            if text.startswith("*", i):
                steps.append(("*",))
                definite = False
                i += 1
            elif text.startswith("[", i):
                continue
            else:
                name = _NAME.match(text, i)
                if name is None:
                    raise ValueError(f"a name is missing after '.' at {i} in {spec!r}")
                steps.append(("key", name[0]))
                i = name.end()
        elif c == "[":
            end = _bracket_end(text, i, spec)
            inner = text[i + 1:end].strip()
            if inner == "*":
                steps.append(("*",))
                definite = False
            elif inner[:1] in ("'", '"'):
                names = _quoted_names(inner, spec)
                if len(names) > 1:
                    definite = False
                steps.append(("keys", tuple(names)) if len(names) > 1 else ("key", names[0]))
            elif _INDEXES.fullmatch(inner):
                indexes = tuple(int(x) for x in inner.split(","))
                if len(indexes) > 1:
                    definite = False
                steps.append(("indexes", indexes) if len(indexes) > 1 else ("index", indexes[0]))
            else:
                raise ValueError(f"[{inner}] is not supported in JSON paths (filters and slices are not)")
            i = end + 1
        else:
            raise ValueError(f"unexpected {c!r} at {i} in the JSON path {spec!r}")
    return mode, tuple(steps), definite


def _bracket_end(text: str, start: int, spec: str) -> int:
    i, quote = start + 1, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "]":
            return i
        i += 1
    raise ValueError(f"unclosed [ in the JSON path {spec!r}")


def _quoted_names(inner: str, spec: str) -> list[str]:
    names, i = [], 0
    while i < len(inner):
        quote = inner[i]
        end = inner.find(quote, i + 1)
        if end < 0:
            raise ValueError(f"unclosed quote in the JSON path {spec!r}")
        names.append(inner[i + 1:end])
        i = end + 1
        while i < len(inner) and inner[i] in " ,":
            i += 1
    return names


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """JSON text as Python values (JSON's NaN and Infinity extensions refused, as Jackson does)."""
    return json.loads(text, parse_constant=_reject_constant)


def dumps(value: Any) -> str:
    """Python values as compact JSON text, as Jackson writes it (no spaces, non-ASCII as is)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def evaluate(doc: Any, path: Path) -> Any:
    """What ``path`` finds in ``doc``: a value for a definite path, a list for an indefinite one.
    A definite path that finds nothing raises JsonPathError (the caller decides by mode)."""
    _, steps, definite = path
    found = [doc]
    for step in steps:
        following: list[Any] = []
        for value in found:
            following.extend(_step(value, step, definite))
        found = following
    if definite:
        return found[0]
    return found


def _step(value: Any, step: tuple, definite: bool) -> list[Any]:
    kind = step[0]
    if kind == "key" or kind == "keys":
        names = (step[1],) if kind == "key" else step[1]
        if isinstance(value, dict):
            missing = [n for n in names if n not in value]
            if missing and definite:
                raise JsonPathError(f"no member {missing[0]!r}")
            return [value[n] for n in names if n in value]
        if definite:
            raise JsonPathError(f"member {names[0]!r} of a value that is not an object")
        return []
    if kind == "index" or kind == "indexes":
        indexes = (step[1],) if kind == "index" else step[1]
        if isinstance(value, list):
            out = []
            for i in indexes:
                j = i + len(value) if i < 0 else i
                if 0 <= j < len(value):
                    out.append(value[j])
                elif definite:
                    raise JsonPathError(f"index {i} of an array of {len(value)}")
            return out
        if definite:
            raise JsonPathError(f"index {indexes[0]} of a value that is not an array")
        return []
    # "*": an object's values or an array's elements
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []
