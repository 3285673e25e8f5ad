"""The dump-only rule's recheck: a var the edge rule names, recomputed from each side's own inputs.

:func:`rechecker` gives :mod:`~lar_prec.compare.growth` its ``recheck(vars)``: each var's
operator recomputed in float64 from each side's dumps (:func:`lar_prec.compare.explain.recompute`),
all the named vars at once. The only numpy of a dump-only auto comparison: a comparison whose
edge rule names no var to recompute never imports it.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.explain import RECOMPUTED, Recomputed, could_recompute, recompute
from lar_prec.compare.records import VarDiff
from lar_prec.dumps.folder import DumpFolder

#: a var to recompute: (A's id, B's id, operator type, dtype)
Request = Tuple[int, int, str, str]
#: ``recheck(vars)``: each var recomputed (None where it cannot be)
Recheck = Callable[[Sequence[VarDiff]], List[Optional[Recomputed]]]


def _dumps(folder: DumpFolder, vid: int) -> Optional[Tuple[Any, List[Any]]]:
    ins = folder.inputs_of(vid)
    if vid not in folder or not all(u in folder for u in ins):
        return None
    return folder[vid], [folder[u] for u in ins]


def recheck_one(fa: DumpFolder, fb: DumpFolder, req: Request) -> Optional[Recomputed]:
    """One var recomputed from each side's own inputs (None when a side lacks it or an input,
    or the shapes admit no parameters)."""
    vid, b_vid, opr_type, dtype = req
    if opr_type not in RECOMPUTED:
        return None
    a, b = _dumps(fa, vid), _dumps(fb, b_vid)
    # from the headers first: no values read where no parameters fit the shapes
    if a is None or b is None or not could_recompute(opr_type, [u.shape for u in a[1]], a[0].shape):
        return None
    return recompute(opr_type, a[0].array(), [u.array() for u in a[1]], b[0].array(), [u.array() for u in b[1]],
                     dtype.lower())


def rechecker(fa: DumpFolder, fb: DumpFolder, b_of: Mapping[int, int]) -> Recheck:
    """``recheck(vars)`` for the dump-only rule (``b_of``: B's id of each var paired)."""

    def recheck(vars: Sequence[VarDiff]) -> List[Optional[Recomputed]]:
        return [recheck_one(fa, fb, (d.id, b_of[d.id], d.opr_type, str(d.dtype))) if d.id in b_of else None
                for d in vars]

    return recheck
