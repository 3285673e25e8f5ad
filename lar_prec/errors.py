"""The one exception root of lar-prec and its structured subclasses.

Every error a user can cause (bad files, bad options, a failing load_and_run) is a
``LarPrecError``; ``cli/common.handle_errors`` turns it into a one-line ``Error: ...`` and its ``exit_code``.
Anything else that escapes is a bug in lar-prec and keeps its traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence


class LarPrecError(Exception):
    """Root of every error lar-prec raises on purpose."""

    #: exit code of the command line when this error ends a command (design.md contract)
    exit_code = 2
    #: the run folder the error belongs to, when a run raised it
    run_dir: "Optional[Path]" = None
    #: that run's RunResult (as written to its run.json), when a run raised it
    result: Any = None
    #: the finished analysis' Report (quant, mixed: their JSON), when only writing it failed: the
    #: verdict is shown anyway
    report: Any = None


class UsageError(LarPrecError, ValueError):
    """A command or function was called with options or inputs that cannot work."""


class DumpFormatError(LarPrecError, ValueError):
    """A dump file is not what load_and_run writes.

    The message names the file, the byte offset (or line) and what was expected there.
    """

    def __init__(self, path: "str | Path", offset: Optional[int], expected: str, found: str = "") -> None:
        self.path = Path(path)
        self.offset = offset
        self.expected = expected
        self.found = found
        where = f" at byte {offset}" if offset is not None else ""
        got = f", found {found}" if found else ""
        super().__init__(f"{self.path}{where}: expected {expected}{got}")


class DumpFolderError(LarPrecError, ValueError):
    """A dump folder is missing, empty, or does not match the folder it is compared with."""


class RunError(LarPrecError, RuntimeError):
    """A load_and_run process failed: non-zero exit, signal, or timeout."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        run_dir: "Optional[Path]" = None,
        returncode: Optional[int] = None,
        argv: Sequence[str] = (),
        stderr_tail: str = "",
    ) -> None:
        self.run_dir = run_dir
        self.returncode = returncode
        self.argv = list(argv)
        self.stderr_tail = stderr_tail
        super().__init__(message)


class RunTimeout(RunError):
    """A load_and_run process ran past its timeout and was killed with its process group."""


class LoadAndRunNotFound(LarPrecError, FileNotFoundError):
    """The load_and_run binary given by --lar or LAR_PREC_LOAD_AND_RUN does not exist or cannot run."""


class AnalysisInterrupted(LarPrecError):
    """Ctrl-C stopped an analysis; every run folder was left consistent and is named here."""

    exit_code = 130

    def __init__(self, message: str, *, analysis_dir: "Optional[Path]" = None) -> None:
        self.analysis_dir = analysis_dir
        super().__init__(message)


class StoreError(LarPrecError):
    """The results store named by ``--store`` / ``LAR_PREC_STORE`` cannot be opened, read or
    written (unreachable, not a store, written by a newer lar-prec, locked, full). Exit 2: the
    store is an input the user named; the analysis folder stays on disk and nothing of the run
    is left half-written in the store (one transaction per run)."""
