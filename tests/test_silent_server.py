"""Every network wait is bounded: a port on 127.0.0.1 that accepts connections and never says a
word (a frozen server, a proxy) as the store's PostgreSQL and as the zoo's Dask scheduler.
Each command ends with one line naming the URL and its exit code (2 for a store, 3 for a
scheduler) within its timeout plus 10 s more than the same command against a refused port
(Python's start-up on a loaded machine is not the command's wait); an analysis' verdict and
files are written before the store is tried."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator, List

import pytest

from conftest import ROOT
from remote_fixtures import free_port
from zoo_helpers import write_manifest

TIMEOUT = 2  # LAR_PREC_STORE_TIMEOUT and --connect-timeout of these tests


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts every connection and never reads or writes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: List[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


def _timed(*args) -> "tuple[subprocess.CompletedProcess, float]":
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "LAR_PREC_STORE_TIMEOUT": str(TIMEOUT)})
    return p, time.monotonic() - start


def _one_error_line(p: subprocess.CompletedProcess, start: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start) and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("command", ["check", "store-add", "compare"])
def test_a_silent_postgresql_store_ends_within_its_timeout(command, silent_port, lar_dump, tmp_path):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    silent, refused = (f"postgresql://lar@127.0.0.1:{port}/db" for port in (silent_port, free_port()))
    if command == "check":
        args = lambda url: ("check", "--store", url)  # noqa: E731
    elif command == "store-add":
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "report.json").write_text(
            _cli_json("compare", ref, clean))
        args = lambda url: ("store", "add", tmp_path / "a", "--store", url)  # noqa: E731
    else:
        args = lambda url: ("compare", ref, clean, "--json", tmp_path / "r.json", "--store", url)  # noqa: E731
    base, base_s = _timed(*args(refused))
    p, seconds = _timed(*args(silent))
    assert base.returncode == 2 and p.returncode == 2, (base.stderr, p.stderr)
    _one_error_line(p, f"Error: store {silent}: ")
    assert "timeout" in p.stderr
    assert seconds <= base_s + TIMEOUT + 10, (seconds, base_s)
    if command == "compare":  # the verdict and the JSON first, then the store's line
        assert "c2.Convolution" in p.stdout
        assert json.loads((tmp_path / "r.json").read_text())["command"] == "compare"


def _cli_json(*args) -> str:
    p = subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args), "--json", "-"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


def test_a_bad_store_timeout_is_exit_2_naming_the_variable(tmp_path):
    p = subprocess.run([sys.executable, "-m", "lar_prec", "check", "--store", str(tmp_path / "r.db")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "LAR_PREC_STORE_TIMEOUT": "0"})
    assert p.returncode == 2
    _one_error_line(p, "Error: LAR_PREC_STORE_TIMEOUT='0': expected seconds")


def test_a_silent_scheduler_ends_within_the_connect_timeout(silent_port, manifest, tmp_path):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], '[[run]]\ncommand = "shake"\n')
    runs = []
    for port in (free_port(), silent_port):
        out = tmp_path / f"out-{port}"
        runs.append(_timed("zoo", m, "--store", tmp_path / "r.db", "--out", out, "--scheduler",
                           f"tcp://127.0.0.1:{port}", "--connect-timeout", TIMEOUT, "-q"))
        assert not out.exists()  # nothing ran: no zoo folder
    (base, base_s), (p, seconds) = runs
    assert base.returncode == 3 and p.returncode == 3, (base.stderr, p.stderr)
    _one_error_line(p, f"Error: scheduler tcp://127.0.0.1:{silent_port}: no answer within {TIMEOUT} s")
    assert seconds <= base_s + TIMEOUT + 10, (seconds, base_s)


def test_a_silent_store_stops_a_zoo_before_any_task(silent_port, manifest, tmp_path):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], '[[run]]\ncommand = "shake"\n')
    url = f"postgresql://lar@127.0.0.1:{silent_port}/db"
    p, _ = _timed("zoo", m, "--store", url, "--out", tmp_path / "out", "-q")
    assert p.returncode == 2
    _one_error_line(p, f"Error: store {url}: ")
    assert not (tmp_path / "out").exists()
