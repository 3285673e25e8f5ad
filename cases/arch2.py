"""Five more architectures (issue 51): segmentation, detection, language, windowed attention and
EfficientNet blocks, at sizes whose naive run takes well under a second.

Each ``case_*`` returns ``(fn, module, inputs, options)`` like those of ``cases/arch.py``;
``cases/build.py`` lists them, each with its fault constants (``FAULT_CONSTS``): the constant a
fault benchmark scales (``bench/faults.py``), checked present in the dumped model at build time.
Weights follow each layer's usual initialisation, biases and BatchNorm statistics are made
uneven as in a trained model (``cases.common``).
"""
from __future__ import annotations

import numpy as np

from cases.common import mge as _mge, randomize_biases, randomize_bn

#: per case, the names of its fault constants (constant vars of the dumped model)
FAULT_CONSTS = {
    "unet": ("up1.weight",),
    "dethead": ("box.weight",),
    "lstm_lm": ("embed.weight", "lstm._flatten_weights"),
    "swin": ("blocks.1.attn.rel_pos_bias",),
    "effnet_lite": ("blocks.2.se.reduce.weight",),
}


def extra(name: str) -> dict:
    """The case's options for ``cases/build.py``'s CASES: its fault constants."""
    return {"fault_consts": list(FAULT_CONSTS[name])}


def _trained(net, rng) -> None:
    """Biases and BatchNorm statistics as trained (transposed convolutions' biases too)."""
    _, _, M, _ = _mge()
    randomize_biases(net, rng)
    for m in net.modules():
        if isinstance(m, M.ConvTranspose2d) and m.bias is not None:
            m.bias._reset(rng.uniform(-0.1, 0.1, size=m.bias.shape).astype("float32"))
    randomize_bn(net, rng)


def case_unet(rng):
    """A small U-Net on 32x32: double conv-BN-relu stages of 8, 16 and 32 channels with two max
    pooling downs; up by a 2x2 stride-2 ConvTranspose2d (ConvolutionBackwardData) in the first
    up stage and by a bilinear 2x resize in the second, each concatenated with its skip; a 1x1
    head of 3 classes."""
    _, F, M, _ = _mge()

    def double(cin, cout):
        return M.Sequential(M.Conv2d(cin, cout, 3, padding=1, bias=False), M.BatchNorm2d(cout), M.ReLU(),
                            M.Conv2d(cout, cout, 3, padding=1, bias=False), M.BatchNorm2d(cout), M.ReLU())

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.enc1, self.enc2, self.bottom = double(3, 8), double(8, 16), double(16, 32)
            self.up1 = M.ConvTranspose2d(32, 16, 2, stride=2)
            self.dec1 = double(32, 16)
            self.dec2 = double(16 + 8, 8)
            self.head = M.Conv2d(8, 3, 1)

        def forward(self, x):
            e1 = self.enc1(x)                                   # 8 x 32 x 32
            e2 = self.enc2(F.max_pool2d(e1, 2))                 # 16 x 16 x 16
            b = self.bottom(F.max_pool2d(e2, 2))                # 32 x 8 x 8
            d1 = self.dec1(F.concat([self.up1(b), e2], axis=1))  # 16 x 16 x 16
            up = F.nn.interpolate(d1, scale_factor=2, mode="bilinear", align_corners=False)
            return self.head(self.dec2(F.concat([up, e1], axis=1)))

    net = Net()
    _trained(net, rng)
    return net, net, {"data": rng.rand(1, 3, 32, 32).astype("float32")}, {}


def case_dethead(rng):
    """A single-level detection head on a 16x16 feature map of stride 8 with 2 anchors per cell
    (512 boxes): two 3x3 conv-relu, a box regression 1x1 conv (dx, dy, dw, dh) and a score 1x1
    conv; boxes decoded against constant anchors (cx + w*dx, w*exp(min(dw, clip)), x1 = cx - w/2,
    ...), sigmoid scores, their top k (k a model input: TopK's output has no static shape), the
    boxes gathered by TopK's indices and NMS (IoU 0.5, at most 16 kept: F.vision.nms's
    operators, see _nms)."""
    mge, F, M, _ = _mge()
    hw, stride, sizes = 16, 8.0, (16.0, 40.0)
    # anchors in (position, anchor) order: centres of the cells, one square box of each size
    ys, xs = np.meshgrid((np.arange(hw) + 0.5) * stride, (np.arange(hw) + 0.5) * stride, indexing="ij")
    anchors = np.stack([np.stack([xs, ys, np.full_like(xs, s), np.full_like(xs, s)], axis=-1) for s in sizes], axis=2)
    anchors = anchors.reshape(-1, 4).astype("float32")
    clip = float(np.log(1000.0 / 16))  # the usual bound on dw, dh before exp

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = M.Conv2d(16, 32, 3, padding=1), M.Conv2d(32, 32, 3, padding=1)
            self.box = M.Conv2d(32, 4 * len(sizes), 1)
            self.score = M.Conv2d(32, len(sizes), 1)
            self.anchors = mge.tensor(anchors)

        def forward(self, feat, k):
            h = F.relu(self.c2(F.relu(self.c1(feat))))
            a = len(sizes)
            d = self.box(h).reshape(1, a, 4, hw, hw).transpose(0, 3, 4, 1, 2).reshape(-1, 4)
            s = F.sigmoid(self.score(h)).reshape(1, a, hw, hw).transpose(0, 2, 3, 1).reshape(-1)
            acx, acy, aw, ah = (self.anchors[:, i] for i in range(4))
            cx, cy = acx + aw * d[:, 0], acy + ah * d[:, 1]
            w, h_ = aw * F.exp(F.minimum(d[:, 2], clip)), ah * F.exp(F.minimum(d[:, 3], clip))
            boxes = F.stack([cx - w * 0.5, cy - h_ * 0.5, cx + w * 0.5, cy + h_ * 0.5], axis=1)
            # on the (1, N) row: topk's squeeze of a 1-D input crashes the trace (k is not static)
            top, idx = F.topk(s.reshape(1, -1), k, descending=True)
            top, idx = top[0], idx[0]
            cand = boxes[idx]
            keep = _nms(cand, 0.5, 16)
            return cand[keep], top[keep], keep

    net = Net()
    _trained(net, rng)
    inputs = {"feat": rng.randn(1, 16, hw, hw).astype("float32"), "k": np.array([40], dtype="int32")}
    return net, net, inputs, {}


def _nms(boxes, iou: float, max_output: int):
    """F.vision.nms without its sort (``boxes`` come sorted by score, from TopK): NMSKeep and a
    slice to its count. F.vision.nms's shape checks (and its argsort's) refuse a tensor whose
    shape is not static under a symbolic trace (``ValueError: unkown ndim``), as TopK's output
    with a k given at run time is."""
    from megengine.core._imperative_rt.core2 import apply
    from megengine.core.ops import builtin

    kept, count = apply(builtin.NMSKeep(iou, max_output), boxes.reshape(1, -1, 4))
    return kept[0][:count[0]]


def case_lstm_lm(rng):
    """An LSTM language model: int32 token ids (2 sequences of 8 over a vocabulary of 50) through
    an embedding table of width 16 (M.Embedding: an indexing of the table), MegEngine's fused
    LSTM operator (M.LSTM, one layer of 32 hidden; it traces, dumps and runs under the bundled
    load_and_run, naive too; its input, recurrent weights and biases are one flattened constant,
    ``lstm._flatten_weights``) and a linear head over the vocabulary."""
    _, F, M, _ = _mge()
    vocab = 50

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.embed = M.Embedding(vocab, 16)
            self.lstm = M.LSTM(16, 32, batch_first=True)
            self.head = M.Linear(32, vocab)

        def forward(self, ids):
            out, _ = self.lstm(self.embed(ids))
            return self.head(out)

    net = Net()
    _trained(net, rng)
    return net, net, {"ids": rng.randint(0, vocab, size=(2, 8)).astype("int32")}, {}


def _swin_consts(res: int, ws: int, shift: int):
    """The relative-position index of a window (ws^2 x ws^2 into a table of (2 ws - 1)^2) and
    the shifted windows' attention mask (0 within a region, -100 across), as Swin computes them."""
    coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    index = (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).reshape(-1).astype("int32")
    region = np.zeros((res, res))
    for i, hs in enumerate((slice(0, -ws), slice(-ws, -shift), slice(-shift, None))):
        for j, vs in enumerate((slice(0, -ws), slice(-ws, -shift), slice(-shift, None))):
            region[hs, vs] = 3 * i + j
    win = region.reshape(res // ws, ws, res // ws, ws).transpose(0, 2, 1, 3).reshape(-1, ws * ws)
    mask = np.where(win[:, None, :] != win[:, :, None], -100.0, 0.0).astype("float32")
    return index, mask


def case_swin(rng):
    """Two Swin blocks on an 8x8 map of 32 channels: LayerNorm, 4x4 window partition (reshape,
    transpose), 2-head attention whose scores get a relative-position bias (a learned 49x2 table
    gathered by a constant index), softmax, window reverse, GELU MLP, residuals; the second block
    shifts its windows by 2 (F.roll there and back, with the shifted windows' attention mask).

    optimize_for_inference folds the gather of the table (both constants) into one constant per
    block, merged into a MultipleDeviceTensorHolder: the dumped model holds the gathered bias,
    named ``blocks.<i>.attn.rel_pos_bias`` (1 x heads x 16 x 16), not the table."""
    mge, F, M, _ = _mge()
    res, c, heads, ws = 8, 32, 2, 4
    n = ws * ws
    index, mask = _swin_consts(res, ws, ws // 2)

    class WindowAttention(M.Module):
        def __init__(self, bias_name):
            super().__init__()
            self.bias_name = bias_name
            self.qkv, self.proj = M.Linear(c, 3 * c), M.Linear(c, c)
            # a trained table's spread (Swin initialises it at std 0.02; training widens it)
            self.rpb_table = mge.Parameter((rng.randn((2 * ws - 1) ** 2, heads) * 0.5).astype("float32"))
            self.index = mge.tensor(index)
            self.scale = float((c // heads) ** -0.5)

        def forward(self, x, mask):
            b = x.shape[0]
            qkv = self.qkv(x).reshape(b, n, 3, heads, c // heads).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            att = F.matmul(q * self.scale, k.transpose(0, 1, 3, 2))           # (windows, heads, n, n)
            bias = self.rpb_table[self.index].reshape(n, n, heads).transpose(2, 0, 1)
            bias = F.expand_dims(bias, 0)
            bias.name = self.bias_name  # the name of the constant optimize_for_inference folds it into
            att = att + bias
            if mask is not None:
                att = att + F.expand_dims(mask, 1)
            y = F.matmul(F.softmax(att, axis=-1), v).transpose(0, 2, 1, 3).reshape(b, n, c)
            return self.proj(y)

    class Block(M.Module):
        def __init__(self, i, shift):
            super().__init__()
            self.shift = shift
            self.norm1, self.norm2 = M.LayerNorm(c), M.LayerNorm(c)
            self.attn = WindowAttention(f"blocks.{i}.attn.rel_pos_bias")
            self.fc1, self.fc2 = M.Linear(c, 4 * c), M.Linear(4 * c, c)
            self.mask = mge.tensor(mask) if shift else None

        def forward(self, x):
            b = x.shape[0]
            h = self.norm1(x).reshape(b, res, res, c)
            if self.shift:
                h = F.roll(h, (-self.shift, -self.shift), axis=(1, 2))
            win = h.reshape(b, res // ws, ws, res // ws, ws, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
            y = self.attn(win, self.mask)
            y = y.reshape(b, res // ws, res // ws, ws, ws, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, res, res, c)
            if self.shift:
                y = F.roll(y, (self.shift, self.shift), axis=(1, 2))
            x = x + y.reshape(b, res * res, c)
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.blocks = [Block(0, 0), Block(1, ws // 2)]
            self.norm = M.LayerNorm(c)

        def forward(self, x):
            for blk in self.blocks:
                x = blk(x)
            return self.norm(x)

    net = Net()
    _trained(net, rng)
    return net, net, {"data": rng.randn(1, res * res, c).astype("float32")}, {}


def case_effnet_lite(rng):
    """EfficientNet blocks on 64x64: a strided 3x3 stem, MBConv blocks (1x1 expand by 6, 3x3 or
    5x5 depthwise, squeeze-excite: global average pool, 1x1 reduce, swish, 1x1 expand, sigmoid,
    multiply; 1x1 projection, residual where shapes allow), swish (F.silu) after every fused
    conv-BN but the projections, a 1x1 head, global pooling and a classifier."""
    _, F, M, _ = _mge()

    def conv_bn(cin, cout, k, stride=1, groups=1):
        return M.Sequential(M.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
                            M.BatchNorm2d(cout))

    class SE(M.Module):
        def __init__(self, c, squeeze):
            super().__init__()
            self.reduce, self.expand = M.Conv2d(c, squeeze, 1), M.Conv2d(squeeze, c, 1)

        def forward(self, x):
            s = self.reduce(F.mean(x, axis=(2, 3), keepdims=True))
            s = s * F.sigmoid(s)                                  # swish written out, as EfficientNet's code
            return x * F.sigmoid(self.expand(s))

    class MBConv(M.Module):
        def __init__(self, cin, cout, k, stride, expand):
            super().__init__()
            mid = cin * expand
            self.expand = conv_bn(cin, mid, 1) if expand != 1 else None
            self.dw = conv_bn(mid, mid, k, stride, groups=mid)
            self.se = SE(mid, max(1, cin // 4))
            self.project = conv_bn(mid, cout, 1)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = F.silu(self.expand(x)) if self.expand is not None else x
            y = self.project(self.se(F.silu(self.dw(y))))
            return x + y if self.residual else y

    # (in, out, kernel, stride, expand): EfficientNet-B0's first stages, narrowed
    table = [(16, 16, 3, 1, 1), (16, 24, 5, 2, 6), (24, 24, 5, 1, 6), (24, 40, 5, 2, 6)]

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, stride=2)
            self.blocks = [MBConv(*row) for row in table]
            self.head = conv_bn(40, 128, 1)
            self.fc = M.Linear(128, 10)

        def forward(self, x):
            x = F.silu(self.stem(x))
            for b in self.blocks:
                x = b(x)
            return self.fc(F.mean(F.silu(self.head(x)), axis=(2, 3)))

    net = Net()
    _trained(net, rng)
    return net, net, {"data": rng.rand(1, 3, 64, 64).astype("float32")}, {}
