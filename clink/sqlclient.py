"""``clink sql``: the interactive SQL client, the counterpart of Flink's SQL client.

One session across statements: the tables, views and functions declared and the settings
``SET`` so far are kept as SQL text and come before every later statement when it is compiled,
as an init script does for ``clink run -i`` (a view is therefore bound again under the settings
in force, as Flink expands it). Each statement then runs as its own job, in this process.

What the client shows follows Flink's SQL client: ``[INFO]`` lines for statements without rows,
``[ERROR]`` with the statement's line, a caret and a hint for a mistake, and a query's rows in one
of three result modes (``SET 'sql-client.execution.result-mode' = 'table' | 'changelog' |
'tableau'``). See docs/client.md.
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from clink._version import __version__
from clink.errors import ClinkError, Span, SqlError
from clink.records import field, record

__all__ = ["Piece", "Session", "SqlClient", "main", "split_statements"]

RESULT_MODE = "sql-client.execution.result-mode"
#: The client's own settings (not the job's), with their values and defaults.
CLIENT_SETTINGS = {RESULT_MODE: (("table", "changelog", "tableau"), "table")}

PROMPT = "clink> "
CONTINUATION = "     > "
SESSION = "<session>"
INPUT = "<input>"

HELP = """\
Statements end with ';' and may span several lines. Besides SQL (docs/sql.md):
  HELP;                 this text
  QUIT; or EXIT;        leave the client (Ctrl-D does too)
  CLEAR;                clear the terminal
  SET;                  list the settings in force
  SET 'key' = 'value';  change a setting for the statements that follow
  RESET ['key'];        a setting (or every one) back to its default
  BEGIN STATEMENT SET;  collect INSERT statements until END; runs them as one job
Result modes: SET 'sql-client.execution.result-mode' = 'table' (the result table, kept up to date),
'changelog' (the changes, with their kind in an op column) or 'tableau' (rows printed as they come).
Ctrl-C cancels a running query, or clears a statement being typed."""


# ---------------------------------------------------------------- splitting statements


@record
class Piece:
    """One statement of a text: as written (without its ';'), its code with comments blanked
    out, and the 1-based line and column where it starts."""

    text: str
    code: str
    line: int
    col: int

    def padded(self) -> str:
        """The statement preceded by blank lines and spaces, so that positions in it are those
        of the whole text it came from."""
        return "\n" * (self.line - 1) + " " * (self.col - 1) + self.text


_EXECUTE_SET = re.compile(r"\s*EXECUTE\s+STATEMENT\s+SET\s+BEGIN\b", re.IGNORECASE)


def split_statements(text: str) -> tuple[list[Piece], str]:
    """The complete statements of ``text`` (each ended by a ``;`` outside strings, quoted names and
    comments), and what follows the last one (a statement not finished yet; "" if only blanks
    and comments follow). ``EXECUTE STATEMENT SET BEGIN ...; ...; END;`` is one statement.

    >>> pieces, rest = split_statements("SELECT ';' AS a; -- c;\\nSELECT 2")
    >>> [p.text for p in pieces], rest
    (["SELECT ';' AS a"], ' -- c;\\nSELECT 2')
    """
    code: list[str] = []  # one character per character of text: comments blanked out
    pieces: list[Piece] = []
    start = 0
    segment = 0  # where the text after the last ';' begins (for END of EXECUTE STATEMENT SET)
    state = None  # None, or what is open: "'", '"', '`', '--' or '/*'
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        two = text[i:i + 2]
        if state is None:
            if ch in "'\"`":
                state = ch
            elif two in ("--", "/*"):
                state = two
                code += [" ", " "]
                i += 2
                continue
            elif ch == ";":
                body = "".join(code[start:i])
                if _EXECUTE_SET.match(body) and "".join(code[segment:i]).strip().upper() != "END":
                    segment = i + 1
                    code.append(ch)
                    i += 1
                    continue
                piece = _piece(text, body, start, i)
                if piece is not None:
                    pieces.append(piece)
                start = segment = i + 1
            code.append(ch)
        elif state in "'\"`" and len(state) == 1:
            code.append(ch)
            if ch == state:
                state = None
        elif state == "--":
            code.append(ch if ch == "\n" else " ")
            if ch == "\n":
                state = None
        else:  # /* ... */
            if two == "*/":
                code += [" ", " "]
                state = None
                i += 2
                continue
            code.append(ch if ch == "\n" else " ")
        i += 1
    rest = text[start:]
    return pieces, rest if "".join(code[start:]).strip() or state in ("'", '"', "`", "/*") else ""


def _piece(text: str, code: str, start: int, end: int) -> Piece | None:
    stripped = code.lstrip()
    if not stripped.strip():
        return None
    first = start + len(code) - len(stripped)
    before = text[:first]
    line = before.count("\n") + 1
    col = first - (before.rfind("\n") + 1) + 1
    return Piece(text=text[first:end].rstrip(), code=code[len(code) - len(stripped):].rstrip(), line=line, col=col)


# ---------------------------------------------------------------- the session


@record(frozen=False)
class Session:
    """What statements leave behind for the next ones: settings, declarations, client settings."""

    #: ``SET`` settings in force, in the order they were set.
    settings: dict[str, str] = field(factory=dict)
    #: CREATE TABLE / VIEW / FUNCTION statements, as written (CREATE TABLE AS: the table's DDL).
    declarations: list[str] = field(factory=list)
    client: dict[str, str] = field(factory=lambda: {k: d for k, (_, d) in CLIENT_SETTINGS.items()})

    def prefix(self) -> str:
        """The session as one script: its settings, then its declarations."""
        sets = [f"SET '{k}' = '{_quote(v)}'" for k, v in self.settings.items()]
        return "".join(s + ";\n" for s in (*sets, *self.declarations))

    def compile(self, text: str, name: str):
        """Compile ``text`` after the session's script (a CompiledPlan)."""
        from clink.compiler import compile_text

        return compile_text(text, name=name, init=[(SESSION, self.prefix())] if self.prefix() else [])

    def table_ddl(self, text: str, name: str, table: str) -> str:
        """The DDL of ``table`` as declared by ``text`` (a CREATE TABLE AS) after the session."""
        from clink.compiler.bind import bind_script
        from clink.compiler.bind.client import create_table_text
        from clink.compiler.parse import parse_script
        from clink.runtime.connectors import default_registry

        script = parse_script(self.prefix() + text, name)
        bound = bind_script(script, default_registry())
        return create_table_text(bound.catalog.tables[table])


def _quote(value: str) -> str:
    return value.replace("'", "''")


# ---------------------------------------------------------------- the client


class Cancelled(Exception):
    """Ctrl-C while a statement ran."""


class SqlClient:
    """Runs statements in one session and shows their outcome on ``out``.

    ``interactive``: a person types at a terminal (prompts, history, errors do not end input).
    """

    def __init__(self, *, out=None, err=None, debug: bool = False, settings: dict[str, str] | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.debug = debug
        self.session = Session(settings=dict(settings or {}))
        #: INSERT statements of an open ``BEGIN STATEMENT SET`` (text, name), None when none is open.
        self.statement_set: list[tuple[str, str]] | None = None
        self.tty = self.out.isatty()
        self._console = None

    # -- output

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.out, force_terminal=self.tty or None,
                                    highlight=False, soft_wrap=False)
        return self._console

    def info(self, text: str) -> None:
        self.out.write(f"[INFO] {text}\n")
        self.out.flush()

    def error(self, exc: BaseException, sources: dict[str, str]) -> None:
        if self.debug:
            traceback.print_exception(exc, file=self.err)
        if isinstance(exc, ClinkError):
            text = exc.render(sources)
        else:
            text = (f"error: internal error: {type(exc).__name__}: {exc}\n"
                    "this is a bug in clink; run clink sql --debug to see the traceback")
        self.out.write(f"[ERROR] Could not execute SQL statement:\n{text}\n")
        self.out.flush()

    # -- statements

    def execute(self, piece: Piece, name: str, source: str) -> bool:
        """Run one statement; False if it failed (the error is shown), True otherwise. Raises
        ``SystemExit`` for QUIT / EXIT."""
        sources = {name: source, SESSION: self.session.prefix()}
        try:
            self._execute(piece, name)
        except Cancelled:
            return True
        except KeyboardInterrupt:
            self.out.write("\n[INFO] Statement cancelled.\n")
            return True
        except (ClinkError, Exception) as exc:  # noqa: BLE001 - no traceback reaches the user
            self.error(exc, sources)
            return False
        return True

    def _execute(self, piece: Piece, name: str) -> None:
        words = piece.code.split()
        command = " ".join(words).upper()
        if command in ("QUIT", "EXIT"):
            raise SystemExit(0)
        if command == "HELP":
            self.out.write(HELP + "\n")
            return
        if command == "CLEAR":
            self.console.clear()
            return
        if command == "SET":
            self._show_settings()
            return
        if command == "BEGIN STATEMENT SET":
            if self.statement_set is not None:
                raise SqlError("BEGIN STATEMENT SET inside another", _span(piece, name), "END the open one first")
            self.statement_set = []
            self.info("Begin a statement set.")
            return
        if command == "END" and self.statement_set is not None:
            inserts, self.statement_set = self.statement_set, None
            if not inserts:
                self.info("No statement in the statement set, skip submit.")
                return
            text = ";\n".join(t for t, _ in inserts)
            self._update(self.session.compile(text, "<statement set>"), "<statement set>")
            return
        refused = _unsupported(words)
        if refused is not None:
            what, hint = refused
            raise SqlError(f"{what} is not supported in clink", _span(piece, name), hint)
        from clink.compiler import ast
        from clink.compiler.parse import parse_script

        padded = piece.padded()
        statements = parse_script(padded, name).statements
        if not statements:
            return
        first = statements[0]
        if self.statement_set is not None:
            if not all(isinstance(s, ast.Insert) for s in statements):
                raise SqlError("a statement set holds INSERT statements only", first.span,
                               "END the statement set before this statement")
            self.session.compile(padded, name)  # checked now, as Flink checks it when added
            self.statement_set.append((piece.text, name))
            self.info("Add SQL update statement to the statement set.")
            return
        if isinstance(first, ast.SetStmt) and first.key in CLIENT_SETTINGS:
            choices, _ = CLIENT_SETTINGS[first.key]
            if first.value.lower() not in choices:
                raise SqlError(f"{first.key!r} takes {', '.join(repr(c) for c in choices)}, not {first.value!r}",
                               first.value_span or first.span)
            self.session.client[first.key] = first.value.lower()
            self.info("Session property has been set.")
            return
        if isinstance(first, ast.SetStmt) and first.key.startswith("sql-client."):
            raise SqlError(f"unknown client setting {first.key!r}", first.key_span or first.span,
                           f"the client's settings: {', '.join(CLIENT_SETTINGS)}")
        if isinstance(first, ast.Reset) and first.key in CLIENT_SETTINGS:
            self.session.client[first.key] = CLIENT_SETTINGS[first.key][1]
            self.info("Session property has been reset.")
            return
        compiled = self.session.compile(padded, name)
        match first:
            case ast.CreateTable() | ast.CreateView() | ast.CreateFunction():
                self.session.declarations.append(piece.text)
                self.info("Execute statement succeeded.")
            case ast.SetStmt():
                self.session.settings.pop(first.key, None)
                self.session.settings[first.key] = first.value
                self.info("Session property has been set.")
            case ast.Reset() if first.key is None:
                self.session.settings.clear()
                self.session.client = Session().client
                self.info("All session properties have been set to their default values.")
            case ast.Reset():
                self.session.settings.pop(first.key, None)
                self.info("Session property has been reset.")
            case ast.Explain():
                plan = self._plan(compiled, name)
                for text in plan.explain:
                    self.out.write(text.rstrip("\n") + "\n")
            case ast.CreateTableAs():
                if not self._plan(compiled, name).sinks:  # IF NOT EXISTS, and it exists
                    self.info("Execute statement succeeded.")
                    return
                ddl = self.session.table_ddl(padded, name, first.name)
                self._update(compiled, name)
                self.session.declarations.append(ddl)
            case ast.Insert():
                self._update(compiled, name)
            case ast.Show() | ast.Describe() | ast.ShowCreate():
                self._rows(compiled, name, listing=True)
            case _:
                self._rows(compiled, name, listing=False)

    def _show_settings(self) -> None:
        settings = {**self.session.settings, **self.session.client}
        for key in sorted(settings):
            self.out.write(f"'{key}' = '{settings[key]}'\n")
        if not settings:
            self.info("No settings are set: every one has its default (docs/sql.md#configuration).")

    # -- running jobs

    def _plan(self, compiled, name: str):
        from clink.runtime.loader import load_generated, plan_of

        return plan_of(load_generated(compiled.source, name=name, fingerprint=compiled.fingerprint), name)

    def _job(self, plan, deliver: Callable | None):
        from clink.runtime.context import RuntimeContext
        from clink.runtime.executor import Job

        ctx = RuntimeContext()
        if deliver is not None:
            ctx.on_result = deliver
        job = Job(plan, ctx)
        for warning in job.warnings:
            self.err.write(f"warning: {warning}\n")
        return job

    def _drive(self, job, tick: Callable[[], None] | None = None) -> bool:
        """Run ``job`` to its end; True if Ctrl-C cancelled it first."""
        try:
            while not job.finished:
                if not job.step():
                    time.sleep(0.005)
                if tick is not None:
                    tick()
        except KeyboardInterrupt:
            job.cancel()
            return True
        return False

    def _update(self, compiled, name: str) -> None:
        """INSERT INTO, CREATE TABLE AS, a statement set: run the job to its end."""
        plan = self._plan(compiled, name)
        job = self._job(plan, None)
        if job.unbounded_sources:
            self.info(f"The job reads unbounded source(s) {', '.join(job.unbounded_sources)}: it runs until "
                      "Ctrl-C cancels it.")
        if self._drive(job):
            job.refresh_metrics()
            self.out.write("\n")
            self.info(f"Job cancelled: {job.metrics.summary()}.")
            raise Cancelled
        self.info(f"Complete execution of the SQL update statement: {job.metrics.summary()}.")

    def _rows(self, compiled, name: str, *, listing: bool) -> None:
        """A query (or SHOW / DESCRIBE): its rows, in the session's result mode."""
        plan = self._plan(compiled, name)
        (query,) = [s for s in plan.sinks if s.connector == "collect"]
        view = None

        def deliver(table: str, batch) -> None:
            view.add(batch)

        job = self._job(plan, deliver)
        zone = job.ctx.time_zone
        mode = "table" if listing else self.session.client[RESULT_MODE]
        view = self._view(mode, query, zone, listing=listing)
        try:
            cancelled = self._drive(job, view.tick)
        finally:
            view.stop()
        view.close(cancelled)
        if cancelled:
            raise Cancelled

    def _view(self, mode: str, query, zone: str, *, listing: bool):
        if mode == "tableau":
            return _TableauView(query, zone, self.out)
        return _LiveView(mode, query, zone, self.console, live=self.tty and not listing)


class _LiveView:
    """Table and changelog modes: on a terminal a table redrawn in place as rows arrive, and the
    whole of it printed once the query ends; elsewhere that last table alone."""

    def __init__(self, mode: str, query, zone: str, console, *, live: bool) -> None:
        from clink.display import Changes, Materialized

        self.mode = mode
        self.rows = Materialized(query.schema, query.changelog) if mode == "table" else Changes(query.schema,
                                                                                               query.changelog)
        self.zone = zone
        self.console = console
        self._live = None
        self._last = 0.0
        self._dirty = False
        if live:
            from rich.live import Live

            self._live = Live(console=console, auto_refresh=False, transient=True, vertical_overflow="crop")
            self._live.start()

    def add(self, batch) -> None:
        self.rows.add(batch)
        self._dirty = True

    def tick(self) -> None:
        if self._live is None or not self._dirty:
            return
        now = time.perf_counter()
        if now - self._last < 0.25:
            return
        self._last = now
        self._dirty = False
        from clink.display import rich_table

        room = max(1, self.console.size.height - 7)
        table = self.rows.table()
        view = rich_table(table, self.zone, first=room) if self.mode == "table" else rich_table(table, self.zone,
                                                                                                 last=room)
        self._live.update(view, refresh=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def close(self, cancelled: bool) -> None:
        from clink.display import print_table

        table = self.rows.table()
        if self.mode == "table":
            footer = f"{table.num_rows} row{'s' if table.num_rows != 1 else ''} in set"
        else:
            footer = f"Received a total of {self.rows.changes} change{'s' if self.rows.changes != 1 else ''}"
            if self.rows.changes > table.num_rows:
                footer += f" (the latest {table.num_rows} shown)"
        if cancelled:
            footer += " (query cancelled)"
        print_table(table, self.zone, self.console, footer=footer, plain=not self.console.is_terminal)


class _TableauView:
    def __init__(self, query, zone: str, out) -> None:
        from clink.display import Tableau

        def write(text: str) -> None:
            out.write(text)
            out.flush()

        self.tableau = Tableau(query.schema, query.changelog, zone, write)

    def add(self, batch) -> None:
        self.tableau.add(batch)

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self, cancelled: bool) -> None:
        self.tableau.close(cancelled)


#: Statements of Flink's client that clink does not have: (first words, what, what to do instead).
_UNSUPPORTED = (
    (("DROP",), "DROP", "a table, view or function stays declared until the client ends: declare another "
                        "name, or start the client again"),
    (("ALTER",), "ALTER", "declare a new table from it: CREATE TABLE t2 WITH (...) LIKE t"),
    (("SHOW", "JARS"), "SHOW JARS", "functions are Python: SHOW FUNCTIONS"),
    (("ADD", "JAR"), "ADD JAR", "functions are Python: CREATE FUNCTION f AS 'module.function' LANGUAGE PYTHON"),
    (("REMOVE", "JAR"), "REMOVE JAR", "functions are Python: CREATE FUNCTION f AS 'module.function' LANGUAGE PYTHON"),
)


def _unsupported(words: list[str]) -> tuple[str, str] | None:
    upper = [w.upper() for w in words[:2]]
    for first, what, hint in _UNSUPPORTED:
        if upper[:len(first)] == list(first):
            return what, hint
    return None


def _span(piece: Piece, name: str) -> Span:
    """The first word of the statement."""
    return Span(name, piece.line, piece.col, piece.line, piece.col + len(piece.text.split()[0]))


# ---------------------------------------------------------------- reading input


def run_script(client: SqlClient, text: str, name: str, *, stop_on_error: bool) -> bool:
    """Run every statement of a file; False if one failed (with ``stop_on_error``, the first)."""
    pieces, rest = split_statements(text)
    ok = True
    for piece in pieces:
        if not client.execute(piece, name, text):
            ok = False
            if stop_on_error:
                return False
    if rest.strip():
        last = split_statements(rest + ";")[0]
        line = text[:len(text) - len(rest)].count("\n") + (last[0].line if last else 1)
        client.error(SqlError("the file ends inside a statement", Span(name, line, 1), "end it with ';'"),
                     {name: text})
        return False
    return ok


class _History:
    """Readline history kept in a file: each statement is one entry, however many lines."""

    def __init__(self, path: Path | None) -> None:
        import readline

        self.readline = readline
        self.path = path
        readline.set_history_length(1000)
        if path is not None and path.exists():
            try:
                readline.read_history_file(path)
            except OSError:
                pass
        self._mark = readline.get_current_history_length()

    def statement_done(self, lines: list[str]) -> None:
        """Replace the lines just typed with the statement they make up."""
        rl = self.readline
        while rl.get_current_history_length() > self._mark:
            rl.remove_history_item(rl.get_current_history_length() - 1)
        entry = "\n".join(line for line in lines).strip()
        if entry and "--" not in entry:
            entry = " ".join(part.strip() for part in entry.split("\n"))
        if entry:
            rl.add_history(entry)
        self._mark = rl.get_current_history_length()
        self.save()

    def save(self) -> None:
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.readline.write_history_file(self.path)
            except OSError as exc:
                sys.stderr.write(f"warning: cannot write the history file {self.path}: {exc.strerror}\n")
                self.path = None


def interact(client: SqlClient, *, history: Path | None, stdin=None) -> None:
    """Read statements from the terminal (or a pipe) until QUIT, EXIT or end of input."""
    stdin = stdin or sys.stdin
    tty = stdin.isatty()
    hist = _History(history) if tty else None
    if tty:
        client.out.write(f"clink {__version__} SQL client. Statements end with ';'. HELP; lists the commands; "
                         "QUIT; or Ctrl-D leaves.\n\n")
    buffer = ""
    lines: list[str] = []
    while True:
        try:
            if tty:
                line = input(CONTINUATION if buffer else PROMPT)
            else:
                line = stdin.readline()
                if not line:
                    raise EOFError
                line = line.rstrip("\n")
        except KeyboardInterrupt:
            client.out.write("^C\n" if not buffer else "\n")
            buffer, lines = "", []
            if hist is not None:
                hist.statement_done([])
            continue
        except EOFError:
            if tty:
                client.out.write("\n")
            break
        lines.append(line)
        buffer = f"{buffer}\n{line}" if buffer else line
        if not buffer.strip():
            buffer, lines = "", []
            continue
        if not split_statements(buffer)[0] and buffer.strip().upper() in ("QUIT", "EXIT"):
            break
        pieces, rest = split_statements(buffer)
        if not pieces:
            continue
        text = buffer
        buffer, done = rest, lines
        lines = [rest] if rest else []
        if hist is not None:
            hist.statement_done(done)
        try:
            for piece in pieces:
                client.execute(piece, INPUT, text)
        except SystemExit:
            break
        if not rest.strip():
            buffer, lines = "", []
    if hist is not None:
        hist.save()
    client.out.write("Goodbye!\n")
    client.out.flush()


def history_path(option: str | None, disabled: bool) -> Path | None:
    """Where history is kept: ``--history FILE``, else ``CLINK_SQL_HISTORY``, else
    ``~/.clink_sql_history``; None with ``--no-history`` (or ``CLINK_SQL_HISTORY`` empty)."""
    if disabled:
        return None
    if option:
        return Path(option).expanduser()
    env = os.environ.get("CLINK_SQL_HISTORY")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    return Path.home() / ".clink_sql_history"


def main(args, *, read_sql: Callable[[str, dict[str, str]], tuple[str, str]], settings: dict[str, str]) -> int:
    """``clink sql [-i INIT]... [-f FILE] [--history FILE | --no-history] [--set K=V]...``; the
    command line gives how it reads a SQL file (name and text, or a UsageError) and the settings
    of ``--set``, checked."""
    client = SqlClient(debug=getattr(args, "debug", False), settings=settings)
    for path in args.init:
        sources: dict[str, str] = {}
        name, text = read_sql(path, sources)
        if not _run_init(client, text, name):
            return 2
    if args.file:
        sources = {}
        name, text = read_sql(args.file, sources)
        try:
            return 0 if run_script(client, text, name, stop_on_error=True) else 1
        except SystemExit as exc:
            return int(exc.code or 0)
    interact(client, history=history_path(args.history, args.no_history))
    return 0


def _run_init(client: SqlClient, text: str, name: str) -> bool:
    """An init script: declarations and settings only, as Flink's ``-i`` takes."""
    from clink.compiler import ast
    from clink.compiler.parse import parse_script

    pieces, _ = split_statements(text)
    allowed = (ast.CreateTable, ast.CreateView, ast.CreateFunction, ast.SetStmt, ast.Reset)
    for piece in pieces:
        try:
            statements = parse_script(piece.padded(), name).statements
        except SqlError as exc:
            client.error(exc, {name: text})
            return False
        bad = next((s for s in statements if not isinstance(s, allowed)), None)
        if bad is not None:
            client.error(SqlError("an init script may only declare tables, views and functions, and SET or RESET "
                                  "settings", bad.span, "run it with -f, or type it at the prompt"), {name: text})
            return False
        if not client.execute(piece, name, text):
            return False
    return True
