"""Compare two ``--bin-io-dump`` folders variable by variable, streaming, NaN/Inf aware.

The unit of work is one var present in both folders: its two files are read in chunks
(``chunk_elements`` values at a time into reused buffers, so memory is bounded by the chunk
size and not by the tensor size or by the page cache) and every metric is accumulated in a
single pass:

* ``max_err``: MegEngine's ``|a-b| / max(|a|, |b|, 1)`` computed in float32 exactly as
  ``compare_binary_iodump`` does, so the numbers match ``compare_binary_iodump -e``;
* ``max_abs_err``, ``max_rel_err`` (``|a-b| / max(|a|, |b|)``, symmetric, 0 where both are 0),
  ``mean_abs_err``, ``rmse``, ``cosine`` (float64 accumulation), ``max_ulp`` (floats only);
* the worst element (largest ``max_err``): its index and both values;
* ``scale``, the largest magnitude on either side, which the auto threshold uses.

Float32 chunks go through the optional C kernel (``_kernel.c``, one pass) when it is built,
else through numpy (about 20 passes); both give the same maxima, indices and counts.

NaN at the same position on both sides (and the same infinity) counts as equal. A position
that is non-finite on one side only, or NaN against Inf, makes the var ``nonfinite``; its
error metrics then describe the positions that are finite on both sides.

Whether a var is ``ok`` or ``divergent`` depends on the :class:`Threshold`, which ``auto``
chooses from the data once every var is measured (see ``docs/threshold.md``). Integer, Bool,
Byte and quantized vars compare exactly (quantized raw integers carry ``scale_unknown``).
"""
from __future__ import annotations

import logging
import math
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec.errors import DumpFolderError, DumpFormatError, UsageError
from lar_prec.iodump import DTYPES, BinaryDump, DType, DumpFolder, dtype_by_name

log = logging.getLogger(__name__)


def _kernel_off() -> bool:
    return os.environ.get("LAR_PREC_NO_KERNEL", "") not in ("", "0")


def _load_kernel() -> Optional[object]:
    """The one-pass C kernel (lar_prec/_kernel.c), or None: built without a C compiler, or
    turned off with LAR_PREC_NO_KERNEL=1 (to compare the two paths). The numpy path gives the
    same maxima, indices and counts; sums may differ in the last digits."""
    if _kernel_off():
        return None
    try:
        from lar_prec import _kernel  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _kernel


_KERNEL = _load_kernel()


def kernel_state() -> str:
    """Which path compares float32 here: "C kernel", or why it is the numpy path."""
    if _KERNEL is not None:
        return "C kernel"
    if _kernel_off():
        return "numpy path: LAR_PREC_NO_KERNEL is set"
    return "numpy path: the C kernel was not built"

PathLike = Union[str, "os.PathLike[str]"]
ProgressHook = Callable[[int, int], None]

#: var statuses, in the order reports list them (design.md)
STATUSES = ("ok", "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
#: statuses that come from the values (the others come from headers or file presence)
VALUE_STATUSES = ("ok", "divergent", "nonfinite")

#: values per chunk: 32 Ki float32 values keep one worker's buffers (~1 MB) in its L2 cache,
#: which measured faster than bigger chunks despite more Python calls per byte
DEFAULT_CHUNK = 1 << 15

#: auto threshold: at most this many gaps between var errors are tried per dtype
MAX_CANDIDATES = 64

#: with several workers, pieces of fewer values than this are compared in the main process
SMALL_TASK_ELEMENTS = 1 << 16

#: with several workers, vars are split into ranges of this many values (8 MB of float32)
PIECE_ELEMENTS = 1 << 21

#: below this magnitude the auto threshold stops shrinking with the var's scale
SCALE_FLOOR = 1e-6

_FLOAT_NAMES = ("Float32", "Float16", "BFloat16")
_EPS = {"Float32": 2.0**-23, "Float16": 2.0**-10, "BFloat16": 2.0**-7}
#: auto-threshold bands in units of the dtype's eps (docs/threshold.md explains the numbers)
AUTO_BAND_EPS = {"Float32": (32.0, 80.0), "Float16": (2.0, 8.0), "BFloat16": (2.0, 8.0)}


def _float_kind(dt: DType) -> bool:
    return dt.kind == "float"


def _exact_kind(dt: DType) -> bool:
    """Values that compare exactly: integers, Bool, Byte and quantized raw integers."""
    return dt.kind in ("int", "bool", "byte", "quantized")


# ============================================================================ threshold


@dataclass(frozen=True)
class Threshold:
    """The rule that separates ``ok`` from ``divergent``.

    ``value`` is the headline threshold on ``max_err``: Float32's, or for a model without
    float32 vars that of its float dtype;
    ``per_dtype`` the threshold of every dtype (0.0 = exact, any difference diverges).
    With ``scaled`` (the auto mode) a var's own threshold is ``per_dtype[dtype] * min(1,
    max(scale, SCALE_FLOOR))``, ``scale`` being its largest magnitude: ``max_err`` is an
    absolute error for values below 1, so a var whose values are all small gets a
    proportionally smaller threshold. A fixed threshold is not scaled, which is exactly
    ``compare_binary_iodump -e VALUE``. ``Threshold(0.0, "fixed")`` means bitwise: any
    difference diverges.
    """

    value: float
    mode: str = "fixed"
    metric: str = "megengine_rel"
    per_dtype: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)
    scaled: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "fixed"):
            raise UsageError(f"threshold mode must be 'auto' or 'fixed', got {self.mode!r}")
        if not (self.value >= 0 and math.isfinite(self.value)):
            raise UsageError(f"threshold must be a finite number >= 0, got {self.value!r}")

    @classmethod
    def fixed(cls, value: float) -> "Threshold":
        """``value`` for every float dtype, exact for the others, not scaled."""
        value = float(value)
        if not (value >= 0 and math.isfinite(value)):
            raise UsageError(f"threshold must be a finite number >= 0, got {value!r}")
        per = {n: value for n in _FLOAT_NAMES}
        reason = "fixed: --threshold %g on max_err for every float dtype, like compare_binary_iodump -e %g" % (value, value)
        if value == 0:
            reason = "fixed 0: bitwise, any difference diverges"
        return cls(value=value, mode="fixed", per_dtype=per, scaled=False, reason=reason + "; integer, Bool and quantized types compare exactly")

    def for_dtype(self, dtype: str) -> float:
        """The base threshold of ``dtype`` (0.0 for exact types)."""
        if dtype in self.per_dtype:
            return float(self.per_dtype[dtype])
        try:
            dt = dtype_by_name(dtype)
        except UsageError:
            return 0.0
        if _float_kind(dt):
            return self.value if self.mode == "fixed" else _band(dtype)[1]
        return 0.0

    def for_var(self, dtype: str, scale: Optional[float]) -> float:
        """The threshold one var of ``dtype`` and largest magnitude ``scale`` is held to."""
        base = self.for_dtype(dtype)
        if self.scaled and scale is not None:
            base *= min(1.0, max(float(scale), SCALE_FLOOR))
        return base

    def to_json(self) -> Dict[str, object]:
        """``{"value", "mode", "metric"}`` as design.md fixes, plus ``per_dtype``, ``scaled``, ``reason``."""
        return {
            "value": self.value,
            "mode": self.mode,
            "metric": self.metric,
            "per_dtype": {k: float(v) for k, v in self.per_dtype.items()},
            "scaled": self.scaled,
            "reason": self.reason,
        }


def _band(dtype: str) -> Tuple[float, float]:
    lo, hi = AUTO_BAND_EPS[dtype]
    return lo * _EPS[dtype], hi * _EPS[dtype]


def parse_threshold(spec: Union[str, float, Threshold, None]) -> Optional[Threshold]:
    """``"auto"``/None -> None (decided from the data), a number or its text -> fixed.

    Raises:
        UsageError: anything else, e.g. ``"abc"`` or a negative number.
    """
    if spec is None or isinstance(spec, Threshold):
        return spec
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s == "auto":
            return None
        try:
            value = float(s)
        except ValueError:
            raise UsageError(f"threshold must be 'auto' or a number such as 1e-3, got {spec!r}") from None
        return Threshold.fixed(value)
    return Threshold.fixed(float(spec))


# ============================================================================ results


@dataclass(frozen=True)
class VarDiff:
    """The comparison of one var between folder A and folder B.

    Metrics are None when they do not apply (missing var, shape mismatch, undecodable
    dtype, or no position finite on both sides). ``worst_index`` is the index (in the var's
    shape) of the element with the largest ``max_err``; ``worst_a``/``worst_b`` its values.
    ``threshold`` is the threshold this var was held to and ``n_over`` the number of its
    elements above it. ``inputs`` are the var ids of its owner operator's inputs.
    """

    id: int
    name: str
    opr: str
    opr_type: str
    dtype: str
    shape: Tuple[int, ...]
    inputs: Tuple[int, ...]
    status: str
    max_err: Optional[float] = None
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    mean_abs_err: Optional[float] = None
    rmse: Optional[float] = None
    cosine: Optional[float] = None
    max_ulp: Optional[int] = None
    n_over: Optional[int] = None
    worst_index: Optional[Tuple[int, ...]] = None
    worst_a: Optional[float] = None
    worst_b: Optional[float] = None
    scale_unknown: bool = False
    note: str = ""
    #: number of elements
    size: int = 0
    #: largest |value| on either side (finite positions), what the auto threshold scales by
    scale: Optional[float] = None
    #: elements that differ at all (exact types and bitwise checks); None when not counted
    n_diff: Optional[int] = None
    #: positions that are NaN/Inf on one side only (or NaN vs Inf, +Inf vs -Inf)
    n_nonfinite: int = 0
    #: the threshold this var was held to (None: not decided by a threshold)
    threshold: Optional[float] = None
    #: dtype / shape in B when they differ from A's (``dtype``/``shape`` are A's)
    dtype_b: Optional[str] = None
    shape_b: Optional[Tuple[int, ...]] = None
    #: for ``missing``: "a" or "b", the only folder that has the var
    only_in: Optional[str] = None
    #: position in the comparison's execution order
    index: int = 0

    @property
    def ok(self) -> bool:
        """True when the status is ``ok``."""
        return self.status == "ok"

    def __bool__(self) -> bool:
        return self.status == "ok"

    @property
    def norm_err(self) -> Optional[float]:
        """``max_err`` divided by ``min(1, max(scale, SCALE_FLOOR))``: the number the auto
        threshold is compared with (equal to ``max_err`` when the var has values >= 1)."""
        if self.max_err is None:
            return None
        s = 1.0 if self.scale is None else min(1.0, max(self.scale, SCALE_FLOOR))
        return self.max_err / s

    @property
    def values_compared(self) -> bool:
        """True when both sides were read and compared value by value."""
        return self.status in VALUE_STATUSES or (self.status == "dtype_mismatch" and self.max_err is not None)


#: the instance dict of a VarDiff built by its __init__ (the first one: field order). It is
#: key-sharing, and so is a copy of it overwritten key by key, at a third of the size of a
#: dict filled by update() (1.2 KB): there is one VarDiff per var, tens of thousands of them
_VARDIFF_DICT: Dict[str, object] = VarDiff(id=0, name="", opr="", opr_type="", dtype="", shape=(), inputs=(), status="").__dict__


def _with_dict(template: Dict[str, object], changes: Dict[str, object]) -> VarDiff:
    new = object.__new__(VarDiff)
    values = template.copy()
    values.update(changes.items())  # pairs, not a dict: update() would resize (unshare) it
    object.__setattr__(new, "__dict__", values)
    return new


def _new_diff(fields: Dict[str, object]) -> VarDiff:
    """``VarDiff(**fields)`` without the generated ``__init__``'s per-field frozen setattr
    (a VarDiff has 30 fields; this is per var); only for fields lar-prec computed itself."""
    return _with_dict(_VARDIFF_DICT, fields)


def _with(d: VarDiff, **changes: object) -> VarDiff:
    """``dataclasses.replace`` for VarDiff without re-running ``__init__`` (ten times faster,
    which matters with tens of thousands of vars); only for fields that need no checking."""
    return _with_dict(d.__dict__, changes)


@dataclass(frozen=True)
class Comparison:
    """Every var of two dump folders, in execution order, judged by one threshold."""

    dir_a: Path
    dir_b: Path
    diffs: Tuple[VarDiff, ...]
    threshold: Threshold
    #: folder-level remarks: stray files, ``-inp`` files, incomplete runs, renamed vars
    notes: Tuple[str, ...] = ()
    chunk_elements: int = DEFAULT_CHUNK
    _by_id: Dict[int, VarDiff] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.id: d for d in self.diffs})

    def __getitem__(self, var_id: int) -> VarDiff:
        try:
            return self._by_id[var_id]
        except KeyError:
            raise KeyError(f"var {var_id} is in neither {self.dir_a} nor {self.dir_b}") from None

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._by_id

    def __iter__(self) -> Iterator[VarDiff]:
        return iter(self.diffs)

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def ids(self) -> Tuple[int, ...]:
        """Var ids in execution order."""
        return tuple(d.id for d in self.diffs)

    def counts(self) -> Dict[str, int]:
        """Number of vars per status (every status present, zeros included)."""
        out = {s: 0 for s in STATUSES}
        for d in self.diffs:
            out[d.status] += 1
        return out

    @property
    def not_ok(self) -> Tuple[VarDiff, ...]:
        """The vars whose status is not ``ok``, in execution order."""
        return tuple(d for d in self.diffs if d.status != "ok")

    @property
    def diverged(self) -> bool:
        """True when any var is not ``ok`` (the command exits 1)."""
        return any(d.status != "ok" for d in self.diffs)

    def with_threshold(self, spec: Union[str, float, Threshold, None]) -> "Comparison":
        """The same measurements judged by another threshold (``"auto"``, a number, or a
        :class:`Threshold`). Element counts above it are recounted from the files."""
        thr = parse_threshold(spec)
        if thr is None:
            thr = choose_threshold(self.diffs)
        diffs = apply_threshold(self.diffs, thr)
        diffs = _recount(self.dir_a, self.dir_b, diffs, self.chunk_elements)
        return replace(self, diffs=tuple(diffs), threshold=thr)


# ============================================================================ chunk kernels


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
                        [np.empty(n, np.float64) for _ in range(2)])
        return self._arrays

    @property
    def f(self) -> List[np.ndarray]:
        """Four float32 work arrays."""
        return (self._arrays or self._make())[0]

    @property
    def i(self) -> List[np.ndarray]:
        """One int32 work array."""
        return (self._arrays or self._make())[1]

    @property
    def d(self) -> List[np.ndarray]:
        """Two float64 work arrays."""
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


_QUIET = _Quiet()


def _scratch(n: int) -> _Scratch:
    s = getattr(_local, "scratch", None)
    if s is None or s.n != n:
        s = _Scratch(n)
        _local.scratch = s
    return s


class _Acc:
    """Running metrics of one var over its chunks (all in one pass)."""

    def __init__(self, count_over: Optional[float]) -> None:
        self.count_over = count_over  # threshold known up front (fixed): count in this pass
        self.n_fin = 0
        self.max_err = -1.0
        self.worst = -1
        self.worst_a = 0.0
        self.worst_b = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sum_abs = 0.0
        # cosine and RMSE from three sums, d = a - b: a.a, a.d, d.d
        self.aa = 0.0
        self.ad = 0.0
        self.dd = 0.0
        self.scale = 0.0
        self.max_ulp: Optional[int] = None
        self.n_over = 0
        self.n_diff = 0
        self.n_nonfinite = 0
        self.first_nonfinite: Optional[Tuple[int, float, float]] = None

    def worst_update(self, e: float, idx: int, a: float, b: float) -> None:
        if e > self.max_err:
            self.max_err, self.worst, self.worst_a, self.worst_b = e, idx, a, b

    def ulp_update(self, u: int) -> None:
        self.max_ulp = u if self.max_ulp is None or u > self.max_ulp else self.max_ulp


def _ulp_max(ia: np.ndarray, ib: np.ndarray, s: Optional[_Scratch], same_sign: bool = False) -> int:
    """Largest distance, in units in the last place, between float bit patterns ``ia``/``ib``
    (int32 views of float32 or int16 views of float16). -0.0 and +0.0 are 0 ulp apart.
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


def _float_chunk(acc: _Acc, a: np.ndarray, b: np.ndarray, ia: Optional[np.ndarray], ib: Optional[np.ndarray], off: int, s: _Scratch, ulp_div: int) -> None:
    """Accumulate one chunk of float32 values ``a``/``b`` (``ia``/``ib``: their raw bit
    views for ulps, None for integers cast to float32).

    About 20 vectorised passes over the chunk, all into preallocated buffers.
    """
    if _KERNEL is not None:
        _kernel_chunk(acc, a, b, ia, ib, off, s, ulp_div)
        return
    n = a.size
    A, B, D = s.f[0][:n], s.f[1][:n], s.f[2][:n]
    # callers hold np.errstate(all="ignore"): NaN/Inf and 0/0 are handled explicitly
    np.abs(a, out=A)
    np.abs(b, out=B)
    np.maximum(A, B, out=A)  # m = max(|a|, |b|)
    np.subtract(a, b, out=D)  # exact for close values (Sterbenz)
    # cosine and RMSE from a.a, a.d, d.d (b.b = a.a - 2 a.d + d.d): in float64, where products
    # of float32 are exact; float32 dots lost b.b to cancellation when b is small next to a.
    # einsum, not dot: OpenBLAS runs float64 dots on extra threads that then spin.
    a64, d64 = s.d[0][:n], s.d[1][:n]
    np.copyto(a64, a)
    np.copyto(d64, D)
    aa = float(np.einsum("i,i->", a64, a64))
    ad = float(np.einsum("i,i->", a64, d64))
    dd = float(np.einsum("i,i->", d64, d64))
    np.abs(D, out=D)
    np.divide(D, A, out=B)  # symmetric relative error; 0/0 -> NaN, skipped by fmax
    rel = float(np.fmax.reduce(B))
    # MegEngine's err = d / max(m, 1) is d/m where m >= 1 and d where m < 1, i.e. fmin(d/m, d):
    # bit for bit what compare_binary_iodump computes in float32
    np.fmin(B, D, out=B)
    i = int(B.argmax())  # a NaN anywhere is returned first
    e = float(B[i])
    if not (math.isfinite(e) and math.isfinite(aa) and math.isfinite(dd)):
        # NaN/Inf somewhere, or float32 overflow: the careful path
        _mixed_chunk(acc, a, b, ia, ib, off, s, ulp_div)
        return
    acc.n_fin += n
    acc.worst_update(e, off + i, float(a[i]), float(b[i]))
    acc.scale = max(acc.scale, float(A.max()))
    acc.max_abs = max(acc.max_abs, float(D.max()))
    if rel == rel:
        acc.max_rel = max(acc.max_rel, rel)
    acc.sum_abs += float(np.add.reduce(D, dtype=np.float64))  # float32 sums overflow near FLT_MAX
    acc.aa += aa
    acc.ad += ad
    acc.dd += dd
    if acc.count_over is not None and e > acc.count_over:
        acc.n_over += int(np.count_nonzero(B > acc.count_over))
        if acc.count_over == 0:
            acc.n_diff += int(np.count_nonzero(D))
    if ia is not None:
        # max_rel < 1 rules out opposite signs and zero against nonzero: the cheap ulp path
        u = _ulp_max(ia, ib, s, same_sign=rel < 1.0)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _kernel_chunk(acc: _Acc, a: np.ndarray, b: np.ndarray, ia: Optional[np.ndarray], ib: Optional[np.ndarray], off: int, s: _Scratch, ulp_div: int) -> None:
    """:func:`_float_chunk` through the C kernel: the same metrics in one pass."""
    # float32 bit views get their ulps in C; float16's int16 views are done below
    c_ulp = ia is not None and ia.dtype == np.int32
    r = _KERNEL.float32(a, b, c_ulp, acc.count_over, acc.max_err)  # type: ignore[union-attr]
    if r is None:  # NaN/Inf somewhere, or float32 overflow
        _mixed_chunk(acc, a, b, ia, ib, off, s, ulp_div)
        return
    _kernel_add(acc, r, a.size, off, a, b)
    if ia is not None:
        u = r[10] if c_ulp else _ulp_max(ia, ib, s, same_sign=r[2] < 1.0)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _kernel_add(acc: _Acc, r: tuple, n: int, off: int, a: Sequence[float], b: Sequence[float]) -> None:
    """Add one chunk's kernel result ``r`` (all but the ulps) to ``acc``; ``a``/``b`` give the
    values at the worst index."""
    e, i, rel, scale, max_abs, sum_abs, aa, ad, dd, n_over, _ulp = r
    acc.n_fin += n
    if i >= 0:  # the kernel looks for the index only when e beats acc.max_err
        acc.worst_update(e, off + i, float(a[i]), float(b[i]))
    if scale > acc.scale:
        acc.scale = scale
    if max_abs > acc.max_abs:
        acc.max_abs = max_abs
    if rel > acc.max_rel:  # -1 when no position has a relative error
        acc.max_rel = rel
    acc.sum_abs += sum_abs
    acc.aa += aa
    acc.ad += ad
    acc.dd += dd
    if n_over is not None:
        acc.n_over += n_over
        if acc.count_over == 0:  # over 0 is exactly "differs"
            acc.n_diff += n_over


def _float32_kernel_range(acc: _Acc, da: BinaryDump, db: BinaryDump, start: int, end: int, chunk: int, s: _Scratch) -> _Acc:
    """:func:`_float_range` of float32 through the kernel: the raw chunks go to C as they
    are (no numpy views per chunk; they were a tenth of the time)."""
    kernel = _KERNEL.float32  # type: ignore[union-attr]
    for pos, va, vb in _pair_chunks(da, db, 4, 4, start, end, chunk, s):
        same = _same(va, vb)
        if not same:
            r = kernel(va, vb, True, acc.count_over, acc.max_err)
            if r is not None:
                _kernel_add(acc, r, len(va) // 4, pos, va.cast("f"), vb.cast("f"))
                acc.ulp_update(r[10])
                continue
        # identical bytes, or NaN/Inf somewhere: as on the numpy path (the only numpy here:
        # a worker comparing float32 vars need not import it)
        with _QUIET:
            a, b, ia, ib = _float_views(va, vb, "Float32", s)
            if same:
                _identical_chunk(acc, a, pos, s, ulp=True)
            else:
                _mixed_chunk(acc, a, b, ia, ib, pos, s, 1)
    return acc


def _mixed_chunk(acc: _Acc, a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int, s: _Scratch, ulp_div: int) -> None:
    """A chunk with NaN/Inf (or float32 overflow): equal non-finite positions are equal,
    unequal ones are counted, metrics go over the positions finite on both sides."""
    both = np.isfinite(a) & np.isfinite(b)
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
    if ia is not None and ib is not None:
        u = _ulp_max(ia[idx], ib[idx], None)
        acc.ulp_update(u // ulp_div if ulp_div > 1 else u)


def _f64_metrics(acc: _Acc, a64: np.ndarray, b64: np.ndarray, index: np.ndarray, *, err32: bool) -> None:
    """Metrics of finite float64 values (ints, mixed chunks, dtype mismatches).

    ``index`` maps positions to the var's flat indices. With ``err32`` the error is also
    evaluated in float32 like compare_binary_iodump, keeping the float64 value only where
    float32 overflows.
    """
    n = a64.size
    ds = a64 - b64
    # einsum, not dot: OpenBLAS runs float64 dots of this size on extra threads that then spin
    acc.aa += float(np.einsum("i,i->", a64, a64))
    acc.ad += float(np.einsum("i,i->", a64, ds))
    acc.dd += float(np.einsum("i,i->", ds, ds))
    d = np.abs(ds)
    m = np.maximum(np.abs(a64), np.abs(b64))
    err = d / np.maximum(m, 1.0)
    if err32:
        with np.errstate(all="ignore"):
            a32 = a64.astype(np.float32)
            b32 = b64.astype(np.float32)
            e32 = (np.abs(a32 - b32) / np.maximum(np.maximum(np.abs(a32), np.abs(b32)), np.float32(1))).astype(np.float64)
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
    acc.sum_abs += float(d.sum())
    acc.scale = max(acc.scale, float(m.max()))
    if acc.count_over is not None:
        acc.n_over += int(np.count_nonzero(err > acc.count_over))
        if acc.count_over == 0:
            acc.n_diff += int(np.count_nonzero(d))


# ============================================================================ reading


def _read_exact(fd: int, buf: memoryview, offset: int, path: str) -> None:
    got = 0
    n = len(buf)
    while got < n:
        k = os.preadv(fd, [buf[got:]], offset + got)
        if not k:
            raise DumpFormatError(path, None, f"{n} more data bytes", f"end of file after {got}")
        got += k


def _open(d: BinaryDump) -> int:
    try:
        return os.open(d.file, os.O_RDONLY)
    except OSError as e:
        raise DumpFormatError(d.file, None, "a readable dump file", str(e)) from None


#: bytes of one file mapped at a time: a window is unmapped before the next is mapped, so the
#: resident pages (RSS) stay bounded whatever the size of the var
WINDOW_BYTES = 8 << 20


def _map(fd: int, d: BinaryDump, k: int, e0: int, e1: int) -> memoryview:
    """The bytes of elements ``e0:e1`` of dump ``d`` (items of ``k`` bytes), memory-mapped.

    Unmapped once the last view of it is dropped. The file size is checked first: a page
    beyond the end of a file that shrank would kill the process with SIGBUS."""
    lo, hi = d.data_offset + e0 * k, d.data_offset + e1 * k
    size = os.fstat(fd).st_size
    if size < hi:
        raise DumpFormatError(d.file, None, f"a file of at least {hi} bytes", f"{size} bytes (cut short while being read?)")
    base = lo - lo % mmap.ALLOCATIONGRANULARITY
    try:
        m = mmap.mmap(fd, hi - base, mmap.MAP_SHARED, mmap.PROT_READ, offset=base)
    except OSError:
        # a file system that cannot map files (some FUSE mounts): read the window instead
        buf = memoryview(bytearray(hi - lo))
        _read_exact(fd, buf, lo, d.file)
        return buf
    return memoryview(m)[lo - base :]


def _pair_chunks(
    da: BinaryDump, db: BinaryDump, ka: int, kb: int, start: int, end: int, chunk: int, s: _Scratch
) -> Iterator[Tuple[int, memoryview, memoryview]]:
    """Elements ``start:end`` of two dumps, ``chunk`` at a time, as byte views.

    One chunk (most small vars) is read with positioned reads into the worker's reused
    buffers: mapping costs more there. Longer ranges are memory-mapped window by window and
    handed over without a copy (measured ~30% less CPU than reading them into buffers).
    Plain descriptors: a file object per var cost more than a small var's comparison."""
    fa = _open(da)
    try:
        fb = _open(db)
        try:
            if end - start <= chunk:
                ra, rb = s.raw(ka, kb)
                n = end - start
                va, vb = memoryview(ra)[: n * ka], memoryview(rb)[: n * kb]
                _read_exact(fa, va, da.data_offset + start * ka, da.file)
                _read_exact(fb, vb, db.data_offset + start * kb, db.file)
                yield start, va, vb
                return
            step = max(chunk, WINDOW_BYTES // max(ka, kb) // chunk * chunk)
            for w0 in range(start, end, step):
                w1 = min(end, w0 + step)
                ma, mb = _map(fa, da, ka, w0, w1), _map(fb, db, kb, w0, w1)
                for pos in range(w0, w1, chunk):
                    i, j = pos - w0, min(chunk, w1 - pos)
                    yield pos, ma[i * ka : (i + j) * ka], mb[i * kb : (i + j) * kb]
                del ma, mb
        finally:
            os.close(fb)
    finally:
        os.close(fa)


def _same(va: memoryview, vb: memoryview) -> bool:
    """True when the two chunks hold the same bytes (a memcmp that stops at the first
    difference)."""
    if len(va) != len(vb):
        return False
    base_a, base_b = va.obj, vb.obj
    if isinstance(base_a, bytearray) and len(va) == len(base_a) and len(vb) == len(base_b):
        return base_a == base_b
    if _KERNEL is not None:
        return _KERNEL.same(va, vb)  # type: ignore[union-attr]
    return bytes(va) == bytes(vb)


# ============================================================================ one var


class _Base:
    """Only its instance dict is used: a key-sharing dict of the base fields, copied per var."""

    def __init__(self) -> None:
        self.id = self.name = self.opr = self.opr_type = self.dtype = self.shape = self.inputs = self.size = self.index = None


_BASE_KEYS = ("id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "size", "index")
#: every job keeps its base fields until its var is compared: a copy of this key-sharing
#: dict, overwritten key by key, is a third of the size of a dict(...) of them
_BASE_DICT: Dict[str, object] = _Base().__dict__


def _base_fields(da: Optional[BinaryDump], db: Optional[BinaryDump], index: int) -> Dict[str, object]:
    d = da if da is not None else db
    assert d is not None  # internal: at least one side exists
    v = d.var
    base = _BASE_DICT.copy()
    base.update(zip(_BASE_KEYS, (v.id, v.name, v.owner, v.opr_type, d.dtype.name, tuple(d.shape), d.input_ids, d.size, index)))
    return base


def _unravel(flat: int, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """C-order index of flat position ``flat`` (plain ints; cheaper than numpy for one)."""
    out = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        out.append(r)
    return tuple(reversed(out))


def _finish(acc: _Acc, base: Dict[str, object], shape: Tuple[int, ...], **extra: object) -> VarDiff:
    n = acc.n_fin
    fields: Dict[str, object] = dict(base)
    fields.update(extra)
    if n:
        cos: Optional[float] = None
        bb = acc.aa - 2 * acc.ad + acc.dd
        if acc.aa > 0 and bb > 0:
            cos = max(-1.0, min(1.0, (acc.aa - acc.ad) / math.sqrt(acc.aa * bb)))
        fields.update(
            max_err=acc.max_err,
            max_abs_err=acc.max_abs,
            max_rel_err=acc.max_rel,
            mean_abs_err=acc.sum_abs / n,
            rmse=math.sqrt(acc.dd / n),
            cosine=cos,
            max_ulp=acc.max_ulp,
            worst_index=_unravel(acc.worst, shape),
            worst_a=acc.worst_a,
            worst_b=acc.worst_b,
            scale=acc.scale,
        )
    fields["n_nonfinite"] = acc.n_nonfinite
    if acc.count_over is not None:
        # counted in this pass against a threshold known up front; apply_threshold keeps it
        fields["n_over"] = acc.n_over
        fields["threshold"] = acc.count_over
        if acc.count_over == 0:
            fields["n_diff"] = acc.n_diff
    notes = [str(fields.get("note") or "")]
    if acc.n_nonfinite:
        j, x, y = acc.first_nonfinite or (0, float("nan"), float("nan"))
        notes.append(
            f"{acc.n_nonfinite} position(s) NaN/Inf on one side only, first at {_unravel(j, shape)}: a={x!r} b={y!r}"
        )
        fields["status"] = "nonfinite"
    fields["note"] = "; ".join(x for x in notes if x)
    return _new_diff(fields)


def _identical_chunk(acc: _Acc, x: np.ndarray, start: int, s: _Scratch, ulp: bool) -> None:
    """A chunk whose bytes are the same on both sides: no error, but the norms still
    count for the cosine and the magnitudes for the scale."""
    n = x.size
    with _QUIET:
        mag = float(np.abs(x).max())
    if not math.isfinite(mag):
        # identical NaN/Inf are equal; measure the finite positions
        fin = np.flatnonzero(np.isfinite(x))
        x = x[fin]
        n = x.size
        if n == 0:
            return
        mag = float(np.abs(x).max())
    # float32 dot (one thread); a float64 BLAS dot would wake OpenBLAS's spinning threads
    x32 = x if x.dtype == np.float32 else x.astype(np.float32)
    sq = float(np.dot(x32, x32))
    acc.n_fin += n
    acc.aa += sq
    acc.scale = max(acc.scale, mag)
    acc.worst_update(0.0, start, float(x[0]), float(x[0]))
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


def _count_range(da: BinaryDump, db: BinaryDump, start: int, end: int, chunk: int, threshold: float) -> int:
    """Elements of ``start:end`` whose float32 MegEngine error is above ``threshold`` (the
    second pass of ``auto``: about half the work of the first)."""
    s = _scratch(chunk)
    t = np.float32(threshold)
    k = 2 if da.dtype.name in ("Float16", "BFloat16") else 4
    count = 0
    with _QUIET:
        for _pos, va, vb in _pair_chunks(da, db, k, k, start, end, chunk, s):
            if _same(va, vb):
                continue
            a, b, _ia, _ib = _float_views(va, vb, da.dtype.name, s)
            if _KERNEL is not None:
                r = _KERNEL.float32(a, b, False, threshold, math.inf)
                if r is not None:
                    count += r[9]
                    continue
            n = a.size
            A, B, D = s.f[0][:n], s.f[1][:n], s.f[2][:n]
            np.abs(a, out=A)
            np.abs(b, out=B)
            np.maximum(A, B, out=A)
            np.subtract(a, b, out=D)
            np.abs(D, out=D)
            np.divide(D, A, out=B)
            np.fmin(B, D, out=B)
            count += int(np.count_nonzero(B > t))
    return count


def _float_range(da: BinaryDump, db: BinaryDump, start: int, end: int, chunk: int, count_over: Optional[float]) -> _Acc:
    """Metrics of elements ``start:end`` of two float dumps of the same dtype."""
    s = _scratch(chunk)
    acc = _Acc(count_over)
    name = da.dtype.name
    itemsize = 2 if name in ("Float16", "BFloat16") else 4
    ulp_div = 1 << 16 if name == "BFloat16" else 1
    if name == "Float32" and _KERNEL is not None:
        return _float32_kernel_range(acc, da, db, start, end, chunk, s)
    with _QUIET:
        for pos, va, vb in _pair_chunks(da, db, itemsize, itemsize, start, end, chunk, s):
            a, b, ia, ib = _float_views(va, vb, name, s)
            if _same(va, vb):
                _identical_chunk(acc, a, pos, s, ulp=True)
                continue
            _float_chunk(acc, a, b, ia, ib, pos, s, ulp_div)
    return acc


def _decode(raw: memoryview, dt: DType) -> np.ndarray:
    """Raw bytes of one chunk -> values (float32 for BFloat16)."""
    if dt.name == "BFloat16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    assert dt.storage is not None  # internal: callers check decodable first
    return np.frombuffer(raw, dt.storage)


def _itemsize(dt: DType) -> int:
    assert dt.storage is not None  # internal: callers check decodable first
    return dt.storage.itemsize


def _exact_range(da: BinaryDump, db: BinaryDump, start: int, end: int, chunk: int, mismatch: bool) -> _Acc:
    """Metrics of elements ``start:end``: integers, Bool, Byte and quantized raw values,
    compared exactly; or (``mismatch``) two decodable dtypes that differ, as numbers."""
    s = _scratch(chunk)
    acc = _Acc(None)
    dta, dtb = da.dtype, db.dtype
    ka, kb = _itemsize(dta), _itemsize(dtb)
    is_float = _float_kind(dta) or _float_kind(dtb)
    with _QUIET:
        return _exact_loop(acc, da, db, ka, kb, start, end, chunk, s, mismatch, is_float)


def _exact_loop(acc: _Acc, da: BinaryDump, db: BinaryDump, ka: int, kb: int, start: int, end: int, chunk: int,
                s: _Scratch, mismatch: bool, is_float: bool) -> _Acc:
    dta, dtb = da.dtype, db.dtype
    for pos, va, vb in _pair_chunks(da, db, ka, kb, start, end, chunk, s):
        if not mismatch and _same(va, vb):
            _identical_chunk(acc, _decode(va, dta).astype(np.float64), pos, s, ulp=False)
            continue
        a = _decode(va, dta)
        b = _decode(vb, dtb)
        if is_float:
            a64 = a.astype(np.float64)
            b64 = b.astype(np.float64)
            fin = np.isfinite(a64) & np.isfinite(b64)
            if not fin.all():
                _count_nonfinite(acc, a64, b64, fin, pos)
            idx = np.flatnonzero(fin)
            _f64_metrics(acc, a64[idx], b64[idx], idx + pos, err32=True)
        else:
            _int_chunk(acc, a, b, pos, s)
    return acc


def _merge(accs: Sequence[_Acc]) -> _Acc:
    """One accumulator from the accumulators of consecutive element ranges, in order."""
    if len(accs) == 1:
        return accs[0]
    out = _Acc(accs[0].count_over)
    for a in accs:
        out.n_fin += a.n_fin
        if a.max_err > out.max_err:
            out.max_err, out.worst, out.worst_a, out.worst_b = a.max_err, a.worst, a.worst_a, a.worst_b
        out.max_abs = max(out.max_abs, a.max_abs)
        out.max_rel = max(out.max_rel, a.max_rel)
        out.sum_abs += a.sum_abs
        out.aa += a.aa
        out.ad += a.ad
        out.dd += a.dd
        out.scale = max(out.scale, a.scale)
        if a.max_ulp is not None:
            out.ulp_update(a.max_ulp)
        out.n_over += a.n_over
        out.n_diff += a.n_diff
        out.n_nonfinite += a.n_nonfinite
        if out.first_nonfinite is None:
            out.first_nonfinite = a.first_nonfinite
    return out


def _int_chunk(acc: _Acc, a: np.ndarray, b: np.ndarray, off: int, s: _Scratch) -> None:
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
    _float_chunk(acc, a32, b32, None, None, off, s, 1)
    if acc.scale >= 2.0**24:
        exact = float(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())
        acc.max_abs = max(before, exact)


def _count_nonfinite(acc: _Acc, a: np.ndarray, b: np.ndarray, both: np.ndarray, off: int) -> int:
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


def _compare_raw(da: BinaryDump, db: BinaryDump, base: Dict[str, object], chunk: int) -> VarDiff:
    """Sub-byte and complex dtypes: lar-prec cannot decode them, so only the bytes are compared."""
    step = max(chunk, 1 << 16)
    ndiff = 0
    with open(da.path, "rb") as fa, open(db.path, "rb") as fb:
        fa.seek(da.data_offset)
        fb.seek(db.data_offset)
        left = da.nbytes
        while left:
            k = min(step, left)
            x = fa.read(k)
            y = fb.read(k)
            if len(x) != k or len(y) != k:
                bad = da.path if len(x) != k else db.path
                raise DumpFormatError(bad, None, f"{k} more data bytes", "end of file")
            if x != y:
                ndiff += int(np.count_nonzero(np.frombuffer(x, np.uint8) != np.frombuffer(y, np.uint8)))
            left -= k
    note = f"{da.dtype.name} values are not decoded; raw bytes compared ({ndiff} byte(s) differ)"
    fields = dict(base)
    fields["note"] = "; ".join(x for x in (str(fields.get("note") or ""), note) if x)
    return VarDiff(**fields, status="ok", n_diff=ndiff, n_over=ndiff)  # type: ignore[arg-type]


def _var_job(var_id: int, fa: DumpFolder, fb: DumpFolder, index: int, piece: int) -> _Job:
    """The job of one var of two folders (missing vars are decided right away)."""
    da = fa[var_id] if var_id in fa else None
    db = fb[var_id] if var_id in fb else None
    base = _base_fields(da, db, index)
    if da is None or db is None:
        side = "b" if da is None else "a"
        where = fb.path if da is None else fa.path
        vd = VarDiff(**base, status="missing", only_in=side, note=f"only in {side.upper()} ({where})")  # type: ignore[arg-type]
        return _Job(base, done=vd, nbytes=(da or db).nbytes)  # type: ignore[union-attr]
    if da.title != db.title:
        if da.var.name != db.var.name:  # same title: same name, B's not parsed
            base["note"] = f"name differs: B calls it {db.var.name!r}"
    elif db.title is not da.title:
        # one copy of the (equal) title for both sides: the job keeps both dumps until the
        # var is compared, and a title is most of a dump's memory
        object.__setattr__(db, "title", da.title)
    return _plan(da, db, base, piece)


def _finish_var(job: _Job, parts: Sequence[object]) -> VarDiff:
    """:func:`_finish_job` plus the notes a report shows (dtype mismatch, quantized)."""
    vd = _finish_job(job, parts)
    da, db = job.da, job.db
    if vd.status == "dtype_mismatch" and da is not None and db is not None:
        extra = f"dtype {da.dtype.name} in A, {db.dtype.name} in B"
        if vd.max_err is not None:
            extra += ", values compared as numbers"
        vd = _with(vd, note="; ".join(x for x in (vd.note, extra) if x))
    if da is not None and da.dtype.is_quantized and vd.status not in ("dtype_mismatch", "missing"):
        vd = _with(vd, scale_unknown=True, note="; ".join(x for x in (vd.note, "scale unknown: raw quantized integers compared exactly") if x))
    return vd


# ============================================================================ folders


def _union_order(fa: DumpFolder, fb: DumpFolder) -> List[int]:
    """Execution order of the vars of both folders: A's order, with B-only vars placed
    right after the last of their inputs (B's own order otherwise)."""
    order = list(fa.ids)
    if not any(v not in fa for v in fb.files()):
        return order  # B's titles need not be read for their inputs
    only_b = [v for v in fb.ids if v not in fa]
    pos = {v: i for i, v in enumerate(order)}
    placed: List[Tuple[float, int, int]] = []
    for k, v in enumerate(only_b):
        after = max((pos[u] for u in fb.inputs_of(v) if u in pos), default=-1)
        placed.append((after + 0.5, k, v))
    merged: List[Tuple[float, int, int]] = [(float(i), 0, v) for i, v in enumerate(order)] + placed
    merged.sort()
    return [v for _, _, v in merged]


#: below this many bytes (both folders) a comparison runs in one process: starting workers
#: would cost more than it saves
PARALLEL_MIN_BYTES = 48 << 20


def _workers_for(jobs: Optional[int], total_bytes: int) -> int:
    """Worker processes for ``jobs`` (None: one per CPU, at most 8) and this much data."""
    if jobs is None:
        jobs = min(8, os.cpu_count() or 1)
    if jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    if jobs == 1 or total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return jobs


class _Failure:
    """An exception raised in a worker process, carried back by value: lar-prec's errors
    have keyword constructors that pickle cannot rebuild."""

    def __init__(self, exc: BaseException) -> None:
        self.cls = type(exc).__name__
        self.message = str(exc)
        self.fields = {k: getattr(exc, k) for k in ("path", "offset", "expected", "found") if hasattr(exc, k)}
        import traceback

        self.trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self) -> None:
        from lar_prec import errors

        if self.cls == "DumpFormatError" and {"path", "expected"} <= set(self.fields):
            f = self.fields
            raise DumpFormatError(f["path"], f.get("offset"), f["expected"], f.get("found", ""))
        cls = getattr(errors, self.cls, None)
        if isinstance(cls, type) and issubclass(cls, errors.LarPrecError):
            try:
                raise cls(self.message)
            except TypeError:
                raise errors.LarPrecError(self.message) from None
        raise RuntimeError(f"lar-prec worker failed:\n{self.trace}")


def _guarded(call: Tuple[Callable[..., object], tuple]) -> object:
    fn, args = call
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - carried back to the parent and re-raised there
        return _Failure(exc)


class _Workers:
    """Runs module-level functions over argument tuples, in order: in this process, or in
    forked worker processes. Processes, not threads: the per-chunk numpy calls are short,
    and threads spent their time taking turns on the GIL."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pool: Optional[object] = None

    def __enter__(self) -> "_Workers":
        if self.n > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # forking a process that runs other threads can copy a lock another thread holds,
            # and spawn/forkserver would re-import the caller's __main__: then use threads,
            # which still overlap part of the numpy work
            if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
                ctx = multiprocessing.get_context("fork")
                self.pool = ProcessPoolExecutor(max_workers=self.n, mp_context=ctx)
            else:
                self.pool = ThreadPoolExecutor(max_workers=self.n, thread_name_prefix="lar-prec")
        return self

    def map(self, fn: Callable[..., object], args: Sequence[tuple], sizes: Optional[Sequence[int]] = None) -> Iterator[object]:
        """``fn(*a)`` for every ``a``, results in order. Tasks of fewer than
        ``SMALL_TASK_ELEMENTS`` values (``sizes``) run here, in this process, while the
        workers take the big ones: shipping a tiny var to a worker costs more than comparing it."""
        if self.pool is None:
            return (fn(*a) for a in args)
        futures = {}
        for i, a in enumerate(args):
            if sizes is None or sizes[i] >= SMALL_TASK_ELEMENTS:
                futures[i] = self.pool.submit(_guarded, (fn, a))  # type: ignore[attr-defined]

        def results() -> Iterator[object]:
            for i, a in enumerate(args):
                f = futures.pop(i, None)
                r = f.result() if f is not None else fn(*a)
                if isinstance(r, _Failure):
                    r.reraise()
                yield r

        return results()

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)  # type: ignore[attr-defined]


def _can_fork() -> bool:
    """Forking is safe only from a single-threaded process (a fork copies locks other
    threads may hold), and spawn/forkserver would re-import the caller's __main__."""
    import multiprocessing

    return threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


def _run_shared(
    fn: Callable[..., object], args: Sequence[tuple], n_forked: int, on_result: Optional[Callable[[int], None]] = None,
    sink: Optional[Callable[[int, object], None]] = None, forked_limit: Optional[int] = None,
) -> List[object]:
    """``[fn(*a) for a in args]`` on this process and ``n_forked`` forked ones.

    The tasks form one list that forked workers take from the front and this process from
    the back, one at a time under a shared lock, until they meet: every CPU stays busy, the
    load balances itself whatever the task sizes, and only indices and small results cross
    processes (a worker has the task list from the fork). ``on_result(i)`` is called here
    as results arrive; with ``sink``, each result is handed to ``sink(i, result)`` as it
    arrives instead of being kept (the list returned is then all None). Forked workers take
    only tasks before ``forked_limit`` (the rest are this process's). Errors in a worker are
    re-raised here.
    """
    n = len(args)
    out: List[object] = [None] * n
    keep: Callable[[int, object], None] = sink if sink is not None else out.__setitem__
    if n_forked == 0:
        with _QUIET:  # once, not per task
            for i, a in enumerate(args):
                keep(i, fn(*a))
                if on_result is not None:
                    on_result(i)
        return out

    import multiprocessing
    import queue as _queue

    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    bounds = ctx.RawArray("q", [0, n])  # [next task from the front, end of the untaken tasks]
    results: "multiprocessing.queues.Queue[object]" = ctx.Queue()

    limit = n if forked_limit is None else forked_limit

    def take(front: bool) -> int:
        with lock:
            lo, hi = bounds[0], bounds[1]
            if lo >= hi or (front and lo >= limit):
                return -1
            if front:
                bounds[0] = lo + 1
                return lo
            bounds[1] = hi - 1
            return hi - 1

    def work() -> None:
        try:
            while True:
                i = take(True)
                if i < 0:
                    break
                results.put((i, _guarded((fn, args[i]))))
        finally:
            results.put(None)
            results.close()
            results.join_thread()

    procs = [ctx.Process(target=work, daemon=True) for _ in range(n_forked)]
    finished = 0
    quiet = False

    def store(item: object, block: bool) -> None:
        nonlocal finished
        if item is None:
            finished += 1
            return
        i, r = item  # type: ignore[misc]
        if isinstance(r, _Failure):
            r.reraise()
        keep(i, r)
        if on_result is not None:
            on_result(i)

    try:
        for p in procs:
            p.start()
        # numpy's error state (and with it numpy, if the tasks have not needed it yet) only
        # now: the worker already runs while this process imports it
        _QUIET.__enter__()
        quiet = True
        while True:
            i = take(False)
            if i < 0:
                break
            keep(i, fn(*args[i]))
            if on_result is not None:
                on_result(i)
            while True:  # what the workers finished meanwhile (keeps the pipe from filling)
                try:
                    store(results.get_nowait(), False)
                except _queue.Empty:
                    break
        while finished < len(procs):
            store(results.get(), True)
    finally:
        if quiet:
            _QUIET.__exit__()
        for p in procs:
            if p.is_alive() and finished < len(procs):
                p.terminate()
            p.join()
    return out


def _run_piece_task(job: "_Job", k: int, chunk: int, count_over: Optional[float]) -> object:
    return _run_piece(job, k, chunk, count_over)


def _count_task(da: BinaryDump, db: BinaryDump, start: int, end: int, chunk: int, threshold: float) -> int:
    return _count_range(da, db, start, end, chunk, threshold)


def compare_folders(
    dir_a: PathLike,
    dir_b: PathLike,
    *,
    threshold: Union[str, float, Threshold, None] = "auto",
    chunk_elements: int = DEFAULT_CHUNK,
    jobs: Optional[int] = 1,
    on_progress: Optional[ProgressHook] = None,
) -> Comparison:
    """Compare every var of two ``--bin-io-dump`` folders.

    Args:
        dir_a: the reference folder (e.g. the naive run).
        dir_b: the folder compared against it.
        threshold: ``"auto"`` (chosen from the data, docs/threshold.md), a number, or a
            :class:`Threshold`.
        chunk_elements: values read per chunk; memory per worker is about 30 bytes times this.
        jobs: worker processes (None: one per CPU). Big vars are split into ranges so that
            one var alone keeps every worker busy; results do not depend on ``jobs``.
            Comparisons under ``PARALLEL_MIN_BYTES`` always run in this process.
        on_progress: called as ``on_progress(done_bytes, total_bytes)`` after each var.

    Returns:
        A :class:`Comparison` with one :class:`VarDiff` per var in execution order.

    Raises:
        DumpFolderError: a folder is missing, not a directory, holds no dumps, or the two
            folders have no var in common.
        DumpFormatError: a file is not a valid dump (the message names it).
        UsageError: bad ``threshold``, ``chunk_elements`` or ``jobs``.
    """
    if chunk_elements < 1:
        raise UsageError(f"chunk_elements must be >= 1, got {chunk_elements}")
    if jobs is not None and jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    fixed = parse_threshold(threshold)
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    for f in (fa, fb):
        if len(f) == 0:
            extra = f" ({len(f.stray)} other entries)" if f.stray else ""
            raise DumpFolderError(f"no binary dump files in {f.path}{extra}: expected files named like 00000b written by --bin-io-dump")
    common = set(fa.files()) & set(fb.files())
    if not common:
        raise DumpFolderError(
            f"{fa.path} and {fb.path} have no var in common ({len(fa)} and {len(fb)} vars): not dumps of the same model?"
        )
    notes = _folder_notes(fa, fb)
    order = _union_order(fa, fb)
    count_over = fixed.value if fixed is not None else None
    # one pass reads B's headers and plans every var. The folders forget each header as its
    # job takes it (tens of thousands of vars: only the jobs hold dumps, until compared),
    # except those the second pass counts again (auto threshold)
    plans: List[_Job] = []
    for i, v in enumerate(order):
        j = _var_job(v, fa, fb, i, 1 << 62)
        plans.append(j)
        if count_over is not None or j.kind not in ("float", "mismatch"):
            fa.forget(v)
            fb.forget(v)
    total = sum(j.nbytes for j in plans)
    n_workers = _workers_for(jobs, total)
    if n_workers > 1:
        # big vars are split only to feed several workers
        for i, j in enumerate(plans):
            if j.da is not None and j.db is not None and j.kind != "raw" and j.da.size > PIECE_ELEMENTS:
                plans[i] = _plan(j.da, j.db, j.base, PIECE_ELEMENTS)
    tasks = [(j, k, chunk_elements, count_over) for j in plans for k in range(len(j.pieces) if j.done is None else 0)]
    diffs: List[Optional[VarDiff]] = [None] * len(plans)

    def finish(i: int, parts: Sequence[object]) -> None:
        # a compared var keeps only its VarDiff: its job lets go of the dumps (and titles)
        j = plans[i]
        diffs[i] = _finish_var(j, parts)
        j.release()

    if n_workers > 1 and _can_fork():
        # byte share of each task, for progress (a var's bytes spread over its pieces)
        share = [t[0].nbytes / len(t[0].pieces) for t in tasks]
        task_var: List[int] = []
        for i, j in enumerate(plans):
            if j.done is not None:
                finish(i, [])
            else:
                task_var.extend([i] * len(j.pieces))
        parts: Dict[int, List[object]] = {}
        seen = [0.0]

        def arrived(t: int, r: object) -> None:
            # a var is finished as soon as all its pieces are in, whichever process ran them
            i = task_var[t]
            got = parts.setdefault(i, [])
            got.append((t, r))
            if len(got) == len(plans[i].pieces):
                del parts[i]
                got.sort(key=lambda x: x[0])
                finish(i, [x[1] for x in got])
            if on_progress is not None:
                seen[0] += share[t]
                on_progress(int(seen[0]), total)

        # workers take the big pieces, this process the small ones (and big ones from the
        # back): a worker that touched the jobs of thousands of small vars would copy most
        # of this process's pages (20,000 small vars: 150 MB for the two, not 90) for no gain
        # With the C kernel, workers take only float32 pieces, which need no numpy: forked
        # before this process imports numpy, they work while it does, and never import it.
        sizes = [t[0].pieces[t[1]][1] - t[0].pieces[t[1]][0] for t in tasks]
        if _KERNEL is None:
            import numpy  # noqa: F401  # before the fork: the workers need it and inherit it
        forked = [sizes[t] >= SMALL_TASK_ELEMENTS and (_KERNEL is None or (tasks[t][0].kind == "float" and tasks[t][0].da.dtype.name == "Float32"))
                  for t in range(len(tasks))]
        order = [t for t in range(len(tasks)) if forked[t]]
        n_big = len(order)
        order += [t for t in range(len(tasks)) if not forked[t]]
        _run_shared(_run_piece_task, [tasks[t] for t in order], n_workers - 1 if n_big else 0,
                    sink=lambda k, r: arrived(order[k], r), forked_limit=n_big)
        if on_progress is not None:
            on_progress(total, total)
    else:
        done = 0
        sizes = [t[0].pieces[t[1]][1] - t[0].pieces[t[1]][0] for t in tasks]
        with _Workers(n_workers) as workers, _QUIET:
            results = workers.map(_run_piece_task, tasks, sizes)
            for i, j in enumerate(plans):
                n = len(j.pieces) if j.done is None else 0
                done += j.nbytes
                finish(i, [next(results) for _ in range(n)])
                if on_progress is not None:
                    on_progress(done, total)
    thr = fixed if fixed is not None else choose_threshold(diffs)  # type: ignore[arg-type]
    # judged in place: one list of VarDiffs, not two
    for i, d in enumerate(diffs):
        diffs[i] = _judge(d, thr)  # type: ignore[arg-type]
    judged = _recount(fa.path, fb.path, diffs, chunk_elements, folders=(fa, fb), jobs=n_workers)  # type: ignore[arg-type]
    return Comparison(dir_a=fa.path, dir_b=fb.path, diffs=tuple(judged), threshold=thr, notes=tuple(notes), chunk_elements=chunk_elements)


def _folder_notes(fa: DumpFolder, fb: DumpFolder) -> List[str]:
    notes = []
    for tag, f in (("A", fa), ("B", fb)):
        if f.stray:
            names = ", ".join(p.name for p in f.stray[:3]) + (" ..." if len(f.stray) > 3 else "")
            notes.append(f"{tag} ({f.path}): {len(f.stray)} entries that are not dumps ignored: {names}")
        if f.incomplete:
            notes.append(f"{tag} ({f.path}): marked incomplete (the run did not finish)")
        if f.input_files:
            notes.append(f"{tag} ({f.path}): {len(f.input_files)} MGB_DUMP_INPUT '-inp' files not compared as vars (they repeat their input vars)")
    only_a = len(set(fa.files()) - set(fb.files()))
    only_b = len(set(fb.files()) - set(fa.files()))
    if only_a or only_b:
        notes.append(f"{only_a} var(s) only in A, {only_b} only in B (status 'missing')")
    return notes


def compare_arrays(
    a: np.ndarray,
    b: np.ndarray,
    *,
    threshold: Union[float, Threshold, str, None] = None,
    dtype: Optional[str] = None,
    var_id: int = 0,
    name: str = "",
) -> VarDiff:
    """Compare two in-memory arrays with the same metrics as :func:`compare_folders`.

    Args:
        a: reference values.
        b: values compared against ``a``.
        threshold: a number, a :class:`Threshold`, ``"auto"`` or None (auto): decides the status.
        dtype: MegDNN dtype name; by default inferred from ``a.dtype`` (float32 -> Float32).
        var_id: id given to the result.
        name: name given to the result.

    Returns:
        The :class:`VarDiff` (``opr``/``opr_type`` empty, no inputs).
    """
    import tempfile

    from lar_prec.iodump import VarInfo, format_title, write_binary_dump

    a = np.asarray(a)
    b = np.asarray(b)
    dt_a = dtype_by_name(dtype) if dtype else _infer_dtype(a)
    dt_b = dtype_by_name(dtype) if dtype else _infer_dtype(b)
    # one code path for files and arrays: the arrays go through a temporary dump pair
    with tempfile.TemporaryDirectory(prefix="lar-prec-arrays-") as tmp:
        paths = []
        for tag, arr, dt in (("a", a, dt_a), ("b", b, dt_b)):
            info = VarInfo(
                id=var_id, name=name or "array", owner="array", opr_type="", opr_id=None, dtype=dt.name,
                shape=tuple(arr.shape), layout=None, slot=0, comp_node='CompNode("cpu0:0" from "cpu0:0")', storage="s",
            )
            d = Path(tmp) / tag
            d.mkdir()
            arr_w = arr if arr.size else arr.reshape(arr.shape)
            if arr.ndim == 0:
                arr_w = arr.reshape(())
            write_binary_dump(d / f"{var_id:06x}", arr_w, format_title(info), dt.code)
            paths.append(d)
        cmp = compare_folders(paths[0], paths[1], threshold="auto" if threshold is None else threshold)
        return replace(cmp.diffs[0], opr="", opr_type="", name=name)


def _infer_dtype(arr: np.ndarray) -> DType:
    for code, d in DTYPES.items():
        if d.storage is not None and d.storage == arr.dtype and d.name != "BFloat16" and d.kind != "quantized":
            if d.kind == "byte":
                continue
            return d
    raise UsageError(f"no MegDNN dtype for numpy {arr.dtype}; pass dtype=")


# ============================================================================ thresholds


def apply_threshold(diffs: Sequence[VarDiff], thr: Threshold) -> List[VarDiff]:
    """Set ``status``, ``threshold`` (and ``n_over`` where it is known without reading) of
    every value-compared var from ``thr``. Structural statuses are kept."""
    return [_judge(d, thr) for d in diffs]


def _judge(d: VarDiff, thr: Threshold) -> VarDiff:
    """:func:`apply_threshold` for one var."""
    if d.status in ("missing", "shape_mismatch"):
        return d
    if d.status == "dtype_mismatch":
        return _with(d, threshold=thr.for_var(d.dtype, d.scale) if d.max_err is not None else None)
    dt = _dt_or_none(d.dtype)
    if dt is not None and not _float_kind(dt):
        # exact types: any differing element diverges, whatever the float threshold
        status = "divergent" if (d.n_diff or 0) > 0 else "ok"
        if d.n_nonfinite:
            status = "nonfinite"
        return _with(d, status=status, threshold=0.0, n_over=d.n_diff)
    t = thr.for_var(d.dtype, d.scale)
    # compared like compare_binary_iodump's `err > max_err`: in float32
    t32 = float(np.float32(t))
    status = "ok"
    if d.n_nonfinite:
        status = "nonfinite"
    elif d.max_err is not None and d.max_err > t32:
        status = "divergent"
    n_over = d.n_over
    if d.max_err is None or d.max_err <= t32:
        n_over = 0
    elif d.n_over is not None and d.threshold == t:
        n_over = d.n_over
    else:
        n_over = None  # needs a recount from the files
    return _with(d, status=status, threshold=t, n_over=n_over)


def _dt_or_none(name: str) -> Optional[DType]:
    try:
        return dtype_by_name(name)
    except UsageError:
        return None


class _RootCounter:
    """Counts, for any threshold, the vars above it whose inputs are all below it (inputs
    outside the set do not block): vectorised, since auto tries dozens of thresholds."""

    def __init__(self, diffs: Sequence[VarDiff]) -> None:
        pos = {d.id: k for k, d in enumerate(diffs)}
        self.err = np.array([d.norm_err or 0.0 for d in diffs], dtype=np.float64)
        src, dst = [], []
        for k, d in enumerate(diffs):
            for u in d.inputs:
                j = pos.get(u)
                if j is not None and j != k:
                    src.append(j)
                    dst.append(k)
        self.src = np.array(src, dtype=np.intp)
        self.dst = np.array(dst, dtype=np.intp)

    def roots(self, t: float) -> int:
        over = self.err > t
        blocked = np.zeros(over.size, dtype=bool)
        blocked[self.dst[over[self.src]]] = True
        return int(np.count_nonzero(over & ~blocked))


def choose_threshold(diffs: Sequence[VarDiff]) -> Threshold:
    """The auto threshold for measured vars (docs/threshold.md).

    Per float dtype the threshold lies in a fixed band of ulps (Float32: 32 to 80 eps,
    Float16/BFloat16: 2 to 8 eps). Inside the band it is placed where the vars' errors
    (``norm_err``: ``max_err`` over ``min(1, scale)``) leave a gap: among the band's ends and
    the log-midpoints of consecutive errors inside it, the one giving the fewest roots wins,
    then the one farthest (in log) from any var's error, then the higher. Exact dtypes get 0.
    """
    per: Dict[str, float] = {}
    parts: List[str] = []
    dtypes_present = []
    for d in diffs:
        if d.dtype in _FLOAT_NAMES and d.dtype not in dtypes_present:
            dtypes_present.append(d.dtype)
    for name in _FLOAT_NAMES:
        lo, hi = _band(name)
        mine = [d for d in diffs if d.dtype == name and d.max_err is not None and d.status not in ("missing", "shape_mismatch")]
        errs = sorted({d.norm_err for d in mine if d.norm_err is not None and d.norm_err > 0})  # type: ignore[misc]
        if name not in dtypes_present:
            per[name] = hi
            continue
        cands = {lo, hi}
        logs = [math.log10(e) for e in errs]
        gaps = [(y - x, 10 ** ((x + y) / 2)) for x, y in zip(logs, logs[1:])]
        # the widest gaps inside the band are the only places worth trying (bounded work)
        inside = sorted((g for g in gaps if lo < g[1] < hi), reverse=True)[:MAX_CANDIDATES]
        cands.update(mid for _w, mid in inside)
        best = None
        counter = _RootCounter(mine)
        log_arr = np.array(logs, dtype=np.float64)
        for t in sorted(cands):
            roots = counter.roots(t)
            lt = math.log10(t)
            margin = float(np.abs(log_arr - lt).min()) if log_arr.size else float("inf")
            key = (roots, -margin, -t)
            if best is None or key < best[0]:
                best = (key, t, roots)
        assert best is not None  # internal: cands is never empty
        t = float("%.3g" % best[1])
        t = min(max(t, lo), hi)
        per[name] = t
        below = [e for e in errs if e <= t]
        above = [e for e in errs if e > t]
        lo_eps, hi_eps = AUTO_BAND_EPS[name]
        parts.append(
            f"{name} {t:.3g} (band {lo:.3g}..{hi:.3g} = {lo_eps:g}..{hi_eps:g} eps; "
            + (f"largest var error below it {max(below):.3g}" if below else "no var error below it")
            + (f", smallest above {min(above):.3g}" if above else ", none above")
            + f"; {best[2]} root(s))"
        )
    # the headline: Float32's, or the float dtype the model actually uses
    head = "Float32" if "Float32" in dtypes_present or not dtypes_present else dtypes_present[0]
    value = per[head]
    reason = (
        "auto: " + ("; ".join(parts) if parts else "no float vars")
        + "; each var's threshold is scaled by min(1, its largest |value|)"
        + "; integer, Bool and quantized types compare exactly"
    )
    for d in diffs:
        dt = _dt_or_none(d.dtype)
        if dt is not None and not _float_kind(dt):
            per.setdefault(d.dtype, 0.0)
    return Threshold(value=value, mode="auto", per_dtype=per, scaled=True, reason=reason)


# ============================================================================ second pass


def _recount(
    dir_a: Path,
    dir_b: Path,
    diffs: Sequence[VarDiff],
    chunk: int,
    folders: Optional[Tuple[DumpFolder, DumpFolder]] = None,
    jobs: int = 1,
) -> List[VarDiff]:
    """Fill ``n_over`` where it is unknown: count elements above each var's threshold."""
    todo = [i for i, d in enumerate(diffs) if d.n_over is None and d.threshold is not None and d.max_err is not None]
    if not todo:
        return list(diffs)
    fa, fb = folders if folders is not None else (DumpFolder(dir_a), DumpFolder(dir_b))
    out = list(diffs)
    tasks: List[Tuple[int, BinaryDump, BinaryDump, int, int, float]] = []
    piece = max(chunk, PIECE_ELEMENTS) if jobs > 1 else 1 << 62
    for i in todo:
        d = out[i]
        da, db = fa[d.id], fb[d.id]
        if da.dtype.code != db.dtype.code:
            out[i] = replace(d, n_over=scan_over(da, db, d.threshold or 0.0, chunk=chunk).count)
            continue
        for start in range(0, da.size, piece):
            tasks.append((i, da, db, start, min(da.size, start + piece), d.threshold or 0.0))

    counts: Dict[int, int] = {}
    args = [(t[1], t[2], t[3], t[4], chunk, t[5]) for t in tasks]
    n = jobs if len(tasks) > 1 else 1
    if n > 1 and _can_fork():
        got: Iterable[object] = _run_shared(_count_task, args, n - 1)
    else:
        workers = _Workers(n).__enter__()
        try:
            got = list(workers.map(_count_task, args, [t[4] - t[3] for t in tasks]))
        finally:
            workers.__exit__(None, None, None)
    for (i, *_rest), c in zip(tasks, got):
        counts[i] = counts.get(i, 0) + c  # type: ignore[operator]
    for i, c in counts.items():
        out[i] = _with(out[i], n_over=c)
    return out


@dataclass(frozen=True)
class OverScan:
    """Elements above a threshold, as ``compare_binary_iodump`` sees them (float32 error)."""

    count: int
    first_index: Optional[Tuple[int, ...]]
    first_a: Optional[np.float32]
    first_b: Optional[np.float32]
    first_err: Optional[np.float32]


def scan_over(da: BinaryDump, db: BinaryDump, threshold: float, *, chunk: int = DEFAULT_CHUNK, stop_at_first: bool = False) -> OverScan:
    """Count the elements whose float32 MegEngine error exceeds ``threshold`` and find the
    first one in C order, computed exactly like ``compare_binary_iodump`` (values cast to
    float32). Positions NaN/Inf on both sides in the same way are not counted; positions
    with a NaN on one side are (their error is NaN, which is not ``> threshold``: they are
    reported by the ``nonfinite`` status instead).
    """
    if not (da.dtype.decodable and db.dtype.decodable):
        return OverScan(0, None, None, None, None)
    thr = np.float32(threshold)
    exact = not (_float_kind(da.dtype) or _float_kind(db.dtype))
    count = 0
    first: Optional[Tuple[int, np.float32, np.float32, np.float32]] = None
    ka = 2 if da.dtype.name == "BFloat16" else da.dtype.storage.itemsize  # type: ignore[union-attr]
    kb = 2 if db.dtype.name == "BFloat16" else db.dtype.storage.itemsize  # type: ignore[union-attr]
    fa, fb = _open(da), -1
    try:
        fb = _open(db)
        for start in range(0, da.size, chunk):
            n = min(chunk, da.size - start)
            ra = bytearray(n * ka)
            rb = bytearray(n * kb)
            _read_exact(fa, memoryview(ra), da.data_offset + start * ka, da.file)
            _read_exact(fb, memoryview(rb), db.data_offset + start * kb, db.file)
            a = _decode(memoryview(ra), da.dtype).astype(np.float32)
            b = _decode(memoryview(rb), db.dtype).astype(np.float32)
            with np.errstate(all="ignore"):
                vdiv = np.maximum(np.maximum(np.abs(a), np.abs(b)), np.float32(1))
                err = np.abs(a - b) / vdiv
            if exact and threshold == 0:
                # integers compare exactly, also where float32 cannot tell them apart
                over = _decode(memoryview(ra), da.dtype) != _decode(memoryview(rb), db.dtype)
            else:
                over = err > thr
            k = int(np.count_nonzero(over))
            if k:
                if first is None:
                    j = int(np.argmax(over))
                    first = (start + j, a[j], b[j], err[j])
                count += k
                if stop_at_first:
                    break
    finally:
        os.close(fa)
        if fb >= 0:
            os.close(fb)
    if first is None:
        return OverScan(count, None, None, None, None)
    return OverScan(count, _unravel(first[0], tuple(da.shape)), first[1], first[2], first[3])


# ============================================================================ compare_binary_iodump text


def _me_title(title: str) -> str:
    import textwrap

    return "\n  ".join(textwrap.wrap(title))


def _me_sum(d: BinaryDump) -> np.float32:
    """``v.sum()`` of the whole tensor cast to float32, as compare_binary_iodump computes it."""
    if not d.dtype.decodable:
        return np.float32("nan")
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(d.array(), dtype=np.float32).sum()


def megengine_text(comparison: Comparison, *, chunk_elements: int = DEFAULT_CHUNK) -> Iterator[str]:
    """Yield what ``python -m megengine.tools.compare_binary_iodump A B -e T`` prints, one
    failure at a time, so its ``accuracy_shake_var_tree`` (and ``lar-prec tree``) read it.

    Files are paired by name in sorted order as there, ``-inp`` files included. A file is
    printed when lar-prec's status for it is not ``ok``: ``not equal`` with the first element
    above the var's own threshold (``T`` = that threshold, so with a fixed threshold this is
    byte for byte the original's output), ``not finite`` only when the NaN/Inf positions
    really differ (the original also flags NaN at the same place on both sides),
    ``shape mismatch``. Files in one folder only, which make the original stop, are skipped.
    """
    fa, fb = DumpFolder(comparison.dir_a), DumpFolder(comparison.dir_b)
    names: Dict[str, Tuple[Path, Path]] = {}
    pa = {p.name: p for p in list(fa.paths().values()) + list(fa.input_files.values())}
    pb = {p.name: p for p in list(fb.paths().values()) + list(fb.input_files.values())}
    for n in sorted(set(pa) & set(pb)):
        names[n] = (pa[n], pb[n])
    thr = comparison.threshold
    for n, (path_a, path_b) in names.items():
        from lar_prec.iodump import read_binary_dump

        da, db = read_binary_dump(path_a), read_binary_dump(path_b)
        if da.input_index is None and da.id in comparison:
            d = comparison[da.id]
        else:
            base = _base_fields(da, db, 0)
            d = _compare_var_dumps(da, db, base, chunk_elements)
            d = apply_threshold([d], thr)[0]
            if da.id in comparison and comparison[da.id].scale is not None and d.threshold is not None and thr.scaled:
                # an input as seen by its consumer: hold it to the input var's own threshold
                d = apply_threshold([replace(d, scale=comparison[da.id].scale)], thr)[0]
        if d.status in ("ok", "missing"):
            continue
        name = "{}: \n{}\n{}\n".format(str(path_a), _me_title(da.title), _me_title(db.title))
        if d.status == "nonfinite":
            yield "{} not finite: sum={} vs sum={}".format(name, _me_sum(da), _me_sum(db))
        elif d.status == "shape_mismatch":
            yield "{} shape mismatch: {} vs {}".format(name, tuple(da.shape), tuple(db.shape))
        else:
            t = d.threshold if d.threshold is not None else 0.0
            scan = scan_over(da, db, t, chunk=chunk_elements, stop_at_first=True)
            if scan.first_index is None:
                continue
            yield "{} not equal: shape={} nonequal_idx={} v0={} v1={} err={}".format(
                name, tuple(da.shape), scan.first_index, scan.first_a, scan.first_b, scan.first_err
            )


@dataclass
class _Job:
    """One var to compare: either already decided from the headers (``done``) or a value
    comparison split into element ranges (``pieces``) that can run in parallel."""

    base: Dict[str, object]
    done: Optional[VarDiff] = None
    da: Optional[BinaryDump] = None
    db: Optional[BinaryDump] = None
    kind: str = ""  # "float" | "exact" | "mismatch" | "raw"
    pieces: Tuple[Tuple[int, int], ...] = ()
    nbytes: int = 0

    def release(self) -> None:
        """Let go of the dumps and fields once the var is finished (its pieces stay)."""
        self.base = {}
        self.done = self.da = self.db = None


def _plan(da: BinaryDump, db: BinaryDump, base: Dict[str, object], piece: int) -> _Job:
    """Decide from the headers what comparing two dumps of one var takes."""
    nbytes = da.nbytes + db.nbytes
    if tuple(da.shape) != tuple(db.shape):
        dtype_b = db.dtype.name if db.dtype.name != da.dtype.name else None
        vd = VarDiff(**base, status="shape_mismatch", shape_b=tuple(db.shape), dtype_b=dtype_b)  # type: ignore[arg-type]
        return _Job(base, done=vd, nbytes=nbytes)
    if da.dtype.code != db.dtype.code:
        if not (da.dtype.decodable and db.dtype.decodable) or "complex" in (da.dtype.kind, db.dtype.kind):
            vd = VarDiff(**base, status="dtype_mismatch", dtype_b=db.dtype.name)  # type: ignore[arg-type]
            return _Job(base, done=vd, nbytes=nbytes)
        kind = "mismatch"
    elif not da.dtype.decodable or da.dtype.kind == "complex":
        return _Job(base, da=da, db=db, kind="raw", pieces=((0, da.size),), nbytes=nbytes)
    else:
        kind = "float" if _float_kind(da.dtype) else "exact"
    n = da.size
    step = max(1, piece)
    pieces = tuple((i, min(n, i + step)) for i in range(0, n, step)) or ((0, 0),)
    return _Job(base, da=da, db=db, kind=kind, pieces=pieces, nbytes=nbytes)


def _run_piece(job: _Job, k: int, chunk: int, count_over: Optional[float]) -> object:
    """Measure piece ``k`` of a job (a :class:`_Acc`, or the VarDiff of a raw comparison)."""
    assert job.da is not None and job.db is not None  # internal: done jobs have no pieces
    start, end = job.pieces[k]
    if job.kind == "float":
        return _float_range(job.da, job.db, start, end, chunk, count_over)
    if job.kind == "raw":
        return _compare_raw(job.da, job.db, job.base, chunk)
    return _exact_range(job.da, job.db, start, end, chunk, job.kind == "mismatch")


def _finish_job(job: _Job, parts: Sequence[object]) -> VarDiff:
    """The VarDiff of a job from the results of its pieces, in order."""
    if job.done is not None:
        return job.done
    if job.kind == "raw":
        return parts[0]  # type: ignore[return-value]
    assert job.da is not None and job.db is not None  # internal
    acc = _merge(parts)  # type: ignore[arg-type]
    vd = _finish(acc, job.base, job.da.shape, status="ok")
    if job.kind == "exact":
        vd = _with(vd, n_diff=acc.n_diff, n_over=acc.n_diff)
    elif job.kind == "mismatch":
        vd = _with(vd, status="dtype_mismatch", dtype_b=job.db.dtype.name)
    return vd


def _compare_var_dumps(da: BinaryDump, db: BinaryDump, base: Dict[str, object], chunk: int, count_over: Optional[float] = None) -> VarDiff:
    """Compare the values of two dumps of one var (shape, dtype, then values), in one go."""
    job = _plan(da, db, base, max(da.size, 1))
    return _finish_job(job, [_run_piece(job, k, chunk, count_over) for k in range(len(job.pieces))] if job.done is None else [])
