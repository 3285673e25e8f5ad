"""Each zoo task's speed: after its analysis, the plain default run and the task's options timed
``--speed-runs`` rounds with :func:`lar_prec.workflows.sweep.speed.measure_speed` (fresh
processes without any dump, interleaved), in a ``speed`` folder of the task, on the worker's
own machine (a task on a device is not timed).

What is timed per task: the model with the task's configuration flags (the plain default run)
and each option of the task: naive-vs-default's and shake's option, mixed's option, a sweep's
options that loaded (as ``sweep --speed-runs`` times them); quant: its int8 model's default run.

Timed runs never run beside other work of a zoo on the same machine: a **host lock**, two files
in the machine's temporary folder (``flock``, so it is per machine and freed when a process
dies). Every task holds it shared while its analysis runs; timing holds it exclusive, so it
waits until no task of any zoo on this machine runs, and new tasks wait until it is done (the
gate file: a waiting timer is not starved by tasks that keep starting). Processes outside the
zoo are not covered. A wait ends on the zoo's Ctrl-C (:func:`stop_waiting`).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from lar_prec.errors import AnalysisInterrupted, LarPrecError
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.run.dirs import finish_analysis_dir, new_run_dir
from lar_prec.run.settings import Settings
from lar_prec.store.summary import Summary, speed_rows
from lar_prec.workflows.common.analysis import prepare
from lar_prec.workflows.sweep.options import OPTIONS
from lar_prec.workflows.sweep.speed import measure_speed
from lar_prec.zoo.tasks import Task

#: the lock's files, in the machine's temporary folder (one machine, one lock)
LOCK_NAME = "lar-prec-zoo-timing.lock"
GATE_NAME = "lar-prec-zoo-timing.gate"
#: seconds between two tries of a lock another task holds
POLL = 0.05

_stops = 0
_stops_lock = threading.Lock()


def stop_waiting() -> None:
    """End every wait for the host lock under way in this process (the zoo's Ctrl-C)."""
    global _stops
    with _stops_lock:
        _stops += 1


def _open(path: Path) -> int:
    flags = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, os.O_RDWR | flags, 0o666)
    except PermissionError:  # another user's lock file: flock needs no write permission
        return os.open(path, os.O_RDONLY | flags)


class HostLock:
    """The machine's timing lock (see the module docstring)."""

    def __init__(self, folder: Optional[str] = None) -> None:
        base = Path(folder or tempfile.gettempdir())
        self.lock, self.gate = base / LOCK_NAME, base / GATE_NAME

    @staticmethod
    def _take(fd: int, how: int, started: int) -> None:
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if _stops != started:
                raise AnalysisInterrupted("interrupted while waiting for this machine's timing lock")
            time.sleep(POLL)

    @contextlib.contextmanager
    def held(self, exclusive: bool) -> Iterator[float]:
        """Hold the lock (shared: a task's analysis; exclusive: timed runs); yields the seconds waited."""
        started, t0 = _stops, time.monotonic()
        gate, lock = _open(self.gate), _open(self.lock)
        try:
            self._take(gate, fcntl.LOCK_EX, started)
            try:
                self._take(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, started)
            finally:
                if not exclusive:  # a timer keeps the gate: tasks that start meanwhile wait for it
                    fcntl.flock(gate, fcntl.LOCK_UN)
            yield time.monotonic() - t0
        finally:
            os.close(lock)  # closing frees the locks
            os.close(gate)


def _loaded(result: Any) -> List[Tuple[str, Tuple[str, ...]]]:
    """The options a sweep ran (it loaded them: ``runs``, or record mode, which loads and does not dump)."""
    return [(o.option, tuple(o.flags)) for o in result.result.options
            if o.status == "runs" or (o.status == "skipped" and o.run_dir)]


def timed_options(task: Task, result: Any) -> List[Tuple[str, Tuple[str, ...]]]:
    """What is timed beside the plain default run (module docstring)."""
    if task.command == "sweep":
        return _loaded(result)
    if task.command == "mixed":
        name = task.param("option", "ioc16")
        return [(name, OPTIONS[name].flags)] if name in OPTIONS else []
    if task.command == "quant":
        return []
    return [(o, OPTIONS[o].flags) for o in task.options]


def time_task(task: Task, parent: Path, result: Any, rounds: int, lock: Optional[HostLock] = None) -> Dict[str, Any]:
    """Time a finished task (module docstring): ``speed`` as a sweep report has it (``rounds``,
    ``threads``, ``device``, ``default``, ``off`` when not timed) with ``options`` by name,
    ``dir`` and ``waited_seconds``; also written as ``speed.json`` in its folder. A timing that
    cannot be made says why in ``off`` (the task's verdict stands); Ctrl-C raises AnalysisInterrupted."""
    if rounds == 0:
        return {"off": "--speed-runs 0: not timed", "rounds": 0}
    if task.remote is not None:
        return {"off": "not timed: the runs are on a device (timed runs are made on the worker's machine only)",
                "rounds": rounds}
    options = timed_options(task, result)
    settings = Settings(model=task.model_path, inputs=list(task.inputs), out=new_run_dir(parent, "speed"),
                        lar=task.lar or "bundled", timeout=task.timeout, seed=task.seed, extra_flags=task.flags,
                        html=False)
    try:
        prep = prepare(settings, "speed")
        with (lock or HostLock()).held(exclusive=True) as waited:
            sp = measure_speed(prep.model, prep.inputs, prep.dir, prep.lar, task.timeout, task.flags, options, rounds,
                               mode=prep.mode)
    except KeyboardInterrupt:
        raise AnalysisInterrupted("interrupted in the timed runs", analysis_dir=settings.out) from None
    except AnalysisInterrupted:
        raise
    except (LarPrecError, OSError) as exc:
        return {"off": f"not timed: {' '.join(str(exc).split())}", "rounds": rounds, "dir": str(settings.out)}
    data = {**speed_json(sp), "dir": str(prep.dir), "waited_seconds": round(waited, 3)}
    atomic_write_text(prep.dir / "speed.json", json_text(data), what="zoo timing")
    finish_analysis_dir(prep.dir)
    return data


def speed_json(sp: Any) -> Dict[str, Any]:
    """A :class:`~lar_prec.workflows.sweep.speed.SweepSpeed` as a sweep report's ``speed``, with
    ``default`` and ``options`` (name -> its times): what :func:`speed_rows` stores."""
    return {**sp.to_json(), "default": None if sp.default is None else sp.default.to_json(),
            "options": {n: o.to_json() for n, o in sp.options}}


def with_speed(summary: Summary, speed: Dict[str, Any]) -> Summary:
    """The task's summary with its speed rows (the store keeps them beside its operators)."""
    rows = speed_rows(speed, speed.get("options") or {}, summary.run)
    return replace(summary, speeds=rows) if rows else summary
