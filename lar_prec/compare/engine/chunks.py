"""The engine's compute core: one chunk of values at a time, into an :class:`Acc`.

Every function here accumulates exactly the metrics :mod:`lar_prec.compare.metrics` defines for whole
arrays (tests/test_metrics.py holds them to it). ``kernel`` arguments are the C kernel
module or None for the numpy path (see :func:`lar_prec.engine.kernel_for`).
"""
from __future__ import annotations

import math
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.compare import metrics
from lar_prec.compare.engine import hist
from lar_prec.compare.engine.workers import EngineSettings
from lar_prec.compare.engine.io import Extent, pair_chunks, pair_windows, same_bytes
from lar_prec.dumps.dtypes import DType

# ============================================================================ per-thread state


class _Scratch:
    """Work buffers of one worker thread, reused for every chunk of every var."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._raw: Dict[Tuple[int, int], Tuple[bytearray, bytearray]] = {}
        self._arrays: Optional[Tuple[List[np.ndarray], List[np.ndarray], List[np.ndarray]]] = None

    def _make(self) -> Tuple[List[np.ndarray], List[np.ndarray], List[np.ndarray]]:
        # on first use: the C kernel's float32 path needs no numpy arrays (nor numpy)
        n = self.n
        self._arrays = ([np.empty(n, np.float32) for _ in range(4)], [np.empty(n, np.int32)],
                        [np.empty(n, np.float64) for _ in range(3)])
        return self._arrays

    @property
    def f(self) -> List[np.ndarray]:
        """Four float32 work arrays (f[3] may hold a chunk's values, see _float_views)."""
        return (self._arrays or self._make())[0]

    @property
    def i(self) -> List[np.ndarray]:
        """One int32 work array."""
        return (self._arrays or self._make())[1]

    @property
    def d(self) -> List[np.ndarray]:
        """Three float64 work arrays."""
        return (self._arrays or self._make())[2]

    def raw(self, ka: int, kb: int) -> Tuple[bytearray, bytearray]:
        """Byte buffers holding one full chunk of items of ``ka`` and ``kb`` bytes."""
        pair = self._raw.get((ka, kb))
        if pair is None:
            pair = (bytearray(self.n * ka), bytearray(self.n * kb))
            self._raw[(ka, kb)] = pair
        return pair


_local = threading.local()


class _Quiet:
    """``np.errstate(all="ignore")`` that costs nothing inside another one on the same
    thread: entering numpy's context manager per var was a fifth of a small var's cost.
    NaN/Inf and 0/0 are handled explicitly by the kernels."""

    __slots__ = ()

    def __enter__(self) -> None:
        depth = getattr(_local, "quiet", 0)
        if depth == 0:
            _local.saved_err = np.seterr(all="ignore")
        _local.quiet = depth + 1

    def __exit__(self, *exc: object) -> None:
        depth = _local.quiet - 1
        _local.quiet = depth
        if depth == 0:
            np.seterr(**_local.saved_err)


#: enter around many calls of the engine on one thread (once, not per var)
QUIET = _Quiet()


def _scratch(n: int) -> _Scratch:
    s = getattr(_local, "scratch", None)
    if s is None or s.n != n:
        s = _Scratch(n)
        _local.scratch = s
    return s


# ============================================================================ accumulator


class Acc:
    """Running metrics of one element range over its chunks (all in one pass)."""

    def __init__(self, count_over: Optional[float], stats: bool = False, full: bool = False) -> None:
        self.count_over = count_over  # threshold known up front (fixed): count in this pass
        # float vars: the error histogram their quantiles come from (engine/hist.py); full: of
        # the relative and absolute error too
        self.hist = hist.new() if stats else None
        self.full = full
        self.n_fin = 0
        self.max_err = -1.0
        self.worst = -1
        self.worst_a = 0.0
        self.worst_b = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sum_abs = 0.0
        # cosine and RMSE from float64 sums, d = a - b: a.a, a.b, b.b, d.d (metrics.sums)
        self.aa = 0.0
        self.ab = 0.0
        self.bb = 0.0
        self.dd = 0.0
        self.scale = 0.0
        self.max_ulp: Optional[int] = None
        self.n_over = 0
        self.n_diff = 0
        self.n_nonfinite = 0
        self.first_nonfinite: Optional[Tuple[int, float, float]] = None

    def state(self) -> tuple:
        """The accumulator as the kernel's ``measure`` takes it."""
        return (self.n_fin, self.max_err, self.worst, self.worst_a, self.worst_b, self.max_abs, self.max_rel,
                self.sum_abs, self.aa, self.ab, self.bb, self.dd, self.scale, self.max_ulp, self.n_over, self.n_diff)

    def set_state(self, t: tuple) -> None:
        """Take back what ``measure`` gave."""
        (self.n_fin, self.max_err, self.worst, self.worst_a, self.worst_b, self.max_abs, self.max_rel, self.sum_abs,
         self.aa, self.ab, self.bb, self.dd, self.scale, self.max_ulp, self.n_over, self.n_diff) = t

    def worst_update(self, e: float, idx: int, a: float, b: float) -> None:
        if e > self.max_err:
            self.max_err, self.worst, self.worst_a, self.worst_b = e, idx, a, b

    def ulp_update(self, u: int) -> None:
        self.max_ulp = u if self.max_ulp is None or u > self.max_ulp else self.max_ulp

    def add_sums(self, aa: float, ab: float, bb: float, dd: float, sum_abs: float) -> None:
        self.aa += aa
        self.ab += ab
        self.bb += bb
        self.dd += dd
        self.sum_abs += sum_abs




def decode(raw: memoryview, dt: DType) -> "np.ndarray":
    """Raw bytes of one chunk -> values (float32 for BFloat16)."""
    if dt.name == "BFloat16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    assert dt.storage is not None  # internal: callers check decodable first
    return np.frombuffer(raw, dt.storage)



# ============================================================================ float chunks


def _ulp_max(ia: np.ndarray, ib: np.ndarray, s: Optional[_Scratch], same_sign: bool = False) -> int:
    """Largest distance, in units in the last place, between float bit patterns ``ia``/``ib``
    (int32 views of float32 or int16 views of float16): :func:`metrics.ulp_distance`'s max.
    ``same_sign`` promises that no pair has opposite signs (except -0/+0)."""
    n = ia.size
    if n == 0:
        return 0
    wide = np.int64 if ia.dtype == np.int32 else np.int32
    mag = 0x7FFFFFFF if ia.dtype == np.int32 else 0x7FFF
    if s is not None and s.n >= n and ia.dtype == np.int32:
        t = s.i[0][:n]
    else:
        t = np.empty(n, ia.dtype)
    # same sign: float bit patterns are ordered like the values, so the distance is |ia - ib|
    # (-0 against +0 wraps to INT_MIN, negative, so it never wins the max)
    opposite = False
    if not same_sign:
        np.bitwise_xor(ia, ib, out=t)
        opposite = int(t.min()) < 0
    np.subtract(ia, ib, out=t)
    np.abs(t, out=t)  # may wrap for opposite signs; those are replaced below
    if not opposite:
        return max(0, int(t.max()))
    flip = np.flatnonzero((ia ^ ib) < 0)
    t[flip] = 0
    # opposite signs: the distance goes through zero, |a| and |b| in ulps added
    cross = (ia[flip].astype(wide) & mag) + (ib[flip].astype(wide) & mag)
    return max(0, int(t.max()), int(cross.max()))


def _float_chunk(acc: Acc, a: np.ndarray, b: np.ndarray, ia: Optional[np.ndarray], ib: Optional[np.ndarray], off: int,
                 s: _Scratch, ulp_div: int, kernel: Optional[object]) -> None:
    """Accumulate one chunk of float32 values ``a``/``b`` (``ia``/``ib``: their raw bit
    views for ulps, None for integers cast to float32).

    About 20 vectorised passes over the chunk, all into preallocated buffers.
    """
    if kernel is not None:
        _kernel_chunk(acc, a, b, ia, ib, off, s, ulp_div, kernel)
        return
    n = a.size
    M, E, D = s.f[0][:n], s.f[1][:n], s.f[2][:n]
    a64, d64 = s.d[0][:n], s.d[1][:n]
    # callers hold QUIET: NaN/Inf and 0/0 are handled explicitly. M = max(|a|,|b|), D = |a-b|,
    # E = the error, d64 = the float32 difference a-b in float64 (as the C kernel takes it)
    _e, rel = metrics.megengine_err_into(a, b, M, D, E, signed=d64, rel=True)
    i = int(E.argmax())  # a NaN anywhere is returned first
    e = float(E[i])
    np.copyto(a64, a)
    b64 = s.d[2][:n]
    np.copyto(b64, b)
    aa, ab, bb, dd, sum_abs = metrics.sums(a64, b64, d64, D)
    if not (math.isfinite(e) and math.isfinite(aa) and math.isfinite(dd)):
        # NaN/Inf somewhere, or float32 overflow: the careful path
        _mixed_chunk(acc, a, b, ia, ib, off, s, ulp_div)
        return
    acc.n_fin += n
    acc.worst_update(e, off + i, float(a[i]), float(b[i]))
    if acc.hist is not None:
        hist.add_chunk(acc.hist, a, b, acc.full)
    acc.scale = max(acc.scale, float(M.max()))
    acc.max_abs = max(acc.max_abs, float(D.max()))
    if rel == rel:
        acc.max_rel = max(acc.max_rel, rel)
    acc.add_sums(aa, ab, bb, dd, sum_abs)
    if acc.count_over is not None and e > acc.count_over:
        acc.n_over += int(np.count_nonzero(E > acc.count_over))
        if acc.count_over == 0:
            acc.n_diff += int(np.count_nonzero(D))
    if ia is not None:
        # max_rel < 1 rules out opposite signs and zero against nonzero: the cheap ulp path
        u = _ulp_max(ia, ib, s, same_sign=rel < 1.0)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _kernel_chunk(acc: Acc, a: np.ndarray, b: np.ndarray, ia: Optional[np.ndarray], ib: Optional[np.ndarray], off: int,
                  s: _Scratch, ulp_div: int, kernel: object) -> None:
    """:func:`_float_chunk` through the C kernel: the same metrics in one pass."""
    # float32 bit views get their ulps in C; float16's int16 views are done below
    c_ulp = ia is not None and ia.dtype == np.int32
    r = kernel.float32(a, b, c_ulp, acc.count_over, acc.max_err, acc.hist, acc.full)  # type: ignore[attr-defined]
    if r is None:  # NaN/Inf somewhere, or float32 overflow
        _mixed_chunk(acc, a, b, ia, ib, off, s, ulp_div)
        return
    _kernel_add(acc, r, a.size, off, a, b)
    if ia is not None:
        u = r[11] if c_ulp else _ulp_max(ia, ib, s, same_sign=r[2] < 1.0)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _kernel_add(acc: Acc, r: tuple, n: int, off: int, a: Sequence[float], b: Sequence[float]) -> None:
    """Add one chunk's kernel result ``r`` (all but the ulps) to ``acc``; ``a``/``b`` give the
    values at the worst index."""
    e, i, rel, scale, max_abs, sum_abs, aa, ab, bb, dd, n_over, _ulp = r
    acc.n_fin += n
    if i >= 0:  # the kernel looks for the index only when e beats acc.max_err
        acc.worst_update(e, off + i, float(a[i]), float(b[i]))
    if scale > acc.scale:
        acc.scale = scale
    if max_abs > acc.max_abs:
        acc.max_abs = max_abs
    if rel > acc.max_rel:  # -1 when no position has a relative error
        acc.max_rel = rel
    acc.add_sums(aa, ab, bb, dd, sum_abs)
    if n_over is not None:
        acc.n_over += n_over
        if acc.count_over == 0:  # over 0 is exactly "differs"
            acc.n_diff += n_over


def _kernel_range(acc: Acc, da: Extent, db: Extent, start: int, end: int, st: EngineSettings, s: _Scratch,
                  kernel: object) -> Acc:
    """:func:`float_range` of float32 or float16 through the kernel: the raw bytes go to C as
    they are, a mapped window at a time (``kernel.measure`` cuts it into chunks and adds them
    up as the Python engine would; float16 is widened there). Identical chunks go through it
    too, as ``kernel(a, a)``: the same float64 sums of a.a, no numpy. A chunk with NaN/Inf is
    measured here, the careful way, and C goes on after it."""
    name, chunk = da.dtype.name, st.chunk_elements
    k = 4 if name == "Float32" else 2
    measure = kernel.measure  # type: ignore[attr-defined]
    for pos, va, vb in pair_windows(da, db, k, k, start, end, chunk, s.raw(k, k), st.window_bytes):
        n, done = len(va) // k, 0
        while done < n:
            state, bad = measure(va[done * k :], vb[done * k :], k == 2, chunk, acc.count_over, acc.hist, acc.full,
                                 pos + done, acc.state())
            acc.set_state(state)
            if bad < 0:
                break
            # NaN/Inf in that chunk: as on the numpy path (the only numpy here: a worker comparing
            # float32 vars need not import it)
            c0 = done + bad
            c1 = min(n, c0 + chunk)
            ca, cb = va[c0 * k : c1 * k], vb[c0 * k : c1 * k]
            with QUIET:
                a, b, ia, ib = _float_views(ca, cb, name, s)
                if same_bytes(ca, cb, kernel):
                    _identical_chunk(acc, a, pos + c0, s, ulp=True)
                else:
                    _mixed_chunk(acc, a, b, ia, ib, pos + c0, s, 1)
            done = c1
    return acc


def _mixed_chunk(acc: Acc, a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int, s: _Scratch, ulp_div: int) -> None:
    """A chunk with NaN/Inf (or float32 overflow): equal non-finite positions are equal,
    unequal ones are counted, metrics go over the positions finite on both sides."""
    both = metrics.finite_pairs(a, b)
    if not both.all():
        nbad = _count_nonfinite(acc, a, b, both, off)
        if nbad and acc.count_over == 0:
            acc.n_diff += nbad
    idx = np.flatnonzero(both)
    if idx.size == 0:
        return
    a64 = a[idx].astype(np.float64)
    b64 = b[idx].astype(np.float64)
    _f64_metrics(acc, a64, b64, idx + off, err32=True)
    if acc.hist is not None:
        hist.add_chunk(acc.hist, a[idx], b[idx], acc.full)
    if ia is not None and ib is not None:
        u = _ulp_max(ia[idx], ib[idx], None)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _f64_metrics(acc: Acc, a64: np.ndarray, b64: np.ndarray, index: np.ndarray, *, err32: bool) -> None:
    """Metrics of finite float64 values (ints, mixed chunks, dtype mismatches).

    ``index`` maps positions to the var's flat indices. With ``err32`` the error is
    :func:`metrics.megengine_err` (float32, like compare_binary_iodump), keeping the
    float64 value only where float32 overflows.
    """
    n = a64.size
    if n == 0:  # a chunk with no position finite on both sides (a float16 var full of Inf)
        return
    ds = a64 - b64
    d = np.abs(ds)
    acc.add_sums(*metrics.sums(a64, b64, ds, d))
    m = np.maximum(np.abs(a64), np.abs(b64))
    err = d / np.maximum(m, 1.0)
    if err32:
        e32 = metrics.megengine_err(a64, b64).astype(np.float64)
        err = np.where(np.isfinite(e32), e32, err)
    i = int(err.argmax())
    acc.n_fin += n
    acc.worst_update(float(err[i]), int(index[i]), float(a64[i]), float(b64[i]))
    acc.max_abs = max(acc.max_abs, float(d.max()))
    with np.errstate(all="ignore"):
        rel = d / m
    r = float(np.fmax.reduce(rel))
    if r == r:
        acc.max_rel = max(acc.max_rel, r)
    acc.scale = max(acc.scale, float(m.max()))
    if acc.count_over is not None:
        acc.n_over += int(np.count_nonzero(err > acc.count_over))
        if acc.count_over == 0:
            acc.n_diff += int(np.count_nonzero(d))


def _identical_chunk(acc: Acc, x: np.ndarray, start: int, s: _Scratch, ulp: bool) -> None:
    """A chunk whose bytes are the same on both sides: no error, but a.a still counts for
    the cosine (float64, as everywhere) and the magnitudes for the scale."""
    with QUIET:
        mag = float(np.abs(x).max())
    first = 0
    if not math.isfinite(mag):
        # identical NaN/Inf are equal; measure the finite positions
        fin = np.flatnonzero(np.isfinite(x))
        if fin.size == 0:
            return
        first = int(fin[0])  # the worst (error 0) is the first finite position
        x = x[fin]
        mag = float(np.abs(x).max())
    n = x.size
    x64 = s.d[0][:n] if n <= s.n else np.empty(n, np.float64)
    np.copyto(x64, x)
    acc.n_fin += n
    if acc.hist is not None:
        hist.add_zeros(acc.hist, n)
    xx = metrics.sum_squares(x64)  # identical values: a.a = a.b = b.b, d.d = 0
    acc.aa += xx
    acc.ab += xx
    acc.bb += xx
    acc.scale = max(acc.scale, mag)
    acc.worst_update(0.0, start + first, float(x[0]), float(x[0]))
    if ulp:
        acc.ulp_update(0)


def _float_views(va: memoryview, vb: memoryview, name: str, s: _Scratch) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Float32 values of two raw chunks of ``name`` dtype, and their bit views for ulps."""
    if name == "Float32":
        return np.frombuffer(va, np.float32), np.frombuffer(vb, np.float32), np.frombuffer(va, np.int32), np.frombuffer(vb, np.int32)
    if name == "Float16":
        n = len(va) // 2
        a = s.f[3][:n]
        np.copyto(a, np.frombuffer(va, np.float16))
        b = np.frombuffer(vb, np.float16).astype(np.float32)
        return a, b, np.frombuffer(va, np.int16), np.frombuffer(vb, np.int16)
    # BFloat16: widen the raw bits to float32; ulps are counted on those bits / 2**16
    a = (np.frombuffer(va, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    b = (np.frombuffer(vb, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a, b, a.view(np.int32), b.view(np.int32)


# ============================================================================ ranges


def count_range(da: Extent, db: Extent, start: int, end: int, st: EngineSettings, threshold: float, kernel: Optional[object]) -> int:
    """Elements of ``start:end`` of two float dumps whose float32 MegEngine error is above
    ``threshold`` (the second pass of ``auto``: about half the work of the first)."""
    chunk = st.chunk_elements
    s = _scratch(chunk)
    t = np.float32(threshold)
    k = 2 if da.dtype.name in ("Float16", "BFloat16") else 4
    count = 0
    with QUIET:
        for _pos, va, vb in pair_chunks(da, db, k, k, start, end, chunk, s.raw(k, k), st.window_bytes):
            if same_bytes(va, vb, kernel):
                continue
            a, b, _ia, _ib = _float_views(va, vb, da.dtype.name, s)
            if kernel is not None:
                r = kernel.float32(a, b, False, threshold, math.inf)  # type: ignore[attr-defined]
                if r is not None:
                    count += r[10]  # n_over
                    continue
            n = a.size
            E, _r = metrics.megengine_err_into(a, b, s.f[0][:n], s.f[2][:n], s.f[1][:n])
            # positions finite on both sides, as the first pass counts them
            count += int(np.count_nonzero((E > t) & metrics.finite_pairs(a, b)))
    return count


def float_range(da: Extent, db: Extent, start: int, end: int, st: EngineSettings, count_over: Optional[float],
                kernel: Optional[object], full: bool = False) -> Acc:
    """Metrics of elements ``start:end`` of two float dumps of the same dtype (with their error
    histogram: ``full`` for the relative and absolute error's too)."""
    s = _scratch(st.chunk_elements)
    acc = Acc(count_over, stats=True, full=full)
    name = da.dtype.name
    itemsize = 2 if name in ("Float16", "BFloat16") else 4
    ulp_div = 1 << 16 if name == "BFloat16" else 1
    if name in ("Float32", "Float16") and kernel is not None:
        return _kernel_range(acc, da, db, start, end, st, s, kernel)
    with QUIET:
        for pos, va, vb in pair_chunks(da, db, itemsize, itemsize, start, end, st.chunk_elements, s.raw(itemsize, itemsize), st.window_bytes):
            a, b, ia, ib = _float_views(va, vb, name, s)
            if same_bytes(va, vb, kernel):
                _identical_chunk(acc, a, pos, s, ulp=True)
                continue
            _float_chunk(acc, a, b, ia, ib, pos, s, ulp_div, kernel)
    return acc


def _itemsize(dt: DType) -> int:
    assert dt.storage is not None  # internal: callers check decodable first
    return dt.storage.itemsize


def exact_range(da: Extent, db: Extent, start: int, end: int, st: EngineSettings, mismatch: bool, kernel: Optional[object]) -> Acc:
    """Metrics of elements ``start:end``: integers, Bool, Byte and quantized raw values,
    compared exactly; or (``mismatch``) two decodable dtypes that differ, as numbers."""
    s = _scratch(st.chunk_elements)
    acc = Acc(None)
    dta, dtb = da.dtype, db.dtype
    ka, kb = _itemsize(dta), _itemsize(dtb)
    is_float = dta.kind == "float" or dtb.kind == "float"
    with QUIET:
        for pos, va, vb in pair_chunks(da, db, ka, kb, start, end, st.chunk_elements, s.raw(ka, kb), st.window_bytes):
            if not mismatch and same_bytes(va, vb, kernel):
                _identical_chunk(acc, decode(va, dta).astype(np.float64), pos, s, ulp=False)
                continue
            a = decode(va, dta)
            b = decode(vb, dtb)
            if is_float:
                a64 = a.astype(np.float64)
                b64 = b.astype(np.float64)
                fin = metrics.finite_pairs(a64, b64)
                if not fin.all():
                    _count_nonfinite(acc, a64, b64, fin, pos)
                idx = np.flatnonzero(fin)
                _f64_metrics(acc, a64[idx], b64[idx], idx + pos, err32=True)
            else:
                _int_chunk(acc, a, b, pos, s, kernel)
    return acc


def _int_chunk(acc: Acc, a: np.ndarray, b: np.ndarray, off: int, s: _Scratch, kernel: Optional[object]) -> None:
    """A chunk of integers (or Bool) that differ: counted exactly, measured like floats.

    The error metrics run on float32 casts, exactly what compare_binary_iodump does, so
    ``max_err`` matches it; the count of differing elements and, beyond 2**24 where float32
    rounds, the largest absolute difference come from the integers themselves.
    """
    n = a.size
    acc.n_diff += int(np.count_nonzero(a != b))
    a32, b32 = s.f[3][:n], s.i[0].view(np.float32)[:n]
    np.copyto(a32, a, casting="unsafe")
    np.copyto(b32, b, casting="unsafe")
    before = acc.max_abs
    _float_chunk(acc, a32, b32, None, None, off, s, 1, kernel)
    if acc.scale >= 2.0**24:
        exact = float(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())
        acc.max_abs = max(before, exact)


def _count_nonfinite(acc: Acc, a: np.ndarray, b: np.ndarray, both: np.ndarray, off: int) -> int:
    """Count positions that are NaN/Inf on one side, or different non-finite values (NaN at
    the same place, or the same infinity, is equal); remember the first. ``both`` marks the
    positions finite on both sides. Returns the count in this chunk."""
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    bad = ~both & ~same
    nbad = int(np.count_nonzero(bad))
    if nbad:
        acc.n_nonfinite += nbad
        if acc.first_nonfinite is None:
            j = int(np.argmax(bad))
            acc.first_nonfinite = (off + j, float(a[j]), float(b[j]))
    return nbad
