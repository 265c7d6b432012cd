"""``clink sql``, the interactive SQL client, driven through a pseudo-terminal as a person would:
keys typed (Enter, Ctrl-C, Ctrl-D), the screen read back with ANSI escapes stripped.

Each wait for the screen has a timeout, so a client that hangs fails its test instead of
blocking the suite. The golden results of the word count are those of Flink's SQL client page
(docs/content/docs/dev/table/sqlClient.md): changelog ``+I Bob 1, +I Alice 1, +I Greg 1, -U Bob
1, +U Bob 2``, final table Bob 2, Alice 1, Greg 1 — in table mode in the order Flink's
materialized result keeps (a retracted row leaves, an inserted one goes to the end).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")

# Four names, one row per batch, so the GROUP BY answers each row as it comes.
WORDS = """\
CREATE TABLE seq (i INT) WITH ('connector' = 'datagen', 'batch-size' = '1',
  'fields.i.kind' = 'sequence', 'fields.i.start' = '1', 'fields.i.end' = '4');
CREATE VIEW NameTable AS
  SELECT CASE i WHEN 1 THEN 'Bob' WHEN 2 THEN 'Alice' WHEN 3 THEN 'Greg' ELSE 'Bob' END AS name FROM seq;
"""
WORD_COUNT = "SELECT name, COUNT(*) AS cnt FROM NameTable GROUP BY name;"


class Terminal:
    """``clink sql ARGS`` on a pseudo-terminal of 120 columns and 40 lines."""

    def __init__(self, cwd: Path, *args: str, history: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", HOME=str(cwd))
        argv = [sys.executable, "-m", "clink", "sql", *args]
        argv += ["--history", str(history)] if history is not None else ["--no-history"]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its terminal is the pty
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
                # As a shell starts a program in a terminal: Ctrl-C interrupts it, even when the
                # tests themselves run in the background (which ignores SIGINT, and a program
                # inherits that).
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.chdir(cwd)
                os.execve(sys.executable, argv, env)
            finally:
                os._exit(127)
        self.raw = b""
        self.seen = 0  # how much of the screen text earlier waits consumed
        self.status: int | None = None

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace")).replace("\r", "")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child has gone and closed the terminal
            return False
        self.raw += data
        return bool(data)

    def expect(self, pattern: str, timeout: float = 60) -> str:
        """Wait until ``pattern`` (a regex) shows after what earlier waits saw; the text up to
        and including it."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen
            m = re.search(pattern, text[self.seen:])
            if m:
                part = text[self.seen:self.seen + m.end()]
                self.seen += m.end()
                return part
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.5)) and self._exited():
                raise AssertionError(f"{pattern!r} did not show; the screen after the last match:\n"
                                     f"{text[self.seen:]}")

    def prompt(self) -> str:
        return self.expect(r"clink> $|clink> ")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def line(self, text: str) -> None:
        self.type(text + "\r")

    def _exited(self) -> bool:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while not self._exited():
            if time.monotonic() > deadline:
                raise AssertionError("the client did not exit")
            self._read(0.1)
        while self._read(0.05):
            pass
        return self.status

    def close(self) -> None:
        if self.status is None and not self._exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def terminal(tmp_path: Path):
    opened: list[Terminal] = []

    def start(*args: str, history: Path | None = None) -> Terminal:
        t = Terminal(tmp_path, *args, history=history)
        opened.append(t)
        t.prompt()
        return t

    yield start
    for t in opened:
        t.close()
    for t in opened:
        assert "Traceback" not in t.screen, t.screen


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in ``text`` (box-drawing or ASCII), cells stripped."""
    rows = []
    for line in text.splitlines():
        if line.startswith(("│", "┃", "|")) and not set(line) <= set("|-+ "):
            cells = [c.strip() for c in re.split(r"[│┃|]", line)[1:-1]]
            rows.append(cells)
    return rows


def last_table(text: str, footer: str) -> list[list[str]]:
    """The rows of the table printed right before the last ``footer`` line (header included)."""
    assert footer in text, text
    lines = text[:text.rindex(footer)].splitlines()
    block: list[str] = []
    while lines and lines[-1][:1] in tuple("|+│┃┏┡└"):
        block.insert(0, lines.pop())
    # Redrawn frames of a live table come before it (a terminal erases them): start at the
    # last table's top border.
    tops = [i for i, line in enumerate(block)
            if line.startswith("┏") or line.startswith("+") and i + 1 < len(block) and block[i + 1].startswith("|")]
    return table_rows("\n".join(block[tops[-1]:] if tops else block))


def test_multi_line_ddl_then_a_query_over_a_csv_file(terminal, tmp_path: Path) -> None:
    (tmp_path / "fruit.csv").write_text("id,name,price\n1,apple,1.5\n2,pear,2.0\n3,apple,3.0\n")
    t = terminal()
    t.line("CREATE TABLE fruit (")
    t.expect(r"     > ")  # the continuation prompt: the statement is not finished
    t.line("  id BIGINT, name STRING, price DOUBLE")
    t.expect(r"     > ")
    t.line(") WITH ('connector' = 'filesystem', 'path' = 'fruit.csv', 'format' = 'csv', 'csv.header' = 'true');")
    t.expect(r"\[INFO\] Execute statement succeeded\.")
    t.prompt()
    t.line("SELECT name, price * 2 AS doubled")
    t.line("FROM fruit WHERE price > 1.6;")
    shown = t.expect(r"2 rows in set")
    assert last_table(shown, "2 rows in set") == [["name", "doubled"], ["pear", "4.0"], ["apple", "6.0"]]
    t.prompt()
    t.line("SHOW TABLES;")
    assert last_table(t.expect(r"1 row in set"), "1 row in set") == [["table name"], ["fruit"]]
    t.prompt()
    t.line("DESCRIBE fruit;")
    shown = t.expect(r"3 rows in set")
    assert [r[:3] for r in last_table(shown, "3 rows in set")] == [
        ["name", "type", "null"], ["id", "BIGINT", "true"], ["name", "STRING", "true"], ["price", "DOUBLE", "true"]]


def test_an_updating_query_ends_as_its_final_table_in_table_mode(terminal) -> None:
    t = terminal()
    for statement in WORDS.strip().split(";\n"):
        t.line(" ".join(statement.split()).rstrip(";") + ";")
        t.expect(r"\[INFO\] Execute statement succeeded\.")
        t.prompt()
    t.line(WORD_COUNT)
    shown = t.expect(r"3 rows in set")
    assert last_table(shown, "3 rows in set") == [["name", "cnt"], ["Alice", "1"], ["Greg", "1"], ["Bob", "2"]]


def test_changelog_mode_shows_every_change_with_its_kind(terminal) -> None:
    t = terminal()
    t.line(" ".join(WORDS.split()))
    t.expect(r"Execute statement succeeded\.(.|\n)*Execute statement succeeded\.")
    t.prompt()
    t.line("SET 'sql-client.execution.result-mode' = 'changelog';")
    t.expect(r"\[INFO\] Session property has been set\.")
    t.prompt()
    t.line(WORD_COUNT)
    shown = t.expect(r"Received a total of 5 changes")
    assert last_table(shown, "Received a total of 5 changes") == [
        ["op", "name", "cnt"], ["+I", "Bob", "1"], ["+I", "Alice", "1"], ["+I", "Greg", "1"],
        ["-U", "Bob", "1"], ["+U", "Bob", "2"]]


def test_tableau_mode_prints_rows_as_they_come(terminal) -> None:
    t = terminal()
    t.line(" ".join(WORDS.split()))
    t.expect(r"Execute statement succeeded\.(.|\n)*Execute statement succeeded\.")
    t.line("SET 'sql-client.execution.result-mode' = 'tableau';")
    t.expect(r"Session property has been set\.")
    t.line(WORD_COUNT)
    shown = t.expect(r"Received a total of 5 rows")
    lines = [re.sub(r"\s+", " ", line) for line in shown.splitlines() if line.startswith("|")]
    assert lines == ["| op | name | cnt |", "| +I | Bob | 1 |", "| +I | Alice | 1 |", "| +I | Greg | 1 |",
                     "| -U | Bob | 1 |", "| +U | Bob | 2 |"]


def test_an_error_shows_a_caret_and_the_client_goes_on(terminal) -> None:
    t = terminal()
    t.line("CREATE TABLE t (a INT, price DOUBLE) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
           "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '3');")
    t.expect(r"Execute statement succeeded\.")
    t.prompt()
    t.line("SELECT a,")
    t.line("       prise FROM t;")
    shown = t.expect(r"hint: .*\n")
    assert "[ERROR] Could not execute SQL statement:" in shown
    assert "<input>:2:8: error: unknown column 'prise'" in shown
    assert " 2 |        prise FROM t;\n   |        ^^^^^\n" in shown
    assert "did you mean 'price'?" in shown
    t.prompt()
    t.line("SELECT a * 10 AS b FROM t;")
    assert last_table(t.expect(r"3 rows in set"), "3 rows in set") == [["b"], ["10"], ["20"], ["30"]]
    t.prompt()
    t.line("SELECT FROM;")  # a syntax error: positioned too
    shown = t.expect(r"\^+\n")
    assert "<input>:1:8: error: " in shown
    t.prompt()
    t.line("SET 'sql-client.execution.result-mode' = 'grid';")
    shown = t.expect(r"\^+\n")
    assert "takes 'table', 'changelog', 'tableau', not 'grid'" in shown


def test_history_is_written_and_ctrl_d_leaves(terminal, tmp_path: Path) -> None:
    history = tmp_path / "hist"
    t = terminal(history=history)
    t.line("SELECT 1 AS one,")
    t.line("  2 AS two;")
    assert last_table(t.expect(r"1 row in set"), "1 row in set") == [["one", "two"], ["1", "2"]]
    t.prompt()
    t.line("SHOW VIEWS;")
    t.expect(r"0 rows in set")
    t.prompt()
    t.type("\x04")  # Ctrl-D at an empty prompt
    t.expect("Goodbye!")
    assert t.wait() == 0
    assert history.read_text().splitlines() == ["SELECT 1 AS one, 2 AS two;", "SHOW VIEWS;"]
    # The next client reads it back: Up recalls the last statement.
    t = terminal(history=history)
    t.type("\x1b[A\r")
    t.expect(r"0 rows in set")


def test_ctrl_c_cancels_the_query_not_the_client(terminal) -> None:
    t = terminal()
    t.line("CREATE TABLE forever (a BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '20', "
           "'fields.a.kind' = 'sequence', 'fields.a.start' = '1');")
    t.expect(r"Execute statement succeeded\.")
    t.line("SET 'sql-client.execution.result-mode' = 'tableau';")
    t.expect(r"Session property has been set\.")
    t.prompt()
    t.line("SELECT a FROM forever;")
    t.expect(r"\|\s+\+I \|\s+3 \|")  # rows are coming
    t.type("\x03")
    shown = t.expect(r"Query terminated, received a total of (\d+) rows")
    assert int(re.findall(r"total of (\d+) rows", shown)[-1]) >= 3
    t.prompt()
    # Ctrl-C while typing a statement clears it: what follows is a statement of its own.
    t.line("SELECT")
    t.expect(r"     > ")
    # The prompt is written just before the client waits for a key; an interrupt in between is
    # only seen at the next key, as in any terminal program. A person is never that fast.
    time.sleep(0.5)
    t.type("\x03")
    t.prompt()
    t.line("SELECT 7 AS seven;")
    t.expect(r"\| \+I \|\s+7 \|")
    t.expect(r"Received a total of 1 row\n")
    t.line("quit;")
    t.expect("Goodbye!")
    assert t.wait() == 0


def test_statement_set_and_create_table_as_interactively(terminal, tmp_path: Path) -> None:
    t = terminal()
    t.line("CREATE TABLE src (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '4', "
           "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '4');")
    t.expect(r"Execute statement succeeded\.")
    t.line("CREATE TABLE odd WITH ('connector' = 'filesystem', 'path' = 'odd/', 'format' = 'csv') "
           "AS SELECT a FROM src WHERE a % 2 = 1;")
    t.expect(r"\[INFO\] Complete execution of the SQL update statement: 4 rows in, 2 rows out")
    t.line("BEGIN STATEMENT SET;")
    t.expect(r"\[INFO\] Begin a statement set\.")
    t.line("INSERT INTO odd SELECT a * 100 FROM src WHERE a > 3;")
    t.expect(r"\[INFO\] Add SQL update statement to the statement set\.")
    t.line("END;")
    t.expect(r"Complete execution of the SQL update statement: 4 rows in, 1 rows out")
    t.prompt()
    # The table CREATE TABLE AS declared is in the session: read back what both jobs wrote.
    t.line("SELECT a FROM odd;")
    rows = last_table(t.expect(r"3 rows in set"), "3 rows in set")
    assert rows[0] == ["a"] and sorted(int(r[0]) for r in rows[1:]) == [1, 3, 400]


def sql_client(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "clink", "sql", "--no-history", *args], input=stdin, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def test_file_mode_runs_the_script_and_stops_at_the_first_error(tmp_path: Path) -> None:
    (tmp_path / "init.sql").write_text(WORDS + "SET 'sql-client.execution.result-mode' = 'tableau';\n")
    (tmp_path / "job.sql").write_text(f"-- the word count\n{WORD_COUNT}\n\nSELECT nam\n  FROM NameTable;\nSELECT 1;\n")
    done = sql_client(tmp_path, "-i", "init.sql", "-f", "job.sql")
    assert done.returncode == 1
    out = done.stdout
    assert out.count("Received a total of 5 rows") == 1
    # Positions are the file's: the error is on line 4 of job.sql, and nothing after it ran.
    assert "job.sql:4:8: error: unknown column 'nam'" in out
    assert " 4 | SELECT nam\n   |        ^^^\n" in out
    assert "Received a total of 1 row\n" not in out  # SELECT 1, after the error, did not run
    assert out.count("[ERROR]") == 1


def test_an_init_script_may_only_declare(tmp_path: Path) -> None:
    (tmp_path / "init.sql").write_text("SET 'parallelism.default' = '1';\nSELECT 1;\n")
    done = sql_client(tmp_path, "-i", "init.sql")
    assert done.returncode == 2
    assert "init.sql:2:1: error: an init script may only declare" in done.stdout


def test_piped_input_prints_plain_tables(tmp_path: Path) -> None:
    done = sql_client(tmp_path, stdin=WORDS + WORD_COUNT + "\nSET;\n")
    assert done.returncode == 0
    assert "\x1b[" not in done.stdout and "┃" not in done.stdout
    assert last_table(done.stdout, "3 rows in set") == [["name", "cnt"], ["Alice", "1"], ["Greg", "1"], ["Bob", "2"]]
    assert "'sql-client.execution.result-mode' = 'table'" in done.stdout


def test_what_clink_does_not_have_is_refused_with_what_to_do(tmp_path: Path) -> None:
    done = sql_client(tmp_path, stdin="DROP TABLE t;\n  USE db1;\nSELECT 5 AS five;\n")
    assert done.returncode == 0
    assert "<input>:1:1: error: DROP is not supported in clink\n 1 | DROP TABLE t;\n   | ^^^^\nhint: " in done.stdout
    assert "<input>:1:3: error: database 'db1' does not exist: clink has one catalog, default_catalog" in done.stdout
    assert last_table(done.stdout, "1 row in set") == [["five"], ["5"]]
