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
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from lar_prec.errors import DumpFormatError
from lar_prec.dumps.titles import _shape_from_layout, _TitleError

from lar_prec.records import PathLike  # noqa: E402

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


_PRODUCED_END = re.compile(r"\{([A-Za-z_][A-Za-z0-9_:]*)\} opr(\d{1,20})\Z")
_OWNER_KEY = " owner_opr="
_LAYOUT_KEY = " layout="


def _brace_ends(line: str) -> Dict[int, int]:
    """Index after the matching ``}`` of every ``{`` of ``line`` (one pass with a stack); only
    built for the rare line whose layout holds a nested brace."""
    ends: Dict[int, int] = {}
    stack: List[int] = []
    for i, c in enumerate(line):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            ends[stack.pop()] = i + 1
    return ends


def _parse_produced(line: str) -> Optional[Tuple[int, str, Optional[str], str, str, int]]:
    """(id, name, layout or None, owner, opr type, opr id) of a ``produced`` line.

    The name is free text, so each `` layout=`` is a candidate end of it: the first one
    followed by a layout (or ``<invalid>``) and `` owner_opr=`` wins. Linear in the line: the
    fixed tail ``{OprType} opr<N>`` is found once from the right, and the next ``{``/``}``
    after a candidate are found by scans that only move forward (a line of 10,000
    `` layout={`` took 24 s when each candidate searched to the end).
    """
    m = _PRODUCED.match(line)
    if not m:
        return None
    start = m.end()
    tail = _PRODUCED_END.search(line, start)
    if tail is None:
        return None
    owner_end = tail.start()
    n = len(line)
    nxt_close = nxt_open = -1  # next "}" / "{" at or after the current candidate
    nested: Optional[Dict[int, int]] = None
    i = line.find(_LAYOUT_KEY, start)
    while 0 <= i < owner_end:
        p = i + len(_LAYOUT_KEY)
        layout: Optional[str] = None
        end = -1
        if line.startswith("<invalid>", p):
            end = p + len("<invalid>")
        elif p < n and line[p] == "{":
            if nxt_close < p:
                nxt_close = line.find("}", p)
                nxt_close = n if nxt_close < 0 else nxt_close
            if nxt_open <= p:
                nxt_open = line.find("{", p + 1)
                nxt_open = n if nxt_open < 0 else nxt_open
            if nxt_close < n and nxt_close < nxt_open:
                end = nxt_close + 1
            elif nxt_close < n:  # a nested brace: match it properly
                nested = _brace_ends(line) if nested is None else nested
                end = nested.get(p, -1)
            if end >= 0:
                layout = line[p:end]
        if end >= 0 and line.startswith(_OWNER_KEY, end) and end + len(_OWNER_KEY) <= owner_end:
            owner = line[end + len(_OWNER_KEY) : owner_end]
            return int(m.group(1)), line[start:i], layout, owner, tail.group(1), int(tail.group(2))
        i = line.find(_LAYOUT_KEY, i + 1)
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

    Normal format: executions are split where a var id repeats. Lazy format (one
    ``==== begin lazy value recording``, each var declared once, then one
    ``==== recorded values`` section per flush): one execution per section, every var
    declared so far with that section's values.

    A file cut off in the middle (the run crashed, e.g. ``can not handle dtype Byte in
    print_host_val`` leaves ``" val: "``) is parsed up to the cut; the partial var is kept
    (without a value) and ``truncated`` says where and what was cut. So does a lazy file whose
    values never came (the process died), and a last execution shorter than the one before
    it. (A single execution cut exactly between two var blocks cannot be told from a
    complete one.) Linear in the size of the file.

    Raises:
        DumpFormatError: the file cannot be read, or a complete line that is not part of the
            format (offset = its byte offset; the line number is in the message).
    """
    p = Path(path)
    return _TextReader(p).read(read_regular_file(p, "a readable text dump"))


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def read_regular_file(p: Path, what: str) -> bytes:
    """The bytes of the regular file ``p``. A FIFO or device given by mistake is refused
    instead of blocking the reader forever.

    Raises:
        DumpFormatError: ``p`` cannot be read or is not a regular file; ``what`` says what
            was expected.
    """
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise DumpFormatError(p, None, what, f"{file_kind(mode)}, not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)
    except OSError as e:
        raise DumpFormatError(p, None, what, e.strerror or str(e)) from None


class _TextReader:
    """The state of one :func:`read_text_dump` while its lines are read, one method per
    kind of line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.executions: List[List[TextVar]] = []
        self.current: List[TextVar] = []
        self.seen: set = set()
        self.cur: Optional[_VarBuilder] = None
        self.lazy = False
        #: lazy format: the vars declared so far (id -> var), and one value map per section
        self.declared: Dict[int, TextVar] = {}
        self.sections: List[Tuple[List[TextVar], Dict[int, TextStats]]] = []
        self.in_values = False
        self.truncated: Optional[str] = None

    def read(self, raw: bytes) -> TextDump:
        raw_lines = raw.split(b"\n")
        ends_clean = raw_lines[-1] == b""
        if ends_clean:
            raw_lines.pop()
        n_lines = len(raw_lines)
        off = 0
        for i, rl in enumerate(raw_lines):
            line = rl.decode("utf-8", "replace").rstrip("\r")
            if i == n_lines - 1 and not ends_clean:
                # every complete line ends with "\n": this one was cut while being written
                self._cut_line(i, line)
                break
            if line:
                self._line(i, off, line)
            off += len(rl) + 1
        return self._result(n_lines)

    def _bad(self, i: int, off: int, expected: str, line: str) -> DumpFormatError:
        return DumpFormatError(self.path, off, f"{expected} (line {i + 1})", repr(line[:80]))

    def _cut_line(self, i: int, line: str) -> None:
        if self.cur is not None:
            what = "value line" if line.startswith(" val:") else "line"
            self.truncated = f"line {i + 1}: {what} of var{self.cur.head[0]} cut off ({line[:40]!r})"
        else:
            self.truncated = f"line {i + 1}: line cut off ({line[:40]!r})"

    def _finish(self) -> None:
        if self.cur is not None:
            v = self.cur.build()
            self.cur = None
            if self.lazy:
                self.declared.pop(v.id, None)  # a re-declared var moves to its new place
                self.declared[v.id] = v
            else:
                self.current.append(v)

    def _line(self, i: int, off: int, line: str) -> None:
        if self.in_values:
            if self._value_line(line):
                return
            self.in_values = False  # a section ends where the next declaration starts
        if line == _LAZY_BEGIN:
            self._finish()
            self.lazy = True
            return
        if line == _LAZY_VALUES:
            if not self.lazy:
                raise self._bad(i, off, f"'{_LAZY_BEGIN}' before '{_LAZY_VALUES}'", line)
            self._finish()
            self.in_values = True
            self.sections.append((list(self.declared.values()), {}))
            return
        head = _parse_produced(line)
        if head is not None:
            self._produced(head, i)
            return
        cur = self.cur
        if cur is not None and line == " deps:" and cur.state == "produced":
            cur.state = "deps"
            return
        if cur is not None and cur.state == "deps":
            dep = _parse_dep(line)
            if dep is not None:
                cur.deps.append(dep)
                return
            mv = _VAL.match(line)
            if mv:
                text = mv.group(1)
                cur.storage = mv.group(2)
                if text not in ("<see lazy value below>", "<invalid>"):
                    cur.val = _parse_stats(text)
                    if cur.val is None:
                        raise self._bad(i, off, "'[values]min=.. max=.. mean=.. l2=.. sd=..'", line)
                self._finish()
                return
        if self.sections and self.cur is None:
            raise self._bad(i, off, "'#<idx>: opr<id> ...', '  var<id>: name=... [values]min=...' or a 'var<id> produced:' line", line)
        raise self._bad(i, off, "a line of a 'var<id> produced:' block", line)

    def _value_line(self, line: str) -> bool:
        """True when ``line`` belongs to a ``==== recorded values`` section (and is kept)."""
        m = _LAZY_VAR.match(line)
        if m:
            st = _parse_stats(m.group(3))
            if st is not None:
                self.sections[-1][1][int(m.group(1))] = st
                return True
        return _LAZY_OPR.match(line) is not None

    def _produced(self, head: Tuple[int, str, Optional[str], str, str, int], i: int) -> None:
        self._finish()
        if not self.lazy:
            if head[0] in self.seen:
                self.executions.append(self.current)
                self.current = []
                self.seen = set()
            self.seen.add(head[0])
        self.cur = _VarBuilder(head, i + 1)
        if head[2] is None:  # layout=<invalid>: only this line is printed
            self._finish()

    def _result(self, n_lines: int) -> TextDump:
        if self.cur is not None:
            if self.truncated is None:
                self.truncated = f"line {n_lines + 1}: file ended inside the block of var{self.cur.head[0]} (line {self.cur.line})"
            self._finish()
        if self.lazy:
            executions = self._lazy_executions(n_lines)
        else:
            if self.current:
                self.executions.append(self.current)
            executions = self.executions
            if len(executions) > 1 and len(executions[-1]) < len(executions[-2]) and self.truncated is None:
                self.truncated = (
                    f"line {n_lines + 1}: the last execution has {len(executions[-1])} of the {len(executions[-2])} "
                    f"vars of the one before it (the file ends after var{executions[-1][-1].id})"
                )
        return TextDump(self.path, tuple(tuple(ex) for ex in executions), self.lazy, self.truncated)

    def _lazy_executions(self, n_lines: int) -> List[List[TextVar]]:
        executions = [[_with_val(v, vals.get(v.id)) for v in declared] for declared, vals in self.sections]
        flushed = {v.id for declared, _ in self.sections[-1:] for v in declared}
        late = [v for v in self.declared.values() if v.id not in flushed]
        if late:
            # declared after the last section (or no section at all): their values never came
            executions.append(list(self.declared.values()))
            if self.truncated is None:
                if self.sections:
                    what = f"values of {len(late)} var(s) declared after the last '{_LAZY_VALUES}' section"
                else:
                    what = f"lazy values never flushed (no '{_LAZY_VALUES}' section)"
                self.truncated = f"line {n_lines + 1}: {what}"
        return executions


def _with_val(v: TextVar, val: Optional[TextStats]) -> TextVar:
    if val is None or v.val is not None:
        return v
    return replace(v, val=val)
