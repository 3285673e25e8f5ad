"""Operators one side fused away, for the dump-only rule (:mod:`lar_prec.compare.growth`).

Paired by name across two graphs (a layout option, a fusion pass), a var of the reference may have
no partner: a convolution and its bias add that the test graph computes inside one ConvBias whose
output takes the RELU's name. The RELU's paired output then carries a convolution's rounding
that its own inputs, unmeasured, do not explain. Each compared var whose inputs include such
unpaired vars is judged through them: its inputs become the nearest compared ancestors, and
what the unpaired operators add (``sqrt(K)`` units for a sum of K terms, a few for an
elementwise one) is part of its own allowance."""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Set, Tuple

from lar_prec.compare.growth import ELEMWISE_ULPS, Through, kind_of, reduction_length, winograd_shapes
from lar_prec.compare.records import VarDiff
from lar_prec.dumps.folder import DumpFolder

#: a chain of unpaired operators longer than this is not walked (the var keeps the band rule)
MAX_HIDDEN = 64


def through_unpaired(diffs: Sequence[VarDiff], fa: DumpFolder) -> Dict[int, Through]:
    """For each var of ``diffs`` (A's ids) with an input that A dumped but that has no partner."""
    compared: Set[int] = {d.id for d in diffs}
    out: Dict[int, Through] = {}
    for d in diffs:
        if not d.inputs or all(u in compared or u not in fa for u in d.inputs):
            continue
        ancestors: List[int] = []
        seen: Set[int] = set()
        todo = [u for u in d.inputs if u != d.id]
        units, reducing, wino, walked = 0.0, False, False, 0
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            if u in compared:
                ancestors.append(u)
                continue
            if u not in fa:
                continue  # neither dumped nor compared: nothing known of it, as before
            walked += 1
            if walked > MAX_HIDDEN:
                break
            info = fa.var_info(u)
            ins = [v for v in fa.inputs_of(u) if v != u]
            kind = kind_of(info.opr_type)
            if kind == "reducing":
                shapes = [_shape(fa, v) for v in ins]
                units += math.sqrt(reduction_length(info.opr_type, info.shape, shapes))
                reducing = True
                wino = wino or winograd_shapes(info.opr_type, info.shape, shapes)
            elif kind == "elementwise":
                units += ELEMWISE_ULPS
            todo.extend(ins)
        if walked <= MAX_HIDDEN:
            out[d.id] = Through(tuple(sorted(set(ancestors))), units, reducing, wino)
    return out


def _shape(fa: DumpFolder, var_id: int) -> Tuple[int, ...]:
    try:
        return tuple(fa.var_info(var_id).shape)
    except KeyError:  # an input known by id only
        return ()
