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
from typing import Container, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.bounds import TERMS_C
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.explain import Recomputed
from lar_prec.compare.recheck import Recheck
from lar_prec.compare.records import VarDiff, with_changes
from lar_prec.compare.threshold import FLOOR_EPS, SCALE_FLOOR, Threshold, VarColumns, scale_factor, to_float32

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
GUARD_EPS = FLOOR_EPS["Float32"]
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
    size = lambda s: math.prod(s) if s else 1  # noqa: E731
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


@dataclass(frozen=True)
class Through:
    """A compared var judged through unpaired operators (one side fused them away,
    :mod:`lar_prec.compare.fused`): its nearest compared ancestors, and the rounding those
    operators add in units of eps times its magnitude (``sqrt(K)`` per sum of K terms)."""

    inputs: Tuple[int, ...]
    units: float
    reducing: bool
    #: one of them is a 3x3 convolution (Winograd's allowance where a side profiled)
    winograd: bool = False


def kind_of(opr_type: str) -> str:
    """``move``, ``reducing`` or ``elementwise``: the edge rule's kind of an operator type."""
    if opr_type in DATA_MOVEMENT:
        return "move"
    return "reducing" if opr_type in REDUCING else "elementwise"


def _kind(d: VarDiff) -> str:
    return kind_of(d.opr_type)


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
    return min(max(MEDIAN_FACTOR * _median(values), lo), hi)


def _median(values: List[float]) -> float:
    """``np.median``'s number without numpy: the middle value, or the two middle ones' sum
    halved; NaN if any is NaN (``_kernel.c`` median_of, for the columns, the same)."""
    xs = sorted(values)
    if any(x != x for x in xs):
        return math.nan
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _winograd_shaped(d: VarDiff, ins: Sequence[VarDiff]) -> bool:
    return winograd_shapes(d.opr_type, d.shape, [u.shape for u in ins])


def winograd_shapes(opr_type: str, out: Sequence[int], ins: Sequence[Sequence[int]]) -> bool:
    """A 3x3 convolution (``ins``: its inputs' shapes), which Winograd may have run."""
    return opr_type.startswith(("Convolution", "ConvBias")) and len(ins) > 1 and tuple(ins[1][-2:]) == (3, 3)


def grow(diffs: Sequence[VarDiff], thr: Threshold, *, profiled: bool = False,
         recheck: Optional[Recheck] = None,
         in_place: bool = False, records: bool = False,
         through: Optional[Mapping[int, Through]] = None) -> Tuple[List[VarDiff], Optional[Growth]]:
    """``diffs`` (judged by the auto band ``thr``) re-judged by the edge rule: statuses and
    per-var thresholds of float vars, and which of them make error. Other dtypes, structural
    statuses and NaN/Inf are left as they are. None when no float var has a compared input.
    ``profiled``: a side ran with --fast-run/--full-run (3x3 convolutions may be Winograd).
    ``recheck(vars)``: each var recomputed from each side's own inputs (None: it cannot be);
    a var the rule names whose recomputation says it made nothing is not a root.
    ``in_place``: the records are the caller's own, not yet shared: changed, not copied.
    ``records``: record by record, not by columns (the same decisions; where the caller knows
    the columns are not made: few vars, a var id repeating, no C kernel).
    ``through``: vars judged through the unpaired operators before them (by record)."""
    got = None if records or through else _grow_arrays(diffs, thr, profiled, recheck, in_place)
    return got if got is not None else _grow_records(diffs, thr, profiled, recheck, in_place, through or {})


def _grow_records(diffs: Sequence[VarDiff], thr: Threshold, profiled: bool,
                  recheck: Optional[Recheck],
                  in_place: bool, through: Optional[Mapping[int, Through]] = None) -> Tuple[List[VarDiff], Optional[Growth]]:
    """:func:`grow` record by record: where var ids repeat, and the reference the array form
    is tested against."""
    by_id = {d.id: d for d in diffs}
    through = through or {}
    err: Dict[int, float] = {}
    isfinite = math.isfinite
    for d in diffs:
        # a float var's error; an ok var of another dtype still feeds its consumers
        if d.status == "ok" or (d.status == "divergent" and d.dtype in EPS):
            e = d.norm_err
            if e is not None and isfinite(e):
                err[d.id] = float(e)
    units: Dict[int, float] = {}
    kinds: Dict[int, str] = {}
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
        t = through.get(d.id)
        ins = [by_id[u] for u in (t.inputs if t else d.inputs) if u in by_id and u != d.id]
        if not ins:
            continue
        e_in, unmeasured = 0.0, False
        for u in ins:
            eu = err.get(u.id)
            if eu is None:
                if u.status not in ("ok", "missing"):
                    unmeasured = True  # it differs in a way error cannot measure (NaN, shape, integers)
                    break
            elif eu > e_in:
                e_in = eu
        if unmeasured:
            continue  # the band rule
        in_err[d.id] = e_in
        kind = kinds[d.id] = _kind(d)
        if kind == "reducing":
            k = reduction_length(d.opr_type, d.shape, [u.shape for u in ins])
            units[d.id] = eps * math.sqrt(k) * mag
            if profiled and _winograd_shaped(d, ins):
                # Winograd's error follows the magnitude it transforms (not capped at 1)
                winograd[d.id] = magnitude
            elif t is None:
                # what it adds beyond carrying its inputs' error (error carried from upstream, a
                # fault's included, must not widen every floor below it)
                ratio_red.append(max(0.0, err[d.id] - e_in) / units[d.id])
        elif kind == "elementwise":
            units[d.id] = ELEMWISE_ULPS * eps * mag
        elif any(EPS.get(u.dtype, 0.0) < eps for u in ins):
            units[d.id] = 0.5 * eps * mag  # a conversion to a coarser dtype rounds once
        else:
            units[d.id] = 0.0
        if t is not None:  # what the unpaired operators before it add is its own, not carried
            units[d.id] += t.units * eps * mag
            kinds[d.id] = "reducing" if t.reducing else kind
            if profiled and t.winograd:
                winograd[d.id] = magnitude
            continue  # nor does it calibrate the rule for single operators
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
        kind = kinds[vid]
        g = GAIN_MOVE if kind == "move" else g_red if kind == "reducing" else g_elem
        own = s * unit if vid not in winograd else max(s, WINOGRAD_ALLOWANCE) * unit * winograd[vid]
        guard = FLOOR_EPS[d.dtype] * EPS[d.dtype]  # under each dtype's band (16 eps for float32, 1 for the others)
        explained[vid] = max(guard, own) + g * in_err[vid]
        if err[vid] > explained[vid]:
            made[vid] = err[vid] / explained[vid]
    rechecked = _rechecked(made, explained, err, winograd, by_id, recheck)
    out: List[VarDiff] = []
    divergent: set = set()
    over_band = 0
    base: Dict[str, float] = {}  # the band's value per dtype (thr.for_dtype), looked up once
    for d in diffs:
        if d.id not in explained or d.status not in ("ok", "divergent"):
            if d.status != "ok":
                divergent.add(d.id)
            out.append(d)
            continue
        sf = scale_factor(d.scale)
        b = base.get(d.dtype)
        if b is None:
            b = base[d.dtype] = thr.for_dtype(d.dtype)
        band_t = b * sf if thr.scaled and d.scale is not None else b  # thr.for_var
        if d.id in made:
            t = explained[d.id] * sf
        elif not divergent.isdisjoint(through[d.id].inputs if d.id in through else d.inputs):
            t = band_t  # error carried from a root: seen where it is above the band
        else:
            t = max(band_t, explained[d.id] * sf)  # rounding carried along edges
            if d.max_err is not None and d.max_err > to_float32(band_t):
                over_band += 1
        t32 = to_float32(t)
        st = "divergent" if d.max_err is not None and d.max_err > t32 else "ok"
        if st != "ok":
            divergent.add(d.id)
        if st != d.status or t != d.threshold:
            n_over = 0 if st == "ok" else (d.n_over if t == d.threshold else None)
            if in_place:
                d.__dict__.update(status=st, threshold=t, n_over=n_over)
            else:
                d = with_changes(d, status=st, threshold=t, n_over=n_over)
        out.append(d)
    return out, Growth(made=made, explained=explained, scale=s, gain_reducing=g_red, gain_elementwise=g_elem,
                       explained_over_band=over_band, reason=_reason(s, g_red, g_elem, profiled, over_band, rechecked),
                       rechecked=rechecked)


def _rechecked(made: Dict[int, float], explained: Dict[int, float], err: Mapping[int, float],
               winograd: "Container[int]", by_id: Mapping[int, VarDiff],
               recheck: Optional[Recheck]) -> Dict[int, Recomputed]:
    """The vars ``made`` names recomputed from each side's own inputs (``recheck``); those that
    made nothing leave ``made`` (their error all came through their inputs: ``explained``
    raised to it) and are returned."""
    rechecked: Dict[int, Recomputed] = {}
    # only where cancellation could explain it: a var making 100x what its inputs explain is
    # made there whatever its terms do, and a comparison of many such vars stays fast
    doubtful = sorted((v for v in made if made[v] <= RECHECK_RATIO), key=made.__getitem__)[:RECHECK_MAX]
    if recheck is None or not doubtful:
        return rechecked
    for vid, r in zip(doubtful, recheck([by_id[v] for v in doubtful])):
        allowance = TERMS_C * (WINOGRAD_ALLOWANCE if vid in winograd else 1.0)
        if r is not None and not r.made_here(allowance):
            rechecked[vid] = r
            del made[vid]
            explained[vid] = max(explained[vid], err[vid])  # all of its error came through its inputs
    return rechecked


def _reason(s: float, g_red: float, g_elem: float, profiled: bool, over_band: int,
            rechecked: Mapping[int, Recomputed]) -> str:
    """The edge rule's words for the threshold's reason."""
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
    return reason


_MOVE, _REDUCING, _ELEMWISE = 0, 1, 2
_KIND_CODE = {"move": _MOVE, "reducing": _REDUCING, "elementwise": _ELEMWISE}
#: the rule's constants as the C kernel's grow_columns takes them (one source: the names above)
_CONSTS = (*(EPS[n] for n in VarColumns.FLOATS), *(FLOOR_EPS[n] for n in VarColumns.FLOATS), ELEMWISE_ULPS, GAIN_MOVE,
           SCALE_MIN, SCALE_MAX, GAIN_MIN, GAIN_MAX, GAIN_DEFAULT, MEDIAN_FACTOR, float(MIN_SAMPLES),
           WINOGRAD_ALLOWANCE, SCALE_FLOOR)


def kind_code(opr_type: str) -> int:
    """The edge rule's kind of an operator type as :class:`VarColumns` codes it."""
    return _KIND_CODE[kind_of(opr_type)]


def _grow_arrays(diffs: Sequence[VarDiff], thr: Threshold, profiled: bool,
                 recheck: Optional[Recheck],
                 in_place: bool) -> Optional[Tuple[List[VarDiff], Optional[Growth]]]:
    """:func:`grow` by :func:`grow_columns`; None where a var id repeats or the kernel is not built."""
    cols = VarColumns.of(diffs, kind_of=kind_code)
    if cols is None:
        return None
    status, threshold, n_over = list(cols.status), list(cols.threshold), list(cols.n_over)
    growth, changed = grow_columns(diffs, cols, status, threshold, n_over, thr, profiled, recheck)
    out = list(diffs)
    for i in changed:
        if in_place:
            out[i].__dict__.update(status=status[i], threshold=threshold[i], n_over=n_over[i])
        else:
            out[i] = with_changes(out[i], status=status[i], threshold=threshold[i], n_over=n_over[i])
    return out, growth


def grow_columns(diffs: Sequence[VarDiff], cols: VarColumns, status: List[str], threshold: List[Optional[float]],
                 n_over: List[Optional[int]], thr: Threshold, profiled: bool,
                 recheck: Optional[Recheck]) -> Tuple[Optional[Growth], List[int]]:
    """:func:`grow` over all vars at once, in the C kernel (``_kernel.c`` grow_columns: tens of
    thousands of vars, where a loop over the records costs more than the rule), from their
    columns (made with :func:`kind_code`) and their ``status``, ``threshold`` and ``n_over`` as
    judged by the band ``thr`` (changed in place; the records are not): the same numbers and
    decisions as record by record, each computed in the same order of operations. The
    reduction lengths and the recheck stay here (shapes; numpy and the files). Returns the
    growth (None: no float var has a compared input) and the positions it changed."""
    pos = cols.pos
    # layers repeat: each (operator, shape, input shapes) is worked out once
    memo: Dict[Tuple[str, Tuple[int, ...], Tuple[Tuple[int, ...], ...]], Tuple[int, bool]] = {}

    def k_of(keys: List[Tuple[str, Tuple[int, ...], Tuple[Tuple[int, ...], ...]]]) -> Tuple[List[int], List[bool]]:
        k_red, wino_red = [], []
        for key in keys:  # (operator, shape, its inputs' shapes among the vars)
            try:
                got = memo.get(key)
            except TypeError:  # a shape given as a list (a record made by hand): not remembered
                got = (reduction_length(*key), winograd_shapes(*key))
            if got is None:
                got = memo[key] = (reduction_length(*key), winograd_shapes(*key))
            k_red.append(got[0])
            wino_red.append(got[1])
        return k_red, wino_red

    def recheck_of(made: Dict[int, float], explained: Dict[int, float], err: Dict[int, float],
                   winograd: "Container[int]") -> Dict[int, Recomputed]:
        return _rechecked(made, explained, err, winograd, {v: diffs[pos[v]] for v in made}, recheck)

    base = tuple(float(thr.for_dtype(n)) for n in VarColumns.FLOATS)
    got = KERNEL.grow_columns(cols.ids, status, threshold, n_over, cols.flat, _CONSTS, base,  # type: ignore[union-attr]
                              thr.scaled, profiled, pos, VarColumns.STATUS_WORDS, cols.opr_type, cols.shape, k_of,
                              recheck_of)
    if got is None:
        return None, []
    s, g_red, g_elem, made, explained, rechecked, carried, changed = got
    return Growth(made=made, explained=explained, scale=s, gain_reducing=g_red, gain_elementwise=g_elem,
                  explained_over_band=carried, reason=_reason(s, g_red, g_elem, profiled, carried, rechecked),
                  rechecked=rechecked), changed


def with_growth(thr: Threshold, growth: Optional[Growth]) -> Threshold:
    """``thr`` carrying the edge rule's decision (the roots it made) and its reason."""
    if growth is None:
        return thr
    return replace(thr, made=dict(growth.made), reason=thr.reason + "; " + growth.reason)
