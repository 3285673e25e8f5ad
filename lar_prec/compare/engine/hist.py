"""The error histogram of a var: quantiles of its error in bounded memory (issue 40 #1).

An exact quantile of a stream needs the whole stream; a histogram of fixed log-spaced bins
needs 66 KB per var (while it is compared) and gives every quantile to a known relative
precision. A value is counted in the bin of its float32 bits >> 19: the exponent and the top
:data:`SUB_BITS` mantissa bits, so :data:`PER_OCTAVE` bins per power of two, each at most 1/16
wide relative to its lower edge (HDR histograms bin the same way). Bins span
``[2**-64, 2**64)``; bin 0 holds exact zeros, bin 1 everything below ``2**-64``, the last bin
everything from ``2**64``.

What is counted: MegEngine's error ``e`` of each element (max_err's metric: ``d = |a-b|`` where
``m = max(|a|,|b|) < 1``, ``q = d / m`` where ``m >= 1``), always; with ``full`` (``compare
--stats``) the relative error ``q`` (0 where a = b) and the absolute error ``d`` of every
element apart. Layout, :data:`LEN` int64: four rows of :data:`NB` counts
``[rel small, rel big, abs small, abs big]`` ("small": ``m < 1``), then four slots: the lowest
and highest bin >= 1 touched in the rel rows and in the abs rows (empty: lo ``NB``, hi 0).
MegEngine's error of an element is its q where big and its d where small, so its histogram is
rows (rel big) + (abs small): alone (one count per element, in the metrics' own loop) it fills
only those two rows; ``full`` fills all four (two counts per element, a loop of their own:
about twice the kernel's time, which is why it is asked for).

A **quantile** ``p`` is the ``ceil(p * n)``-th smallest value, reported as the upper edge of
its bin, and never above the exact maximum: never below the exact quantile, at most 6.25%
above it (below ``2**-64``: ``2**-64``). p50, p90, p99 and p99.9 use exact fractions.

The C kernel (``_kernel.c``: the loops, ``hist_stats``, ``hist_add``) counts and reads
histograms; :func:`add_chunk`, :func:`stats_np` and :func:`add_np` here are its numpy twins,
for the numpy path (tests/compare/test_stats.py holds them to each other).
"""
from __future__ import annotations

import math
from array import array
from typing import List, Optional, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

#: mantissa bits per bin: 2**SUB_BITS bins per power of two
SUB_BITS = 4
PER_OCTAVE = 1 << SUB_BITS
#: float bits >> (23 - SUB_BITS) of 2**-64 and 2**64
LO = (127 - 64) << SUB_BITS
HI = (127 + 64) << SUB_BITS
#: bins per row: zero, below 2**-64, the regular bins, from 2**64
NB = HI - LO + 3
#: int64 per histogram: four rows and four range slots
LEN = 4 * NB + 4
#: the relative precision of a reported quantile (its bin's width over its lower edge)
PRECISION = 1.0 / PER_OCTAVE
#: the quantiles every float var reports, as exact fractions (num, den)
QUANTILES = ((1, 2), (9, 10), (99, 100), (999, 1000))
#: their JSON key suffixes
Q_NAMES = ("p50", "p90", "p99", "p999")
#: the VarDiff fields :func:`stats` gives, in order: MegEngine's error's quantiles and the pass
#: threshold (always), the relative and absolute error's quantiles (``full``, else None)
STAT_FIELDS = (tuple(f"err_{q}" for q in Q_NAMES) + ("pass_threshold",) + tuple(f"rel_err_{q}" for q in Q_NAMES)
               + tuple(f"abs_err_{q}" for q in Q_NAMES))

Stats = Tuple[Optional[float], ...]


def new() -> "array":
    """An empty histogram (``LEN`` int64, a buffer the kernel writes into)."""
    h = array("q", bytes(8 * LEN))
    h[4 * NB] = h[4 * NB + 2] = NB
    return h


def add(dst: "array", src: "array", k: Optional[object]) -> None:
    """Add histogram ``src`` into ``dst`` (counts summed, ranges widened), by the C kernel ``k``
    (None: numpy)."""
    if k is not None:
        k.hist_add(dst, src)  # type: ignore[attr-defined]
    else:
        add_np(dst, src)


def add_np(dst: "array", src: "array") -> None:
    """:func:`add` in numpy."""
    d = np.frombuffer(memoryview(dst).cast("B"), np.int64)
    s = np.frombuffer(memoryview(src).cast("B"), np.int64)
    d[: 4 * NB] += s[: 4 * NB]
    d[4 * NB :: 2] = np.minimum(d[4 * NB :: 2], s[4 * NB :: 2])
    d[4 * NB + 1 :: 2] = np.maximum(d[4 * NB + 1 :: 2], s[4 * NB + 1 :: 2])


def stats(h: "array", n: int, ratio: float, full: bool, max_rel: float, max_abs: float, max_err: float,
          k: Optional[object]) -> Stats:
    """The :data:`STAT_FIELDS` of histogram ``h`` of ``n`` values whose exact maxima are given:
    the pass threshold is MegEngine's error at ``ratio`` (``ceil(ratio * n)``-th smallest). By
    the C kernel ``k`` (None: numpy)."""
    if k is not None:
        return k.hist_stats(h, n, ratio, full, max_rel, max_abs, max_err)  # type: ignore[attr-defined,no-any-return]
    return stats_np(h, n, ratio, full, max_rel, max_abs, max_err)


def _bins(bits: "np.ndarray") -> "np.ndarray":
    """Bin of each non-negative float32 (as int32 bits): the kernel's hist_bin1."""
    b = bits >> (23 - SUB_BITS)
    np.clip(b, LO - 1, HI, out=b)
    b -= LO - 2
    b[bits == 0] = 0
    return b


def _widen(v: "np.ndarray", slot: int, bins: "np.ndarray") -> None:
    pos = bins[bins > 0]
    if pos.size:
        v[slot] = min(int(v[slot]), int(pos.min()))
        v[slot + 1] = max(int(v[slot + 1]), int(pos.max()))


def add_chunk(h: "array", a: "np.ndarray", b: "np.ndarray", full: bool) -> None:
    """Count float32 values ``a``/``b`` (finite) into histogram ``h``, as the kernel does:
    MegEngine's error, or with ``full`` the relative and the absolute error."""
    if a.size == 0:
        return
    with np.errstate(all="ignore"):
        d = np.abs(np.subtract(a, b, dtype=np.float32))
        m = np.maximum(np.abs(a), np.abs(b))
        q = d / m
    v = np.frombuffer(memoryview(h).cast("B"), np.int64)
    big = m >= 1
    if not full:
        # the kernel's loop: the error's bins, in rel big or abs small; one range for both rows
        be = _bins(np.where(big, q, d).view(np.int32).copy())
        v[: 4 * NB] += np.bincount(be + np.where(big, NB, 2 * NB), minlength=4 * NB)
        _widen(v, 4 * NB, be)
        _widen(v, 4 * NB + 2, be)
        return
    bq = _bins(q.view(np.int32).copy())
    bq[d == 0] = 0
    bd = _bins(d.view(np.int32).copy())
    off = np.where(big, NB, 0)
    v[: 2 * NB] += np.bincount(bq + off, minlength=2 * NB)
    v[2 * NB : 4 * NB] += np.bincount(bd + off, minlength=2 * NB)
    _widen(v, 4 * NB, bq)
    _widen(v, 4 * NB + 2, bd)


def add_zeros(h: "array", n: int) -> None:
    """Count ``n`` values with no error (identical chunks)."""
    h[0] += n
    h[2 * NB] += n


def edge(j: int) -> float:
    """The upper edge of bin ``j``: every value in it is below this."""
    if j == 0:
        return 0.0
    if j >= NB - 1:
        return math.inf
    return float(np.array([(j + LO - 1) << (23 - SUB_BITS)], np.int32).view(np.float32)[0])


def _kth(c: "np.ndarray", lo: int, hi: int, k: int, top: float) -> float:
    """The k-th smallest of counts ``c`` (one row: bin 0, then bins lo..hi), clamped to top."""
    if c[0] >= k:
        return 0.0
    if hi < lo:
        return top
    cum = np.cumsum(c[lo : hi + 1]) + c[0]
    j = int(np.searchsorted(cum, k))
    return top if j > hi - lo else min(edge(lo + j), top)


def stats_np(h: "array", n: int, ratio: float, full: bool, max_rel: float, max_abs: float, max_err: float) -> Stats:
    """:func:`stats` in numpy."""
    v = np.frombuffer(memoryview(h).cast("B"), np.int64)
    rows = v[: 4 * NB].reshape(4, NB)
    rlo, rhi, alo, ahi = (int(x) for x in v[4 * NB :])
    ranks = [(num * n + den - 1) // den for num, den in QUANTILES]
    err, elo, ehi = rows[1] + rows[2], min(rlo, alo), max(rhi, ahi)
    out: List[Optional[float]] = [_kth(err, elo, ehi, k, max_err) for k in ranks]
    out.append(_kth(err, elo, ehi, max(1, math.ceil(ratio * n)), max_err))
    for row, lo, hi, top in ((rows[0] + rows[1], rlo, rhi, max(max_rel, 0.0)), (rows[2] + rows[3], alo, ahi, max_abs)):
        out.extend(_kth(row, lo, hi, k, top) if full else None for k in ranks)
    return tuple(out)
