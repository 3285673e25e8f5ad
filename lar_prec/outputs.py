"""Writing what lar-prec produces without destroying anything: reports, run records, pages.

Every file lar-prec writes goes through :func:`atomic_write_text` (or :func:`atomic_writer`):
the bytes go to a temporary file beside the target, are flushed and fsynced, and only then
renamed over it, so a full disk or a crash leaves the earlier file whole and no half file.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator, Union

from lar_prec.errors import UsageError

PathLike = Union[str, "os.PathLike[str]"]


@contextlib.contextmanager
def atomic_writer(path: PathLike, *, what: str = "output") -> Iterator[IO[str]]:
    """A text stream whose content replaces ``path`` only when the block ends without error.

    Raises:
        UsageError: the folder cannot be written, the target is a folder, or the disk is full
            (the message names the file and ``what`` it was meant to hold).
    """
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"cannot write the {what} to {p}: it is a folder, expected a file path")
    fd = -1
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent or Path(".")))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp makes 0600; a report is as readable as any file
        os.replace(tmp, p)
        tmp = ""
    except OSError as e:
        raise UsageError(f"cannot write the {what} to {p}: {e.strerror or e}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it; done once at import, before any thread writes
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_text(path: PathLike, text: str, *, what: str = "output") -> Path:
    """Replace ``path`` by ``text`` atomically (see :func:`atomic_writer`); returns the path."""
    with atomic_writer(path, what=what) as f:
        f.write(text)
    return Path(path)
