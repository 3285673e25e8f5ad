"""Dead or waiting: the rule that ends a child which uses no CPU (local runs and device runs).

A load_and_run whose process group uses no CPU is either **dead** (MegEngine after some JIT
errors: a fatal line on stderr, then every thread parked in a futex wait until killed) or
**waiting** for something outside it (a ``--lar`` wrapper's ``flock gpu.lock load_and_run ...``,
``adb wait-for-device``, a queue, a slow NFS read). Once the group has used no CPU for the
grace period (``LAR_PREC_STALL_AFTER``), the watch looks at every thread of the group (its
state and wait channel, from ``/proc``) and at the run's stderr:

1. a thread that waits on the outside keeps the run alive: uninterruptible sleep (``D``: disk,
   NFS), stopped (``T``), or asleep on any wait channel but a futex or ``pause`` (a file lock,
   a child, a timer, a socket, a pipe, a terminal). Only ``--timeout`` ends such a run;
2. otherwise (every thread parked, or its wait channel unreadable) the run is dead when its
   stderr has a fatal line (:func:`fatal_line`), whatever ``--timeout`` says;
3. without a fatal line it is dead only when no ``--timeout`` bounds it and the group has used
   CPU since the watch's first look (it ran, then parked without a word); with a ``--timeout``
   the timeout decides, and a group that has used no CPU since it started is waiting.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional, Tuple

#: what a failing MegEngine (or a C++ runtime) says; the same words name a run's error line
FATAL_WORDS = re.compile(r"(error|assert|terminate called|what\(\)|failed|exception)", re.I)
#: lines that are never the error: backtrace frames, blank lines, MegEngine's debug and info logs
NOT_AN_ERROR = re.compile(r"^(backtrace:|/.*\.so|\s*$|\[\d+ \d\d:\d\d:\d\d .*\]\[(DEBUG|INFO)\])")
#: wait channels of a thread that is parked rather than waiting for something: futex waits
#: (every thread of a dead MegEngine) and pause/sigsuspend
_PARKED = ("futex", "pause", "sigsuspend")


def fatal_line(stderr: str, first: bool = False) -> Optional[str]:
    """The last (``first``: the first) line of ``stderr`` that says something failed (not a
    backtrace frame nor a log), or None."""
    lines = stderr.splitlines()
    for line in (lines if first else reversed(lines)):
        s = line.strip()
        if FATAL_WORDS.search(s) and not NOT_AN_ERROR.match(s):
            return s
    return None


def waits_outside(state: str, wchan: str) -> bool:
    """True when a thread in ``state`` (``/proc/.../stat`` field 3) asleep on ``wchan`` waits for
    something outside the run, or runs: the group is not dead. An unknown wait channel (``0``,
    unreadable) says nothing."""
    if state in ("D", "T", "t", "R", "W"):
        return True
    if state != "S":  # Z (zombie), X (dead), I (idle kernel thread): nothing to wait for
        return False
    wchan = wchan.strip()
    return bool(wchan) and wchan != "0" and not any(p in wchan for p in _PARKED)


class IdleClock:
    """How long a process group has used no CPU, from its CPU time seen at each look, and
    whether it used any after the first look (it ran)."""

    def __init__(self, start: float) -> None:
        self.first: Optional[int] = None
        self.last: Optional[int] = None
        self.since = start
        self.ran = False

    def idle_for(self, ticks: int, now: float) -> float:
        """Seconds since the CPU time last changed (``ticks`` seen at ``now``)."""
        if self.first is None:
            self.first = ticks
        elif ticks != self.first:
            self.ran = True
        if ticks != self.last:
            self.last, self.since = ticks, now
        return now - self.since


def looks_dead(threads: Iterable[Tuple[str, str]], stderr: str, *, ran: bool, timed: bool) -> bool:
    """The rule of this module for a group idle past the grace period: ``threads`` its
    (state, wait channel) pairs, ``stderr`` the end of the run's stderr, ``ran`` whether it
    used CPU after the first look, ``timed`` whether a timeout bounds the run."""
    if any(waits_outside(state, wchan) for state, wchan in threads):
        return False
    if fatal_line(stderr) is not None:
        return True
    return ran and not timed
