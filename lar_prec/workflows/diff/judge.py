"""One side against the other, per variable: ``equal`` (bitwise), ``within_jitter`` (the
difference is no larger than what the two sides vary by themselves: ``max_err <= j_A + j_B``,
each side's jitter measured by repeating it), ``outside_jitter`` (larger, or another shape or
dtype) or ``nonfinite`` (NaN/Inf on one side only); then :func:`with_rounding` moves the
variables outside jitter that :mod:`.rounding` finds ``within_rounding`` (each side within its
operator's bound of the naive reference: a kernel change, both correct). Variables pair by id when both dumps come
from one graph, else by the stable operator key (:mod:`lar_prec.opkey`): B's values written
under A's ids and brought back to A's layout. ``diff`` and ``bisect`` both judge through here.

Why ``j_A + j_B``: ``max_err`` is a distance between two results; when both sides draw from one
distribution, run 1 of A lies within ``j_A`` of the others of A and run 1 of B within ``j_B`` of
the others of B, so the two runs 1 can lie that far apart without either side having changed.
A side measured by one run has no jitter (0): then any difference is outside it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.folders import compare_folders
from lar_prec.diagnosis.local import layout_fmt
from lar_prec.diagnosis.tree import VarTree
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.keys import dump_keys
from lar_prec.opkey import match_keys
from lar_prec.workflows.devices.devices import final_outputs, renamed_copy, same_vars
from lar_prec.workflows.diff.sides import SideResult

EQUAL, WITHIN, OUTSIDE, NONFINITE = "equal", "within_jitter", "outside_jitter", "nonfinite"
#: outside jitter, but each side within its operator's bound of the naive reference
ROUNDING = "within_rounding"
#: the per-variable verdicts, in the order reports count them
VERDICTS = (EQUAL, WITHIN, ROUNDING, OUTSIDE, NONFINITE)
#: verdicts that make a difference (a root, a bad build, exit 1)
DIFFERS = (OUTSIDE, NONFINITE)


@dataclass(frozen=True)
class Judged:
    """A against B: the tree (A's var ids; statuses ``ok`` for equal and within jitter), each
    var's verdict and the jitter it was held to (``j_A``, ``j_B``), how vars were paired, the
    folders compared (B's with A's ids), A's whole dump and A's model outputs."""

    tree: VarTree
    verdicts: Mapping[int, str]
    jitter: Mapping[int, Tuple[float, float]]
    pairing: Mapping[str, Any]
    dirs: Tuple[Path, Path]
    a_dump: Path
    outputs: Tuple[int, ...]
    #: the rounding tier (:class:`lar_prec.workflows.diff.rounding.Rounding`), None: not run
    rounding: Any = None
    #: B's var id -> A's, for the vars compared
    b_to_a: Mapping[int, int] = field(default_factory=dict)

    def counts(self) -> Dict[str, int]:
        return {v: sum(1 for x in self.verdicts.values() if x == v) for v in VERDICTS}

    def differing(self, ids: Optional[Sequence[int]] = None) -> List[int]:
        """Vars (of ``ids``, default all) outside jitter or nonfinite, in A's order."""
        wanted = None if ids is None else set(ids)
        return [i for i, v in self.verdicts.items() if v in DIFFERS and (wanted is None or i in wanted)]

    def unpaired(self, ids: Sequence[int]) -> List[int]:
        """Vars of ``ids`` (A's) that have no partner in B (a graph that dropped or renamed them)."""
        return [i for i in ids if i not in self.verdicts]


def verdict_of(d: Any, ja: float, jb: float) -> Tuple[str, str]:
    """(verdict, status) of one bitwise comparison ``d`` held to the jitter ``ja + jb``."""
    if d.status == "ok":  # compared bitwise: ok is equal
        return EQUAL, "ok"
    if d.status == "index_equivalent":  # indices of tied values in another order: what they index agrees
        return WITHIN, "index_equivalent"
    if d.status == "nonfinite":
        return (WITHIN, "ok") if math.isinf(ja) or math.isinf(jb) else (NONFINITE, "nonfinite")
    if d.status != "divergent" or d.max_err is None:  # shape, dtype, missing
        return OUTSIDE, d.status
    return (WITHIN, "ok") if d.max_err <= ja + jb else (OUTSIDE, "divergent")


def _layout(side: SideResult) -> Optional[str]:
    """The operator format a side's runs laid tensors out in (from their load_and_run flags)."""
    argv = getattr(side.runs[0], "argv", ()) if side.runs else ()
    return layout_fmt([str(x) for x in argv])


def _pair(a: SideResult, b: SideResult, work: Path) -> Tuple[Path, Path, Dict[int, int], Dict[str, Any]]:
    """The folders to compare by id and B's id -> A's id, pairing by key when the graphs differ."""
    fa, fb = DumpFolder(a.dump), DumpFolder(b.dump)
    if same_vars(fa, fb):
        return a.dump, b.dump, {i: i for i in fb.ids}, {"how": "id", "paired": len(fa.ids)}
    m = match_keys(dump_keys(a.dump), dump_keys(b.dump))
    base = work / "by-key"
    n_ref, n_pairs, written = renamed_copy(a.dump, b.dump, base / "b", base / "a",
                                           pairs=[(x, y) for x, y, _ in m.pairs], layout_format=_layout(b))
    got = set(DumpFolder(base / "b").ids) if written else set()
    unpaired_a = [{"id": i, "name": fa[i].var.name, "reason": why} for i, why in m.unmatched_a]
    unpaired_a += [{"id": x, "name": fa[x].var.name,
                    "reason": "paired by key, but its values could not be brought back to A's layout"}
                   for x, _y, _k in m.pairs if x not in got]
    info = {"how": "key", "dir": str(base), "reference_vars": n_ref, "paired": n_pairs, "compared": written,
            "unpaired_a": unpaired_a,
            "unpaired_b": [{"id": i, "name": fb[i].var.name, "reason": why} for i, why in m.unmatched_b]}
    return base / "a", base / "b", {y: x for x, y, _ in m.pairs if x in got}, info


def judge(a: SideResult, b: SideResult, work: Path) -> Judged:
    """Compare B's run 1 with A's, bitwise, and hold each var to the jitter of both sides.

    Raises:
        LarPrecError: a dump cannot be read (exit 2).
    """
    dir_a, dir_b, b_to_a, info = _pair(a, b, work)
    comp = compare_folders(dir_a, dir_b, threshold=0.0, jobs=min(2, os.cpu_count() or 1))
    band_b = {b_to_a[i]: j for i, j in b.band.items() if i in b_to_a}
    diffs, verdicts, jitter = [], {}, {}
    for d in comp.diffs:
        ja, jb = a.band.get(d.id, 0.0), band_b.get(d.id, 0.0)
        verdict, status = verdict_of(d, ja, jb)
        verdicts[d.id], jitter[d.id] = verdict, (ja, jb)
        note = d.note if verdict in (EQUAL, NONFINITE) else f"{verdict.replace('_', ' ')} (j_A {ja:.3g} + j_B {jb:.3g})"
        diffs.append(replace(d, status=status, threshold=ja + jb, note=note))
    tree = VarTree(diffs, threshold=comp.threshold, comparison=comp,
                   source=f"B ({b.dump}) against A ({a.dump})")
    return Judged(tree, verdicts, jitter, info, (Path(dir_a), Path(dir_b)), a.dump, tuple(final_outputs(a.dump)),
                  b_to_a=dict(b_to_a))


def with_rounding(j: Judged, rounding: Any) -> Judged:
    """``j`` with the vars ``rounding.within`` lists moved from outside jitter to
    ``within_rounding`` (status ``ok``: no root, no exit 1), and the rounding kept."""
    moved = set(rounding.within)
    if not moved:
        return replace(j, rounding=rounding)
    diffs = []
    for d in j.tree.diffs:
        if d.id in moved:
            ja, jb = j.jitter[d.id]
            d = replace(d, status="ok", note=f"{rounding.note(d.id)} (outside jitter: j_A {ja:.3g} + j_B {jb:.3g})")
        diffs.append(d)
    tree = VarTree(diffs, threshold=j.tree.threshold, comparison=j.tree.comparison, source=j.tree.source)
    verdicts = {i: (ROUNDING if i in moved else v) for i, v in j.verdicts.items()}
    return replace(j, tree=tree, verdicts=verdicts, rounding=rounding)
