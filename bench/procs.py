"""Child processes of the main benchmark, measured more closely than ``harness.timed`` does: wall
time, peak RSS from the OS (GNU time or a small launcher), the memory of the whole process tree
sampled from /proc, runs on a pseudo-terminal; and one watched load_and_run run with a dump."""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from harness import PY, ROOT, env_with

_LAR_SCRIPT = Path(PY).parent / "lar-prec"
LAR: List[str] = [str(_LAR_SCRIPT)] if _LAR_SCRIPT.exists() else [PY, "-m", "lar_prec"]
MGE_COMPARE: List[str] = [PY, "-m", "megengine.tools.compare_binary_iodump"]


@dataclass
class Proc:
    """One finished child process."""

    argv: List[str]
    returncode: int
    seconds: float
    maxrss_mb: float                      # peak RSS of the command's process from the OS (GNU time %M)
    tree_peak_mb: Optional[float] = None  # sampled sum of PSS (else RSS) over the process tree
    tree_peak_anon_mb: Optional[float] = None  # same, anonymous memory only (no file pages)
    stderr_tail: str = ""


def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, i = [root], 0
    while i < len(out):
        out.extend(children.get(out[i], ()))
        i += 1
    return out


_HAVE_PSS = os.path.exists("/proc/self/smaps_rollup")


def _mem_kb(pid: int) -> Tuple[int, int]:
    """(total, anonymous) memory of one process in kB: proportional set size when the kernel
    has smaps_rollup (pages shared between the command and its forked workers counted once),
    else VmRSS/RssAnon (shared pages counted in every process)."""
    name, total_key, anon_key = ("smaps_rollup", "Pss:", "Pss_Anon:") if _HAVE_PSS else ("status", "VmRSS:", "RssAnon:")
    total = anon = 0
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(total_key):
                    total = int(line.split()[1])
                elif line.startswith(anon_key):
                    anon = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return total, anon


TREE_METRIC = "PSS" if _HAVE_PSS else "RSS"


class _Sampler(threading.Thread):
    """Polls the memory of a process and all its descendants (worker processes count too)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_kb = self.peak_anon_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            tot = anon = 0
            for p in _descendants(self.pid)[1:]:  # [0] is the GNU time / launcher wrapper
                t, a = _mem_kb(p)
                tot += t
                anon += a
            self.peak_kb = max(self.peak_kb, tot)
            self.peak_anon_kb = max(self.peak_anon_kb, anon)
            self.stop.wait(self.interval)


_TIME = "/usr/bin/time"
# Fallback when GNU time is missing: a small launcher that forks, execs and reports
# ru_maxrss of that child only. (wait4 on a child of this process would not do: Linux keeps
# the pre-exec high-water mark, i.e. the RSS of this benchmark process, in ru_maxrss.)
_LAUNCHER = (
    "import os,sys\n"
    "out=sys.argv[1]; argv=sys.argv[2:]\n"
    "pid=os.fork()\n"
    "if pid==0:\n"
    "    try: os.execvp(argv[0], argv)\n"
    "    finally: os._exit(127)\n"
    "_,st,ru=os.wait4(pid,0)\n"
    "open(out,'w').write(str(ru.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(st) & 255)\n"
)


def rss_method() -> str:
    """How peak RSS is measured on this machine (for the report)."""
    if os.access(_TIME, os.X_OK):
        return "GNU time `%M` (/usr/bin/time -f %M)"
    return "ru_maxrss from a fork+exec launcher (its own ~10 MB pre-exec RSS may be included)"


class _Pty:
    """A pseudo-terminal whose output a thread drains (keeping the tail): the command sees a
    terminal on stdout and stderr, as a user's shell gives it (progress bars on)."""

    def __init__(self) -> None:
        import pty

        self.master, self.slave = pty.openpty()
        self.tail = b""
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO once the last writer closed
                break
            if not data:
                break
            self.tail = (self.tail + data)[-3000:]

    def close(self) -> str:
        """Wait for the output to end (the command exited); its tail as text."""
        os.close(self.slave)
        self.thread.join(timeout=10)
        os.close(self.master)
        return self.tail.decode("utf-8", "replace")


def _wrapped(argv: Sequence[str], rss_file: Path) -> List[str]:
    """``argv`` under GNU time (or the launcher), which writes its peak RSS in kB to ``rss_file``."""
    if os.access(_TIME, os.X_OK):
        return [_TIME, "-f", "%M", "-o", str(rss_file), *argv]
    return [PY, "-I", "-S", "-c", _LAUNCHER, str(rss_file), *argv]


def _wait(p: "subprocess.Popen[bytes]", timeout: float) -> None:
    """Wait for ``p``; its whole process group is killed once ``timeout`` seconds have passed."""
    timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
    timer.start()
    try:
        p.wait()
    finally:
        timer.cancel()


def _maxrss_mb(rss_file: Path) -> float:
    try:
        return float(rss_file.read_text().split()[-1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return float("nan")


def run_proc(argv: Sequence[str], *, stdout: Optional[Path] = None, sample: bool = False,
             timeout: float = 3600.0, env: Optional[Dict[str, str]] = None, tty: bool = False) -> Proc:
    """Run ``argv`` to the end; wall time, peak RSS from the OS, optional tree sampling.

    stdout goes to ``stdout`` (a file) or /dev/null: MegEngine's script prints a page per
    divergent var and a terminal would slow it down; stderr is kept for error messages.
    With ``tty`` both go to a pseudo-terminal instead: what a user at a terminal runs.
    """
    if tty:
        return _run_tty(argv, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "maxrss"
        with open(Path(tmp) / "stderr", "w+b") as err, (open(stdout, "wb") if stdout else open(os.devnull, "wb")) as out:
            t0 = time.perf_counter()
            p = subprocess.Popen(_wrapped(argv, rss_file), stdout=out, stderr=err, cwd=ROOT, env=env,
                                 start_new_session=True)
            sampler = _Sampler(p.pid) if sample else None
            if sampler:
                sampler.start()
            _wait(p, timeout)
            seconds = time.perf_counter() - t0
            if sampler:
                sampler.stop.set()
                sampler.join()
            err.seek(0)
            tail = err.read()[-3000:].decode("utf-8", "replace")
        maxrss_mb = _maxrss_mb(rss_file)
    return Proc(list(argv), p.returncode, seconds, maxrss_mb,
                sampler.peak_kb / 1024.0 if sampler else None,
                sampler.peak_anon_kb / 1024.0 if sampler else None, tail)


def _run_tty(argv: Sequence[str], *, timeout: float, env: Optional[Dict[str, str]]) -> Proc:
    """:func:`run_proc` with stdout and stderr on a pseudo-terminal."""
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "maxrss"
        term = _Pty()
        env = {**(env if env is not None else os.environ), "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        t0 = time.perf_counter()
        p = subprocess.Popen(_wrapped(argv, rss_file), stdin=subprocess.DEVNULL, stdout=term.slave,
                             stderr=term.slave, cwd=ROOT, env=env, start_new_session=True)
        _wait(p, timeout)
        seconds = time.perf_counter() - t0
        tail = term.close()
        maxrss_mb = _maxrss_mb(rss_file)
    return Proc(list(argv), p.returncode, seconds, maxrss_mb, None, None, tail)


def _ok(argv: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(argv), cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _median(xs: Sequence[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


class RunFailed(Exception):
    """A bundled load_and_run run that failed, stalled or timed out (the message says which)."""


def dump_run(model: Path, inputs: Sequence[str], dump: Path, cfg, cwd: Path, *, timeout: float = 600,
             program: Sequence[str] = ()) -> Path:
    """One bundled load_and_run run of ``model`` under ``cfg`` (a RunConfig) with a binary dump
    into ``dump`` (a fresh process; its stderr beside the dump). Watched as lar-prec watches its
    runs: some options stall on some CPUs (no CPU, forever), which ends it in seconds.

    ``program``: another load_and_run command (the stand-in ``tests/wrapped_lar.py``), its
    ``WRAPPED_LAR_*`` settings in ``cfg.env`` or this process's environment.

    Raises:
        RunFailed: it exited non-zero, stalled or timed out.
    """
    from lar_prec.run.proc import kill_group, stall_after, wait_watched

    dump.mkdir(parents=True, exist_ok=True)
    env = env_with(dict(cfg.env))
    argv = [*(program or (PY, "-m", "lar_prec.lar")), str(model), "--input", ";".join(inputs), "--iter", "1",
            "--warmup-iter", "0", "--bin-io-dump", str(dump), *cfg.flags]
    log = dump.parent / f"{dump.name}.stderr.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        how = wait_watched(proc, timeout)
        if how != "exited":
            kill_group(proc)
            raise RunFailed(f"{how} (no CPU for {stall_after():g} s)" if how == "stalled" else how)
    if proc.returncode:
        lines = log.read_text(errors="replace").strip().splitlines()
        raise RunFailed(f"exit {proc.returncode}: {lines[-1] if lines else ''}")
    return dump
