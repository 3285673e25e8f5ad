"""Same bits as another run of the sweep: when an option's layerwise run can be skipped.

A sweep runs the layerwise model (local error) once under every option that ran; those runs
cost more than the option runs themselves. Many options change nothing on a given CPU and
model (``--weight-preprocess``, ``--const-shape``, ``--record-comp-seq`` on x86): their dump is
the default run's, bit for bit. Such an option's local error is the default run's (the same
kernels produced the same bits on these inputs), so its layerwise run is not made; two options
whose dumps are bit-identical to each other (``nchw44`` and ``nchw44-dot`` on x86) share one.

:func:`same_bits` decides it. Dump B has *the same bits as* dump A when

* every var A dumped has a var of the same name in B with the same dtype, shape and value bytes
  (a name held by several vars: the same multiset of (dtype, shape, bytes) on both sides);
* B dumped no computed var (not an input or a constant, :func:`~lar_prec.compare.namepair.skip_reason`)
  that A did not (an extra computed var is an operator A's graph has not run), and each name
  is computed on both sides or on neither (a var one run folded into a constant is an operator
  the other ran);
* neither folder is marked incomplete.

Only the values' bytes are compared (the titles hold var ids, which a rewritten graph
renumbers). Headers first: a dump whose names, dtypes or shapes differ is told apart without
reading a value; then the values are hashed (sha256, 1 MiB at a time) var by var in A's
execution order, each dump's hashes kept, stopping at the first var that differs.

What it means, and what it does not: the two runs computed the same bits on *these* inputs.
The layerwise run feeds each operator the reference's values (close to these, not the same),
so an option whose kernels differ from the default's only on other values would get the
default run's local error; its verdict is about these inputs anyway, and its output error is
measured on its own dump. :func:`reads_alike` says whether two options read a layerwise dump
the same way (floors in the same arithmetic, layouts brought back the same way): a run is
shared only then.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from lar_prec.compare.namepair import skip_reason
from lar_prec.compare.relayout import FORMAT_KIND
from lar_prec.dumps.binary import BinaryDump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import DumpFolderError, DumpFormatError
from lar_prec.records import PathLike

#: (dtype name, shape) of one dumped var
_Head = Tuple[str, Tuple[int, ...]]


class DumpPrint:
    """The names, dtypes and shapes of one dump folder's vars (from headers only), and the
    hash of each var's values, made on first use and kept."""

    def __init__(self, dump_dir: PathLike) -> None:
        folder = DumpFolder(dump_dir)
        self.dir = str(dump_dir)
        self.incomplete = folder.incomplete
        #: name -> its vars' dumps; computed names and the others (inputs, constants) apart
        self.vars: Dict[str, List[BinaryDump]] = defaultdict(list)
        self.computed: Dict[str, Tuple[_Head, ...]] = {}
        self.others: Dict[str, Tuple[_Head, ...]] = {}
        heads: Dict[str, List[_Head]] = defaultdict(list)
        kinds: Dict[str, bool] = {}
        for d in folder:  # execution order
            name = d.var.name
            self.vars[name].append(d)
            heads[name].append((d.dtype.name, tuple(d.shape)))
            kinds[name] = kinds.get(name, False) or not skip_reason(d.var)
        for name, hs in heads.items():
            (self.computed if kinds[name] else self.others)[name] = tuple(sorted(hs))
        self._hashes: Dict[str, Tuple[Tuple[str, Tuple[int, ...], str], ...]] = {}

    def values(self, name: str) -> Tuple[Tuple[str, Tuple[int, ...], str], ...]:
        """(dtype, shape, sha256 of the value bytes) of every var named ``name``, sorted.

        Raises:
            DumpFormatError: a file shrank or vanished since its header was read.
        """
        got = self._hashes.get(name)
        if got is None:
            got = self._hashes[name] = tuple(sorted((d.dtype.name, tuple(d.shape), _hash(d)) for d in self.vars[name]))
        return got


def _hash(d: BinaryDump) -> str:
    h = hashlib.sha256()
    try:
        left = d.hash_values(h)
    except OSError as exc:
        raise DumpFormatError(d.path, d.data_offset, f"{d.nbytes} data bytes", str(exc)) from None
    if left:
        raise DumpFormatError(d.path, d.data_offset, f"{d.nbytes} data bytes", f"{d.nbytes - left} bytes to the end")
    return h.hexdigest()


def same_bits(a: DumpPrint, b: DumpPrint) -> str:
    """"" when ``b`` has the same bits as ``a`` (the module docstring's rule), else the first
    reason it has not, in words."""
    if a.incomplete or b.incomplete:
        return "a dump is marked incomplete"
    extra = [n for n in b.computed if n not in a.computed]
    if extra:
        return f"{extra[0]} is computed in one run only"
    for side, name, heads in [*(("computed", n, h) for n, h in a.computed.items()),
                              *(("others", n, h) for n, h in a.others.items())]:
        theirs = getattr(b, side).get(name)
        if theirs is None:  # not dumped, or a computed var the other run holds as a constant
            return f"{name} is dumped in one run only, or computed in one only"
        if theirs != heads:
            return f"{name}: dtype or shape differs"
    for name in a.vars:  # a's execution order: the first var that differs ends it
        if a.values(name) != b.values(name):
            return f"{name}: its values differ"
    return ""


def print_of(dump_dir: Optional[PathLike]) -> Optional[DumpPrint]:
    """The print of a dump folder, None when it cannot be read (then nothing is shared with it)."""
    if dump_dir is None:
        return None
    try:
        return DumpPrint(dump_dir)
    except (DumpFolderError, DumpFormatError):
        return None


def safe_same_bits(a: Optional[DumpPrint], b: Optional[DumpPrint]) -> str:
    """:func:`same_bits`, with a folder that cannot be read told as a reason (never raises)."""
    if a is None or b is None:
        return "a dump cannot be read"
    try:
        return same_bits(a, b)
    except (DumpFolderError, DumpFormatError) as exc:
        return f"a dump cannot be read: {exc}"


def reads_alike(fmt_a: Optional[str], dtype_a: Optional[str], fmt_b: Optional[str], dtype_b: Optional[str]) -> bool:
    """Whether two options read a layerwise dump the same way: local error's floors in the same
    arithmetic (``compute_dtype``) and shapes brought back by the same layout kind (``fmt``:
    NCHW44 and NCHW44_DOT are both blocks of 4)."""
    kind_a, kind_b = FORMAT_KIND.get(fmt_a or "", fmt_a), FORMAT_KIND.get(fmt_b or "", fmt_b)
    return kind_a == kind_b and (dtype_a or "float32") == (dtype_b or "float32")


def taken_words(who: str) -> str:
    """The words of an option's row whose local error is ``who``'s (``the default run``, or an
    option's name)."""
    return f"same bits as {who}: local error taken from it"
