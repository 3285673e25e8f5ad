"""Folders of analyses and runs, claimed atomically so two lar-prec processes never share one.

``mkdir`` without ``exist_ok`` is the claim of a new folder. An existing empty folder (``--out``
made beforehand, or made a moment ago by another lar-prec started at the same time) is
claimed by creating :data:`CLAIM_NAME` in it with ``O_EXCL``.

One analysis per ``--out``: a folder that holds a previous analysis (its claim file: never a
folder lar-prec did not make or claim, whatever report.json it holds) is moved aside to ``OUT.prev`` and a new one made in its place; when
the new analysis is complete (:func:`finish_analysis_dir`) the previous one is removed, or kept
as ``OUT.prev`` with ``keep_previous``. A run that fails leaves ``OUT.prev`` in place. A
non-empty folder that holds no analysis, or one another live lar-prec is still writing, is
refused (exit 2): nothing is ever nested inside an old analysis.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from lar_prec.errors import LarPrecError, UsageError
from lar_prec.inputspec import read_json_file

from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike  # noqa: E402

#: file that marks a folder as claimed by one analysis (rewritten once, with ``complete``, when it is)
CLAIM_NAME = ".lar-prec-analysis"
#: in ``OUT.prev``: the analysis that replaces it, and whether to keep it when that one is complete
REPLACED_NAME = ".lar-prec-replaced"
PREV_SUFFIX = ".prev"
#: seconds a claim file without its record yet counts as another process's claim in progress
CLAIM_GRACE = 30.0


def _ensure_folder(path: Path, what: str) -> None:
    """Create ``path`` (and its parents) or say in one line why it cannot be a folder."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{what} {path} exists and is not a folder") from None
    except NotADirectoryError:
        raise UsageError(f"cannot create {what} {path}: a parent of it is a file, expected a folder") from None
    except OSError as exc:
        raise UsageError(f"cannot create {what} {path}: {exc.strerror or exc}") from None


def new_run_dir(parent: PathLike, label: str, *, what: str = "output folder") -> Path:
    """Create and return a fresh folder ``parent/label``, or ``label-2``, ``label-3``, ...

    Never returns an existing folder: creation is the test (``mkdir`` without exist_ok).
    Raises UsageError (one line) when ``parent`` cannot hold a new folder (read-only, full,
    a file).
    """
    parent = Path(parent)
    _ensure_folder(parent, what)
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", label) or "run"
    n = 1
    while True:
        candidate = parent / (safe if n == 1 else f"{safe}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise UsageError(f"cannot create folder {candidate} in the {what}: {exc.strerror or exc}") from None


def _claim(path: Path, command: str) -> bool:
    """Take the empty folder ``path`` for one analysis; False when it is not empty or another
    process claimed it first."""
    try:
        if any(name for name in os.listdir(path)):
            return False
        fd = os.open(path / CLAIM_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as exc:
        raise UsageError(f"cannot write in the --out folder {path}: {exc.strerror or exc}") from None
    try:  # a claim, not a report: O_EXCL is the point, so not outputs.atomic_write_text
        os.write(fd, json_text({"command": command, "pid": os.getpid(), "host": socket.gethostname()},
                               indent=None).encode())
    except OSError:
        pass  # an empty claim file claims as well (a full disk)
    finally:
        os.close(fd)
    return True


def _claim_record(path: Path) -> Optional[Dict[str, Any]]:
    try:
        if not (path / CLAIM_NAME).stat().st_size:
            return {}  # claimed, its record not written yet
        rec = read_json_file(path / CLAIM_NAME, "analysis claim file", limit=4096)
        return rec if isinstance(rec, dict) else {}
    except (OSError, LarPrecError):
        return None


def is_analysis(path: PathLike) -> bool:
    """``path`` holds a lar-prec analysis: its claim file (a report.json alone is not enough:
    ``--json report.json`` may have put one in any folder, which must never be replaced)."""
    return (Path(path) / CLAIM_NAME).is_file()


def _writer(path: Path) -> Optional[str]:
    """Who still writes the analysis in ``path`` (``pid N``), when another live lar-prec on this
    machine does; None when it is complete, its writer gone, or another machine's."""
    rec = _claim_record(path)
    if not rec:  # claimed a moment ago, its record not written yet (O_EXCL first, then the text)
        try:
            young = time.time() - os.stat(path / CLAIM_NAME).st_mtime < CLAIM_GRACE
        except OSError:
            young = False
        return "pid unknown" if young else None
    if rec.get("complete") or rec.get("host", socket.gethostname()) != socket.gethostname():
        return None
    pid = rec.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # alive, another user's
        pass
    return f"pid {pid}"


def _move_aside(path: Path, out: PathLike, keep_previous: bool, needed: Sequence[PathLike]) -> None:
    """``path`` (a previous analysis) to ``path.prev``, replacing an older ``.prev`` analysis."""
    if not is_analysis(path):
        raise UsageError(f"--out {out} is a non-empty folder that holds no lar-prec analysis; expected a new or "
                         "empty folder, or the folder of a previous analysis (which is then replaced)")
    for what, p in [("the current folder", Path.cwd()), *(("a file this analysis reads", n) for n in needed)]:
        real = os.path.realpath(p)
        if os.path.commonpath([real, str(path)]) == str(path):
            raise UsageError(f"--out {out} holds a previous analysis, which a new one replaces, and {what} ({p}) "
                             "is inside it; expected another --out (or copy the file out first)")
    who = _writer(path)
    if who is not None:
        raise UsageError(f"--out {out}: another lar-prec ({who}) is still writing its analysis there; "
                         "expected a folder no analysis is running in")
    prev = path.with_name(path.name + PREV_SUFFIX)
    if os.path.lexists(prev):
        if not prev.is_dir() or prev.is_symlink() or not is_analysis(prev):
            raise UsageError(f"{prev} exists and holds no lar-prec analysis; expected it free for the previous "
                             f"analysis of --out {out} (move it away)")
        shutil.rmtree(prev, ignore_errors=True)
    try:
        os.rename(path, prev)
        atomic_write_text(prev / REPLACED_NAME, json_text({"replaced_by": str(path), "keep": keep_previous}),
                          what="previous analysis record")
    except OSError as exc:
        raise UsageError(f"cannot move the previous analysis in --out {out} aside to {prev}: "
                         f"{exc.strerror or exc}") from None


def finish_analysis_dir(adir: PathLike) -> None:
    """The analysis in ``adir`` is complete: its claim file says so, and the previous analysis
    moved aside to ``adir.prev`` is removed (kept, as an ordinary analysis, with ``keep_previous``)."""
    path = Path(adir)
    rec = _claim_record(path)
    if rec is not None and not rec.get("complete"):
        try:
            atomic_write_text(path / CLAIM_NAME, json_text({**rec, "complete": True}, indent=None),
                              what="analysis claim file")
        except LarPrecError:
            pass  # a full disk: the analysis is there all the same
    prev = path.with_name(path.name + PREV_SUFFIX)
    try:
        rec = read_json_file(prev / REPLACED_NAME, "replaced analysis record", limit=4096)
    except (OSError, LarPrecError):
        return
    if not isinstance(rec, dict) or not isinstance(rec.get("replaced_by"), str) \
            or os.path.realpath(rec["replaced_by"]) != os.path.realpath(path):
        return
    if rec.get("keep"):
        with contextlib.suppress(OSError):
            os.unlink(prev / REPLACED_NAME)
    else:
        shutil.rmtree(prev, ignore_errors=True)


def new_analysis_dir(out: "PathLike | None", command: str, default_parent: PathLike = "lar-prec-out", *,
                     keep_previous: bool = False, needed: Sequence[PathLike] = (), replace: bool = True) -> Path:
    """The folder of a new analysis, claimed for this process.

    * ``out`` None: a new ``<default_parent>/<command>[-N]``;
    * ``out`` missing or an empty folder: ``out`` itself (unless another process claims it first);
    * ``out`` the folder of a previous analysis: that one moved aside to ``out.prev`` (removed
      when the new one is complete, :func:`finish_analysis_dir`, unless ``keep_previous``) and
      ``out`` made anew;
    * ``out`` a file, a non-empty folder that is no analysis, one a live lar-prec is writing,
      one that holds the current folder or a file of ``needed`` (the model, the inputs), or a
      folder that cannot be written: UsageError.

    ``replace`` False (the zoo, whose store points into its folder): a non-empty ``out`` gets a
    new numbered subfolder ``out/<command>[-N]`` instead, as before.
    """
    if out is None:
        return new_run_dir(default_parent, command, what="default output folder")
    path = Path(out)
    if os.path.lexists(path) and not path.is_dir():
        problem = "is a symlink loop" if os.path.islink(path) and not os.path.exists(path) else "is not a folder"
        raise UsageError(f"--out {out} exists and {problem}")
    _ensure_folder(path, "--out folder")
    if _claim(path, command):
        return path
    if not replace:
        return new_run_dir(path, command, what="--out folder")
    path = path.resolve()  # a symlink to the folder: the folder itself is replaced
    _move_aside(path, out, keep_previous, needed)
    _ensure_folder(path, "--out folder")
    if _claim(path, command):
        return path
    raise UsageError(f"--out {out}: another lar-prec claimed it first; expected a folder no analysis is running in")
