"""Floors of local error per operator, and roots by local error (issues 14, 34 and 51).

An operator is a root when its local error (:mod:`lar_prec.diagnosis.local`) is more than correct
arithmetic allows on its own inputs: its difference, in rounding units of each element's own
scale (:mod:`lar_prec.diagnosis.local_bounds`, by the operator's rule in :mod:`lar_prec.oprules`),
above ``TERMS_C`` (worst element, or the whole output's scale), or, for a sum of terms, a
distribution over its elements that rounding does not make (:mod:`lar_prec.compare.spread`: the
RMS, a channel's mean, the fraction above one unit; issue 57). The floor is that allowance in
MegEngine's metric (:func:`bound_floor`). Operators that move, select or index values, and
integer or quantized arithmetic, have a floor of 0 (any difference is a bug; under a float16
option float values moved are rounded to float16 on their way in: one float16 unit). An operator
with no bound is **not judged** (its label says so, with why): never noise, never a floor made
from the run. Static operators (computed from constants alone, such as a recurrent cell's
``zeros @ W + b``) are part of the model's constants: never roots; a fault in them roots where
they first meet data. Numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from lar_prec.records import json_number
from lar_prec.dumps.algocache import winograd_tile
from lar_prec.graph import reach
from lar_prec.diagnosis.local_bounds import reduction_length  # noqa: F401  (the measured var's K, re-exported)
from lar_prec.diagnosis.local_records import LayerwiseModel, LocalResult, LocalVar

from lar_prec.compare.bounds import EPS, TERMS_C
from lar_prec.compare.spread import WORST
#: the smallest step of a dtype (its subnormal spacing): below it rounding is absolute
SUBNORMAL_STEP = {"float16": 2.0 ** -24}
#: the smallest magnitude a floor is scaled by (an all-zero var still gets a floor)
MIN_MAGNITUDE = 2.0 ** -20
#: extra floor factor of a Winograd convolution F(m, r) by output tile m: its transforms
#: round several more times, and its error follows the size of the values it transforms
#: (:func:`algorithm_factor`)
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
    #: the tests it failed: ``worst_element`` (local error over its floor) and the distribution
    #: tests of :mod:`lar_prec.compare.spread` (``rms``, ``channel_mean``, ``above_one_unit``)
    tests: Tuple[str, ...] = (WORST,)
    #: how far the most failed distribution test is over its limit (0: none failed)
    spread_margin: float = 0.0

    @property
    def margin(self) -> float:
        """How many floors the local error is (inf for a floor of 0), or, when larger, how far
        its most failed distribution test is over its limit."""
        own = self.local_err / self.floor if self.floor > 0 else math.inf
        return max(own, self.spread_margin)

    def why(self) -> str:
        """Which tests it failed, in words: one element far off, or every element a little."""
        words = {WORST: "worst element", "rms": "RMS over its elements", "channel_mean": "a channel's mean",
                 "above_one_unit": "fraction above one unit"}
        return ", ".join(words.get(t, t) for t in self.tests)


@dataclass(frozen=True)
class LocalVerdict:
    """Every var labelled root | inherited | noise | clean | not_isolated | not_judged | constant,
    and where inherited error came from (the upstream roots, or what could not be measured or
    judged; empty when only noise was carried)."""

    roots: Tuple[LocalRoot, ...]
    labels: Mapping[int, str]
    inherited_from: Mapping[int, Tuple[int, ...]] = field(default_factory=dict)
    floors: Mapping[int, float] = field(default_factory=dict)
    #: var id -> why its operator is not judged (label ``not_judged``)
    not_judged: Mapping[int, str] = field(default_factory=dict)


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
    """Each judged var's floor of local error (MegEngine's metric); a var not judged has none.

    A var with a bound (``v.bound``, in rounding units of its own scale): :data:`TERMS_C` units
    (:func:`bound_floor`), times :func:`algorithm_factor` for a Winograd convolution
    (``result.algorithms``, read from the fast-run cache). Exact operators, integer and quantized
    dtypes: 0; under a float16 ``compute_dtype`` (sweep's ioc16/io16xc32) float values an exact
    operator moves were rounded to float16 on their way in: one float16 unit of their magnitude.
    """
    if compute_dtype is not None and compute_dtype not in EPS:
        raise ValueError(f"compute_dtype {compute_dtype!r}: expected one of {', '.join(EPS)}")
    floors: Dict[int, float] = {}
    for v in result.vars:
        if v.bound is not None:
            floors[v.id] = bound_floor(v, TERMS_C * algorithm_factor(result.algorithms.get(v.id, ())))
        elif v.not_judged is not None:
            continue
        elif v.dtype in EPS and _eps(v.dtype, compute_dtype) > EPS[v.dtype]:
            # moves values rounded to the coarser compute_dtype on their way in
            floors[v.id] = max(_eps(v.dtype, compute_dtype) * _magnitude(v), SUBNORMAL_STEP.get(compute_dtype or "", 0.0))
        else:
            floors[v.id] = 0.0
    return floors


def _spread_failed(result: LocalResult, v: LocalVar) -> bool:
    """Whether a distribution test of ``v``'s difference fails (its sigma widened by the
    algorithm factor, as its floor is)."""
    if v.bound is None or v.bound.spread is None:
        return False
    return bool(v.bound.spread.limits(algorithm_factor(result.algorithms.get(v.id, ()))).failed())


def layerwise_ancestors(lw: LayerwiseModel, var_id: int) -> List[int]:
    """The ids every measured var ``var_id`` depends on in the layerwise model, sorted."""
    return sorted(reach(var_id, {m.id: m.inputs for m in lw.measured}))


def local_roots(result: LocalResult, floors: Optional[Mapping[int, float]] = None) -> LocalVerdict:
    """Label every var: ``root`` (local error above its floor), ``inherited`` (accumulated
    error above the local one, local within the floor: with the upstream roots it came from, or
    the operators that could not be isolated or judged and may hide one), ``noise`` (error made
    here or upstream, every operator within its floor), ``clean`` (none), ``not_isolated``,
    ``not_judged`` (no floor: no bound for its operator, or its bound could not be measured) or
    ``constant``. Roots are ordered by margin (local error / floor), largest first."""
    floors = dict(floors if floors is not None else noise_floors(result))
    labels: Dict[int, str] = {}
    roots: List[LocalRoot] = []
    not_judged: Dict[int, str] = {}
    static = {m.id for m in result.layerwise.measured if m.static}
    for v in result.vars:
        if v.id in static:
            labels[v.id] = "constant"  # computed from constants alone: part of the model's weights
        elif not v.isolated:
            labels[v.id] = "not_isolated"
        elif v.id not in floors:
            labels[v.id] = "not_judged"
            not_judged[v.id] = v.not_judged or f"no bound for {v.opr_type}"
        elif (v.local_err is not None and v.local_err > floors[v.id]) or _spread_failed(result, v):
            labels[v.id] = "root"
            worst = v.local_err is not None and v.local_err > floors[v.id]
            lim = v.bound.spread.limits(algorithm_factor(result.algorithms.get(v.id, ()))) \
                if v.bound is not None and v.bound.spread is not None else None
            tests = ((WORST,) if worst else ()) + (lim.failed() if lim is not None else ())
            roots.append(LocalRoot(v.id, v.name, v.opr_type, v.local_err if v.local_err is not None else 0.0,
                                   floors[v.id], v.entire_err, tests, lim.margin() if lim is not None else 0.0))
        elif v.entire_err and v.entire_err > (v.local_err or 0.0):  # its inputs carried error
            labels[v.id] = "inherited"
        elif v.local_err:
            labels[v.id] = "noise"
        else:
            labels[v.id] = "clean"
    root_ids = {r.id for r in roots}
    came: Dict[int, Tuple[int, ...]] = {}
    # what may hide a root: not isolated, or not judged and differing on its own inputs
    hiding = {v.id for v in result.vars if labels.get(v.id) == "not_isolated"
              or (labels.get(v.id) == "not_judged" and v.local_err != 0.0)}
    # with no root and nothing unmeasured there is nothing to come from: no walk (a clean model)
    flagged = bool(root_ids) or bool(hiding)
    inputs = {m.id: m.inputs for m in result.layerwise.measured} if flagged else {}
    for k, lab in list(labels.items()):
        if lab != "inherited":
            continue
        ups = sorted(reach(k, inputs))
        # from its roots; else from what could not be measured or judged (it may hide one); else
        # its error is the rounding of operators within their floors: noise, not inherited
        came[k] = tuple(a for a in ups if a in root_ids) or tuple(a for a in ups if a in hiding)
        if not came[k]:
            del came[k]
            labels[k] = "noise"
    roots.sort(key=lambda r: (-r.margin, -r.local_err, r.id))
    return LocalVerdict(tuple(roots), labels, came, floors, not_judged)


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


def root_text(r: LocalRoot) -> str:
    """What a local root failed: ``local 3e-06 > floor 1e-06 (x3)`` for its worst element, else
    its distribution test (``units_rms`` or a channel's mean beyond what rounding makes)."""
    if WORST in r.tests:
        return f"local {over_floor_text(r.local_err, r.floor)}" + (
            f"; also {r.why().replace('worst element, ', '')}" if len(r.tests) > 1 else "")
    return (f"every element a little off: {r.why()} beyond rounding (x{r.spread_margin:.3g} its limit; "
            f"worst element within its floor: local {r.local_err:.3g} <= {r.floor:.3g})")


def spread_json(result: LocalResult, v: LocalVar) -> Optional[Dict[str, Any]]:
    """A var's distribution tests (values, limits, which failed) as JSON, None without them."""
    if v.bound is None or v.bound.spread is None:
        return None
    factor = algorithm_factor(result.algorithms.get(v.id, ()))
    out = {k: json_number(x) if isinstance(x, float) else x for k, x in v.bound.spread.to_json(factor).items()}
    out["detectable_fault"] = json_number(v.bound.spread.detectable(EPS.get(v.bound.dtype, 0.0), factor))
    return out


def summary(result: LocalResult, verdict: Optional[LocalVerdict] = None) -> Iterable[str]:
    """Lines for a terminal: checks, then the roots with their floor and margin."""
    verdict = verdict or local_roots(result)
    for c in result.checks:
        extra = f" ({len(c.failures)} vars: " + ", ".join(f"{k}: {w}" for k, w in c.failures[:3]) + ")" \
            if c.failures else ""
        note = f"; {c.note}" if c.note else ""
        yield f"check {c.name}: {c.status}{extra}{note}"
    for r in verdict.roots:
        yield f"root {r.id} {r.name} [{r.opr_type}]: {root_text(r)}"



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
                  "spread": spread_json(result, v),
                  "inherited_from": list(verdict.inherited_from.get(v.id, ())), "problem": v.problem,
                  "not_judged": verdict.not_judged.get(v.id),
                  "algorithm": list(result.algorithms.get(v.id, ())),
                  "unit": list(lw.var(v.id).unit)} for v in result.vars],
        "roots": [{"id": r.id, "name": r.name, "opr_type": r.opr_type, "local_err": json_number(r.local_err),
                   "floor": r.floor, "margin": json_number(r.margin), "entire_err": json_number(r.entire_err),
                   "tests": list(r.tests)}
                  for r in verdict.roots],
        "checks": [{"name": c.name, "status": c.status, "note": c.note,
                    "failures": [{"id": k, "why": w} for k, w in c.failures]} for c in result.checks],
        "not_isolated": [{"id": k, "why": w} for k, w in lw.not_isolated.items()],
        "kept_computed": [{"id": k, "why": w} for k, w in lw.kept],
    }
