"""MegEngine compatibility: the text ``compare_binary_iodump`` prints (``--format megengine``).

:func:`megengine_text` writes what ``python -m megengine.tools.compare_binary_iodump A B -e T``
prints, byte for byte with a fixed threshold, so MegEngine's ``accuracy_shake_var_tree`` (and
``lar-prec tree``) read lar-prec's output.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.engine_exec import DEFAULT_CHUNK
from lar_prec.iodump import BinaryDump, DumpFolder, read_binary_dump

if TYPE_CHECKING:
    from lar_prec.compare import Comparison


def _me_title(title: str) -> str:
    return "\n  ".join(textwrap.wrap(title))


def _me_sum(d: BinaryDump) -> "np.float32":
    """``v.sum()`` of the whole tensor cast to float32, as compare_binary_iodump computes it."""
    if not d.dtype.decodable:
        return np.float32("nan")
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(d.array(), dtype=np.float32).sum()


def megengine_text(comparison: "Comparison", *, chunk_elements: int = DEFAULT_CHUNK) -> Iterator[str]:
    """Yield what ``python -m megengine.tools.compare_binary_iodump A B -e T`` prints, one
    failure at a time, so its ``accuracy_shake_var_tree`` (and ``lar-prec tree``) read it.

    Files are paired by name in sorted order as there, ``-inp`` files included. A file is
    printed when lar-prec's status for it is not ``ok``: ``not equal`` with the first element
    above the var's own threshold (``T`` = that threshold, so with a fixed threshold this is
    byte for byte the original's output), ``not finite`` only when the NaN/Inf positions
    really differ (the original also flags NaN at the same place on both sides),
    ``shape mismatch``. Files in one folder only, which make the original stop, are skipped.
    """
    from lar_prec.compare import apply_threshold, compare_dumps
    from lar_prec.engine import scan_over

    fa, fb = DumpFolder(comparison.dir_a), DumpFolder(comparison.dir_b)
    names: Dict[str, Tuple[Path, Path]] = {}
    pa = {p.name: p for p in list(fa.paths().values()) + list(fa.input_files.values())}
    pb = {p.name: p for p in list(fb.paths().values()) + list(fb.input_files.values())}
    for n in sorted(set(pa) & set(pb)):
        names[n] = (pa[n], pb[n])
    thr = comparison.threshold
    for n, (path_a, path_b) in names.items():
        da, db = read_binary_dump(path_a), read_binary_dump(path_b)
        if da.input_index is None and da.id in comparison:
            d = comparison[da.id]
        else:
            d = apply_threshold([compare_dumps(da, db, chunk_elements=chunk_elements)], thr)[0]
            if da.id in comparison and comparison[da.id].scale is not None and d.threshold is not None and thr.scaled:
                # an input as seen by its consumer: hold it to the input var's own threshold
                from dataclasses import replace

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
