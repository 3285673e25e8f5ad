"""Fixtures of the store tests: a real PostgreSQL server of the tests' own on 127.0.0.1
(tests/pg_server.py: initdb'd under tmp, a free port, stopped at the end), and ``store_url``,
which gives each test an empty store on SQLite and on that server, so the same tests run against
both. scripts/ensure-postgres.sh installs Debian's postgresql for `make test`."""
from __future__ import annotations

import contextlib
from typing import Iterator

import pytest

from pg_server import Unavailable, new_database, private_postgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[dict]:
    """A private PostgreSQL server: ``{"url": "postgresql://lar@127.0.0.1:PORT", "port": ...}``."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(private_postgres())
        except Unavailable as exc:
            pytest.skip(str(exc))
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """An empty store: an SQLite file under tmp, or a new database on the tests' PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    return new_database(request.getfixturevalue("postgres"))
