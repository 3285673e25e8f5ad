"""Every operator MegEngine 1.13 can put in a graph has a rule (issue 51 #1), and the elementwise
rules hold against MegEngine's own kernels.

The registry is MegEngine's own: every operator class of ``megengine.core.ops.builtin``, every
mode of Elemwise, ElemwiseMultiType, Reduce, Pooling, ConvBias's nonlinearity and the
interpolation modes. A class, type or mode without an entry (a bound, exact, or not judged with
its reason) fails here.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from lar_prec import oprules
from lar_prec.compare import elemwise
from lar_prec.compare.bounds import EPS, TERMS_C, TINY

mge = pytest.importorskip("megengine")
from megengine.core.ops import builtin  # noqa: E402


def _classes():
    return sorted(n for n, o in vars(builtin).items() if inspect.isclass(o) and n[:1].isupper())


def _modes(enum):
    return sorted(m for m in dir(enum) if m.isupper())


@pytest.mark.megengine
def test_every_operator_class_of_the_registry_has_an_entry():
    missing = [n for n in _classes() if n not in oprules.OPDEFS]
    assert not missing, f"operator classes of MegEngine with no entry in lar_prec.oprules.OPDEFS: {missing}"
    for name, types in oprules.OPDEFS.items():
        if isinstance(types, str):
            assert types, name  # never in an inference graph: the reason is said
            continue
        for t in types:
            assert oprules.known(t), f"{name} makes {t}, which has no rule"
            r = oprules.rule(t, None)
            assert r.kind in oprules.KINDS and r.why, (t, r)


@pytest.mark.megengine
def test_every_mode_has_an_entry():
    for mode in _modes(builtin.Elemwise.Mode) + _modes(builtin.ElemwiseMultiType.Mode):
        got, why = elemwise.mode_rule(mode)
        assert got is not None or why, mode
        assert got is not None or not why.startswith("no bound"), f"elementwise {mode}: {why}"
    for mode in _modes(builtin.Reduce.Mode):
        assert oprules.rule("Reduce", mode).kind in (oprules.TERMS, oprules.EXACT), mode
    for cls in (builtin.Pooling, builtin.AdaptivePooling):
        for mode in _modes(cls.Mode):
            assert oprules.rule("PoolingForward", mode).kind in (oprules.TERMS, oprules.EXACT), mode
    for mode in _modes(builtin.ConvBias.NonlineMode):
        assert mode in oprules.NONLINEAR, mode
        assert oprules.rule("ConvBiasForward", mode).kind == oprules.TERMS
    for mode in _modes(builtin.Resize.InterpolationMode):
        r = oprules.rule("ResizeForward", mode)
        assert r.kind in (oprules.INTERPOLATION, oprules.EXACT) or "negative weights" in r.why, (mode, r)


def _graph_type(op, *inputs):
    from megengine.core._imperative_rt import make_h2d
    from megengine.core.tensor import megbrain_graph as G

    g = G.Graph()
    vs = [make_h2d(g, "xpux", np.dtype(dt), shape, None) for shape, dt in inputs]
    return G.apply_normal_varnode(op, *vs)[0].op.type


F32 = "float32"
#: an operator of each class applied in a graph, to hold OPDEFS's graph type names to MegEngine's
APPLIED = {
    "Convolution": (lambda: builtin.Convolution(), ((1, 4, 8, 8), F32), ((4, 4, 3, 3), F32)),
    "ConvolutionBackwardData": (lambda: builtin.ConvolutionBackwardData(), ((4, 4, 3, 3), F32), ((1, 4, 8, 8), F32)),
    "ConvBias": (lambda: builtin.ConvBias(), ((1, 4, 8, 8), F32), ((4, 4, 3, 3), F32)),
    "Pooling": (lambda: builtin.Pooling(), ((1, 4, 8, 8), F32)),
    "Resize": (lambda: builtin.Resize(), ((1, 4, 8, 8), F32), ((2,), "int32")),
    "WarpPerspective": (lambda: builtin.WarpPerspective(), ((1, 4, 8, 8), F32), ((1, 3, 3), F32), ((2,), "int32")),
    "WarpAffine": (lambda: builtin.WarpAffine(), ((1, 4, 8, 8), F32), ((1, 2, 3), F32), ((2,), "int32")),
    "Remap": (lambda: builtin.Remap(), ((1, 4, 8, 8), F32), ((1, 8, 8, 2), F32)),
    "Argsort": (lambda: builtin.Argsort(), ((1, 4), F32)),
    "TopK": (lambda: builtin.TopK(), ((1, 4), F32), ((1,), "int32")),
    "BatchedMatrixMul": (lambda: builtin.BatchedMatrixMul(), ((2, 4, 4), F32), ((2, 4, 4), F32)),
    "Softmax": (lambda: builtin.Softmax(axis=1), ((1, 4), F32)),
    "LayerNorm": (lambda: builtin.LayerNorm(affine=False, normalized_dim=1, normalized_size=4), ((1, 4), F32)),
    "NMSKeep": (lambda: builtin.NMSKeep(iou_thresh=0.5, max_output=4), ((1, 4, 4), F32)),
    "Cumsum": (lambda: builtin.Cumsum(), ((1, 4), F32)),
    "IndexingOneHot": (lambda: builtin.IndexingOneHot(axis=1), ((1, 4), F32), ((1,), "int32")),
    "ROIAlign": (lambda: builtin.ROIAlign(), ((1, 4, 8, 8), F32), ((1, 5), F32)),
    "Dot": (lambda: builtin.Dot(), ((4,), F32), ((4,), F32)),
    "Reduce": (lambda: builtin.Reduce(), ((1, 4), F32)),
    "Dimshuffle": (lambda: builtin.Dimshuffle(pattern=[1, 0]), ((1, 4), F32)),
    "Argmax": (lambda: builtin.Argmax(axis=1), ((1, 4), F32)),
    "BatchConvBias": (lambda: builtin.BatchConvBias(), ((1, 4, 8, 8), F32), ((1, 4, 4, 3, 3), F32), ((1, 4, 1, 1), F32)),
    "Stack": (lambda: builtin.Stack(), ((1, 4), F32), ((1, 4), F32)),
    "AddAxis": (lambda: builtin.AddAxis(axis=[0]), ((1, 4), F32)),
    "GroupNorm": (lambda: builtin.GroupNorm(affine=False, group=2), ((1, 4, 8, 8), F32)),
    "Padding": (lambda: builtin.Padding(), ((1, 4, 8, 8), F32)),
    "CondTake": (lambda: builtin.CondTake(), ((1, 4), F32), ((1, 4), F32)),
    "LSTM": (lambda: builtin.LSTM(hidden_size=4), ((3, 1, 2), F32), ((1, 1, 4), F32), ((1, 1, 4), F32), ((16, 8), F32)),
    "RNN": (lambda: builtin.RNN(hidden_size=4), ((3, 1, 2), F32), ((1, 1, 4), F32), ((4, 8), F32)),
    "LSTMCell": (lambda: builtin.LSTMCell(), ((1, 4), F32), ((16, 4), F32), ((16,), F32), ((1, 4), F32), ((16, 4), F32),
                 ((16,), F32), ((1, 4), F32)),
}


@pytest.mark.megengine
@pytest.mark.parametrize("name", sorted(APPLIED))
def test_the_graph_type_of_each_class_is_the_one_megengine_makes(name):
    make, *inputs = APPLIED[name]
    assert _graph_type(make(), *inputs) in oprules.OPDEFS[name]


#: where each mode is defined (its arguments drawn from these ranges)
DOMAIN = {"LOG": (0.05, 4), "LOG1P": (-0.9, 4), "SQRT": (0.0, 4), "ASIN": (-0.99, 0.99), "ACOS": (-0.99, 0.99),
          "ATANH": (-0.99, 0.99), "ERFINV": (-0.99, 0.99), "ERFCINV": (0.01, 1.99), "ACOSH": (1.01, 4),
          "POW": (0.1, 3), "TAN": (-1.4, 1.4), "TRUE_DIV": (0.25, 4), "FLOOR_DIV": (0.25, 4), "MOD": (0.25, 4)}


def _draw(mode: str, arity: int, rng) -> list:
    lo, hi = DOMAIN.get(mode, (-6.0, 6.0))
    xs = [rng.uniform(lo, hi, size=4096).astype(np.float32) for _ in range(arity)]
    if mode == "CLIP":  # a range: its low end below its high end
        xs[1], xs[2] = -np.abs(xs[1]), np.abs(xs[2])
    return xs


#: modes MegEngine computes by ElemwiseMultiType only (a bool output)
MULTI_TYPE = frozenset({"ISINF", "ISNAN", "NEQ"})


@pytest.mark.megengine
@pytest.mark.parametrize("mode", sorted(elemwise.MODES))
def test_megengines_own_kernel_is_within_the_modes_bound_of_the_exact_value(mode):
    """MegEngine's CPU kernel of each mode, on float32 inputs, against the mode's definition in
    float64: within TERMS_C units of the bound (so two correct kernels stay within it of each
    other, each being within it of the exact value... in the worst case twice: the test holds
    one kernel to the whole allowance, which a wrong definition or a too small ``ulps`` fails)."""
    from megengine.core._imperative_rt.core2 import apply

    m = elemwise.MODES[mode]
    xs = _draw(mode, m.arity, np.random.RandomState(7))
    op = (builtin.ElemwiseMultiType(getattr(builtin.ElemwiseMultiType.Mode, mode), dtype=np.dtype("bool"))
          if mode in MULTI_TYPE else builtin.Elemwise(getattr(builtin.Elemwise.Mode, mode)))
    got = apply(op, *[mge.tensor(x) for x in xs])[0].numpy().astype(np.float64)
    x64 = [x.astype(np.float64) for x in xs]
    with np.errstate(all="ignore"):
        want = np.asarray(m.f(*x64), dtype=np.float64)
    ok = np.isfinite(want)
    unit = EPS["float32"] * elemwise.scale(m, x64, y=want) + TINY["float32"] * (1 + m.arity)
    # a discontinuous mode (FLOOR_DIV, ROUND) of a float32 quotient: within one rounding of a step
    diff = np.abs(got.astype(np.float64) - want)
    assert np.all(diff[ok] <= TERMS_C * unit[ok] + 1e-300), (
        mode, float(np.max(diff[ok] / unit[ok])), xs[0][ok][np.argmax(diff[ok] / unit[ok])])


def test_a_modes_scale_counts_where_its_formula_cancels():
    """GELU of a large negative x: kern_defs.cuh rounds 1 + erf(x / sqrt 2) to a unit of 1, then
    multiplies by x: the scale is about |x|, though |GELU(x)| is 1e-8 (the MegEngine kernel test
    above fails on it when the formula's steps are not counted)."""
    x = np.array([-5.5, 0.5])
    u = elemwise.scale(elemwise.MODES["GELU"], [x])
    assert u[0] > 2.0 and u[1] < 2.0
    # SUB of nearly equal values: one rounding of the result, not of the operands
    a, b = np.array([100.0]), np.array([99.5])
    assert elemwise.scale(elemwise.MODES["SUB"], [a, b])[0] == 0.5
    # an input's own scale is carried through the slope: MUL by 3 triples it
    assert elemwise.scale(elemwise.MODES["MUL"], [np.array([2.0]), np.array([3.0])], [np.array([1.0]), None])[0] == 3.0 + 6.0


def test_float16_input_rounding_allows_either_neighbour():
    """MegEngine's conversion to float16 rounds an exact tie away from the even neighbour (seen in
    resnet18 under --enable-ioc16: -0.17999267578125 = -1474.5 x 2^-13 became -1475 x 2^-13):
    a faithful conversion may give either neighbour, and the bound holds for both."""
    x = np.array([-1474.5 * 2.0 ** -13, 0.25, 0.1])
    lo, hi = elemwise.neighbours16(x)
    assert lo[0] == -1475 * 2.0 ** -13 and hi[0] == -1474 * 2.0 ** -13
    assert lo[1] == hi[1] == 0.25  # representable: itself
    assert lo[2] < 0.1 < hi[2] and hi[2] - lo[2] == 2.0 ** -14  # one float16 step (0.1 is in [2^-4, 2^-3))
    a, b = np.array([0.21684807538986206]), np.array([-0.17999267578125])
    mode = elemwise.MODES["FUSE_ADD_RELU"]
    kernel = 0.0367431640625  # what MegEngine's float16 kernel gave
    allowed = TERMS_C * (EPS["float16"] * elemwise.scale(mode, [a, b])[0] + elemwise.input_rounding(mode, [a, b])[0])
    assert abs(kernel - float(mode.f(a, b)[0])) <= allowed
