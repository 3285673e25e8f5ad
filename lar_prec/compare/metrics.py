"""What every metric of a var means: one readable, whole-array definition each.

These are the reference. The streaming engine (:mod:`lar_prec.compare.engine.scan`: chunks, the C kernel,
mapped reads, worker processes) computes the same numbers without holding a var in memory,
and tests/test_metrics.py checks it against these functions (hypothesis + real dumps):
maxima, indices, ulps and counts bit for bit, sums to float rounding.

All metrics go over the positions that are finite on both sides (:func:`finite_pairs`);
NaN at the same place (and the same infinity) is equal, any other NaN/Inf difference is
counted by :func:`n_nonfinite` and makes the var ``nonfinite``.

=============  ========================================================================
metric         meaning
=============  ========================================================================
max_err        MegEngine's error, ``max |a-b| / max(|a|, |b|, 1)``, computed in float32
               exactly as ``compare_binary_iodump`` (:func:`megengine_err`); an absolute
               error below 1, a relative one above
worst_index    first position (C order) holding ``max_err``; worst_a/worst_b its values
max_abs_err    ``max |a-b|`` (float64 of the float32 values: exact)
max_rel_err    ``max |a-b| / max(|a|, |b|)``, symmetric; positions where both are 0 skipped
mean_abs_err   ``sum |a-b| / n``, summed in float64
rmse           ``sqrt(d.d / n)``, d = a - b, float64 sums
cosine         ``a.b / (|a| |b|)`` from the float64 sums a.a, a.d, d.d
               (b.b = a.a - 2 a.d + d.d), None when a or b is all zeros
max_ulp        largest distance in units in the last place (float dtypes; -0 == +0)
scale          ``max max(|a|, |b|)``, what the auto threshold scales by
n_over(t)      elements whose float32 ``max_err`` is above ``t``
n_diff         elements that differ at all
n_nonfinite    positions NaN/Inf on one side only, or NaN vs Inf, or +Inf vs -Inf
=============  ========================================================================

The float64 accumulation is one definition too: :func:`sums` (a.a, a.d, d.d, sum|d|) of
float64 copies of the float32 values, where products of float32 are exact; the engine's
numpy path calls it per chunk, the C kernel does the same arithmetic in four lanes.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)


def megengine_err(a: "np.ndarray", b: "np.ndarray") -> "np.ndarray":
    """Element-wise ``|a-b| / max(|a|, |b|, 1)`` in float32, as compare_binary_iodump
    computes it (values cast to float32 first). NaN where a value is NaN."""
    v0 = np.ascontiguousarray(a, dtype=np.float32)
    v1 = np.ascontiguousarray(b, dtype=np.float32)
    with np.errstate(all="ignore"):
        vdiv = np.maximum(np.maximum(np.abs(v0), np.abs(v1)), np.float32(1))
        return np.abs(v0 - v1) / vdiv


def max_megengine_err(a: "np.ndarray", b: "np.ndarray") -> float:
    """The largest :func:`megengine_err` of two whole tensors (one var's ``max_err``).

    NaN/Inf in the same place on both sides is no difference; a NaN/Inf on one side only (or a
    different one) makes it ``inf`` (compare's ``nonfinite``). Float values of up to 32 bits are
    compared in float32, as compare_binary_iodump does; wider values and integers in float64,
    so that two different large integers never round to the same float."""
    a = np.asarray(a).ravel()
    b = np.asarray(b).ravel()
    narrow = a.dtype.kind == "f" and b.dtype.kind == "f" and max(a.dtype.itemsize, b.dtype.itemsize) <= 4
    a = a.astype(np.float32 if narrow else np.float64, copy=False)
    b = b.astype(np.float32 if narrow else np.float64, copy=False)
    if a.size == 0:
        return 0.0
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    if not both.all():
        same = ~fa & ~fb & ((a == b) | (np.isnan(a) & np.isnan(b)))
        if not (both | same).all():
            return math.inf
        a, b = a[both], b[both]
        if a.size == 0:
            return 0.0
    if narrow:
        return float(megengine_err(a, b).max())
    return float((np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1.0)).max())


def megengine_err_into(a: "np.ndarray", b: "np.ndarray", m: "np.ndarray", d: "np.ndarray", out: "np.ndarray",
                       signed: "Optional[np.ndarray]" = None, rel: bool = False) -> Tuple["np.ndarray", Optional[float]]:
    """:func:`megengine_err` of float32 ``a``/``b`` into preallocated float32 buffers, the
    engine's numpy form: ``fmin(d/m, d)`` is ``d/m`` where ``m >= 1`` and ``d`` where ``m < 1``
    (there ``d/m >= d``), bit for bit the same float32 numbers. Leaves ``m = max(|a|,|b|)``,
    ``d = |a-b|`` and ``out`` = the error; ``signed`` (any float dtype) gets ``a-b`` on the
    way, and with ``rel`` the largest ``d/m`` (max_rel_err, NaN where both are 0 skipped) is
    returned too. Callers hold np.errstate(all="ignore")."""
    np.abs(a, out=m)
    np.abs(b, out=out)
    np.maximum(m, out, out=m)
    np.subtract(a, b, out=d)  # exact for close values (Sterbenz)
    if signed is not None:
        np.copyto(signed, d)
    np.abs(d, out=d)
    np.divide(d, m, out=out)  # 0/0 -> NaN where both are 0, which fmax and fmin skip
    r = float(np.fmax.reduce(out)) if rel else None
    np.fmin(out, d, out=out)
    return out, r


def sum_squares(a64: "np.ndarray") -> float:
    """``a.a`` of float64 values (einsum, not dot: OpenBLAS runs float64 dots on extra
    threads that then spin)."""
    return float(np.einsum("i,i->", a64, a64))


def sums(a64: "np.ndarray", b64: "np.ndarray", d64: "np.ndarray",
         absd: "Optional[np.ndarray]" = None) -> Tuple[float, float, float, float, float]:
    """The float64 sums every path accumulates: (a.a, a.b, b.b, d.d, sum |d|), ``d = a - b``
    (``absd``: ``|d|`` when the caller has it, in any float dtype; summed in float64).

    Each is summed directly: b.b taken as a.a - 2 a.d + d.d cancels to 0 (or below) when b is
    small next to a, and d.d as a.a - 2 a.b + b.b when b is close to a."""
    if absd is None:
        absd = np.abs(d64)
    return (sum_squares(a64), float(np.einsum("i,i->", a64, b64)), sum_squares(b64), sum_squares(d64),
            float(np.add.reduce(absd, dtype=np.float64)))


def cosine_from_sums(aa: float, ab: float, bb: float) -> Optional[float]:
    """``a.b / (|a| |b|)`` from a.a, a.b, b.b (clamped to [-1, 1]); None when a or b is 0."""
    if aa > 0 and bb > 0:
        return max(-1.0, min(1.0, ab / math.sqrt(aa * bb)))
    return None


def finite_pairs(a: "np.ndarray", b: "np.ndarray") -> "np.ndarray":
    """Mask of the positions finite on both sides (the ones every metric goes over)."""
    return np.isfinite(a) & np.isfinite(b)


def n_nonfinite(a: "np.ndarray", b: "np.ndarray") -> int:
    """Positions NaN/Inf on one side only, or a different NaN/Inf on each side."""
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    return int(np.count_nonzero(~finite_pairs(a, b) & ~same))


def ulp_distance(a: "np.ndarray", b: "np.ndarray") -> "np.ndarray":
    """Element-wise distance in units in the last place of float32 (or float16) values,
    through zero for opposite signs, -0 and +0 0 apart."""
    bits = np.int32 if a.dtype == np.float32 else np.int16
    mag = 0x7FFFFFFF if bits == np.int32 else 0x7FFF
    ia = np.ascontiguousarray(a).view(bits).astype(np.int64)
    ib = np.ascontiguousarray(b).view(bits).astype(np.int64)
    oa = np.where(ia < 0, -(ia & mag), ia)
    ob = np.where(ib < 0, -(ib & mag), ib)
    return np.abs(oa - ob)


def reference(a: "np.ndarray", b: "np.ndarray", threshold: Optional[float] = None, ulp: bool = True) -> Dict[str, object]:
    """Every metric of two whole arrays of one float dtype (float32, float16, or BFloat16
    already widened to float32), as defined in this module's table.

    Returns a dict keyed like :class:`~lar_prec.compare.VarDiff`'s fields (plus
    ``n_over``/``n_diff`` when ``threshold`` is given); error metrics are None when no
    position is finite on both sides.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    shape = a.shape
    fin = finite_pairs(a, b).ravel()
    out: Dict[str, object] = {"n_nonfinite": n_nonfinite(a, b), "size": int(a.size)}
    idx = np.flatnonzero(fin)
    if idx.size == 0:
        return out
    x, y = a.ravel()[idx], b.ravel()[idx]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    d64 = x64 - y64
    ad64 = np.abs(d64)
    m64 = np.maximum(np.abs(x64), np.abs(y64))
    err = megengine_err(x, y).astype(np.float64)
    # float32 overflow of |a-b| (values near FLT_MAX): the float64 error there
    err = np.where(np.isfinite(err), err, ad64 / np.maximum(m64, 1.0))
    k = int(err.argmax())
    aa, ab, bb, dd, sabs = sums(x64, y64, d64)
    n = idx.size
    with np.errstate(all="ignore"):
        rel = ad64 / m64
    out.update(
        max_err=float(err[k]),
        worst_index=tuple(int(i) for i in np.unravel_index(int(idx[k]), shape)) if shape else (),
        worst_a=float(x64[k]), worst_b=float(y64[k]),
        max_abs_err=float(ad64.max()),
        max_rel_err=float(np.fmax.reduce(rel)) if not np.isnan(rel).all() else 0.0,
        mean_abs_err=sabs / n, rmse=math.sqrt(dd / n),
        cosine=cosine_from_sums(aa, ab, bb),
        scale=float(m64.max()),
    )
    if ulp and a.dtype in (np.float32, np.float16):
        out["max_ulp"] = int(ulp_distance(x, y).max())
    if threshold is not None:
        out["n_over"] = int(np.count_nonzero(err > float(np.float32(threshold))))
        out["n_diff"] = int(np.count_nonzero(d64))
    return out
