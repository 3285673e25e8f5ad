"""MegEngine compatibility: the text of ``compare_binary_iodump`` (written and read) and the
``accuracy_shake_var_tree`` API.

* :func:`megengine_text` writes what ``python -m megengine.tools.compare_binary_iodump A B -e T``
  prints, byte for byte with a fixed threshold (``lar-prec compare --format megengine``), so
  MegEngine's ``accuracy_shake_var_tree`` (and ``lar-prec tree``) read lar-prec's output.
* :func:`read_megengine_diff` reads what ``python -m megengine.tools.compare_binary_iodump``
  printed, strictly: anything that is not that output (a binary file, a report, an
  ``--io-dump`` text, a file cut before its first failure) raises
  :class:`~lar_prec.errors.DumpFormatError` naming the file and the line, so that ``tree``
  never reads a wrong file as "no difference". An empty file is what the tool prints when
  nothing differs.
* :func:`tree_from_megengine_diff` turns it into a :class:`~lar_prec.vartree.VarTree`.
* :func:`parse` and :class:`varNode` are ``accuracy_shake_var_tree``'s API without its bugs
  (``load_and_run.md`` 6.2).
"""
from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
import textwrap
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.compare.records import AGREEING, VarDiff
from lar_prec.compare.engine.workers import DEFAULT_CHUNK
from lar_prec.errors import DumpFormatError, UsageError
from lar_prec.graph import topological_order
from lar_prec.dumps.binary import BinaryDump, read_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import read_regular_file
from lar_prec.dumps.titles import parse_title
from lar_prec.diagnosis.tree import VarTree
from lar_prec.compare.folders import apply_threshold, compare_dumps
from lar_prec.compare.engine.scan import scan_over

if TYPE_CHECKING:
    from lar_prec.compare.records import Comparison

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402

__all__ = ["MegDiff", "MegEntry", "megengine_text", "parse", "read_megengine_diff", "tree_from_megengine_diff", "varNode"]


# ============================================================================ writing compare_binary_iodump's text


def _megengine_title(title: str) -> str:
    return "\n  ".join(textwrap.wrap(title))


def _megengine_sum(d: BinaryDump) -> "np.float32":
    """``v.sum()`` of the whole tensor cast to float32, as compare_binary_iodump computes it."""
    if not d.dtype.decodable:
        return np.float32("nan")
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(d.array(), dtype=np.float32).sum()


def megengine_text(comparison: "Comparison", *, chunk_elements: int = DEFAULT_CHUNK) -> Iterator[str]:
    """Yield what ``python -m megengine.tools.compare_binary_iodump A B -e T`` prints, one
    failure at a time, so its ``accuracy_shake_var_tree`` (and ``lar-prec tree``) read it.

    Files are paired by name in sorted order as there, ``-inp`` files included. A file is
    printed when lar-prec's status for it is not ``ok``: ``not equal`` with the first element
    above the var's own threshold (``T`` = that threshold, so with a fixed threshold this is
    byte for byte the original's output), ``not finite`` only when the NaN/Inf positions
    really differ (the original also flags NaN at the same place on both sides),
    ``shape mismatch``. Files in one folder only, which make the original stop, are skipped.
    """

    fa, fb = DumpFolder(comparison.dir_a), DumpFolder(comparison.dir_b)
    names: Dict[str, Tuple[Path, Path]] = {}
    pa = {p.name: p for p in list(fa.paths().values()) + list(fa.input_files.values())}
    pb = {p.name: p for p in list(fb.paths().values()) + list(fb.input_files.values())}
    for n in sorted(set(pa) & set(pb)):
        names[n] = (pa[n], pb[n])
    thr = comparison.threshold
    for n, (path_a, path_b) in names.items():
        da, db = read_binary_dump(path_a), read_binary_dump(path_b)
        if da.input_index is None and da.id in comparison:
            d = comparison[da.id]
        else:
            d = apply_threshold([compare_dumps(da, db, chunk_elements=chunk_elements)], thr)[0]
            if da.id in comparison and comparison[da.id].scale is not None and d.threshold is not None and thr.scaled:
                # an input as seen by its consumer: hold it to the input var's own threshold
                from dataclasses import replace

                d = apply_threshold([replace(d, scale=comparison[da.id].scale)], thr)[0]
        if d.status in AGREEING or d.status == "missing":
            continue
        name = "{}: \n{}\n{}\n".format(str(path_a), _megengine_title(da.title), _megengine_title(db.title))
        if d.status == "nonfinite":
            yield "{} not finite: sum={} vs sum={}".format(name, _megengine_sum(da), _megengine_sum(db))
        elif d.status == "shape_mismatch":
            yield "{} shape mismatch: {} vs {}".format(name, tuple(da.shape), tuple(db.shape))
        else:
            t = d.threshold if d.threshold is not None else 0.0
            scan = scan_over(da, db, t, chunk=chunk_elements, stop_at_first=True)
            if scan.first_index is None:
                continue
            yield "{} not equal: shape={} nonequal_idx={} v0={} v1={} err={}".format(
                name, tuple(da.shape), scan.first_index, scan.first_a, scan.first_b, scan.first_err
            )


# ============================================================================ reading compare_binary_iodump's text


@dataclass(frozen=True)
class MegEntry:
    """One failure printed by ``compare_binary_iodump``."""

    kind: str  # "not equal" | "not finite" | "shape mismatch"
    path: str
    title_a: str
    title_b: str
    message: str  # the failure line as printed (leading space removed)
    var_id: int
    inputs: Tuple[int, ...]
    input_index: Optional[int]  # k for an "inp<k>: " (MGB_DUMP_INPUT) title
    name: str
    opr: str
    opr_type: str
    dtype: str
    shape: Tuple[int, ...]
    line: int

    @property
    def src_info(self) -> str:
        """The block accuracy_shake_var_tree shows for a node: both titles and the message."""
        return f"{self.title_a}\n{self.title_b}\n {self.message}"


@dataclass(frozen=True)
class MegDiff:
    """A parsed ``compare_binary_iodump`` output."""

    path: Optional[Path]
    entries: Tuple[MegEntry, ...]
    #: the last line of a Python traceback in the text (the tool crashed), else None
    crashed: Optional[str] = None
    #: where the text was cut ("line N: ..."), None when it ends after a whole entry
    truncated: Optional[str] = None


_KINDS = (("not equal: ", "not equal", "divergent"), ("not finite: ", "not finite", "nonfinite"), ("shape mismatch: ", "shape mismatch", "shape_mismatch"))
_TITLE_START = re.compile(r"(?:inp\d+: )?var=\{id:\d+,")
_ID = re.compile(r"\{id:(\d+),")
_SHAPE = re.compile(r"shape=(\([^)]*\))")


def _title_fields(title: str) -> Tuple[int, Tuple[int, ...], Optional[int], str, str, str, str, Tuple[int, ...]]:
    try:
        var, inputs, k = parse_title(title)
        return var.id, tuple(v.id for v in inputs), k, var.name, var.owner, var.opr_type, var.dtype, tuple(var.shape)
    except (DumpFormatError, UsageError, ValueError):
        # rewrapped names can lose or gain a space: fall back to the ids alone
        ids = [int(x) for x in _ID.findall(title)]
        if not ids:
            raise
        cut = title.find("owner_opr_inputs=")
        ins = tuple(int(x) for x in _ID.findall(title[cut:])) if cut >= 0 else tuple(ids[1:])
        m = re.match(r"inp(\d+): ", title)
        return ids[0], ins, (int(m.group(1)) if m else None), "", "", "", "", ()


def read_megengine_diff(path: PathLike, text: Optional[str] = None) -> MegDiff:
    """Parse what ``python -m megengine.tools.compare_binary_iodump DIR0 DIR1`` printed.

    Each failure is a ``<file>: `` line, the two titles wrapped at 70 columns (continuation
    lines indented by two spaces), then `` not equal: ...``, `` not finite: ...`` or
    `` shape mismatch: ...``. Wrapped lines are rejoined with one space. The tool prints
    nothing when nothing differs, so an empty file (or blank lines only) is a valid output
    with no entry. A Python traceback (the tool crashed) sets ``crashed``; its warnings
    (``file.py:70: RuntimeWarning: ...`` and the source line under it) are skipped.

    Anything else is refused rather than read as "no difference": binary data, a file with
    neither a failure nor a traceback (a report, an ``--io-dump`` text, a file cut before its
    first failure: the message says where it ends), or an entry broken in the middle. A file
    cut inside a later entry keeps the entries before it and says where it was cut in
    ``truncated``. (A file cut exactly between two entries cannot be told from a whole one.)
    Linear in the size of the text.

    Raises:
        DumpFormatError: names the file, the byte offset and line, and what was expected.
    """
    p = Path(path)
    if text is None:
        text = _decode(p, read_regular_file(p, "a readable compare_binary_iodump output"))
    else:
        nul = text.find("\0")
        if nul >= 0:
            raise DumpFormatError(p, len(text[:nul].encode("utf-8", "replace")), _WHAT, "binary data (a NUL byte)")
    return _DiffReader(p, text).read()


#: what a compare_binary_iodump output is, for error messages
_WHAT = "compare_binary_iodump output ('<file>: ', two var titles 'var={id:...', then ' not equal: ...')"
_WARNING = re.compile(r"\S.*:\d{1,9}: [A-Za-z]*Warning: ")


def _decode(p: Path, raw: bytes) -> str:
    """The text of a compare_binary_iodump output, or the error that says it is binary."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise DumpFormatError(p, nul, _WHAT, "binary data (a NUL byte)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DumpFormatError(p, e.start, _WHAT, f"binary data (byte 0x{raw[e.start]:02x} is not UTF-8 text)") from None


class _DiffReader:
    """The state of one :func:`read_megengine_diff` while its lines are read.

    ``state`` is where the current entry is: "idle" (between entries), "file" (after the
    ``<file>: `` line), "a"/"b" (inside the first/second title)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.state = "idle"
        self.file_path = ""
        self.entry_line = 0
        self.titles: List[List[str]] = []
        self.entries: List[MegEntry] = []
        self.crashed: Optional[str] = None
        self.in_tb = False
        self.skip_source = False
        #: first line that is not part of the format between entries: (line number, char offset, text)
        self.noise: Optional[Tuple[int, int, str]] = None
        self.truncated: Optional[str] = None

    def _error(self, char_off: int, expected: str, found: str) -> DumpFormatError:
        return DumpFormatError(self.path, len(self.text[:char_off].encode("utf-8")), expected, found)

    def _noise_error(self) -> DumpFormatError:
        assert self.noise is not None
        lineno, off, line = self.noise
        return self._error(off, f"{_WHAT} (line {lineno})", repr(line[:60]))

    def read(self) -> MegDiff:
        lines = self.text.split("\n")
        cut_line = lines[-1] != ""  # every line the tool prints ends with a newline
        if not cut_line:
            lines.pop()
        off = 0
        last = len(lines)
        for lineno, raw in enumerate(lines, 1):
            try:
                self._line(lineno, off, raw.rstrip("\r"))
            except DumpFormatError:
                if not (cut_line and lineno == last):
                    raise
                # the line was cut while being written ("' not "): the entry is unfinished
            off += len(raw) + 1
        return self._finish(len(lines), cut_line)

    def _line(self, lineno: int, off: int, line: str) -> None:
        if self.in_tb or line.startswith("Traceback (most recent call last)"):
            self._traceback(line)
            return
        if self.skip_source and line.startswith(" "):
            self.skip_source = False  # the source line Python prints under a warning
            return
        self.skip_source = False
        if _WARNING.match(line):
            self.skip_source = True
            return
        kind = self._failure_kind(line)
        if kind is not None:
            self._failure(lineno, off, line, kind)
        elif _TITLE_START.match(line) and self.state in ("file", "a"):
            self.state = "a" if self.state == "file" else "b"
            self.titles.append([line.strip()])
        elif line.startswith("  ") and self.state in ("a", "b"):
            self.titles[-1].append(line.strip())
        elif self.state != "idle":
            if self.noise is not None and not self.entries and self.crashed is None:
                raise self._noise_error()  # what the file is not says more than where it broke
            want = {"file": "the first var title 'var={id:...'", "a": "a title line or the second var title",
                    "b": "a title line or ' not equal: ...', ' not finite: ...', ' shape mismatch: ...'"}[self.state]
            raise self._error(off, f"{want} (line {lineno}, in the entry of {self.file_path!r} from line {self.entry_line})",
                              repr(line[:60]))
        elif line.endswith(": ") or line.endswith(":"):
            self.state, self.file_path, self.entry_line, self.titles = "file", line.rstrip()[:-1], lineno, []
        elif line.strip() and self.noise is None:
            self.noise = (lineno, off, line)

    def _traceback(self, line: str) -> None:
        if not self.in_tb:
            self.in_tb = True
            self.state = "idle"  # an entry the crash interrupted is not one
            return
        if not line or line.startswith(" ") or line.startswith("During handling") or line.startswith("The above exception"):
            return
        if line.startswith("Traceback (most recent call last)"):
            return
        self.in_tb = False
        self.crashed = line.strip()
        # with -s the tool stops by raising the failure: its message is the entry itself
        rest = line.partition(": ")[2]
        if line.startswith("AssertionError: ") and rest.rstrip().endswith(":"):
            self.state, self.file_path, self.entry_line, self.titles = "file", rest.rstrip()[:-1], 0, []

    def _failure_kind(self, line: str) -> Optional[str]:
        for marker, kind, _status in _KINDS:
            if line.startswith(" " + marker) or (self.state == "b" and line.startswith(marker)):
                return kind
        return None

    def _failure(self, lineno: int, off: int, line: str, kind: str) -> None:
        if self.state != "b":
            raise self._error(off, f"two var titles before the '{kind}' line (line {lineno})", repr(line[:60]))
        ta, tb = (" ".join(t) for t in self.titles[-2:])
        try:
            vid, ins, k, name, opr, opr_type, dtype, shape = _title_fields(ta)
        except (DumpFormatError, UsageError, ValueError):
            raise self._error(off, f"a var title with {{id:N, ...}} before line {lineno}", repr(ta[:60])) from None
        m = _SHAPE.search(line)
        if not shape and m and kind == "not equal":
            shape = tuple(int(x) for x in re.findall(r"\d+", m.group(1)))
        self.entries.append(
            MegEntry(
                kind=kind, path=self.file_path, title_a=ta, title_b=tb, message=line.strip(), var_id=vid, inputs=ins,
                input_index=k, name=name, opr=opr, opr_type=opr_type, dtype=dtype, shape=shape, line=lineno,
            )
        )
        self.state, self.file_path, self.titles = "idle", "", []

    def _finish(self, n_lines: int, cut_line: bool) -> MegDiff:
        if self.in_tb:  # the text ends inside a traceback: the tool crashed, the end is lost
            self.crashed = "a traceback without its last line (the text was cut)"
            self.truncated = f"line {n_lines}: the file ends inside a traceback"
        found_any = bool(self.entries) or self.crashed is not None
        if not found_any and self.noise is not None:
            raise self._noise_error()
        if self.state != "idle":
            where = f"line {n_lines}: the file ends inside the entry of {self.file_path!r}"
            where += f" (from line {self.entry_line})" if self.entry_line else ""
            if not found_any:
                raise self._error(
                    len(self.text), "' not equal: ...', ' not finite: ...' or ' shape mismatch: ...' ending an entry",
                    f"the end of the file ({where}: cut before its first failure?)",
                )
            self.truncated = f"{where}, before its failure line (cut?)"
        elif cut_line and self.text and self.truncated is None:
            self.truncated = f"line {n_lines}: the last line has no end (the file was cut while being written?)"
        return MegDiff(path=self.path, entries=tuple(self.entries), crashed=self.crashed, truncated=self.truncated)


_FIRST = re.compile(r"nonequal_idx=(\([^)]*\)) v0=(\S+) v1=(\S+) err=(\S+)")


def _entry_diff(e: MegEntry, index: int, status: str) -> VarDiff:
    note = e.message
    worst_index = worst_a = worst_b = None
    m = _FIRST.search(e.message)
    if m:
        worst_index = tuple(int(x) for x in re.findall(r"-?\d+", m.group(1)))
        try:
            worst_a, worst_b = float(m.group(2)), float(m.group(3))
        except ValueError:
            worst_a = worst_b = None
    return VarDiff(
        id=e.var_id, name=e.name, opr=e.opr, opr_type=e.opr_type, dtype=e.dtype, shape=e.shape, inputs=e.inputs,
        status=status, worst_index=worst_index, worst_a=worst_a, worst_b=worst_b, note=note, index=index,
    )


def tree_from_megengine_diff(path: PathLike, text: Optional[str] = None) -> Tuple[VarTree, MegDiff]:
    """The :class:`VarTree` of a ``compare_binary_iodump`` output.

    Every printed failure is a non-ok var (``not equal`` -> divergent, ``not finite`` ->
    nonfinite, ``shape mismatch``); vars that were not printed passed the check and are ok.
    ``inp<k>`` entries (MGB_DUMP_INPUT files) are read after the consumer ran, so an in-place
    operator may have overwritten them: they only add a note to the var, never make one.
    ``max_err`` is unknown (the tool prints only the first failing element, kept in ``note``
    and ``worst_*``). Vars are in order of first appearance.
    """
    md = read_megengine_diff(path, text)
    if md.truncated:
        # the command's output must say the list may be incomplete (stderr, via logging)
        log.warning("note: %s was cut: %s; failures after the cut are not known", path, md.truncated)
    status_of = {k: s for _m, k, s in _KINDS}
    diffs: Dict[int, VarDiff] = {}
    inp_notes: Dict[int, List[str]] = {}
    for e in md.entries:
        if e.input_index is not None:
            inp_notes.setdefault(e.var_id, []).append(f"also differs as input inp{e.input_index} in {e.path or 'an -inp file'}")
            continue
        if e.var_id in diffs:
            continue
        diffs[e.var_id] = _entry_diff(e, len(diffs), status_of[e.kind])
    for vid, notes in inp_notes.items():
        if vid in diffs:
            d = diffs[vid]
            diffs[vid] = replace(d, note="; ".join([d.note] + notes))
    # producers before consumers, whatever order the files were printed in (ties: smaller id)
    order, _ = topological_order({v: d.inputs for v, d in diffs.items()})
    ordered = [replace(diffs[v], index=i) for i, v in enumerate(order)]
    tree = VarTree(ordered, threshold=None, source=str(path))
    return tree, md


# ============================================================================ accuracy_shake_var_tree compatibility


class varNode:  # noqa: N801 - the name accuracy_shake_var_tree users already call
    """A node of :func:`parse`, API-compatible with ``accuracy_shake_var_tree.varNode``.

    Keys are ``"id:<n>"`` strings as there; :meth:`get_varNode` also takes ``"id::<n>"`` (the
    form the MegEngine docs show) and plain ints.
    """

    var_node_dict: Dict[str, "varNode"] = {}
    var_node_root_dict: Dict[str, "varNode"] = {}

    def __init__(self, id: str, dependence_list: Sequence["varNode"] = (), src_info: str = "") -> None:  # noqa: A002
        self.id = id
        self.src_info = src_info
        self.dependence_list: List[varNode] = list(dependence_list)
        self.reference_list: List[varNode] = []
        self.is_root = False
        self.vitrual = not src_info  # (sic) True for nodes known only as a dependence

    def __repr__(self) -> str:
        return f"varNode({self.id!r}, root={self.is_root})"

    @property
    def var_id(self) -> int:
        """The var id as an int."""
        return int(self.id.split(":")[-1])

    @staticmethod
    def _key(id: Union[str, int]) -> str:  # noqa: A002
        if isinstance(id, int):
            return f"id:{id}"
        m = re.fullmatch(r"\s*(?:id:{1,2})?\s*(\d+)\s*", str(id))
        if not m:
            raise KeyError(f"not a var id: {id!r} (use 'id:3', 'id::3' or 3)")
        return f"id:{int(m.group(1))}"

    @staticmethod
    def get_varNode(id: Union[str, int]) -> "varNode":  # noqa: A002, N802
        """The node of ``"id:3"``, ``"id::3"`` or ``3``."""
        key = varNode._key(id)
        try:
            return varNode.var_node_dict[key]
        except KeyError:
            raise KeyError(f"{key} is not in the parsed diff ({len(varNode.var_node_dict)} vars)") from None

    def get_dependence_list(self) -> List["varNode"]:  # noqa: N802
        """The nodes this var depends on."""
        return self.dependence_list

    def get_reference_list(self) -> List["varNode"]:  # noqa: N802
        """The nodes that depend on this var."""
        return self.reference_list

    def show_src_info(self) -> None:  # noqa: N802
        """Print the titles and the failure message (what the original prints)."""
        # writes to stdout on purpose: this is the original tool's public behaviour
        sys.stdout.write(self.src_info + "\n")


def parse(filename: PathLike) -> Dict[str, varNode]:
    """Read a ``compare_binary_iodump`` output like ``accuracy_shake_var_tree.parse``.

    Fills ``varNode.var_node_dict`` (every differing var and every var it depends on) and
    ``varNode.var_node_root_dict`` and returns the latter: ``"id:<n>"`` -> node, most likely
    origin first. Unlike the original, ``not finite`` and ``shape mismatch`` entries count,
    consumers printed before producers work, every differing node keeps its source info, vars
    without inputs can be roots, and ``-inp`` entries do not create false roots.
    """
    tree, md = tree_from_megengine_diff(filename)
    varNode.var_node_dict.clear()
    varNode.var_node_root_dict.clear()
    src: Dict[int, str] = {}
    for e in md.entries:
        if e.input_index is None and e.var_id not in src:
            src[e.var_id] = e.src_info
    nodes: Dict[int, varNode] = {}

    def get(vid: int) -> varNode:
        n = nodes.get(vid)
        if n is None:
            n = varNode(f"id:{vid}", (), src.get(vid, ""))
            nodes[vid] = n
        return n

    for d in tree.diffs:
        n = get(d.id)
        for u in d.inputs:
            dep = get(u)
            if dep not in n.dependence_list:
                n.dependence_list.append(dep)
                dep.reference_list.append(n)
    for vid, n in nodes.items():
        varNode.var_node_dict[n.id] = n
    for r in tree.roots():
        node = nodes[r.id]
        node.is_root = True
        varNode.var_node_root_dict[node.id] = node
    return varNode.var_node_root_dict
