"""Fixtures of the store tests: a real PostgreSQL server of the tests' own on 127.0.0.1 (initdb'd
under tmp, a free port, stopped at the end), and ``store_url``, which gives each test an empty
store on SQLite and on that server, so the same tests run against both.
scripts/ensure-postgres.sh installs Debian's postgresql for `make test`."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from remote_fixtures import free_port


def _pg_bin(name: str) -> Optional[str]:
    """Debian keeps the server programs off PATH, in /usr/lib/postgresql/<version>/bin."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _as_user(argv: List[str]) -> List[str]:
    """PostgreSQL refuses to run as root: as root, run it as ``nobody``."""
    return ["runuser", "-u", "nobody", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="session")
def postgres() -> Iterator[dict]:
    """A private PostgreSQL server: ``{"url": "postgresql://lar@127.0.0.1:PORT", "port": ...}``
    (trust authentication on 127.0.0.1 only; data under a tmp folder, fsync off)."""
    initdb, server = _pg_bin("initdb"), _pg_bin("postgres")
    if initdb is None or server is None:
        pytest.skip("PostgreSQL is not installed (make test runs scripts/ensure-postgres.sh: apt-get install "
                    "postgresql)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: PostgreSQL cannot be started as an unprivileged user")
    # not under pytest's tmp: its folders are private to root, and the server runs as nobody
    data = Path(tempfile.mkdtemp(prefix="lar-prec-pg-"))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
    log = data.parent / (data.name + ".log")
    proc: Optional[subprocess.Popen] = None
    try:
        subprocess.run(_as_user([initdb, "-D", str(data / "db"), "-A", "trust", "-U", "lar", "-E", "UTF8",
                                 "--no-sync"]), cwd=data, check=True, capture_output=True, timeout=120)
        port = free_port()
        with open(log, "wb") as fh:
            proc = subprocess.Popen(_as_user([server, "-D", str(data / "db"), "-k", str(data), "-p", str(port),
                                              "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                              "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]),
                                    cwd=data, stdout=fh, stderr=fh, stdin=subprocess.DEVNULL)
        url = f"postgresql://lar@127.0.0.1:{port}"
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(url + "/postgres", connect_timeout=2).close()
                break
            except psycopg2.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"postgres did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        yield {"url": url, "port": port, "dir": data}
    finally:
        if proc is not None:
            pid_file = data / "db" / "postmaster.pid"
            try:  # fast shutdown of the postmaster itself (runuser may not pass the signal on)
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
            except (OSError, ValueError, IndexError):
                proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data, ignore_errors=True)
        log.unlink(missing_ok=True)


def new_database(server: dict) -> str:
    """A new empty database on the server: its URL."""
    import psycopg2

    name = "t" + uuid.uuid4().hex[:12]
    conn = psycopg2.connect(server["url"] + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    return f"{server['url']}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """An empty store: an SQLite file under tmp, or a new database on the tests' PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    return new_database(request.getfixturevalue("postgres"))
