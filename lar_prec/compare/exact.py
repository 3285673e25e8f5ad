"""Operators computed exactly, in float64, from their inputs' values (numpy only).

The one definition of what a convolution, pooling, reduction, matrix product, Softmax and
LayerNorm compute, with MegEngine's parameters: the float64 oracle (:mod:`lar_prec.diagnosis.oracle`,
parameters from the model's graph) and the dump-only check of where error is made
(:mod:`lar_prec.compare.explain`, parameters found from the dumps) both call these.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from lar_prec._lazy import numpy as np


class Unsupported(ValueError):
    """A layout, mode or shape these definitions do not cover."""


def conv2d(x: "np.ndarray", w: "np.ndarray", p: Dict[str, Any]) -> "np.ndarray":
    if p.get("format", "NCHW") != "NCHW":
        raise Unsupported(f"convolution format {p.get('format')} (NCHW only)")
    if p.get("sparse", "DENSE") == "GROUP":
        g, ocg, icg, kh, kw = w.shape
    else:
        ocg, icg, kh, kw = w.shape
        g, w = 1, w[None]
    if p.get("mode", "CROSS_CORRELATION") == "CONVOLUTION":
        w = w[..., ::-1, ::-1]
    n, c, h, wd = x.shape
    if c != g * icg:
        raise Unsupported(f"convolution input has {c} channels, filter expects {g}x{icg}")
    sh, sw, ph, pw = p.get("stride_h", 1), p.get("stride_w", 1), p.get("pad_h", 0), p.get("pad_w", 0)
    dh, dw = p.get("dilate_h", 1), p.get("dilate_w", 1)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, g, ocg, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out += np.einsum("ngchw,goc->ngohw", patch.reshape(n, g, icg, oh, ow), w[:, :, :, i, j])
    return out.reshape(n, g * ocg, oh, ow)


def pool2d(x: "np.ndarray", p: Dict[str, Any]) -> "np.ndarray":
    if p.get("format", "NCHW") != "NCHW":
        raise Unsupported(f"pooling format {p.get('format')} (NCHW only)")
    mode = p.get("mode", "MAX")
    kh, kw, sh, sw = p["window_h"], p["window_w"], p.get("stride_h", 1), p.get("stride_w", 1)
    ph, pw = p.get("pad_h", 0), p.get("pad_w", 0)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    fill = -np.inf if mode == "MAX" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    valid = np.pad(np.ones((h, w)), ((ph, ph), (pw, pw)))
    acc = np.full((n, c, oh, ow), -np.inf) if mode == "MAX" else np.zeros((n, c, oh, ow))
    count = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            sl = (slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw))
            win = xp[(slice(None), slice(None)) + sl]
            acc = np.maximum(acc, win) if mode == "MAX" else acc + win
            count += valid[sl]
    if mode == "MAX":
        return acc
    if mode == "AVERAGE":
        return acc / (kh * kw)
    if mode == "AVERAGE_COUNT_EXCLUDE_PADDING":
        return acc / np.maximum(count, 1.0)
    raise Unsupported(f"pooling mode {mode}")


def reduce(x: "np.ndarray", mode: str, out_shape: Tuple[int, ...]) -> "np.ndarray":
    if len(out_shape) != x.ndim:
        raise Unsupported(f"Reduce to shape {out_shape} from {x.shape}")
    axes = tuple(k for k in range(x.ndim) if out_shape[k] == 1 and x.shape[k] != 1)
    fns = {"SUM": np.sum, "MEAN": np.mean, "MAX": np.max, "MIN": np.min, "PRODUCT": np.prod,
           "SUM_SQR": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims)}
    if mode not in fns:
        raise Unsupported(f"Reduce mode {mode}")
    return fns[mode](x, axis=axes, keepdims=True) if axes else x.copy()


def matmul(a: "np.ndarray", b: "np.ndarray", transpose_a: bool = False, transpose_b: bool = False) -> "np.ndarray":
    """MatrixMul / BatchedMatrixMul: ``a @ b`` over the last two axes (after the transposes)."""
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise Unsupported(f"matrix product of {a.shape} and {b.shape}")
    return np.einsum("...ik,...kj->...ij", a, b)


def softmax(x: "np.ndarray", axis: int) -> "np.ndarray":
    """Softmax over ``axis``."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(x: "np.ndarray", axis: int, eps: float, gamma: "np.ndarray | None" = None,
              beta: "np.ndarray | None" = None, which: int = 0) -> "np.ndarray":
    """LayerNorm over the axes from ``axis`` on, output ``which``: 0 the normalised values (times
    ``gamma``, plus ``beta``), 1 the mean, 2 ``1/sqrt(var + eps)`` (MegEngine's three outputs;
    the last two have the shape of the axes before ``axis``)."""
    axes = tuple(range(axis, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    if which:
        return (mu if which == 1 else rstd).reshape(x.shape[:axis])
    y = (x - mu) * rstd
    if gamma is not None:
        y = y * gamma.reshape(x.shape[axis:])
    if beta is not None:
        y = y + beta.reshape(x.shape[axis:])
    return y
