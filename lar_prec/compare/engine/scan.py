"""The streaming engine: every metric of :mod:`lar_prec.compare.metrics` in one pass over chunks.

A var's two files are read ``chunk_elements`` values at a time into reused buffers or mapped
windows (:mod:`lar_prec.compare.engine.io`), so memory is bounded by the chunk size, not by the tensor
size or the page cache. An :class:`Acc` accumulates one element range; ranges of one var
(pieces, run on several workers) are merged in order by :func:`merge`.

Float32 chunks go through the optional C kernel (``_kernel.c``, one pass) when it is built and
the settings allow it, else through numpy (about 20 passes); both give the same maxima,
indices and counts, and both accumulate the sums of :func:`lar_prec.metrics.sums` in float64.
Chunks with NaN/Inf (or float32 overflow) take the careful path (:func:`_mixed_chunk`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.compare import metrics
from lar_prec.compare.engine.workers import DEFAULT_CHUNK, EngineSettings
from lar_prec.compare.engine.io import Extent, open_extent, read_exact
from lar_prec.compare.engine import hist
from lar_prec.compare.engine.chunks import Acc, decode
from lar_prec.errors import DumpFormatError


def _kernel_off() -> bool:
    return os.environ.get("LAR_PREC_NO_KERNEL", "") not in ("", "0")


def _load_kernel() -> Optional[object]:
    """The one-pass C kernel (lar_prec/compare/engine/_kernel.c), or None: built without a C compiler, or
    turned off with LAR_PREC_NO_KERNEL=1 (to compare the two paths)."""
    if _kernel_off():
        return None
    try:
        from lar_prec.compare.engine import _kernel  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _kernel


KERNEL = _load_kernel()


def kernel_state() -> str:
    """Which path compares float32 here: "C kernel", or why it is the numpy path."""
    if KERNEL is not None:
        return "C kernel"
    if _kernel_off():
        return "numpy path: LAR_PREC_NO_KERNEL is set"
    return "numpy path: the C kernel was not built"


def kernel_for(st: EngineSettings) -> Optional[object]:
    """The C kernel if it is built and ``st`` allows it, else None (the numpy path)."""
    return KERNEL if st.kernel else None


def merge(accs: Sequence[Acc]) -> Acc:
    """One accumulator from the accumulators of consecutive element ranges, in order."""
    if len(accs) == 1:
        return accs[0]
    out = Acc(accs[0].count_over, stats=accs[0].hist is not None, full=accs[0].full)
    for a in accs:
        out.n_fin += a.n_fin
        if out.hist is not None and a.hist is not None:
            hist.add(out.hist, a.hist, KERNEL)
        if a.max_err > out.max_err:
            out.max_err, out.worst, out.worst_a, out.worst_b = a.max_err, a.worst, a.worst_a, a.worst_b
        out.max_abs = max(out.max_abs, a.max_abs)
        out.max_rel = max(out.max_rel, a.max_rel)
        out.add_sums(a.aa, a.ab, a.bb, a.dd, a.sum_abs)
        out.scale = max(out.scale, a.scale)
        if a.max_ulp is not None:
            out.ulp_update(a.max_ulp)
        out.n_over += a.n_over
        out.n_diff += a.n_diff
        out.n_nonfinite += a.n_nonfinite
        if out.first_nonfinite is None:
            out.first_nonfinite = a.first_nonfinite
    return out


def unravel(flat: int, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """C-order index of flat position ``flat`` (plain ints; cheaper than numpy for one)."""
    out = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        out.append(r)
    return tuple(reversed(out))


def acc_fields(acc: Acc, shape: Tuple[int, ...], fields: Dict[str, object], ratio: float = 1.0) -> Dict[str, object]:
    """Write the metrics of ``acc`` (a whole var) into the VarDiff ``fields`` and return
    them: the error metrics when a position was finite on both sides, the counts, and the
    ``nonfinite`` status and note when NaN/Inf differ; for a float var its error statistics
    (:mod:`~lar_prec.compare.engine.hist`, the pass threshold at ``ratio``)."""
    n = acc.n_fin
    if n and acc.hist is not None:
        fields.update(zip(hist.STAT_FIELDS, hist.stats(acc.hist, n, ratio, acc.full, acc.max_rel, acc.max_abs, acc.max_err,
                                                       KERNEL)))
    if n:
        fields.update(
            max_err=acc.max_err,
            max_abs_err=acc.max_abs,
            max_rel_err=acc.max_rel,
            mean_abs_err=acc.sum_abs / n,
            rmse=math.sqrt(acc.dd / n),
            cosine=metrics.cosine_from_sums(acc.aa, acc.ab, acc.bb),
            max_ulp=acc.max_ulp,
            worst_index=unravel(acc.worst, shape),
            worst_a=acc.worst_a,
            worst_b=acc.worst_b,
            scale=acc.scale,
        )
    fields["n_nonfinite"] = acc.n_nonfinite
    if acc.count_over is not None:
        # counted in this pass against a threshold known up front; judging keeps it
        fields["n_over"] = acc.n_over
        fields["threshold"] = acc.count_over
        if acc.count_over == 0:
            fields["n_diff"] = acc.n_diff
    note = fields.get("note")
    note = str(note) if note else ""
    if acc.n_nonfinite:
        j, x, y = acc.first_nonfinite or (0, float("nan"), float("nan"))
        more = f"{acc.n_nonfinite} position(s) NaN/Inf on one side only, first at {unravel(j, shape)}: a={x!r} b={y!r}"
        note = f"{note}; {more}" if note else more
        fields["status"] = "nonfinite"
    fields["note"] = note
    return fields


__all__ = [
    "KERNEL",
    "acc_fields",
    "kernel_for",
    "kernel_state",
    "merge",
    "raw_diff_bytes",
    "scan_over",
    "unravel",
    "OverScan",
]


def raw_diff_bytes(da: Extent, db: Extent, chunk: int) -> int:
    """Sub-byte and complex dtypes, which lar-prec cannot decode: bytes that differ."""
    step = max(chunk, 1 << 16)
    ndiff = 0
    with open(da.file, "rb") as fa, open(db.file, "rb") as fb:
        fa.seek(da.data_offset)
        fb.seek(db.data_offset)
        left = da.nbytes
        while left:
            k = min(step, left)
            x = fa.read(k)
            y = fb.read(k)
            if len(x) != k or len(y) != k:

                bad = da.file if len(x) != k else db.file
                raise DumpFormatError(bad, None, f"{k} more data bytes", "end of file")
            if x != y:
                ndiff += int(np.count_nonzero(np.frombuffer(x, np.uint8) != np.frombuffer(y, np.uint8)))
            left -= k
    return ndiff


@dataclass(frozen=True)
class OverScan:
    """Elements above a threshold, as ``compare_binary_iodump`` sees them (float32 error)."""

    count: int
    first_index: Optional[Tuple[int, ...]]
    first_a: Optional["np.float32"]
    first_b: Optional["np.float32"]
    first_err: Optional["np.float32"]


def scan_over(da: Extent, db: Extent, threshold: float, *, chunk: int = DEFAULT_CHUNK, stop_at_first: bool = False) -> OverScan:
    """Count the elements whose float32 MegEngine error (:func:`metrics.megengine_err`)
    exceeds ``threshold`` and find the first one in C order, values cast to float32 as
    ``compare_binary_iodump`` does. Positions NaN/Inf on both sides in the same way are not
    counted; positions with a NaN on one side are not either (their error is NaN, which is
    not ``> threshold``: the ``nonfinite`` status reports them). ``da``/``db``: dumps or extents.
    """
    if not (da.dtype.decodable and db.dtype.decodable):
        return OverScan(0, None, None, None, None)
    thr = np.float32(threshold)
    exact = not (da.dtype.kind == "float" or db.dtype.kind == "float")
    count = 0
    first: Optional[Tuple[int, np.float32, np.float32, np.float32]] = None
    ka = 2 if da.dtype.name == "BFloat16" else da.dtype.storage.itemsize  # type: ignore[union-attr]
    kb = 2 if db.dtype.name == "BFloat16" else db.dtype.storage.itemsize  # type: ignore[union-attr]
    fa, fb = open_extent(da), -1  # type: ignore[arg-type]
    try:
        fb = open_extent(db)  # type: ignore[arg-type]
        for start in range(0, da.size, chunk):
            n = min(chunk, da.size - start)
            ra, rb = memoryview(bytearray(n * ka)), memoryview(bytearray(n * kb))
            read_exact(fa, ra, da.data_offset + start * ka, da.file)
            read_exact(fb, rb, db.data_offset + start * kb, db.file)
            a = decode(ra, da.dtype).astype(np.float32)
            b = decode(rb, db.dtype).astype(np.float32)
            err = metrics.megengine_err(a, b)
            if exact and threshold == 0:
                # integers compare exactly, also where float32 cannot tell them apart
                over = decode(ra, da.dtype) != decode(rb, db.dtype)
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
    return OverScan(count, unravel(first[0], tuple(da.shape)), first[1], first[2], first[3])
