"""What correct arithmetic allows each operator MegEngine 1.13 can put in a graph (issue 51).

One table for local error (:mod:`lar_prec.diagnosis.floors`), the layerwise build
(:mod:`lar_prec.lar.layerwise_build`: which operators get a twin on the absolute values of their
inputs) and the dump-only rule (:mod:`lar_prec.compare.growth`). Every graph operator type has a
:class:`Rule` (:func:`rule`), by its mode where the mode matters:

* ``exact``: it moves, copies, selects or indexes values, or computes in integers: on the same
  inputs any difference is a bug (data movement, TopK/ArgSort values and indices, NMS's kept
  indices, max pooling, MAX/MIN reductions, nearest resize, quantized arithmetic);
* ``terms``: each output element is a sum of products (or of terms) of its inputs: convolution in
  every form, deconvolution, matrix products, SUM/MEAN/SUM_SQR/PRODUCT reductions, average
  pooling, cumulative sums. Its rounding follows ``sum |terms|``, which the same operator computes
  on the absolute values of its ``slots`` inputs (:mod:`lar_prec.compare.bounds`); ``lipschitz``
  is the steepest slope of a nonlinearity applied after the sum (ConvBias);
* ``interpolation``: positive interpolation weights (bilinear resize, warps, remap): ``terms`` on
  the data input, plus the rounding of the sample coordinates (:mod:`lar_prec.compare.bounds`);
* ``elementwise``: a function of its inputs element by element, bounded by its own rounding and
  its condition number (:mod:`lar_prec.compare.elemwise`, one entry per Elemwise mode);
* ``softmax`` and ``layernorm``: their own scales in :mod:`lar_prec.compare.bounds`;
* ``recurrent``: a fused LSTM replayed step by step (:mod:`lar_prec.compare.recurrent`);
* ``not_judged``: no bound yet, with the reason: said as such, never counted as noise.

:data:`OPDEFS` maps every operator class of MegEngine 1.13's registry
(``megengine.core.ops.builtin``) to the graph types it makes, or says why it is never in an
inference graph; a test walks that registry and fails on a class, mode or type without an entry.
No numpy, no megengine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

EXACT, TERMS, INTERPOLATION, ELEMENTWISE, SOFTMAX, LAYERNORM, RECURRENT, NOT_JUDGED = (
    "exact", "terms", "interpolation", "elementwise", "softmax", "layernorm", "recurrent", "not_judged")
KINDS = (EXACT, TERMS, INTERPOLATION, ELEMENTWISE, SOFTMAX, LAYERNORM, RECURRENT, NOT_JUDGED)


@dataclass(frozen=True)
class Rule:
    """How one operator type (in one mode) is judged; ``why`` says it in a few words."""

    kind: str
    why: str
    #: terms / interpolation: the inputs whose absolute values the twin takes (None: every float
    #: input); the others (offsets, matrices, maps, shapes) are kept as they are
    slots: Optional[Tuple[int, ...]] = None
    #: terms: the steepest slope of a nonlinearity applied to the sum (ConvBias's), 1 without one
    lipschitz: float = 1.0
    #: terms: the rounding of that nonlinearity, in units of |output| (0 without one), and in
    #: absolute units (where its formula's steps are larger than its output)
    own_ulps: float = 0.0
    own_abs: float = 0.0

    @property
    def twin(self) -> bool:
        """Whether the layerwise model computes this operator on absolute values (its sum of |terms|)."""
        return self.kind in (TERMS, INTERPOLATION)


def _exact(why: str) -> Rule:
    return Rule(EXACT, why)


def _not_judged(why: str) -> Rule:
    return Rule(NOT_JUDGED, why)


_MOVE = _exact("moves or copies values")
_INDEX = _exact("indexes or selects values")
_SOURCE = _exact("a model input or a stored constant")

#: ConvBias's nonlinearity f of the sum s, as kern_defs.cuh computes it: (steepest slope of f, its
#: own rounding in units of |f(s)|, and in absolute units). SIGMOID = 1 / (exp(-s) + 1): exp's
#: accuracy and its argument's reduction, the addition, the division: 4 + 1 + 1 + 2 units of
#: |y|, and |s| sigma'(s) <= 0.224 absolute; H_SWISH = s * clip(s + 3, 0, 6) / 6: the rounding of
#: s + 3 times |s| / 6, at most 3 where the clip is open, and 2 units of |y|
NONLINEAR = {"IDENTITY": (1.0, 0.0, 0.0), "RELU": (1.0, 0.0, 0.0), "SIGMOID": (0.25, 8.0, 0.25),
             "H_SWISH": (1.5, 2.0, 3.0), "TANH": (1.0, 5.0, 1.0)}

#: graph operator types whose rule does not depend on the mode
_RULES: Dict[str, Rule] = {
    # sources
    **{t: _SOURCE for t in ("Host2DeviceCopy", "ImmutableTensor", "SharedDeviceTensor", "SharedDeviceTensorWithFormat",
                            "VolatileSharedDeviceTensor", "MultipleDeviceTensorHolder",
                            "MultipleDeviceTensorWithFormatHolder", "Device2HostCopy")},
    # data movement
    **{t: _MOVE for t in ("Reshape", "Dimshuffle", "Concat", "AxisAddRemove", "Broadcast", "Copy", "Identity",
                          "Split", "ParamPackSplit", "ParamPackConcat", "RelayoutFormat", "MarkNoBroadcastElemwise",
                          "PaddingForward", "Images2NeibsForward", "GetVarShape", "MarkDynamicVar", "Fill",
                          "FillLike", "Eye", "Diag", "MaskedFill", "AssertEqual", "CheckNonFinite")},
    "TypeCvt": _exact("converts each value by one correctly rounded step"),
    # indexing and selection
    **{t: _INDEX for t in ("Subtensor", "SetSubtensor", "IndexingMultiAxisVec", "IndexingSetMultiAxisVec",
                           "IndexingOneHot", "IndexingSetOneHot", "MeshIndexing", "SetMeshIndexing",
                           "BatchedMeshIndexing", "BatchedSetMeshIndexing", "CondTake", "Argmax", "Argmin",
                           "ArgsortForward", "TopK", "NMSKeep", "ROIPoolingForward")},
    # increments are one correctly rounded addition per element: the same inputs give the same bits
    **{t: _exact("one correctly rounded addition per element") for t in (
        "IncrSubtensor", "IndexingIncrMultiAxisVec", "IncrMeshIndexing", "BatchedIncrMeshIndexing")},
    **{t: _exact("rounds to its quantization grid: the same input gives the same step")
       for t in ("FakeQuantForward", "TQTForward", "LSQForward")},
    # sums of products
    "ConvolutionForward": Rule(TERMS, "a sum of products"),
    "Convolution3DForward": Rule(TERMS, "a sum of products"),
    "ConvolutionBackwardData": Rule(TERMS, "a sum of products (deconvolution)"),
    "Convolution3DBackwardData": Rule(TERMS, "a sum of products (deconvolution)"),
    "BatchConvBiasForward": Rule(TERMS, "a sum of products"),
    "GroupLocalForward": Rule(TERMS, "a sum of products (local)"),
    "LocalForward": Rule(TERMS, "a sum of products (local)"),
    "LocalShareForward": Rule(TERMS, "a sum of products (local share)"),
    "DeformableConvForward": Rule(TERMS, "a sum of products (its offsets sampled as given)", slots=(0, 1, 3)),
    "RegionRestrictedConvolutionForward": Rule(TERMS, "a sum of products (its regions as given)", slots=(0, 1)),
    "MatrixMul": Rule(TERMS, "a sum of products"),
    "BatchedMatrixMul": Rule(TERMS, "a sum of products"),
    "Dot": Rule(TERMS, "a sum of products"),
    "CorrelationForward": Rule(TERMS, "a sum of products"),
    "Cumsum": Rule(TERMS, "running sums"),
    "SlidingWindowTransposeForward": Rule(TERMS, "sums of overlapping windows"),
    # interpolation on the data input (slot 0); matrices, maps and shapes kept
    "WarpPerspectiveForward": Rule(INTERPOLATION, "interpolation by positive weights", slots=(0,)),
    "WarpAffineForward": Rule(INTERPOLATION, "interpolation by positive weights", slots=(0,)),
    "RemapForward": Rule(INTERPOLATION, "interpolation by positive weights", slots=(0,)),
    "ROIAlignForward": Rule(INTERPOLATION, "interpolation by positive weights", slots=(0,)),
    # elementwise, by mode
    "Elemwise": Rule(ELEMENTWISE, "elementwise"),
    "ElemwiseMultiType": Rule(ELEMENTWISE, "elementwise"),
    "PowC": Rule(ELEMENTWISE, "elementwise"),
    "SoftmaxForward": Rule(SOFTMAX, "exponentials and their sum"),
    "LayerNormForward": Rule(LAYERNORM, "a mean, a variance and a scale"),
    # no bound yet
    "GroupNormForward": _not_judged("no bound for GroupNorm yet"),
    "InstanceNormForward": _not_judged("no bound for InstanceNorm yet"),
    "GeneralNormForward": _not_judged("no bound for GeneralNorm yet"),
    "BatchNormForward": _not_judged("no bound for a BatchNorm left in the graph (optimize_for_inference fuses it)"),
    "LRNForward": _not_judged("no bound for LRN yet"),
    "CvtColorForward": _not_judged("no bound for CvtColor yet"),
    "DeformablePSROIPoolingForward": _not_judged("no bound for DeformablePSROIPooling yet"),
    "MatrixInverse": _not_judged("no bound for MatrixInverse (its error follows its condition number)"),
    "SVD": _not_judged("no bound for SVD yet"),
    "Linspace": _not_judged("no bound for Linspace yet"),
    "RNNCellForward": _not_judged("no bound for a fused RNN cell yet"),
    "LSTMCell": _not_judged("no bound for a fused LSTM cell yet"),
    "RNN": _not_judged("no bound for a fused RNN yet"),
    "LSTM": Rule(RECURRENT, "an LSTM's gates (sums of products) and cell, step by step"),
    "MultiHeadAttnForward": _not_judged("no bound for fused attention yet"),
    "Resize3DForward": _not_judged("no bound for 3D resize yet"),
    **{t: _not_judged("random numbers: drawn, not computed") for t in (
        "UniformRNG", "GaussianRNG", "GammaRNG", "PoissonRNG", "BetaRNG", "PermutationRNG", "ShuffleRNGForward",
        "DropoutForward")},
    **{t: _not_judged("runs another runtime's engine: no bound") for t in (
        "ExternCOprRunner", "TensorRTRuntimeOpr", "TensorRTOpr", "AtlasRuntimeOpr", "CambriconRuntimeOpr",
        "MagicMindRuntimeOpr", "CollectiveComm", "RemoteSend", "RemoteRecv")},
}

#: the modes of Reduce that sum (their twin: the same reduction of |x|; PRODUCT's twin is |y|)
REDUCE_TERMS = frozenset({"SUM", "MEAN", "SUM_SQR", "PRODUCT"})
#: the modes of Reduce that select one input
REDUCE_SELECT = frozenset({"MAX", "MIN"})
#: pooling modes that average (the others select)
POOL_AVERAGE = frozenset({"AVERAGE", "AVERAGE_COUNT_EXCLUDE_PADDING"})
#: interpolation modes of Resize and the warps whose weights are positive (linear); NEAREST selects
INTERP_LINEAR = frozenset({"LINEAR", "INTER_LINEAR"})
INTERP_NEAREST = frozenset({"NEAREST", "INTER_NEAREST"})


def rule(opr_type: str, mode: Optional[str] = None) -> Rule:
    """The rule of an operator of graph type ``opr_type`` in ``mode`` (its Elemwise, Reduce or
    Pooling mode, ConvBias's nonlinearity, a resize's interpolation mode; None: not known)."""
    if opr_type in ("ConvBiasForward", "ConvBias"):
        if mode is None:
            return _not_judged("ConvBias of an unknown nonlinearity")
        slope = NONLINEAR.get(mode)
        if slope is None:
            return _not_judged(f"no bound for ConvBias with {mode}")
        return Rule(TERMS, "a sum of products" + ("" if mode == "IDENTITY" else f" and {mode}"),
                    lipschitz=slope[0], own_ulps=slope[1], own_abs=slope[2])
    if opr_type == "Reduce":
        if mode in REDUCE_SELECT:
            return _exact("selects one input")
        if mode in REDUCE_TERMS:
            return Rule(TERMS, "a sum" if mode != "PRODUCT" else "a product")
        return _not_judged(f"no bound for Reduce {mode}")
    if opr_type in ("PoolingForward", "AdaptivePoolingForward"):
        if mode == "MAX":
            return _exact("selects one input")
        if mode in POOL_AVERAGE:
            return Rule(TERMS, "an average")
        return _not_judged(f"no bound for pooling {mode}")
    if opr_type in ("ResizeForward", "WarpPerspectiveForward", "WarpAffineForward", "RemapForward"):
        if mode in INTERP_NEAREST:
            return _exact("nearest: selects one input")
        if mode is not None and mode not in INTERP_LINEAR:
            return _not_judged(f"no bound for {mode} interpolation (negative weights)")
        return Rule(INTERPOLATION, "interpolation by positive weights", slots=(0,))
    found = _RULES.get(opr_type)
    if found is not None:
        return found
    return _not_judged(f"no bound for {opr_type}")


def known(opr_type: str) -> bool:
    """Whether ``opr_type`` is a graph type this table names (a mode-dependent one included)."""
    return opr_type in _RULES or opr_type in _BY_MODE


_BY_MODE = frozenset({"ConvBiasForward", "Reduce", "PoolingForward", "AdaptivePoolingForward", "ResizeForward",
                      "WarpPerspectiveForward", "WarpAffineForward", "RemapForward"})

#: never part of an inference graph: why (an OpDef that makes none of the graph types above)
_NOT_INFERENCE = {
    "BatchNormBackward": "training: a gradient",
    "ConvolutionBackwardFilter": "training: a gradient",
    "WarpPerspectiveBackwardData": "training: a gradient",
    "WarpPerspectiveBackwardMat": "training: a gradient",
    "RegionRestrictedConvolutionBackwardData": "training: a gradient",
    "PixelShuffleBackward": "training: a gradient",
    "LAMBUpdate": "training: an optimizer step",
    "Barrier": "imperative only: no graph operator",
    "Borrow": "imperative only: no graph operator",
    "FastpathCopy": "imperative only: no graph operator",
    "InplaceAdd": "imperative only: no graph operator",
    "PyOpBase": "imperative only: no graph operator",
    "OpDef": "the base class, no operator",
    "PixelShuffle": "traced as Reshape and Dimshuffle: no graph operator of its own",
    "MeshGrid": "traced as Broadcast and Concat: no graph operator of its own",
}

#: every operator class of ``megengine.core.ops.builtin`` (MegEngine 1.13) -> the graph operator
#: types it puts in a graph (judged by :func:`rule`), or a ``str``: why it is in no inference graph
OPDEFS: Mapping[str, "Tuple[str, ...] | str"] = {
    "AdaptivePooling": ("AdaptivePoolingForward",), "AddAxis": ("AxisAddRemove",), "Argmax": ("Argmax",),
    "Argmin": ("Argmin",), "Argsort": ("ArgsortForward",), "AssertEqual": ("AssertEqual",),
    "AtlasRuntime": ("AtlasRuntimeOpr",), "BatchConvBias": ("BatchConvBiasForward",),
    "BatchNorm": ("BatchNormForward",), "BatchedIncrMeshIndexing": ("BatchedIncrMeshIndexing",),
    "BatchedMatrixMul": ("BatchedMatrixMul",), "BatchedMeshIndexing": ("BatchedMeshIndexing",),
    "BatchedSetMeshIndexing": ("BatchedSetMeshIndexing",), "BetaRNG": ("BetaRNG",), "Broadcast": ("Broadcast",),
    "CambriconRuntime": ("CambriconRuntimeOpr",), "CheckNonFinite": ("CheckNonFinite",),
    "CollectiveComm": ("CollectiveComm",), "Concat": ("Concat",), "CondTake": ("CondTake",),
    "ConvBias": ("ConvBiasForward",), "Convolution": ("ConvolutionForward",),
    "Convolution3D": ("Convolution3DForward",), "Convolution3DBackwardData": ("Convolution3DBackwardData",),
    "ConvolutionBackwardData": ("ConvolutionBackwardData",), "Copy": ("Copy",), "Correlation": ("CorrelationForward",),
    "Cumsum": ("Cumsum",), "CvtColor": ("CvtColorForward",), "DeformableConv": ("DeformableConvForward",),
    "DeformablePSROIPooling": ("DeformablePSROIPoolingForward",), "Diag": ("Diag",), "Dimshuffle": ("Dimshuffle",),
    "Dot": ("Dot",), "Dropout": ("DropoutForward",), "Elemwise": ("Elemwise",),
    "ElemwiseMultiType": ("ElemwiseMultiType",), "ExternOpr": ("ExternCOprRunner",), "Eye": ("Eye",),
    "FakeQuant": ("FakeQuantForward",), "Fill": ("Fill",), "FillLike": ("FillLike",), "GammaRNG": ("GammaRNG",),
    "GaussianRNG": ("GaussianRNG",), "GeneralNorm": ("GeneralNormForward",), "GetVarShape": ("GetVarShape",),
    "GroupLocal": ("GroupLocalForward",), "GroupNorm": ("GroupNormForward",), "Identity": ("Identity",),
    "Images2Neibs": ("Images2NeibsForward",), "IncrMeshIndexing": ("IncrMeshIndexing",),
    "IncrSubtensor": ("IncrSubtensor",), "IndexingIncrMultiAxisVec": ("IndexingIncrMultiAxisVec",),
    "IndexingMultiAxisVec": ("IndexingMultiAxisVec",), "IndexingOneHot": ("IndexingOneHot",),
    "IndexingSetMultiAxisVec": ("IndexingSetMultiAxisVec",), "IndexingSetOneHot": ("IndexingSetOneHot",),
    "InstanceNorm": ("InstanceNormForward",), "LRN": ("LRNForward",), "LSQ": ("LSQForward",),
    "LSTM": ("LSTM",), "LSTMCell": ("LSTMCell",), "LayerNorm": ("LayerNormForward",),
    "Linspace": ("Linspace",), "MagicMindRuntime": ("MagicMindRuntimeOpr",), "MaskedFill": ("MaskedFill",),
    "MatrixInverse": ("MatrixInverse",), "MatrixMul": ("MatrixMul",), "MeshIndexing": ("MeshIndexing",),
    "MultiHeadAttn": ("MultiHeadAttnForward",), "NMSKeep": ("NMSKeep",), "NvOf": "an optical-flow engine of NVIDIA GPUs: no CPU inference",
    "Padding": ("PaddingForward",), "ParamPackConcat": ("ParamPackConcat",), "ParamPackSplit": ("ParamPackSplit",),
    "PermutationRNG": ("PermutationRNG",), "PoissonRNG": ("PoissonRNG",), "Pooling": ("PoolingForward",),
    "RNN": ("RNN",), "RNNCell": ("RNNCellForward",), "ROIAlign": ("ROIAlignForward",),
    "ROIPooling": ("ROIPoolingForward",), "Reduce": ("Reduce",),
    "RegionRestrictedConvolution": ("RegionRestrictedConvolutionForward",), "Remap": ("RemapForward",),
    "RemoteRecv": ("RemoteRecv",), "RemoteSend": ("RemoteSend",), "RemoveAxis": ("AxisAddRemove",),
    "Reshape": ("Reshape",), "Resize": ("ResizeForward",), "Resize3D": ("Resize3DForward",), "SVD": ("SVD",),
    "SetMeshIndexing": ("SetMeshIndexing",), "SetSubtensor": ("SetSubtensor",), "ShuffleRNG": ("ShuffleRNGForward",),
    "SlidingWindowTranspose": ("SlidingWindowTransposeForward",), "Softmax": ("SoftmaxForward",),
    "Split": ("Split",), "Stack": ("Concat",), "Subtensor": ("Subtensor",), "TQT": ("TQTForward",),
    "TensorRTRuntime": ("TensorRTRuntimeOpr",), "TopK": ("TopK",), "TypeCvt": ("TypeCvt",),
    "UniformRNG": ("UniformRNG",), "WarpAffine": ("WarpAffineForward",), "WarpPerspective": ("WarpPerspectiveForward",),
    **_NOT_INFERENCE,
}
