"""Fixtures of the store tests: a real PostgreSQL server of the tests' own on 127.0.0.1
(tests/pg_server.py: initdb'd under tmp, a free port, stopped at the end), and ``store_url``,
which gives each test an empty store on SQLite and on that server, so the same tests run against
both. scripts/ensure-postgres.sh installs Debian's postgresql for `make test`."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator

import pytest

from conftest import ROOT
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


@pytest.fixture(scope="module")
def faulty(manifest, tmp_path_factory):
    """A default run of cnn through tests/wrapped_lar.py with c2.weight scaled by 1+1e-3."""
    c = manifest["cnn"]
    out = tmp_path_factory.mktemp("faulty") / "dump"
    out.mkdir()
    argv = [sys.executable, str(ROOT / "tests" / "wrapped_lar.py"), str(c.model), "--input", ";".join(c.input_specs()),
            "--iter", "1", "--warmup-iter", "0", "--bin-io-dump", str(out)]
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=300,
                   env={**os.environ, "WRAPPED_LAR_FAULT": "c2.weight:1e-3", "PYTHONPATH": str(ROOT)})
    return out
