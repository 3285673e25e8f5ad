"""Child processes of the runner: their environment, process groups, Ctrl-C, stderr reading.

Every child (a run, the ``--version`` check, the model-description helper) starts in its own
session, so a terminal's SIGINT reaches only lar-prec; lar-prec then kills the child's whole
process group. Children under way are registered here, so a Ctrl-C in the main thread can stop
those started by worker threads (:func:`interrupt_active_runs`).
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.errors import UsageError
from lar_prec.stall import NOT_AN_ERROR, IdleClock, fatal_line, looks_dead

#: lines of stderr kept in run.json and in RunError
STDERR_TAIL_LINES = 20
#: seconds a timed-out process group gets between SIGTERM and SIGKILL
KILL_GRACE_SECONDS = 2.0
#: seconds a child's process group may use no CPU at all, while alive, before the watch looks
#: whether it is dead or waiting (:mod:`lar_prec.stall`)
STALL_AFTER_DEFAULT = 5.0
#: the environment variable that changes it (seconds; 0 turns the watch off)
STALL_ENV = "LAR_PREC_STALL_AFTER"
#: seconds between two looks at a watched child
WATCH_POLL_SECONDS = 0.25


def child_env(changes: Mapping[str, Optional[str]], *, bundled: bool) -> Dict[str, str]:
    """This process's environment with ``changes`` (None removes a variable); for the bundled
    runner, a PYTHONPATH that finds this very lar_prec."""
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if bundled:
        # the child must import this very lar_prec, even when it is not installed
        root = str(Path(__file__).resolve().parent.parent)
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


def stall_after() -> float:
    """The grace period of the CPU watch: ``LAR_PREC_STALL_AFTER`` (seconds, 0 = off), else
    :data:`STALL_AFTER_DEFAULT`.

    Raises:
        UsageError: the variable is not a number >= 0.
    """
    raw = os.environ.get(STALL_ENV, "").strip()
    if not raw:
        return STALL_AFTER_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{STALL_ENV} must be a number of seconds >= 0 (0 turns the watch off), got {raw!r}")
    return value


def _stat(path: str) -> Optional[List[bytes]]:
    """The fields of a ``/proc`` stat file after the command name (0 = state, 2 = process group,
    11..14 = CPU times); None when it cannot be read (gone meanwhile, or not ours)."""
    try:
        with open(path, "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return stat[stat.rfind(b")") + 2:].split()


def _group_members(pgid: int) -> Optional[List[Tuple[str, List[bytes]]]]:
    """(pid, stat fields) of every process in the process group ``pgid``; None without ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for name in entries:
        fields = _stat(f"/proc/{name}/stat") if name.isdigit() else None
        if fields is not None and len(fields) > 14 and int(fields[2]) == pgid:
            members.append((name, fields))
    return members


def group_cpu_ticks(pgid: int) -> Optional[int]:
    """CPU time (clock ticks, user + system, with reaped children) of every process in the
    process group ``pgid``, from ``/proc``; None where there is no ``/proc``."""
    members = _group_members(pgid)
    if not members:
        return None
    return sum(int(f[11]) + int(f[12]) + int(f[13]) + int(f[14]) for _, f in members)


def group_threads(pgid: int) -> List[Tuple[str, str]]:
    """(state, wait channel) of every thread of every process in the process group ``pgid``,
    from ``/proc`` (a wait channel the kernel hides reads ``0``)."""
    out: List[Tuple[str, str]] = []
    for pid, _ in _group_members(pgid) or ():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            fields = _stat(f"/proc/{pid}/task/{tid}/stat")
            if not fields:
                continue
            try:
                with open(f"/proc/{pid}/task/{tid}/wchan", "rb") as fh:
                    wchan = fh.read(256).decode("ascii", "replace")
            except OSError:
                wchan = "0"
            out.append((fields[0].decode("ascii", "replace"), wchan))
    return out


def wait_watched(proc: "subprocess.Popen", timeout: Optional[float], stall: Optional[float] = None, *,
                 stderr_path: Optional[Path] = None) -> str:
    """Wait for ``proc`` (the leader of its own process group): ``"exited"``, ``"timeout"``
    after ``timeout`` seconds, or ``"stalled"`` when the whole group has used no CPU for
    ``stall`` seconds (default :func:`stall_after`; 0 = never) while alive and looks dead
    by :mod:`lar_prec.stall`'s rule (its threads and ``stderr_path``, the run's stderr): a
    run that waits for something outside it, or is busy but slow, is never ended before its
    timeout. The caller kills the group."""
    stall = stall_after() if stall is None else stall
    start = time.monotonic()
    deadline = start + timeout if timeout is not None else None
    clock = IdleClock(start)
    exits = _exit_fd(proc.pid)
    try:
        while True:
            now = time.monotonic()
            wait = WATCH_POLL_SECONDS if deadline is None else max(0.0, min(WATCH_POLL_SECONDS, deadline - now))
            if _waited(proc, exits, wait):
                return "exited"
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "timeout"
            if not stall:
                continue
            ticks = group_cpu_ticks(proc.pid)
            if ticks is None:
                continue  # no /proc: only the timeout applies
            if clock.idle_for(ticks, now) >= stall and looks_dead(
                    group_threads(proc.pid), read_end(stderr_path, 64 * 1024) if stderr_path else "",
                    ran=clock.ran, timed=timeout is not None):
                return "stalled"
    finally:
        if exits is not None:
            os.close(exits)


def _exit_fd(pid: int) -> Optional[int]:
    """A pidfd of ``pid`` (readable once it has exited), or None where there is none (not
    Linux >= 5.3, Python < 3.9)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


def _waited(proc: "subprocess.Popen", exits: Optional[int], seconds: float) -> bool:
    """True when ``proc`` has exited (and is reaped) within ``seconds``. With a pidfd the wait
    ends at the exit; Popen.wait's own timed wait polls and ends up to 50 ms after it (a
    twentieth of a small model's run, three runs per analysis)."""
    if exits is not None:
        poller = select.poll()  # not select.select: a descriptor past 1023 is fine
        poller.register(exits, select.POLLIN)
        poller.poll(int(seconds * 1000) + 1)
        seconds = 0.0
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def kill_group(proc: "subprocess.Popen") -> None:
    """SIGTERM the process group of ``proc``, SIGKILL what is left after a grace period, reap.

    The leader is reaped only after the group is killed: until then its pid (the group id)
    cannot be reused, so the signals never reach an unrelated process.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
        except ChildProcessError:
            break
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def signal_name(returncode: Optional[int]) -> Optional[str]:
    """``SIGSEGV`` for a return code of -11; None for a normal exit."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


# Children under way in any thread. Ctrl-C reaches only the main thread, and children live in
# their own sessions (so a terminal's SIGINT misses them): workflows that run several at
# once call interrupt_active_runs() to kill them all and have their run.json say so.
_ACTIVE: "set[subprocess.Popen]" = set()
_ACTIVE_LOCK = threading.Lock()
_INTERRUPTED = threading.Event()


def interrupted() -> bool:
    """True after :func:`interrupt_active_runs` until :func:`reset_interrupt`."""
    return _INTERRUPTED.is_set()


def interrupt_active_runs() -> int:
    """Kill the process group of every child under way; returns how many there were."""
    _INTERRUPTED.set()
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        kill_group(proc)
    return len(procs)


def reset_interrupt() -> None:
    """Allow runs again after :func:`interrupt_active_runs` (for library users and tests)."""
    _INTERRUPTED.clear()


def register(proc: "subprocess.Popen") -> None:
    """Track ``proc`` so an interrupt can kill it; when the interrupt came first (between the
    caller's check and the start), kill it now and raise KeyboardInterrupt."""
    with _ACTIVE_LOCK:
        late = _INTERRUPTED.is_set()
        if not late:
            _ACTIVE.add(proc)
    if late:
        kill_group(proc)
        raise KeyboardInterrupt


def unregister(proc: "subprocess.Popen") -> None:
    """Stop tracking ``proc``."""
    with _ACTIVE_LOCK:
        _ACTIVE.discard(proc)


def run_bounded(argv: Sequence[str], *, timeout: float, env: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Run a short helper command (e.g. ``load_and_run --version``) in its own process group.

    Returns its stdout (stderr when stdout is empty), or None when it did not end within
    ``timeout`` seconds (its group is then killed). Ctrl-C, or an interrupt from another
    thread, kills the group and raises KeyboardInterrupt. OSError when it cannot start.
    """
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True, text=True, errors="replace")
    try:
        register(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            try:  # a child that left the group may still hold the pipes: do not wait for it
                proc.communicate(timeout=KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            return None
        except BaseException:  # Ctrl-C: never leave the helper running
            kill_group(proc)
            raise
        finally:
            unregister(proc)
    finally:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    if _INTERRUPTED.is_set():  # another thread's Ctrl-C killed it
        raise KeyboardInterrupt
    return out.strip() or err.strip()


def run_logged(argv: Sequence[str], *, env: Optional[Dict[str, str]], timeout: Optional[float],
               stdout_path: Path, stderr_path: Path, stdin: Optional[int] = None) -> Tuple[str, Optional[int]]:
    """Run a helper child (the layerwise build, a model rewrite, a repro run) in its own
    process group, its output into two files, like a run but without a run folder.

    Returns how it ended (``"exited"``, ``"timeout"`` or ``"stalled"``, as :func:`wait_watched`
    says; the group is killed when it did not exit) and its exit status (negative: a signal;
    None when it was killed). Ctrl-C, or an interrupt from another thread, kills the group
    and raises KeyboardInterrupt. OSError when it cannot start. ``stdin``: a file descriptor the
    child reads (default none).
    """
    with open(stdout_path, "wb") as out_fh, open(stderr_path, "wb") as err_fh:
        proc = subprocess.Popen(list(argv), stdout=out_fh, stderr=err_fh, env=env,
                                stdin=subprocess.DEVNULL if stdin is None else stdin,
                                start_new_session=True)
        try:
            register(proc)
            try:
                ended = wait_watched(proc, timeout, stderr_path=stderr_path)
            except BaseException:  # Ctrl-C: never leave the helper (or its children) running
                kill_group(proc)
                raise
            if ended != "exited":
                kill_group(proc)
                return ended, None
        finally:
            unregister(proc)
    if _INTERRUPTED.is_set() and proc.returncode != 0:  # another thread's Ctrl-C killed it
        raise KeyboardInterrupt
    return ended, proc.returncode


def tail(path: Path, lines: int = STDERR_TAIL_LINES, max_chars: int = 4000) -> str:
    """The last ``lines`` lines of a file (at most ``max_chars`` characters), "" when unreadable."""
    text = read_end(path, 64 * 1024)
    return "\n".join(text.splitlines()[-lines:])[-max_chars:]


def read_end(path: Path, limit: int = 256 * 1024) -> str:
    """The last ``limit`` bytes of a file as text, "" when unreadable."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_meaningful_line(stderr: str) -> str:
    """The line of stderr that best says why a run failed (MegEngine's error, not a backtrace)."""
    found = fatal_line(stderr)
    if found is not None:
        return found
    for ln in reversed(stderr.splitlines()):
        if not NOT_AN_ERROR.match(ln.strip()):
            return ln.strip()
    return ""


def failure_hint(stderr: str) -> Optional[str]:
    """A fix for failures whose cause lar-prec recognises in load_and_run's stderr."""
    if "is_contiguous" in stderr or re.search(r"dtype Byte", stderr):
        return ("the model has a zero-size or Byte variable that load_and_run cannot dump "
                "(an unfused BatchNorm): dump the model with optimize_for_inference=True")
    if "dtype mismatch" in stderr or "attempt to access dtype" in stderr:
        return "the input file's dtype must equal the model input's dtype"
    return None
