"""A five-layer int8 ConvBnRelu2d chain whose float model keeps a BatchNorm unfolded (issue 51).

Built the way a user reported it: five ``ConvBnRelu2d`` (conv biases at MegEngine's default
zero) between ``QuantStub`` and ``DequantStub``; the float model traced and dumped with
``optimize_for_inference``; then ``quantize_qat(calibration_qconfig)``, calibration in eval mode
with the observers on, ``quantize``. The first BatchNorm stays frozen (eval) while the others
learn their statistics, as a fine-tuned stem's often does: its running mean is still the zero
its conv's bias is, ``optimize_for_inference`` drops that ``x + 0`` as a ``Broadcast`` of the
conv's output to its own shape, and the BatchNorm is left after it as ``FUSE_MUL_ADD3`` (its
scale and shift, named ``ADD(MUL, bias)``) and a ``RELU``. The other four fold into their conv:
``conv(x, MUL[...])`` with the weight the constant ``fuse():MUL(...)``, the shift in
``FUSE_ADD_RELU``. (A model whose BatchNorms all keep their initial statistics shows the first
shape at every layer.)

``qchain_int8_bad``: ``layers.0`` quantized with its weight scale 8x too large (its weight
observer's range stretched before ``quantize``): a mis-scaled layer whose float partner is the
unfolded BatchNorm, so keeping it in float needs the BatchNorm's scale folded into the weights.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, List, Tuple

from cases.common import mge, quantized, seed as _seed

#: (input channels, output channels) of each 3x3 ConvBnRelu2d
QCHAIN_CHANNELS = ((3, 8), (8, 8), (8, 16), (16, 16), (16, 8))
#: the layer the bad int8 model mis-scales, and by how much its weight range is stretched
QCHAIN_MISSCALED = "layers.0"
QCHAIN_FACTOR = 8.0


def _mge():
    return mge()


def _net(rng):
    _, _, M, _ = _mge()

    class Chain(M.Module):
        def __init__(self):
            super().__init__()
            self.quant = M.QuantStub()
            self.layers = M.Sequential(*[M.ConvBnRelu2d(i, o, 3, padding=1) for i, o in QCHAIN_CHANNELS])
            self.dequant = M.DequantStub()
            for m in self.modules():
                if isinstance(m, M.BatchNorm2d):  # not the identity, so the BatchNorm changes the values
                    m.weight._reset(rng.uniform(0.5, 1.5, m.weight.shape).astype("float32"))
                    m.bias._reset(rng.uniform(-0.2, 0.2, m.bias.shape).astype("float32"))

        def forward(self, x):
            return self.dequant(self.layers(self.quant(x)))

    return Chain()


@functools.lru_cache(maxsize=1)
def _calibrated():
    """The float chain, its calibrated QAT copy (observers off) and the input; built once."""
    import copy


    mge, _, _, _ = _mge()
    from megengine.quantization import calibration_qconfig, disable_observer, enable_observer, quantize_qat

    rng = _seed()
    net = _net(rng)
    net.train()  # batch norm statistics from data, the first BatchNorm frozen
    net.layers[0].bn.eval()
    for _ in range(8):
        net(mge.tensor(rng.randn(8, 3, 16, 16).astype("float32")))
    net.eval()
    x = rng.randn(8, 3, 16, 16).astype("float32")
    qat = quantize_qat(copy.deepcopy(net), qconfig=calibration_qconfig)
    qat.eval()
    enable_observer(qat)
    for _ in range(4):
        qat(mge.tensor(rng.randn(8, 3, 16, 16).astype("float32")))
    qat(mge.tensor(x))
    disable_observer(qat)
    return net, qat, x


def _int8(misscaled=None):
    _, qat, x = _calibrated()
    q = quantized(qat, misscaled, QCHAIN_FACTOR)
    return q, q, {"data": x}, {}


def case_qchain_float(rng):
    net, _, x = _calibrated()
    return net, net, {"data": x}, {}


def case_qchain_float_folded(rng):
    """The float chain with each BatchNorm folded into its conv at run time, as a deployment
    module writes it (``conv(x, w * k) + b'``), dumped without ``optimize_for_inference``: the
    weights are ``MUL`` operators of constants (where the tracer did not fold them first)."""
    _, F, M, _ = _mge()
    net, _, x = _calibrated()

    class Folded(M.Module):
        def __init__(self, cbr):
            super().__init__()
            self.conv, self.bn = cbr.conv, cbr.bn  # their own names: MegEngine warns of a renamed submodule

        def forward(self, inp):
            conv, bn = self.conv, self.bn
            k = bn.weight / F.sqrt(bn.running_var + bn.eps)
            b = bn.bias + (conv.bias - bn.running_mean) * k
            return F.relu(F.conv2d(inp, conv.weight * k.reshape(-1, 1, 1, 1), b, conv.stride, conv.padding))

    class Chain(M.Module):
        def __init__(self):
            super().__init__()
            self.layers = M.Sequential(*[Folded(m) for m in net.layers])

        def forward(self, inp):
            return self.layers(inp)

    folded = Chain()
    return folded, folded, {"data": x}, {"optimize": False}


def case_qchain_int8(rng):
    return _int8()


def case_qchain_int8_bad(rng):
    return _int8(QCHAIN_MISSCALED)


_QCHAIN = "five 3x3 ConvBnRelu2d (8 to 16 channels)"
_INT8_NOTE = {"dtype": "float32",
              "note": "int8; its float model is the qchain_float case "
                      "(lar-prec quant qchain_float/model.mge THIS_MODEL)"}
QCHAIN_CASES: List[Tuple[str, Callable, str, Dict]] = [
    ("qchain_float", case_qchain_float, f"{_QCHAIN} in float32, the first BatchNorm left by optimize_for_inference as "
     "Broadcast + FUSE_MUL_ADD3 after its conv, the others folded into conv weights: "
     "the float side of qchain_int8*", {}),
    ("qchain_float_folded", case_qchain_float_folded, "qchain_float with each BatchNorm folded at run time "
     "(conv weights that are MULs of constants), dumped without optimize_for_inference", {}),
    ("qchain_int8", case_qchain_int8, f"{_QCHAIN} int8 by quantize_qat, calibration and quantize", _INT8_NOTE),
    ("qchain_int8_bad", case_qchain_int8_bad, f"qchain_int8 with {QCHAIN_MISSCALED} (the unfolded BatchNorm's conv) "
     "mis-scaled (weights on an 8x coarser grid)", _INT8_NOTE),
]
