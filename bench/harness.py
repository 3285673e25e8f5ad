"""The benchmark's one harness: what every bench script does the same way.

A section of the benchmark times a command (:func:`timed`, a whole process from the
repository's root with its ``lar_prec`` first on the path), pairs it with its counterpart, the
baseline it is held to (:func:`alternate`: the two in turn, so that other work on a shared
machine slows both alike), and writes a row (:class:`Table`, a Markdown table; :func:`write`
puts the text where ``--out`` says). The cases come from ``cases/build/manifest.json``
(:func:`case`). The main benchmark's memory-measuring runs (GNU time, the sampled process
tree, a pseudo-terminal) are ``procs.run_proc``; its pieces are ``sections.py``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # lar_prec and cases of this checkout, whatever the caller's path
    sys.path.insert(0, str(ROOT))

from cases import Case, load_manifest  # noqa: E402

BUILD = ROOT / "cases" / "build"
PY = sys.executable
#: lar-prec as the bench scripts run it: this checkout's package, in a new interpreter
LAR_MODULE: List[str] = [PY, "-m", "lar_prec"]

T = TypeVar("T")


def cases(build: Optional[Path] = None) -> Dict[str, Case]:
    """The built cases by name (``make cases``; ``build``: another build folder)."""
    return load_manifest(build or BUILD)


def case(name: str) -> Case:
    """One built case: its model and its inputs as absolute ``--input`` items."""
    return cases()[name]


def input_args(c: Case) -> List[str]:
    """``--input NAME:PATH`` once per input of ``c``."""
    return [a for spec in c.input_specs() for a in ("--input", spec)]


@dataclass(frozen=True)
class Timed:
    """One finished command: its exit code, wall time and output (None where not kept)."""

    argv: Tuple[str, ...]
    returncode: int
    seconds: float
    stdout: Optional[str]
    stderr: Optional[str]

    def last_line(self, width: int = 300) -> str:
        """The last line of its stderr (what a failure says), cut to ``width``."""
        return ((self.stderr or "").strip().splitlines() or ["?"])[-1][:width]


def env_with(extra: Optional[Mapping[str, Optional[str]]] = None) -> Dict[str, str]:
    """This process's environment with this checkout on PYTHONPATH and ``extra`` (None: unset)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def timed(argv: Sequence[str], *, env: Optional[Mapping[str, Optional[str]]] = None, timeout: Optional[float] = 3600,
          stdout: bool = True, ok: Optional[Sequence[int]] = None) -> Timed:
    """Run ``argv`` to its end from the repository's root, timed (wall clock, whole process).

    ``env``: variables set (or, None, unset) on top of this environment, with PYTHONPATH this
    checkout. ``stdout`` False sends it to /dev/null (a command that prints pages). ``ok``: the
    exit codes it may end with; any other ends the benchmark with its stderr's tail.
    """
    t0 = time.monotonic()
    p = subprocess.run(list(argv), cwd=ROOT, env=env_with(env), stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    done = Timed(tuple(argv), p.returncode, time.monotonic() - t0, p.stdout, p.stderr)
    if ok is not None and p.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {(p.stderr or '')[-800:]}")
    return done


def alternate(commands: Sequence[Tuple[str, T]], rounds: int, run: Callable[[str, T, int], object],
              turn: bool = False) -> None:
    """Each of ``commands`` (label, what ``run`` takes) once per round, in turn, so that a busy
    machine slows a command and its counterpart alike; ``turn``: every other round in the
    reverse order (neither always goes first). ``run(label, command, round)`` keeps what it
    measures."""
    for k in range(rounds):
        for label, command in (commands if not turn or k % 2 == 0 else commands[::-1]):
            run(label, command, k)


class Table:
    """A Markdown table: its header, then one row a call."""

    def __init__(self, *columns: str) -> None:
        self.columns = columns
        self.rows: List[str] = []

    def row(self, *cells: object) -> str:
        """Add a row of ``cells`` (as ``str`` shows them; None: a blank cell, written ``| |``,
        where "" writes ``|  |``); its line."""
        line = "|" + "".join(" |" if c is None else f" {c} |" for c in cells)
        self.rows.append(line)
        return line

    def head(self) -> List[str]:
        return ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]

    def lines(self) -> List[str]:
        return self.head() + self.rows


def write(out: Optional[Path], text: str, *, append: bool = False, show: bool = True) -> None:
    """Print ``text`` and write it to ``out`` (if any), or add it at the end with ``append``."""
    if show:
        print(text)
    if out:
        out = Path(out)
        if append:
            with open(out, "a") as fh:
                fh.write(text)
        else:
            out.write_text(text)


def cpu_name(default: str = "") -> str:
    """The CPU's model name from /proc/cpuinfo (``default`` where it has none)."""
    try:
        return next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                     if ln.startswith("model name")), default)
    except OSError:
        return default
