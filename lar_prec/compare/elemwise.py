"""The rounding bound of every elementwise mode of MegEngine 1.13 (issue 51 #1).

Each mode is written as MegEngine's reference kernels compute it
(``dnn/src/common/elemwise/kern_defs.cuh``: GELU is ``x * 0.5 * (1 + erf(x / sqrt 2))``, SIGMOID
``1 / (exp(-x) + 1)``, ...), step by step on :class:`Val` s: a value and its rounding scale ``u``
(absolute; one rounding unit is ``eps * u``). Each step carries its inputs' scales through its
derivatives (their condition numbers) and adds its own rounding: one unit of its result for a
correctly rounded ``+ - *`` and ``sqrt``, two for a division (SIMD kernels divide by a refined
reciprocal), :data:`LIBM_ULPS` for a function of the math library (the documented accuracy of
vector math libraries), whose argument reduction also rounds its argument once; selections,
negations, clips and comparisons add nothing. So a mode's scale is what correct arithmetic
allows for the formula it computes, including where its steps cancel (GELU of a large negative
``x`` rounds ``1 + erf`` to ``eps`` of 1, then multiplies by ``x``).

A chain of modes fused into one measured unit (lite fuses small elementwise chains at load time)
is carried through the same way (:func:`chain_scale`). Under a float16 option the inputs are
rounded to float16 on their way in: what that changes, ``|f(x16) - f(x)|`` over either float16
neighbour of each input, is computed exactly (:func:`input_rounding`). A mode with no entry in :data:`MODES` is not judged
(:func:`mode_rule` says why); every mode of Elemwise and ElemwiseMultiType has one (a test walks
them and holds MegEngine's own kernels to these bounds). Numpy only, float64.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np

Arrays = Sequence["np.ndarray"]
#: the accuracy of a math library function, in units of its result (glibc documents <= 2 for
#: the float functions used here, vector libraries about as much)
LIBM_ULPS = 4.0
_UFUNCS: Dict[str, Callable] = {}


def _libm(name: str) -> Callable:
    """math.erf and math.erfc element by element: exact to double rounding (numpy has none)."""
    def call(x: "np.ndarray") -> "np.ndarray":
        if name not in _UFUNCS:  # made on first use: importing this module imports no numpy
            _UFUNCS[name] = np.frompyfunc(getattr(math, name), 1, 1)
        return _UFUNCS[name](np.asarray(x, dtype=np.float64)).astype(np.float64)
    return call


@dataclass(frozen=True)
class Val:
    """A value (float64) and the scale of its rounding (``u``: absolute, in units of eps)."""

    v: "np.ndarray"
    u: "np.ndarray"

    @staticmethod
    def of(x: "np.ndarray", u: Optional["np.ndarray"] = None) -> "Val":
        x = np.asarray(x, dtype=np.float64)
        return Val(x, np.zeros_like(x) if u is None else np.asarray(u, dtype=np.float64))


def _abs(a):
    return np.abs(np.where(np.isfinite(a), a, 0.0))


def const(c: float) -> Val:
    return Val(np.float64(c), np.float64(0.0))


def add(a: Val, b: Val, rounds: float = 1.0) -> Val:
    v = a.v + b.v
    return Val(v, a.u + b.u + rounds * _abs(v))


def sub(a: Val, b: Val) -> Val:
    v = a.v - b.v
    return Val(v, a.u + b.u + _abs(v))


def mul(a: Val, b: Val) -> Val:
    v = a.v * b.v
    return Val(v, _abs(b.v) * a.u + _abs(a.v) * b.u + _abs(v))


def div(a: Val, b: Val) -> Val:
    with np.errstate(divide="ignore", invalid="ignore"):
        v = a.v / b.v
        u = _abs(1.0 / b.v) * a.u + _abs(v / b.v) * b.u + 2.0 * _abs(v)
    return Val(v, u)


def fn(a: Val, f: Callable, df: Callable, ulps: float = LIBM_ULPS) -> Val:
    """A math library function: its argument's scale through its slope, the rounding of its
    argument in its reduction (one unit of ``|x|``), and its own accuracy."""
    with np.errstate(all="ignore"):
        v = np.asarray(f(a.v), dtype=np.float64)
        slope = _abs(np.asarray(df(a.v), dtype=np.float64))
    return Val(v, slope * (a.u + _abs(a.v)) + ulps * _abs(v))


def select(cond: "np.ndarray", a: Val, b: Val) -> Val:
    """``cond ? a : b``: no rounding, the chosen side's scale (a comparison's own inputs, when
    they differ by a rounding, can pick the other side: the values there are the same where the
    two meet, as in every mode MegEngine has)."""
    return Val(np.where(cond, a.v, b.v), np.where(cond, a.u, b.u))


def neg(a: Val) -> Val:
    return Val(-a.v, a.u)


def _exact(f: Callable) -> Callable:
    """A mode that selects or compares: its value, no scale of its own, its inputs' carried."""
    def expr(*xs: Val) -> Val:
        with np.errstate(all="ignore"):
            v = np.asarray(f(*[x.v for x in xs]), dtype=np.float64)
        u = np.zeros_like(v)
        for x in xs:
            u = u + np.broadcast_to(x.u, np.broadcast(v, x.u).shape)
        return Val(v, u)
    return expr


def _compare(f: Callable) -> Callable:
    def expr(*xs: Val) -> Val:
        v = np.asarray(f(*[x.v for x in xs]), dtype=np.float64)
        return Val(v, np.zeros_like(v))
    return expr


def _exp(a: Val) -> Val:
    return fn(a, np.exp, np.exp)


def _sigmoid(a: Val) -> Val:  # 1 / (exp(-x) + 1)
    return div(const(1.0), add(_exp(neg(a)), const(1.0)))


def _hswish(z: Val) -> Val:  # z * min(max(z + 3, 0), 6) * (1 / 6)
    t = add(z, const(3.0))
    clipped = select(t.v <= 0.0, Val.of(np.zeros_like(t.v)), select(t.v >= 6.0, Val.of(np.full_like(t.v, 6.0)), t))
    return mul(mul(z, clipped), const(1.0 / 6.0))


def _log1p(a: Val) -> Val:
    return fn(a, np.log1p, lambda x: 1.0 / (1.0 + x))


def _erf(a: Val) -> Val:
    return fn(a, _libm("erf"), lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x))


def _relu(a: Val) -> Val:
    return select(a.v <= 0.0, Val.of(np.zeros_like(a.v)), a)


def _softplus(a: Val) -> Val:  # log1p(exp(-|x|)) + relu(x)
    return add(_log1p(_exp(neg(Val(np.abs(a.v), a.u)))), _relu(a))


def _lse(a: Val, b: Val) -> Val:  # max + log1p(exp(min - max))
    lo = select(a.v < b.v, a, b)
    hi = select(a.v < b.v, b, a)
    return add(hi, _log1p(_exp(sub(lo, hi))))


def _pow(a: Val, b: Val) -> Val:
    # dispatch_powf computes small integer and half powers exactly as products and roots; powf
    # otherwise (exp(b log a) to its accuracy): the bound of powf covers both
    with np.errstate(all="ignore"):
        v = np.power(a.v, b.v)
        da = _abs(b.v * np.power(a.v, b.v - 1.0))
        db = _abs(v * np.log(np.abs(a.v)))
    return Val(v, da * (a.u + _abs(a.v)) + db * (b.u + _abs(b.v)) + LIBM_ULPS * _abs(v))


def _np(name: str) -> Callable:
    """numpy's function ``name``, looked up when called (importing this module imports no numpy)."""
    return lambda *a: getattr(np, name)(*a)


def _f(expr: Callable) -> Callable:
    """The exact value of a mode: its expression's value (float64 throughout)."""
    return lambda *xs: expr(*[Val.of(x) for x in xs]).v


@dataclass(frozen=True)
class Mode:
    """One elementwise mode: its arity and its expression on :class:`Val` s."""

    arity: int
    expr: Callable[..., Val]

    def f(self, *xs: "np.ndarray") -> "np.ndarray":
        """Its value on float64 inputs."""
        with np.errstate(all="ignore"):
            return self.expr(*[Val.of(x) for x in xs]).v


def _unary(f: Callable, df: Callable, ulps: float = LIBM_ULPS) -> Mode:
    return Mode(1, lambda a: fn(a, f, df, ulps))


_SQRT1_2 = 1.0 / math.sqrt(2.0)

#: every float mode of Elemwise, as kern_defs.cuh computes it
MODES: Dict[str, Mode] = {
    # select, negate, clip, compare: exact
    "RELU": Mode(1, _relu),
    "ABS": Mode(1, lambda a: Val(np.abs(a.v), a.u)),
    "NEGATE": Mode(1, neg),
    "RELU6": Mode(1, _exact(lambda x: np.clip(x, 0.0, 6.0))),
    "SIGN": Mode(1, lambda a: Val(np.sign(a.v), np.zeros_like(a.v))),
    "FLOOR": Mode(1, lambda a: Val(np.floor(a.v), np.zeros_like(a.v))),
    "CEIL": Mode(1, lambda a: Val(np.ceil(a.v), np.zeros_like(a.v))),
    "ROUND": Mode(1, lambda a: Val(np.sign(a.v) * np.floor(np.abs(a.v) + 0.5), np.zeros_like(a.v))),
    "MAX": Mode(2, lambda a, b: select(a.v > b.v, a, b)),
    "MIN": Mode(2, lambda a, b: select(a.v < b.v, a, b)),
    "SWITCH_GT0": Mode(2, lambda a, b: select(a.v > 0.0, b, Val.of(np.zeros_like(b.v)))),
    "ABS_GRAD": Mode(2, lambda a, b: select(a.v > 0.0, b, neg(b))),
    "MOD": Mode(2, lambda a, b: Val(np.fmod(a.v, b.v), np.zeros_like(np.fmod(a.v, b.v)))),  # fmodf is exact
    "COND_LEQ_MOV": Mode(3, lambda a, b, c: select(a.v <= b.v, c, Val.of(np.zeros_like(c.v)))),
    "COND_LT_MOV": Mode(3, lambda a, b, c: select(a.v < b.v, c, Val.of(np.zeros_like(c.v)))),
    "CLIP": Mode(3, lambda x, lo, hi: select(x.v <= lo.v, lo, select(x.v <= hi.v, x, hi))),
    # comparisons: 0 or 1, no scale (on the same inputs the same answer)
    **{m: Mode(2, _compare(f)) for m, f in (("LT", _np("less")), ("LEQ", _np("less_equal")), ("EQ", _np("equal")),
                                            ("NEQ", _np("not_equal")))},
    "ISNAN": Mode(1, _compare(_np("isnan"))),
    "ISINF": Mode(1, _compare(_np("isinf"))),
    # correctly rounded arithmetic
    "ADD": Mode(2, add),
    "SUB": Mode(2, sub),
    "MUL": Mode(2, mul),
    "SQUARE": Mode(1, lambda a: mul(a, a)),
    "SQRT": Mode(1, lambda a: fn(a, _np("sqrt"), lambda x: 0.5 / np.sqrt(x), 1.0)),
    "TRUE_DIV": Mode(2, div),
    "FLOOR_DIV": Mode(2, lambda a, b: Val(np.floor(div(a, b).v), np.zeros_like(div(a, b).v))),
    "FUSE_ADD_RELU": Mode(2, lambda a, b: _relu(add(a, b))),
    "PRELU": Mode(2, lambda x, w: select(x.v > 0.0, x, mul(x, w))),
    "FUSE_MUL_ADD3": Mode(3, lambda a, b, c: add(mul(a, b), c)),
    "FUSE_MUL_ADD4": Mode(4, lambda a, b, c, d: add(mul(a, b), mul(c, d))),
    "HSIGMOID": Mode(1, lambda a: select(a.v <= -3.0, Val.of(np.zeros_like(a.v)), select(
        a.v >= 3.0, Val.of(np.ones_like(a.v)), div(add(a, const(3.0)), const(6.0))))),
    "H_SWISH": Mode(1, _hswish),
    "FUSE_ADD_H_SWISH": Mode(2, lambda a, b: _hswish(add(a, b))),
    # the math library
    "EXP": Mode(1, _exp),
    "EXPM1": _unary(_np("expm1"), _np("exp")),
    "LOG": _unary(_np("log"), lambda x: 1.0 / x),
    "LOG1P": Mode(1, _log1p),
    "SIN": _unary(_np("sin"), _np("cos")),
    "COS": _unary(_np("cos"), lambda x: -np.sin(x)),
    "TAN": _unary(_np("tan"), lambda x: 1.0 + np.tan(x) ** 2),
    "SINH": _unary(_np("sinh"), _np("cosh")),
    "COSH": _unary(_np("cosh"), _np("sinh")),
    "TANH": _unary(_np("tanh"), lambda x: 1.0 - np.tanh(x) ** 2),
    "ASIN": _unary(_np("arcsin"), lambda x: 1.0 / np.sqrt(1.0 - x * x)),
    "ACOS": _unary(_np("arccos"), lambda x: -1.0 / np.sqrt(1.0 - x * x)),
    "ASINH": _unary(_np("arcsinh"), lambda x: 1.0 / np.sqrt(1.0 + x * x)),
    "ACOSH": _unary(_np("arccosh"), lambda x: 1.0 / np.sqrt(x * x - 1.0)),
    "ATANH": _unary(_np("arctanh"), lambda x: 1.0 / (1.0 - x * x)),
    "ERF": Mode(1, _erf),
    "ERFC": _unary(_libm("erfc"), lambda x: -2.0 / math.sqrt(math.pi) * np.exp(-x * x)),
    "SIGMOID": Mode(1, _sigmoid),
    "FUSE_ADD_SIGMOID": Mode(2, lambda a, b: _sigmoid(add(a, b))),
    "FUSE_ADD_TANH": Mode(2, lambda a, b: fn(add(a, b), _np("tanh"), lambda x: 1.0 - np.tanh(x) ** 2)),
    "SILU": Mode(1, lambda a: div(a, add(_exp(neg(a)), const(1.0)))),
    "GELU": Mode(1, lambda a: mul(mul(a, const(0.5)), add(const(1.0), _erf(mul(a, const(_SQRT1_2)))))),
    "SOFTPLUS": Mode(1, _softplus),
    "LOGSIGMOID": Mode(1, lambda a: add(neg(_log1p(_exp(neg(Val(np.abs(a.v), a.u))))),
                                        select(a.v >= 0.0, Val.of(np.zeros_like(a.v)), a))),
    "FAST_TANH": Mode(1, lambda a: div(mul(a, add(const(27.0), mul(a, a))), add(const(27.0), mul(mul(const(9.0), a), a)))),
    "POW": Mode(2, _pow),
    "LOG_SUM_EXP": Mode(2, _lse),
    "ATAN2": Mode(2, lambda y, x: _atan2(y, x)),
}


def _atan2(y: Val, x: Val) -> Val:
    with np.errstate(all="ignore"):
        v = np.arctan2(y.v, x.v)
        r2 = x.v * x.v + y.v * y.v
        dy, dx = _abs(x.v / r2), _abs(y.v / r2)
    return Val(v, dy * (y.u + _abs(y.v)) + dx * (x.u + _abs(x.v)) + LIBM_ULPS * _abs(v))


def _erfinv_value(y: "np.ndarray") -> "np.ndarray":
    """erfinv by Newton's method on erf from a rational start (double precision)."""
    y = np.clip(np.asarray(y, dtype=np.float64), -1 + 1e-16, 1 - 1e-16)
    a = 0.147
    ln = np.log(1.0 - y * y)
    t = 2.0 / (math.pi * a) + ln / 2.0
    x = np.sign(y) * np.sqrt(np.sqrt(t * t - ln / a) - t)
    erf = _libm("erf")
    for _ in range(4):
        x = x - (erf(x) - y) / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    return x


MODES["ERFINV"] = _unary(_erfinv_value, lambda y: math.sqrt(math.pi) / 2.0 * np.exp(_erfinv_value(y) ** 2))
MODES["ERFCINV"] = _unary(lambda y: _erfinv_value(1.0 - y),
                          lambda y: math.sqrt(math.pi) / 2.0 * np.exp(_erfinv_value(1.0 - y) ** 2))

#: modes with no float bound, and why (integer and boolean modes are exact by their dtype)
NOT_FLOAT = {m: "an integer or boolean mode: exact by its dtype" for m in (
    "SHL", "SHR", "RMULH", "AND", "OR", "XOR", "NOT")}
#: gradient modes: training only
GRADIENT = frozenset({"SIGMOID_GRAD", "TANH_GRAD", "FAST_TANH_GRAD", "H_SWISH_GRAD", "HSIGMOID_GRAD", "RELU6_GRAD",
                      "SOFTPLUS_GRAD", "SILU_GRAD", "GELU_GRAD", "PRELU_GRAD", "ACOSH_GRAD", "ASINH_GRAD",
                      "ATANH_GRAD"})


def mode_rule(mode: Optional[str]) -> Tuple[Optional[Mode], str]:
    """The :class:`Mode` of an Elemwise mode (an ElemwiseMultiType ``Q`` mode: its float mode),
    or None and why it is not judged."""
    if mode is None:
        return None, "an elementwise operator of unknown mode"
    if mode.startswith("POWC "):  # PowC: x ** a constant exponent, MegEngine's dispatch_powf
        try:
            exp = float(mode[5:])
        except ValueError:
            return None, f"PowC of an exponent that is not a number ({mode[5:]!r})"
        return Mode(1, lambda a, exp=exp: _pow(a, const(exp))), ""
    known = mode[1:] in MODES or mode[1:] in NOT_FLOAT or mode[1:] in GRADIENT
    name = mode[1:] if mode.startswith("Q") and known else mode
    if name in MODES:
        return MODES[name], ""
    if name in NOT_FLOAT:
        return None, NOT_FLOAT[name]
    if name in GRADIENT:
        return None, f"{name} is a gradient (training): no bound"
    return None, f"no bound for elementwise {mode}"


def scale(mode: Mode, xs: Arrays, input_scales: Optional[Sequence[Optional["np.ndarray"]]] = None,
          y: Optional["np.ndarray"] = None) -> "np.ndarray":
    """``U`` of each element of the mode on ``xs`` (absolute; one rounding unit is ``eps * U``),
    its inputs carrying ``input_scales`` (None: exact). ``y`` (its reference output) sets the
    shape it is broadcast to."""
    scales = list(input_scales or ()) + [None] * len(xs)
    with np.errstate(all="ignore"):
        got = mode.expr(*[Val.of(x, s) for x, s in zip(xs, scales)]).u
    got = np.where(np.isfinite(got), got, np.inf)
    shape = np.shape(y) if y is not None else np.broadcast(*xs).shape if xs else np.shape(got)
    return np.broadcast_to(got, shape)


def neighbours16(x: "np.ndarray") -> Tuple["np.ndarray", "np.ndarray"]:
    """The two float16 values either side of each ``x`` (both ``x`` where it is one): a correct
    conversion to float16 is faithful, one or the other (MegEngine's rounds a tie away from the
    even one where numpy rounds it to even)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float16)
        r64 = r.astype(np.float64)
        toward = np.where(r64 < x, np.float16(np.inf), np.float16(-np.inf)).astype(np.float16)
        other = np.where(r64 == x, r, np.nextafter(r, toward)).astype(np.float64)
    return np.minimum(r64, other), np.maximum(r64, other)


def input_rounding(mode: Mode, xs: Arrays) -> "np.ndarray":
    """The most that converting the inputs to float16 (faithfully: :func:`neighbours16`) changes
    the mode's value, ``max |f(x16) - f(x)|`` over the inputs' neighbours, computed exactly."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    exact = mode.f(*xs)
    sides = [neighbours16(x) for x in xs]
    worst = np.zeros(np.broadcast(*xs).shape) if xs else np.zeros(())
    for pick in itertools.product((0, 1), repeat=len(xs)):
        got = mode.f(*[sides[k][p] for k, p in enumerate(pick)])
        with np.errstate(all="ignore"):
            d = np.abs(got - exact)
        d = np.where(np.isfinite(d), d, np.where(got == exact, 0.0, np.inf))
        worst = np.maximum(worst, d)
    return worst


@dataclass(frozen=True)
class Step:
    """One operator of a fused unit: its mode and where its inputs come from (a var id: a fed
    input, a constant, or an earlier step)."""

    id: int
    mode: Optional[str]
    inputs: Tuple[int, ...]
    opr_type: str = "Elemwise"


def chain_scale(steps: Sequence[Step], values: Mapping[int, "np.ndarray"],
                input_scales: Optional[Mapping[int, "np.ndarray"]] = None) -> Tuple[Optional["np.ndarray"], str]:
    """``U`` of the last of ``steps`` (in execution order), each evaluated in float64 from
    ``values`` (the fed inputs' and constants' reference values), its scale carried forward;
    ``input_scales`` (ids -> scales) for inputs that carry a rounding of their own (else exact).
    Returns (None, why) when a step's mode is not judged or an input's value is missing."""
    vals: Dict[int, Val] = {k: Val.of(v, (input_scales or {}).get(k)) for k, v in values.items()}
    last: Optional[Val] = None
    for s in steps:
        mode, why = mode_rule(s.mode)
        if mode is None:
            return None, why
        missing = [i for i in s.inputs if i not in vals]
        if missing:
            return None, f"no reference value of var {missing[0]}, an input of {s.mode}"
        if len(s.inputs) != mode.arity:
            return None, f"{s.mode} with {len(s.inputs)} inputs (expected {mode.arity})"
        with np.errstate(all="ignore"):
            vals[s.id] = last = mode.expr(*[vals[i] for i in s.inputs])
    if last is None:
        return None, "an empty unit"
    return np.where(np.isfinite(last.u), last.u, np.inf), ""
