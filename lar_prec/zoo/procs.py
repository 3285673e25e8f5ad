"""Processes a zoo leaves behind, found and ended: every child of a worker carries a tag in its
environment (children inherit it, and load_and_run runs in sessions of their own, out of reach
of their parent's process group), so what a dead worker left running (``kill -9``, Ctrl-C of an
embedded cluster) is found by its tag in ``/proc`` and killed with its process group.
Linux only (elsewhere nothing is found)."""
from __future__ import annotations

import os
import signal
import time
from typing import List, Sequence

#: set by the client for an embedded cluster (its workers and their children inherit it)
ZOO_TAG = "LAR_PREC_ZOO_RUN"
#: set in each worker by the zoo's worker plugin: the worker's nanny, stable across restarts
WORKER_TAG = "LAR_PREC_ZOO_WORKER"


def tagged(name: str, value: str, exclude: Sequence[int] = ()) -> List[int]:
    """Pids of this user's processes whose environment has ``name=value``."""
    needle = f"{name}={value}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if not e.isdigit() or int(e) in exclude:
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone meanwhile, or not ours
            continue
        if needle in env.split(b"\0"):
            found.append(int(e))
    return found


def kill_tagged(name: str, value: str, exclude: Sequence[int] = (), rounds: int = 20) -> int:
    """SIGKILL every process tagged ``name=value`` (not ``exclude``) with its process group when
    it leads one (a run and what it started); how many were found.

    One pass is not enough: a worker forking a run after the pass read ``/proc`` and before the
    worker itself was killed leaves that run behind (it is in a session of its own). So passes
    repeat until one finds nothing, at most ``rounds`` of them."""
    found: set = set()
    for i in range(max(1, rounds)):
        pids = tagged(name, value, exclude)
        if not pids:
            break
        found.update(pids)
        for pid in pids:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        time.sleep(0.02 * (i + 1))  # a killed process keeps its environ until it is a zombie
    return len(found)
