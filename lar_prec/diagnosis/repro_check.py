"""A repro folder, read as data: every value of ``repro.json`` checked against what lar-prec
writes there, every file copied out of the folder without following a link, before anything runs.

Repro folders are made to be sent to other people, so ``lar-prec replay`` trusts nothing in one:
the configuration is rebuilt from its *name* (:data:`lar_prec.run.config.CONFIGS`) plus flags
of the bundled load_and_run that write nothing and read no file; the environment only holds the
variables a configuration sets, with the values it sets; input paths name files of ``inputs/``;
``repro.json`` is strict JSON (no ``NaN``/``Infinity``) of this schema. Anything else is a
:class:`~lar_prec.errors.UsageError` (exit 2) naming the file, the key and what was expected.
:func:`private_copy` then copies the files replay needs (regular files only: no symlink, FIFO
or device) into a working folder of its own, where the runs read and write.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.errors import UsageError
from lar_prec.lar.flags import SUPPORTED_FLAGS
from lar_prec.run.config import CONFIGS, RunConfig

SCHEMA = "lar-prec.repro/1"
#: repro.json larger than this is not one lar-prec wrote
MAX_RECORD_BYTES = 1 << 20
#: flags of the bundled load_and_run a repro may carry, with what their value must look like
#: (None: a flag without value). Left out on purpose: flags that name a file or folder, to read
#: or write (input, io_dump, bin_io_dump, fast_run_algo_policy, layout_transform_dump,
#: rewritten_model), and iter/warmup_iter, which replay sets itself.
_PATH_FLAGS = frozenset({"input", "io_dump", "bin_io_dump", "fast_run_algo_policy", "layout_transform_dump",
                         "rewritten_model", "iter", "warmup_iter", "help", "version"})
#: the fast-run algorithm cache a repro of a fast-run run carries, by this one name in its folder
ALGO_CACHE = "algo-policy.cache"
_INT_VALUE = re.compile(r"-?[0-9]{1,6}\Z")
_WORD_VALUE = re.compile(r"[a-z0-9_]{1,32}\Z")
ALLOWED_FLAGS: Dict[str, Optional["re.Pattern[str]"]] = {
    name: (None if kind == "bool" else _INT_VALUE if kind == "int" else _WORD_VALUE)
    for name, kind in SUPPORTED_FLAGS.items() if name not in _PATH_FLAGS
}
#: environment a repro may set: what the configurations set (name -> allowed values; None unsets)
ALLOWED_ENV: Dict[str, frozenset] = {
    k: frozenset(v for c in CONFIGS.values() for k2, v in c.env if k2 == k)
    for k in sorted({k for c in CONFIGS.values() for k, _ in c.env})
}
#: an input file of a repro: ``inputs/<name>.npy``, one path component, no leading dot
_INPUT_FILE = re.compile(r"inputs/(?!\.)[^/\\\x00-\x1f\x7f]{1,200}\.npy\Z")
_INPUT_NAME = re.compile(r"[^;:\x00-\x1f\x7f]{1,200}\Z")


@dataclass(frozen=True)
class ReproRecord:
    """The checked content of ``repro.json``: what replay acts on."""

    var_id: int
    output: str
    local_err: float
    #: (input name, file relative to the folder: ``inputs/<x>.npy``)
    inputs: Tuple[Tuple[str, str], ...]
    test: RunConfig
    reference: RunConfig


def _bad(path: Path, key: str, expected: str, found: Any) -> UsageError:
    shown = repr(found)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return UsageError(f"{path}: {key} must be {expected}, found {shown}; nothing was run")


def _strict_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


def read_record(folder: Path) -> ReproRecord:
    """``folder/repro.json`` read and checked (see the module docstring).

    Raises:
        UsageError: not a regular file, not strict JSON, another schema, or a value that is not
        what lar-prec writes there.
    """
    path = folder / "repro.json"
    raw = read_regular(path, MAX_RECORD_BYTES, "a lar-prec repro record (repro.json)")
    try:
        rec = json.loads(raw.decode("utf-8"), parse_constant=_strict_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: expected a lar-prec repro record (strict JSON): {exc}; nothing was run") from None
    except RecursionError:  # json's parser recurses per level: a record lar-prec writes has three
        raise UsageError(f"{path}: expected a lar-prec repro record (strict JSON), found values nested deeper "
                         "than Python's parser goes; nothing was run") from None
    if not isinstance(rec, dict):
        raise _bad(path, "the record", "a JSON object", type(rec).__name__)
    if rec.get("schema") != SCHEMA:
        raise _bad(path, "'schema'", repr(SCHEMA), rec.get("schema"))
    var = rec.get("var")
    if not isinstance(var, dict):
        raise _bad(path, "'var'", "an object", var)
    vid = var.get("id")
    if not isinstance(vid, int) or isinstance(vid, bool) or vid < 0:
        raise _bad(path, "'var.id'", "a var id (an integer >= 0)", vid)
    output = var.get("output")
    if not isinstance(output, str) or not output or _has_control(output):
        raise _bad(path, "'var.output'", "a var name", output)
    err = rec.get("local_err")
    if err is not None and (not isinstance(err, (int, float)) or isinstance(err, bool) or not math.isfinite(err)):
        raise _bad(path, "'local_err'", "a finite number or null", err)
    return ReproRecord(vid, output, float(err or 0.0), _inputs(path, rec.get("inputs")),
                       _config(path, rec, "test"), _config(path, rec, "reference"))


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _inputs(path: Path, value: Any) -> Tuple[Tuple[str, str], ...]:
    if not isinstance(value, str) or not value:
        raise _bad(path, "'inputs'", "'name:inputs/<file>.npy[;...]'", value)
    items: List[Tuple[str, str]] = []
    for item in value.split(";"):
        name, sep, file = item.partition(":")
        if not sep or not _INPUT_NAME.match(name):
            raise _bad(path, "'inputs'", "'name:inputs/<file>.npy' items", item)
        if not _INPUT_FILE.match(file) or ".." in file.split("/"):
            raise _bad(path, "'inputs'", "files of the folder's inputs/ (no '..', no absolute path)", file)
        if any(name == n or file == f for n, f in items):
            raise _bad(path, "'inputs'", "each input name and file once", item)
        items.append((name, file))
    return tuple(items)


def _config(path: Path, rec: Mapping[str, Any], side: str) -> RunConfig:
    block = rec.get(side)
    if not isinstance(block, dict):
        raise _bad(path, f"'{side}'", "an object", block)
    name = block.get("name")
    if name not in CONFIGS:
        raise _bad(path, f"'{side}.name'", f"a configuration ({', '.join(CONFIGS)})", name)
    flags = block.get("flags")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise _bad(path, f"'{side}.flags'", "a list of strings", flags)
    check_flags(path, side, flags)
    env = block.get("env")
    if not isinstance(env, list):
        raise _bad(path, f"'{side}.env'", "a list of [name, value] pairs", env)
    pairs: List[Tuple[str, Optional[str]]] = []
    for e in env:
        if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and (e[1] is None or isinstance(e[1], str))):
            raise _bad(path, f"'{side}.env'", "[name, value] pairs", e)
        allowed = ALLOWED_ENV.get(e[0])
        if allowed is None:
            raise _bad(path, f"'{side}.env'", f"variables a configuration sets ({', '.join(sorted(ALLOWED_ENV))})", e[0])
        if e[1] not in allowed:
            shown = ", ".join("unset" if v is None else repr(v) for v in sorted(allowed, key=str))
            raise _bad(path, f"'{side}.env' {e[0]}", f"one of {shown}", e[1])
        pairs.append((e[0], e[1]))
    return RunConfig(name, tuple(flags), tuple(pairs), CONFIGS[name].description)


def check_flags(path: Path, side: str, flags: List[str]) -> None:
    """Each flag one of :data:`ALLOWED_FLAGS`, spelled ``--name``, ``--name=value`` or ``--name value``."""
    i = 0
    while i < len(flags):
        tok = flags[i]
        if not tok.startswith("--") or tok.startswith("---"):
            raise _bad(path, f"'{side}.flags'", "load_and_run flags (--name)", tok)
        body, eq, value = tok[2:].partition("=")
        key = body.replace("-", "_")
        if key == "fast_run_algo_policy":  # only the folder's own cache, by its fixed name
            if not eq:
                i += 1
                value = flags[i] if i < len(flags) else ""
            if value != ALGO_CACHE:
                raise _bad(path, f"'{side}.flags' {tok}", f"the folder's own cache {ALGO_CACHE!r}", value)
            i += 1
            continue
        if key not in ALLOWED_FLAGS:
            raise _bad(path, f"'{side}.flags'", "flags of the bundled load_and_run that read and write no file", tok)
        pattern = ALLOWED_FLAGS[key]
        if pattern is None:
            if eq and value.lower() not in ("true", "false", "1", "0"):
                raise _bad(path, f"'{side}.flags' {tok}", "a flag without value", value)
        else:
            if not eq:
                i += 1
                if i >= len(flags):
                    raise _bad(path, f"'{side}.flags' {tok}", "a value after it", None)
                value = flags[i]
            if not pattern.match(value):
                raise _bad(path, f"'{side}.flags' {tok}", f"a value like {pattern.pattern!r}", value)
        i += 1


def read_regular(path: Path, limit: Optional[int], what: str) -> bytes:
    """The bytes of ``path``, which must be a regular file, not reached through a symlink
    (a FIFO or device would hang or never end: refused without blocking).

    Raises:
        UsageError: missing, a link, not a regular file, larger than ``limit``, unreadable.
    """
    fd = _open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise UsageError(f"{path}: expected {what} of at most {limit} bytes, found {size}; nothing was run")
        chunks = []
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _open_regular(path: Path, what: str) -> int:
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UsageError(f"{path}: expected {what}: {exc.strerror}; nothing was run") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{path}: expected {what}, found a symbolic link (a repro folder holds files only); "
                         "nothing was run")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: expected {what} (a regular file), found something else; nothing was run")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"{path}: expected {what}: {exc.strerror}; nothing was run") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between lstat and open
        os.close(fd)
        raise UsageError(f"{path}: expected {what} (a regular file); nothing was run")
    return fd


def private_copy(folder: Path, rec: ReproRecord, work: Path) -> None:
    """Copy what replay reads (``model.mge``, ``reference.npy``, ``observed.npy``, the input
    files) from ``folder`` into ``work``, each opened by :func:`_open_regular`; ``inputs/``
    itself must be a real folder of ``folder``. Before a byte is copied, each file's header is
    checked against its size (:func:`_check_model`, :func:`_npy_layout`: a header claiming
    terabytes or a sparse file of zeros is refused), both outputs must have one shape, and the
    working folder must have room for them all; the copy goes in blocks (bounded memory)."""
    inputs_dir = folder / "inputs"
    if inputs_dir.is_symlink() or not inputs_dir.is_dir():
        raise UsageError(f"{inputs_dir}: expected the repro's inputs folder (a real folder, not a link); nothing was run")
    names = ["model.mge", "reference.npy", "observed.npy"] + [f for _, f in rec.inputs]
    if any(ALGO_CACHE in c.flags for c in (rec.test, rec.reference)):
        names.append(ALGO_CACHE)
    what = {"model.mge": "the repro's model", "reference.npy": "the reference output (.npy)",
            "observed.npy": "the observed output (.npy)"}
    fds: Dict[str, int] = {}
    try:
        shapes: Dict[str, Tuple[int, ...]] = {}
        for name in names:
            fds[name] = fd = _open_regular(folder / name, what.get(name, "an input (.npy)"))
            size = os.fstat(fd).st_size
            if name == "model.mge":
                _check_model(folder / name, fd, size)
            elif name != ALGO_CACHE:
                shapes[name] = _npy_layout(folder / name, fd, size, what.get(name, "an input (.npy)"))[0]
        if shapes["observed.npy"] != shapes["reference.npy"]:
            raise UsageError(f"{folder / 'reference.npy'}: expected the output's shape, that of observed.npy "
                             f"{shapes['observed.npy']}, found {shapes['reference.npy']}; nothing was run")
        need = sum(_room(fd) for fd in fds.values())
        free = shutil.disk_usage(work).free
        if need > free:
            raise UsageError(f"{folder}: its files take {need} bytes, the working folder {work} has {free} free; "
                             "nothing was run")
        (work / "inputs").mkdir(parents=True)
        for name, fd in fds.items():
            _copy(fd, folder / name, work / name)
    finally:
        for fd in fds.values():
            os.close(fd)


def _copy(fd: int, shown: Path, dest: Path) -> None:
    """Copy the file open as ``fd`` to ``dest`` in blocks, its holes left holes (a sparse file
    takes no more room in the copy than in the folder)."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        size = os.fstat(fd).st_size
        for start, end in _data_extents(fd, size):
            while start < end:
                block = os.pread(fd, min(1 << 20, end - start), start)
                if not block:
                    break
                os.pwrite(out, block, start)
                start += len(block)
        os.ftruncate(out, size)
    except OSError as exc:
        raise UsageError(f"{shown}: cannot copy it into the working folder {dest.parent}: {exc.strerror or exc}; "
                         "nothing was run") from None
    finally:
        os.close(out)


def _data_extents(fd: int, size: int) -> List[Tuple[int, int]]:
    """(start, end) of each run of data in the file, holes skipped (SEEK_DATA/SEEK_HOLE; the
    whole file where the platform cannot say)."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    out, pos = [], 0
    try:
        while pos < size:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, pos))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no data after pos: the rest is a hole
            return out
        return [(0, size)]  # the filesystem does not tell holes apart
    return out


def _room(fd: int) -> int:
    """Bytes the file takes on disk (its holes take none), at most its size."""
    st = os.fstat(fd)
    return min(st.st_size, getattr(st, "st_blocks", st.st_size // 512 + 1) * 512)


#: the starts of a MegEngine model file: FBS (``MGBC``, as the layerwise build dumps it), and
#: FBS v2 (``mgv2`` after a size prefix and the root offset)
_MODEL_V1 = b"MGBC"
_MODEL_V2 = b"mgv2"


def _check_model(path: Path, fd: int, size: int) -> None:
    """A model lar-prec wrote starts with its format's magic (v2: and its size prefix is the
    file's size), and is not mostly holes (load_and_run reads a model whole): a file of zeros,
    however large, is refused without reading it."""
    head = os.pread(fd, 12, 0)
    if not (head[:4] == _MODEL_V1 or (head[8:12] == _MODEL_V2 and int.from_bytes(head[:4], "little") == size - 4)):
        raise UsageError(f"{path}: expected a MegEngine model (.mge, starting with {_MODEL_V1.decode()!r} or a "
                         f"size-prefixed {_MODEL_V2.decode()!r}), found {head!r} at its start; nothing was run")
    data = sum(end - start for start, end in _data_extents(fd, size))
    if data < size // 2:
        raise UsageError(f"{path}: expected a MegEngine model, found a sparse file ({data} of its {size} bytes "
                         "hold data); nothing was run")


def _npy_layout(path: Path, fd: int, size: int, what: str) -> Tuple[Tuple[int, ...], Any]:
    """(shape, dtype) of a ``.npy`` from its header, which must describe exactly the bytes the
    file holds, in a dtype of plain numbers (no pickle, string or record)."""
    npy_format = np.lib.format
    with os.fdopen(os.dup(fd), "rb") as fh:
        try:
            version = npy_format.read_magic(fh)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}, expected 1.0 or 2.0")
            header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, _fortran, dtype = header(fh)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"{path}: expected {what}, a .npy array of numbers: {exc}; nothing was run") from None
        offset = fh.tell()
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
        raise UsageError(f"{path}: expected {what}, a .npy array of numbers, found dtype {dtype}; nothing was run")
    need = math.prod(shape) * dtype.itemsize
    if size - offset != need:
        raise UsageError(f"{path}: expected {what} whose header tells its size: shape {shape} of {dtype} is "
                         f"{need} bytes of data, the file holds {size - offset}; nothing was run")
    return tuple(shape), dtype


def load_npy(path: Path, shown: Path) -> Any:
    """A ``.npy`` of the private copy as an array (never a pickle).

    Raises:
        UsageError: not a .npy of plain numbers (named by ``shown``, the file in the repro folder).
    """
    try:  # mapped, not read: its header was checked against its size, its pages load when compared
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{shown}: expected a .npy array of numbers ({exc}); nothing was run") from None
