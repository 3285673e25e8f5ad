"""Reader of ``--io-dump`` text files (``load_and_run.md`` 3.1, 3.2): normal and lazy format,
several executions, files cut while being written.

Linear in the input: every line is looked at a bounded number of times (a free-text name is
searched for its end with one scan from the right, not one scan per candidate).

Example::

    text = read_text_dump("run/naive/io.txt")
    text.last()[11].val.mean
    if text.truncated: print(text.truncated)
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from lar_prec.errors import DumpFormatError
from lar_prec.titles import _match_brace, _shape_from_layout, _TitleError

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["TextDep", "TextStats", "TextVar", "TextDump", "read_text_dump"]

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

