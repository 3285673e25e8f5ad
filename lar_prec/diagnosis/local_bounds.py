"""Each measured operator's local difference in rounding units of its own arithmetic (issue 51 #1).

The layerwise run gives an operator's output under the test kernels on the reference's exact
inputs; this module says how far two correct kernels could be apart there, element by element,
by the operator's rule (:func:`lar_prec.oprules.rule`):

* ``terms``: ``(sqrt(K) + 1) * T`` with ``T`` the operator on the absolute values of its inputs,
  which the layerwise model computes beside it (its twin), times the slope of a nonlinearity
  applied after the sum, plus that nonlinearity's own rounding;
* ``interpolation``: the twin's ``T`` as a sum of 4 terms, plus the rounding of the sample
  coordinates (``4 * S * N``: ``S`` the coordinates' magnitude, ``N`` the largest ``|x|`` of the
  element's plane, :func:`lar_prec.compare.bounds.interpolation_scale`);
* ``elementwise``: its mode's own rounding and condition number, step by step through a unit
  lite fused at load time (:mod:`lar_prec.compare.elemwise`), on the reference's input values;
* ``softmax``, ``layernorm``: their scales in :mod:`lar_prec.compare.bounds`;
* ``exact`` and integer or quantized dtypes: no scale (any difference is a bug);
* ``not_judged``: no bound, with why; so is a judged operator whose scale could not be measured.

Under a float16 option (``compute``), the unit is float16's and what rounding the inputs to
float16 changes is added (exactly, for elementwise modes). Numpy only.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare import bounds, elemwise, recurrent, spread
from lar_prec.compare.bounds import Bound
from lar_prec.compare.growth import reduction_length as _reduction_length
from lar_prec.compare.relayout import to_plain
from lar_prec.diagnosis.local_records import LayerwiseModel, MeasuredVar
from lar_prec.dumps.folder import DumpFolder
from lar_prec.lar.flags import flag_names
from lar_prec.lar.layerwise_build import OUT_SUFFIX
from lar_prec.oprules import ELEMENTWISE, EXACT, INTERPOLATION, LAYERNORM, NOT_JUDGED, RECURRENT, SOFTMAX, TERMS, rule

#: (bound or None, why it is not judged or None): None and None = exact (no scale needed)
Judged = Tuple[Optional[Bound], Optional[str]]

#: load_and_run options that compute float operators in float16
FLOAT16_FLAGS = frozenset({"enable_ioc16", "enable_io16xc32"})


def compute_dtype(flags: Sequence[str]) -> Optional[str]:
    """``"float16"`` when load_and_run ``flags`` make float operators compute in float16 (their
    floors use float16's eps and count the rounding of their inputs), else None."""
    return "float16" if flag_names(flags) & FLOAT16_FLAGS else None


def plain(arr: "np.ndarray", shape: Sequence[int], fmt: Optional[str] = None) -> "np.ndarray":
    """``arr`` in the model's plain ``shape``: as is when it already is; reshaped when only the
    dims' grouping differs; brought back from a packed layout (NCHW4/44/88, NHWCD4, padding cut)
    when :mod:`lar_prec.compare.relayout` recognises one; else as dumped (another batch: the
    graph infers its shapes again, as the user's run did)."""
    if tuple(arr.shape) == tuple(shape):
        return np.ascontiguousarray(arr)
    if arr.size == int(np.prod(shape)) and arr.ndim == len(shape):
        return np.ascontiguousarray(arr.reshape(shape))
    got, _det = to_plain(arr, tuple(shape), fmt=fmt)
    return np.ascontiguousarray(got if got is not None else arr)


def reference_value(lw: LayerwiseModel, ref: DumpFolder, var_id: int, fmt: Optional[str]) -> Optional["np.ndarray"]:
    """The reference's value of an operator input ``var_id`` (original id): a fed var's by its
    reference id; a constant's as the model holds it (the build wrote it beside the model: the
    reference dump's ids are another graph's when the model was rewritten)."""
    feed = next((f for f in lw.feeds if f.id == var_id), None)
    if feed is None:
        got = _constant(lw, var_id)
        name = lw.constant_names.get(var_id)
        if got is None and name is not None:  # the reference's var of that name, if it is one
            found = [d.id for d in ref if d.var.name == name] if var_id not in ref or ref.var_info(var_id).name != name \
                else [var_id]
            got = np.asarray(ref[found[0]].array()) if len(found) == 1 else None
        return got
    if feed.ref_id is None or feed.ref_id not in ref:
        return None
    return plain(np.asarray(ref[feed.ref_id].array()), feed.shape, fmt)


def _constant(lw: LayerwiseModel, var_id: int) -> Optional["np.ndarray"]:
    """A constant the reference dump lacks, from the file the build wrote (data: no pickle)."""
    path = lw.constants.get(var_id)
    if path is None:
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None


def reduction_length(m: MeasuredVar) -> int:
    """How many products or terms one output element sums (1 for elementwise operators)."""
    own = _reduction_length(m.opr_type, m.shape, m.input_shapes)
    if m.opr_type == "ConvolutionBackwardData" and len(m.input_shapes) > 1 and len(m.shape) > 1 and m.shape[1]:
        # (filter, data): each output sums the filter's taps over the data's channels
        own = max(1, math.prod(m.input_shapes[0]) // m.shape[1])
    return max(int(m.unit_reduction or 1), own) if (m.unit_reduction or 1) > 1 else own


def _dtype(m: MeasuredVar, compute: Optional[str]) -> str:
    own = m.dtype
    return compute if compute in bounds.EPS and bounds.EPS[compute] > bounds.EPS[own] else own


def _inputs(lw: LayerwiseModel, ref: DumpFolder, ids: Sequence[int], fmt: Optional[str]) -> Optional[list]:
    xs = [reference_value(lw, ref, u, fmt) for u in ids]
    return None if any(x is None for x in xs) else [np.asarray(x, dtype=np.float64) for x in xs]


def _elementwise(lw: LayerwiseModel, m: MeasuredVar, ref: DumpFolder, fmt: Optional[str], want: "np.ndarray",
                 dtype: str) -> Tuple[Optional["np.ndarray"], Optional[str]]:
    """``U`` of an elementwise operator (or a unit of them) on the reference's inputs."""
    float16 = dtype == "float16" and m.dtype != "float16"
    if m.steps:
        leaves = sorted({u for s in m.steps for u in s.inputs} - {s.id for s in m.steps})
        xs = _inputs(lw, ref, leaves, fmt)
        if xs is None:
            return None, "a reference value of its fused unit's inputs is missing"
        exact = {k: np.abs(x) for k, x in zip(leaves, xs)} if float16 else None  # each input rounded once
        try:
            u, why = elemwise.chain_scale(m.steps, dict(zip(leaves, xs)), exact)
        except ValueError as exc:  # values that do not broadcast: not this unit's
            return None, f"its fused unit's inputs do not broadcast ({exc})"
        return (None, f"in its fused unit: {why}") if u is None else (u, None)
    mode, why = elemwise.mode_rule(m.mode)
    if mode is None:
        return None, why
    xs = _inputs(lw, ref, m.inputs, fmt)
    if xs is None:
        return None, "a reference value of its inputs is missing"
    if len(xs) != mode.arity:
        return None, f"{m.mode} with {len(xs)} inputs (expected {mode.arity})"
    try:
        u = elemwise.scale(mode, xs, y=want)
        if float16:
            u = u + elemwise.input_rounding(mode, xs) / bounds.EPS["float16"]
    except ValueError as exc:  # inputs that do not broadcast to the output
        return None, f"its inputs do not broadcast ({exc})"
    return np.broadcast_to(u, want.shape) if u.shape != want.shape else u, None


def _interpolation(lw: LayerwiseModel, m: MeasuredVar, ref: DumpFolder, fmt: Optional[str],
                   mag: "np.ndarray", want: "np.ndarray") -> Tuple[Optional["np.ndarray"], Optional[str]]:
    x = reference_value(lw, ref, m.inputs[0], fmt) if m.inputs else None
    if x is None or x.ndim != 4 or want.ndim != 4:
        return None, "its data input is not a reference NCHW value"
    extent = bounds.coordinate_extent(m.opr_type, x.shape, want.shape,
                                      [reference_value(lw, ref, u, None) for u in m.inputs[1:]])
    if extent is None:
        return None, f"the sample coordinates of {m.opr_type} could not be bounded"
    return bounds.interpolation_scale(np.asarray(x, dtype=np.float64), mag, extent), None


def measure_bound(lw: LayerwiseModel, m: MeasuredVar, got: "np.ndarray", want: "np.ndarray", ref: DumpFolder,
                  local: DumpFolder, mags: Mapping[int, int], fmt: Optional[str],
                  compute: Optional[str] = None) -> Judged:
    """How far ``got`` (m's local output) is from ``want`` (its reference), in rounding units of
    each element's own scale in the dtype it was computed in (``compute``, a coarser one than
    m's own under a float16 option): (the bound, None); (None, None) for an exact operator or
    an integer or quantized dtype; (None, why) when it is not judged."""
    if m.dtype not in bounds.EPS:
        return None, None
    dtype = _dtype(m, compute)
    r = rule(m.opr_type, m.mode)
    kind = ELEMENTWISE if m.steps else r.kind
    if m.steps and any(s.opr_type not in ("Elemwise", "ElemwiseMultiType", "PowC") for s in m.steps):
        other = next(s.opr_type for s in m.steps if s.opr_type not in ("Elemwise", "ElemwiseMultiType", "PowC"))
        return None, f"fused at load with a {other} that has no value of its own"
    if kind == EXACT:
        return None, None
    if kind == NOT_JUDGED:
        return None, r.why
    if kind in (TERMS, INTERPOLATION):
        if m.magnitude is None or m.id not in mags:
            return None, "its twin on absolute values was not measured"
        mag = plain(np.asarray(local[mags[m.id]].array()), m.shape, fmt)
        if kind == INTERPOLATION:
            scale, why = _interpolation(lw, m, ref, fmt, mag, want)
            if scale is None:
                return None, why
            return bounds.measure(got, want, scale, dtype, "interpolation", bounds.roundings(4), 4, m.opr_type), None
        k = reduction_length(m)
        scale = (r.lipschitz * bounds.terms_scale(mag, k) + r.own_ulps * np.abs(np.asarray(want, dtype=np.float64))
                 + r.own_abs)
        return _judged(bounds.measure(got, want, scale, dtype, "terms", bounds.roundings(k), k, m.opr_type,
                                      _partial_sums(lw, m, ref, fmt, want, compute, r)))
    if kind == ELEMENTWISE:
        scale, why = _elementwise(lw, m, ref, fmt, want, dtype)
        if scale is None:
            return None, why
        return _judged(bounds.measure(got, want, scale, dtype, "elementwise", 1.0 + len(m.inputs)))
    if kind == RECURRENT:
        first = next((o for o in lw.measured if o.opr == m.opr and o.output_index == 0), None)
        seq = plain(np.asarray(ref[first.ref_id].array()), first.shape, fmt) \
            if first is not None and first.ref_id is not None and first.ref_id in ref else None
        mine = _local_value(local, first.id, first.shape, fmt) if first is not None else None
        scale, why = recurrent.lstm_output_scale([reference_value(lw, ref, u, fmt) for u in m.inputs],
                                                 m.output_index, seq, mine)
        if scale is None:
            return None, why
        k = m.input_shapes[0][-1] + m.shape[-1] + 2 if m.input_shapes and m.input_shapes[0] else 1
        return _judged(bounds.measure(got, want, scale, dtype, "recurrent", bounds.roundings(k)))
    if kind == SOFTMAX:
        x = reference_value(lw, ref, m.inputs[0], fmt) if m.inputs and m.axis is not None else None
        if x is None or x.shape != want.shape:
            return None, "its input's reference value or its axis is unknown"
        n = bounds.roundings(x.shape[m.axis])
        return _judged(bounds.measure(got, want, bounds.softmax_scale(x, want, m.axis), dtype, "softmax", n))
    if kind == LAYERNORM:
        x = reference_value(lw, ref, m.inputs[0], fmt) if m.inputs and m.axis is not None else None
        if x is None or not 0 < m.axis < x.ndim:  # type: ignore[operator]
            return None, "its input's reference value or its axes are unknown"
        params = [reference_value(lw, ref, u, None) for u in m.inputs[1:3]]
        if len(params) == 2 and all(p is not None and p.shape == x.shape[m.axis:] for p in params):
            gamma, beta = params
        else:
            gamma = beta = None
        scale = bounds.layernorm_scale(x, want, m.axis, m.output_index, gamma, beta)
        n = bounds.roundings(int(np.prod(x.shape[m.axis:])))
        return _judged(bounds.measure(got, want, scale, dtype, "layernorm", n))
    return None, f"no bound for {m.opr_type}"


def _partial_sums(lw: LayerwiseModel, m: MeasuredVar, ref: DumpFolder, fmt: Optional[str], want: "np.ndarray",
                  compute: Optional[str], r) -> Optional["np.ndarray"]:
    """A matrix product's bound on each element's partial sums from its terms
    (:func:`lar_prec.compare.spread.matmul_partial_sums`), for its own sigma; None for any other
    operator, a product with a nonlinearity or computed in another dtype (inputs rounded on their
    way in), or one too large (its sigma(K) has power enough)."""
    if m.opr_type not in ("MatrixMul", "BatchedMatrixMul") or m.steps or compute is not None or len(m.inputs) != 2 \
            or (r.lipschitz, r.own_ulps, r.own_abs) != (1.0, 0.0, 0.0):
        return None
    if int(np.prod(m.shape)) * max(reduction_length(m), 1) > spread.TERMS_BUDGET:
        return None
    a, b = (reference_value(lw, ref, u, fmt) for u in m.inputs)
    if a is None or b is None:
        return None
    return spread.matmul_partial_sums(a, b, want)


def _local_value(local: DumpFolder, var_id: int, shape: Sequence[int], fmt: Optional[str]) -> Optional["np.ndarray"]:
    """The layerwise run's output of measured var ``var_id`` (its output is named ``*.lw<id>``)."""
    found = [d for d in local if (hit := OUT_SUFFIX.search(d.var.name)) is not None and int(hit.group(1)) == var_id]
    return plain(np.asarray(found[0].array()), shape, fmt) if len(found) == 1 else None


def _judged(b: Optional[Bound]) -> Judged:
    return (b, None) if b is not None else (None, "its scale is not finite (a magnitude overflowed) or its shape differs")


def bound_of(lw: LayerwiseModel, m: MeasuredVar, ref: DumpFolder, local: DumpFolder, outs: Mapping[int, int],
             mags: Mapping[int, int], fmt: Optional[str], compute: Optional[str] = None) -> Judged:
    """:func:`measure_bound` of measured var ``m`` read from the dumps (its local output in
    ``local`` under ``outs``' id, its reference in ``ref``)."""
    if m.id not in outs or m.ref_id is None or m.ref_id not in ref:
        return None, "not measured"
    want = plain(np.asarray(ref[m.ref_id].array()), m.shape, fmt)
    got = plain(np.asarray(local[outs[m.id]].array()), m.shape, fmt)
    if got.shape != want.shape:
        return None, f"its local output has shape {got.shape}, the reference {want.shape}"
    return measure_bound(lw, m, got, want, ref, local, mags, fmt, compute)
