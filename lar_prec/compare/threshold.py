"""The rule that separates ``ok`` from ``divergent``: fixed, or chosen from the data (auto).

:class:`Threshold` is the rule, :func:`parse_threshold` reads ``--threshold``,
:func:`choose_threshold` is the automatic choice (docs/threshold.md: a band of ulps per float
dtype, the threshold put where the vars' errors leave a gap and the fewest roots appear) and
:func:`judge` applies a rule to one measured var. Works on any records with the fields of
:class:`~lar_prec.compare.VarDiff` (``dtype``, ``max_err``, ``scale``, ``norm_err``, ...),
so it does not import compare's records (only the engine's optional C kernel, where the
auto rule's columns are laid out and counted).
"""
from __future__ import annotations

import bisect
import math
import operator
import struct
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lar_prec.compare.engine.scan import KERNEL
from lar_prec.errors import UsageError
from lar_prec.dumps.dtypes import DType, dtype_by_name

#: auto threshold: at most this many gaps between var errors are tried per dtype
MAX_CANDIDATES = 64

#: up to this many vars the auto rule goes record by record; above, by columns in the C kernel
#: (where it is built): the same decisions (tests/compare/test_auto_columns.py) at a twentieth of
#: the time per var, a Python pass over each record costing more than the rule's arithmetic
RECORDS_MAX = 64

#: below this magnitude the auto threshold stops shrinking with the var's scale
SCALE_FLOOR = 1e-6

FLOAT_NAMES = ("Float32", "Float16", "BFloat16")
_EPS = {"Float32": 2.0**-23, "Float16": 2.0**-10, "BFloat16": 2.0**-7}
#: auto-threshold bands in units of the dtype's eps (docs/threshold.md explains the numbers)
AUTO_BAND_EPS = {"Float32": (32.0, 80.0), "Float16": (2.0, 8.0), "BFloat16": (2.0, 8.0)}


def is_float_kind(dt: DType) -> bool:
    """True for Float32, Float16 and BFloat16 (the dtypes a threshold applies to)."""
    return dt.kind == "float"


def dtype_or_none(name: str) -> Optional[DType]:
    """The MegDNN dtype called ``name``, or None when lar-prec does not know it."""
    try:
        return dtype_by_name(name)
    except UsageError:
        return None


#: no auto threshold is below this many eps of its dtype (times the var's scale factor): the
#: edge rule's guard (:mod:`lar_prec.compare.growth`) under each band
FLOOR_EPS = {"Float32": 16.0, "Float16": 1.0, "BFloat16": 1.0}


def window(dtype: str) -> Tuple[float, float]:
    """(floor, band's top) of float dtype ``dtype``: where a var's auto threshold lies, unless
    the edge rule widened it above the band (times the var's scale factor)."""
    return FLOOR_EPS[dtype] * _EPS[dtype], band(dtype)[1]


def band(dtype: str) -> Tuple[float, float]:
    """The auto band of float dtype ``dtype`` as (low, high) values of ``max_err``."""
    lo, hi = AUTO_BAND_EPS[dtype]
    return lo * _EPS[dtype], hi * _EPS[dtype]


def scale_factor(scale: Optional[float]) -> float:
    """``min(1, max(scale, SCALE_FLOOR))``: what a var's auto threshold is multiplied by."""
    return 1.0 if scale is None else min(1.0, max(float(scale), SCALE_FLOOR))


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
    #: dump-only auto: vars that make error by the edge rule (:mod:`lar_prec.compare.growth`),
    #: var id -> how many times what their inputs explain; roots even behind a divergent input
    made: Mapping[int, float] = field(default_factory=dict, hash=False, compare=False)
    #: ``--pass-ratio``: a float var passes when at least this share of its elements is within
    #: its threshold (1: all of them)
    pass_ratio: float = 1.0

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
        per = {n: value for n in FLOAT_NAMES}
        reason = "fixed: --threshold %g on max_err for every float dtype, like compare_binary_iodump -e %g" % (value, value)
        if value == 0:
            reason = "fixed 0: bitwise, any difference diverges"
        return cls(value=value, mode="fixed", per_dtype=per, scaled=False, reason=reason + "; integer, Bool and quantized types compare exactly")

    def for_dtype(self, dtype: str) -> float:
        """The base threshold of ``dtype`` (0.0 for exact types)."""
        if dtype in self.per_dtype:
            return float(self.per_dtype[dtype])
        dt = dtype_or_none(dtype)
        if dt is not None and is_float_kind(dt):
            return self.value if self.mode == "fixed" else band(dtype)[1]
        return 0.0

    def for_var(self, dtype: str, scale: Optional[float]) -> float:
        """The threshold one var of ``dtype`` and largest magnitude ``scale`` is held to."""
        base = self.for_dtype(dtype)
        if self.scaled and scale is not None:
            base *= scale_factor(scale)
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
            **({"pass_ratio": self.pass_ratio} if self.pass_ratio < 1.0 else {}),
        }


#: ``--threshold`` words: ``auto`` (roots by local error where it was measured, else the band
#: rule), ``band`` (the dump-only band rule always)
AUTO, BAND = "auto", "band"
_BAD = "threshold must be 'auto', 'band' or a number such as 1e-3, got {!r}"


@dataclass(frozen=True)
class ThresholdSpec:
    """``--threshold`` parsed once, where it enters (the CLI, a workflow's ``threshold=``).

    ``mode`` is ``auto``, ``band`` or ``fixed``; ``threshold`` the rule a comparison applies
    (None: chosen from the data, the auto band). :meth:`roots_by` says which rule names the
    roots once it is known whether local error was measured.
    """

    mode: str
    threshold: Optional[Threshold] = None

    def roots_by(self, measured: bool) -> str:
        """``local`` (roots by local error), ``band`` (dump-only auto band) or ``fixed``."""
        if self.mode == AUTO:
            return "local" if measured else BAND
        return self.mode

    @property
    def for_comparison(self) -> "Union[str, Threshold]":
        """What :func:`lar_prec.compare.folders.compare_folders` takes: ``"auto"`` or the rule."""
        return AUTO if self.threshold is None else self.threshold


def parse_threshold_spec(spec: "Union[str, float, Threshold, ThresholdSpec, None]") -> ThresholdSpec:
    """``"auto"``/None, ``"band"``, a number or its text, or a :class:`Threshold`.

    Raises:
        UsageError: anything else, e.g. ``"abc"``, a negative number, NaN or Inf.
    """
    if isinstance(spec, ThresholdSpec):
        return spec
    if spec is None:
        return ThresholdSpec(AUTO)
    if isinstance(spec, Threshold):
        return ThresholdSpec("fixed" if spec.mode == "fixed" else AUTO, spec)
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s in (AUTO, BAND):
            return ThresholdSpec(s)
        try:
            value = float(s)
        except ValueError:
            raise UsageError(_BAD.format(spec)) from None
    elif isinstance(spec, (int, float)) and not isinstance(spec, bool):
        value = float(spec)
    else:
        raise UsageError(_BAD.format(spec))
    return ThresholdSpec("fixed", Threshold.fixed(value))


def parse_threshold(spec: "Union[str, float, Threshold, ThresholdSpec, None]") -> Optional[Threshold]:
    """The rule of ``spec`` (see :func:`parse_threshold_spec`): None for ``auto``/``band``
    (decided from the data), a fixed :class:`Threshold` for a number."""
    return parse_threshold_spec(spec).threshold


#: thresholds rounded to float32, by threshold (a few distinct ones, tens of thousands of vars)
_F32: Dict[float, float] = {}
_PACK_F32 = struct.Struct("<f")


def _to_float32(t: float) -> float:
    """``float(np.float32(t))`` without numpy (compare need not import it): round to nearest
    float32, beyond its range to infinity."""
    try:
        return _PACK_F32.unpack(_PACK_F32.pack(t))[0]
    except OverflowError:
        return math.copysign(math.inf, t)


#: dtype name -> True (float), False (exact) or None (unknown): judged per var, looked up once
_FLOAT_NAME: Dict[str, Optional[bool]] = {}


def float_name(name: str) -> Optional[bool]:
    """Whether dtype ``name`` is a float kind (None: lar-prec does not know it)."""
    try:
        return _FLOAT_NAME[name]
    except KeyError:
        dt = dtype_or_none(name)
        k = _FLOAT_NAME[name] = None if dt is None else is_float_kind(dt)
        return k


def to_float32(t: float) -> float:
    """``t`` rounded to float32 as compare_binary_iodump compares (cached: a few distinct
    thresholds, tens of thousands of vars)."""
    t32 = _F32.get(t)
    if t32 is None:
        if len(_F32) > 4096:
            _F32.clear()
        t32 = _F32[t] = _to_float32(t)
    return t32


def count_from_band(kept: Optional[Tuple[int, bytes]], dtype: str, scale: Optional[float], t: float) -> Optional[int]:
    """A var's count of elements above threshold ``t`` from what the batch reader kept of its
    errors inside its auto :func:`window` (``VarDiff.band``: the count above the window x its
    scale factor, and the float32 errors inside), without reading it again; None when ``t`` is
    outside (a threshold the edge rule widened above the band) or nothing was kept."""
    if kept is None:
        return None
    t32 = to_float32(t)
    if scale is not None and scale >= 1.0:  # scale factor 1: the dtype's own window (most vars)
        w = _WINDOWS32.get(dtype)
        if w is None or not w[0] <= t32 <= w[1]:
            return None
    else:
        w = _WINDOWS.get(dtype)
        if w is None:
            return None
        sf = scale_factor(scale)
        # each var's own window: rounded once, not cached (its scale makes it its own)
        if not _to_float32(w[0] * sf) <= t32 <= _to_float32(w[1] * sf):
            return None
    above, inside = kept
    return above + sum(1 for e in array("f", inside) if e > t32) if inside else above


#: :func:`window` of each float dtype, and rounded to float32 (a scale factor of 1)
_WINDOWS = {name: window(name) for name in AUTO_BAND_EPS}
_WINDOWS32 = {name: (_to_float32(lo), _to_float32(hi)) for name, (lo, hi) in _WINDOWS.items()}
#: both, as the C kernel's apply_judged takes them: dtype -> (low, high, low32, high32)
WINDOW_ROWS = {name: (*_WINDOWS[name], *_WINDOWS32[name]) for name in _WINDOWS}


def judge(d: object, thr: Threshold) -> Dict[str, object]:
    """The fields ``thr`` sets on one measured var ``d`` (a VarDiff): ``status``,
    ``threshold`` and ``n_over`` (None: must be recounted from the files). Structural
    statuses are kept (empty dict)."""
    status: str = d.status  # type: ignore[attr-defined]
    if status in ("missing", "shape_mismatch"):
        return {}
    max_err = d.max_err  # type: ignore[attr-defined]
    if status == "dtype_mismatch":
        return {"threshold": thr.for_var(d.dtype, d.scale) if max_err is not None else None}  # type: ignore[attr-defined]
    if float_name(d.dtype) is False:  # type: ignore[attr-defined]
        # exact types: any differing element diverges, whatever the float threshold
        st = "divergent" if (d.n_diff or 0) > 0 else "ok"  # type: ignore[attr-defined]
        if d.n_nonfinite:  # type: ignore[attr-defined]
            st = "nonfinite"
        return {"status": st, "threshold": 0.0, "n_over": d.n_diff}  # type: ignore[attr-defined]
    t = thr.for_var(d.dtype, d.scale)  # type: ignore[attr-defined]
    t32 = to_float32(t)  # compared like compare_binary_iodump's `err > max_err`: in float32
    st = "ok"
    if d.n_nonfinite:  # type: ignore[attr-defined]
        st = "nonfinite"
    elif max_err is not None and max_err > t32:
        st = "divergent"
    n_over = d.n_over  # type: ignore[attr-defined]
    if max_err is None or max_err <= t32:
        n_over = 0
    elif not (n_over is not None and d.threshold == t):  # type: ignore[attr-defined]
        n_over = None  # needs a recount from the files
    return {"status": st, "threshold": t, "n_over": n_over}


class RecordRootCounter:
    """Counts, for any threshold, the vars above it whose inputs are all below it (inputs
    outside the set do not block; auto tries dozens of thresholds): each var's largest input
    error is found once, and a threshold's roots are the vars above it whose largest input
    error is not (NaN never blocks). :class:`_KernelRoots` counts the same in C."""

    def __init__(self, diffs: Sequence[object], errs: Sequence[Optional[float]]) -> None:
        err = [e or 0.0 for e in errs]
        pos: Dict[int, int] = {}
        for i, d in enumerate(diffs):
            pos.setdefault(d.id, i)  # type: ignore[attr-defined]  # a repeated id: its first, as the array form
        worst_in = []
        for i, d in enumerate(diffs):
            m = -math.inf
            for u in d.inputs:  # type: ignore[attr-defined]
                j = pos.get(u)
                if j is not None and j != i and err[j] > m:
                    m = err[j]
            worst_in.append(m)
        self.pairs = list(zip(err, worst_in))

    def roots(self, t: float) -> int:
        """Vars above ``t`` none of whose inputs is above ``t``."""
        return sum(1 for e, m in self.pairs if e > t and not m > t)


def _best_in_band(name: str, mine: Sequence[object]) -> Tuple[float, str]:
    """Auto threshold of float dtype ``name`` from its measured vars, and its reason part."""
    norm = [d.norm_err for d in mine]  # type: ignore[attr-defined]
    return _best_of(name, sorted({e for e in norm if e is not None and e > 0}), lambda: RecordRootCounter(mine, norm))


def _best_of(name: str, errs: List[float], counter_of: Callable[[], Any]) -> Tuple[float, str]:
    """:func:`_best_in_band` from the vars' distinct positive errors, sorted, and their root counter."""
    lo, hi = band(name)
    cands = {lo, hi}
    logs = [math.log10(e) for e in errs]
    # a gap's log-midpoint lies between its two errors, so only gaps near the band can put it
    # inside (a margin of 0.1% dwarfs any rounding): tens of thousands of errors, few such gaps
    first = max(0, bisect.bisect_left(errs, lo / 1.001) - 1)
    near = logs[first : bisect.bisect_right(errs, hi * 1.001) + 1]
    gaps = [(y - x, 10 ** ((x + y) / 2)) for x, y in zip(near, near[1:])]
    ordered = sorted(logs)
    # the widest gaps inside the band are the only places worth trying (bounded work)
    inside = sorted((g for g in gaps if lo < g[1] < hi), reverse=True)[:MAX_CANDIDATES]
    cands.update(mid for _w, mid in inside)
    best = None
    counter = counter_of()
    for t in sorted(cands):
        roots = counter.roots(t)
        # the nearest error in log is beside where log10(t) would go in the sorted logs
        lt = math.log10(t)
        k = bisect.bisect_left(ordered, lt)
        margin = min((abs(x - lt) for x in ordered[max(0, k - 1) : k + 1]), default=float("inf"))
        key = (roots, -margin, -t)
        if best is None or key < best[0]:
            best = (key, t, roots)
    assert best is not None  # internal: cands is never empty
    t = min(max(float("%.3g" % best[1]), lo), hi)
    below = [e for e in errs if e <= t]
    above = [e for e in errs if e > t]
    lo_eps, hi_eps = AUTO_BAND_EPS[name]
    part = (
        f"{name} {t:.3g} (band {lo:.3g}..{hi:.3g} = {lo_eps:g}..{hi_eps:g} eps; "
        + (f"largest var error below it {max(below):.3g}" if below else "no var error below it")
        + (f", smallest above {min(above):.3g}" if above else ", none above")
        + f"; {best[2]} root(s))"
    )
    return t, part


def choose_threshold(diffs: Sequence[object], cols: "Optional[VarColumns]" = None) -> Threshold:
    """The auto threshold for measured vars (docs/threshold.md).

    Per float dtype the threshold lies in a fixed band of ulps (Float32: 32 to 80 eps,
    Float16/BFloat16: 2 to 8 eps). Inside the band it is placed where the vars' errors
    (``norm_err``: ``max_err`` over ``min(1, scale)``) leave a gap: among the band's ends and
    the log-midpoints of consecutive errors inside it, the one giving the fewest roots wins,
    then the one farthest (in log) from any var's error, then the higher. Exact dtypes get 0.
    ``cols``: the same vars' :class:`VarColumns` (the same result, without reading each record
    again).
    """
    per: Dict[str, float] = {}
    parts: List[str] = []
    if cols is not None:
        seen = list(dict.fromkeys(cols.dtype))
    else:
        seen = list(dict.fromkeys([d.dtype for d in diffs]))  # type: ignore[attr-defined]  # first appearance
    present = [n for n in seen if n in FLOAT_NAMES]
    for name in FLOAT_NAMES:
        if name not in present:
            per[name] = band(name)[1]
            continue
        if cols is not None:
            per[name], part = cols.best_in_band(name)
        else:
            mine = [d for d in diffs if d.dtype == name and d.max_err is not None  # type: ignore[attr-defined]
                    and d.status not in ("missing", "shape_mismatch")]  # type: ignore[attr-defined]
            per[name], part = _best_in_band(name, mine)
        parts.append(part)
    # the headline: Float32's, or the float dtype the model actually uses
    head = "Float32" if "Float32" in present or not present else present[0]
    reason = (
        "auto: " + ("; ".join(parts) if parts else "no float vars")
        + "; each var's threshold is scaled by min(1, its largest |value|)"
        + "; integer, Bool and quantized types compare exactly"
    )
    for name in seen:
        if float_name(name) is False:
            per.setdefault(name, 0.0)
    return Threshold(value=per[head], mode="auto", per_dtype=per, scaled=True, reason=reason)


#: what :class:`VarColumns` reads of each record, in this order
COLUMN_FIELDS = ("id", "status", "dtype", "max_err", "scale", "inputs", "opr_type", "threshold", "n_over", "n_diff",
                 "n_nonfinite", "max_abs_err", "shape")
_COLUMNS = operator.attrgetter(*COLUMN_FIELDS)


class VarColumns:
    """The fields the auto threshold reads of every var, read once (tens of thousands of
    records: each pass over them costs more than the arithmetic), in the records' order, and
    flat in the C kernel (``_kernel.c`` auto_columns: max_err, scale, norm_err, dtype and status
    codes, the edges among the vars by position), where the auto rule's passes run. Build with
    :meth:`of`: None where a var id repeats or the kernel is not built (the rule then goes
    record by record)."""

    #: the C kernel's dtype indices: the float dtypes in this order (growth's EPS has them so)
    FLOATS = FLOAT_NAMES
    #: the status words the kernel codes 0..3 (4: any other)
    STATUS_WORDS = ("ok", "divergent", "missing", "shape_mismatch")

    def __init__(self, rows: Sequence[Tuple[Any, ...]]) -> None:
        (self.ids, self.status, self.dtype, self.max_err, self.scale, self.inputs, self.opr_type, self.threshold,
         self.n_over, self.n_diff, self.n_nonfinite, self.max_abs_err, self.shape) = zip(*rows)
        self.pos = {v: i for i, v in enumerate(self.ids)}
        #: auto_columns' bytes: me, sc, has_scale, has_e, norm, dtype index, kind, status code, src, dst
        self.flat: Tuple[bytes, ...] = ()

    @classmethod
    def of(cls, diffs: Sequence[object], rows: Optional[Sequence[Tuple[Any, ...]]] = None,
           kind_of: Optional[Callable[[str], int]] = None) -> "Optional[VarColumns]":
        """The columns of ``diffs`` (None: none, a var id repeats, the kernel is not built, or a
        field is not of the type a record gives it). ``rows``: each record's
        :data:`COLUMN_FIELDS` where the caller has them (the records are not read);
        ``kind_of``: an operator type's kind code for the edge rule (0 where not given)."""
        make = getattr(KERNEL, "auto_columns", None)
        if not diffs or make is None:
            return None
        cols = cls(list(map(_COLUMNS, diffs)) if rows is None else rows)
        if len(cols.pos) != len(cols.ids):
            return None
        kinds = {o: (kind_of(o) if kind_of is not None else 0) for o in set(cols.opr_type)}
        flat = make(cols.status, cols.dtype, cols.max_err, cols.scale, cols.opr_type, cols.inputs, cols.pos,
                    cls.FLOATS, kinds, SCALE_FLOOR, cls.STATUS_WORDS)
        if flat is None:
            return None
        cols.flat = flat
        return cols

    def best_in_band(self, name: str) -> Tuple[float, str]:
        """:func:`_best_in_band` of the measured vars of float dtype ``name``."""
        k = self.FLOATS.index(name)
        norm, dt, st, has_e = self.flat[4], self.flat[5], self.flat[7], self.flat[3]
        return _best_of(name, KERNEL.band_errs(norm, dt, has_e, st, k), lambda: _KernelRoots(self, k))  # type: ignore[union-attr]


class _KernelRoots:
    """:class:`RecordRootCounter` of the vars of one float dtype of :class:`VarColumns`, in C."""

    def __init__(self, cols: VarColumns, k: int) -> None:
        flat = cols.flat
        self.args = (flat[4], flat[5], flat[3], flat[7], k, flat[8], flat[9])

    def roots(self, t: float) -> int:
        """Vars above ``t`` none of whose inputs is above ``t``."""
        return KERNEL.count_roots(*self.args, t)  # type: ignore[union-attr]


#: the statuses the kernel's judge_vars tells apart (Python's own str objects)
_JUDGE_WORDS = ("ok", "divergent", "nonfinite", "missing", "shape_mismatch", "dtype_mismatch")


def judge_all(cols: VarColumns, thr: Threshold) -> Tuple[List[Any], List[Any], List[Any]]:
    """:func:`judge` of every var of ``cols``: its ``status``, ``threshold`` and ``n_over``
    (the record's own where judge leaves them), without reading the records again; in the C
    kernel (``_kernel.c`` judge_vars) where it is built, else :func:`judge_columns`."""
    fast = getattr(KERNEL, "judge_vars", None)
    if fast is not None:
        kinds = {dt: (float(thr.for_dtype(dt)), float_name(dt)) for dt in set(cols.dtype)}
        got = fast(cols.status, cols.dtype, cols.max_err, cols.scale, cols.n_nonfinite, cols.n_diff, cols.threshold,
                   cols.n_over, kinds, thr.scaled, SCALE_FLOOR, _JUDGE_WORDS)
        if got is not None:  # None: a field of a type the records do not give it
            return got
    return judge_columns(cols, thr)


def judge_columns(cols: VarColumns, thr: Threshold) -> Tuple[List[Any], List[Any], List[Any]]:
    """:func:`judge_all` in Python, a var at a time (the reference the kernel's is tested against)."""
    status, thresh, n_over = list(cols.status), list(cols.threshold), list(cols.n_over)
    kinds: Dict[str, Tuple[float, Optional[bool]]] = {}  # dtype -> (base threshold, float_name)
    scaled = thr.scaled
    for i, (st, dt, e, s) in enumerate(zip(cols.status, cols.dtype, cols.max_err, cols.scale)):
        if st == "missing" or st == "shape_mismatch":
            continue
        k = kinds.get(dt)
        if k is None:
            k = kinds[dt] = (thr.for_dtype(dt), float_name(dt))
        base = k[0]
        t = base * scale_factor(s) if scaled and s is not None else base  # thr.for_var
        if st == "dtype_mismatch":
            thresh[i] = t if e is not None else None
            continue
        if k[1] is False:
            st = "divergent" if (cols.n_diff[i] or 0) > 0 else "ok"
            if cols.n_nonfinite[i]:
                st = "nonfinite"
            status[i], thresh[i], n_over[i] = st, 0.0, cols.n_diff[i]
            continue
        t32 = to_float32(t)
        st = "ok"
        if cols.n_nonfinite[i]:
            st = "nonfinite"
        elif e is not None and e > t32:
            st = "divergent"
        no = n_over[i]
        if e is None or e <= t32:
            no = 0
        elif not (no is not None and thresh[i] == t):
            no = None
        status[i], thresh[i], n_over[i] = st, t, no
    return status, thresh, n_over
