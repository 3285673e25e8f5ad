"""The dump-only rule's recheck: a var the edge rule names, recomputed from each side's own inputs.

:func:`rechecker` gives :mod:`~lar_prec.compare.growth` its ``recheck(vars)``: each var's
operator recomputed in float64 from each side's dumps, all the named vars at once: a float32
convolution or matrix product by the C kernel (:func:`lar_prec.compare.explain.recompute_f32`),
the others by numpy (:func:`lar_prec.compare.explain.recompute`), the only numpy of a dump-only
auto comparison: one whose edge rule names none of those never imports it.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.engine.batch import read_heads
from lar_prec.compare.explain import (RECOMPUTED, KernelPlan, Recomputed, could_recompute, kernel_plan, recompute,
                                      recompute_f32)
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


def _plan(opr_type: str, in_shapes: Sequence[Tuple[int, ...]], out_shape: Tuple[int, ...],
          dtype: str) -> Tuple[bool, Optional[KernelPlan]]:
    """What A's shapes alone say: whether they admit parameters to recompute with, and the C
    kernel's plan for a float32 var (None: numpy's recompute; no candidate in it: none fits)."""
    if not could_recompute(opr_type, in_shapes, out_shape):
        return False, None
    return True, kernel_plan(opr_type, in_shapes, out_shape) if dtype == "Float32" else None


def recheck_one(fa: DumpFolder, fb: DumpFolder, req: Request) -> Optional[Recomputed]:
    """One var recomputed from each side's own inputs (None when a side lacks it or an input,
    or the shapes admit no parameters)."""
    vid, b_vid, opr_type, dtype = req
    if opr_type not in RECOMPUTED:
        return None
    a, b = _dumps(fa, vid), _dumps(fb, b_vid)
    # from the headers first: no values read where no parameters fit the shapes
    if a is None or b is None:
        return None
    in_shapes = [u.shape for u in a[1]]
    fits, plan = _plan(opr_type, in_shapes, a[0].shape, dtype)
    if not fits:
        return None
    if in_shapes != [u.shape for u in b[1]] or a[0].shape != b[0].shape:
        return None  # as recompute says of sides whose shapes differ
    if plan is not None and all(u.dtype.name == "Float32" for u in (a[0], *a[1], b[0], *b[1])):
        if not plan[2]:
            return None  # no candidate fits (recompute would say so): no values read
        return recompute_f32(opr_type, plan, a[0].raw(), [u.raw() for u in a[1]], b[0].raw(), [u.raw() for u in b[1]])
    return recompute(opr_type, a[0].array(), [u.array() for u in a[1]], b[0].array(), [u.array() for u in b[1]],
                     dtype.lower())


def rechecker(fa: DumpFolder, fb: DumpFolder, b_of: Optional[Mapping[int, int]] = None) -> Recheck:
    """``recheck(vars)`` for the dump-only rule (``b_of``: B's id of each var paired; None: every
    var is paired with B's var of its own id, as the batch reader pairs them)."""
    partner: Callable[[int], Optional[int]] = (lambda v: v) if b_of is None else b_of.get

    def recheck(vars: Sequence[VarDiff]) -> List[Optional[Recomputed]]:
        b_ids = [partner(d.id) for d in vars]
        # the headers of the vars to recompute, then of their inputs, in two passes of the kernel
        named = [(d.id, b) for d, b in zip(vars, b_ids) if b is not None and d.opr_type in RECOMPUTED]
        read_heads(fa, fb, named)
        read_heads(fa, fb, [pair for a, b in named if a in fa and b in fb
                            for pair in zip(fa.inputs_of(a), fb.inputs_of(b))])
        return [recheck_one(fa, fb, (d.id, b, d.opr_type, str(d.dtype))) if b is not None else None
                for d, b in zip(vars, b_ids)]

    return recheck


def _may_fit(d: VarDiff, shape_of: Callable[[int], Optional[Tuple[int, ...]]]) -> bool:
    """False where :func:`recheck_one` would say None from A's shapes alone (``shape_of``: a
    var's shape by A's id, as its record holds it; None: not known)."""
    if d.opr_type not in RECOMPUTED:
        return False
    in_shapes = [shape_of(u) for u in d.inputs]
    if any(s is None for s in in_shapes):
        return True  # the files say
    fits, plan = _plan(d.opr_type, in_shapes, d.shape, str(d.dtype))  # type: ignore[arg-type]
    return fits and (plan is None or bool(plan[2]))  # no candidate: numpy would find none either


def by_shapes(recheck: Recheck, shape_of: Callable[[int], Optional[Tuple[int, ...]]]) -> Recheck:
    """``recheck`` of only the vars whose shapes, and their inputs' (``shape_of``, by A's id,
    from the records), admit a recompute: the others are None with no file read (of a few
    hundred vars the edge rule names, most are convolutions whose channels fit no grouping)."""

    def some(vars: Sequence[VarDiff]) -> List[Optional[Recomputed]]:
        keep = [i for i, d in enumerate(vars) if _may_fit(d, shape_of)]
        out: List[Optional[Recomputed]] = [None] * len(vars)
        for i, got in zip(keep, recheck([vars[i] for i in keep]) if keep else ()):
            out[i] = got
        return out

    return some
