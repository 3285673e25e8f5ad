"""Where error is made, from two dumps alone: an operator recomputed from each side's own inputs.

Without the model there is no local error, but a dump holds every var with its inputs' ids, so
an operator whose parameters the shapes and values tell can be recomputed in float64 from
each side's *own* inputs (:mod:`lar_prec.compare.exact`). Each side's output is then measured
against its own exact result in rounding units of each element (:mod:`lar_prec.compare.bounds`):
within ``TERMS_C`` on both sides, the operator made no error of its own and everything it
differs by came through its inputs, however much its terms cancel (issue 34 #2: attention's
score products "amplify" their inputs' error 5-6x by cancellation alone).

Parameters not in a dump are found by trying the candidates the shapes allow (a matrix
product's transposes; a convolution's stride, padding and dilation; a reduction's mode; a
Softmax's axis; a LayerNorm's normalised axes, its epsilon and which of its three outputs) and
keeping the one whose exact result is nearest side A's output. Operators
with parameters a dump cannot tell (pooling windows, fused nonlinearities) are not recomputed.
Numpy only.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare import bounds, elemwise, exact
from lar_prec.compare.engine.scan import KERNEL

#: operator types :func:`recompute` knows
RECOMPUTED = frozenset({"MatrixMul", "BatchedMatrixMul", "ConvolutionForward", "Reduce", "SoftmaxForward",
                        "LayerNormForward", "Elemwise"})
#: candidates tried at most for one operator (an elementwise operator tries every mode of its
#: arity: each is one pass over its elements)
MAX_CANDIDATES = 8
MAX_CANDIDATES_OF = {"Elemwise": len(elemwise.MODES)}

#: a candidate: how it is described, the operator on given inputs, and its rounding scale on
#: given inputs and exact output (``U`` of each element, and how many roundings it counts)
Operator = Callable[[Sequence["np.ndarray"]], "np.ndarray"]
Scale = Callable[[Sequence["np.ndarray"], "np.ndarray"], Tuple["np.ndarray", float]]
Candidate = Tuple[str, Operator, Scale]


@dataclass(frozen=True)
class Recomputed:
    """Each side's output against the exact result on its own inputs, in rounding units (the
    worse of its worst element and its scale as a whole: :class:`~lar_prec.compare.bounds.Bound`),
    and the parameters that were found (``how``)."""

    units_a: float
    units_b: float
    how: str

    def made_here(self, allowance: float = bounds.TERMS_C) -> bool:
        """Whether either side errs by more than ``allowance`` units on its own inputs."""
        return self.units_a > allowance or self.units_b > allowance


def _terms(fn: Operator, k: int) -> Scale:
    """The scale of an operator summing ``k`` terms (0: a selection, exact)."""
    def scale(xs: Sequence["np.ndarray"], exact_out: "np.ndarray") -> Tuple["np.ndarray", float]:
        if k == 0:
            return np.zeros_like(exact_out), 0.0
        return bounds.terms_scale(fn([np.abs(x) for x in xs]), k), bounds.roundings(k)
    return scale


def matmul_params(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Tuple[bool, bool, int]]:
    """(transpose_a, transpose_b, terms summed) of a matrix product that give ``out``."""
    if len(shapes) != 2 or len(shapes[0]) < 2 or len(shapes[1]) < 2:
        return
    for ta, tb in itertools.product((False, True), repeat=2):
        m = shapes[0][-1] if ta else shapes[0][-2]
        k = shapes[0][-2] if ta else shapes[0][-1]
        kb, n = (shapes[1][-1], shapes[1][-2]) if tb else (shapes[1][-2], shapes[1][-1])
        if k == kb and out[-2:] == (m, n):
            yield ta, tb, k


def _matmul(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    for ta, tb, k in matmul_params(shapes, out):
        fn: Operator = lambda xs, ta=ta, tb=tb: exact.matmul(xs[0], xs[1], ta, tb)  # noqa: E731
        yield f"transposeA={ta} transposeB={tb}", fn, _terms(fn, k)


def _conv_axis(size: int, k: int, out: int) -> List[Tuple[int, int, int]]:
    """(stride, padding, dilation) that take ``size`` to ``out`` with a window of ``k``."""
    found = []
    for d in (1, 2) if k > 1 else (1,):  # a window of one has no dilation: one candidate, not two alike
        for s in (1, 2, 3, 4):
            for p in range(0, d * (k - 1) + 1):
                if (size + 2 * p - d * (k - 1) - 1) // s + 1 == out and size + 2 * p >= d * (k - 1) + 1:
                    found.append((s, p, d))
    return found


def conv_params(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Tuple[int, ...]]:
    """(stride_h, stride_w, pad_h, pad_w, dilate_h, dilate_w) of an NCHW convolution that give ``out``."""
    if len(shapes) != 2 or len(shapes[0]) != 4 or len(out) != 4 or len(shapes[1]) not in (4, 5):
        return
    x, w = shapes
    for (sh, ph, dh), (sw, pw, dw) in itertools.product(_conv_axis(x[2], w[-2], out[2]), _conv_axis(x[3], w[-1], out[3])):
        yield sh, sw, ph, pw, dh, dw


def _conv_how(p: Sequence[int], grouped: bool) -> str:
    sh, sw, ph, pw, dh, dw = p
    return f"stride {sh}x{sw} padding {ph}x{pw} dilation {dh}x{dw} ({'group' if grouped else 'dense'})"


def _conv(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    grouped = len(shapes[1]) == 5 if len(shapes) == 2 else False
    k = math.prod(shapes[1][-3:]) if len(shapes) == 2 else 0
    for sh, sw, ph, pw, dh, dw in conv_params(shapes, out):
        p = {"sparse": "GROUP" if grouped else "DENSE", "stride_h": sh, "stride_w": sw, "pad_h": ph, "pad_w": pw,
             "dilate_h": dh, "dilate_w": dw}
        fn: Operator = lambda xs, p=p: exact.conv2d(xs[0], xs[1], p)  # noqa: E731
        yield _conv_how((sh, sw, ph, pw, dh, dw), grouped), fn, _terms(fn, k)


def _reduce(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    if len(shapes) < 1 or len(shapes[0]) != len(out):
        return
    k = max(1, math.prod(shapes[0]) // max(1, math.prod(out)))
    for mode in ("SUM", "MEAN", "SUM_SQR", "MAX", "MIN"):
        fn: Operator = lambda xs, mode=mode: exact.reduce(xs[0], mode, out)  # noqa: E731
        yield mode, fn, _terms(fn, 0 if mode in ("MAX", "MIN") else k)


def _softmax(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    if len(shapes) != 1 or shapes[0] != out:
        return
    for axis in range(len(out)):
        if out[axis] > 1:
            yield (f"axis {axis}", lambda xs, axis=axis: exact.softmax(xs[0], axis),
                   lambda xs, e, axis=axis: (bounds.softmax_scale(xs[0], e, axis), bounds.roundings(xs[0].shape[axis])))


#: LayerNorm epsilons tried (MegEngine's default first)
LAYERNORM_EPS = (1e-5, 1e-6)


def _layernorm(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    """Which output (the values: ``x``'s shape; the mean or rstd: the shape of the axes before
    the normalised ones), over which axes (``gamma`` and ``beta`` have their shape), which eps."""
    if len(shapes) not in (1, 3):
        return
    x, affine = tuple(shapes[0]), len(shapes) == 3
    if out == x:
        found = [(axis, 0) for axis in range(1, len(x)) if not affine or math.prod(shapes[1]) == math.prod(x[axis:])]
    elif 0 < len(out) < len(x) and x[:len(out)] == out:
        found = [(len(out), 1), (len(out), 2)]
    else:
        return
    for axis, which in found:
        n = math.prod(x[axis:])
        for eps in LAYERNORM_EPS[:1] if which == 1 else LAYERNORM_EPS:
            def fn(xs: Sequence["np.ndarray"], axis: int = axis, which: int = which, eps: float = eps) -> "np.ndarray":
                return exact.layernorm(xs[0], axis, eps, *(xs[1:3] if affine else ()), which=which)

            def scale(xs: Sequence["np.ndarray"], e: "np.ndarray", axis: int = axis, which: int = which,
                      eps: float = eps, n: int = n) -> Tuple["np.ndarray", float]:
                return (bounds.layernorm_scale(xs[0], e, axis, which, *(xs[1:3] if affine else ()), norm_eps=eps),
                        bounds.roundings(n))

            output = ("values", "mean", "rstd")[which]
            yield f"{output} over the axes from {axis} on, eps {eps:g}", fn, scale


def _broadcast(shapes: Sequence[Tuple[int, ...]]) -> Optional[Tuple[int, ...]]:
    """numpy's broadcast of ``shapes`` (None: they do not broadcast), without numpy: the shapes
    alone decide whether an elementwise recompute is tried, before any value is read."""
    n = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(n):
        dims = {s[len(s) - n + k] for s in shapes if len(s) - n + k >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _elemwise(shapes: Sequence[Tuple[int, ...]], out: Tuple[int, ...]) -> Iterator[Candidate]:
    """Every mode of this many inputs that broadcast to ``out`` (the dump does not say the mode:
    the one nearest side A's output is kept), scaled by its formula's roundings
    (:mod:`lar_prec.compare.elemwise`): a difference carried through a subtraction is the
    rounding of what it combines, not growth."""
    if _broadcast([tuple(s) for s in shapes]) != tuple(out):
        return
    for name, mode in elemwise.MODES.items():
        if mode.arity != len(shapes):
            continue
        yield (f"mode {name}", lambda xs, mode=mode: mode.f(*xs),
               lambda xs, e, mode=mode: (elemwise.scale(mode, xs, y=e), 1.0 + mode.arity))


_CANDIDATES = {"MatrixMul": _matmul, "BatchedMatrixMul": _matmul, "ConvolutionForward": _conv,
               "Reduce": _reduce, "SoftmaxForward": _softmax, "LayerNormForward": _layernorm, "Elemwise": _elemwise}


def could_recompute(opr_type: str, in_shapes: Sequence[Tuple[int, ...]], out_shape: Tuple[int, ...]) -> bool:
    """Whether the shapes alone admit parameters :func:`recompute` can try (no value read)."""
    find = _CANDIDATES.get(opr_type)
    return find is not None and next(iter(find([tuple(s) for s in in_shapes], tuple(out_shape))), None) is not None


def recompute(opr_type: str, out_a: "np.ndarray", ins_a: Sequence["np.ndarray"], out_b: "np.ndarray",
              ins_b: Sequence["np.ndarray"], dtype: str) -> Optional[Recomputed]:
    """Each side's output (``out_a``/``out_b``) against the operator recomputed exactly from that
    side's inputs (``ins_a``/``ins_b``), in rounding units of ``dtype`` (``float32``, ...); None
    when the operator or its parameters cannot be told from the dumps."""
    find = _CANDIDATES.get(opr_type)
    if find is None or dtype not in bounds.EPS or len(ins_a) != len(ins_b):
        return None
    xa = [np.asarray(x, dtype=np.float64) for x in ins_a]
    xb = [np.asarray(x, dtype=np.float64) for x in ins_b]
    ya, yb = np.asarray(out_a, dtype=np.float64), np.asarray(out_b, dtype=np.float64)
    if [x.shape for x in xa] != [x.shape for x in xb] or ya.shape != yb.shape:
        return None
    best = None
    try:
        limit = MAX_CANDIDATES_OF.get(opr_type, MAX_CANDIDATES)
        for how, fn, scale_of in itertools.islice(find([x.shape for x in xa], ya.shape), limit):
            with np.errstate(all="ignore"):
                got = np.broadcast_to(np.asarray(fn(xa), dtype=np.float64), ya.shape)
            with np.errstate(invalid="ignore"):
                gap = np.abs(got - ya)
            dist = float(np.max(np.where(np.isnan(gap), np.where(np.isnan(got) == np.isnan(ya), 0.0, np.inf), gap))) \
                if ya.size else 0.0
            if best is None or dist < best[0]:
                best = (dist, how, fn, scale_of, got)
    except (exact.Unsupported, ValueError, MemoryError):
        return None
    if best is None or not math.isfinite(best[0]):
        return None
    _dist, how, fn, scale_of, exact_a = best
    with np.errstate(all="ignore"):
        exact_b = np.broadcast_to(np.asarray(fn(xb), dtype=np.float64), yb.shape)
    units = []
    for y, x, e in ((ya, xa, exact_a), (yb, xb, exact_b)):
        scale, roundings = scale_of(x, e)
        b = bounds.measure(y, e, scale, dtype, "recomputed", roundings)
        if b is None:
            return None
        units.append(b.worst)
    return Recomputed(units[0], units[1], f"{opr_type} {how}")


#: operator types the C kernel recomputes (float32 dumps): its op codes (_kernel.c: recheck_f32)
IN_KERNEL = {"ConvolutionForward": 0, "MatrixMul": 1, "BatchedMatrixMul": 1}

#: a recompute the kernel takes: its op code, dims, candidates' parameters and descriptions, and
#: the terms each output element sums
KernelPlan = Tuple[int, Tuple[int, ...], Tuple[Tuple[int, ...], ...], Tuple[str, ...], int]


def kernel_plan(opr_type: str, in_shapes: Sequence[Tuple[int, ...]], out_shape: Tuple[int, ...]) -> Optional[KernelPlan]:
    """How the C kernel recomputes ``opr_type`` on these shapes (float32), the same candidates
    :func:`recompute` tries in the same order; None where it does not (no kernel, another operator,
    a matrix product that broadcasts its batch, an empty tensor): :func:`recompute` then."""
    op = IN_KERNEL.get(opr_type)
    if op is None or KERNEL is None or not hasattr(KERNEL, "recheck_f32"):
        return None
    shapes, out = [tuple(s) for s in in_shapes], tuple(out_shape)
    if len(shapes) != 2 or any(d < 1 for s in (*shapes, out) for d in s):
        return None
    if op == 0:
        x, w = shapes
        cands = tuple(itertools.islice(conv_params(shapes, out), MAX_CANDIDATES))
        if not cands:
            return None
        g, (ocg, icg, kh, kw) = (w[0], w[1:]) if len(w) == 5 else (1, w)
        dims = (x[0], x[1], x[2], x[3], g, ocg, icg, kh, kw, out[2], out[3])
        if x[1] != g * icg or x[0] * g * ocg != out[0] * out[1]:
            # exact.conv2d refuses the channels, or its result does not fit the output: recompute
            # gives None, and so does the plan without candidates
            return op, dims, (), (), 0
        if out[:2] != (x[0], g * ocg):
            return None  # a result of the output's size in another shape: numpy's reshape
        hows = tuple(_conv_how(p, len(w) == 5) for p in cands)
        return op, dims, cands, hows, icg * kh * kw
    a, b = shapes
    if not (a[:-2] == b[:-2] == out[:-2]):
        return None  # a batch broadcast: numpy's einsum
    found = tuple(itertools.islice(matmul_params(shapes, out), MAX_CANDIDATES))
    if not found or len({k for _ta, _tb, k in found}) != 1:
        return None
    return (op, (math.prod(a[:-2]), a[-2], a[-1], b[-2], b[-1]), tuple((int(ta), int(tb)) for ta, tb, _k in found),
            tuple(f"transposeA={ta} transposeB={tb}" for ta, tb, _k in found), found[0][2])


def recompute_f32(opr_type: str, plan: KernelPlan, out_a: bytes, ins_a: Sequence[bytes], out_b: bytes,
                  ins_b: Sequence[bytes]) -> Optional[Recomputed]:
    """:func:`recompute` of float32 dumps (their values' bytes) by the C kernel, as ``plan``
    (:func:`kernel_plan`) says: no numpy."""
    op, dims, cands, hows, k = plan
    if not cands:
        return None
    got = KERNEL.recheck_f32(op, cands, dims, out_a, ins_a[0], ins_a[1], out_b, ins_b[0], ins_b[1], k,  # type: ignore[union-attr]
                             bounds.EPS["float32"], bounds.TINY["float32"], bounds.SHARED_ROUNDINGS)
    if got is None:
        return None
    units_a, units_b, chosen = got
    return Recomputed(units_a, units_b, f"{opr_type} {hows[chosen]}")
