"""The title of a binary dump (``cg::dump_var_info``): parsed into :class:`VarInfo` records
and written back.

Grammar: ``[inp<k>: ]var={INFO} owner_opr_inputs=<INFO list>``, where an INFO block is
``{id:N, layout:{..}|shape:{..}, DType, owner:<owner>{OprType}, name:<name>, slot:N,
<comp node>, s|d, N, N}``. Names are free text (spaces, commas, braces, non-ASCII), so a block
is anchored on its fixed keys and its fixed tail rather than split.

One parser: :func:`_scan_info` delimits a block (the usual block in one match, any other
step by step, tested to agree), accepting a candidate end only when what comes after it is
legal there; :func:`_parse_info` builds its record,
:func:`_input_ids_at` only its id (what ordering a folder needs). Every step is anchored on a
fixed key and tried once per candidate, so parsing is linear in the title (the one-match
form used before retried every owner split and took seconds on a damaged 100 KB title).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec.errors import DumpFormatError, UsageError

from lar_prec.records import PathLike, frozen_record  # noqa: E402

#: bytes before the title: name_len, dtype, max_ndim, shape[7], all uint32 little-endian
HEADER_SIZE = 40

__all__ = ["VarInfo", "parse_title", "format_title", "contiguous_layout", "HEADER_SIZE"]

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
# MegEngine's type names are identifiers; an empty one is accepted so that anything
# format_title writes reads back
_OWNER_NAME = re.compile(r"(.*?)\{([A-Za-z0-9_:]*)\}, name:(.*)\Z", re.DOTALL)
_DTYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_OPR_TYPE = re.compile(r"[A-Za-z0-9_:]*\Z")
_OPR_ID = re.compile(r"\[(\d{1,20})\]\Z")
_LAYOUT_DIM = re.compile(r"(\d{1,20})\((-?\d{1,20})\)\Z")
_LAYOUT_DIMS = re.compile(r"\d{1,20}\(-?\d{1,20}\)(?:,\d{1,20}\(-?\d{1,20}\))*\Z")
_SHAPE_DIM = re.compile(r"\s*(\d{1,20})\s*\Z")
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
    return _dims(dims, _LAYOUT_DIM, pos, "layout dims like '8(256)'", None)


def _shape_from_shape(text: str, pos: int) -> Tuple[int, ...]:
    """Shape of a ``TensorShape::to_string`` text: ``{1,3,224,224}``."""
    inner = text[1:-1].strip()
    if not inner:
        return ()
    return _dims(inner, _SHAPE_DIM, pos, "a shape like '{1,3,224,224}'", text)


def _dims(text: str, dim: "re.Pattern[str]", pos: int, expected: str, shown: Optional[str]) -> Tuple[int, ...]:
    """The first group of ``dim`` in each comma-separated part of ``text``; the error shows
    ``shown`` (or the bad part) when a part does not match."""
    out = []
    for part in text.split(","):
        m = dim.match(part)
        if not m:
            raise _TitleError(pos, expected, repr((part if shown is None else shown)[:40]))
        out.append(int(m.group(1)))
    return tuple(out)


# The usual head of a block in one match: a layout or shape without nested braces, then the
# dtype. What it accepts is exactly what the step-by-step head below accepts for such a
# layout; anything else (nested braces, or an error to locate) takes the steps.
_HEAD = re.compile(r"\{id:(\d{1,20}), (layout|shape):(\{[^{}]*\}), ([A-Za-z][A-Za-z0-9_]*), owner:")


#: shapes of layout texts seen (a model has few distinct layouts); bounded, cleared when full
_SHAPES: Dict[str, Tuple[int, ...]] = {}
_VARINFO_FIELDS = ("id", "name", "owner", "opr_type", "opr_id", "dtype", "shape", "layout", "slot",
                   "comp_node", "storage", "shape_infer", "value_infer")
#: the instance dict of a VarInfo built by its __init__ (key-sharing), copied per block
_VARINFO_DICT: Dict[str, object] = VarInfo(0, "", "", "", None, "", (), None, 0, "", "s").__dict__

#: one block delimited by :func:`_scan_info`: id, "layout"|"shape", its text and where it
#: starts, dtype, owner, operator type, name, slot, comp node, storage, the two infer flags,
#: and where the block ends
_Block = Tuple[str, str, str, int, str, str, str, str, str, str, str, str, str, int]


# The tail that ends a block, with what must follow it in each place (the lookahead): the
# inputs of the dumped var, the end of the title, or the next "k={id:" input. The comp node
# string has no comma ("CompNode(\"cpu0:0\" from \"cpu0:0\")"), which keeps a ", slot:"
# inside a var name from matching here.
_TAIL = r", slot:(\d{1,20}), ([^,]*), ([sd]), (-?\d{1,20}), (-?\d{1,20})\}"
_FOLLOW_VAR, _FOLLOW_LAST, _FOLLOW_NEXT = "(?= owner_opr_inputs=)", r"\Z", r"(?=\Z| \d+=\{id:)"
# The usual block in one match (a third of the cost of the steps). The owner is found by a
# lookahead, which Python never re-enters, and matched again by \5: the shortest owner, as in
# the steps, and no retry with a longer owner when the rest fails (a lazy owner retried every
# split: seconds on a damaged 100 KB title). Linear: one owner, then one forward scan for
# the first legal tail. Tests check it against the steps on generated titles.
_FAST = (
    r"\{id:(\d{1,20}), (layout|shape):(\{[^{}]*\}), ([A-Za-z][A-Za-z0-9_]*), owner:"
    r"(?=(.*?)\{([A-Za-z0-9_:]*)\}, name:)\5\{\6\}, name:(.*?)" + _TAIL
)
#: (one-match form, tail search of the steps) for each place a block can end
_VAR = (re.compile(_FAST + _FOLLOW_VAR, re.DOTALL), re.compile(_TAIL + _FOLLOW_VAR))
_LAST = (re.compile(_FAST + _FOLLOW_LAST, re.DOTALL), re.compile(_TAIL + _FOLLOW_LAST))
_NEXT = (re.compile(_FAST + _FOLLOW_NEXT, re.DOTALL), re.compile(_TAIL + _FOLLOW_NEXT))
_Place = Tuple["re.Pattern[str]", "re.Pattern[str]"]


def _scan_info(s: str, pos: int, place: _Place) -> _Block:
    """Delimit the ``{id:...}`` block at ``pos``: the one parser of a block.

    Names and owners are free text, so the block ends at the first ``, slot:...}`` tail
    followed by what may follow a block in that ``place`` (a lookahead), and the owner is the
    shortest prefix followed by ``{OprType}, name:``. The usual block is read in one match;
    any other (nested braces in the layout, a ``, slot:`` inside the owner, an error to
    locate) step by step: head, tail search, owner/name split. Every step is linear, so a
    damaged title of any length is read in linear time.
    """
    m = place[0].match(s, pos)
    if m is not None and s.find(", slot:", m.end(4), m.start(7)) < 0:
        return m.groups() + (m.start(3), m.end())  # type: ignore[return-value]
    m = _HEAD.match(s, pos)
    if m is not None:
        vid, kind, text, dtype = m.groups()
        text_pos, owner_start = m.start(3), m.end()
    else:  # nested braces, or an error to locate
        m = _INFO_HEAD.match(s, pos)
        if not m:
            raise _TitleError(pos, "'{id:<n>, layout:' or '{id:<n>, shape:'", repr(s[pos : pos + 20]))
        vid, kind = m.groups()
        text_pos = m.end()
        q = _match_brace(s, text_pos)
        md = _INFO_DTYPE.match(s, q)
        if not md:
            raise _TitleError(q, "', <DType>, owner:'", repr(s[q : q + 30]))
        text, dtype, owner_start = s[text_pos:q], md.group(1), md.end()
    mt = place[1].search(s, owner_start)
    if mt is None:
        raise _TitleError(owner_start, "', slot:<n>, <CompNode>, <s|d>, <n>, <n>}' ending the var info", "none")
    mo = _OWNER_NAME.match(s, owner_start, mt.start())
    if not mo:
        raise _TitleError(owner_start, "'<owner>{<OprType>}, name:<name>'", repr(s[owner_start : mt.start()][:60]))
    return (vid, kind, text, dtype) + mo.groups() + mt.groups() + (text_pos, mt.end())  # type: ignore[return-value]


def _parse_info(s: str, pos: int, place: _Place) -> Tuple[VarInfo, int]:
    """Parse one ``{id:...}`` block at ``pos`` into its record (see :func:`_scan_info`)."""
    vid, kind, text, dtype, owner, opr_type, name, slot, cn, storage, si, vi, text_pos, end = _scan_info(s, pos, place)
    mid = _OPR_ID.search(owner)
    info = info_from_fields(int(vid), kind == "layout", text, dtype, owner, opr_type, int(mid.group(1)) if mid else None,
                            name, int(slot), cn, storage, int(si), int(vi), text_pos)
    return info, end


def shape_of_text(is_layout: bool, text: str, text_pos: int) -> Tuple[int, ...]:
    """The shape of a block's layout (``is_layout``) or shape text, checked (cached by text).

    Raises:
        _TitleError: the text is malformed.
    """
    shape = _SHAPES.get(text)
    if shape is None:
        shape = _shape_from_layout(text, text_pos) if is_layout else _shape_from_shape(text, text_pos)
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        _SHAPES[text] = shape
    return shape


def info_from_fields(vid: int, is_layout: bool, text: str, dtype: str, owner: str, opr_type: str, opr_id: Optional[int],
                     name: str, slot: int, cn: str, storage: str, si: int, vi: int, text_pos: int) -> VarInfo:
    """The record of one block whose fields were delimited by :func:`_scan_info` (or by the
    compare engine's C reader, which delimits the usual block the same way); the layout or
    shape text becomes the shape here.

    Raises:
        _TitleError: the layout or shape text is malformed.
    """
    shape = shape_of_text(is_layout, text, text_pos)
    # the fields VarInfo's generated __init__ would set, without its per-field frozen setattr
    # (a third of the cost of a block); nothing to check: the matches checked every field
    # a copy of a key-sharing instance dict, overwritten key by key, stays key-sharing: a
    # third of the size of a dict filled by update() (a folder keeps one VarInfo per var)
    values = _VARINFO_DICT.copy()
    # layouts, dtypes, operator types and comp nodes repeat across a model: one copy each
    intern = sys.intern
    values.update(zip(_VARINFO_FIELDS, (  # pairs, not a dict: update() would resize (unshare) it
        vid, name, owner, intern(opr_type), opr_id, intern(dtype), shape,
        intern(text) if is_layout else None, slot, intern(cn), intern(storage), si, vi,
    )))
    return frozen_record(VarInfo, values)


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
    var, pos = _parse_info(s, pos, _VAR)
    pos += len(_INPUTS_KEY)
    # --bin-out-dump writes "owner_opr_inputs= %s" (one extra space)
    if s.startswith(" ", pos):
        pos += 1
    return var, pos, input_index


def _input_blocks(s: str, pos: int, parse: Callable[[str, int, _Place], Tuple[object, int]]) -> List[object]:
    """The ``owner_opr_inputs`` list at ``pos``, each block read by ``parse`` (records, or
    only delimited)."""
    n = len(s)
    if pos == n:
        return []
    if s.startswith("{", pos):  # exactly one input: no "0=" index
        return [parse(s, pos, _LAST)[0]]
    out: List[object] = []
    k = 0
    while True:
        key = f"{k}="
        if not s.startswith(key, pos):
            raise _TitleError(pos, f"input '{key}{{' (or the end of the title)", repr(s[pos : pos + 20]))
        got, pos = parse(s, pos + len(key), _NEXT)
        out.append(got)
        if pos == n:
            return out
        pos += 1  # the space before the next "k="
        k += 1


def _block_id(s: str, pos: int, place: _Place) -> Tuple[int, int]:
    block = _scan_info(s, pos, place)
    return int(block[0]), block[13]


def _input_ids_at(s: str, pos: int) -> Tuple[int, ...]:
    """Ids of the ``owner_opr_inputs`` list at ``pos``, delimited exactly as
    :func:`_parse_inputs` delimits it, without building records (a folder orders tens of
    thousands of vars by these); the layout dims are checked when the records are read."""
    return tuple(_input_blocks(s, pos, _block_id))  # type: ignore[arg-type]


def _parse_title(s: str) -> Tuple[VarInfo, Tuple[VarInfo, ...], Optional[int]]:
    var, pos, input_index = _parse_head(s)
    return var, _parse_inputs(s, pos), input_index


def _parse_inputs(s: str, pos: int) -> Tuple[VarInfo, ...]:
    """The ``owner_opr_inputs`` list that starts at ``pos``."""
    return tuple(_input_blocks(s, pos, _parse_info))  # type: ignore[arg-type]


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

