"""A zoo on a real Dask cluster started here: ``dask scheduler`` and two ``dask worker`` processes on
127.0.0.1, one of them owning the ssh device of the remote tests (the real sshd on 127.0.0.1, its
load_and_run the bundled one behind a wrapper). A device no worker owns is refused before anything
runs; the device's worker is killed (-9) in the middle of a task: Dask runs the task again (the
nanny starts the worker again) and every task ends with exactly one row in the store."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from remote_fixtures import free_port, lar_wrapper, sshd  # noqa: F401 (sshd: a fixture)
from zoo_helpers import cmdline, descendants, parent, processes_running, rows_by_task, write_manifest, zoo_cli


def _dask(args, log: Path, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dask", *map(str, args)], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def cluster(sshd, tmp_path_factory):
    """A scheduler, worker "cpu" (this machine) and worker "board" (owns the ssh device)."""
    from distributed import Client

    d = tmp_path_factory.mktemp("dask")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    o = sshd["options"]
    board_env = {"LAR_PREC_SSH_IDENTITY": o.identity, "LAR_PREC_SSH_CONFIG": o.config,
                 "LAR_PREC_SSH_KNOWN_HOSTS": o.known_hosts}
    resource = f"dev-ssh-127.0.0.1-{sshd['port']}"
    common = ["--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard"]
    procs = [_dask(["scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"], d / "scheduler.log")]
    try:
        procs.append(_dask(["worker", address, *common, "--name", "cpu", "--local-directory", d / "cpu"], d / "cpu.log"))
        procs.append(_dask(["worker", address, *common, "--name", "board", "--local-directory", d / "board",
                            "--resources", f"{resource}=1", "--pid-file", d / "board.pid"], d / "board.log", board_env))
        with Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=120)
        yield {"address": address, "dir": d, "nanny": int((d / "board.pid").read_text()), "resource": resource}
    finally:
        for p in reversed(procs):
            _stop(p)


def _worker_process(nanny: int) -> int:
    """The worker process a nanny started (multiprocessing's spawn), not its resource tracker."""
    found = [p for p in descendants(nanny) if parent(p) == nanny and "spawn_main" in cmdline(p)]
    assert found, f"nanny {nanny} has no worker process"
    return found[0]


def _busy(worker: int, needles) -> bool:
    """A run of a task under way below the worker: a local load_and_run (its folder is under the
    zoo's) or a command on the device (its folder there), not ssh's lasting master connection."""
    return any(n in cmdline(p) for p in descendants(worker) for n in needles)


def _manifest(path: Path, manifest, sshd, device_lar: Path, extra: str = "") -> Path:
    return write_manifest(path, [manifest["cnn"], manifest["mlp"]], f"""
[[run]]
command = "naive-vs-default"
[[build]]
name = "bundled"
[[build]]
name = "board-build"
path = "{device_lar}"
devices = ["board"]
[[device]]
name = "local"
[[device]]
name = "board"
remote = "{sshd['target']}"
remote_dir = "{path.parent / 'device'}"
{extra}""")


def test_a_device_no_worker_owns_is_refused_before_anything_runs(cluster, manifest, sshd, tmp_path):
    m = _manifest(tmp_path / "zoo.toml", manifest, sshd, tmp_path / "lar", extra='[[device]]\nname = "phone"\n'
                  'remote = "adb:SER9"\n[[build]]\nname = "phone-build"\npath = "/data/local/tmp/load_and_run"\n'
                  'devices = ["phone"]\n')
    proc = zoo_cli([m, "--store", tmp_path / "r.db", "--out", tmp_path / "out", "--scheduler", cluster["address"]])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"Error: device 'phone' (adb:SER9): no worker of {cluster['address']} owns it; start the worker that reaches "
        "it with --resources \"dev-adb-SER9=1\" (docs/zoo.md)"]
    assert not (tmp_path / "out").exists() and rows_by_task(tmp_path / "r.db") == {}


def test_a_worker_killed_mid_task_loses_nothing_and_writes_nothing_twice(cluster, manifest, sshd, tmp_path):
    m = _manifest(tmp_path / "zoo.toml", manifest, sshd, lar_wrapper(tmp_path / "device-bin" / "load_and_run"))
    out, db = tmp_path / "out", tmp_path / "r.db"
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec", "zoo", str(m), "--store", str(db), "--out", str(out),
                             "--scheduler", cluster["address"], "--json", str(tmp_path / "zoo.json"),
                             "--speed-runs", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker = _worker_process(cluster["nanny"])
        deadline = time.monotonic() + 120
        while not _busy(worker, (str(out), str(tmp_path / "device"))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _busy(worker, (str(out), str(tmp_path / "device"))), "the device's worker never ran anything"
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    z = json.loads((tmp_path / "zoo.json").read_text())
    assert z["counts"]["tasks"] == 4 and z["counts"]["failed"] == 0
    rows = rows_by_task(db)
    assert sorted(rows) == sorted(e["id"] for e in z["tasks"])
    assert all(len(r) == 1 and r[0]["exit_code"] == 0 for r in rows.values()), "0 lost, 0 duplicated"
    board = [e for e in z["tasks"] if e["device"] == "board"]
    assert len(board) == 2 and all(e["build"] == "board-build" for e in board)
    # the task that was running when its worker died (a device task, or a local one: that worker
    # takes those too) was tried again in a new analysis folder
    tries = [len([p for p in Path(e["analysis_dir"]).parent.iterdir() if p.is_dir()]) for e in z["tasks"]]
    assert sorted(tries) == [1, 1, 1, 2], tries
    for e in board:
        run = json.loads((Path(e["analysis_dir"]) / "default" / "run.json").read_text())
        assert run["remote"]["target"] == sshd["target"]
    time.sleep(1.0)  # the killed worker's runs were ended when the nanny started it again
    assert processes_running(str(out / "tasks")) == []
