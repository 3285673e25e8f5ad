"""What a load_and_run can do and which MegEngine it runs, read from what it prints.

* Its flags: ``--helpfull`` of an external binary, asked once per binary (path, size and
  mtime) and cached for the process; gflags lists each flag as ``    -NAME (help) type: T
  default: V``. A flag the binary lacks is refused before any run (exit 2): MegEngine 1.13's
  own tool has no ``--enable-io16xc32``, which the bundled runner implements itself.
* Its versions: every run of MegEngine's load_and_run logs ``using MegBrain 1.13.0(0) and
  MegDNN 9.3.0`` on stderr, while ``--version`` prints ``load_and_run version 1.0`` in every
  build 1.7-1.13 (gflags' version string, set in ``main.cpp``).
* The model's mode: load_and_run reads its first 16 bytes (``models/model.cpp``); anything but
  a MegBrain graph's magic runs in lite mode, where ``--reproducible`` has no effect and
  ``--bin-out-dump`` aborts.

Everything here is data read from a child's output or a file's first bytes, parsed strictly;
nothing is executed. A binary whose ``--helpfull`` lists no flag (another program, a wrapper
that prints something else, a crash) is "flags unknown": nothing is refused in advance and the
runs say what fails.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Sequence, Tuple

from lar_prec.errors import UsageError
from lar_prec.lar.flags import SUPPORTED_FLAGS
from lar_prec.records import PathLike
from lar_prec.run.config import VERSION_TIMEOUT, LoadAndRun
from lar_prec.run.proc import run_bounded

#: gflags' DescribeOneFlag: four spaces, a dash, the name, a space and the help in parentheses
_FLAG_LINE = re.compile(r"^    -([a-z][a-z0-9_]{0,63}) \(", re.MULTILINE)
#: flags every load_and_run 1.7-1.13 has; a list without them is not load_and_run's
_CORE_FLAGS = frozenset({"input", "bin_io_dump", "iter", "warmup_iter"})


@dataclass(frozen=True)
class LarFlags:
    """The flags of one load_and_run: ``names`` (canonical, underscore form), or None when they
    could not be told (``why``)."""

    names: Optional[FrozenSet[str]]
    why: str = ""

    def has(self, flag: str) -> Optional[bool]:
        """Whether the binary takes ``flag`` (any spelling: ``--enable-io16xc32``); None: unknown."""
        if self.names is None:
            return None
        return canonical(flag) in self.names


def canonical(flag: str) -> str:
    """``--enable-io16xc32=x`` -> ``enable_io16xc32``."""
    return flag.lstrip("-").split("=", 1)[0].replace("-", "_")


def parse_helpfull(text: str) -> Optional[FrozenSet[str]]:
    """The flag names of gflags' ``--helpfull`` text, or None when it lists no load_and_run."""
    names = frozenset(_FLAG_LINE.findall(text or ""))
    return names if _CORE_FLAGS <= names else None


_CACHE: Dict[Tuple[str, int, int], LarFlags] = {}


def lar_flags(lar: LoadAndRun, timeout: Optional[float] = None) -> LarFlags:
    """The flags of ``lar``: the bundled runner's table, or an external binary's ``--helpfull``
    (once per binary: its path, size and mtime; at most :data:`VERSION_TIMEOUT` seconds)."""
    if lar.is_bundled:
        return LarFlags(frozenset(SUPPORTED_FLAGS))
    if lar.path is None:
        return LarFlags(None, "no binary on this machine")
    try:
        st = os.stat(lar.path)
    except OSError as exc:
        return LarFlags(None, f"cannot stat {lar.path}: {exc.strerror}")
    key = (lar.path, st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        limit = VERSION_TIMEOUT if timeout is None else min(VERSION_TIMEOUT, timeout)
        try:
            text = run_bounded([lar.path, "--helpfull"], timeout=limit)
        except OSError as exc:
            text, why = None, f"--helpfull could not start: {exc.strerror or exc}"
        else:
            why = f"--helpfull did not answer within {limit:g} s" if text is None else \
                "--helpfull listed no load_and_run flags"
        names = parse_helpfull(text or "")
        _CACHE[key] = LarFlags(names, "" if names is not None else why)
    return _CACHE[key]


_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")  # a flag's negative value, not a flag


def check_flags(lar: LoadAndRun, flags: Sequence[str], what: str, timeout: Optional[float] = None) -> None:
    """UsageError (exit 2) naming the first of ``flags`` the binary lacks (by its ``--helpfull``);
    nothing when the flags cannot be told. ``what`` says where the flag came from."""
    known = lar_flags(lar, timeout)
    for f in flags:
        if f.startswith("-") and f not in ("-", "--") and not _NUMBER.fullmatch(f) and known.has(f) is False:
            name = canonical(f)
            if name.startswith("no") and known.has(name[2:]):
                continue  # gflags' --noFLAG of a bool flag
            if lar.is_bundled:
                raise UsageError(f"{what} {f!r}: the bundled runner (lar_prec.lar) does not implement --{name}; "
                                 "run a MegEngine build of load_and_run with --lar PATH")
            raise UsageError(f"{what} {f!r}: load_and_run {lar.describe()} has no such flag "
                             f"(its --helpfull does not list --{name})")


# --------------------------------------------------------------------------- versions

#: MegEngine's load_and_run, at start: ``using MegBrain 1.13.0(0) and MegDNN 9.3.0``
_VERSIONS = re.compile(r"using MegBrain (\d{1,3}\.\d{1,3}\.\d{1,3})\((-?\d{1,9})\) and MegDNN (\d{1,3}\.\d{1,3}\.\d{1,3})")


@dataclass(frozen=True)
class BuildVersions:
    """The MegBrain and MegDNN versions a run's stderr names (``megbrain`` like ``1.13.0``,
    its patch number as MegEngine prints it in parentheses)."""

    megbrain: str
    megbrain_patch: int
    megdnn: str


def versions_from_stderr(text: str) -> Optional[BuildVersions]:
    """The first ``using MegBrain X(P) and MegDNN Y`` line of a run's stderr, or None."""
    m = _VERSIONS.search(text or "")
    return BuildVersions(m.group(1), int(m.group(2)), m.group(3)) if m else None


def read_versions(stderr_path: PathLike, limit: int = 1 << 16) -> Optional[BuildVersions]:
    """:func:`versions_from_stderr` of the start of a run's stderr file (the line comes first)."""
    try:
        with open(stderr_path, "r", encoding="utf-8", errors="replace") as fh:
            return versions_from_stderr(fh.read(limit))
    except OSError:
        return None


# --------------------------------------------------------------------------- model mode

_MDL_MAGIC = (b"mgb0001", b"mgb0000a", b"MGBS", b"MGBC", b"mgbtest0")


def model_mode(model: PathLike) -> Optional[str]:
    """``mdl`` or ``lite``: how MegEngine's load_and_run runs ``model``, from its first 16 bytes
    as ``models/model.cpp`` reads them; None when they cannot be read."""
    try:
        with open(model, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return None
    if len(head) < 16:
        return None
    if any(head.startswith(m) for m in _MDL_MAGIC) or head[8:12] == b"mgv2":
        return "mdl"
    return "lite"


def check_model_mode(model: PathLike) -> str:
    """The model's mode, refusing (exit 2) a file load_and_run cannot even tell (under 16 bytes)."""
    mode = model_mode(model)
    if mode is None:
        raise UsageError(f"model file {model}: fewer than 16 bytes, load_and_run cannot read its header")
    return mode


# --------------------------------------------------------------------------- inputs it can read

#: the ``.npy`` dtypes MegEngine's load_and_run reads (``helpers/data_parser.cpp``, 1.7-1.13);
#: anything else gives it an invalid dtype
NPY_DTYPES = ("float32", "int32", "int16", "uint16", "int8", "uint8")


def check_input_dtypes(items: Sequence[Tuple[str, str, str]], who: str) -> None:
    """UsageError (exit 2) for the first input ``(name, dtype, source)`` an external
    load_and_run cannot read from ``.npy`` (float16: lar-prec writes float16 data for a float16
    model input, MegEngine's reader knows f4 i4 i2 u2 i1 u1 only)."""
    for name, dtype, source in items:
        if dtype and dtype not in NPY_DTYPES:
            raise UsageError(
                f"input {name!r} ({source}) is {dtype}: {who} cannot read {dtype} .npy inputs (MegEngine's "
                f"load_and_run reads {', '.join(NPY_DTYPES)} only); run it with the bundled runner (--lar bundled)")
