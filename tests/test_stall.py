"""Dead or waiting (issue 41 #1, #6): the stall rule of ``lar_prec.stall`` on real processes.

Each process here starts in its own session (a process group, as a run's), waits in a real
way (a file lock held by this test, a futex, a sleep), and is read from ``/proc`` by the
runner's reader and by the device's shell script (run here by ``sh``, as on a board).
"""
from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from lar_prec.errors import RunError
from lar_prec.remote.scripts import cpu_script, parse_cpu
from lar_prec.run import proc as runproc
from lar_prec.stall import fatal_line, looks_dead

PARKED = "import threading; threading.Event().wait()"  # every thread in a futex wait
FATAL = "bad err=45 in Xbyak::Error\n"


@contextlib.contextmanager
def group(argv: List[str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    """``argv`` leading its own process group, pid in ``tmp_path/.pid`` (as a device run's), killed after."""
    proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)
    (tmp_path / ".pid").write_text(f"{proc.pid}\n")
    try:
        yield proc
    finally:
        runproc.kill_group(proc)


def settled(proc: subprocess.Popen) -> List[Tuple[str, str]]:
    """The group's threads once every one of them is asleep (its start-up done)."""
    deadline = time.monotonic() + 20
    while True:
        threads = runproc.group_threads(proc.pid)
        if threads and all(state == "S" and wchan.strip() not in ("", "0") for state, wchan in threads):
            return threads
        if time.monotonic() > deadline:
            pytest.skip(f"threads not asleep, or this kernel hides wait channels: {threads}")
        time.sleep(0.1)


def test_a_process_waiting_on_a_lock_or_a_timer_is_waiting_even_after_a_fatal_line(tmp_path):
    """`flock gpu.lock load_and_run ...` while another job holds the lock, and a wrapper's
    `sleep`: never dead, whatever stderr says (only --timeout ends them)."""
    lock = tmp_path / "gpu.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with group(["flock", str(lock), "true"], tmp_path) as proc:
            threads = settled(proc)
            assert not looks_dead(threads, FATAL, ran=True, timed=False), threads
    with group(["sleep", "30"], tmp_path) as proc:
        assert not looks_dead(settled(proc), FATAL, ran=True, timed=False)


def test_a_parked_process_is_dead_after_a_fatal_line_and_by_the_timeout_otherwise(tmp_path):
    with group([sys.executable, "-c", PARKED], tmp_path) as proc:
        threads = settled(proc)
        assert all("futex" in wchan for _, wchan in threads), threads
        assert looks_dead(threads, "load model: 1.000ms\n" + FATAL, ran=True, timed=True)
        # no word on stderr: an explicit --timeout decides; without one, it is dead once it ran
        assert not looks_dead(threads, "load model: 1.000ms\n", ran=True, timed=True)
        assert looks_dead(threads, "load model: 1.000ms\n", ran=True, timed=False)
        assert not looks_dead(threads, "", ran=False, timed=False)  # it never ran: waiting to start


def test_the_devices_script_reads_the_same_threads(tmp_path):
    """cpu_script, run by sh as on a board, sees the group's threads as the runner does."""
    lock = tmp_path / "gpu.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with group(["flock", str(lock), "true"], tmp_path) as proc:
            local = settled(proc)
            out = subprocess.run(["sh", "-c", cpu_script(str(tmp_path))], capture_output=True, text=True,
                                 timeout=30).stdout
    ticks, threads = parse_cpu(out)
    assert ticks is not None and sorted(threads) == sorted(local), (out, local)
    assert parse_cpu("none\n") == (None, [])


def test_fatal_lines_are_errors_not_logs_nor_backtraces():
    assert fatal_line("load model: 1.000ms\n" + FATAL + "backtrace:\n/usr/lib/libmegengine.so(+0x1)\n") == FATAL.strip()
    assert fatal_line("[12 10:00:01 x.cpp:1][INFO] no error here\nload model: 1.000ms\n") is None


def test_a_stalled_helper_child_is_said_stalled_not_past_its_timeout(tmp_path, monkeypatch):
    """Issue 41 #6: a build or rewrite step that prints a fatal line and parks was reported as
    "ran past its timeout of 600 s" after seconds."""
    from lar_prec.diagnosis.local import run_child

    monkeypatch.setenv("LAR_PREC_STALL_AFTER", "1")
    code = f"import sys; sys.stderr.write({FATAL!r}); sys.stderr.flush(); {PARKED}"
    with pytest.raises(RunError) as exc:
        run_child([sys.executable, "-c", code], runproc.child_env({}, bundled=False), 600, "layerwise build",
                  tmp_path / "log")
    assert str(exc.value).startswith("layerwise build stalled: alive but using no CPU for 1 s"), exc.value
    assert "stalled after: bad err=45 in Xbyak::Error" in str(exc.value)
    assert "timeout" not in str(exc.value)
