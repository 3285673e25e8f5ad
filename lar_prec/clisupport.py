"""What the command line needs besides click: progress bars, the load_and_run flags a command
passes through, and the checks of --json/--html before anything runs.

Kept apart from ``cli/`` (the only package that imports click) so that its modules stay thin.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional, Sequence

from lar_prec._lazy import LazyModule
from lar_prec.errors import UsageError
from lar_prec.run.argv import split_lar_args
from lar_prec.outputs import check_distinct, check_output_path
from lar_prec.report.console import shown

if TYPE_CHECKING:  # type names only
    from lar_prec.lar import flags as lar_flags
    from lar_prec.lar import graphopts
else:  # load_and_run's flag tables only for the commands that run it: `compare` starts ~10 ms sooner
    lar_flags, graphopts = LazyModule("lar_prec.lar.flags"), LazyModule("lar_prec.lar.graphopts")


def console(stderr: bool = False) -> Any:
    """A rich Console for stdout (or stderr); a readable width when piped."""
    # rich only when something is shown (start-up time of --help and pipes)
    from rich.console import Console

    import shutil

    # Piped output gets a readable width instead of rich's 80 columns.
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(120, shutil.get_terminal_size((120, 24)).columns)
    return Console(stderr=stderr, soft_wrap=False, width=width)


#: what a stage of a workflow's progress is called on the terminal
_STAGES = {"runs": "load_and_run runs", "compare": "comparing dumps", "local": "local error", "steps": "steps", "speed": "timed runs"}


class ProgressBars:
    """A workflow's progress on stderr: on a terminal, rich bars naming the steps under way; into
    a file or pipe (a CI log), one line per finished step (``lar-prec sweep: steps 3/12: nhwcd4: runs, ok``),
    as ``mixed`` prints; nothing when not ``enabled`` (``-q``).

    Called as ``progress(stage, done, total, running=(...), finished="...")``: ``running``
    names the steps under way, ``finished`` the one that just ended and how."""

    def __init__(self, enabled: bool, command: str = "") -> None:
        tty = sys.stderr.isatty()
        self.enabled = enabled and tty
        self.lines = enabled and not tty
        self.prefix = f"lar-prec {command}: " if command else "lar-prec: "
        self._bar = None
        self._tasks: dict = {}
        self._said: dict = {}
        self._state: dict = {}  # stage -> (described, done, total): what the bars show
        self._lock = threading.Lock()
        self._loader: Optional[threading.Thread] = None
        # one counter per stage over the whole command: a workflow that runs its plan in parts
        # (shake: the first run, then the repeats) tells each part from 0; the parts add up
        self._blocks: dict = {}  # stage -> [done in the parts before, their total, last (done, total)]
        self._expected: dict = {}  # stage -> the runs the command said it will make (expect)

    def expect(self, stage: str, total: int) -> None:
        """The command will make ``total`` steps of ``stage`` in all (over every part)."""
        self._expected[stage] = total

    def _count(self, stage: str, done: int, total: int) -> "tuple[int, int]":
        """(done, total) of the whole command from a part's own (done, total)."""
        before, before_total, last = self._blocks.get(stage, (0, 0, None))
        if last is not None and done == 0 and last[0] == last[1] and last[1] > 0:
            before, before_total = before + last[0], before_total + last[1]  # a new part starts
        self._blocks[stage] = (before, before_total, (done, total))
        return before + done, max(before_total + total, self._expected.get(stage, 0))

    def __enter__(self) -> "ProgressBars":
        if self.enabled:
            # rich's bars are made on a thread: importing rich.progress would delay the first
            # load_and_run run by ~40 ms; until they are up, the latest state waits in _state
            self._loader = threading.Thread(target=self._make_bars, name="lar-prec-progress", daemon=True)
            self._loader.start()
        return self

    def _make_bars(self) -> None:
        # rich only when something is shown (start-up time of --help and pipes)
        from rich.progress import BarColumn, Progress as Bars, TaskProgressColumn, TextColumn, TimeElapsedColumn

        bar = Bars(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TimeElapsedColumn(), console=console(stderr=True), transient=True)
        bar.__enter__()
        with self._lock:
            self._bar = bar
            for stage, shown_now in self._state.items():
                self._show(stage, *shown_now)

    def __exit__(self, *exc: Any) -> None:
        if self._loader is not None:
            self._loader.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, stage: str, done: int, total: int, *, running: Sequence[str] = (),
                 finished: Optional[str] = None) -> None:
        label = _STAGES.get(stage, stage)
        done, total = self._count(stage, done, total)
        if self.lines:
            self._line(stage, label, done, total, finished)
        if not self.enabled:
            return
        described = f"{label}: {', '.join(running)}" if running else label
        with self._lock:
            self._state[stage] = (described, done, total)
            if self._bar is not None:
                self._show(stage, described, done, total)

    def _show(self, stage: str, described: str, done: int, total: int) -> None:
        if stage not in self._tasks:
            self._tasks[stage] = self._bar.add_task(described, total=max(total, 1))  # type: ignore[union-attr]
        self._bar.update(self._tasks[stage], completed=done, total=max(total, 1), description=described)  # type: ignore[union-attr]

    def _line(self, stage: str, label: str, done: int, total: int, finished: Optional[str]) -> None:
        """One line per finished step; a stage that names none (comparing dumps) once, at its end."""
        if finished is None and (done < total or not total or self._said.get(stage) == done):
            return
        self._said[stage] = done
        # one line, whatever a message holds; a stage counted in bytes or vars just ends
        said = f" {done}/{total}: {' '.join(finished.split())}" if finished else ": done"
        sys.stderr.write(shown(f"{self.prefix}{label}{said}") + "\n")
        sys.stderr.flush()


def pass_through_flags(lar_args: tuple, trailing: tuple) -> tuple:
    """--lar-args and the load_and_run flags given directly (``--enable-nhwcd4``) or after ``--``.

    Commands take load_and_run's options directly (click passes options it does not know
    through), so a misspelt lar-prec option would reach load_and_run: anything that is not a
    load_and_run 1.13 flag is refused here, before any run (exit 2).
    """

    known = set(lar_flags.SUPPORTED_FLAGS) | set(lar_flags.UNSUPPORTED_FLAGS) | set(graphopts.REFUSED_FLAGS)
    for arg in trailing:
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name = arg.lstrip("-").split("=", 1)[0].replace("-", "_")
        if name not in known and not (name.startswith("no") and name[2:] in known):
            raise UsageError(f"no such option: {arg} (neither a lar-prec option nor a load_and_run flag; "
                             "see --help)")
    return split_lar_args(lar_args) + tuple(a for a in trailing if a != "--")


def input_paths(model: str, inputs: tuple, lar_path: str | None) -> list:
    """Every existing file an analysis reads: no report may be written over one of them."""
    import shutil

    paths = [model]
    for spec in inputs:
        for item in str(spec).split(";"):
            value = item.partition(":")[2].strip()
            paths += [p for p in (item.strip(), value) if p and p[0] not in "{[" and os.path.exists(p)]
    lar = lar_path or os.environ.get("LAR_PREC_LOAD_AND_RUN") or shutil.which("load_and_run")
    if lar and lar != "bundled":
        paths.append(shutil.which(lar) or lar)
    return paths


def check_report_outputs(json_out: str | None, html_out: str | None, inputs: list, *,
                          make_parents: bool = True, analysis_dir: str | None = None) -> None:
    """Refuse, before anything runs, --json/--html paths that cannot be written or would
    replace an input (exit 2): an analysis that runs for minutes must not end in that. Inside
    the analysis folder (``--out``), only its own report files (``report.json``,
    ``report.html`` at its top) may be named: anything else there is a run's dump, record or log."""
    if analysis_dir is not None:
        for flag, path, own in (("--json", json_out, "report.json"), ("--html", html_out, "report.html")):
            if path is None or path == "-":
                continue
            check_outside(path, analysis_dir, flag, own)

    if json_out is not None:
        check_output_path(json_out, what="JSON report", inputs=inputs, make_parents=make_parents)
    if html_out is not None:
        if html_out == "-":
            raise UsageError("--html needs a file path, got '-'; expected e.g. --html report.html")
        check_output_path(html_out, what="HTML report", inputs=inputs, make_parents=make_parents)
    check_distinct([json_out, html_out], what="--json and --html")


def check_junit_output(junit: str | None, others: list, inputs: list) -> None:
    """Refuse, before anything runs, a ``--junit FILE`` that cannot be written, is an input or
    names the same file as another output (``others``): exit 2, one line."""
    if junit is None:
        return
    if junit == "-":
        raise UsageError("--junit needs a file path, got '-'; expected e.g. --junit lar-prec.xml")
    check_output_path(junit, what="JUnit XML", inputs=inputs, make_parents=False)
    check_distinct([junit, *others], what="--junit and the other outputs")


def check_outside(path: str, analysis_dir: str, flag: str, own: str) -> None:
    """``path`` must not be inside ``analysis_dir`` unless it is that folder's own ``own`` report.

    Raises:
        UsageError: it is (exit 2, before anything runs).
    """
    target = os.path.realpath(os.path.abspath(path))
    folder = os.path.realpath(os.path.abspath(analysis_dir))
    if target == os.path.join(folder, own) or os.path.commonpath([target, folder]) != folder:
        return
    raise UsageError(f"{flag} {path} is inside the analysis folder {analysis_dir} (--out), where the runs keep "
                     f"their dumps and records; give a path outside it, or {os.path.join(analysis_dir, own)}, "
                     "the analysis' own report")
