"""MegEngine compatibility: the text of ``compare_binary_iodump`` and the
``accuracy_shake_var_tree`` API.

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
from typing import Dict, List, Optional, Sequence, Tuple, Union

from lar_prec.compare import VarDiff
from lar_prec.errors import DumpFormatError, UsageError
from lar_prec.graph import topological_order
from lar_prec.titles import parse_title
from lar_prec.vartree import VarTree

log = logging.getLogger(__name__)

PathLike = Union[str, Path]

__all__ = ["MegDiff", "MegEntry", "parse", "read_megengine_diff", "tree_from_megengine_diff", "varNode"]


# ============================================================================ compare_binary_iodump text


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
    `` shape mismatch: ...``. Wrapped lines are rejoined with one space.

    Raises:
        DumpFormatError: the file cannot be read, or a failure line has no titles before it.
    """
    p = Path(path)
    if text is None:
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise DumpFormatError(p, None, "a readable compare_binary_iodump output", str(e)) from None
    titles: List[str] = []
    cur: Optional[List[str]] = None
    file_path = ""
    entries: List[MegEntry] = []
    crashed: Optional[str] = None
    in_tb = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\n")
        if line.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb:
            if line and not line.startswith(" "):
                crashed = line.strip()
                in_tb = False
            continue
        hit = None
        for marker, kind, _status in _KINDS:
            if line.startswith(" " + marker) or (line.startswith(marker) and cur is not None):
                hit = kind
                break
        if hit is not None:
            if cur is not None:
                titles.append(" ".join(cur))
                cur = None
            if len(titles) < 2:
                raise DumpFormatError(p, None, f"two var titles before the '{hit}' line", f"line {lineno}: {line[:60]!r}")
            ta, tb = titles[-2], titles[-1]
            try:
                vid, ins, k, name, opr, opr_type, dtype, shape = _title_fields(ta)
            except (DumpFormatError, UsageError, ValueError):
                raise DumpFormatError(p, None, "a var title with {id:N, ...}", f"line {lineno}: {ta[:60]!r}") from None
            m = _SHAPE.search(line)
            if not shape and m and hit == "not equal":
                shape = tuple(int(x) for x in re.findall(r"\d+", m.group(1)))
            entries.append(
                MegEntry(
                    kind=hit, path=file_path, title_a=ta, title_b=tb, message=line.strip(), var_id=vid, inputs=ins,
                    input_index=k, name=name, opr=opr, opr_type=opr_type, dtype=dtype, shape=shape, line=lineno,
                )
            )
            titles = []
            file_path = ""
            continue
        if _TITLE_START.match(line):
            if cur is not None:
                titles.append(" ".join(cur))
            cur = [line.strip()]
            continue
        if cur is not None and line.startswith("  "):
            cur.append(line.strip())
            continue
        if line.endswith(": ") or line.endswith(":"):
            if cur is not None:
                titles.append(" ".join(cur))
                cur = None
            titles = []
            file_path = line.rstrip()[:-1]
            continue
        # anything else (warnings, blank lines) is not part of an entry
    return MegDiff(path=p, entries=tuple(entries), crashed=crashed)


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
