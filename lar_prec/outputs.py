"""Writing what lar-prec produces without destroying anything: reports, run records, pages.

Every file lar-prec writes goes through :func:`atomic_write_text` (or :func:`atomic_writer`):
the bytes go to a temporary file beside the target, are flushed and fsynced, and only then
renamed over it, so a full disk or a crash leaves the earlier file whole and no half file.
:func:`json_text` is the one (strict) JSON encoding of the records written.
:func:`check_output_path` refuses, before anything runs, an output that cannot be written or
that would replace one of the analysis' inputs; :func:`save_crash_report` keeps the traceback
of an internal error; :func:`make_output_pipe_safe` lets a closed stdout or stderr pipe end
the output without ending the command. :func:`sha256_file` is the package's one file hash.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any, Dict, Iterable, Iterator, Optional, Tuple

from lar_prec import __version__
from lar_prec.errors import UsageError

from lar_prec.records import PathLike


def _target(path: PathLike) -> Path:
    """Where a write to ``path`` lands: a symlink is followed, so the link stays a link."""
    return Path(os.path.realpath(os.fspath(path)))


def _is_stream(p: Path) -> bool:
    """A character device (``/dev/null``) or a FIFO: written in place, there is nothing to keep."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_output_path(path: PathLike, *, what: str = "output", inputs: Iterable[PathLike] = (),
                      make_parents: bool = False) -> None:
    """Refuse, before anything runs, an output file that cannot be written or would destroy data.

    ``inputs`` are every file and folder the analysis reads (model, input files, dump folders,
    diff text, the load_and_run binary): the output may be none of them nor lie inside one.
    With ``make_parents`` the writer will create missing folders: the nearest existing one
    must then be a writable folder.

    Raises:
        UsageError: one line naming the file and what was expected (exit 2).
    """
    given = os.fspath(path)
    if given == "-":
        return
    p = _target(given)
    if p.is_dir():
        raise UsageError(f"cannot write the {what} to {given}: it is a folder, expected a file path")
    if p.exists() and not p.is_file() and not _is_stream(p):
        raise UsageError(f"cannot write the {what} to {given}: it is not a regular file, expected a file path")
    for src in inputs:
        if src is None or os.fspath(src) in ("", "-"):
            continue
        s = _target(src)
        same = p == s or (p.exists() and s.exists() and os.path.samefile(p, s))
        if same:
            raise UsageError(f"refusing to write the {what} over {given}: it is an input of this analysis; "
                             f"expected a new file path")
        if s.is_dir() and s in p.parents:
            raise UsageError(f"refusing to write the {what} to {given}: it is inside {os.fspath(src)}, an input "
                             f"folder of this analysis; expected a path outside it")
    if _is_stream(p):
        return
    parent = p.parent
    while make_parents and not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.exists():
        raise UsageError(f"cannot write the {what} to {given}: folder {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(f"cannot write the {what} to {given}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write the {what} to {given}: folder {parent} is not writable")


def check_distinct(paths: Iterable[Optional[PathLike]], *, what: str = "outputs") -> None:
    """Refuse two outputs of one command that are the same file (the second would replace the first)."""
    seen: dict = {}
    for given in paths:
        if given is None or os.fspath(given) == "-":
            continue
        p = _target(given)
        if p in seen:
            raise UsageError(f"{what} name the same file {os.fspath(given)}; expected different paths")
        seen[p] = os.fspath(given)


@contextlib.contextmanager
def atomic_writer(path: PathLike, *, what: str = "output") -> Iterator[IO[str]]:
    """A text stream whose content replaces ``path`` only when the block ends without error.

    A symlink is followed (the file it points to is replaced, the link stays); a character
    device or FIFO (``/dev/null``) is written in place.

    Raises:
        UsageError: the folder cannot be written, the target is a folder, or the disk is full
            (the message names the file and ``what`` it was meant to hold).
    """
    p = _target(path)
    if p.is_dir():
        raise UsageError(f"cannot write the {what} to {path}: it is a folder, expected a file path")
    if _is_stream(p):
        try:
            with open(p, "w", encoding="utf-8") as f:
                yield f
        except OSError as e:
            raise UsageError(f"cannot write the {what} to {path}: {e.strerror or e}") from None
        return
    import tempfile  # here: every command imports this module at start-up (main)

    fd = -1
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            yield f
            f.flush()
            os.fsync(f.fileno())
        if p.exists():  # keep the mode of the file replaced; mkstemp makes 0600
            with contextlib.suppress(OSError):
                os.chmod(tmp, stat.S_IMODE(os.stat(p).st_mode))
        else:
            os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, p)
        tmp = ""
    except OSError as e:
        raise UsageError(f"cannot write the {what} to {path}: {e.strerror or e}") from None
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


def json_text(obj: Any, *, indent: Optional[int] = 1, default: Any = None) -> str:
    """The JSON text of a record lar-prec writes, with its final newline: strict JSON, which
    has no NaN or Infinity. A non-finite number reaching here is a bug of its writer (which
    writes null and says why, as :func:`lar_prec.records.json_number` and a ``nonfinite`` key
    do): ValueError, never a file other programs cannot read."""
    return json.dumps(obj, indent=indent, default=default, allow_nan=False) + "\n"


def atomic_write_text(path: PathLike, text: str, *, what: str = "output") -> Path:
    """Replace ``path`` by ``text`` atomically (see :func:`atomic_writer`); returns the path."""
    with atomic_writer(path, what=what) as f:
        f.write(text)
    return Path(path)


def save_crash_report(exc: BaseException, argv: Iterable[str] = ()) -> Path:
    """Save the traceback of an internal error to a new file in the temporary folder.

    ``$TMPDIR/lar-prec-crash-<UTC time>-<pid>-XXXX.txt`` (``tempfile.gettempdir()``): it holds
    the command line, the versions and the traceback. Returns its path; raises OSError when
    no file can be made.
    """
    import tempfile
    import time
    import traceback

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    fd, name = tempfile.mkstemp(prefix=f"lar-prec-crash-{stamp}-{os.getpid()}-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
        f.write(f"lar-prec {__version__} internal error\n")
        f.write(f"command: {' '.join(argv) or ' '.join(sys.argv)}\n")
        f.write(f"python: {sys.version.split()[0]} on {sys.platform}\n\n")
        f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return Path(name)


class PipeSafeStream(io.RawIOBase):
    """File descriptor 1 or 2 that a closed pipe cannot crash (``lar-prec compare --json - | head``,
    ``lar-prec naive-vs-default ... 2>&1 | head -2``).

    The first write into a closed pipe points the fd at /dev/null and the command goes on to
    its verdict: the output stops silently and the exit code stays the verdict's (0 or 1),
    not click's 1 for every EPIPE, and no "Exception ignored" at interpreter exit. A reader
    that goes away never turns one verdict into another.
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._broken = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, b: Any) -> int:
        if self._broken:
            return len(memoryview(b))
        try:
            return os.write(self._fd, b)
        except BrokenPipeError:
            self._broken = True
            with contextlib.suppress(OSError):  # the fd to /dev/null: nothing else writes into the pipe
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self._fd)
                os.close(null)
            return len(memoryview(b))


def make_output_pipe_safe() -> None:
    """Replace sys.stdout and sys.stderr by the same text streams over :class:`PipeSafeStream`
    (stderr carries the notes and progress lines written after the verdict)."""
    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        try:
            fd = old.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (embedded, captured)
            continue
        with contextlib.suppress(OSError):  # already into a closed pipe: nothing to keep
            old.flush()
        setattr(sys, name, io.TextIOWrapper(io.BufferedWriter(PipeSafeStream(fd)), encoding=old.encoding,
                                            errors=old.errors, line_buffering=old.line_buffering,
                                            write_through=getattr(old, "write_through", False)))


_SHA_CACHE: Dict[Tuple[str, int, int], str] = {}


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file (cached by path, size and mtime: models are hashed once per process)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]
