"""Process helpers shared by the tests that kill, interrupt or time out real processes."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence, Tuple

from conftest import ROOT


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 10) -> bool:
    """True when ``pid`` ends within ``seconds``; otherwise it is killed here (no test leaves
    a stray process behind) and the answer is False."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    return False


def wait_for(path: Path, seconds: float = 60) -> None:
    """Wait until ``path`` exists; fail the test when it never appears."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"{path} never appeared"


def ctrl_c(argv: Sequence[str], env: Mapping[str, str], ready: Path) -> Tuple[int, str, float]:
    """Start ``argv`` in its own process group (as a terminal's foreground job), wait until
    it writes ``ready``, send SIGINT to the group as Ctrl-C does. Returns the exit code, the
    stderr and the seconds from SIGINT to exit; the group is killed if it outlives the test."""
    proc = subprocess.Popen(list(argv), cwd=ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_for(ready)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def user_lar(path: Path, **env: str) -> Path:
    """A user's load_and_run: tests/wrapped_lar.py (the bundled one, really run) with its
    ``WRAPPED_LAR_*`` settings baked in, as a board's binary has its bugs built in."""
    sets = " ".join(f"{k}={v}" for k, v in env.items())
    path.write_text(f"#!/bin/sh\n{sets} PYTHONPATH={ROOT} exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
    path.chmod(0o755)
    return path
