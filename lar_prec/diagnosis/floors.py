"""Noise floors of local error per operator, and roots by local error (issues 14 and 34).

An operator is a root when its local error (``lar_prec.diagnosis.local``) exceeds its own noise floor:
0 for data movement, selections (max pooling, max/min reductions) and integer operators (any
difference there is a bug), a few ulps for elementwise float operators, and for an operator that
sums terms (convolution, matrix products, reductions, average pooling, Softmax, LayerNorm) a
bound from the rounding of its own sums: ``TERMS_C`` rounding units of each output element,
a unit being ``eps * (sqrt(K) + 1) * sum(|terms|)`` of that element on the reference's inputs
(:mod:`lar_prec.compare.bounds`). An operator whose terms could not be measured falls back to
``eps * sqrt(K) * s`` scaled by its output's magnitude, with ``s`` calibrated from the run.
Static operators (computed from constants alone, such as a recurrent cell's ``zeros @ W + b``)
are part of the model's constants: never roots; a fault in them roots where they first meet
data. Numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.records import json_number
from lar_prec.dumps.algocache import winograd_tile
from lar_prec.graph import reach
# one operator vocabulary for local floors and the dump-only edge rule
from lar_prec.compare.growth import DATA_MOVEMENT, ELEMWISE_ULPS, REDUCING, reduction_length as _reduction_length

from lar_prec.diagnosis.local_records import LayerwiseModel, LocalResult, LocalVar, MeasuredVar

from lar_prec.compare.bounds import EPS, TERMS_C
#: the smallest step of a dtype (its subnormal spacing): below it rounding is absolute
SUBNORMAL_STEP = {"float16": 2.0 ** -24}
#: bounds of the calibrated factor on ``eps * sqrt(reduction length)`` (the fallback)
FLOOR_SCALE_MIN, FLOOR_SCALE_MAX = 1.5, 64.0
#: the calibrated factor is this many times the median of the run's normalised local errors
#: (a median: one fault among three reducing operators does not move it)
FLOOR_MEDIAN_FACTOR = 4.0
#: the smallest magnitude a floor is scaled by (an all-zero var still gets a floor)
MIN_MAGNITUDE = 2.0 ** -20
#: extra floor factor of a Winograd convolution F(m, r) by output tile m: its transforms
#: round several more times, and its error follows the size of the values it transforms, so
#: its magnitude is not capped at 1 (:func:`_magnitude`). Measured on fastrun_shake with each
#: algorithm forced through the fast-run cache, in units of eps*sqrt(K)*magnitude: direct and
#: im2col <= 0.7, F(2,3) <= 0.8, F(4,3) <= 2.4, F(6,3) <= 7.1 (the first convolution: raw
#: inputs, outputs up to 3.9); the calibrated scale is >= 1.5, so the worst stays < 0.6 of
#: its floor.
WINOGRAD_FACTOR = ((2, 1.5), (4, 4.0), (6, 8.0))
#: a Winograd tile beyond the table (or an unknown spelling)
WINOGRAD_FACTOR_LARGE = 16.0


@dataclass(frozen=True)
class LocalRoot:
    """An operator whose local error exceeds its own noise floor."""

    id: int
    name: str
    opr_type: str
    local_err: float
    floor: float
    entire_err: Optional[float]

    @property
    def margin(self) -> float:
        """How many floors the local error is (inf for a floor of 0)."""
        return self.local_err / self.floor if self.floor > 0 else math.inf


@dataclass(frozen=True)
class LocalVerdict:
    """Every var labelled root | inherited | noise | clean | not_isolated, and where inherited
    error came from (the upstream roots; empty when only noise was carried)."""

    roots: Tuple[LocalRoot, ...]
    labels: Mapping[int, str]
    inherited_from: Mapping[int, Tuple[int, ...]] = field(default_factory=dict)
    floors: Mapping[int, float] = field(default_factory=dict)


def reduction_length(m: MeasuredVar) -> int:
    """How many products or terms one output element sums (1 for elementwise operators)."""
    fused = _unit_reduction(m)  # a convolution fused into this var's unit sums its own terms
    if fused > 1:
        return max(fused, _own_reduction(m))
    return _own_reduction(m)


def _own_reduction(m: MeasuredVar) -> int:
    return _reduction_length(m.opr_type, m.shape, m.input_shapes)


def _unit_reduction(m: "MeasuredVar | LocalVar") -> int:
    return int(getattr(m, "unit_reduction", 1) or 1)


#: modes of reducing operators that select one of their inputs: no rounding at all
SELECTING = {"PoolingForward": frozenset({"MAX"}), "AdaptivePoolingForward": frozenset({"MAX"}),
             "Reduce": frozenset({"MAX", "MIN"})}


def _kind(m: MeasuredVar) -> str:
    if m.opr_type in DATA_MOVEMENT or m.mode in SELECTING.get(m.opr_type, ()):
        return "exact"
    if m.dtype not in EPS:
        return "exact"  # integer and quantized arithmetic has no rounding freedom on one device
    return "reducing" if m.opr_type in REDUCING or _unit_reduction(m) > 1 else "elementwise"


def bound_floor(v: LocalVar, units: float) -> float:
    """The floor, in MegEngine's metric, of a var measured in rounding units (``v.bound``) held
    to ``units`` of them: the local error at which its worse test (worst element, or the whole
    output's scale) would reach ``units`` (so ``local_err > floor`` exactly when it exceeds
    ``units``), or, where nothing differs, ``units`` at the element where a unit is largest."""
    b = v.bound
    assert b is not None
    if v.local_err and b.worst > 0:
        return v.local_err * units / b.worst if math.isfinite(b.worst) else 0.0
    return units * b.unit_scale


def _magnitude(v: "LocalVar", cap: float = 1.0) -> float:
    """min(max |reference value|, cap): MegEngine's metric is absolute below 1, so rounding noise
    of a var with small values is small in it (a var of values ~0.01 has 100x less); above 1
    it is relative, so ``cap`` 1, unless the error grows with the values (Winograd: no cap)."""
    if v.ref_max_abs is None or not math.isfinite(v.ref_max_abs):
        return 1.0
    return min(max(v.ref_max_abs, MIN_MAGNITUDE), cap)


def algorithm_factor(algorithms: Iterable[str]) -> float:
    """How much wider an operator's floor is for the algorithms it may have run (the worst)."""

    worst = 1.0
    for name in algorithms:
        m = winograd_tile(name)
        if m is None:
            continue
        f = next((f for tile, f in WINOGRAD_FACTOR if m <= tile), WINOGRAD_FACTOR_LARGE)
        worst = max(worst, f)
    return worst


def _eps(dtype: str, compute_dtype: Optional[str]) -> float:
    """The rounding unit a float var is computed with: its own dtype's, or the coarser one of
    ``compute_dtype`` (an option that computes in float16 changes the arithmetic)."""
    own = EPS[dtype]
    return max(own, EPS[compute_dtype]) if compute_dtype else own


def noise_floors(result: LocalResult, compute_dtype: Optional[str] = None) -> Dict[int, float]:
    """Each measured var's noise floor of local error (MegEngine's metric).

    Data movement, selections and integer operators: 0 (bit-exact). Elementwise float
    operators: a few ulps. Operators that sum terms and whose terms were measured
    (``v.bound``): :data:`TERMS_C` rounding units of their worst element (:func:`bound_floor`).
    Other reducing operators (the fallback): ``eps * sqrt(K) * s`` with K the reduction length
    and ``s`` calibrated from this run: 4 x the median of ``local_err / (eps * sqrt(K))`` over
    them, bounded to [1.5, 64] (a single fault does not move a median), scaled by the var's
    magnitude (:func:`_magnitude`). An operator that ran a Winograd algorithm
    (``result.algorithms``, read from the fast-run cache) gets :func:`algorithm_factor` more.

    ``compute_dtype`` (``"float16"`` for sweep's ioc16/io16xc32): float vars are computed in
    that dtype from inputs rounded to it, so every float floor uses its eps, and data movement
    of float values gets one ulp of it (the rounding of its fed input) instead of 0.
    """
    if compute_dtype is not None and compute_dtype not in EPS:
        raise ValueError(f"compute_dtype {compute_dtype!r}: expected one of {', '.join(EPS)}")
    lw = {m.id: m for m in result.layerwise.measured}
    units: Dict[int, float] = {}
    ratios = []
    for v in result.vars:
        m = lw[v.id]
        if _kind(m) == "reducing" and v.bound is None:
            algo = algorithm_factor(result.algorithms.get(v.id, ()))
            units[v.id] = (_eps(m.dtype, compute_dtype) * math.sqrt(reduction_length(m))
                           * _magnitude(v, cap=1.0 if algo == 1.0 else math.inf) * algo)
            # zeros count: with few reducing operators, a median of the non-zero ones can be the fault
            if v.local_err is not None and math.isfinite(v.local_err):
                ratios.append(v.local_err / units[v.id])
    spread = float(np.median(ratios)) if ratios else 0.0
    scale = min(max(FLOOR_MEDIAN_FACTOR * spread, FLOOR_SCALE_MIN), FLOOR_SCALE_MAX)
    floors: Dict[int, float] = {}
    by_id = {v.id: v for v in result.vars}
    for v in result.vars:
        kind = _kind(lw[v.id])
        if kind == "exact" and v.dtype in EPS and _eps(v.dtype, compute_dtype) > EPS[v.dtype]:
            # moves values rounded to the coarser compute_dtype on their way in
            floors[v.id] = max(_eps(v.dtype, compute_dtype) * _magnitude(v), SUBNORMAL_STEP.get(compute_dtype or "", 0.0))
        elif kind == "exact":
            floors[v.id] = 0.0
        elif v.bound is not None and kind == "reducing":
            floors[v.id] = bound_floor(v, TERMS_C * algorithm_factor(result.algorithms.get(v.id, ())))
        elif kind == "elementwise":
            floors[v.id] = _eps(v.dtype, compute_dtype) * ELEMWISE_ULPS * _magnitude(v)
            if v.dtype in EPS and _eps(v.dtype, compute_dtype) > EPS[v.dtype]:
                # its inputs were rounded to compute_dtype on the way in: an addition with
                # cancellation (8.457 + -9.504 in float16) keeps their absolute rounding, which
                # the output's magnitude does not bound
                floors[v.id] += _eps(v.dtype, compute_dtype) * sum(
                    by_id[u].ref_max_abs for u in lw[v.id].inputs
                    if u in by_id and by_id[u].ref_max_abs is not None and math.isfinite(by_id[u].ref_max_abs))
        else:
            floors[v.id] = units[v.id] * scale
    return floors


def layerwise_ancestors(lw: LayerwiseModel, var_id: int) -> List[int]:
    """The ids every measured var ``var_id`` depends on in the layerwise model, sorted."""
    return sorted(reach(var_id, {m.id: m.inputs for m in lw.measured}))


def local_roots(result: LocalResult, floors: Optional[Mapping[int, float]] = None) -> LocalVerdict:
    """Label every var: ``root`` (local error above its floor), ``inherited`` (accumulated
    error above the local one, local within the floor: with the upstream roots it came from,
    or the unisolated operators that may hide one), ``noise`` (error made here or upstream,
    every operator within its floor), ``clean`` (none), or ``not_isolated``. Roots are ordered by margin (local error / floor), largest first."""
    floors = dict(floors if floors is not None else noise_floors(result))
    labels: Dict[int, str] = {}
    roots: List[LocalRoot] = []
    static = {m.id for m in result.layerwise.measured if m.static}
    for v in result.vars:
        f = floors.get(v.id, 0.0)
        if v.id in static:
            labels[v.id] = "constant"  # computed from constants alone: part of the model's weights
        elif not v.isolated:
            labels[v.id] = "not_isolated"
        elif v.local_err is not None and v.local_err > f:
            labels[v.id] = "root"
            roots.append(LocalRoot(v.id, v.name, v.opr_type, v.local_err, f, v.entire_err))
        elif v.entire_err and v.entire_err > (v.local_err or 0.0):  # its inputs carried error
            labels[v.id] = "inherited"
        elif v.local_err:
            labels[v.id] = "noise"
        else:
            labels[v.id] = "clean"
    root_ids = {r.id for r in roots}
    came: Dict[int, Tuple[int, ...]] = {}
    # with no root and nothing unmeasured there is nothing to come from: no walk (a clean model)
    flagged = bool(root_ids) or "not_isolated" in labels.values()
    inputs = {m.id: m.inputs for m in result.layerwise.measured} if flagged else {}
    for k, lab in list(labels.items()):
        if lab != "inherited":
            continue
        ups = sorted(reach(k, inputs))
        # from its roots; else from what could not be measured (it may hide one); else its
        # error is the rounding of operators within their floors: noise, not inherited
        came[k] = tuple(a for a in ups if a in root_ids) or tuple(a for a in ups if labels.get(a) == "not_isolated")
        if not came[k]:
            del came[k]
            labels[k] = "noise"
    roots.sort(key=lambda r: (-r.margin, -r.local_err, r.id))
    return LocalVerdict(tuple(roots), labels, came, floors)


def over_floor_text(local_err: float, floor: float) -> str:
    """``local 8.764e-07 > floor 8.758e-07 (x1.0007)``: as many digits as it takes for the two
    numbers, and the margin, to differ (a root is never printed "x1" over an equal floor)."""
    if floor <= 0:
        return f"{local_err:.3g} > floor 0"
    for digits in range(3, 10):
        a, b, m = f"{local_err:.{digits}g}", f"{floor:.{digits}g}", f"{local_err / floor:.{digits}g}"
        if a != b and m != "1":
            return f"{a} > floor {b} (x{m})"
    return f"{local_err!r} > floor {floor!r} (x{local_err / floor!r})"


def summary(result: LocalResult, verdict: Optional[LocalVerdict] = None) -> Iterable[str]:
    """Lines for a terminal: checks, then the roots with their floor and margin."""
    verdict = verdict or local_roots(result)
    for c in result.checks:
        extra = f" ({len(c.failures)} vars: " + ", ".join(f"{k}: {w}" for k, w in c.failures[:3]) + ")" \
            if c.failures else ""
        note = f"; {c.note}" if c.note else ""
        yield f"check {c.name}: {c.status}{extra}{note}"
    for r in verdict.roots:
        yield f"root {r.id} {r.name} [{r.opr_type}]: local {over_floor_text(r.local_err, r.floor)}"



def local_json(result: LocalResult, verdict: Optional[LocalVerdict] = None) -> Dict[str, Any]:
    """The local analysis as one JSON object (``schema: lar-prec.local/1``): every var's
    local and accumulated error, floor and label, the roots with margin, the checks, and
    what could not be isolated. Non-finite errors are written as null with ``nonfinite``."""
    verdict = verdict or local_roots(result)
    lw = result.layerwise
    return {
        "schema": "lar-prec.local/1", "config": result.config, "model": str(lw.source_model),
        "layerwise_model": str(lw.path), "ref_dump": str(result.ref_dump),
        "test_dump": str(result.test_dump) if result.test_dump else None,
        "vars": [{"id": v.id, "name": v.name, "opr_type": v.opr_type, "dtype": v.dtype,
                  "local_err": json_number(v.local_err), "entire_err": json_number(v.entire_err),
                  "nonfinite": any(x is not None and not math.isfinite(x) for x in (v.local_err, v.entire_err)),
                  "floor": verdict.floors.get(v.id), "label": verdict.labels.get(v.id),
                  "units": json_number(v.bound.worst) if v.bound is not None else None,
                  "units_kind": v.bound.kind if v.bound is not None else None,
                  "inherited_from": list(verdict.inherited_from.get(v.id, ())), "problem": v.problem,
                  "algorithm": list(result.algorithms.get(v.id, ())),
                  "unit": list(lw.var(v.id).unit)} for v in result.vars],
        "roots": [{"id": r.id, "name": r.name, "opr_type": r.opr_type, "local_err": json_number(r.local_err),
                   "floor": r.floor, "margin": json_number(r.margin), "entire_err": json_number(r.entire_err)}
                  for r in verdict.roots],
        "checks": [{"name": c.name, "status": c.status, "note": c.note,
                    "failures": [{"id": k, "why": w} for k, w in c.failures]} for c in result.checks],
        "not_isolated": [{"id": k, "why": w} for k, w in lw.not_isolated.items()],
        "kept_computed": [{"id": k, "why": w} for k, w in lw.kept],
    }
