"""One binary ``--bin-io-dump`` file: read (lazily) into a :class:`BinaryDump`, and written.

Binary files (``load_and_run.md`` 3.4) are read lazily: :func:`read_binary_dump` reads only
the 40-byte header and the title; values come from a read-only memory map when
:meth:`BinaryDump.array` or :meth:`BinaryDump.chunks` is called. Every malformed file raises
one :class:`~lar_prec.errors.DumpFormatError` naming the file, the byte offset and what was
expected there.

A folder of them is :class:`lar_prec.dumps.folder.DumpFolder`; ``lar_prec.iodump`` re-exports
both with the text reader.

Example::

    d = read_binary_dump("run/naive/dump/00000b")
    print(d.var.id, d.var.name, d.dtype.name, d.shape, d.array().max())
"""
from __future__ import annotations

import logging
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.dumps.dtypes import _NUMPY_TO_CODE, DTYPES, DType, _dtype_of
from lar_prec.errors import DumpFormatError, UsageError
from lar_prec.dumps.textdump import file_kind
from lar_prec.dumps.titles import (HEADER_SIZE, _SHAPES, VarInfo, _input_ids_at, _parse_head, _parse_inputs, _title_error,
                             _TitleError, info_from_fields, parse_title, shape_of_text)

log = logging.getLogger(__name__)

#: dumps of up to this many value bytes are read in one call by :meth:`BinaryDump.array`,
#: larger ones memory-mapped
READ_AT_ONCE = 1 << 20

from lar_prec.records import PathLike, frozen_record  # noqa: E402

# The dtypes, titles, text dumps, dump folders and topological_order live in their own
# modules (dtypes.py, titles.py, textdump.py, dumpfolder.py, graph.py); their names stay
# importable from here.
__all__ = [
    "BinaryDump",
    "read_binary_dump",
    "write_binary_dump",
    "dump_file_name",
    "MAX_NDIM",
    "INCOMPLETE_MARKER",
]

#: MEGDNN_MAX_NDIM, written into every header
MAX_NDIM = 7
_HEADER = struct.Struct("<10I")


# ============================================================================ binary dumps

_MAIN_NAME = re.compile(r"([0-9a-f]{6,})\Z")
_INP_NAME = re.compile(r"([0-9a-f]{6,})-inp(\d{1,20})\Z")
INCOMPLETE_MARKER = ".incomplete"


def dump_file_name(var_id: int, input_index: Optional[int] = None) -> str:
    """The file name load_and_run gives a dump: ``%06zx`` or ``%06zx-inp<k>``."""
    return f"{var_id:06x}" if input_index is None else f"{var_id:06x}-inp{input_index}"


def _name_ids(name: str) -> Optional[Tuple[int, Optional[int]]]:
    """(file id, k) when ``name`` is exactly what load_and_run would write, else None."""
    if "-" not in name:
        # the usual main file, without a regex or formatting the id back (a folder lists tens
        # of thousands): what "%06x" writes is six or more lower-case hex digits, with no
        # zero before a seventh (int() alone would also take a sign, spaces, "0x" or "_")
        if len(name) < 6 or (name[0] == "0" and len(name) > 6) or name.strip("0123456789abcdef"):
            return None
        return (int(name, 16), None)
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
    #: the dumped var's block as the C reader delimited it (info_from_fields' arguments): its
    #: record is made from these on first use of ``var``, without parsing the title
    _parsed: Optional[Tuple[Any, ...]] = field(default=None, repr=False, compare=False, hash=False)

    @property
    def path(self) -> Path:
        """The file as a :class:`~pathlib.Path`."""
        return Path(self.file)

    @property
    def id(self) -> int:
        """Id of the dumped var."""
        return self.var_id

    def _parse(self, parser: Any, *args: Any) -> Any:
        """``parser(title, *args)``, its title error told as this file's DumpFormatError."""
        try:
            return parser(self.title, *args)
        except _TitleError as e:
            raise _title_error(self.title, e, self.path, HEADER_SIZE) from None

    @property
    def var(self) -> VarInfo:
        """The dumped var's record (parsed from the title on first use).

        Raises:
            DumpFormatError: the title does not follow the grammar.
        """
        v = self._var
        if v is None and self._parsed is not None:
            v = info_from_fields(*self._parsed, 0)  # its layout text was checked when the file was read
            object.__setattr__(self, "_var", v)
        if v is None:
            v, at, _k = self._parse(_parse_head)
            # a cache on a frozen record: the parsed form of a field it already holds
            object.__setattr__(self, "_inputs_at", at)
            object.__setattr__(self, "_var", v)
        return v

    def names(self) -> Tuple[str, str, str]:
        """(name, owner, operator type) of the dumped var, from the fields the C reader
        delimited when it did (no record made), else from :attr:`var`."""
        p = self._parsed
        if p is not None and self._var is None:
            return p[7], p[4], p[5]
        v = self.var
        return v.name, v.owner, v.opr_type

    @property
    def inputs(self) -> Tuple[VarInfo, ...]:
        """The records of the owner operator's inputs (parsed on first use).

        Raises:
            DumpFormatError: the title does not follow the grammar.
        """
        ins = self._inputs
        if ins is None:
            self.var  # noqa: B018 - parses the head, which says where the inputs start
            ins = self._parse(_parse_inputs, self._inputs_at)
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
                ids = self._parse(_input_ids_at, self._inputs_at)
            object.__setattr__(self, "_input_ids", ids)
        return ids

    def _check_decodable(self) -> None:
        if self.dtype.storage_str is None:  # not .storage: that is numpy's dtype (raw() needs no numpy)
            raise DumpFormatError(
                self.path,
                4,
                "a dtype lar-prec can decode (sub-byte types cannot be read as arrays)",
                f"{self.dtype.name} (code {self.dtype.code})",
            )

    def _memmap(self) -> np.ndarray:
        self._check_decodable()
        try:
            mm = np.memmap(self.file, dtype=np.dtype(self.dtype.storage), mode="r", offset=self.data_offset, shape=(self.size,))
        except (OSError, ValueError) as e:
            # the file changed (or vanished) since its header was read
            raise DumpFormatError(self.path, self.data_offset, f"{self.nbytes} data bytes", str(e)) from None
        return mm

    def raw(self) -> bytes:
        """The values' bytes as stored (no numpy: the C kernel's recheck reads them so).

        Raises:
            DumpFormatError: sub-byte dtypes, or the file shrank since it was indexed.
        """
        self._check_decodable()
        try:
            with open(self.file, "rb") as f:
                f.seek(self.data_offset)
                raw = f.read(self.nbytes)
        except OSError as e:
            raise DumpFormatError(self.path, self.data_offset, f"{self.nbytes} data bytes", str(e)) from None
        if len(raw) != self.nbytes:  # the file shrank since its header was read
            raise DumpFormatError(self.path, self.data_offset, f"{self.nbytes} data bytes",
                                  f"{len(raw)} bytes to the end of the file")
        return raw

    def hash_values(self, h: Any, block: int = 1 << 20) -> int:
        """Feed the values' bytes as stored into the hashlib object ``h``, ``block`` bytes at a
        time (a large tensor is never held whole); returns how many bytes the file lacked (0:
        all there). OSError propagates: each caller says what a missing file means to it."""
        left = self.nbytes
        with open(self.file, "rb") as fh:
            fh.seek(self.data_offset)
            while left > 0:
                chunk = fh.read(min(block, left))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
        return left

    def _read(self) -> np.ndarray:
        return np.frombuffer(self.raw(), dtype=np.dtype(self.dtype.storage))  # read-only: bytes are immutable

    def array(self) -> np.ndarray:
        """The values with ``self.shape``, read-only: memory-mapped (nothing copied) above
        :data:`READ_AT_ONCE` bytes, read in one call up to it (mapping a small file costs more
        than reading it, and an analysis reads hundreds of small vars); BFloat16 is widened to
        a float32 copy.

        Raises:
            DumpFormatError: sub-byte dtypes, or the file shrank since it was indexed.
        """
        flat = self._read() if 0 < self.nbytes <= READ_AT_ONCE else self._memmap()
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


def _header_error(path: PathLike, offset: Optional[int], expected: str, found: str = "") -> DumpFormatError:
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


def _read_head(file: str, where: PathLike) -> Tuple[DType, List[int], int, int, bytes]:
    """(dtype, shape, size, file size, raw title) of a dump file: the 40-byte header checked
    and the title read, in one system call for the usual small title.

    Raises:
        DumpFormatError: not a readable regular file, or a header that is not a dump's.
    """
    try:
        # O_NONBLOCK: a FIFO named like a dump must not hang the reader (refused below)
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _header_error(where, None, "a regular dump file", file_kind(st.st_mode))
            file_size = st.st_size
            buf = os.read(fd, _FIRST_READ)
            if len(buf) < HEADER_SIZE:
                found = "an empty file" if not buf else f"a truncated header of {len(buf)} bytes"
                raise _header_error(where, len(buf), f"a {HEADER_SIZE}-byte dump header", found)
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
    return dt, shape_list, size, file_size, raw_title


def _input_of(where: PathLike, file: str, ids: Tuple[int, Optional[int]], input_index: Optional[int], var_id: int) -> Optional[int]:
    """The output var an ``-inp<k>`` file belongs to (None for a main file), after checking
    that the title agrees with the load_and_run file name."""
    file_id, k = ids
    name = os.path.basename(file) if input_index != k else ""  # only the errors name it
    if k is None:
        if input_index is not None:
            raise _header_error(where, HEADER_SIZE, f"a title without 'inp<k>: ' for a file named {name}", f"'inp{input_index}: '")
        if var_id != file_id:
            raise _header_error(where, HEADER_SIZE, f"var id {file_id} (from the file name) in the title", f"id {var_id}")
        return None
    if input_index != k:
        found_k = "no 'inp<k>: ' prefix" if input_index is None else f"'inp{input_index}: '"
        raise _header_error(where, HEADER_SIZE, f"title prefix 'inp{k}: ' for a file named {name}", found_k)
    return file_id


def _read_dump(file: str, p: Optional[Path], ids: Optional[Tuple[int, Optional[int]]], *, strict: bool) -> BinaryDump:
    """:func:`read_binary_dump` for a plain path string; ``ids`` are the (var id, k) of its
    load_and_run file name (None for other names). ``strict`` parses the whole title now;
    otherwise only its start (var id, ``inp<k>:``) is checked here and the rest on first use
    of ``var``/``inputs``. ``p``, the same path as a Path, is only needed for errors."""
    where: PathLike = p if p is not None else file  # DumpFormatError makes it a Path
    dt, shape_list, size, file_size, raw_title = _read_head(file, where)
    return dump_from_head(file, ids, dt, tuple(shape_list), size, file_size, raw_title.decode("utf-8", "replace"),
                          len(raw_title), strict=strict, where=where)


def dump_from_head(file: str, ids: Optional[Tuple[int, Optional[int]]], dt: DType, shape: Tuple[int, ...], size: int,
                   file_size: int, title: str, title_len: int, *, strict: bool = False,
                   where: Optional[PathLike] = None, parsed: Optional[Sequence[Any]] = None) -> BinaryDump:
    """The :class:`BinaryDump` of a file whose 40-byte header was read and checked (by
    :func:`_read_head`, or by the compare engine's batch reader, which checks it the same
    way): the data size, the title's start (all of it with ``strict``) and the file name
    against the title are checked here. ``title`` is the decoded title, ``title_len`` its
    length in the file (bytes); ``parsed``: its head and input ids as the compare engine's C
    reader delimited them (the fields of :func:`~lar_prec.dumps.titles.info_from_fields`,
    then where the inputs start and their ids), which saves parsing it here.

    Raises:
        DumpFormatError: as :func:`read_binary_dump`.
    """
    if where is None:
        where = file
    nbytes = dt.nbytes(size)
    data_offset = HEADER_SIZE + title_len
    found = file_size - data_offset
    if found != nbytes:
        raise _header_error(where, data_offset, f"{nbytes} data bytes for shape {shape} of {dt.name}", f"{found} bytes")
    var: Optional[VarInfo] = None
    inputs: Optional[Tuple[VarInfo, ...]] = None
    if parsed is not None and not strict:
        try:
            shape_of_text(parsed[2], parsed[3], 0)  # the record is made on first use of ``var``
        except _TitleError:
            parsed = None  # a malformed layout: the parser below says where
    m = _TITLE_HEAD.match(title) if parsed is None else None
    if parsed is not None:
        input_index, var_id = parsed[0], parsed[1]
    elif strict or m is None:
        # the whole grammar now (also what says precisely where a bad title goes wrong)
        var, inputs, input_index = parse_title(title, where)
        var_id = var.id
    else:
        input_index = int(m.group(1)) if m.group(1) is not None else None
        var_id = int(m.group(2))
    input_of = _input_of(where, file, ids, input_index, var_id) if ids is not None else None
    # equal shapes share one tuple (both folders of a pair, and layers of a model)
    shape = _HEADER_SHAPES.setdefault(shape, shape)
    if len(_HEADER_SHAPES) > 4096:
        _HEADER_SHAPES.clear()
    # BinaryDump(...) without its per-field frozen setattr (a quarter of reading a small
    # dump), as for VarInfo: a copy of a key-sharing instance dict, overwritten key by key
    values = _DUMP_DICT.copy()
    values.update(zip(_DUMP_FIELDS, (file, title, input_of, input_index, dt, shape, size, data_offset, nbytes, var_id, var, inputs)))
    if parsed is not None:
        values["_inputs_at"], values["_input_ids"], values["_parsed"] = parsed[14], parsed[15], parsed[1:14]
    return frozen_record(BinaryDump, values)


def head_shape(ids: Tuple[int, Optional[int]], dt: DType, shape: Tuple[int, ...], size: int, file_size: int,
               title_len: int, parsed: Optional[Sequence[Any]]) -> Optional[Tuple[int, ...]]:
    """The shape (one tuple per distinct shape) of a main file whose header and title the
    compare engine's C reader read and delimited (``parsed``, as for :func:`dump_from_head`),
    when :func:`dump_from_head` would take it without parsing the title: its data size, its
    var id (``ids``, from the file name), no ``inp<k>:`` prefix and a well-formed layout text.
    Its :class:`BinaryDump` can then be made on first use (a folder of tens of thousands of
    vars is compared without most of them). None: anything else, which
    :func:`dump_from_head` says what is wrong with (or parses)."""
    if parsed is None or parsed[0] is not None or parsed[1] != ids[0] or ids[1] is not None or parsed[15] is None:
        return None
    if file_size - HEADER_SIZE - title_len != dt.nbytes(size):
        return None
    if not layout_known(parsed[2], parsed[3]):  # what the record would be made from on first use
        return None
    got = _HEADER_SHAPES.setdefault(shape, shape)
    if len(_HEADER_SHAPES) > 4096:
        _HEADER_SHAPES.clear()
    return got


def layout_known(is_layout: bool, text: str) -> bool:
    """Whether a layout (``is_layout``) or shape text of a title is well formed; remembered
    when it is (:func:`head_caches`), as :func:`head_shape` remembers it."""
    try:
        shape_of_text(is_layout, text, 0)
    except _TitleError:
        return False
    return True


def head_caches() -> Tuple[Dict[Tuple[int, ...], Tuple[int, ...]], Dict[str, Tuple[int, ...]]]:
    """What :func:`head_shape` reads and fills: the shapes read from headers (one tuple per
    distinct shape) and the layout texts known to be well formed, for a filer in C that keeps
    headers as :meth:`~lar_prec.dumps.folder.DumpFolder.note_head` does (the compare engine's)."""
    return _HEADER_SHAPES, _SHAPES


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


# DumpFolder lives in dumpfolder.py, which reads its files with this module: loaded on first
# use so that either module can be imported first
