"""Dump-only roots by how error grows along each edge (issue 20 #4; docs/threshold.md).

Without the model there is no local error, only each var's accumulated error against the
reference. A fixed band of ulps cannot tell a long reduction's rounding (a convolution of
K=1152 terms differs by 8e-6 between two correct kernels) from a small fault on a quiet
chain (8e-6 where the noise is 3e-7), and a root rule of "its inputs are ok" hides a large
fault behind in-band noise upstream. So each float var (float32, float16, bfloat16)'s error is held against what its
own inputs' errors and its operator kind explain:

    explained(v) = max(GUARD, S * unit(v)) + g(v) * max(error of v's inputs)

``unit`` is ``eps * sqrt(K)`` for an operator summing K terms, ``ELEMWISE_ULPS * eps`` for an
elementwise one and 0 for data movement; ``S`` (reductions) and ``g`` (how much an operator
may amplify its inputs' error) are calibrated on the run's own errors (4 x their median,
bounded), so one fault does not move them. A var above ``explained`` makes error: a root
(``made``), whatever its inputs. A var not reached from one is held to
``max(band, explained)``: rounding carried along edges is not a divergence. Every number is
``norm_err`` (max_err over ``min(1, scale)``), like the auto threshold's.

This rule is a screen. A var it names as making error is then recomputed in float64 from each
side's own inputs where the dumps tell its operator's parameters (``recheck``,
:mod:`lar_prec.compare.explain`): when both sides are within ``TERMS_C`` rounding units of
their own exact results, the operator made nothing and its error came through its inputs (a
product of cancelling terms shows its inputs' error many times over). Numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.compare.bounds import TERMS_C
from lar_prec.compare.explain import Recomputed
from lar_prec.compare.records import VarDiff, with_changes
from lar_prec.compare.threshold import Threshold, scale_factor

#: operators that only move, copy or select values: their output carries its input's error
DATA_MOVEMENT = frozenset(
    {"Reshape", "Dimshuffle", "Subtensor", "Concat", "AxisAddRemove", "Broadcast", "Copy", "Identity",
     "IndexingMultiAxisVec", "IndexingOneHot", "GetVarShape", "Split", "SetSubtensor", "IncrSubtensor",
     "ParamPackSplit", "ParamPackConcat", "RelayoutFormat", "MarkNoBroadcastElemwise", "TypeCvt",
     "Host2DeviceCopy", "Device2HostCopy", "ImmutableTensor", "SharedDeviceTensor", "WarpPerspectiveBackwardData"}
)
#: operators that sum over a reduction axis: their rounding grows with the reduction length
REDUCING = frozenset(
    {"ConvolutionForward", "ConvBiasForward", "Convolution3DForward", "ConvolutionBackwardData", "MatrixMul",
     "BatchedMatrixMul", "Reduce", "PoolingForward", "AdaptivePoolingForward", "SoftmaxForward",
     "LayerNormForward", "GroupNormForward", "BatchNormForward", "Dot", "MatrixInverse", "LocalShareForward",
     "DeformableConvForward", "RegionRestrictedConvolutionForward"}
)
EPS32 = 2.0 ** -23
#: the float dtypes the edge rule judges, by their rounding unit
EPS = {"Float32": EPS32, "Float16": 2.0 ** -10, "BFloat16": 2.0 ** -7}
#: an elementwise float operator may differ by a few units in the last place (vector libm)
ELEMWISE_ULPS = 4.0
#: no var below this many float32 eps is a root by growth (below the band's low end, 32 eps)
GUARD_EPS = 16.0
#: bounds of the calibrated factor on eps * sqrt(K), as local error's floors have them
SCALE_MIN, SCALE_MAX = 1.5, 64.0
#: bounds of the calibrated amplification allowance of an operator's inputs' error
GAIN_MIN, GAIN_MAX = 2.0, 16.0
#: data movement carries its input's error unchanged; the slack covers the metric's
#: normalisation by each var's own magnitude (a concat's is the largest of its inputs')
GAIN_MOVE = 1.25
#: the allowance where too few operators carry error to calibrate it
GAIN_DEFAULT = 4.0
#: calibrated values are this many times the median over the run (one fault does not move it)
MEDIAN_FACTOR = 4.0
#: a 3x3 convolution of a run that profiled (--fast-run, --full-run) may have run Winograd
#: F(6,3), whose own error reaches 7.1 x eps x sqrt(K) x its magnitude (measured for local
#: error's floors: ``lar_prec.diagnosis.floors.WINOGRAD_FACTOR``); dump-only cannot tell which
#: algorithm ran, so such a convolution is allowed max(S, 8) of these units, not S
WINOGRAD_ALLOWANCE = 8.0


def reduction_length(opr_type: str, out: Sequence[int], ins: Sequence[Sequence[int]]) -> int:
    """How many products or terms one output element sums (1 for elementwise operators)."""
    size = lambda s: int(np.prod(s, dtype=np.int64)) if s else 1  # noqa: E731
    if not ins:
        return 1
    if opr_type.startswith(("Convolution", "ConvBias", "LocalShare", "Deformable", "RegionRestricted")) \
            and len(ins) > 1 and len(out) > 1 and out[1]:
        return max(1, size(ins[1]) // out[1])
    if opr_type in ("MatrixMul", "BatchedMatrixMul", "Dot") and len(out) >= 1:
        rows = size(out[:-1]) if len(out) > 1 else 1
        return max(1, size(ins[0]) // max(rows, 1))
    if opr_type in ("Reduce", "PoolingForward", "AdaptivePoolingForward"):
        return max(1, size(ins[0]) // max(size(out), 1))
    if opr_type in REDUCING:  # softmax, norms: the longest axis is a safe upper bound
        return max(ins[0]) if ins[0] else 1
    return 1


@dataclass(frozen=True)
class Growth:
    """What the edge rule decided: the vars that make error (``made``: var id -> how many times
    what its inputs explain), what each judged var's inputs and operator explain (``norm_err``
    units), the calibration, and the words for the threshold's reason."""

    made: Mapping[int, float]
    explained: Mapping[int, float]
    scale: float
    gain_reducing: float
    gain_elementwise: float
    explained_over_band: int
    reason: str
    #: vars the screen named that, recomputed from each side's own inputs, made nothing
    rechecked: Mapping[int, Recomputed] = field(default_factory=dict)


def _kind(d: VarDiff) -> str:
    if d.opr_type in DATA_MOVEMENT:
        return "move"
    return "reducing" if d.opr_type in REDUCING else "elementwise"


#: a var the rule names is recomputed from each side's inputs only up to this many times what its
#: inputs explain (cancellation amplifies inputs' error by sum|terms| / |sum|: tens of times in
#: attention, 11x in the amplify case), and at most this many vars per comparison
RECHECK_RATIO = 100.0
RECHECK_MAX = 256
#: fewer samples than this calibrate nothing (the median of one operator is that operator)
MIN_SAMPLES = 5


def _calibrate(values: List[float], lo: float, hi: float, default: float) -> float:
    if len(values) < MIN_SAMPLES:
        return default
    return min(max(MEDIAN_FACTOR * float(np.median(values)), lo), hi)


def _winograd_shaped(d: VarDiff, ins: Sequence[VarDiff]) -> bool:
    return d.opr_type.startswith(("Convolution", "ConvBias")) and len(ins) > 1 and tuple(ins[1].shape[-2:]) == (3, 3)


def grow(diffs: Sequence[VarDiff], thr: Threshold, *, profiled: bool = False,
         recheck: Optional[Callable[[VarDiff], Optional[Recomputed]]] = None) -> Tuple[List[VarDiff], Optional[Growth]]:
    """``diffs`` (judged by the auto band ``thr``) re-judged by the edge rule: statuses and
    per-var thresholds of float vars, and which of them make error. Other dtypes, structural
    statuses and NaN/Inf are left as they are. None when no float var has a compared input.
    ``profiled``: a side ran with --fast-run/--full-run (3x3 convolutions may be Winograd).
    ``recheck(var)``: the var recomputed from each side's own inputs (None: it cannot be);
    a var the rule names whose recomputation says it made nothing is not a root."""
    by_id = {d.id: d for d in diffs}
    err: Dict[int, float] = {}
    for d in diffs:
        if d.dtype in EPS and d.status in ("ok", "divergent") and d.norm_err is not None \
                and math.isfinite(d.norm_err):
            err[d.id] = float(d.norm_err)
        elif d.status in ("ok",) and d.norm_err is not None and math.isfinite(d.norm_err):
            err[d.id] = float(d.norm_err)  # an ok var of another dtype still feeds its consumers
    units: Dict[int, float] = {}
    winograd: Dict[int, float] = {}  # 3x3 convolutions of a profiled run -> their magnitude
    in_err: Dict[int, float] = {}
    ratio_red: List[float] = []
    gain_red: List[float] = []
    gain_elem: List[float] = []
    for d in diffs:
        if d.id not in err or d.dtype not in EPS or not d.inputs:
            continue
        eps = EPS[d.dtype]
        magnitude = max(1.0, float(d.scale or 0.0))
        # float16 and bfloat16 values are not small: their rounding follows their magnitude
        mag = 1.0 if d.dtype == "Float32" else magnitude
        ins = [by_id[u] for u in d.inputs if u in by_id and u != d.id]
        if not ins:
            continue
        if any(u.status not in ("ok", "missing") and u.id not in err for u in ins):
            continue  # an input differs in a way error cannot measure (NaN, shape, integers): the band rule
        e_in = max((err.get(u.id, 0.0) for u in ins), default=0.0)
        in_err[d.id] = e_in
        kind = _kind(d)
        if kind == "reducing":
            k = reduction_length(d.opr_type, d.shape, [u.shape for u in ins])
            units[d.id] = eps * math.sqrt(k) * mag
            if profiled and _winograd_shaped(d, ins):
                # Winograd's error follows the magnitude it transforms (not capped at 1)
                winograd[d.id] = magnitude
            else:
                # what it adds beyond carrying its inputs' error (error carried from upstream, a
                # fault's included, must not widen every floor below it)
                ratio_red.append(max(0.0, err[d.id] - e_in) / units[d.id])
        elif kind == "elementwise":
            units[d.id] = ELEMWISE_ULPS * eps * mag
        elif any(EPS.get(u.dtype, 0.0) < eps for u in ins):
            units[d.id] = 0.5 * eps * mag  # a conversion to a coarser dtype rounds once
        else:
            units[d.id] = 0.0
        if e_in >= 4.0 * eps and kind != "move":
            (gain_red if kind == "reducing" else gain_elem).append(err[d.id] / e_in)
    if not units:
        return list(diffs), None
    s = _calibrate(ratio_red, SCALE_MIN, SCALE_MAX, SCALE_MIN)
    g_red = _calibrate(gain_red, GAIN_MIN, GAIN_MAX, GAIN_DEFAULT)
    g_elem = _calibrate(gain_elem, GAIN_MIN, GAIN_MAX, GAIN_DEFAULT)
    made: Dict[int, float] = {}
    explained: Dict[int, float] = {}
    for vid, unit in units.items():
        d = by_id[vid]
        kind = _kind(d)
        g = GAIN_MOVE if kind == "move" else g_red if kind == "reducing" else g_elem
        own = s * unit if vid not in winograd else max(s, WINOGRAD_ALLOWANCE) * unit * winograd[vid]
        guard = GUARD_EPS * EPS32 if d.dtype == "Float32" else EPS[d.dtype]  # under each dtype's band
        explained[vid] = max(guard, own) + g * in_err[vid]
        if err[vid] > explained[vid]:
            made[vid] = err[vid] / explained[vid]
    rechecked: Dict[int, Recomputed] = {}
    # only where cancellation could explain it: a var making 100x what its inputs explain is
    # made there whatever its terms do, and a comparison of many such vars stays fast
    doubtful = sorted((v for v in made if made[v] <= RECHECK_RATIO), key=made.__getitem__)[:RECHECK_MAX]
    for vid in doubtful if recheck is not None else ():
        r = recheck(by_id[vid])  # type: ignore[misc]
        allowance = TERMS_C * (WINOGRAD_ALLOWANCE if vid in winograd else 1.0)
        if r is not None and not r.made_here(allowance):
            rechecked[vid] = r
            del made[vid]
            explained[vid] = max(explained[vid], err[vid])  # all of its error came through its inputs
    out: List[VarDiff] = []
    divergent: set = set()
    over_band = 0
    for d in diffs:
        if d.id not in explained or d.status not in ("ok", "divergent"):
            if d.status != "ok":
                divergent.add(d.id)
            out.append(d)
            continue
        sf = scale_factor(d.scale)
        band_t = thr.for_var(d.dtype, d.scale)
        if d.id in made:
            t = explained[d.id] * sf
        elif any(u in divergent for u in d.inputs):
            t = band_t  # error carried from a root: seen where it is above the band
        else:
            t = max(band_t, explained[d.id] * sf)  # rounding carried along edges
            if d.max_err is not None and d.max_err > float(np.float32(band_t)):
                over_band += 1
        t32 = float(np.float32(t))
        st = "divergent" if d.max_err is not None and d.max_err > t32 else "ok"
        if st != "ok":
            divergent.add(d.id)
        if st != d.status or t != d.threshold:
            n_over = 0 if st == "ok" else (d.n_over if t == d.threshold else None)
            d = with_changes(d, status=st, threshold=t, n_over=n_over)
        out.append(d)
    reason = (f"dump-only roots by error growth along edges: a float var makes error when it exceeds "
              f"max({GUARD_EPS:g} eps, {s:.3g} x eps x sqrt(K)) + g x its inputs' largest error (float16: its eps, "
              f"x max(1, magnitude)) "
              f"(g {g_red:.3g} for reductions, {g_elem:.3g} elementwise, {GAIN_MOVE:g} for data movement; calibrated "
              f"on this run)")
    if profiled:
        reason += (f"; 3x3 convolutions max({s:.3g}, {WINOGRAD_ALLOWANCE:g}) x eps x sqrt(K) x max(1, magnitude) "
                   f"(a side profiled: Winograd may have run)")
    if over_band:
        reason += f"; {over_band} var(s) above the band are rounding carried from their inputs"
    if rechecked:
        reason += (f"; {len(rechecked)} var(s) it named made nothing when recomputed in float64 from each side's own "
                   f"inputs (within {TERMS_C:g} rounding units of their terms): their error came through their inputs")
    return out, Growth(made=made, explained=explained, scale=s, gain_reducing=g_red, gain_elementwise=g_elem,
                       explained_over_band=over_band, reason=reason, rechecked=rechecked)


def with_growth(thr: Threshold, growth: Optional[Growth]) -> Threshold:
    """``thr`` carrying the edge rule's decision (the roots it made) and its reason."""
    if growth is None:
        return thr
    return replace(thr, made=dict(growth.made), reason=thr.reason + "; " + growth.reason)
