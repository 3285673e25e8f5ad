"""A private PostgreSQL server on 127.0.0.1, for the store tests (tests/store_fixtures.py) and
bench/store_scale.py: initdb'd in a new temp folder, on a free port, trust authentication on
127.0.0.1 only, fsync off; stopped and deleted at the end. Standard library and psycopg2 only.

Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin, off PATH
(scripts/ensure-postgres.sh installs them with apt-get). PostgreSQL refuses to run as root: as
root, both run as ``nobody`` (Python drops the privileges itself, so no runuser or su is
needed), in a folder ``nobody`` can reach (a root-only TMPDIR is passed over for /tmp).
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Optional


class Unavailable(Exception):
    """PostgreSQL is not installed, or cannot run here (the tests that need it skip)."""


def _program(name: str) -> Optional[str]:
    """The newest version's program (Debian: /usr/lib/postgresql/<major>/bin), else on PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: _major(Path(p).parts[-3]))
    return found[-1] if found else shutil.which(name)


def _major(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reachable_by_all(path: Path) -> bool:
    """Every folder up to ``path`` can be passed through by any user (o+x)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in (path, *path.parents))


def _as_nobody() -> Dict[str, Any]:
    """Popen arguments that run a child as ``nobody`` when we are root (none otherwise)."""
    if os.geteuid() != 0:
        return {}
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise Unavailable("running as root and there is no user 'nobody' to run PostgreSQL as") from None
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


@contextlib.contextmanager
def private_postgres(start_timeout: float = 60.0) -> Iterator[Dict[str, Any]]:
    """A running server: ``{"url": "postgresql://lar@127.0.0.1:PORT", "port": ..., "dir": ...}``.

    Raises:
        Unavailable: initdb or postgres is not installed, or no unprivileged user to run it.
        RuntimeError: initdb or the server failed (its log in the message).
    """
    initdb, server = _program("initdb"), _program("postgres")
    if initdb is None or server is None:
        raise Unavailable("PostgreSQL is not installed (make test runs scripts/ensure-postgres.sh: apt-get install "
                          "postgresql)")
    user = _as_nobody()
    base = Path(tempfile.gettempdir())
    if user and not _reachable_by_all(base):
        base = Path("/tmp")  # root's own TMPDIR is private: nobody could not open the folder
    data = Path(tempfile.mkdtemp(prefix="lar-prec-pg-", dir=base))
    if user:
        os.chown(data, user["user"], user["group"])
    log = data.parent / (data.name + ".log")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}  # a locale the machine lacks must not stop initdb
    proc: Optional[subprocess.Popen] = None
    try:
        init = subprocess.run([initdb, "-D", str(data / "db"), "-A", "trust", "-U", "lar", "-E", "UTF8", "--no-locale",
                               "--no-sync"], cwd=data, env=env, capture_output=True, text=True, timeout=180, **user)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {(init.stderr or init.stdout).strip()[-2000:]}")
        port = _free_port()
        with open(log, "wb") as fh:
            proc = subprocess.Popen([server, "-D", str(data / "db"), "-k", str(data), "-p", str(port),
                                     "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                     "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
                                    cwd=data, env=env, stdout=fh, stderr=fh, stdin=subprocess.DEVNULL, **user)
        url = f"postgresql://lar@127.0.0.1:{port}"
        import psycopg2

        deadline = time.monotonic() + start_timeout
        while True:
            try:
                psycopg2.connect(url + "/postgres", connect_timeout=2).close()
                break
            except psycopg2.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield {"url": url, "port": port, "dir": data}
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data, ignore_errors=True)
        log.unlink(missing_ok=True)


def new_database(server: Dict[str, Any]) -> str:
    """A new empty database on the server: its URL."""
    import psycopg2

    name = "t" + uuid.uuid4().hex[:12]
    conn = psycopg2.connect(server["url"] + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    return f"{server['url']}/{name}"
