"""Ctrl-C at any moment of a real ``lar-prec zoo`` (an embedded cluster, one shake of cnn): before
the cluster, while its workers start, just after, and to the whole process group as a terminal
sends it. Each time: exit 130, the last line ``Error: interrupted ...``, no traceback of
lar-prec's own process, and no process of the zoo left running. (test_zoo.py interrupts one
while its runs are under way.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from zoo_helpers import descendants, processes_running, write_manifest


def _alive(pids):
    out = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(p)
        except OSError:
            continue
    return out


# (moment, seconds after it, to the whole group): "start" is the command's start (the store, the
# manifest, Dask's imports), "workers" the first process below it (the cluster starting)
MOMENTS = [("start", 1.0, False), ("workers", 0.0, False), ("workers", 3.0, False), ("workers", 1.0, True)]


@pytest.mark.parametrize("moment,after,group", MOMENTS, ids=[f"{m}+{a}s{'-group' if g else ''}" for m, a, g in MOMENTS])
def test_ctrl_c_at_any_moment_is_130_and_leaves_no_process(manifest, tmp_path, moment, after, group):
    m = write_manifest(tmp_path / "zoo.toml", [manifest["cnn"]], '[[run]]\ncommand = "shake"\nrepeat = 8\n')  # a task still running 3 s after the workers start
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "lar_prec", "zoo", str(m), "--store", str(tmp_path / "r.db"),
                             "--out", str(out), "--workers", "2"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = set()
    try:
        deadline = time.monotonic() + 120
        while moment == "workers" and not descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        until = time.monotonic() + after
        while time.monotonic() < until:
            seen.update(descendants(proc.pid))
            time.sleep(0.05)
        seen.update(descendants(proc.pid))
        if group:  # a terminal's Ctrl-C: the zoo and every process of its group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("Error: interrupted"), err
    if not group:  # (a group's Ctrl-C also reaches worker processes that were importing: their tracebacks)
        assert "Traceback" not in err and "Exception ignored" not in err, err
    time.sleep(0.5)
    assert _alive(seen) == [] and processes_running(str(tmp_path)) == []
