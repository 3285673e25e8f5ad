"""The ``--input`` grammar of load_and_run, shared by the runner and the bundled load_and_run.

An ``--input`` value holds items joined by ``;``; each item is ``name:value`` (``data`` when
the name is left out), like ``helpers/data_parser.cpp`` of the real binary (reference 1.4):

* ``name:file.npy`` / ``name:file.json``: data from a file (a regular file, not a FIFO);
* ``name:{d0,d1,...}``: shape only (the runner makes seeded random data, the bundled
  load_and_run fills bytes 0x01 like the real one);
* ``name:[v0,v1,...]``: literal data (int32, float32 when a ``.`` appears);
* ``name:random[LOW,HIGH]@SEED``: seeded random data of the model's own shape and dtype
  (lar-prec's, not load_and_run's; the range and the seed may each be left out:
  :data:`RANDOM_FLOAT`, :data:`RANDOM_INT`, and the seed from ``--seed``).

Everything here is numpy-only and raises :class:`InputSpecError` (a UsageError: exit 2), with a
message naming the item or file and what was expected.
"""
from __future__ import annotations

import ast
import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.errors import UsageError

from lar_prec.records import PathLike  # noqa: E402

#: numpy dtypes megenginelite can feed (reference 4.2)
NPY_DTYPES = ("float32", "int32", "int16", "uint16", "int8", "uint8", "float16")
#: largest input lar-prec makes from a shape (a guard against a typo eating the machine's memory)
MAX_GENERATED_BYTES = 4 << 30
#: largest seed of random data (numpy's SeedSequence takes any non-negative integer; 2**63 keeps
#: ``seed + k`` an ordinary number in inputs.json)
MAX_SEED = (1 << 63) - 1
_SPEC_FORMS = ("name:file.npy, name:file.json, name:{d0,d1,...} (shape only), name:[v0,v1,...] (data) "
               "or name:random[LOW,HIGH]@SEED")
#: the range of ``random`` data without one: floats uniform in [-1, 1), integers from 0 to 9
RANDOM_FLOAT = (-1.0, 1.0)
RANDOM_INT = (0, 9)
_RANDOM = re.compile(r"random(?:\[(?P<range>[^\]]*)\])?(?:@(?P<seed>.*))?", re.DOTALL)


class InputSpecError(UsageError):
    """An ``--input`` item, or the file it names, is not what load_and_run can take."""


@dataclass(frozen=True)
class InputItem:
    """One ``--input`` item: the input name and the kind of value given for it."""

    name: str
    kind: str  # "npy" | "json" | "shape" | "literal" | "image" | "random"
    text: str  # the item's value text (path, ``{1,3}`` or ``[1,2]``)

    @property
    def spec(self) -> str:
        """The item as the user would write it."""
        return f"{self.name}:{self.text}"


def split_input_specs(specs: "str | Iterable[str]") -> List[str]:
    """Flatten ``--input`` values (each may hold several ``;``-joined items) into items."""
    if isinstance(specs, str):
        specs = [specs]
    items: List[str] = []
    for spec in specs:
        items.extend(s.strip() for s in str(spec).split(";") if s.strip())
    return items


def split_input(text: str) -> List[InputItem]:
    """Split an ``--input`` string into items, like ``helpers/data_parser.cpp`` (reference 1.4).

    Items are joined by ``;``; the name is the text up to the first ``:`` (``data`` when there
    is none). The kind follows from the value: ``.npy``/``.json``/``.ppm``/``.pgm`` files,
    ``{d0,d1}`` shape only, ``[..]`` literal data.
    """
    items: List[InputItem] = []
    for raw in split_input_specs(text):
        name, sep, value = raw.partition(":")
        if not sep:
            name, value = "data", raw
        name, value = name.strip(), value.strip()
        low = value.lower()
        if low.endswith(".npy"):
            kind = "npy"
        elif low.endswith(".json"):
            kind = "json"
        elif low.endswith((".ppm", ".pgm")):
            kind = "image"
        elif value.startswith("{") and value.endswith("}"):
            kind = "shape"
        elif value.startswith("[") and value.endswith("]"):
            kind = "literal"
        elif low.startswith("random"):
            kind = "random"
        else:
            raise InputSpecError(f"cannot parse --input item {raw!r}: expected {_SPEC_FORMS}")
        if not name:
            raise InputSpecError(f"--input item {raw!r} has an empty input name")
        items.append(InputItem(name=name, kind=kind, text=value))
    return items


def parse_shape(text: str, itemsize: int = 4) -> Tuple[int, ...]:
    """Parse ``{1,3,224,224}`` into a shape tuple.

    Refuses negative and empty shapes, and shapes whose data (``itemsize`` bytes an element)
    would pass :data:`MAX_GENERATED_BYTES`.
    """
    inner = text.strip()[1:-1]
    parts = [p.strip() for p in inner.split(",") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise InputSpecError(f"bad shape {text!r}: expected {{d0,d1,...}} with integers") from None
    if not shape or any(d < 0 for d in shape):
        raise InputSpecError(f"bad shape {text!r}: expected {{d0,d1,...}} with non-negative integers")
    nbytes = math.prod(shape) * itemsize
    if nbytes > MAX_GENERATED_BYTES:
        raise InputSpecError(f"shape {text!r} asks for {_size(nbytes)} of data; expected a shape of at most "
                             f"{_size(MAX_GENERATED_BYTES)} (give the data as an .npy file instead)")
    return shape


@dataclass(frozen=True)
class RandomSpec:
    """``random[LOW,HIGH]@SEED``: the range (None: the dtype's default) and the seed (None: ``--seed``)."""

    low: Optional[float] = None
    high: Optional[float] = None
    seed: Optional[int] = None
    integral: bool = True  # LOW and HIGH written without a '.' or an exponent


def parse_random(text: str, item: Optional[str] = None) -> RandomSpec:
    """Parse ``random``, ``random[LOW,HIGH]``, ``random@SEED`` or ``random[LOW,HIGH]@SEED``.

    LOW < HIGH, both finite numbers; SEED an integer in ``[0, 2**63)``. Raises InputSpecError
    (one line, exit 2) for anything else.
    """
    form = "random[LOW,HIGH]@SEED (the range and the seed optional, e.g. random[-1,1]@7)"
    m = _RANDOM.fullmatch(text.strip())
    text = item or text  # the messages name the whole --input item
    if m is None:
        raise InputSpecError(f"bad random input {text!r}: expected {form}")
    low = high = None
    integral = True
    if m.group("range") is not None:
        parts = [p.strip() for p in m.group("range").split(",")]
        try:
            if len(parts) != 2:
                raise ValueError
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise InputSpecError(f"bad range in random input {text!r}: expected [LOW,HIGH] with two numbers, "
                                 f"as in {form}") from None
        if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
            raise InputSpecError(f"bad range in random input {text!r}: expected finite numbers with LOW < HIGH")
        integral = all(re.fullmatch(r"[+-]?\d+", p) for p in parts)
    seed = None
    if m.group("seed") is not None:
        raw = m.group("seed").strip()
        if not re.fullmatch(r"\d+", raw) or int(raw) > MAX_SEED:
            raise InputSpecError(f"bad seed in random input {text!r}: expected @SEED, an integer from 0 to {MAX_SEED}")
        seed = int(raw)
    return RandomSpec(low, high, seed, integral)


def _size(nbytes: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes} bytes"  # pragma: no cover


def parse_literal(text: str) -> np.ndarray:
    """Parse ``[1,2,3]`` / ``[[1.5,2],[3,4]]``: int32 data, float32 if any ``.`` appears."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputSpecError(f"bad literal input {text!r}: expected [v0,v1,...] (nested for more dims)") from None

    def check(v: Any) -> bool:
        if isinstance(v, list):
            return all(check(x) for x in v)
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not isinstance(value, list) or not check(value):
        raise InputSpecError(f"bad literal input {text!r}: expected a bracketed list of numbers")
    is_float = "." in text or any(isinstance(x, float) for x in _flatten(value))
    try:
        return np.array(value, dtype=np.float32 if is_float else np.int32)
    except (ValueError, OverflowError) as exc:
        raise InputSpecError(f"bad literal input {text!r}: {exc}") from None


def _flatten(v: Any) -> List[Any]:
    if isinstance(v, list):
        out: List[Any] = []
        for x in v:
            out.extend(_flatten(x))
        return out
    return [v]


def check_seed(seed: object) -> int:
    """The seed of random data for shape-only inputs: an integer in ``[0, 2**63)``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InputSpecError(f"--seed {seed!r}: expected an integer from 0 to {MAX_SEED}")
    return seed


def path_problem(path: PathLike) -> Optional[str]:
    """Why ``path`` is not a readable regular file (``"does not exist"``, ``"is a folder"``,
    ``"is a symlink loop"``, ``"is not a regular file (a FIFO)"``...), or None when it is one.

    Never opens the file: opening a FIFO would block until someone writes to it.
    """
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return "is a broken symlink" if os.path.islink(p) else "does not exist"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop"
        if exc.errno == errno.ENOTDIR:
            return "does not exist (a parent is a file, not a folder)"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, expected a file"
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special")
        return f"is not a regular file ({kind})"
    return None


def check_file(path: PathLike, what: str) -> Path:
    """``path`` when it is a regular file; else InputSpecError ``<what> <path> <problem>``."""
    problem = path_problem(path)
    if problem:
        raise InputSpecError(f"{what} {os.fspath(path)} {problem}")
    return Path(path)


def _strict_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


#: largest JSON or text file a command reads unless its caller says otherwise (a report of a
#: large model is tens of megabytes; a file larger than this is not one lar-prec wrote)
READ_LIMIT = 1 << 30
#: what a file nested deeper than its parser goes is told (JSON and TOML parsers recurse once per
#: level, to Python's recursion limit of about 1000: lar-prec's own files nest a few levels)
TOO_DEEP = "is nested deeper than Python's {} parser goes (about 1000 levels); expected a file of a few levels"


def read_file_bytes(path: PathLike, what: str, *, limit: Optional[int] = READ_LIMIT) -> bytes:
    """The bytes of ``path``, read as every reader of a user's file reads: a regular file only (a
    FIFO or device refused before opening and, when swapped in after the check, without
    blocking), at most ``limit`` bytes (None: any size).

    Raises:
        InputSpecError: one line naming the file and what was expected (``what``).
    """
    check_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in after the check must not hang
    except OSError as exc:
        raise InputSpecError(f"{what} {os.fspath(path)} cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputSpecError(f"{what} {os.fspath(path)} is not a regular file")
        if limit is not None and st.st_size > limit:
            raise InputSpecError(f"{what} {os.fspath(path)} is {st.st_size} bytes; expected at most {limit}")
        try:
            raw = fh.read() if limit is None else fh.read(limit + 1)
        except OSError as exc:
            raise InputSpecError(f"{what} {os.fspath(path)} cannot be read ({exc.strerror})") from None
    if limit is not None and len(raw) > limit:  # grew while read
        raise InputSpecError(f"{what} {os.fspath(path)} is over {limit} bytes; expected at most {limit}")
    return raw


def decode_utf8(raw: bytes, what: str, path: PathLike) -> str:
    """``raw`` as UTF-8 text; else InputSpecError ``<what> is not UTF-8: FILE line N``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputSpecError(f"{what} is not UTF-8: {os.fspath(path)} line {line} (byte {exc.start}: "
                             f"{raw[exc.start:exc.start + 1]!r}); expected UTF-8 text") from None


def read_text_file(path: PathLike, what: str, *, limit: Optional[int] = READ_LIMIT) -> str:
    """The UTF-8 text of ``path``, read as :func:`read_file_bytes` reads (a NUL byte, which no
    text lar-prec reads holds, is refused as binary).

    Raises:
        InputSpecError: not a regular file, too large, not UTF-8 (naming the line).
    """
    raw = read_file_bytes(path, what, limit=limit)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputSpecError(f"{what} is not UTF-8: {os.fspath(path)} line 1 (a UTF-16 byte-order mark; "
                             "save it as UTF-8)")
    text = decode_utf8(raw, what, path)
    nul = text.find("\0")
    if nul >= 0:
        raise InputSpecError(f"{what} {os.fspath(path)} is binary, expected text: a NUL byte on line "
                             f"{text.count(chr(10), 0, nul) + 1}")
    return text


def read_json_file(path: PathLike, what: str, *, limit: Optional[int] = READ_LIMIT, strict: bool = True) -> Any:
    """The JSON value of ``path`` (``strict``: no ``NaN``/``Infinity``), read as every reader of a
    user's file reads (:func:`read_text_file`: a regular file only, at most ``limit`` bytes,
    UTF-8), nesting as deep as Python's parser goes. Every JSON file lar-prec reads from disk
    comes through here (tests/test_strict_json.py keeps it so).

    Raises:
        InputSpecError: one line naming the file and what was expected (``what``).
    """
    text = read_text_file(path, what, limit=limit)
    try:
        return json.loads(text, parse_constant=_strict_constant if strict else None)
    except ValueError as exc:
        raise InputSpecError(f"{what} {os.fspath(path)} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InputSpecError(f"{what} {os.fspath(path)} {TOO_DEEP.format('JSON')}") from None


_JSON_TYPES = {"float32": "float32", "float": "float32", "int32": "int32", "int": "int32",
               "int8": "int8", "uint8": "uint8"}


def load_json_inputs(path: str) -> Dict[str, np.ndarray]:
    """Read a load_and_run ``.json`` input file: ``{name: {shape, type, raw}}``."""
    data = read_json_file(path, "input file", limit=None, strict=False)  # load_and_run's own format
    if not isinstance(data, dict):
        raise InputSpecError(f"input file {path}: expected an object {{name: {{shape, type, raw}}}}")
    out: Dict[str, np.ndarray] = {}
    for name, spec in data.items():
        if not isinstance(spec, dict) or not {"shape", "raw"} <= set(spec):
            raise InputSpecError(f"input file {path}: entry {name!r} needs \"shape\" and \"raw\"")
        tname = str(spec.get("type", "float32"))
        if tname not in _JSON_TYPES:
            raise InputSpecError(f"input file {path}: entry {name!r} has unsupported type {tname!r} "
                                 f"(one of {', '.join(_JSON_TYPES)})")
        try:
            shape = tuple(int(d) for d in spec["shape"])
            raw = np.asarray(spec["raw"], dtype=_JSON_TYPES[tname]).ravel()
        except (TypeError, ValueError) as exc:
            raise InputSpecError(f"input file {path}: entry {name!r}: {exc}") from None
        if raw.size != int(np.prod(shape, dtype=np.int64)):
            raise InputSpecError(f"input file {path}: entry {name!r} has {raw.size} values for shape {list(shape)}")
        out[name] = raw.reshape(shape)
    return out


def load_npy(path: str) -> np.ndarray:
    """Load an ``.npy`` input, in native byte order and C order; refuse dtypes lite cannot feed."""
    check_file(path, "input file")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputSpecError(f"cannot read input file {path}: {exc}") from None
    except MemoryError:
        raise InputSpecError(f"cannot read input file {path}: its header asks for more memory than there is") from None
    if arr.dtype.name not in NPY_DTYPES:
        raise InputSpecError(
            f"input file {path} has dtype {arr.dtype.name}; load_and_run inputs must be one of "
            f"{', '.join(NPY_DTYPES)}"
        )
    # The real parser ignores byte order and fortran_order; converting is what the user meant.
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    return np.ascontiguousarray(arr)


def check_not_empty(name: str, shape: Tuple[int, ...], source: str) -> None:
    """Refuse a zero-size input: megenginelite cannot feed an empty tensor."""
    if 0 in shape:
        raise InputSpecError(f"input {name!r} from {source} has no elements (shape {list(shape)}); "
                             "expected at least one element in every dimension")
