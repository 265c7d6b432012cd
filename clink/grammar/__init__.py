"""The dialect's grammar and its parser.

``parser()`` gives the LALR parser, once per process. Lark needs a few seconds to compute the
grammar's parse tables, so they are computed once and kept in the user's private cache directory
(``$XDG_CACHE_HOME/clink`` or ``~/.cache/clink``) as a ``marshal`` file of plain literals (dicts,
lists, strings, numbers, bytes): no pickle, nothing that runs on load. Its name carries the
grammar's sha256, Lark's version and Python's, so a changed grammar or library never reads tables
made for another; the file starts with the sha256 of its body, and a file that does not match,
does not decode or does not have the expected shape is rebuilt and rewritten (atomically: a
temporary file renamed over the old one). Where no cache directory can be made, the tables are
built each time.

Loading the tables is most of a compile's start-up, so two things keep it short:

- the action table is stored as two packed arrays per parser state (terminal numbers and
  actions), and a state's row is unpacked into Lark's form only when the parser first reaches
  it; a short statement visits a few hundred of the ~1700 states;
- everything else (rules, terminals, options) goes through Lark's own ``memo_serialize`` /
  ``_load_from_dict``, the pair Lark's standalone parser generator uses, so the parser that comes
  out is the one ``lark.Lark(...)`` builds, with the same trees, tokens and errors.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import sys
from array import array
from pathlib import Path

import lark

from clink.cache import cache_dir

__all__ = ["GRAMMAR_PATH", "cache_path", "parser"]

GRAMMAR_PATH = Path(__file__).with_name("clink.lark")

#: How the parser is built; the cached tables are only valid for these options.
_OPTIONS = {"parser": "lalr", "lexer": "basic", "propagate_positions": True, "maybe_placeholders": False}

#: First line of a tables file, before the sha256 of the rest.
_MAGIC = b"clink-parser-tables/1 "


def _grammar() -> tuple[str, str]:
    """The grammar's text and its sha256."""
    text = GRAMMAR_PATH.read_text(encoding="utf-8")
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_path(grammar_sha256: str | None = None) -> Path | None:
    """Where the parser tables are cached, or None if there is no private place for them."""
    folder = cache_dir()
    if folder is None:
        return None
    if grammar_sha256 is None:
        grammar_sha256 = _grammar()[1]
    python = f"{sys.version_info[0]}{sys.version_info[1]}"
    return folder / f"parser-tables-{grammar_sha256[:20]}-lark{lark.__version__}-py{python}.marshal"


@functools.cache
def parser() -> lark.Lark:
    """The dialect's parser: LALR(1), one lexer for the whole text (a reserved word is never a name), positions on every tree node."""
    text, digest = _grammar()
    path = cache_path(digest)
    tables = _read_tables(path, digest) if path is not None else None
    if tables is None:
        tables = _build_tables(text, digest)
        if path is not None:
            _write_tables(path, tables)
    return _parser_from(tables)


# ---------------------------------------------------------------- building and storing the tables


def _build_tables(text: str, digest: str) -> dict:
    """Compute the parse tables of ``text`` with Lark, as plain literals."""
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    built = lark.Lark(text, **_OPTIONS)
    data, memo = built.memo_serialize([TerminalDef, Rule])
    table = data["parser"]["parser"]
    states = table["states"]
    if sorted(states) != list(range(len(states))):
        raise AssertionError("Lark's LALR states are not numbered 0..n-1")
    rows = []
    for state in range(len(states)):
        terminals, actions = array("H"), array("I")
        for terminal, (action, arg) in states[state].items():
            terminals.append(terminal)
            # Shift: the next state, times two; Reduce: the rule's memo number, times two, plus one.
            actions.append(arg["@"] * 2 + 1 if action == 1 else arg * 2)
        rows.append((terminals.tobytes(), actions.tobytes()))
    table["states"] = {}
    return {"grammar": digest, "lark": lark.__version__, "data": data, "memo": memo, "rows": rows,
            "keywords": _keyword_terminals(built)}


def _keyword_terminals(built: lark.Lark) -> dict | None:
    """Which keywords each name-like terminal stands for (Lark's "unless" analysis, done once
    here instead of in every process), or None where it is not plain keyword text."""
    from lark.lexer import BasicLexer, PatternStr, _create_unless

    lexer = built.parser.lexer
    if type(lexer) is not BasicLexer or lexer.user_callbacks:
        return None
    kept, callbacks = _create_unless(lexer.terminals, lexer.g_regex_flags, lexer.re, lexer.use_bytes)
    unless = {}
    for name, callback in callbacks.items():
        words = callback.scanner.terminals
        if not all(isinstance(t.pattern, PatternStr) and t.pattern.value.isascii() and set(t.pattern.flags) <= {"i"}
                   for t in words):
            return None
        unless[name] = [t.name for t in words]
    kept_names = {t.name for t in kept}
    return {"unless": unless, "embedded": [t.name for t in lexer.terminals if t.name not in kept_names]}


def _write_tables(path: Path, tables: dict) -> None:
    """Write ``tables`` to ``path`` atomically and remove tables made for other grammars or
    versions (silently does nothing if it cannot)."""
    body = marshal.dumps(tables)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in path.parent.glob("parser-*"):
            if old != path and not old.name.endswith(".tmp"):
                old.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)


def _read_tables(path: Path, digest: str) -> dict | None:
    """The tables stored at ``path`` for the grammar ``digest``, or None if the file is missing,
    damaged or made for another grammar or Lark."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    head, _, body = raw.partition(b"\n")
    if head != _MAGIC + hashlib.sha256(body).hexdigest().encode():
        return None
    try:
        tables = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None
    if (not isinstance(tables, dict) or tables.get("grammar") != digest or tables.get("lark") != lark.__version__
            or not isinstance(tables.get("data"), dict) or not isinstance(tables.get("memo"), dict)
            or not isinstance(tables.get("rows"), list)):
        return None
    return tables


# ---------------------------------------------------------------- the parser from its tables


def _parser_from(tables: dict) -> lark.Lark:
    """A ``lark.Lark`` LALR parser over ``tables``, its action rows unpacked on first use."""
    from lark.lexer import BasicLexer
    from lark.parsers.lalr_analysis import Reduce, Shift

    data = tables["data"]
    built = lark.Lark._load_from_dict(data, _memo_objects(tables["memo"]) or tables["memo"])
    terminals = data["parser"]["parser"]["tokens"]
    rules = {ref["@"]: rule for ref, rule in zip(data["rules"], built.rules, strict=True)}
    rows = tables["rows"]

    class States(dict):
        """Lark's ``{state: {terminal: (action, argument)}}``, filled in as states are reached."""

        def __missing__(self, state: int) -> dict:
            packed_terminals, packed_actions = rows[state]
            row = {
                terminals[t]: (Reduce, rules[a >> 1]) if a & 1 else (Shift, a >> 1)
                for t, a in zip(array("H", packed_terminals), array("I", packed_actions))
            }
            self[state] = row
            return row

    built.parser.parser._parse_table.states = States()
    lexer = built.parser.lexer
    if tables.get("keywords") is not None and type(lexer) is BasicLexer and not lexer.user_callbacks:
        _use_keyword_lookup(lexer, tables["keywords"])
    return built


def _memo_objects(memo: dict) -> dict | None:
    """Lark's memo of rules and terminals, as the objects its loader would make from it, made in
    a quarter of the time: Lark's generic loader looks up each object's class and fields by
    reflection, and makes a new symbol for each of the ~6,000 places a symbol appears; here the
    fields are looked up once per class and equal symbols are one object (Lark compares symbols
    by value, so nothing can tell). None for anything this does not know, so Lark's loader runs."""
    from lark.grammar import NonTerminal, Rule, RuleOptions, Terminal
    from lark.lexer import PatternRE, PatternStr, TerminalDef

    classes = {cls.__name__: (cls, cls.__serialize_fields__, getattr(cls, "_deserialize", None))
               for cls in (Rule, RuleOptions, NonTerminal, Terminal, TerminalDef, PatternStr, PatternRE)}
    symbols: dict[tuple, object] = {}

    def build(value):
        if type(value) is list:
            return [build(v) for v in value]
        if type(value) is not dict:
            return value
        kind = value.get("__type__")
        if kind is None or kind not in classes:
            raise LookupError(kind)
        if kind in ("NonTerminal", "Terminal"):
            key = (kind, value["name"], value.get("filter_out"))
            found = symbols.get(key)
            if found is not None:
                return found
        cls, names, hook = classes[kind]
        made = cls.__new__(cls)
        for name in names:
            setattr(made, name, build(value[name]))
        if hook is not None:
            made._deserialize()
        if kind in ("NonTerminal", "Terminal"):
            symbols[key] = made
        return made

    try:
        return {key: build(value) for key, value in memo.items()}
    except (LookupError, TypeError, AttributeError):
        return None


class _Keywords:
    """What Lark's ``UnlessCallback`` does for a name-like terminal, turning a token whose whole
    text is a keyword into that keyword's terminal, by dict lookup instead of a regex over all
    ~190 keywords, which takes longer to compile than the rest of the lexer. The keywords are
    ASCII text, matched exactly or, for ``"word"i``, case-insensitively; the first keyword in
    Lark's order wins, as in the regex. Text that is not ASCII goes to Lark's own callback."""

    def __init__(self, words: list, g_regex_flags: int, re_module, use_bytes: bool) -> None:
        self.exact: dict[str, tuple[int, str]] = {}
        self.folded: dict[str, tuple[int, str]] = {}
        for order, word in enumerate(words):
            value = word.pattern.value
            if "i" in word.pattern.flags:
                self.folded.setdefault(value.lower(), (order, word.name))
            else:
                self.exact.setdefault(value, (order, word.name))
        self._words, self._lark_args = words, (g_regex_flags, re_module, use_bytes)
        self._lark_callback = None

    def __call__(self, token):
        value = token.value
        if not value.isascii():
            if self._lark_callback is None:
                from lark.lexer import Scanner, UnlessCallback

                self._lark_callback = UnlessCallback(Scanner(self._words, *self._lark_args))
            return self._lark_callback(token)
        exact, folded = self.exact.get(value), self.folded.get(value.lower())
        hit = folded if exact is None else exact if folded is None else min(exact, folded)
        if hit is not None:
            token.type = hit[1]
        return token


def _use_keyword_lookup(lexer, keywords: dict) -> None:
    """Build ``lexer``'s scanner from the stored keyword analysis when it is first needed (what
    Lark's ``BasicLexer._build_scanner`` does, less its "unless" analysis)."""
    from lark.lexer import Scanner

    by_name = {t.name: t for t in lexer.terminals}
    embedded = set(keywords["embedded"])

    def build_scanner() -> Scanner:
        lexer.callback = {
            name: _Keywords([by_name[w] for w in words], lexer.g_regex_flags, lexer.re, lexer.use_bytes)
            for name, words in keywords["unless"].items()
        }
        return Scanner([t for t in lexer.terminals if t.name not in embedded], lexer.g_regex_flags, lexer.re,
                       lexer.use_bytes)

    lexer._build_scanner = build_scanner
