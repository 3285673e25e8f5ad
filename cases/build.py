"""Build the real models tests and the demo use: ``python -m cases.build --out cases/build``.

Each case is traced with fixed seeds and dumped to ``<name>/model.mge`` with one ``.npy`` per
input; ``manifest.json`` indexes them, with each case's fault constants (``fault_consts``: the
constants a fault benchmark scales, checked present in the dumped model). megengine is imported
only by the case modules (through ``cases.common``) and by lar_prec's runners.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np

from cases import arch, arch2, qchain
from cases.common import SEED, missing_consts, mge as _mge, quantized, seed as _seed



def _dump(fn, module, inputs: Dict[str, np.ndarray], path: Path, optimize: bool = True) -> None:
    """Trace ``module`` on ``inputs`` and dump it; input names become the model's input names."""
    mge, _, _, trace = _mge()
    if hasattr(module, "eval"):
        module.eval()

    @trace(symbolic=True, capture_as_const=True)
    def run(*args):
        return fn(*args)

    run(*[mge.tensor(v, dtype=v.dtype) for v in inputs.values()])
    run.dump(str(path), arg_names=list(inputs), optimize_for_inference=optimize)


def case_cnn(rng):
    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.c1 = M.Conv2d(3, 16, 3, padding=1)
            self.c2 = M.Conv2d(16, 32, 3, padding=1)
            self.fc = M.Linear(32 * 8 * 8, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.avg_pool2d(F.relu(self.c2(x)), 2)
            return F.softmax(self.fc(F.flatten(x, 1)), axis=1)

    net = Net()
    return net, net, {"data": rng.rand(1, 3, 32, 32).astype("float32")}, {}


def case_resnet(rng):
    _, F, M, _ = _mge()

    class Block(M.Module):
        def __init__(self, c):
            super().__init__()
            self.a = M.Conv2d(c, c, 3, padding=1)
            self.b = M.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            return F.relu(x + self.b(F.relu(self.a(x))))

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = M.Conv2d(3, 32, 3, padding=1)
            self.blocks = [Block(32) for _ in range(3)]
            self.fc = M.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.stem(x))
            for b in self.blocks:
                x = b(x)
            return self.fc(F.mean(x, axis=(2, 3)))

    net = Net()
    return net, net, {"data": rng.rand(1, 3, 32, 32).astype("float32")}, {}


def case_mlp(rng):
    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.l1 = M.Linear(64, 128)
            self.l2 = M.Linear(128, 64)
            self.l3 = M.Linear(64, 4)

        def forward(self, x):
            return F.sigmoid(self.l3(F.tanh(self.l2(F.tanh(self.l1(x))))))

    net = Net()
    return net, net, {"data": rng.randn(8, 64).astype("float32")}, {}


def case_attention(rng):
    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self, d=32):
            super().__init__()
            self.q, self.k, self.v, self.o = (M.Linear(d, d) for _ in range(4))
            self.ln1 = M.LayerNorm(d)
            self.ln2 = M.LayerNorm(d)
            self.f1 = M.Linear(d, 64)
            self.f2 = M.Linear(64, d)
            self.scale = float(1.0 / np.sqrt(d))

        def forward(self, x):
            h = self.ln1(x)
            att = F.softmax(F.matmul(self.q(h), self.k(h).transpose(0, 2, 1)) * self.scale, axis=-1)
            x = x + self.o(F.matmul(att, self.v(h)))
            return x + self.f2(F.gelu(self.f1(self.ln2(x))))

    net = Net()
    return net, net, {"data": rng.randn(1, 16, 32).astype("float32")}, {}


def case_multi_input(rng):
    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.c = M.Conv2d(3, 8, 3, padding=1)
            self.e = M.Linear(6, 8)
            self.fc = M.Linear(8 * 4 * 4 + 8, 5)

        def forward(self, img, meta):
            a = F.flatten(F.max_pool2d(F.relu(self.c(img)), 4), 1)
            b = F.relu(self.e(meta))
            return self.fc(F.concat([a, b], axis=1))

    net = Net()
    inputs = {"img": rng.rand(2, 3, 16, 16).astype("float32"), "meta": rng.randn(2, 6).astype("float32")}
    return net, net, inputs, {}


def case_fp16(rng):
    mge, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.w1 = mge.Parameter((rng.randn(32, 48) * 0.2).astype("float16"))
            self.w2 = mge.Parameter((rng.randn(48, 16) * 0.2).astype("float16"))

        def forward(self, x):
            return F.matmul(F.relu(F.matmul(x, self.w1)), self.w2) * 0.5

    net = Net()
    return net, net, {"data": rng.randn(4, 32).astype("float16")}, {}


def case_int_ops(rng):
    def fn(a, b):
        return (a * 3 + b) // 4 - a % 7 + (a > b).astype("int32")

    inputs = {"a": rng.randint(-1000, 1000, size=(4, 16)).astype("int32"),
              "b": rng.randint(-1000, 1000, size=(4, 16)).astype("int32")}
    return fn, None, inputs, {}


def _int8(net, qconfig, batches):
    """``net`` made int8 by MegEngine's quantization API: fake-quant modules (``quantize_qat``),
    their observers trained on ``batches``, then real QuantizedS8/S32 modules (``quantize``)."""
    import megengine as mge
    from megengine.quantization import quantize, quantize_qat

    quantize_qat(net, qconfig=qconfig)
    net.train()
    for b in batches:
        net(mge.tensor(b))
    net.eval()
    quantize(net)
    net.eval()
    return net


def case_quantized(rng):
    from megengine.quantization import min_max_fakequant_qconfig

    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q = M.QuantStub()
            self.c1 = M.ConvRelu2d(3, 8, 3, padding=1)
            self.c2 = M.Conv2d(8, 4, 3)
            self.dq = M.DequantStub()

        def forward(self, x):
            return self.dq(self.c2(self.c1(self.q(x))))

    x = rng.rand(1, 3, 16, 16).astype("float32")
    # observers calibrated on the case input alone
    net = _int8(Net(), min_max_fakequant_qconfig, [x])
    return net, net, {"data": x}, {}


def case_quant_mobile(rng):
    """An int8 MobileNet/ShuffleNet-style block from MegEngine's QAT API: conv-BN-relu over
    6 channels (not a multiple of 4), a strided depthwise conv-relu, a grouped 1x1 conv, a
    residual add-relu and a 1x1 head, as quantization tools leave them (BN fused by QAT)."""
    from megengine.quantization import ema_fakequant_qconfig

    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q = M.QuantStub()
            self.c1 = M.ConvBnRelu2d(3, 6, 3, padding=1)
            self.dw = M.ConvRelu2d(6, 6, 3, stride=2, padding=1, groups=6)
            self.pw = M.ConvBn2d(6, 6, 1, groups=2)
            self.add = M.Elemwise("FUSE_ADD_RELU")
            self.head = M.Conv2d(6, 5, 1)
            self.dq = M.DequantStub()

        def forward(self, x):
            y = self.dw(self.c1(self.q(x)))
            return self.dq(self.head(self.add(y, self.pw(y))))

    x = rng.rand(1, 3, 16, 16).astype("float32")
    # QAT: the EMA observers trained on a few batches
    net = _int8(Net(), ema_fakequant_qconfig, [x * (0.8 + 0.2 * k) for k in range(3)])
    return net, net, {"data": x}, {}


def case_fastrun_shake(rng):
    _, F, M, _ = _mge()
    # Many small convolutions of different shapes: several algorithms (im2col/winograd/direct,
    # MKL or not) profile within timing noise of each other, so --fast-run picks differ run to run.
    shapes = [(8, 12, 3), (12, 16, 3), (16, 20, 5), (20, 24, 3), (24, 28, 3), (28, 32, 5), (32, 24, 3),
              (24, 16, 3), (16, 12, 5), (12, 16, 3), (16, 24, 3), (24, 32, 3), (32, 16, 5), (16, 8, 3)]

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.convs = [M.Conv2d(i, o, k, padding=k // 2) for i, o, k in shapes]

        def forward(self, x):
            for c in self.convs:
                x = F.relu(c(x))
            return x

    net = Net()
    return net, net, {"data": rng.randn(1, 8, 20, 20).astype("float32")}, {}


def case_shufflenet(rng):
    _, F, M, _ = _mge()
    # What real mobile networks have and the regular cases lack: 58 channels (not a multiple of
    # 4: NCHW44 pads them to 60), a depthwise 3x3, a grouped 1x1, channel split, concat and
    # channel shuffle (ShuffleNetV2's unit), then a YOLOX-style head: a 1-channel objectness
    # map, nearest 2x resize and concat with the stem's features.
    class Unit(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = M.Conv2d(3, 116, 3, padding=1)
            self.pw1 = M.Conv2d(58, 58, 1)
            self.dw = M.Conv2d(58, 58, 3, padding=1, groups=58)
            self.pw2 = M.Conv2d(58, 58, 1, groups=2)
            self.down = M.Conv2d(116, 116, 3, stride=2, padding=1, groups=116)
            self.obj = M.Conv2d(116, 1, 1)
            self.cls = M.Conv2d(117, 3, 1)

        def forward(self, x):
            x = F.relu(self.stem(x))
            a, b = x[:, :58], x[:, 58:]
            b = F.relu(self.pw2(self.dw(F.relu(self.pw1(b)))))
            y = F.concat([a, b], axis=1)
            n, c, h, w = y.shape
            y = y.reshape(n, 2, c // 2, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)  # channel shuffle
            d = self.down(y)
            obj = F.sigmoid(self.obj(d))                                       # 1-channel head
            up = F.nn.interpolate(obj, scale_factor=2, mode="nearest")         # resize back
            return self.cls(F.concat([y, up], axis=1))

    net = Unit()
    return net, net, {"data": rng.rand(1, 3, 16, 16).astype("float32")}, {}


def case_longred(rng):
    _, F, M, _ = _mge()
    # Convolutions summing 2,304 and 4,608 terms each (3x3 over 256 and 512 channels): float32
    # rounding grows with the reduction length, so a floor fit for K=300 is too tight here.
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.a = M.Conv2d(8, 256, 3, padding=1)
            self.b = M.Conv2d(256, 512, 3, padding=1)
            self.c = M.Conv2d(512, 16, 3, padding=1)

        def forward(self, x):
            return self.c(F.relu(self.b(F.relu(self.a(x)))))

    net = Net()
    return net, net, {"data": rng.randn(1, 8, 8, 8).astype("float32")}, {}


def case_amplify(rng):
    mge, F, M, _ = _mge()
    # A batched matmul that amplifies its input's error ~11x (issue 14): a = x + shift has
    # values ~2 that cancel in a @ b (b is zero-mean along the reduction axis), so c = shift @ b
    # carries shift's relative error in full while a shows a tenth of it. The second output is
    # an unrelated branch for faults elsewhere: relu(z + other_shift) + w with w ~ 20 shows a
    # tenth of that branch's error (an error the band rule sees but cannot root).

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.shift = mge.Parameter(rng.uniform(-0.2, 0.2, size=(32,)).astype("float32"))
            self.other_shift = mge.Parameter(rng.uniform(-0.2, 0.2, size=(8,)).astype("float32"))

        def forward(self, x, b, z, w):
            c = F.matmul(x + self.shift, b)  # (2,16,32) @ (2,32,16): BatchedMatrixMul
            return F.relu(c), F.relu(z + self.other_shift) + w

    net = Net()
    # Values on coarse binary grids: every product and partial sum of the matmul is exact in
    # float32, so any kernel (any summation order, FMA or not) gives the same bits on the clean
    # model: its own rounding noise, amplified by the cancellation too, cannot depend on the CPU.
    grid = lambda a, step: (np.round(a / step) * step).astype("float32")  # noqa: E731
    half = grid(rng.uniform(-2, 2, size=(2, 16, 16)), 2.0**-4)
    b = np.concatenate([half, -half], axis=1)[:, rng.permutation(32), :]  # sums to exactly 0 along K
    net.shift._reset(grid(net.shift.numpy(), 2.0**-10))
    inputs = {"x": grid(rng.uniform(2.0, 2.5, size=(2, 16, 1)), 2.0**-3),
              "b": b,
              "z": rng.uniform(2.0, 2.5, size=(4, 8)).astype("float32"),
              "w": rng.uniform(18.0, 22.0, size=(4, 8)).astype("float32")}
    return net, net, inputs, {}


def case_bn_unfused(rng):
    _, F, M, _ = _mge()

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.c = M.Conv2d(3, 8, 3, padding=1)
            self.bn = M.BatchNorm2d(8)

        def forward(self, x):
            return F.relu(self.bn(self.c(x)))

    net = Net()
    return net, net, {"data": rng.rand(1, 3, 16, 16).astype("float32")}, {"optimize": False}


# ---------------------------------------------------------------- int8 MobileNetV2 pair (issue 35)
# Built the way MegEngine's official quantized models are (MegEngine/Models,
# official/quantization/models/mobilenet_v2.py and calibration.py): inverted residuals of
# ConvBnRelu2d expand, depthwise ConvBnRelu2d and a ConvBn2d projection without activation,
# residual add by Elemwise("ADD"), QuantStub/DequantStub, the classifier left in float; then
# quantize_qat(calibration_qconfig), calibration in eval mode with the observers enabled
# (eval() alone disables them), quantize. Small: 8 images of 32x32, odd channel counts.
#: (expand ratio t, output channels c, blocks n, first stride s), as MobileNetV2's table
MBV2_SETTING = ((1, 10, 1, 1), (3, 14, 2, 2), (3, 22, 3, 2))
#: the mis-scaled variants: the layer whose weight scale is 8x too large (weights on a grid 8x coarser)
MBV2_MISSCALED = {"mbv2_int8_expand": "features.4.conv.0", "mbv2_int8_proj": "features.5.conv.2"}
MBV2_FACTOR = 8.0


def _mbv2_net(rng):
    _, F, M, _ = _mge()

    class InvertedResidual(M.Module):
        def __init__(self, inp, oup, stride, t):
            super().__init__()
            hidden = inp * t
            self.use_res_connect = stride == 1 and inp == oup
            layers = [M.ConvBnRelu2d(inp, hidden, 1, bias=False)] if t != 1 else []
            layers += [M.ConvBnRelu2d(hidden, hidden, 3, padding=1, stride=stride, groups=hidden, bias=False),
                       M.ConvBn2d(hidden, oup, 1, bias=False)]
            self.conv = M.Sequential(*layers)
            if self.use_res_connect:  # an add that never runs has no calibrated scale: quantize() fails on it
                self.add = M.Elemwise("ADD")

        def forward(self, x):
            return self.add(x, self.conv(x)) if self.use_res_connect else self.conv(x)

    class MobileNetV2(M.Module):
        def __init__(self, classes=20):
            super().__init__()
            features, cin = [M.ConvBnRelu2d(3, 12, 3, padding=1, stride=2, bias=False)], 12
            for t, c, n, s in MBV2_SETTING:
                for i in range(n):
                    features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            features.append(M.ConvBnRelu2d(cin, 64, 1, bias=False))
            self.features = M.Sequential(*features)
            self.classifier = M.Sequential(M.Dropout(0.2), M.Linear(64, classes))
            self.classifier.disable_quantize()
            self.quant, self.dequant = M.QuantStub(), M.DequantStub()
            for m in self.modules():
                if isinstance(m, M.Conv2d):
                    M.init.msra_normal_(m.weight, mode="fan_out")
                elif isinstance(m, M.BatchNorm2d):  # not the identity, so folding BN changes the weights
                    m.weight._reset(rng.uniform(0.5, 1.5, m.weight.shape).astype("float32"))
                    m.bias._reset(rng.uniform(-0.2, 0.2, m.bias.shape).astype("float32"))
                elif isinstance(m, M.Linear):
                    M.init.normal_(m.weight, 0, 0.1)

        def forward(self, x):
            x = self.features(self.quant(x))
            x = F.flatten(F.avg_pool2d(x, 4), 1)
            return self.classifier(self.dequant(x))

    return MobileNetV2()


@functools.lru_cache(maxsize=1)
def _mbv2_calibrated():
    """The float MobileNetV2, its calibrated QAT copy (observers off) and the input; built once."""
    import copy

    mge, _, _, _ = _mge()
    from megengine.quantization import calibration_qconfig, disable_observer, enable_observer, quantize_qat

    rng = _seed()
    net = _mbv2_net(rng)
    net.train()  # batch norm statistics from data
    for _ in range(8):
        net(mge.tensor(rng.randn(8, 3, 32, 32).astype("float32")))
    net.eval()
    x = rng.randn(8, 3, 32, 32).astype("float32")
    qat = quantize_qat(copy.deepcopy(net), qconfig=calibration_qconfig)
    qat.eval()
    enable_observer(qat)
    for _ in range(4):
        qat(mge.tensor(rng.randn(8, 3, 32, 32).astype("float32")))
    qat(mge.tensor(x))
    disable_observer(qat)
    return net, qat, x


def _mbv2_int8(misscaled=None):
    """The calibrated model quantized; ``misscaled``: the module whose weight scale becomes
    8x too large (its weight observer's range stretched before ``quantize``)."""
    _, qat, x = _mbv2_calibrated()
    q = quantized(qat, misscaled, MBV2_FACTOR)
    return q, q, {"data": x}, {}


def case_mbv2_float(rng):
    net, _, x = _mbv2_calibrated()
    return net, net, {"data": x}, {}


def case_mbv2_int8(rng):
    return _mbv2_int8()


def case_mbv2_int8_expand(rng):
    return _mbv2_int8(MBV2_MISSCALED["mbv2_int8_expand"])


def case_mbv2_int8_proj(rng):
    return _mbv2_int8(MBV2_MISSCALED["mbv2_int8_proj"])


_MBV2 = "MobileNetV2-style (inverted residuals, ConvBn2d projections, residual adds, float classifier of 20 classes)"
_INT8_NOTE = {"dtype": "float32", "note": "int8; its float model is the mbv2_float case (lar-prec quant mbv2_float/model.mge THIS_MODEL)"}
MBV2_CASES: List[Tuple[str, Callable, str, Dict]] = [
    ("mbv2_float", case_mbv2_float, f"{_MBV2} in float32: the float side of the mbv2_int8* cases", {}),
    ("mbv2_int8", case_mbv2_int8, f"{_MBV2} int8 by quantize_qat, calibration and quantize, as MegEngine's own models",
     _INT8_NOTE),
    ("mbv2_int8_expand", case_mbv2_int8_expand, f"mbv2_int8 with the expand conv {MBV2_MISSCALED['mbv2_int8_expand']} "
     "mis-scaled (weights on an 8x coarser grid)", _INT8_NOTE),
    ("mbv2_int8_proj", case_mbv2_int8_proj, f"mbv2_int8 with the projection {MBV2_MISSCALED['mbv2_int8_proj']} "
     "mis-scaled (weights on an 8x coarser grid), feeding a residual add", _INT8_NOTE),
]
# ---------------------------------------------------------------- end int8 MobileNetV2 pair


CASES: List[Tuple[str, Callable, str, Dict]] = [
    ("cnn", case_cnn, "conv, relu, max and average pooling, linear, softmax", {}),
    ("resnet", case_resnet, "stem conv and three residual blocks (conv-relu-conv + skip), global average pooling, linear", {}),
    ("mlp", case_mlp, "three linear layers with tanh and sigmoid", {}),
    ("attention", case_attention, "self-attention block: linear, batched matmul, softmax, layer norm, GELU MLP, residuals", {}),
    ("multi_input", case_multi_input, "two inputs of different shapes (image and vector) joined by concat", {}),
    ("fp16", case_fp16, "float16 input, weights and matmul compute", {"dtype": "float16"}),
    ("int_ops", case_int_ops, "int32 inputs and outputs: mul, add, floor div, mod, compare and cast", {"dtype": "int32"}),
    ("quantized", case_quantized, "int8 quantized conv-relu and conv (QuantizedS8/S32 inside, float32 IO)",
     {"dtype": "float32", "note": "quantized values are dumped as raw integers; the scale is not in the dump"}),
    ("quant_mobile", case_quant_mobile, "int8 block from MegEngine's QAT API: conv-BN-relu over 6 channels, strided depthwise "
     "conv-relu, grouped 1x1 conv-BN, residual add-relu, 1x1 head (QuantizedS8/S32 inside, float32 IO)",
     {"dtype": "float32", "note": "quantized values are dumped as raw integers; the scale is not in the dump"}),
    ("fastrun_shake", case_fastrun_shake, "14 small convolutions of different shapes; --fast-run picks algorithms by timing, so runs can differ", {}),
    ("amplify", case_amplify, "a batched matmul that amplifies its input's error ~11x (cancellation, exact on every CPU), and an unrelated branch", {}),
    ("shufflenet", case_shufflenet, "ShuffleNetV2 unit with 58-channel branches (depthwise 3x3, grouped 1x1, split, concat, "
     "channel shuffle) and a YOLOX-style head (1-channel objectness, nearest resize, concat)", {}),
    ("longred", case_longred, "three 3x3 convolutions over 8, 256 and 512 channels: reductions of 72, 2,304 and 4,608 terms", {}),
    ("vit", arch.case_vit, "ViT: 4x4 patch conv, class token, two pre-norm encoder blocks of 2-head softmax attention "
     "(head dim 24, 65 tokens) and GELU MLP, LayerNorm, linear head", {}),
    ("mobilenetv3", arch.case_mobilenetv3, "MobileNetV3-small's first stages: hswish/hsigmoid, squeeze-excite, 3x3 and 5x5 "
     "depthwise convolutions, odd widths (72, 88, 96), fused BatchNorm", {}),
    ("gru_topk", arch.case_gru_topk, "a GRU unrolled over 8 steps from a zero initial state, a 20-class head and its TopK(5): "
     "values and int32 indices", {}),
    ("topk_ties", arch.case_topk_ties, "scores in steps of 0.5 (exact ties), their TopK(8) values and int32 indices, "
     "a descending ArgSort and an ArgMax per row", {}),
    ("resnet18", arch.case_resnet18, "ResNet-18 at 224x224, 1000 classes, fused BatchNorm (the one deployment-sized case)",
     {"heavy": True, "note": "a naive run takes seconds: per-case test loops leave it out"}),
    ("bn_unfused", case_bn_unfused, "conv + BatchNorm dumped without optimize_for_inference: its zero-size Byte variable makes every load_and_run dump fail",
     {"dump_fails": True, "note": "dump with optimize_for_inference=True to fuse BatchNorm away"}),
    *MBV2_CASES,
    ("unet", arch2.case_unet, "U-Net: conv-BN-relu stages, two max pooling downs, a ConvTranspose2d up and a bilinear "
     "resize up, concat skips", arch2.extra("unet")),
    ("dethead", arch2.case_dethead, "detection head: convs, box decoding (exp, mul, add), sigmoid scores, TopK with k a "
     "model input, boxes gathered by its indices, NMS", arch2.extra("dethead")),
    ("lstm_lm", arch2.case_lstm_lm, "LSTM language model: int32 token ids, embedding table indexing, MegEngine's fused "
     "LSTM operator, vocabulary head", arch2.extra("lstm_lm")),
    ("swin", arch2.case_swin, "two Swin blocks: window partition, F.roll shifted windows with mask, relative-position "
     "bias gathered by a constant index, softmax, LayerNorm, GELU MLP", arch2.extra("swin")),
    ("effnet_lite", arch2.case_effnet_lite, "EfficientNet blocks: swish (silu and x*sigmoid(x)), squeeze-excite, 3x3 "
     "and 5x5 depthwise convolutions, fused BatchNorm", arch2.extra("effnet_lite")),
    *qchain.QCHAIN_CASES,
]


def build(out: Path, only: List[str]) -> dict:
    """Build the cases into ``out`` and write ``out/manifest.json``; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, make, description, extra in CASES:
        if only and name not in only:
            continue
        t0 = time.time()
        rng = _seed()
        fn, module, inputs, opts = make(rng)
        case_dir = out / name
        case_dir.mkdir(exist_ok=True)
        _dump(fn, module, inputs, case_dir / "model.mge", optimize=opts.get("optimize", True))
        specs = []
        for iname, arr in inputs.items():
            np.save(case_dir / f"{iname}.npy", arr)
            specs.append(f"{iname}:{name}/{iname}.npy")
        faults = extra.get("fault_consts", [])
        missing = missing_consts(str(case_dir / "model.mge"), faults)
        if missing:
            raise SystemExit(f"{name}: fault constants {missing} are not constants of the dumped model")
        digest = hashlib.sha256((case_dir / "model.mge").read_bytes()).hexdigest()
        entries.append({
            "name": name,
            "model": f"{name}/model.mge",
            "inputs": specs,
            "description": description,
            "dtype": extra.get("dtype", "float32"),
            "runs_in_lite": True,
            "dump_fails": extra.get("dump_fails", False),
            "optimize_for_inference": opts.get("optimize", True),
            "note": extra.get("note", ""),
            "heavy": extra.get("heavy", False),
            "fault_consts": faults,
            "model_sha256": digest,
        })
        print(f"built {name:14s} {time.time() - t0:5.2f}s  {description}", file=sys.stderr)
    manifest = {"schema": "lar-prec.cases/1", "seed": SEED, "cases": entries}
    # Written last and atomically: make treats manifest.json as "all cases built".
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(out / "manifest.json")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "build")
    ap.add_argument("only", nargs="*", help="case names (default: all)")
    args = ap.parse_args(argv)
    build(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
