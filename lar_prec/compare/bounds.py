"""The rounding scale of each output element, from the magnitudes of what it sums (issue 34).

A sum of K terms computed in floating point differs from the exact sum by about
``eps * sqrt(K) * sum(|term|)`` (Higham & Mary, "A new approach to probabilistic rounding error
analysis", SISC 2019), and two kernels that sum in different orders differ from each other by
as much. The output's own magnitude does not bound it: where terms cancel (attention scores, a
residual that nearly undoes its input) ``sum(|term|)`` is far larger than ``|sum|``. So each
element ``i`` of an operator's local output gets its own scale ``U_i`` (in absolute units;
times ``eps`` it is one rounding unit of that element), and the operator is measured by

    units = max_i |local_i - reference_i| / (eps * U_i)

the worst element's difference in rounding units; and by ``scale_units``, the factor by which
the whole output is scaled, in the same units (a consistent scale adds up over the elements,
rounding does not). :data:`TERMS_C` is how many units two correct kernels may differ by in
either test, the same for every operator and model (:mod:`lar_prec.diagnosis.floors` holds local error to it; the dump-only
rule and the float64 oracle hold each side to it too).

``U`` by operator (all on the reference's own inputs, ``x`` the reference input, ``y`` the
reference output):

* sums of products (convolution, matrix products, sum/mean reductions, average pooling):
  ``(sqrt(K) + 1) * T`` with ``T`` the same operator on the absolute values of its inputs
  (``|W| conv |x| + |b|``, ``|A| . |B|``, ``sum |x|``), computed by the layerwise run itself
  (``lar/layerwise_build.py`` adds it as an output); the ``+ 1`` is the rounding of the
  products and of the result;
* Softmax over an axis of N: ``(sqrt(N) + |x_i| + |max x| + 1) * y_i``: the sum of the
  exponentials, and ``exp``'s argument, whose rounding is relative to ``|x|``;
* LayerNorm over N elements with mean ``mu``, variance ``var``, ``rstd = 1/sqrt(var+e)``:
  ``|gamma_i| rstd (sqrt(N) mean|x| + |x_i| + |mu| + |x_i - mu| r) + |beta_i| + |y_i|`` with
  ``r = 1 + sqrt(N) (E[x^2] + mu^2) / (2 var)`` (the variance's relative error, as a one-pass
  kernel makes it); its mean output ``(sqrt(N) + 1) mean|x|``, its rstd output ``rstd (r + 1)``.

Numpy only; float64 throughout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from lar_prec._lazy import numpy as np
from lar_prec.compare.spread import Spread, channel_axis, spread as _spread

#: relative rounding unit per dtype (float16: 2^-10, bfloat16: 2^-7, float32: 2^-23)
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
#: how many rounding units two correct kernels may differ by at one element. Model: a summation's error is a sum of independent roundings, each uniform
#: within u = eps/2 of its partial sum. The worst case is terms of one sign summed one after
#: the other (the naive kernels): partial sums grow to T = sum |terms|, and the error's
#: standard deviation is u * T * sqrt(K) / 3 = 1/6 of a unit (eps * (sqrt(K) + 1) * T); a kernel
#: that sums in blocks errs less. 1.5 units is 9 of those standard deviations: the largest of
#: 10^8 elements is about 6. Measured on every case of ``cases/`` under default, reproducible,
#: fast-run (pinned; Winograd has its own factor) and every option that ran, naive against the
#: test kernels: at most 0.55 units (ResNet-18's global average pooling, 512 sums of 49
#: positive terms, 3.3 standard deviations; bench/RESULTS-floors.md).
TERMS_C = 1.5
#: roundings every element of a result may share, which scale it as a whole: the rounded 1/K
#: of a mean, a Softmax row's or a LayerNorm row's normalizer, a Winograd transform's rounded
#: constants. The scale test allows this much relative scale (in eps) before counting units.
SHARED_ROUNDINGS = 2.0
#: the absolute rounding of a dtype where its values are tiny: float16's subnormal spacing;
#: float32 and bfloat16 below their smallest normal, which MegEngine flushes to zero
TINY = {"float32": 2.0 ** -126, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -126}


@dataclass(frozen=True)
class Bound:
    """How far one operator's local output is from the reference, in rounding units.

    ``units``: the worst element's ``|local - reference|`` in rounding units (``eps * U``, plus the
    dtype's absolute rounding where values are tiny: :func:`measure`); ``unit_scale``: one
    rounding unit in MegEngine's metric at the element where it is largest (``unit /
    max(|reference|, 1)``), what a floor of ``c`` units is in the metric when nothing differs;
    ``dtype``: the dtype whose rounding is the unit (the compute dtype); ``kind``: which rule
    gave ``U``; ``scale_units``: the factor ``s`` by which the output is scaled as a whole (least
    squares: ``s = sum(d_i y_i / u_i^2) / sum(y_i^2 / u_i^2)``, ``d`` the difference, ``y`` the
    reference, ``u`` the unit), beyond :data:`SHARED_ROUNDINGS` eps, times ``sqrt(sum y_i^2 /
    u_i^2)``: independent roundings of at most 1/6 unit each give it a standard deviation of at
    most 1/6, like one element's, while a consistent scale (a weight off by 1e-5) adds up over
    every element."""

    units: float
    unit_scale: float
    dtype: str
    kind: str
    #: how far the output is scaled as a whole, in rounding units (:func:`measure`)
    scale_units: float = 0.0
    #: the distribution of the difference over the elements (sums of terms: issue 57), else None
    spread: Optional[Spread] = None

    @property
    def worst(self) -> float:
        """The larger of the two tests: the worst element, and the whole output's scale."""
        return max(self.units, self.scale_units)


def _f64(a: "np.ndarray") -> "np.ndarray":
    return np.asarray(a, dtype=np.float64)


def measure(local: "np.ndarray", ref: "np.ndarray", scale: "np.ndarray", dtype: str, kind: str,
            roundings: float = 1.0, terms: Optional[int] = None, opr_type: str = "",
            partial_sums: Optional["np.ndarray"] = None) -> Optional[Bound]:
    """:class:`Bound` of ``local`` against ``ref`` with per-element scale ``scale`` (``U``, absolute
    units, broadcast to the output's shape), computed in ``dtype``: one unit of an element is
    ``EPS[dtype] * U + TINY[dtype] * roundings`` (``roundings``: how many roundings add up, as
    ``U`` counts them: where values are tiny each is absolute). None when a scale is not finite
    (an overflowed magnitude says nothing) or the shapes do not match. ``terms``: a sum of that
    many terms, whose distribution over the elements is measured too (:mod:`lar_prec.compare.spread`,
    channels by ``opr_type``); ``partial_sums``: each element's bound on its partial sums
    (:func:`lar_prec.compare.spread.partial_sums_bound`, absolute), for its own sigma."""
    local, ref = _f64(local), _f64(ref)
    try:
        scale = np.broadcast_to(_f64(scale), ref.shape)
    except ValueError:
        return None
    if local.shape != ref.shape or not np.isfinite(scale).all():
        return None
    finite = np.isfinite(local) & np.isfinite(ref)
    signed = np.where(finite, local - ref, 0.0)
    diff = np.abs(signed)
    unit = EPS[dtype] * scale + TINY[dtype] * roundings
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(diff > 0, diff / unit, 0.0)  # diff > 0 over a unit of 0: inf
        metric_unit = unit / np.maximum(np.abs(ref), 1.0)
        weight = np.where(unit > 0, ref / unit, 0.0)
        norm2 = float(np.sum(weight * weight))
        # the least-squares relative scale of the difference, less what shared roundings allow
        factor = float(np.sum(np.where(unit > 0, signed / unit, 0.0) * weight)) / norm2 if norm2 > 0 else 0.0
        scale_units = max(0.0, abs(factor) - SHARED_ROUNDINGS * EPS[dtype]) * math.sqrt(norm2)
    units = float(ratio.max()) if ratio.size else 0.0
    # NaN or Inf on one side only (or different ones on both) is no rounding
    if np.any(~finite & ~((local == ref) | (np.isnan(local) & np.isnan(ref)))):
        units = math.inf
    unit_scale = float(metric_unit[finite].max()) if finite.any() else 0.0
    dist = None
    if terms is not None:
        valid = finite & (unit > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            units_signed = np.where(valid, signed / np.where(valid, unit, 1.0), 0.0)
            allow = np.where(valid, SHARED_ROUNDINGS * EPS[dtype] * ref / np.where(valid, unit, 1.0), 0.0)
            # two kernels' roundings of u = eps / 2, variance u^2 / 3 times the bound each
            sig = None if partial_sums is None else np.where(
                valid, np.sqrt(2.0 / 3.0 * _f64(partial_sums)) * (EPS[dtype] / 2.0) / np.where(valid, unit, 1.0), 0.0)
        dist = _spread(units_signed, ref, valid, allow, terms, channel_axis(opr_type, ref.ndim), sig)
    return Bound(units, unit_scale, dtype, kind, scale_units if math.isfinite(scale_units) else math.inf, dist)


def roundings(n: int) -> float:
    """How many roundings of a sum of ``n`` terms add up (as ``U`` counts them)."""
    return math.sqrt(max(n, 1)) + 1.0


def terms_scale(magnitude: "np.ndarray", k: int) -> "np.ndarray":
    """``U`` of a sum of ``k`` terms whose absolute values sum to ``magnitude``."""
    return roundings(k) * np.abs(_f64(magnitude))


def softmax_scale(x: "np.ndarray", y: "np.ndarray", axis: int) -> "np.ndarray":
    """``U`` of a Softmax of ``x`` over ``axis`` whose reference output is ``y``."""
    x, y = _f64(x), _f64(y)
    n = x.shape[axis]
    top = np.abs(np.max(x, axis=axis, keepdims=True))
    return (math.sqrt(n) + np.abs(x) + top + 1.0) * np.abs(y)


def _norm_stats(x: "np.ndarray", axis: int):
    axes = tuple(range(axis, x.ndim))
    n = int(np.prod([x.shape[a] for a in axes]))
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    mean_abs = np.abs(x).mean(axis=axes, keepdims=True)
    sq = (x * x).mean(axis=axes, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = 1.0 + math.sqrt(n) * (sq + mu * mu) / (2.0 * var)
    return n, mu, var, mean_abs, np.where(np.isfinite(r), r, np.inf)


def layernorm_scale(x: "np.ndarray", out: "np.ndarray", axis: int, which: int,
                    gamma: Optional["np.ndarray"] = None, beta: Optional["np.ndarray"] = None,
                    norm_eps: float = 1e-5) -> "np.ndarray":
    """``U`` of LayerNorm's output ``which`` (0: the normalised values, 1: the mean, 2: rstd) of
    ``x`` normalised over the axes from ``axis`` on; ``out`` is that output's reference value."""
    x, out = _f64(x), _f64(out)
    n, mu, var, mean_abs, r = _norm_stats(x, axis)
    rstd = 1.0 / np.sqrt(var + norm_eps)
    if which == 1:
        return ((math.sqrt(n) + 1.0) * mean_abs).reshape(out.shape)
    if which == 2:
        return (rstd * (r + 1.0)).reshape(out.shape)
    g = np.abs(_f64(gamma)) if gamma is not None else 1.0
    b = np.abs(_f64(beta)) if beta is not None else 0.0
    inner = math.sqrt(n) * mean_abs + np.abs(x) + np.abs(mu) + np.abs(x - mu) * r
    return g * rstd * inner + b + np.abs(out)


def same_shape(a: "np.ndarray", shape: Sequence[int]) -> bool:
    """Whether ``a`` has exactly ``shape``."""
    return tuple(np.shape(a)) == tuple(shape)


def coordinate_extent(opr_type: str, in_shape: Sequence[int], out_shape: Sequence[int],
                      others: Sequence[Optional["np.ndarray"]]) -> Optional[float]:
    """How large the sample coordinates of an interpolation (NCHW ``in_shape`` to ``out_shape``)
    and their terms are: one rounding of a coordinate is ``eps`` times this. Resize: the largest
    side; warps: ``sum |m_k p_k|`` of the matrix rows at the output's corners (plus the
    coordinate times the denominator's terms, over the denominator); remap: the largest map
    value; ROIAlign: the largest box coordinate. None when a matrix or map is missing."""
    sides = max(int(d) for d in (*in_shape[2:], *out_shape[2:])) if len(in_shape) > 2 else 1
    if opr_type == "ResizeForward":
        return float(sides)
    mat = others[0] if others else None
    if mat is None:
        return None
    mat = _f64(mat)
    if opr_type == "RemapForward":
        return float(np.max(np.abs(mat))) + 1.0 if mat.size else None
    if opr_type == "ROIAlignForward":
        return float(np.max(np.abs(mat[..., 1:]))) + sides if mat.size else None
    if opr_type not in ("WarpAffineForward", "WarpPerspectiveForward") or mat.ndim != 3 or mat.shape[-1] != 3:
        return None
    oh, ow = (int(out_shape[2]), int(out_shape[3])) if len(out_shape) == 4 else (sides, sides)
    corners = np.array([[u, v, 1.0] for u in (0.0, ow - 1.0) for v in (0.0, oh - 1.0)])  # (4, 3)
    terms = np.abs(mat[:, :2, None, :]) * np.abs(corners[None, None])  # (N, 2, 4, 3)
    num = terms.sum(-1)  # (N, 2, 4)
    if mat.shape[1] == 3:  # perspective: divided by the third row
        den = np.abs(np.einsum("nk,ck->nc", mat[:, 2], corners))[:, None]
        den_terms = (np.abs(mat[:, 2, None, :]) * corners[None]).sum(-1)[:, None]
        coord = np.abs(np.einsum("nik,ck->nic", mat[:, :2], corners)) / np.maximum(den, TINY["float32"])
        num = (num + coord * den_terms) / np.maximum(den, TINY["float32"])
    got = float(np.max(num)) if num.size else None
    return got if got is not None and math.isfinite(got) else None


def interpolation_scale(x: "np.ndarray", magnitude: "np.ndarray", extent: float) -> "np.ndarray":
    """``U`` of a bilinear interpolation of NCHW ``x`` whose twin on ``|x|`` is ``magnitude``:
    the sum of its 4 weighted terms, and a rounding of each sample coordinate (``eps * extent``)
    moving the weights of the element's 4 neighbours, at most ``4 * extent`` times the largest
    ``|x|`` of its plane."""
    plane = np.max(np.abs(_f64(x)), axis=(2, 3), keepdims=True)  # (N, C, 1, 1)
    mag = np.abs(_f64(magnitude))
    if plane.shape[0] != mag.shape[0] or plane.shape[1] != mag.shape[1]:
        plane = np.max(plane, axis=0, keepdims=True)  # another batch (a warp's matrix index): the largest
        if plane.shape[1] != mag.shape[1]:
            plane = np.max(plane, keepdims=True)
    return roundings(4) * mag + 4.0 * extent * plane
