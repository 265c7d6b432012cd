"""SourceWriter: indentation, SQL position comments and stable formatting for generated code."""

from __future__ import annotations

from clink.errors import Span


class SourceWriter:
    """Collects lines of Python. ``line(text, span=...)`` appends ``# file:line:col  sql`` taken
    from the original SQL, so a reader (and an error report) can go from code back to SQL."""

    def __init__(self, sources: dict[str, str]) -> None:
        self._lines: list[str] = []
        self._indent = 0
        self._sources = {name: text.split("\n") for name, text in sources.items()}

    def line(self, text: str = "", *, span: Span | None = None) -> None:
        if not text:
            self._lines.append("")
            return
        code = "    " * self._indent + text
        comment = self.position(span)
        self._lines.append(f"{code}  # {comment}" if comment else code)

    def position(self, span: Span | None) -> str | None:
        if span is None:
            return None
        lines = self._sources.get(span.file)
        snippet = ""
        if lines is not None and 0 < span.line <= len(lines):
            text = lines[span.line - 1]
            end = span.end_col if span.end_line == span.line and span.end_col > span.col else len(text) + 1
            snippet = text[span.col - 1:end - 1].strip()
            if span.end_line != span.line:
                snippet += " ..."
            snippet = " ".join(snippet.split())
            if len(snippet) > 60:
                snippet = snippet[:57] + "..."
        return f"{span}  {snippet}".rstrip()

    def indent(self) -> _Indent:
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self._lines).rstrip() + "\n"


class _Indent:
    def __init__(self, writer: SourceWriter) -> None:
        self.writer = writer

    def __enter__(self) -> None:
        self.writer._indent += 1

    def __exit__(self, *exc: object) -> None:
        self.writer._indent -= 1
