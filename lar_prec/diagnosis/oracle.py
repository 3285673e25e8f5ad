"""An independent float64 oracle for MegEngine operators (numpy only).

Each operator of a model is recomputed in float64 from its inputs' values, with the
parameters the model gives it (:mod:`lar_prec.diagnosis.graphinfo`: stride, padding, groups,
mode, axis...). It is fed what a layerwise run is fed: the reference dump's values of the
operator's inputs (:func:`golden_inputs`, by var id as :func:`lar_prec.local.feed_inputs`
does), so its result is what the operator should give on exactly those inputs.

``fp16_io=True`` rounds every float input to float16 (weights included, as the fp16 options
convert constants) and the float outputs to float16: what an operator storing in float16 but
computing exactly would give. Against it, :func:`classify_fp16` tells why an operator errs
under an fp16 option:

* **float16 rounding (inherent)**: the kernel is as close to the oracle on float16-rounded
  inputs as float16 output rounding allows: the error is the price of float16 storage (keep
  the operator in float32, or accept it);
* **float16 accumulation (fixed by float32 compute)**: the kernel is farther than that, and
  the same operator computing in float32 on float16 storage (``io16xc32``, or its compute
  mode) is not;
* **kernel wrong**: the oracle and the naive kernel agree, the default kernel does not, by
  more than float16 accumulation could lose: a repro for MegEngine.

The same comparison tells, in naive-vs-default, which side is wrong (:func:`which_side`).

Quantized values are real values ``(raw - zero_point) * scale`` here (:func:`dequantize`);
an operator with a quantized output rounds like MegDNN (half away from zero, clamped).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.diagnosis.graphinfo import GraphInfo, GraphOpr, GraphVar
from lar_prec.errors import LarPrecError
from lar_prec.compare.metrics import max_megengine_err, n_nonfinite
from lar_prec.diagnosis.graphinfo import macs
from lar_prec.compare import bounds, exact
from lar_prec.compare.bounds import TERMS_C
from lar_prec.lar.layerwise_build import sums_terms
from lar_prec.records import json_number

#: float16 rounding unit (2^-10) and float32's (2^-23)
EPS16, EPS32 = 2.0 ** -10, 2.0 ** -23
#: integer range of each quantized dtype (raw values)
QRANGE = {"QuantizedS8": (-128, 127), "QuantizedS32": (-2 ** 31, 2 ** 31 - 1), "QuantizedS16": (-32768, 32767),
          "Quantized8Asymm": (0, 255), "QuantizedS4": (-8, 7), "Quantized4Asymm": (0, 15)}
#: a default kernel this many times farther from the oracle than the naive float16 kernel (both
#: accumulating in float16), and not fixed by float32 compute, is wrong (:func:`classify_fp16`)
NAIVE_RATIO = 8.0
#: the verdicts of :func:`classify_fp16`
ROUNDING, ACCUMULATION, KERNEL_WRONG, UNEXPLAINED, NO_ERROR = (
    "float16 rounding (inherent)", "float16 accumulation (fixed by float32 compute)",
    "kernel wrong (oracle and naive agree, default does not)", "unexplained", "no error")


class OracleUnsupported(LarPrecError):
    """The oracle has no definition for this operator (or this parameter of it)."""


# ============================================================================ values


def _round_half_away(x: "np.ndarray") -> "np.ndarray":
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def dequantize(raw: "np.ndarray", var: GraphVar) -> "np.ndarray":
    """Real float64 values of a var's stored values (``(raw - zero_point) * scale`` when quantized)."""
    a = np.asarray(raw)
    if var.is_quantized:
        if var.scale is None:
            raise OracleUnsupported(f"{var.name}: quantized ({var.dtype}) without a scale in the graph record")
        return (a.astype(np.float64) - (var.zero_point or 0)) * var.scale
    return a.astype(np.float64)


def quantize(real: "np.ndarray", var: GraphVar) -> "np.ndarray":
    """Real values rounded to ``var``'s quantized grid (MegDNN: round half away, clamp), as reals."""
    lo, hi = QRANGE.get(var.dtype, (None, None))
    if lo is None or var.scale is None:
        raise OracleUnsupported(f"{var.name}: cannot quantize to {var.dtype}")
    zp = var.zero_point or 0
    q = np.clip(_round_half_away(np.asarray(real, np.float64) / var.scale) + zp, lo, hi)
    return (q - zp) * var.scale


def to_dtype(real: "np.ndarray", var: GraphVar) -> "np.ndarray":
    """Float64 values as ``var``'s dtype stores them (float16/float32 rounding, integer
    truncation, quantized rounding), still as float64 (or bool)."""
    a = np.asarray(real)
    if a.dtype == np.bool_ or var.dtype == "Bool":
        return a.astype(np.bool_)
    if var.is_quantized:
        return quantize(a, var)
    if var.dtype == "Float16":
        return a.astype(np.float16).astype(np.float64)
    if var.dtype in ("Float32", "BFloat16"):
        return a.astype(np.float32).astype(np.float64)
    if var.dtype.startswith(("Int", "Uint")):
        with np.errstate(invalid="ignore"):
            return np.trunc(a).astype(np.float64)
    return a


# ============================================================================ operators


_NONLINEAR: Dict[str, Callable[["np.ndarray"], "np.ndarray"]] = {
    "IDENTITY": lambda x: x,
    "RELU": lambda x: np.maximum(x, 0.0),
    "SIGMOID": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "H_SWISH": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
}


def _erf(x: "np.ndarray") -> "np.ndarray":
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _sigmoid(x: "np.ndarray") -> "np.ndarray":
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x: "np.ndarray") -> "np.ndarray":
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


#: Elemwise modes: float64 definitions (MegDNN's kern_defs); integer-only semantics noted
_ELEMWISE: Dict[str, Callable[..., "np.ndarray"]] = {
    "RELU": lambda x: np.maximum(x, 0.0), "ABS": np.abs, "NEGATE": np.negative, "EXP": np.exp,
    "EXPM1": np.expm1, "LOG": np.log, "LOG1P": np.log1p, "SIN": np.sin, "COS": np.cos, "TAN": np.tan,
    "TANH": np.tanh, "SINH": np.sinh, "COSH": np.cosh, "ASIN": np.arcsin, "ACOS": np.arccos,
    "ASINH": np.arcsinh, "ACOSH": np.arccosh, "ATANH": np.arctanh, "CEIL": np.ceil, "FLOOR": np.floor,
    "ROUND": _round_half_away, "SIGN": np.sign, "SQRT": np.sqrt, "SQUARE": np.square,
    "SIGMOID": _sigmoid, "SILU": lambda x: x * _sigmoid(x), "SOFTPLUS": _softplus,
    "LOGSIGMOID": lambda x: -_softplus(-x), "ERF": _erf, "ERFC": lambda x: 1.0 - _erf(x),
    "GELU": lambda x: x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0))),
    "H_SWISH": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, "HSIGMOID": lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "RELU6": lambda x: np.clip(x, 0.0, 6.0), "FAST_TANH": lambda x: x * (27.0 + x * x) / (27.0 + 9.0 * x * x),
    "ISNAN": np.isnan, "ISINF": np.isinf, "NOT": np.logical_not,
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "TRUE_DIV": np.true_divide, "POW": np.power,
    "MAX": np.maximum, "MIN": np.minimum, "ATAN2": np.arctan2, "LT": np.less, "LEQ": np.less_equal,
    "EQ": np.equal, "NEQ": np.not_equal, "AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor,
    "LOG_SUM_EXP": np.logaddexp, "SWITCH_GT0": lambda x, y: np.where(x > 0, y, 0.0),
    "PRELU": lambda x, w: np.where(x > 0, x, x * w),
    "FUSE_ADD_RELU": lambda x, y: np.maximum(x + y, 0.0), "FUSE_ADD_SIGMOID": lambda x, y: _sigmoid(x + y),
    "FUSE_ADD_TANH": lambda x, y: np.tanh(x + y),
    "FUSE_ADD_H_SWISH": lambda x, y: (x + y) * np.clip(x + y + 3.0, 0.0, 6.0) / 6.0,
    "FUSE_MUL_ADD3": lambda a, b, c: a * b + c, "FUSE_MUL_ADD4": lambda a, b, c, d: a * b + c * d,
    "COND_LEQ_MOV": lambda a, b, c: np.where(a <= b, c, 0.0), "COND_LT_MOV": lambda a, b, c: np.where(a < b, c, 0.0),
    "CLIP": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
}
#: modes whose integer meaning differs from the float one (MegDNN: integer MOD follows Python's
#: sign rule, float MOD is C's fmodf)
_ELEMWISE_INT = {"FLOOR_DIV": np.floor_divide, "MOD": np.mod, "TRUE_DIV": np.true_divide}
_ELEMWISE_FLOAT = {"FLOOR_DIV": lambda a, b: np.floor(a / b), "MOD": np.fmod}


def _elemwise(mode: str, xs: Sequence["np.ndarray"], integer: bool) -> "np.ndarray":
    table = _ELEMWISE_INT if integer else _ELEMWISE_FLOAT
    fn = table.get(mode) or _ELEMWISE.get(mode)
    if fn is None:
        raise OracleUnsupported(f"Elemwise mode {mode}")
    with np.errstate(all="ignore"):
        return np.asarray(fn(*xs))


def _dimshuffle(x: "np.ndarray", p: Dict[str, Any], out_shape: Tuple[int, ...]) -> "np.ndarray":
    pattern = [int(k) for k in p.get("pattern", [])[: p.get("ndim", len(p.get("pattern", [])))]]
    kept = [k for k in pattern if k >= 0]
    return np.transpose(x, kept).reshape(out_shape)


def _compute(g: GraphInfo, opr: GraphOpr, xs: List[Optional["np.ndarray"]]) -> List["np.ndarray"]:
    """The operator's outputs in float64 from real-valued inputs (None: not available)."""
    p = opr.params if isinstance(opr.params, dict) else {}
    outs = [g.vars[i] for i in opr.outputs]
    shape0 = outs[0].shape or ()

    def need(*k: int) -> List["np.ndarray"]:
        got = [xs[i] for i in k]
        if any(v is None for v in got):
            raise OracleUnsupported(f"{opr.type}: an input value is missing")
        return got  # type: ignore[return-value]

    t = opr.type
    try:
        return _compute_op(t, p, xs, need, g, opr, shape0)
    except exact.Unsupported as exc:
        raise OracleUnsupported(str(exc)) from None


def _compute_op(t: str, p: Dict[str, Any], xs: List[Optional["np.ndarray"]], need: Callable[..., List["np.ndarray"]],
                g: GraphInfo, opr: GraphOpr, shape0: Tuple[int, ...]) -> List["np.ndarray"]:
    if t == "ConvolutionForward":
        return [exact.conv2d(*need(0, 1), p)]
    if t == "ConvBiasForward":
        y = exact.conv2d(*need(0, 1), p)
        if len(xs) > 2 and xs[2] is not None and xs[2].size:
            y = y + xs[2]
        if len(xs) > 3 and xs[3] is not None and xs[3].size:
            y = y + xs[3]
        mode = p.get("nonlineMode", "IDENTITY")
        if mode not in _NONLINEAR:
            raise OracleUnsupported(f"ConvBias nonlinearity {mode}")
        return [_NONLINEAR[mode](y)]
    if t in ("MatrixMul", "BatchedMatrixMul"):
        if p.get("format", "DEFAULT") != "DEFAULT":
            raise OracleUnsupported(f"{t} format {p.get('format')}")
        return [exact.matmul(*need(0, 1), bool(p.get("transposeA")), bool(p.get("transposeB")))]
    if t == "PoolingForward":
        return [exact.pool2d(need(0)[0], p)]
    if t == "Elemwise":
        vals = [np.broadcast_to(v, shape0) if v.ndim else v for v in need(*range(len(xs)))]
        integer = all(g.vars[i].dtype.startswith(("Int", "Uint")) for i in opr.inputs)
        return [_elemwise(p.get("mode", ""), vals, integer)]
    if t == "Reduce":
        return [exact.reduce(need(0)[0], p.get("mode", "SUM"), shape0)]
    if t == "SoftmaxForward":
        if "axis" not in p:
            raise OracleUnsupported("Softmax without a known axis (neither in the params nor probed)")
        return [exact.softmax(need(0)[0], p["axis"])]
    if t in ("TypeCvt", "Copy", "Identity"):
        return [need(0)[0]]
    if t in ("Reshape", "AxisAddRemove"):
        return [need(0)[0].reshape(shape0)]
    if t == "Broadcast":
        return [np.broadcast_to(need(0)[0], shape0).copy()]
    if t == "Dimshuffle":
        return [_dimshuffle(need(0)[0], p, shape0)]
    if t == "Concat":
        return [np.concatenate(need(*range(len(xs))), axis=p.get("axis", 0))]
    raise OracleUnsupported(f"operator type {t}")


def evaluate(g: GraphInfo, opr: GraphOpr, inputs: Sequence[Optional["np.ndarray"]], *,
             fp16_io: bool = False) -> List["np.ndarray"]:
    """``opr``'s outputs in float64 from its inputs' stored values (dump arrays, raw integers
    for quantized vars; None where a value is not needed or missing), each rounded to its
    output dtype's storage (float32, float16, integers, quantized grid: as real values).

    ``fp16_io``: float inputs and outputs rounded to float16, the arithmetic exact.

    Raises:
        OracleUnsupported: an operator type, mode or layout the oracle does not define.
    """
    if len(inputs) != len(opr.inputs):
        raise OracleUnsupported(f"{opr.type}: {len(inputs)} inputs given, it has {len(opr.inputs)}")
    xs: List[Optional["np.ndarray"]] = []
    for vid, raw in zip(opr.inputs, inputs):
        if raw is None:
            xs.append(None)
            continue
        v = g.vars[vid]
        x = dequantize(raw, v)
        if fp16_io and v.is_float:
            x = x.astype(np.float16).astype(np.float64)
        xs.append(x)
    outs = _compute(g, opr, xs)
    result = []
    for vid, y in zip(opr.outputs, outs):
        v = g.vars[vid]
        if v.shape is not None and tuple(y.shape) != tuple(v.shape):
            y = y.reshape(v.shape)
        y = to_dtype(y, v)
        if fp16_io and v.is_float:
            y = y.astype(np.float16).astype(np.float64)
        result.append(y)
    return result


# ============================================================================ on dumps


def golden_inputs(g: GraphInfo, opr: GraphOpr, folder: Any) -> List[Optional["np.ndarray"]]:
    """The stored values of ``opr``'s inputs in a dump of the same model (a
    :class:`~lar_prec.iodump.DumpFolder`): by var id when the name agrees, else by the one var
    of that name; None for a var without a dump (shapes MegEngine inferred at compile time)."""
    out: List[Optional["np.ndarray"]] = []
    names: Optional[Dict[str, List[int]]] = None
    for vid in opr.inputs:
        v = g.vars[vid]
        if vid in folder and folder[vid].var.name == v.name:
            out.append(np.asarray(folder[vid].array()))
            continue
        if names is None:
            names = {}
            for d in folder:
                names.setdefault(d.var.name, []).append(d.id)
        ids = names.get(v.name, [])
        out.append(np.asarray(folder[ids[-1]].array()) if len(set(ids)) == 1 else None)
    return out


@dataclass(frozen=True)
class OracleCheck:
    """The oracle against one dumped output: ``err`` in MegEngine's metric (None: not
    compared, ``why``), the reduction length ``k`` (products or terms per output element)."""

    id: int
    name: str
    opr_type: str
    err: Optional[float]
    k: int = 1
    why: str = ""


def reduction_terms(g: GraphInfo, opr: GraphOpr) -> int:
    """Terms one output element sums (convolution, matrix product, pooling, reduce, softmax)."""

    out = g.vars[opr.outputs[0]].shape or ()
    size = math.prod(out) if out else 1
    if opr.type in ("ConvolutionForward", "ConvBiasForward", "MatrixMul", "BatchedMatrixMul"):
        return max(1, macs(g, opr) // max(size, 1))
    if opr.type == "PoolingForward" and isinstance(opr.params, dict):
        return int(opr.params.get("window_h", 1) * opr.params.get("window_w", 1))
    x = g.vars[opr.inputs[0]].shape if opr.inputs else None
    if opr.type == "Reduce" and x:
        return max(1, math.prod(x) // max(size, 1))
    if opr.type == "SoftmaxForward" and x and isinstance(opr.params, dict) and "axis" in opr.params:
        return int(x[opr.params["axis"]])
    return 1


def check_dump(g: GraphInfo, folder: Any, *, fp16_io: bool = False) -> List[OracleCheck]:
    """The oracle on every computing operator of a dump of ``g``'s model, fed from that same
    dump: each output against the dumped one (the kernel that ran, on the same inputs)."""
    checks: List[OracleCheck] = []
    for opr in g.computing():
        for k, vid in enumerate(opr.outputs):
            v = g.vars[vid]
            if vid not in folder or folder[vid].var.name != v.name:
                checks.append(OracleCheck(vid, v.name, opr.type, None, why="not in the dump"))
                continue
            try:
                got = evaluate(g, opr, golden_inputs(g, opr, folder), fp16_io=fp16_io)[k]
            except OracleUnsupported as exc:
                checks.append(OracleCheck(vid, v.name, opr.type, None, why=str(exc)))
                continue
            dumped = dequantize(np.asarray(folder[vid].array()), v)
            checks.append(OracleCheck(vid, v.name, opr.type, max_megengine_err(got.astype(np.float32),
                                                                               dumped.astype(np.float32)),
                                      reduction_terms(g, opr)))
    return checks


# ============================================================================ verdicts


def _err(a: "np.ndarray", b: "np.ndarray") -> float:
    """MegEngine's metric; inf when NaN/Inf appear on one side only (a kernel's garbage)."""
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if n_nonfinite(a32, b32):
        return math.inf
    return max_megengine_err(a32, b32)


def _magnitude(reference: "np.ndarray") -> float:
    finite = np.abs(np.asarray(reference, np.float64))
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if finite.size else 1.0


#: float16 units two correct float16 results of one exact value may be apart: each rounds
#: once to the output (half a unit), a kernel also rounds its inputs' products and sums
IO_FLOOR_ULPS = 2.0


def io_floor(reference: "np.ndarray") -> float:
    """How far two correct float16 results of the same operator on the same float16 inputs
    may be apart in MegEngine's metric (absolute below 1, relative above): two float16 units
    of the largest value, at most two units of 1."""
    return IO_FLOOR_ULPS * EPS16 * min(max(_magnitude(reference), 2.0 ** -14), 1.0)


@dataclass(frozen=True)
class Fp16Verdict:
    """Why one operator errs under an fp16 option; errors in MegEngine's metric, each kernel
    against the oracle on float16-rounded inputs (None: that run was not given)."""

    kind: str
    why: str
    default_vs_oracle: float
    naive_vs_oracle: Optional[float]
    f32_compute_vs_oracle: Optional[float]
    oracle_vs_reference: float
    default_vs_reference: float
    floor: float

    def to_json(self) -> Dict[str, Any]:

        return {"kind": self.kind, "why": self.why, "floor": self.floor,
                **{k: json_number(getattr(self, k)) if getattr(self, k) is not None else None
                   for k in ("default_vs_oracle", "naive_vs_oracle", "f32_compute_vs_oracle",
                             "oracle_vs_reference", "default_vs_reference")}}


def classify_fp16(reference: "np.ndarray", default: "np.ndarray", oracle16: "np.ndarray", *,
                  naive: "Optional[np.ndarray]" = None, f32_compute: "Optional[np.ndarray]" = None,
                  terms: int = 1, floor: Optional[float] = None) -> Fp16Verdict:
    """Why an operator's output under an fp16 option differs from the float32 reference.

    ``reference``: the operator's output in the naive float32 run (its golden output);
    ``default``: its local output under the option with the default kernels; ``oracle16``:
    :func:`evaluate` with ``fp16_io`` on the golden inputs; ``naive``: its local output under
    the option with the naive kernels; ``f32_compute``: under float32 compute on float16
    storage (``io16xc32``); ``terms``: how many terms one output element sums
    (:func:`reduction_terms`). ``floor`` (default :func:`io_floor`): how far two correct
    float16 results of the operator may be apart.

    In order: within the floor of the oracle: float16 rounding. The naive kernel within the
    floor and the default farther than float16 accumulation over ``terms`` could lose (one
    unit per term): kernel wrong. Float32 compute within the floor: float16 accumulation. The
    naive kernel within the floor and no float32 compute output: kernel wrong only beyond the
    accumulation bound (checked above). The default kernel more than :data:`NAIVE_RATIO` times
    as far as the naive one (which accumulates in float16 as well) and float32 compute not
    within the floor: kernel wrong. Else not known.
    """
    mag = _magnitude(reference)
    f = io_floor(reference) if floor is None else floor
    accumulation = max(f, EPS16 * max(int(terms), 1) * min(max(mag, 2.0 ** -14), 1.0))
    d_def = _err(oracle16, default)
    d_naive = _err(oracle16, naive) if naive is not None else None
    d_f32 = _err(oracle16, f32_compute) if f32_compute is not None else None
    e_or, e_def = _err(reference, oracle16), _err(reference, default)
    rec = dict(default_vs_oracle=d_def, naive_vs_oracle=d_naive, f32_compute_vs_oracle=d_f32,
               oracle_vs_reference=e_or, default_vs_reference=e_def, floor=f)
    naive_ok = d_naive is not None and d_naive <= f
    if e_def == 0.0:
        return Fp16Verdict(NO_ERROR, "the default kernel under the option gives the float32 reference", **rec)
    if d_def <= f:
        return Fp16Verdict(ROUNDING, f"within {f:.3g} of exact arithmetic on float16-rounded inputs ({d_def:.3g}): "
                                     "the error is float16 storage", **rec)
    if naive_ok and d_def > accumulation:
        return Fp16Verdict(KERNEL_WRONG, f"the naive kernel agrees with the oracle ({d_naive:.3g} <= {f:.3g}), the "
                                         f"default kernel is {d_def:.3g} from it, more than float16 accumulation over "
                                         f"{terms} terms can lose ({accumulation:.3g})", **rec)
    if d_f32 is not None and d_f32 <= f:
        return Fp16Verdict(ACCUMULATION, f"{d_def:.3g} from exact arithmetic on float16-rounded inputs, "
                                         f"{d_f32:.3g} with float32 compute", **rec)
    if d_naive is not None and d_def > max(NAIVE_RATIO * d_naive, 2 * f):
        # the naive float16 kernel accumulates in float16 too (convolutions, matrix products):
        # a default kernel many times farther than it, not fixed by float32 compute, is wrong
        return Fp16Verdict(KERNEL_WRONG, f"the default kernel is {d_def:.3g} from exact arithmetic on float16-rounded "
                                         f"inputs, {d_def / d_naive if d_naive else math.inf:.3g}x as far as the naive "
                                         f"float16 kernel ({d_naive:.3g})"
                                         + (f", and float32 compute does not fix it ({d_f32:.3g})" if d_f32 is not None
                                            else ""), **rec)
    if naive_ok:
        return Fp16Verdict(UNEXPLAINED, f"{d_def:.3g} from exact arithmetic on float16-rounded inputs, within what "
                                        f"float16 accumulation over {terms} terms may lose ({accumulation:.3g}); the "
                                        "naive kernel agrees with the oracle, float32 compute "
                                        + ("does not fix it" if d_f32 is not None else "was not measured"), **rec)
    missing = [n for n, x in (("the naive kernel's", naive), ("float32 compute's", f32_compute)) if x is None]
    return Fp16Verdict(UNEXPLAINED, f"{d_def:.3g} from exact arithmetic on float16-rounded inputs"
                                    + (f"; without {' or '.join(missing)} output the cause is not known" if missing
                                       else "; neither the naive kernel nor float32 compute is within the floor"),
                       **rec)


def which_side(reference: "np.ndarray", test: "np.ndarray", oracle: "np.ndarray", floor: float) -> str:
    """In naive-vs-default: ``"test"`` when the reference agrees with the oracle and the test
    does not, ``"reference"`` for the opposite, ``"both"`` when neither does, ``"neither"``
    when both do (a difference within ``floor`` of exact arithmetic)."""
    return _side(_err(oracle, reference) <= floor, _err(oracle, test) <= floor)


def _side(reference_ok: bool, test_ok: bool) -> str:
    return {(True, False): "test", (False, True): "reference", (False, False): "both"}.get(
        (reference_ok, test_ok), "neither")


def _mode(opr: GraphOpr) -> Optional[str]:
    return opr.param("nonlineMode") if opr.type.startswith("ConvBias") else opr.param("mode")


def rounding_scale(g: GraphInfo, opr: GraphOpr, inputs: Sequence[Optional["np.ndarray"]], index: int,
                   exact: "np.ndarray") -> Optional[Tuple["np.ndarray", float]]:
    """Each element's rounding scale ``U`` of output ``index`` of ``opr`` on ``inputs`` (stored
    values) whose exact value is ``exact``, and how many roundings add up
    (:mod:`lar_prec.compare.bounds`); None for an operator without one. A sum's magnitudes
    are the oracle itself on the absolute values of the inputs."""
    xs = [None if x is None else np.abs(dequantize(np.asarray(x), g.vars[v])) for v, x in zip(opr.inputs, inputs)]
    if sums_terms(opr.type, _mode(opr)):
        k = reduction_terms(g, opr)
        return bounds.terms_scale(evaluate(g, opr, xs)[index], k), bounds.roundings(k)
    x = None if not inputs or inputs[0] is None else dequantize(np.asarray(inputs[0]), g.vars[opr.inputs[0]])
    if x is None:
        return None
    if opr.type == "SoftmaxForward" and isinstance(opr.param("axis"), int):
        axis = opr.param("axis")
        return bounds.softmax_scale(x, exact, axis), bounds.roundings(x.shape[axis])
    if opr.type == "LayerNormForward" and len(opr.outputs) > 1 and g.vars[opr.outputs[1]].shape is not None:
        axis = len(g.vars[opr.outputs[1]].shape)
        gamma, beta = (xs[1], xs[2]) if len(xs) == 3 else (None, None)
        n = int(np.prod(x.shape[axis:]))
        return bounds.layernorm_scale(x, exact, axis, index, gamma, beta), bounds.roundings(n)
    return None


# ============================================================================ roots of naive-vs-default


@dataclass(frozen=True)
class RootSide:
    """Which side of a naive-vs-default root is wrong by the float64 oracle on the reference's
    inputs (``test``, ``reference``, ``both``, ``neither``; ``unknown`` with ``why`` when the
    oracle could not say), each side's distance from it (MegEngine's metric) and, where the
    operator has a rounding scale (:func:`rounding_scale`), in rounding units, each side held
    to ``TERMS_C`` of them; else to ``floor`` in the metric."""

    id: int
    side: str
    reference_err: Optional[float] = None
    test_err: Optional[float] = None
    floor: Optional[float] = None
    why: str = ""
    reference_units: Optional[float] = None
    test_units: Optional[float] = None


def root_sides(g: GraphInfo, ref: Any, roots: Sequence[Tuple[int, str, float]], *,
               test_local: Optional[Callable[[int], Optional["np.ndarray"]]] = None,
               test_dump: Any = None) -> List[RootSide]:
    """For each root ``(var id in the dumps, name, floor)``: each side's output against the
    float64 oracle of the operator that writes it *on the inputs that side computed from*,
    never a side's output against exact arithmetic on other inputs (that difference carries
    the inputs' error). The reference side: its dumped value, oracle on the reference dump's
    inputs. The test side: ``test_local(var id)``, the test kernel's output on the reference's
    inputs (the layerwise run of local error), with the same oracle; where that is None, the
    ``test_dump`` folder's value with the oracle on that dump's own inputs; else unknown.
    ``g`` describes the graph that ran (ids as in the dumps, else found by the var's name);
    ``floor`` is how far a correct result may be from exact arithmetic where the operator has
    no rounding scale (a float16 var gets at least :func:`io_floor`)."""
    by_name: Dict[str, List[int]] = {}
    for vid, v in g.vars.items():
        by_name.setdefault(v.name, []).append(vid)
    out: List[RootSide] = []
    for vid, name, floor in roots:
        gid = vid if vid in g.vars and g.vars[vid].name == name else (
            by_name[name][0] if len(by_name.get(name, ())) == 1 else None)
        opr = g.producer(gid) if gid is not None else None
        if opr is None or vid not in ref:
            out.append(RootSide(vid, "unknown", why="its operator is not in the model's graph or a dump lacks it"))
            continue
        test_value = test_local(vid) if test_local is not None else None
        test_inputs = None  # None: the reference's
        if test_value is None and test_dump is not None and vid in test_dump:
            test_value, test_inputs = np.asarray(test_dump[vid].array()), golden_inputs(g, opr, test_dump)
        if test_value is None:
            out.append(RootSide(vid, "unknown", why="the test kernel's output was not measured on known inputs"))
            continue
        fmt = opr.params.get("format") if isinstance(opr.params, dict) else None
        if fmt not in (None, "NCHW", "DEFAULT"):
            out.append(RootSide(vid, "unknown", why=f"the oracle computes NCHW only, this operator runs in {fmt}"))
            continue
        index = list(opr.outputs).index(gid)
        inputs = golden_inputs(g, opr, ref)
        try:
            got = evaluate(g, opr, inputs)[index]
            got_test = got if test_inputs is None else evaluate(g, opr, test_inputs)[index]
        except OracleUnsupported as exc:
            out.append(RootSide(vid, "unknown", why=f"the oracle does not compute it: {exc}"))
            continue
        except ValueError as exc:  # shapes the oracle cannot line up (a layout it does not model)
            out.append(RootSide(vid, "unknown", why=f"the oracle cannot compute it on these shapes: {exc}"))
            continue
        v = g.vars[gid]
        a = dequantize(np.asarray(ref[vid].array()), v)
        b = dequantize(np.asarray(test_value), v).reshape(a.shape) if np.size(test_value) == a.size else None
        if b is None:
            out.append(RootSide(vid, "unknown", why="the test kernel's output has another size than the reference's"))
            continue
        if v.dtype == "Float16":
            floor = max(floor, io_floor(a))
        dtype = v.dtype.lower() if v.dtype.lower() in bounds.EPS else "float32"
        units = []
        for value, want, ins in ((a, got, inputs), (b, got_test, test_inputs or inputs)):
            scale = rounding_scale(g, opr, ins, index, want)
            units.append(bounds.measure(value, want, scale[0], dtype, "oracle", scale[1]) if scale else None)
        if units[0] is not None and units[1] is not None:
            side = _side(units[0].worst <= TERMS_C, units[1].worst <= TERMS_C)
        else:
            side = _side(_err(got, a) <= floor, _err(got_test, b) <= floor)
        out.append(RootSide(vid, side, _err(got, a), _err(got_test, b), floor,
                            reference_units=units[0].worst if units[0] else None,
                            test_units=units[1].worst if units[1] else None))
    return out
