"""The distribution of an operator's local difference over its elements, in rounding units (issue 57).

The worst-element test (:mod:`lar_prec.compare.bounds`) holds one element to ``TERMS_C`` units of
the worst case; a kernel that is off at *every* element by a little (a weight off by 5e-6, a
channel mis-scaled) stays under it. These statistics look at the whole output, each element's
signed difference ``r_i = (local_i - reference_i) / unit_i`` in its own rounding units:

* ``units_rms``: sqrt(mean r_i^2);
* ``frac_above``: the fraction of elements with ``|r_i| > 1``;
* the channel test: ``chi2 = sum_c n_c m_c^2 / sigma^2`` over output channels ``c``, ``m_c`` the
  mean signed difference of channel ``c`` (rounding has none; a biased or mis-scaled channel has).

The limits come from the rounding model, never from cases: a sum of ``K`` terms is ``K``
roundings of partial sums (each at most ``T = sum |terms|``, the error of one uniform within
``u = eps / 2`` of it: variance ``u^2 T^2 / 3``) and one of its products together (at most ``u^2 T^2 /
3``); two kernels round independently, so an element's difference has zero mean and variance at
most ``2 (K + 1) u^2 T^2 / 3``, in units of ``eps (sqrt(K) + 1) T``: ``sigma^2 = (K + 1) / (6 (sqrt(K) +
1)^2)`` (:func:`sigma`, 0.29 for K = 1, below 1/sqrt(6) = 0.41 for any K). A sum of bounded
zero-mean roundings is sub-Gaussian with that variance, so over ``n`` independent elements
(Laurent & Massart 2000, tail ``e^-TAIL``): ``n rms^2 / sigma^2 <= n + 2 sqrt(n TAIL) + 2 TAIL``;
``chi2 <= C + 2 sqrt(C TAIL) + 2 TAIL`` for ``C`` channels; ``P(|r| > 1) <= p = 2 exp(-1 / (2 sigma^2))``
and the count above one unit ``<= n p + sqrt(2 n p TAIL) + 2 TAIL / 3`` (Bernstein). Each limit
thus holds the statistic's own sampling spread for its ``n``.

Elements are independent only where their inputs differ: equal inputs give equal roundings (a
flat region of an image, a broadcast row). So within a channel an element whose reference value
repeats is counted once (:func:`spread`). Roundings every element shares (a rounded ``1/K``,
``SHARED_ROUNDINGS`` eps of relative scale, as the scale test allows) may bias a channel: each
channel's mean is first moved towards 0 by that scale's mean effect on it.

Where the operator's terms are known (a matrix product whose output times ``K`` is at most
:data:`TERMS_BUDGET`: :func:`matmul_partial_sums`), each element gets its own, tighter standard
deviation from the same model: a partial sum of ``k`` of its terms, in any order, is at most
``F(k) = max(P_k, N_k)`` (``P_k`` the sum of its ``k`` largest positive terms, ``N_k`` of its ``k``
largest negative ones, in magnitude), and any summation tree of ``K`` terms has at most ``K - k + 1``
additions of ``k`` or more terms (the sequential sum has exactly that), so one kernel's rounding
variance is at most ``u^2 / 3 (sum_{k=2..K} F(k)^2 + sum t_j^2)`` (the products' own roundings
last), which never exceeds ``u^2 / 3 (K + 1) T^2``. Each element's difference is divided by its own
``sigma_i`` (the smaller of the two); the tests are sums of those squares. That is what tells a
weight off by 2e-6 in a small layer (512 outputs) from rounding: terms of both signs keep
partial sums well under ``T``. Numpy only; float64 throughout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from lar_prec._lazy import numpy as np

#: each limit's tail probability is e^-TAIL (2e-9): with thousands of operators per model and
#: hundreds of models, a correct operator crosses one about once in 10^5 analyses
TAIL = 20.0
#: the tests, as a root names them
WORST, RMS, CHANNEL, ABOVE = "worst_element", "rms", "channel_mean", "above_one_unit"
#: the most terms (output elements times K) whose partial sums are bounded one by one
#: (:func:`matmul_partial_sums`): 2^18, ~0.1 s of sorting at most (vit: 2% of its local error,
#: 6% with 2^21); a larger output's n gives its tests power with sigma(K) (``Spread.detectable``)
TERMS_BUDGET = 1 << 18


def sigma(k: int) -> float:
    """The standard deviation, in rounding units, of two correct kernels' difference at one
    element of a sum of ``k`` terms (module docstring)."""
    k = max(int(k), 1)
    return math.sqrt((k + 1) / 6.0) / (math.sqrt(k) + 1.0)


def chi2_limit(dof: int, tail: float = TAIL) -> float:
    """The ``e^-tail`` quantile bound of a sum of ``dof`` squared unit sub-Gaussians."""
    return dof + 2.0 * math.sqrt(dof * tail) + 2.0 * tail


def partial_sums_bound(terms: "np.ndarray") -> "np.ndarray":
    """Per row of ``terms`` (``(n, K)``, float64): ``sum_{k=2..K} F(k)^2 + sum t^2`` (module
    docstring), what one kernel's rounding variance is at most in units of ``u^2 / 3``."""
    # one sort, in float32 (2^-24 relative, far inside the bound's own slack), summed in float64:
    # the most negative terms first, the largest positive ones last
    t32 = np.sort(terms.astype(np.float32), axis=1)
    neg = np.cumsum(-np.minimum(t32, 0.0), axis=1, dtype=np.float64)
    pos = np.cumsum(np.maximum(t32, 0.0)[:, ::-1], axis=1, dtype=np.float64)
    f = np.maximum(pos, neg)
    return np.sum(f[:, 1:] ** 2, axis=1) + np.sum(terms * terms, axis=1)


def matmul_partial_sums(a: "np.ndarray", b: "np.ndarray", want: "np.ndarray") -> Optional["np.ndarray"]:
    """:func:`partial_sums_bound` of each element of the matrix product ``want`` of ``a`` and ``b``
    (their last two axes, batched over the others), either transposed as the product nearest
    ``want`` says; None when no arrangement gives ``want``'s shape or the terms exceed
    :data:`TERMS_BUDGET`."""
    a64, b64, want = (np.asarray(x, dtype=np.float64) for x in (a, b, want))
    if a64.ndim < 2 or b64.ndim < 2:
        return None
    best = None
    for ta in (False, True):
        for tb in (False, True):
            x = np.swapaxes(a64, -1, -2) if ta else a64
            y = np.swapaxes(b64, -1, -2) if tb else b64
            if x.shape[-1] != y.shape[-2]:
                continue
            try:
                exact = x @ y
            except ValueError:
                continue
            if exact.shape != want.shape or want.size * x.shape[-1] > TERMS_BUDGET:
                continue
            err = float(np.max(np.abs(exact - want))) if want.size else 0.0
            if best is None or err < best[0]:
                best = (err, x, y)
    if best is None or not want.size:
        return None
    _, x, y = best
    x, y = np.broadcast_to(x, want.shape[:-2] + x.shape[-2:]), np.broadcast_to(y, want.shape[:-2] + y.shape[-2:])
    terms = x[..., :, :, None] * y[..., None, :, :]  # (..., M, K, N)
    k = x.shape[-1]
    return partial_sums_bound(np.moveaxis(terms, -2, -1).reshape(-1, k)).reshape(want.shape)


@dataclass(frozen=True)
class Spread:
    """The distribution of one operator's local difference over its (distinct) elements."""

    #: distinct elements counted (per channel, an element whose reference value repeats once)
    n: int
    #: the model's per-element standard deviation: :func:`sigma` of the operator's K, or the
    #: largest of the elements' own where their terms were known (``per_element``)
    sigma: float
    units_rms: float
    #: fraction of the counted elements above one rounding unit
    frac_above: float
    channels: int
    #: the channel test's chi2 (``sum_c (sum_i r_i)^2 / sum_i sigma_i^2``, means less shared roundings)
    channel_sum: float
    #: the channel whose mean is farthest from 0 (in its own standard deviations), and that mean
    worst_channel: int
    worst_channel_mean: float
    worst_channel_n: int
    #: ``sum r_i^2 / sigma_i^2``: the RMS test's chi2
    rms_chi2: float = 0.0
    #: each element's own sigma from its terms (:func:`matmul_partial_sums`), else :func:`sigma`
    per_element: bool = False
    #: the operator's K (terms per element)
    k: int = 1

    def detectable(self, eps: float, factor: float = 1.0) -> float:
        """The smallest relative fault of its weights (each times ``1 + f u``, ``u ~ U[-1, 1]``) that
        the RMS test expects to find, computed for the worst case of ``K`` equal terms (unequal
        ones make a fault stand out more): element ``i`` moves by ``f sum t_j u_j``, variance
        ``f^2 T^2 / (3 K)``, ``T / (eps (sqrt(K) + 1))`` units' worth; found when ``n`` of them
        lift the RMS chi2 past ``chi2_limit(n)``: ``f = eps (sqrt(K) + 1) sigma sqrt(3 K (chi2_limit(n) - n) / n)``.
        Six outputs of 128 terms: 3.5e-5; 512 of them 7.5e-6, of 32 terms 1.9e-6 (with :func:`sigma`)."""
        n = max(self.n, 1)
        k = max(self.k, 1)
        return eps * (math.sqrt(k) + 1.0) * self.sigma * factor * math.sqrt(3.0 * k * (chi2_limit(n) - n) / n)

    def limits(self, factor: float = 1.0) -> "SpreadLimits":
        """Each test's value and limit with the model's sigma widened by ``factor`` (an algorithm
        that rounds more, such as Winograd's transforms)."""
        s = self.sigma * factor
        n = max(self.n, 1)
        f2 = factor * factor
        chi2_n = self.rms_chi2 / f2 if f2 > 0 else math.inf
        # the RMS limit where its chi2 would meet chi2_limit(n): sigma sqrt(limit / n) for one sigma
        rms_limit = self.units_rms * math.sqrt(chi2_limit(n) / chi2_n) if chi2_n > 0 and math.isfinite(chi2_n) \
            else s * math.sqrt(chi2_limit(n) / n)
        # the largest sigma bounds every element's chance to be above one unit
        p = min(1.0, 2.0 * math.exp(-1.0 / (2.0 * s * s))) if s > 0 else 0.0
        above_limit = min(1.0, (n * p + math.sqrt(2.0 * n * p * TAIL) + 2.0 * TAIL / 3.0) / n)
        chi2 = self.channel_sum / f2 if f2 > 0 else math.inf
        return SpreadLimits(self.units_rms, rms_limit, self.frac_above, above_limit, chi2,
                            chi2_limit(max(self.channels, 1)))

    def to_json(self, factor: float = 1.0) -> dict:
        lim = self.limits(factor)
        return {"n": self.n, "sigma": self.sigma * factor, "sigma_per_element": self.per_element,
                "units_rms": lim.rms, "rms_limit": lim.rms_limit,
                "frac_above_one": lim.above, "frac_above_one_limit": lim.above_limit, "channels": self.channels,
                "channel_chi2": lim.chi2, "channel_chi2_limit": lim.chi2_limit, "worst_channel": self.worst_channel,
                "worst_channel_mean": self.worst_channel_mean, "worst_channel_n": self.worst_channel_n,
                "failed": list(lim.failed())}


@dataclass(frozen=True)
class SpreadLimits:
    """Each distribution test's value beside its limit."""

    rms: float
    rms_limit: float
    above: float
    above_limit: float
    chi2: float
    chi2_limit: float

    def failed(self) -> Tuple[str, ...]:
        """The tests whose value is over its limit (:data:`RMS`, :data:`CHANNEL`, :data:`ABOVE`)."""
        out = []
        if self.rms > self.rms_limit:
            out.append(RMS)
        if self.chi2 > self.chi2_limit:
            out.append(CHANNEL)
        if self.above > self.above_limit:
            out.append(ABOVE)
        return tuple(out)

    def margin(self) -> float:
        """How far the most failed test is over its limit (a ratio of standard deviations: the
        rms's, the chi2's square root), 0 when none fails."""
        ratios = [self.rms / self.rms_limit if self.rms_limit > 0 else 0.0,
                  math.sqrt(self.chi2 / self.chi2_limit) if self.chi2_limit > 0 and math.isfinite(self.chi2) else
                  (math.inf if self.chi2 > 0 else 0.0),
                  self.above / self.above_limit if self.above_limit > 0 else 0.0]
        over = [r for r in ratios if r > 1.0]
        return max(over) if over else 0.0


def channel_axis(opr_type: str, ndim: int) -> Optional[int]:
    """The output axis whose index is an output channel: the last of a matrix product's, the
    second of an NCHW output; None for a scalar."""
    if ndim == 0:
        return None
    if opr_type in ("MatrixMul", "BatchedMatrixMul", "Dot") or ndim < 3:
        return ndim - 1
    return 1


def spread(signed_units: "np.ndarray", ref: "np.ndarray", valid: "np.ndarray", allow: "np.ndarray", k: int,
           axis: Optional[int], sig: Optional["np.ndarray"] = None) -> Optional[Spread]:
    """:class:`Spread` of an output whose element ``i`` differs by ``signed_units[i]`` rounding units
    (``valid`` where that is a rounding difference: finite, a unit > 0), reference ``ref``,
    shared-rounding allowance ``allow[i]`` (``SHARED_ROUNDINGS eps y_i / unit_i``, signed), a sum of
    ``k`` terms, channels along ``axis``; ``sig``: each element's own standard deviation in units
    (from its terms), else :func:`sigma` of ``k`` for all. None when no element counts."""
    s_k = sigma(k)
    per_element = sig is not None
    if per_element:  # an element whose terms overflowed or were not finite keeps sigma(K)
        sig = np.broadcast_to(np.asarray(sig, dtype=np.float64), ref.shape)
        sig = np.where(np.isfinite(sig), np.minimum(sig, s_k), s_k)
    else:
        sig = np.full(ref.shape, s_k)
    if axis is None:
        signed_units, ref, valid, allow, sig = (a.reshape(1, -1) for a in (signed_units, ref, valid, allow, sig))
    else:
        signed_units, ref, valid, allow, sig = (np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)
                                                for a in (signed_units, ref, valid, allow, sig))
    # invalid ones sort last and are not counted; the keys in float32 (what dumps hold: exact),
    # sorted by quicksort (any one of equal values may stand for them): 5x faster than stable float64
    rv = np.where(valid, ref, np.inf).astype(np.float32)
    order = np.argsort(rv, axis=1)
    ref_s = np.take_along_axis(rv, order, axis=1)
    first = np.isfinite(ref_s)
    if ref_s.shape[1] > 1:
        first[:, 1:] &= ref_s[:, 1:] != ref_s[:, :-1]
    keep = np.empty_like(first)
    np.put_along_axis(keep, order, first, axis=1)  # back in the elements' own order
    keep &= sig > 0  # an element no rounding can move (all terms 0) holds no information here
    r_s, a_s = np.where(valid, signed_units, 0.0), np.where(valid, allow, 0.0)
    counts = keep.sum(axis=1)
    n = int(counts.sum())
    if n == 0:
        return None
    r_k = np.where(keep, r_s, 0.0)
    var_k = np.where(keep, sig * sig, 0.0)
    sums = r_k.sum(axis=1)
    var_c = var_k.sum(axis=1)
    # a shared relative rounding s biases element i by s y_i / unit_i: the channel's sum by s
    # times the sum of y_i / unit_i (signed: it cancels where the outputs do)
    shared = np.abs(np.where(keep, a_s, 0.0).sum(axis=1))
    sums = np.sign(sums) * np.maximum(np.abs(sums) - shared, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z2 = np.where(var_c > 0, sums * sums / np.where(var_c > 0, var_c, 1.0), 0.0)
        means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        rms_chi2 = float(np.sum(np.where(keep, r_k * r_k / np.where(keep, sig * sig, 1.0), 0.0)))
    worst = int(np.argmax(z2))
    sumsq = float(np.sum(r_k * r_k))
    above = float(np.sum(keep & (np.abs(r_s) > 1.0)))
    largest = float(np.max(np.where(keep, sig, 0.0)))
    return Spread(n, largest, math.sqrt(sumsq / n), above / n, int(np.count_nonzero(counts)), float(z2.sum()),
                  worst, float(means[worst]), int(counts[worst]), rms_chi2, per_element, max(int(k), 1))
