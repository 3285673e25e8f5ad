"""Folders of analyses and runs, claimed atomically so two lar-prec processes never share one.

``mkdir`` without ``exist_ok`` is the claim of a new folder. An existing empty folder (``--out``
made beforehand, or made a moment ago by another lar-prec started at the same time) is
claimed by creating :data:`CLAIM_NAME` in it with ``O_EXCL``: whoever creates it owns the
folder, everyone else gets a numbered subfolder.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from lar_prec.errors import UsageError

from lar_prec.outputs import json_text
from lar_prec.records import PathLike  # noqa: E402

#: file that marks a folder as claimed by one analysis (written once, never rewritten)
CLAIM_NAME = ".lar-prec-analysis"


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
        os.write(fd, json_text({"command": command, "pid": os.getpid()}, indent=None).encode())
    except OSError:
        pass  # an empty claim file claims as well (a full disk)
    finally:
        os.close(fd)
    return True


def new_analysis_dir(out: "PathLike | None", command: str, default_parent: PathLike = "lar-prec-out") -> Path:
    """The folder of a new analysis, claimed for this process.

    * ``out`` None: a new ``<default_parent>/<command>[-N]``;
    * ``out`` missing or an empty folder: ``out`` itself (unless another process claims it first);
    * ``out`` an existing non-empty folder: a new numbered subfolder ``out/<command>[-N]``;
    * ``out`` a file, or a folder that cannot be written: UsageError.
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
    return new_run_dir(path, command, what="--out folder")
