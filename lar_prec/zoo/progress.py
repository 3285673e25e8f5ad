"""A zoo's progress on stderr: a rich bar in a terminal (done, running, failed, left, ETA), one
line per finished task otherwise (a log, a CI job), and nothing with ``quiet``."""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional, TextIO

from lar_prec.report.console import shown


class ZooProgress:
    """``start(total)``, then ``finished(entry)`` per task and ``running(n)`` as the cluster says;
    ``note(text)`` for one line (the dashboard link); a context manager."""

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.total = self.done = self.failed = self.n_running = 0

    def __enter__(self) -> "ZooProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def note(self, text: str) -> None:
        if self.enabled:
            (self.bar.console.print(shown(text), markup=False, highlight=False) if self.bar is not None
             else print(shown(text), file=self.stream, flush=True))

    def start(self, total: int) -> None:
        self.total = total
        if not self.enabled or not total or not self.stream.isatty():
            return
        # rich only on a terminal (start-up time elsewhere)
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("zoo"), BarColumn(), TextColumn("{task.fields[counts]}"),
                            TextColumn("ETA"), TimeRemainingColumn(), console=Console(file=self.stream),
                            transient=True)
        self.bar.__enter__()
        self.task = self.bar.add_task("zoo", total=total, counts=self._counts())

    def _counts(self) -> str:
        left = self.total - self.done - self.n_running
        return f"{self.done - self.failed} done, {self.n_running} running, {self.failed} failed, {max(left, 0)} left"

    def running(self, n: int) -> None:
        self.n_running = n
        if self.bar is not None:
            self.bar.update(self.task, counts=self._counts())

    def finished(self, entry: Dict[str, Any]) -> None:
        self.done += 1
        self.failed += entry["state"] == "failed"
        self.n_running = max(0, self.n_running - 1)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, counts=self._counts())
        elif self.enabled:
            what = entry.get("why") if entry["state"] == "failed" else entry.get("verdict")
            where = f" on {entry['host']}" if entry.get("host") else ""
            print(shown(f"[{self.done}/{self.total}] {entry['label']}: {entry['state']}: {what} "
                        f"({entry.get('seconds') or 0:.1f} s{where})"), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
