"""Which var of dump folder A goes with which var of B: the stage between reading and comparing.

:func:`pair_folders` returns a frozen :class:`Pairing` that :func:`lar_prec.compare.compare_folders`
consumes. Modes:

* ``"id"``: a var of A pairs with the var of B with the same id (same graph, two runs).
* ``"name"``: across differently rewritten graphs (load_and_run options: layout transforms,
  fp16, fusion, even ``--const-shape`` shift var ids), by var name with the rule of
  :mod:`lar_prec.compare.namepair` (computed vars; the last producer of a repeated name; the
  ``[N]``-stripped name where unique on both sides). Model inputs pair by exact name. What
  could not be paired is not in ``order`` (it is expected: fused vars, fp16 copies, constants)
  but in ``unpaired``, each with its reason. Roots are found on A's graph (A's ids and inputs).
* ``"auto"``: ``id`` when both folders come from the same graph (the same ids with the same
  names), else ``name``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from lar_prec.errors import DumpFolderError, UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.namepair import INPUT_OPRS, pair_by_name

#: pairing modes pair_folders accepts
MODES = ("id", "name", "auto")

Entry = Tuple[Optional[int], Optional[int]]


@dataclass(frozen=True)
class Pairing:
    """The vars of two folders, matched.

    ``order`` is every entry in execution order: ``(id_a, id_b)`` for a pair, ``(id_a,
    None)`` for a var only in A, ``(None, id_b)`` for one only in B (placed right after the
    last of its inputs). ``mode`` says how pairs were made.
    """

    mode: str
    order: Tuple[Entry, ...]
    #: name mode: ``(side, id, name, reason)`` of every var left without a partner ("a"/"b")
    unpaired: Tuple[Tuple[str, int, str, str], ...] = ()

    @property
    def pairs(self) -> Tuple[Tuple[int, int], ...]:
        """``(id_a, id_b)`` of every paired var, in execution order."""
        return tuple((a, b) for a, b in self.order if a is not None and b is not None)

    @property
    def only_a(self) -> Tuple[int, ...]:
        """Ids of the vars of A that have no partner in B."""
        return tuple(a for a, b in self.order if b is None and a is not None)

    @property
    def only_b(self) -> Tuple[int, ...]:
        """Ids of the vars of B that have no partner in A."""
        return tuple(b for a, b in self.order if a is None and b is not None)

    def __len__(self) -> int:
        return len(self.order)


def _by_id_order(fa: DumpFolder, fb: DumpFolder) -> List[Entry]:
    """Execution order of the vars of both folders: A's order, with B-only vars placed
    right after the last of their inputs (B's own order otherwise)."""
    in_b = fb.files()
    order: List[Entry] = [(v, v if v in in_b else None) for v in fa.ids]
    if not any(v not in fa for v in in_b):
        return order  # B's titles need not be read for their inputs
    only_b = [v for v in fb.ids if v not in fa]
    pos = {v: i for i, v in enumerate(fa.ids)}
    placed: List[Tuple[float, int, Entry]] = []
    for k, v in enumerate(only_b):
        after = max((pos[u] for u in fb.inputs_of(v) if u in pos), default=-1)
        placed.append((after + 0.5, k, (None, v)))
    merged = [(float(i), 0, e) for i, e in enumerate(order)] + placed
    merged.sort(key=lambda x: (x[0], x[1]))
    return [e for _, _, e in merged]


def pair_folders(fa: DumpFolder, fb: DumpFolder, mode: str = "id") -> Pairing:
    """Pair the vars of two folders (see the module docstring for the modes).

    Raises:
        DumpFolderError: a folder holds no dumps, or the folders have no var in common.
        UsageError: an unknown ``mode``.
    """
    if mode not in MODES:
        raise UsageError(f"pairing mode must be one of {', '.join(MODES)}, got {mode!r}")
    for f in (fa, fb):
        if len(f) == 0:
            extra = f" ({len(f.stray)} other entries)" if f.stray else ""
            raise DumpFolderError(f"no binary dump files in {f.path}{extra}: expected files named like 00000b written by --bin-io-dump")
    if mode == "auto":
        mode = "id" if same_graph(fa, fb) else "name"
    if mode == "name":
        return _by_name(fa, fb)
    if not set(fa.files()) & set(fb.files()):
        raise DumpFolderError(
            f"{fa.path} and {fb.path} have no var in common ({len(fa)} and {len(fb)} vars): not dumps of the same model?"
        )
    return Pairing(mode=mode, order=tuple(_by_id_order(fa, fb)))


def same_graph(fa: DumpFolder, fb: DumpFolder) -> bool:
    """True when both folders are dumps of one graph: every var id they share has the same
    name on both sides, and one folder's ids are all in the other. A rewrite renumbers vars
    (and a fused or relaid-out var changes names); a dump that lost files (a crashed run, a file deleted, a folder in a file's place) keeps its ids, so its vars stay
    paired by id and the lost ones are reported ``missing`` rather than silently unpaired."""
    ids_a, ids_b = set(fa.files()), set(fb.files())
    like = fb.noted_like(fa)  # the same title bytes (the batch reader saw them): no call per var
    if ids_a == ids_b:
        return all(v in like or _same_name(fa, fb, v) for v in fa.ids)
    common = ids_a & ids_b
    if not common or not (ids_a <= ids_b or ids_b <= ids_a):  # a rewrite also adds vars of its own
        return False
    return all(v in like or _same_name(fa, fb, v) for v in sorted(common))


def _same_name(fa: DumpFolder, fb: DumpFolder, v: int) -> bool:
    # the same title is the same name (most vars of two runs of one graph): B's not parsed
    return fa.title(v) == fb.title(v) or fa.var_info(v).name == fb.var_info(v).name


def _by_name(fa: DumpFolder, fb: DumpFolder) -> Pairing:
    """The name mode: A's execution order, pairs only; the rest in ``unpaired`` with reasons."""

    va = [fa.var_info(v) for v in fa.ids]
    vb = [fb.var_info(v) for v in fb.ids]
    p = pair_by_name(va, vb)
    a_to_b = p.a_to_b()
    # model inputs carry the same data on both sides: pair them by exact, unique name
    inputs_b: Dict[str, List[int]] = {}
    for v in vb:
        if v.opr_type in INPUT_OPRS:
            inputs_b.setdefault(v.name, []).append(v.id)
    for v in va:
        if v.opr_type in INPUT_OPRS and len(inputs_b.get(v.name, ())) == 1:
            a_to_b[v.id] = inputs_b[v.name][0]
    if not a_to_b:
        raise DumpFolderError(f"{fa.path} and {fb.path} have no var name in common ({len(fa)} and {len(fb)} vars): "
                              "not dumps of the same model, or dumped without var names?")
    paired_b = set(a_to_b.values())
    unpaired = [("a", u.id, u.name, u.reason) for u in p.unpaired_a]
    unpaired += [("a", u.id, u.name, u.reason) for u in p.skipped_a if u.id not in a_to_b]
    unpaired += [("b", u.id, u.name, u.reason) for u in p.unpaired_b]
    unpaired += [("b", u.id, u.name, u.reason) for u in p.skipped_b if u.id not in paired_b]
    # A's outputs (computed vars no dumped var consumes) must have a partner: an output B never
    # dumped is a finding (status missing), not an expected casualty of a rewrite
    consumed = {u for v in fa.ids for u in fa.inputs_of(v)}
    outputs = {u.id for u in p.unpaired_a if u.id not in consumed and u.id not in a_to_b}
    order = tuple((v.id, a_to_b.get(v.id)) for v in va if v.id in a_to_b or v.id in outputs)
    return Pairing(mode="name", order=order, unpaired=tuple(unpaired))
