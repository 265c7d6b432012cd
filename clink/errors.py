"""Errors that users see, and the source positions they point at.

This module imports only the standard library and ``clink.records`` (itself stdlib only): the
compiler, the runtime and the generated modules all raise these, and none of them may pull in
the others through it.

Every error has an ``exit_code`` the command line uses: 2 for a usage or SQL mistake, 1 for a
pipeline that failed while running.
"""

from __future__ import annotations

from clink.records import record

__all__ = [
    "CheckpointCorrupted",
    "ClinkError",
    "CompilerBug",
    "ConnectorError",
    "EvaluationError",
    "IncompatibleCheckpoint",
    "PipelineError",
    "RecordError",
    "Span",
    "SqlError",
    "SqlErrors",
    "UsageError",
]


@record
class Span:
    """A region of a source file: 1-based line and column, end column exclusive."""

    file: str
    line: int
    col: int
    end_line: int = -1
    end_col: int = -1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    @property
    def width(self) -> int:
        if self.end_line == self.line and self.end_col > self.col:
            return self.end_col - self.col
        return 1


class ClinkError(Exception):
    """Base class of every error clink reports to a user."""

    exit_code: int = 1

    def render(self, sources: dict[str, str] | None = None) -> str:
        """The message as the command line prints it."""
        return f"error: {self}"


class UsageError(ClinkError):
    """A command was called with arguments that cannot work (a missing file, a bad flag)."""

    exit_code = 2


class SqlError(ClinkError):
    """A mistake in the user's SQL, with the place it was found."""

    exit_code = 2

    def __init__(self, message: str, span: Span | None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def __str__(self) -> str:
        where = f"{self.span}: " if self.span else ""
        text = f"{where}{self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def render(self, sources: dict[str, str] | None = None) -> str:
        """Render as ``file:line:col: error: message``, the source line, a caret, then the hint.

        ``sources`` maps file names to their text; without the text only the first line is shown.
        """
        span = self.span
        if span is None:
            lines = [f"error: {self.message}"]
        else:
            lines = [f"{span}: error: {self.message}"]
            text = (sources or {}).get(span.file)
            if text is not None:
                source_lines = text.split("\n")  # the lexer counts only \n as a line break
                if 0 < span.line <= len(source_lines):
                    line = source_lines[span.line - 1].rstrip("\r").expandtabs(1)
                    gutter = " " * len(str(span.line))
                    width = span.width
                    if span.end_line == span.line:
                        width = max(1, min(width, len(line) - span.col + 1))
                    else:
                        width = max(1, len(line) - span.col + 1)
                    lines.append(f" {span.line} | {line}")
                    lines.append(f" {gutter} | {' ' * (span.col - 1)}{'^' * width}")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


class SqlErrors(SqlError):
    """Several SQL mistakes found in one pass, so a user can fix them all at once."""

    def __init__(self, errors: list[SqlError]) -> None:
        assert errors, "SqlErrors needs at least one error"
        first = errors[0]
        super().__init__(first.message, first.span, first.hint)
        self.errors = list(errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def render(self, sources: dict[str, str] | None = None) -> str:
        return "\n\n".join(e.render(sources) for e in self.errors)


class RecordError(ClinkError):
    """A record in a source that cannot be read: names the file, the line and the reason."""

    exit_code = 1

    def __init__(self, reason: str, *, file: str | None = None, line: int | None = None,
                 table: str | None = None, hint: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.table = table
        #: What the table's options can do about it; the filesystem connector's by default.
        self.hint = hint or "set 'format.ignore-parse-errors' = 'true' on the table to skip and count bad records"
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line}: " if self.line is not None else f"{self.file}: "
        table = f" (table {self.table!r})" if self.table else ""
        return f"{where}bad record{table}: {self.reason}"

    def render(self, sources: dict[str, str] | None = None) -> str:
        return f"error: {self}\nhint: {self.hint}"


class ConnectorError(ClinkError):
    """A connector cannot do its job (a missing file, an unwritable directory)."""

    exit_code = 1


class PipelineError(ClinkError):
    """A pipeline failed while running.

    ``where`` is the SQL being evaluated (``file:line:col  text``), when known; ``render`` then
    shows that line of the SQL with a caret, as a SQL error does.
    """

    exit_code = 1

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(str(self))

    @property
    def span(self) -> Span | None:
        if not self.where:
            return None
        place = self.where.split()[0]
        file, _, rest = place.rpartition(":")
        file, _, line = file.rpartition(":")
        try:
            return Span(file, int(line), int(rest))
        except ValueError:
            return None

    def __str__(self) -> str:
        if self.where:
            return f"{self.message}\n  while evaluating {self.where}"
        return self.message

    def render(self, sources: dict[str, str] | None = None) -> str:
        span = self.span
        if span is None:
            return f"error: {self.message}"
        sql = self.where.split(None, 1)[1] if len(self.where.split(None, 1)) > 1 else ""
        width = len(sql) if sql and not sql.endswith("...") else 1
        located = SqlError(self.message, Span(span.file, span.line, span.col, span.line, span.col + width))
        text = located.render(sources)
        return text.replace(f"{span}: error:", f"{span}: error: pipeline failed:", 1)


class CheckpointCorrupted(ClinkError):
    """A checkpoint's files do not match its manifest (or the manifest is missing or damaged)."""

    exit_code = 1


class IncompatibleCheckpoint(ClinkError):
    """A checkpoint was written by a different plan or format: it cannot be restored into this one."""

    exit_code = 2


class CompilerBug(ClinkError):
    """An invariant inside clink was violated: this is a bug in clink, not in the user's SQL."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}\nthis is a bug in clink; please report it with the SQL that caused it")


class EvaluationError(Exception):
    """A value could not be computed (a cast that does not fit, an overflow): fails the pipeline.
    The executor reports it as a ``PipelineError`` at the SQL position of the failing line."""
