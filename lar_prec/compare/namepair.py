"""Pair the vars of two dumps of differently rewritten graphs by var name (no numpy).

Var ids do not survive a graph rewrite (a layout transform, fp16, fusion, even
``--const-shape`` shifts them), but var names do (reference/graph-options.md section 3).
The rule, which matched with no false pair on every case measured:

1. only **computed** vars take part: not model inputs (``Host2DeviceCopy``), not constants
   (``ImmutableTensor`` and friends, and every var whose value MegEngine infers as constant:
   the title's last field, value infer type, is 2, which marks the extra vars weight
   preprocessing adds on the lite route);
2. **exact name**; when a name repeats on one side, the **last producer in execution order**
   takes it (an fp16 ``TypeCvt`` back to float32 reuses its input's name);
3. then, for what is left, the name with a trailing ``[N]`` **stripped**, only where the
   stripped name is unique among the computed vars of both sides.

Records are anything with the :class:`lar_prec.iodump.VarInfo` fields used here (``id``,
``name``, ``opr_type``, ``value_infer``), given in execution order (a
:class:`lar_prec.iodump.DumpFolder` iterates in that order).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

# the roles of vars are the stable operator key's (one definition)
from lar_prec.opkey import CONST_OPRS, INPUT_OPRS, VALUE_INFER_CONST


_INDEX_SUFFIX = re.compile(r"\[\d+\]\Z")


@dataclass(frozen=True)
class NamePair:
    """Var ``a`` of side A and var ``b`` of side B hold the same tensor; ``how`` is
    ``"name"`` (exact) or ``"stripped"`` (trailing ``[N]`` removed on both sides)."""

    a: int
    b: int
    name_a: str
    name_b: str
    how: str


@dataclass(frozen=True)
class Unpaired:
    """A var of one side left without a partner, and why."""

    id: int
    name: str
    reason: str


@dataclass(frozen=True)
class NamePairing:
    """The result of :func:`pair_by_name`.

    ``unpaired_a``/``unpaired_b`` are computed vars without a partner; ``skipped_a``/
    ``skipped_b`` are the inputs and constants that do not take part (rule 1).
    """

    pairs: Tuple[NamePair, ...]
    unpaired_a: Tuple[Unpaired, ...]
    unpaired_b: Tuple[Unpaired, ...]
    skipped_a: Tuple[Unpaired, ...]
    skipped_b: Tuple[Unpaired, ...]

    @property
    def paired_fraction(self) -> float:
        """Paired computed vars of side A over all computed vars of side A (1.0 when none)."""
        total = len(self.pairs) + len(self.unpaired_a)
        return len(self.pairs) / total if total else 1.0

    def a_to_b(self) -> Dict[int, int]:
        return {p.a: p.b for p in self.pairs}


def skip_reason(var: Any) -> str:
    """Why ``var`` does not take part in name pairing, or "" when it does (it is computed)."""
    if var.opr_type in INPUT_OPRS:
        return "model input (not computed)"
    if var.opr_type in CONST_OPRS:
        return f"constant ({var.opr_type})"
    if getattr(var, "value_infer", None) == VALUE_INFER_CONST:
        return "constant (value inferred at compile time: value infer type 2)"
    return ""


def strip_index(name: str) -> str:
    """``RELU[3]`` -> ``RELU``; names without a trailing ``[N]`` are returned as they are."""
    return _INDEX_SUFFIX.sub("", name)


def _side(vars_: Sequence[Any]) -> Tuple[Dict[str, Any], List[Unpaired], List[Unpaired]]:
    """Computed vars by name (the last producer of a repeated name), the earlier producers
    left out, and the skipped inputs and constants."""
    by_name: Dict[str, Any] = {}
    shadowed: List[Unpaired] = []
    skipped: List[Unpaired] = []
    for v in vars_:
        why = skip_reason(v)
        if why:
            skipped.append(Unpaired(v.id, v.name, why))
            continue
        old = by_name.get(v.name)
        if old is not None:
            shadowed.append(Unpaired(old.id, old.name,
                                     f"name repeated: var {v.id}, produced later, takes the name"))
        by_name[v.name] = v
    return by_name, shadowed, skipped


def pair_by_name(a: Sequence[Any], b: Sequence[Any]) -> NamePairing:
    """Pair the computed vars of ``a`` and ``b`` (each in execution order) by the rule above."""
    names_a, shadowed_a, skipped_a = _side(a)
    names_b, shadowed_b, skipped_b = _side(b)
    pairs: List[NamePair] = []
    left_a = {n: v for n, v in names_a.items() if n not in names_b}
    left_b = {n: v for n, v in names_b.items() if n not in names_a}
    for name, va in names_a.items():
        vb = names_b.get(name)
        if vb is not None:
            pairs.append(NamePair(va.id, vb.id, name, name, "name"))
    # rule 3: uniqueness over every computed name of a side, paired or not
    count_a = Counter(strip_index(n) for n in names_a)
    count_b = Counter(strip_index(n) for n in names_b)
    rest_b = {strip_index(n): v for n, v in left_b.items()}
    unpaired_a: List[Unpaired] = list(shadowed_a)
    matched_b = set()
    for name, va in left_a.items():
        base = strip_index(name)
        vb = rest_b.get(base)
        if vb is not None:  # at least one of the two names had an index: they differ
            if count_a[base] == 1 and count_b[base] == 1:
                pairs.append(NamePair(va.id, vb.id, name, vb.name, "stripped"))
                matched_b.add(vb.id)
                continue
            unpaired_a.append(Unpaired(va.id, name, f"no var named {name!r} in B, and {base!r} "
                                                    "(index stripped) is not unique on both sides"))
            continue
        unpaired_a.append(Unpaired(va.id, name, f"no computed var named {name!r} in B"))
    unpaired_b: List[Unpaired] = list(shadowed_b)
    for name, vb in left_b.items():
        if vb.id not in matched_b:
            unpaired_b.append(Unpaired(vb.id, name, f"no computed var named {name!r} in A"))
    order_a = {v.id: i for i, v in enumerate(a)}
    pairs.sort(key=lambda p: order_a.get(p.a, 0))
    return NamePairing(tuple(pairs), tuple(unpaired_a), tuple(unpaired_b), tuple(skipped_a), tuple(skipped_b))
