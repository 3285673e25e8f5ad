"""Readers (and a writer) for what ``load_and_run`` dumps: binary ``--bin-io-dump`` folders
and text ``--io-dump`` files, turned into typed, frozen records.

Binary files (``load_and_run.md`` 3.4) are read lazily: :func:`read_binary_dump` reads only
the 40-byte header and the title; values come from a read-only memory map when
:meth:`BinaryDump.array` or :meth:`BinaryDump.chunks` is called. Every malformed file raises
one :class:`~lar_prec.errors.DumpFormatError` naming the file, the byte offset and what was
expected there.

Example::

    folder = DumpFolder("run/naive/dump")
    for dump in folder:                      # execution order
        print(dump.var.id, dump.var.name, dump.var.opr_type, dump.array().max())
    text = read_text_dump("run/naive/io.txt")
    text.last()[11].val.mean
"""
from __future__ import annotations

import heapq
import logging
import os
import re
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.errors import DumpFolderError, DumpFormatError, UsageError

log = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "DType",
    "DTYPES",
    "dtype_by_name",
    "VarInfo",
    "BinaryDump",
    "read_binary_dump",
    "write_binary_dump",
    "dump_file_name",
    "contiguous_layout",
    "format_title",
    "parse_title",
    "DumpFolder",
    "TextDep",
    "TextStats",
    "TextVar",
    "TextDump",
    "read_text_dump",
    "HEADER_SIZE",
    "MAX_NDIM",
    "INCOMPLETE_MARKER",
]

#: bytes before the title: name_len, dtype, max_ndim, shape[7], all uint32 little-endian
HEADER_SIZE = 40
#: MEGDNN_MAX_NDIM, written into every header
MAX_NDIM = 7
_HEADER = struct.Struct("<10I")


# ============================================================================ dtypes


@dataclass(frozen=True)
class DType:
    """One ``DTypeEnum`` entry of MegDNN (``load_and_run.md`` 3.4).

    ``storage`` is the numpy dtype of the raw bytes in a dump (``storage_str``, e.g. ``"<f4"``),
    or ``None`` for sub-byte types that numpy cannot address. ``bits`` is the size of one
    element in bits, used to check a file's data size even when the values cannot be decoded.
    """

    code: int
    name: str
    storage_str: Optional[str]
    kind: str  # "float" | "int" | "bool" | "quantized" | "byte" | "lowbit" | "complex"
    bits: int = 0

    @property
    def storage(self) -> Optional[np.dtype]:
        """The numpy dtype of the raw bytes, or None (sub-byte types). Made on first use:
        indexing and planning a comparison need no numpy, which `lar-prec compare` then
        imports while its worker already compares (start-up time)."""
        if self.storage_str is None:
            return None
        d = _STORAGE.get(self.storage_str)
        if d is None:
            d = _STORAGE[self.storage_str] = np.dtype(self.storage_str)
        return d

    @property
    def is_quantized(self) -> bool:
        """True for every Quantized* type (also the 4- and 1-bit ones): values are raw
        integers and the scale/zero point are not stored in the dump."""
        return self.name.startswith("Quantized")

    @property
    def decodable(self) -> bool:
        """True when :meth:`BinaryDump.array` can turn the bytes into a numpy array."""
        return self.storage_str is not None

    def value_dtype(self) -> np.dtype:
        """The dtype of :meth:`BinaryDump.array`: float32 for BFloat16, else ``storage``.

        Raises:
            UsageError: for sub-byte types, which have no numpy dtype.
        """
        if self.name == "BFloat16":
            return np.dtype(np.float32)
        if self.storage is None:
            raise UsageError(f"dtype {self.name} (code {self.code}) is a sub-byte type with no numpy dtype")
        return self.storage

    def nbytes(self, size: int) -> int:
        """Bytes that ``size`` elements take in a dump (sub-byte types are packed)."""
        return (size * self.bits + 7) // 8


_STORAGE: Dict[str, "np.dtype"] = {}


#: every ``DTypeEnum`` value of MegDNN (dnn/include/megdnn/dtype.h), by code
DTYPES: Dict[int, DType] = {
    d.code: d
    for d in (
        DType(0, "Float32", "<f4", "float", 32),
        DType(1, "Uint8", "u1", "int", 8),
        DType(2, "Int8", "i1", "int", 8),
        DType(3, "Int16", "<i2", "int", 16),
        DType(4, "Int32", "<i4", "int", 32),
        DType(5, "IntB1", None, "lowbit", 1),
        DType(6, "IntB2", None, "lowbit", 2),
        DType(7, "IntB4", None, "lowbit", 4),
        DType(8, "Byte", "u1", "byte", 8),
        DType(9, "Float16", "<f2", "float", 16),
        DType(10, "UintB4", None, "lowbit", 4),
        # raw bf16 bits; BinaryDump.array() widens them to float32
        DType(11, "BFloat16", "<u2", "float", 16),
        DType(12, "Bool", "?", "bool", 8),
        DType(13, "Uint16", "<u2", "int", 16),
        DType(14, "Complex64", "<c8", "complex", 64),
        DType(100000, "Quantized8Asymm", "u1", "quantized", 8),
        DType(100001, "QuantizedS32", "<i4", "quantized", 32),
        DType(100002, "QuantizedS8", "i1", "quantized", 8),
        DType(100003, "Quantized4Asymm", None, "lowbit", 4),
        DType(100004, "QuantizedS4", None, "lowbit", 4),
        DType(100005, "QuantizedS16", "<i2", "quantized", 16),
        DType(100006, "QuantizedS1", None, "lowbit", 1),
    )
}
_DTYPES_BY_NAME: Dict[str, DType] = {d.name.lower(): d for d in DTYPES.values()}

# numpy dtype (its .str) -> the DTypeEnum code a writer uses when the caller gives no dtype
_NUMPY_TO_CODE = {"<f4": 0, "|u1": 1, "|i1": 2, "<i2": 3, "<i4": 4, "<f2": 9, "|b1": 12, "<u2": 13, "<c8": 14}


def dtype_by_name(name: str) -> DType:
    """The :class:`DType` called ``name`` (case-insensitive), e.g. ``"QuantizedS8"``.

    Raises:
        UsageError: the name is not a MegDNN dtype; the message lists the known names.
    """
    d = _DTYPES_BY_NAME.get(name.strip().lower())
    if d is None:
        known = ", ".join(x.name for x in DTYPES.values())
        raise UsageError(f"unknown dtype name {name!r}; known: {known}")
    return d


def _dtype_of(dtype: Union[int, str, DType]) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return dtype_by_name(dtype)
    if int(dtype) not in DTYPES:
        raise UsageError(f"unknown dtype code {dtype}; known: {sorted(DTYPES)}")
    return DTYPES[int(dtype)]


# ============================================================================ titles


@dataclass(frozen=True)
class VarInfo:
    """One ``INFO(var)`` block of a binary-dump title (``cg::dump_var_info``).

    ``shape_infer``/``value_infer`` are the two trailing InferType flags (1 NO_DESC, 2 CONST,
    4 RT_STATIC, 8 MISSING_INP); their defaults are the most common values in real dumps.
    """

    id: int
    name: str
    owner: str
    opr_type: str
    opr_id: Optional[int]
    dtype: str
    shape: Tuple[int, ...]
    layout: Optional[str]
    slot: int
    comp_node: str
    storage: str
    shape_infer: int = 4
    value_infer: int = 1


class _TitleError(Exception):
    """Internal: where (character index) and what the title parser expected."""

    def __init__(self, pos: int, expected: str, found: str = "") -> None:
        super().__init__(expected)
        self.pos = pos
        self.expected = expected
        self.found = found


_INFO_HEAD = re.compile(r"\{id:(\d{1,20}), (layout|shape):")
_INFO_DTYPE = re.compile(r", ([A-Za-z][A-Za-z0-9_]*), owner:")
# the comp node string has no comma ("CompNode(\"cpu0:0\" from \"cpu0:0\")"), which keeps a
# ", slot:" inside a var name from matching here
_INFO_TAIL = re.compile(r", slot:(\d{1,20}), ([^,]*), ([sd]), (-?\d{1,20}), (-?\d{1,20})\}")
# MegEngine's type names are identifiers; an empty one is accepted so that anything
# format_title writes reads back
_OWNER_NAME = re.compile(r"(.*?)\{([A-Za-z0-9_:]*)\}, name:(.*)\Z", re.DOTALL)
_DTYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_OPR_TYPE = re.compile(r"[A-Za-z0-9_:]*\Z")
_OPR_ID = re.compile(r"\[(\d{1,20})\]\Z")
_LAYOUT_DIM = re.compile(r"(\d{1,20})\((-?\d{1,20})\)\Z")
_LAYOUT_DIMS = re.compile(r"\d{1,20}\(-?\d{1,20}\)(?:,\d{1,20}\(-?\d{1,20}\))*\Z")
_SHAPE_DIM = re.compile(r"\s*(\d{1,20})\s*\Z")
_NEXT_INPUT = re.compile(r" (\d+)=\{id:")
_INP_PREFIX = re.compile(r"inp(\d{1,20}): ")
_VAR_PREFIX = "var="
_INPUTS_KEY = " owner_opr_inputs="


def _match_brace(s: str, pos: int) -> int:
    """Index after the ``}`` closing the ``{`` at ``pos`` (layouts and shapes have no
    user text, so counting braces is safe there)."""
    if pos >= len(s) or s[pos] != "{":
        raise _TitleError(pos, "'{'", repr(s[pos : pos + 10]))
    # the usual case, no nested brace: one find instead of a loop over characters
    j = s.find("}", pos)
    if j >= 0 and s.find("{", pos + 1, j) < 0:
        return j + 1
    depth = 0
    for i in range(pos, len(s)):
        c = s[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise _TitleError(len(s), "'}' closing the layout/shape", "end of title")


def _shape_from_layout(layout: str, pos: int) -> Tuple[int, ...]:
    """Shape of a ``TensorLayout::to_string`` text: ``{1(2048),8(256) Float32}``."""
    inner = layout[1:-1]
    dims = inner.split(" ", 1)[0]  # before " Float32" or " @ format"
    if not dims:
        return ()
    if _LAYOUT_DIMS.match(dims):  # all dims well formed: no regex per dim
        return tuple(int(part[: part.index("(")]) for part in dims.split(","))
    shape = []
    for part in dims.split(","):
        m = _LAYOUT_DIM.match(part)
        if not m:
            raise _TitleError(pos, "layout dims like '8(256)'", repr(part[:40]))
        shape.append(int(m.group(1)))
    return tuple(shape)


def _shape_from_shape(text: str, pos: int) -> Tuple[int, ...]:
    """Shape of a ``TensorShape::to_string`` text: ``{1,3,224,224}``."""
    inner = text[1:-1].strip()
    if not inner:
        return ()
    dims = []
    for part in inner.split(","):
        m = _SHAPE_DIM.match(part)
        if not m:
            raise _TitleError(pos, "a shape like '{1,3,224,224}'", repr(text[:40]))
        dims.append(int(m.group(1)))
    return tuple(dims)


# One whole ``{id:...}`` block in one match, for the usual block (layout or shape without
# nested braces). Owner and name are lazy and the block must be followed by what `follows`
# accepts (the lookahead), so this finds the first owner split and then the first legal
# ", slot:" tail, which is what the careful parser below finds as long as no ", slot:" comes
# before the name (checked after the match; otherwise the careful parser decides).
_FAST_INFO = (
    r"\{id:(\d{1,20}), (layout|shape):(\{[^{}]*\}), ([A-Za-z][A-Za-z0-9_]*), owner:"
    r"(.*?)\{([A-Za-z0-9_:]*)\}, name:(.*?)"
    r", slot:(\d{1,20}), ([^,]*), ([sd]), (-?\d{1,20}), (-?\d{1,20})\}"
)
_FAST_VAR = re.compile(_FAST_INFO + "(?= owner_opr_inputs=)", re.DOTALL)
_FAST_LAST = re.compile(_FAST_INFO + r"\Z", re.DOTALL)
_FAST_NEXT = re.compile(_FAST_INFO + r"(?=\Z| \d+=\{id:)", re.DOTALL)


#: shapes of layout texts seen (a model has few distinct layouts); bounded, cleared when full
_SHAPES: Dict[str, Tuple[int, ...]] = {}
_VARINFO_FIELDS = ("id", "name", "owner", "opr_type", "opr_id", "dtype", "shape", "layout", "slot",
                   "comp_node", "storage", "shape_infer", "value_infer")
#: the instance dict of a VarInfo built by its __init__ (key-sharing), copied per block
_VARINFO_DICT: Dict[str, object] = VarInfo(0, "", "", "", None, "", (), None, 0, "", "s").__dict__


def _fast_info(s: str, pos: int, fast: "re.Pattern[str]") -> Optional[Tuple[VarInfo, int]]:
    m = fast.match(s, pos)
    if m is None or s.find(", slot:", m.end(4), m.start(7)) >= 0:
        return None
    vid, kind, text, dtype, owner, opr_type, name, slot, cn, storage, si, vi = m.groups()
    shape = _SHAPES.get(text)
    if shape is None:
        shape = _shape_from_layout(text, m.start(3)) if kind == "layout" else _shape_from_shape(text, m.start(3))
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        _SHAPES[text] = shape
    mid = _OPR_ID.search(owner)
    # the fields VarInfo's generated __init__ would set, without its per-field frozen setattr
    # (a third of the cost of a block); nothing to check: the regex matched every field
    info = object.__new__(VarInfo)
    # a copy of a key-sharing instance dict, overwritten key by key, stays key-sharing: a
    # third of the size of a dict filled by update() (a folder keeps one VarInfo per var)
    values = _VARINFO_DICT.copy()
    # layouts, dtypes, operator types and comp nodes repeat across a model: one copy each
    intern = sys.intern
    values.update(zip(_VARINFO_FIELDS, (  # pairs, not a dict: update() would resize (unshare) it
        int(vid), name, owner, intern(opr_type), int(mid.group(1)) if mid else None, intern(dtype), shape,
        intern(text) if kind == "layout" else None, int(slot), intern(cn), intern(storage), int(si), int(vi),
    )))
    object.__setattr__(info, "__dict__", values)
    return info, m.end()


def _parse_info(
    s: str, pos: int, follows: Callable[[int], bool], fast: "Optional[re.Pattern[str]]" = None
) -> Tuple[VarInfo, int]:
    """Parse one ``{id:...}`` block at ``pos``; ``follows(end)`` says whether what comes after
    a candidate end is legal, so that free-text names may contain commas and braces.
    ``fast`` is the one-regex form of the same block and rule, tried first."""
    if fast is not None:
        got = _fast_info(s, pos, fast)
        if got is not None:
            return got
    m = _INFO_HEAD.match(s, pos)
    if not m:
        raise _TitleError(pos, "'{id:<n>, layout:' or '{id:<n>, shape:'", repr(s[pos : pos + 20]))
    vid = int(m.group(1))
    p = m.end()
    q = _match_brace(s, p)
    text = s[p:q]
    if m.group(2) == "layout":
        layout: Optional[str] = text
        shape = _shape_from_layout(text, p)
    else:
        layout = None
        shape = _shape_from_shape(text, p)
    md = _INFO_DTYPE.match(s, q)
    if not md:
        raise _TitleError(q, "', <DType>, owner:'", repr(s[q : q + 30]))
    dtype = md.group(1)
    owner_start = md.end()
    t = s.find(", slot:", owner_start)
    while t >= 0:
        mt = _INFO_TAIL.match(s, t)
        if mt and follows(mt.end()):
            break
        t = s.find(", slot:", t + 1)
    else:
        raise _TitleError(
            owner_start, "', slot:<n>, <CompNode>, <s|d>, <n>, <n>}' ending the var info", "none"
        )
    mo = _OWNER_NAME.match(s, owner_start, t)
    if not mo:
        raise _TitleError(owner_start, "'<owner>{<OprType>}, name:<name>'", repr(s[owner_start:t][:60]))
    owner = mo.group(1)
    mid = _OPR_ID.search(owner)
    info = VarInfo(
        id=vid,
        name=mo.group(3),
        owner=owner,
        opr_type=mo.group(2),
        opr_id=int(mid.group(1)) if mid else None,
        dtype=dtype,
        shape=shape,
        layout=layout,
        slot=int(mt.group(1)),
        comp_node=mt.group(2),
        storage=mt.group(3),
        shape_infer=int(mt.group(4)),
        value_infer=int(mt.group(5)),
    )
    return info, mt.end()


def _parse_head(s: str) -> Tuple[VarInfo, int, Optional[int]]:
    """The dumped var of a title (not its inputs): (var, where the inputs start, k)."""
    pos = 0
    input_index: Optional[int] = None
    mp = _INP_PREFIX.match(s)
    if mp:
        input_index = int(mp.group(1))
        pos = mp.end()
    if not s.startswith(_VAR_PREFIX, pos):
        raise _TitleError(pos, "'var={'", repr(s[pos : pos + 20]))
    pos += len(_VAR_PREFIX)
    var, pos = _parse_info(s, pos, lambda e: s.startswith(_INPUTS_KEY, e), _FAST_VAR)
    pos += len(_INPUTS_KEY)
    # --bin-out-dump writes "owner_opr_inputs= %s" (one extra space)
    if s.startswith(" ", pos):
        pos += 1
    return var, pos, input_index


def _input_ids_at(s: str, pos: int) -> Tuple[int, ...]:
    """Ids of the ``owner_opr_inputs`` list at ``pos``: the blocks are delimited exactly as
    :func:`_parse_inputs` delimits them (the same one-regex rule, the careful parser when it
    does not apply), without building their records."""
    n = len(s)
    if pos == n:
        return ()
    if s.startswith("{", pos):
        m = _FAST_LAST.match(s, pos)
        if m is not None and s.find(", slot:", m.end(4), m.start(7)) < 0:
            return (int(m.group(1)),)
        return tuple(v.id for v in _parse_inputs(s, pos))
    start = pos
    ids: List[int] = []
    k = 0
    while True:
        key = f"{k}="
        m = _FAST_NEXT.match(s, pos + len(key)) if s.startswith(key, pos) else None
        if m is None or s.find(", slot:", m.end(4), m.start(7)) >= 0:
            return tuple(v.id for v in _parse_inputs(s, start))
        ids.append(int(m.group(1)))
        pos = m.end()
        if pos == n:
            return tuple(ids)
        pos += 1  # the space before the next "k="
        k += 1


def _parse_title(s: str) -> Tuple[VarInfo, Tuple[VarInfo, ...], Optional[int]]:
    var, pos, input_index = _parse_head(s)
    return var, _parse_inputs(s, pos), input_index


def _parse_inputs(s: str, pos: int) -> Tuple[VarInfo, ...]:
    """The ``owner_opr_inputs`` list that starts at ``pos``."""
    inputs: List[VarInfo] = []
    n = len(s)
    if pos == n:
        return ()
    if s.startswith("{", pos):  # exactly one input: no "0=" index
        info, pos = _parse_info(s, pos, lambda e: e == n, _FAST_LAST)
        return (info,)
    k = 0
    while True:
        key = f"{k}="
        if not s.startswith(key, pos):
            raise _TitleError(pos, f"input '{key}{{' (or the end of the title)", repr(s[pos : pos + 20]))
        pos += len(key)
        info, pos = _parse_info(s, pos, lambda e: e == n or _NEXT_INPUT.match(s, e) is not None, _FAST_NEXT)
        inputs.append(info)
        if pos == n:
            break
        pos += 1  # the space before the next "k="
        k += 1
    return tuple(inputs)


def parse_title(
    title: str, path: Optional[PathLike] = None, *, base_offset: int = HEADER_SIZE
) -> Tuple[VarInfo, Tuple[VarInfo, ...], Optional[int]]:
    """Parse a binary-dump title into (dumped var, owner operator inputs, input index).

    The grammar is ``[inp<k>: ]var={INFO} owner_opr_inputs=<INFO list>``. Names may contain
    spaces, commas, braces and non-ASCII text, so blocks are anchored on their fixed keys
    and on the fixed tail (``slot:``, comp node, ``s|d``, two ints) rather than split.

    Args:
        title: the decoded title.
        path: file named in errors (``<title>`` when None).
        base_offset: byte offset of the title in its file, for error messages.

    Returns:
        ``(var, inputs, input_index)``; ``input_index`` is k for ``inp<k>:`` titles.

    Raises:
        DumpFormatError: the title does not follow the grammar.
    """
    try:
        return _parse_title(title)
    except _TitleError as e:
        raise _title_error(title, e, path, base_offset) from None


def _title_error(title: str, e: _TitleError, path: Optional[PathLike], base_offset: int) -> DumpFormatError:
    off = base_offset + len(title[: e.pos].encode("utf-8", "replace"))
    return DumpFormatError(path if path is not None else "<title>", off, f"{e.expected} in the title", e.found)


def contiguous_layout(shape: Sequence[int], dtype: str) -> str:
    """The ``TensorLayout::to_string`` text of a contiguous tensor, e.g.
    ``{1(2048),8(256),16(16),16(1) Float32}`` (handy for writing test dumps)."""
    strides = []
    acc = 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= int(d)
    strides.reverse()
    dims = ",".join(f"{int(d)}({s})" for d, s in zip(shape, strides))
    return "{" + dims + " " + dtype + "}"


def _format_info(v: VarInfo) -> str:
    # refuse what could not be read back: a title is only useful if parse_title inverts it
    problems = []
    if v.storage not in ("s", "d"):
        problems.append(f"storage {v.storage!r} is not 's' or 'd'")
    if "," in v.comp_node:
        problems.append(f"comp node {v.comp_node!r} contains a comma")
    if not _DTYPE_NAME.match(v.dtype):
        problems.append(f"dtype {v.dtype!r} is not a dtype name")
    if not _OPR_TYPE.match(v.opr_type):
        problems.append(f"operator type {v.opr_type!r} is not an identifier")
    if min(v.id, v.slot) < 0 or any(int(d) < 0 for d in v.shape):
        problems.append("negative id, slot or dim")
    if problems:
        raise UsageError(f"cannot write a title for var {v.id}: " + "; ".join(problems))
    if v.layout is not None:
        kind, text = "layout", v.layout
    else:
        kind, text = "shape", "{" + ",".join(str(int(d)) for d in v.shape) + "}"
    return (
        f"{{id:{v.id}, {kind}:{text}, {v.dtype}, owner:{v.owner}{{{v.opr_type}}}, name:{v.name}, "
        f"slot:{v.slot}, {v.comp_node}, {v.storage}, {v.shape_infer}, {v.value_infer}}}"
    )


def format_title(var: VarInfo, inputs: Sequence[VarInfo] = (), *, input_index: Optional[int] = None) -> str:
    """The title MegEngine's BinaryOprIODump writes for ``var`` (inverse of :func:`parse_title`).

    For an ``-inp<k>`` file pass the input var as ``var``, its own owner's inputs as
    ``inputs`` and ``input_index=k``.
    """
    if len(inputs) == 1:
        ins = _format_info(inputs[0])
    else:
        ins = " ".join(f"{i}={_format_info(v)}" for i, v in enumerate(inputs))
    prefix = f"inp{input_index}: " if input_index is not None else ""
    return f"{prefix}var={_format_info(var)} owner_opr_inputs={ins}"


# ============================================================================ binary dumps

_MAIN_NAME = re.compile(r"([0-9a-f]{6,})\Z")
_INP_NAME = re.compile(r"([0-9a-f]{6,})-inp(\d{1,20})\Z")
INCOMPLETE_MARKER = ".incomplete"


def dump_file_name(var_id: int, input_index: Optional[int] = None) -> str:
    """The file name load_and_run gives a dump: ``%06zx`` or ``%06zx-inp<k>``."""
    return f"{var_id:06x}" if input_index is None else f"{var_id:06x}-inp{input_index}"


def _name_ids(name: str) -> Optional[Tuple[int, Optional[int]]]:
    """(file id, k) when ``name`` is exactly what load_and_run would write, else None."""
    m = _MAIN_NAME.match(name)
    if m:
        vid = int(m.group(1), 16)
        return (vid, None) if name == dump_file_name(vid) else None
    m = _INP_NAME.match(name)
    if m:
        vid, k = int(m.group(1), 16), int(m.group(2))
        return (vid, k) if name == dump_file_name(vid, k) else None
    return None


@dataclass(frozen=True)
class BinaryDump:
    """Header and title of one binary dump file; values are read lazily from disk.

    ``var`` is the dumped var (for ``-inp<k>`` files the *input* var), ``inputs`` the inputs of
    that var's owner operator as written in the title, ``input_of`` the output var whose
    input this is (``-inp<k>`` files only, from the file name). ``file`` is the path as a
    plain string (``path`` as a :class:`~pathlib.Path`).

    The title is parsed into :class:`VarInfo` records on first use of ``var``/``inputs``
    (its start, the var id and ``inp<k>:``, is checked when the file is read): indexing a
    folder of tens of thousands of dumps should not build records nobody reads.
    """

    file: str
    title: str
    input_of: Optional[int]
    input_index: Optional[int]
    dtype: DType
    shape: Tuple[int, ...]
    size: int
    data_offset: int
    nbytes: int
    #: id of the dumped var (read from the start of the title)
    var_id: int
    _var: Optional[VarInfo] = field(default=None, repr=False, compare=False, hash=False)
    _inputs: Optional[Tuple[VarInfo, ...]] = field(default=None, repr=False, compare=False, hash=False)
    _inputs_at: int = field(default=-1, repr=False, compare=False, hash=False)
    _input_ids: Optional[Tuple[int, ...]] = field(default=None, repr=False, compare=False, hash=False)

    @property
    def path(self) -> Path:
        """The file as a :class:`~pathlib.Path`."""
        return Path(self.file)

    @property
    def id(self) -> int:
        """Id of the dumped var."""
        return self.var_id

    @property
    def var(self) -> VarInfo:
        """The dumped var's record (parsed from the title on first use).

        Raises:
            DumpFormatError: the title does not follow the grammar.
        """
        v = self._var
        if v is None:
            try:
                v, at, _k = _parse_head(self.title)
            except _TitleError as e:
                raise _title_error(self.title, e, self.path, HEADER_SIZE) from None
            # a cache on a frozen record: the parsed form of a field it already holds
            object.__setattr__(self, "_inputs_at", at)
            object.__setattr__(self, "_var", v)
        return v

    @property
    def inputs(self) -> Tuple[VarInfo, ...]:
        """The records of the owner operator's inputs (parsed on first use).

        Raises:
            DumpFormatError: the title does not follow the grammar.
        """
        ins = self._inputs
        if ins is None:
            self.var  # noqa: B018 - parses the head, which says where the inputs start
            try:
                ins = _parse_inputs(self.title, self._inputs_at)
            except _TitleError as e:
                raise _title_error(self.title, e, self.path, HEADER_SIZE) from None
            object.__setattr__(self, "_inputs", ins)
        return ins

    @property
    def input_ids(self) -> Tuple[int, ...]:
        """Ids of :attr:`inputs`, in input order (only the ids are kept, not the records:
        a folder of tens of thousands of vars needs the ids of all, the records of few).
        The blocks are delimited as for :attr:`inputs`; what is inside them (layout dims) is
        checked when :attr:`inputs` is used."""
        ids = self._input_ids
        if ids is None:
            if self._inputs is not None:
                ids = tuple(v.id for v in self._inputs)
            else:
                self.var  # noqa: B018 - parses the head, which says where the inputs start
                try:
                    ids = _input_ids_at(self.title, self._inputs_at)
                except _TitleError as e:
                    raise _title_error(self.title, e, self.path, HEADER_SIZE) from None
            object.__setattr__(self, "_input_ids", ids)
        return ids

    def _check_decodable(self) -> None:
        if self.dtype.storage is None:
            raise DumpFormatError(
                self.path,
                4,
                "a dtype lar-prec can decode (sub-byte types cannot be read as arrays)",
                f"{self.dtype.name} (code {self.dtype.code})",
            )

    def _memmap(self) -> np.ndarray:
        self._check_decodable()
        try:
            mm = np.memmap(self.path, dtype=np.dtype(self.dtype.storage), mode="r", offset=self.data_offset, shape=(self.size,))
        except (OSError, ValueError) as e:
            # the file changed (or vanished) since its header was read
            raise DumpFormatError(self.path, self.data_offset, f"{self.nbytes} data bytes", str(e)) from None
        return mm

    def array(self) -> np.ndarray:
        """The values with ``self.shape``: a read-only memory-mapped view (nothing is
        copied), except BFloat16, which is widened to a float32 copy.

        Raises:
            DumpFormatError: sub-byte dtypes, or the file shrank since it was indexed.
        """
        flat = self._memmap()
        if self.dtype.name == "BFloat16":
            flat = _bf16_to_f32(flat)
        return flat.reshape(self.shape)

    def chunks(self, elements: int = 1 << 20) -> Iterator[np.ndarray]:
        """Yield the flat values in order, ``elements`` at a time (BFloat16 widened per chunk),
        so a large tensor can be reduced without holding it in memory."""
        if elements < 1:
            raise UsageError(f"chunk size must be >= 1, got {elements}")
        flat = self._memmap()
        widen = self.dtype.name == "BFloat16"
        for start in range(0, self.size, elements):
            piece = np.asarray(flat[start : start + elements])
            yield _bf16_to_f32(piece) if widen else piece


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bf16 bits (NaN kept quiet)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(values.astype(np.float32))
    rounded[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return rounded


def _header_error(path: PathLike, offset: int, expected: str, found: str = "") -> DumpFormatError:
    return DumpFormatError(path, offset, expected, found)


#: the start of every title: optional "inp<k>: ", then the dumped var's id
_TITLE_HEAD = re.compile(r"(?:inp(\d{1,20}): )?var=\{id:(\d{1,20}), (?:layout|shape):")
#: bytes read at once: the header and a typical title in one system call
_FIRST_READ = 4096


def read_binary_dump(path: PathLike) -> BinaryDump:
    """Read the header and title of one ``--bin-io-dump`` file (not its values).

    Checks everything that can be checked without reading the data: header size,
    ``max_ndim == 7``, known dtype code, shape slots, that the title fits, that the data size
    equals ``prod(shape) * itemsize`` exactly, the title grammar, and that the var id in a
    load_and_run file name agrees with the title.

    A header whose seven shape slots are all 0 is a 0-d scalar (shape ``()``, one element):
    MegEngine writes unused slots as 0 and never dumps zero-element vars (it asserts, 3.5).

    Raises:
        DumpFormatError: the file is not a dump; the message names file, offset, expectation.
    """
    p = Path(path)
    d = _read_dump(str(p), p, _name_ids(p.name), strict=True)
    return d


def _read_dump(file: str, p: Optional[Path], ids: Optional[Tuple[int, Optional[int]]], *, strict: bool) -> BinaryDump:
    """:func:`read_binary_dump` for a plain path string; ``ids`` are the (var id, k) of its
    load_and_run file name (None for other names). ``strict`` parses the whole title now;
    otherwise only its start (var id, ``inp<k>:``) is checked here and the rest on first use
    of ``var``/``inputs``. ``p``, the same path as a Path, is only needed for errors."""
    where: PathLike = p if p is not None else file  # DumpFormatError makes it a Path
    try:
        fd = os.open(file, os.O_RDONLY)
        try:
            file_size = os.fstat(fd).st_size
            buf = os.read(fd, _FIRST_READ)
            if len(buf) < HEADER_SIZE:
                if len(buf) == 0:
                    raise _header_error(where, 0, f"a {HEADER_SIZE}-byte dump header", "an empty file")
                raise _header_error(
                    where, len(buf), f"a {HEADER_SIZE}-byte dump header", f"a truncated header of {len(buf)} bytes"
                )
            name_len, code, max_ndim, *slots = _HEADER.unpack_from(buf)
            if max_ndim != MAX_NDIM:
                raise _header_error(where, 8, f"max_ndim = {MAX_NDIM}", str(max_ndim))
            dt = DTYPES.get(code)
            if dt is None:
                raise _header_error(
                    where, 4, f"a DTypeEnum code ({', '.join(str(c) for c in DTYPES)})", f"unknown dtype code {code}"
                )
            shape_list: List[int] = []
            size = 1
            for i, d in enumerate(slots):
                if d == 0:
                    if any(slots[i + 1 :]):
                        raise _header_error(
                            where, 12 + 4 * i, "shape slots after the first 0 to be 0 (zero-size vars are never dumped)",
                            str(tuple(slots)),
                        )
                    break
                shape_list.append(d)
                size *= d
            if HEADER_SIZE + name_len > file_size:
                raise _header_error(
                    where, HEADER_SIZE, f"a title of {name_len} bytes", f"only {file_size - HEADER_SIZE} bytes left in the file"
                )
            raw_title = buf[HEADER_SIZE : HEADER_SIZE + name_len]
            while len(raw_title) < name_len:
                more = os.pread(fd, name_len - len(raw_title), HEADER_SIZE + len(raw_title))
                if not more:
                    break
                raw_title += more
        finally:
            os.close(fd)
    except OSError as e:
        raise DumpFormatError(where, None, "a readable dump file", str(e)) from None
    if len(raw_title) != name_len:  # the file shrank while we read it
        raise _header_error(where, HEADER_SIZE, f"a title of {name_len} bytes", f"{len(raw_title)} bytes")
    shape = tuple(shape_list)
    nbytes = dt.nbytes(size)
    data_offset = HEADER_SIZE + name_len
    found = file_size - data_offset
    if found != nbytes:
        raise _header_error(
            where,
            data_offset,
            f"{nbytes} data bytes for shape {shape} of {dt.name}",
            f"{found} bytes",
        )
    title = raw_title.decode("utf-8", "replace")
    var: Optional[VarInfo] = None
    inputs: Optional[Tuple[VarInfo, ...]] = None
    m = _TITLE_HEAD.match(title)
    if strict or m is None:
        # the whole grammar now (also what says precisely where a bad title goes wrong)
        var, inputs, input_index = parse_title(title, where)
        var_id = var.id
    else:
        input_index = int(m.group(1)) if m.group(1) is not None else None
        var_id = int(m.group(2))

    input_of: Optional[int] = None
    if ids is not None:
        file_id, k = ids
        name = os.path.basename(file)
        if k is None:
            if input_index is not None:
                raise _header_error(where, HEADER_SIZE, f"a title without 'inp<k>: ' for a file named {name}", f"'inp{input_index}: '")
            if var_id != file_id:
                raise _header_error(where, HEADER_SIZE, f"var id {file_id} (from the file name) in the title", f"id {var_id}")
        else:
            if input_index != k:
                found_k = "no 'inp<k>: ' prefix" if input_index is None else f"'inp{input_index}: '"
                raise _header_error(where, HEADER_SIZE, f"title prefix 'inp{k}: ' for a file named {name}", found_k)
            input_of = file_id
    # equal shapes share one tuple (both folders of a pair, and layers of a model)
    shape = _HEADER_SHAPES.setdefault(shape, shape)
    if len(_HEADER_SHAPES) > 4096:
        _HEADER_SHAPES.clear()
    # BinaryDump(...) without its per-field frozen setattr (a quarter of reading a small
    # dump), as for VarInfo: a copy of a key-sharing instance dict, overwritten key by key
    d = object.__new__(BinaryDump)
    values = _DUMP_DICT.copy()
    values.update(zip(_DUMP_FIELDS, (file, title, input_of, input_index, dt, shape, size, data_offset, nbytes, var_id, var, inputs)))
    object.__setattr__(d, "__dict__", values)
    return d


_DUMP_FIELDS = ("file", "title", "input_of", "input_index", "dtype", "shape", "size", "data_offset", "nbytes", "var_id", "_var", "_inputs")
#: the instance dict of a BinaryDump built by its __init__ (key-sharing), copied per file
_DUMP_DICT: Dict[str, object] = BinaryDump("", "", None, None, DTYPES[0], (), 1, HEADER_SIZE, 4, 0).__dict__
#: shapes read from headers, one tuple per distinct shape; bounded, cleared when full
_HEADER_SHAPES: Dict[Tuple[int, ...], Tuple[int, ...]] = {}


def write_binary_dump(
    path: PathLike,
    array: np.ndarray,
    title: str,
    dtype: Union[int, str, DType, None] = None,
    *,
    shape: Optional[Sequence[int]] = None,
) -> Path:
    """Write one dump file in load_and_run's binary format (for tests and benchmarks).

    Args:
        path: the file to write (use :func:`dump_file_name` for load_and_run's names).
        array: the values. Shape ``()`` is written as a 0-d scalar. For BFloat16 give float32
            (rounded to nearest even) or uint16 raw bits; for sub-byte dtypes give the packed
            bytes as uint8 together with ``shape``.
        title: the title, usually from :func:`format_title`.
        dtype: DTypeEnum code or name; None infers it from ``array.dtype``.
        shape: header shape when it cannot come from ``array`` (sub-byte dtypes).

    Returns:
        The path written.

    Raises:
        UsageError: the array cannot be written in that dtype or shape.
    """
    p = Path(path)
    arr = np.asarray(array)
    if dtype is None:
        code = _NUMPY_TO_CODE.get(arr.dtype.str)
        if code is None:
            raise UsageError(f"no MegDNN dtype for numpy {arr.dtype}; pass dtype= explicitly")
        dt = DTYPES[code]
    else:
        dt = _dtype_of(dtype)
    hdr_shape = tuple(int(d) for d in (arr.shape if shape is None else shape))
    if len(hdr_shape) > MAX_NDIM:
        raise UsageError(f"a dump holds at most {MAX_NDIM} dims, got shape {hdr_shape}")
    if any(d <= 0 or d >= 1 << 32 for d in hdr_shape):
        raise UsageError(f"dump dims must be in 1..2**32-1 (zero-size vars cannot be dumped), got {hdr_shape}")
    size = int(np.prod(hdr_shape, dtype=object)) if hdr_shape else 1
    if dt.storage is None:
        data = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
    elif dt.name == "BFloat16":
        raw = arr if arr.dtype == np.uint16 else _f32_to_bf16(arr.astype(np.float32))
        data = np.ascontiguousarray(raw, dtype="<u2").tobytes()
    else:
        conv = np.ascontiguousarray(arr).astype(dt.storage, copy=False)
        if arr.dtype != dt.storage and dt.storage.kind != "f" and not np.array_equal(conv, arr):
            raise UsageError(f"values of {arr.dtype} do not fit {dt.name} without change")
        data = np.ascontiguousarray(conv).tobytes()
    if len(data) != dt.nbytes(size):
        raise UsageError(f"{len(data)} data bytes do not match shape {hdr_shape} of {dt.name} ({dt.nbytes(size)} bytes)")
    name = title.encode("utf-8")
    slots = list(hdr_shape) + [0] * (MAX_NDIM - len(hdr_shape))
    with open(p, "wb") as f:
        f.write(_HEADER.pack(len(name), dt.code, MAX_NDIM, *slots))
        f.write(name)
        f.write(data)
    return p


# ============================================================================ dump folders


def topological_order(inputs: Mapping[int, Iterable[int]]) -> Tuple[List[int], List[int]]:
    """Execution order of vars given each var's input ids: inputs before their consumers,
    ties broken by the smaller id. Inputs that are not keys, and self-edges, are ignored.

    Returns the order and the ids caught in a cycle (none in a real graph); those are
    appended to the order by id rather than lost.
    """
    indeg: Dict[int, int] = {v: 0 for v in inputs}
    users: Dict[int, List[int]] = {v: [] for v in inputs}
    for v, us in inputs.items():
        for u in set(us):
            if u in indeg and u != v:
                indeg[v] += 1
                users[u].append(v)
    heap = [v for v, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    order: List[int] = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for w in users[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    cyclic = sorted(set(inputs) - set(order)) if len(order) != len(indeg) else []
    return order + cyclic, cyclic


class DumpFolder:
    """A ``--bin-io-dump`` directory, indexed by var id and read lazily.

    Creating one lists the directory only (no file is opened). Headers and titles are read
    on first access of a var (``folder[id]``) or of :attr:`ids`, which needs every main
    file's inputs to order them. ``-inp<k>`` files are kept apart in :attr:`input_files`;
    anything whose name load_and_run would not write is listed in :attr:`stray` (not fatal).

    A malformed main file raises :class:`DumpFormatError` when it is read (strict default:
    silently dropping data would hide a broken run). With ``skip_bad=True`` every header is
    read at once and malformed files are left out of the folder and listed in :attr:`bad`
    instead, e.g. to analyse what a killed run managed to write.
    """

    def __init__(self, path: PathLike, *, skip_bad: bool = False) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise DumpFolderError(f"dump folder {self.path} does not exist")
        if not self.path.is_dir():
            raise DumpFolderError(f"dump folder {self.path} is not a directory")
        files: Dict[int, str] = {}  # plain strings: a Path per file costs more than reading it
        input_files: Dict[Tuple[int, int], Path] = {}
        stray: List[Path] = []
        incomplete = False
        try:
            entries = list(os.scandir(self.path))
        except OSError as e:
            raise DumpFolderError(f"cannot list dump folder {self.path}: {e}") from None
        for entry in entries:
            name = entry.name
            if name == INCOMPLETE_MARKER:
                incomplete = True
                continue
            ids = _name_ids(name) if entry.is_file() else None
            if ids is None:
                stray.append(Path(entry.path))
            elif ids[1] is None:
                files[ids[0]] = entry.path
            else:
                input_files[(ids[0], ids[1])] = Path(entry.path)
        self._files = files
        self.input_files: Dict[Tuple[int, int], Path] = dict(sorted(input_files.items()))
        self.stray: Tuple[Path, ...] = tuple(sorted(stray))
        self.incomplete: bool = incomplete
        self._cache: Dict[int, BinaryDump] = {}
        self._ids: Optional[Tuple[int, ...]] = None
        self._input_infos: Optional[Dict[int, VarInfo]] = None
        self.bad: Dict[Path, DumpFormatError] = {}
        if stray:
            log.debug("%s: %d stray entries ignored", self.path, len(stray))
        if skip_bad:
            for vid, fpath in sorted(files.items()):
                try:
                    # the whole title now: a file kept here must not fail later
                    self._cache[vid] = _read_dump(fpath, None, (vid, None), strict=True)
                except DumpFormatError as e:
                    self.bad[Path(fpath)] = e
                    del self._files[vid]
                    log.warning("skipping malformed dump: %s", e)

    def __repr__(self) -> str:
        return f"DumpFolder({str(self.path)!r}, {len(self._files)} vars, {len(self.input_files)} input files)"

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._files

    def __getitem__(self, var_id: int) -> BinaryDump:
        d = self._cache.get(var_id)
        if d is None:
            path = self._files.get(var_id)
            if path is None:
                raise KeyError(f"var {var_id} has no dump in {self.path} ({len(self._files)} vars dumped)")
            d = _read_dump(path, None, (var_id, None), strict=False)
            self._cache[var_id] = d
        return d

    def __iter__(self) -> Iterator[BinaryDump]:
        for vid in self.ids:
            yield self[vid]

    def forget(self, var_id: int) -> None:
        """Drop the cached header and title of ``var_id`` (read again on next access): a
        caller that goes once through tens of thousands of vars need not keep them all."""
        self._cache.pop(var_id, None)

    def paths(self) -> Dict[int, Path]:
        """Var id -> main dump file, without reading any file."""
        return {v: Path(f) for v, f in self._files.items()}

    def files(self) -> Dict[int, str]:
        """Var id -> main dump file as a plain string (cheaper than :meth:`paths`)."""
        return dict(self._files)

    @property
    def ids(self) -> Tuple[int, ...]:
        """Var ids of the main files in execution order: a topological order of the input
        relation (inputs before their consumers), ties broken by the smaller id."""
        if self._ids is None:
            self._ids = self._order()
        return self._ids

    def _order(self) -> Tuple[int, ...]:
        order, cyclic = topological_order({v: self.inputs_of(v) for v in self._files})
        if cyclic:
            log.warning("%s: input relation has a cycle among vars %s; ordered by id", self.path, cyclic[:10])
        return tuple(order)

    def inputs_of(self, var_id: int) -> Tuple[int, ...]:
        """Ids of the inputs of ``var_id``'s owner operator, in input order."""
        return self[var_id].input_ids

    def var_info(self, var_id: int) -> VarInfo:
        """The :class:`VarInfo` of ``var_id``: from its own dump, else from the title of a
        dump that has it as an input (vars that were not dumped themselves)."""
        if var_id in self._files:
            return self[var_id].var
        if self._input_infos is None:
            infos: Dict[int, VarInfo] = {}
            for vid in self.ids:
                for v in self[vid].inputs:
                    infos.setdefault(v.id, v)
            self._input_infos = infos
        if var_id in self._input_infos:
            return self._input_infos[var_id]
        raise KeyError(f"var {var_id} is neither dumped nor an input of a dumped var in {self.path}")

    def input_dump(self, var_id: int, index: int) -> BinaryDump:
        """The ``-inp<index>`` dump (``MGB_DUMP_INPUT``) of output var ``var_id``."""
        path = self.input_files.get((var_id, index))
        if path is None:
            raise KeyError(f"no input dump {dump_file_name(var_id, index)} in {self.path}")
        return read_binary_dump(path)


# ============================================================================ text dumps


@dataclass(frozen=True)
class TextDep:
    """One ``deps:`` line of a text dump.

    ``kind`` is "value" (device value), "shape", "host_value" or "dev_comp_order";
    ``text`` the printed value (``[..]``, a shape, ``<invalid>``, ``<see lazy value below>``
    or empty); ``flag`` the static/dynamic letter inside ``<shape dep[s]>``/``<host value[s]>``.
    """

    var_id: int
    input_index: Optional[int]
    kind: str
    text: str
    storage: Optional[str]
    flag: Optional[str] = None


@dataclass(frozen=True)
class TextStats:
    """The ``val:`` statistics: first values (``%.4g``), whether there are more, and
    min/max/mean/l2/sd (``%.3g``; ``sd`` None for ``N/A``, NaN for ``-nan``)."""

    head: Tuple[float, ...]
    more: bool
    min: float
    max: float
    mean: float
    l2: float
    sd: Optional[float]


@dataclass(frozen=True)
class TextVar:
    """One ``var<ID> produced:`` block. ``layout`` is None for ``layout=<invalid>``;
    ``val`` is None when the value was not printed (invalid var, lazy values not flushed,
    or the file was cut); ``line`` is the 1-based line of the ``produced`` line."""

    id: int
    name: str
    layout: Optional[str]
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    owner: str
    opr_type: str
    opr_id: int
    deps: Tuple[TextDep, ...]
    val: Optional[TextStats]
    storage: Optional[str]
    line: int


@dataclass(frozen=True)
class TextDump:
    """A parsed ``--io-dump`` file: one tuple of vars per execution (appended runs)."""

    path: Path
    executions: Tuple[Tuple[TextVar, ...], ...]
    lazy: bool
    truncated: Optional[str]  # None if the file ended cleanly, else "line N: what was cut"

    def execution(self, index: int = -1) -> Dict[int, TextVar]:
        """Vars of one execution by id (default: the last)."""
        if not self.executions:
            return {}
        return {v.id: v for v in self.executions[index]}

    def last(self) -> Dict[int, TextVar]:
        """The last execution, by var id."""
        return self.execution(-1)

    @property
    def order(self) -> Tuple[int, ...]:
        """Var ids of the last execution in execution order."""
        return tuple(v.id for v in self.executions[-1]) if self.executions else ()

    def inputs_of(self, var_id: int) -> Tuple[int, ...]:
        """Ids of the ``[i<k>]`` deps of ``var_id`` in the last execution, by k."""
        v = self.last().get(var_id)
        if v is None:
            raise KeyError(f"var {var_id} is not in the last execution of {self.path}")
        ins = sorted((d.input_index, d.var_id) for d in v.deps if d.input_index is not None)
        return tuple(i for _, i in ins)

    def edges(self) -> Tuple[Tuple[int, int, str], ...]:
        """The dependency relation of the last execution: ``(dep var, var, kind)``."""
        return tuple((d.var_id, v.id, d.kind) for v in (self.executions[-1] if self.executions else ()) for d in v.deps)


_PRODUCED = re.compile(r"var(\d{1,20}) produced: name=")
_PRODUCED_TAIL = re.compile(r" owner_opr=(.*)\{([A-Za-z_][A-Za-z0-9_:]*)\} opr(\d{1,20})\Z", re.DOTALL)
_DEP = re.compile(r"  (?:\[i(\d{1,20})\])?var(\d{1,20}): (.*) ([sd])\Z", re.DOTALL)
_DEP_SHAPE = re.compile(r" <shape dep\[([sd])\]> (.*)\Z", re.DOTALL)
_DEP_HOST = re.compile(r" <host value\[([sd])\]> (.*)\Z", re.DOTALL)
_STATS = re.compile(
    r"\[([^\[\]]*)\]min=(\S+) max=(\S+) mean=(\S+) l2=(\S+) sd=(\S+)\Z"
)
_VAL = re.compile(r" val: (.*) ([sd])\Z", re.DOTALL)
_LAZY_BEGIN = "==== begin lazy value recording"
_LAZY_VALUES = "==== recorded values"
_LAZY_OPR = re.compile(r"#(\d{1,20}): opr(\d{1,20}) (.*)\{([A-Za-z_][A-Za-z0-9_:]*)\}\Z", re.DOTALL)
_LAZY_VAR = re.compile(r"  var(\d{1,20}): name=(.*) (\[[^\[\]]*\]min=\S+ max=\S+ mean=\S+ l2=\S+ sd=\S+)\Z", re.DOTALL)


def _num(s: str) -> float:
    # %g of doubles prints nan/-nan/inf/-inf; Python's float() reads all of them
    return float(s)


def _parse_stats(text: str) -> Optional[TextStats]:
    m = _STATS.match(text)
    if not m:
        return None
    items = [x.strip() for x in m.group(1).split(",")] if m.group(1).strip() else []
    more = bool(items) and items[-1] == "..."
    if more:
        items = items[:-1]
    try:
        head = tuple(_num(x) for x in items)
        sd = None if m.group(6) == "N/A" else _num(m.group(6))
        return TextStats(head, more, _num(m.group(2)), _num(m.group(3)), _num(m.group(4)), _num(m.group(5)), sd)
    except ValueError:
        return None


def _parse_produced(line: str) -> Optional[Tuple[int, str, Optional[str], str, str, int]]:
    """(id, name, layout or None, owner, opr type, opr id) of a ``produced`` line."""
    m = _PRODUCED.match(line)
    if not m:
        return None
    start = m.end()
    # the name is free text: try each " layout=" until a layout (or <invalid>) is followed
    # by the owner_opr tail
    i = line.find(" layout=", start)
    while i >= 0:
        p = i + len(" layout=")
        layout: Optional[str] = None
        end = -1
        if line.startswith("<invalid>", p):
            end = p + len("<invalid>")
        elif line.startswith("{", p):
            try:
                end = _match_brace(line, p)
                layout = line[p:end]
            except _TitleError:
                end = -1
        if end >= 0:
            mt = _PRODUCED_TAIL.match(line, end)
            if mt:
                return int(m.group(1)), line[start:i], layout, mt.group(1), mt.group(2), int(mt.group(3))
        i = line.find(" layout=", i + 1)
    return None


def _layout_parts(layout: Optional[str]) -> Tuple[Optional[str], Optional[Tuple[int, ...]]]:
    if layout is None:
        return None, None
    try:
        shape: Optional[Tuple[int, ...]] = _shape_from_layout(layout, 0)
    except _TitleError:
        shape = None
    inner = layout[1:-1].strip()
    dtype = inner.rsplit(" ", 1)[-1] if " " in inner else None
    return dtype, shape


def _parse_dep(line: str) -> Optional[TextDep]:
    m = _DEP.match(line)
    if not m:
        return None
    k = int(m.group(1)) if m.group(1) is not None else None
    vid = int(m.group(2))
    body = m.group(3)
    storage = m.group(4)
    ms = _DEP_SHAPE.match(body)
    if ms:
        return TextDep(vid, k, "shape", ms.group(2), storage, ms.group(1))
    mh = _DEP_HOST.match(body)
    if mh:
        return TextDep(vid, k, "host_value", mh.group(2), storage, mh.group(1))
    if body == " <dev comp order>":
        return TextDep(vid, k, "dev_comp_order", "", storage)
    return TextDep(vid, k, "value", body, storage)


class _VarBuilder:
    """Mutable accumulator for one ``produced`` block while its lines are read."""

    def __init__(self, head: Tuple[int, str, Optional[str], str, str, int], line: int) -> None:
        self.head = head
        self.line = line
        self.deps: List[TextDep] = []
        self.val: Optional[TextStats] = None
        self.storage: Optional[str] = None
        self.state = "produced"  # -> "deps"

    def build(self, val: Optional[TextStats] = None) -> TextVar:
        vid, name, layout, owner, opr_type, opr_id = self.head
        dtype, shape = _layout_parts(layout)
        return TextVar(
            id=vid,
            name=name,
            layout=layout,
            dtype=dtype,
            shape=shape,
            owner=owner,
            opr_type=opr_type,
            opr_id=opr_id,
            deps=tuple(self.deps),
            val=val if val is not None else self.val,
            storage=self.storage,
            line=self.line,
        )


def read_text_dump(path: PathLike) -> TextDump:
    """Parse a ``--io-dump`` text file (normal or lazy format, several executions).

    Executions are split where a var id repeats. A file cut off in the middle (the run
    crashed, e.g. ``can not handle dtype Byte in print_host_val`` leaves ``" val: "``) is
    parsed up to the cut; the partial var is kept (without a value) and ``truncated`` says
    where and what was cut. A lazy file whose ``==== recorded values`` section never came
    (the process died) has vars without values and ``truncated`` set too.

    Raises:
        DumpFormatError: a complete line that is not part of the format (offset = its byte
            offset; the line number is in the message).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DumpFormatError(p, None, "a readable text dump", str(e)) from None
    raw_lines = raw.split(b"\n")
    ends_clean = raw_lines[-1] == b""
    if ends_clean:
        raw_lines.pop()
    # byte offset of each line, for error messages
    offsets = []
    off = 0
    for rl in raw_lines:
        offsets.append(off)
        off += len(rl) + 1

    executions: List[List[TextVar]] = []
    current: List[TextVar] = []
    seen: set = set()
    cur: Optional[_VarBuilder] = None
    lazy = False
    lazy_values = False
    lazy_vals: Dict[int, TextStats] = {}
    truncated: Optional[str] = None
    n_lines = len(raw_lines)

    def finish() -> None:
        nonlocal cur
        if cur is not None:
            current.append(cur.build())
            cur = None

    def bad(i: int, expected: str, line: str) -> DumpFormatError:
        return DumpFormatError(p, offsets[i], f"{expected} (line {i + 1})", repr(line[:80]))

    for i, rl in enumerate(raw_lines):
        line = rl.decode("utf-8", "replace").rstrip("\r")
        if i == n_lines - 1 and not ends_clean:
            # every complete line ends with "\n": this one was cut while being written
            if cur is not None:
                what = "value line" if line.startswith(" val:") else "line"
                truncated = f"line {i + 1}: {what} of var{cur.head[0]} cut off ({line[:40]!r})"
            else:
                truncated = f"line {i + 1}: line cut off ({line[:40]!r})"
            break
        if not line:
            continue
        if lazy_values:
            m = _LAZY_VAR.match(line)
            if m:
                st = _parse_stats(m.group(3))
                if st is not None:
                    lazy_vals[int(m.group(1))] = st
                    continue
            if _LAZY_OPR.match(line):
                continue
            raise bad(i, "'#<idx>: opr<id> ...' or '  var<id>: name=... [values]min=...'", line)
        if line == _LAZY_BEGIN:
            lazy = True
            continue
        if line == _LAZY_VALUES:
            finish()
            lazy_values = True
            continue
        head = _parse_produced(line)
        if head is not None:
            finish()
            if head[0] in seen:
                executions.append(current)
                current = []
                seen = set()
            seen.add(head[0])
            cur = _VarBuilder(head, i + 1)
            if head[2] is None:  # layout=<invalid>: only this line is printed
                finish()
            continue
        if cur is not None and line == " deps:" and cur.state == "produced":
            cur.state = "deps"
            continue
        if cur is not None and cur.state == "deps":
            dep = _parse_dep(line)
            if dep is not None:
                cur.deps.append(dep)
                continue
            mv = _VAL.match(line)
            if mv:
                text = mv.group(1)
                cur.storage = mv.group(2)
                if text not in ("<see lazy value below>", "<invalid>"):
                    cur.val = _parse_stats(text)
                    if cur.val is None:
                        raise bad(i, "'[values]min=.. max=.. mean=.. l2=.. sd=..'", line)
                finish()
                continue
        raise bad(i, "a line of a 'var<id> produced:' block", line)

    if cur is not None:
        if truncated is None:
            truncated = f"line {n_lines + 1}: file ended inside the block of var{cur.head[0]} (line {cur.line})"
        finish()
    if current:
        executions.append(current)
    if lazy:
        if not lazy_values and truncated is None:
            truncated = f"line {n_lines + 1}: lazy values never flushed (no '{_LAZY_VALUES}' section)"
        executions = [
            [_with_val(v, lazy_vals.get(v.id)) for v in ex] for ex in executions
        ]
    return TextDump(p, tuple(tuple(ex) for ex in executions), lazy, truncated)


def _with_val(v: TextVar, val: Optional[TextStats]) -> TextVar:
    if val is None or v.val is not None:
        return v
    return replace(v, val=val)
