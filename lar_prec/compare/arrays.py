"""Two in-memory arrays compared with the same metrics as two dump folders."""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Optional, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.records import VarDiff
from lar_prec.compare.threshold import Threshold
from lar_prec.dumps.binary import write_binary_dump
from lar_prec.dumps.dtypes import DTYPES, DType, dtype_by_name
from lar_prec.dumps.titles import VarInfo, format_title
from lar_prec.errors import UsageError


def compare_arrays(
    a: "np.ndarray",
    b: "np.ndarray",
    *,
    threshold: Union[float, Threshold, str, None] = None,
    dtype: Optional[str] = None,
    var_id: int = 0,
    name: str = "",
) -> VarDiff:
    """Compare two in-memory arrays with the same metrics as :func:`compare_folders`
    (:func:`lar_prec.metrics.reference` is the plain whole-array definition of each).

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


def _infer_dtype(arr: "np.ndarray") -> DType:
    for d in DTYPES.values():
        if d.storage is not None and d.storage == arr.dtype and d.name != "BFloat16" and d.kind not in ("quantized", "byte"):
            return d
    raise UsageError(f"no MegDNN dtype for numpy {arr.dtype}; pass dtype=")
