"""Architectures the first cases lacked (issue 34): what people deploy, at sizes a test can run.

Each ``case_*`` returns ``(fn, module, inputs, options)`` like the cases of ``cases/build.py``,
which lists them. Weights follow each layer's usual initialisation (MegEngine's defaults), and
BatchNorm layers get running statistics of their own (fused away by optimize_for_inference),
so the folded weights are as uneven as a trained model's.
"""
from __future__ import annotations

from cases.common import mge as _mge, randomize_biases as _randomize_biases, randomize_bn as _randomize_bn


def case_vit(rng):
    """A small ViT: 4x4 patch convolution (64 patches + a class token = 65 tokens), two
    pre-norm encoder blocks of 2-head softmax attention (head dim 24) and a GELU MLP, a
    LayerNorm and a 10-class head on the class token."""
    mge, F, M, _ = _mge()
    d, heads = 48, 2

    class Attention(M.Module):
        def __init__(self):
            super().__init__()
            self.qkv = M.Linear(d, 3 * d)
            self.proj = M.Linear(d, d)
            self.scale = float((d // heads) ** -0.5)

        def forward(self, x):
            b, n, _ = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]                      # (b, heads, n, d/heads)
            att = F.softmax(F.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale, axis=-1)
            y = F.matmul(att, v).transpose(0, 2, 1, 3).reshape(b, n, d)
            return self.proj(y)

    class Block(M.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = M.LayerNorm(d), M.LayerNorm(d)
            self.attn = Attention()
            self.fc1, self.fc2 = M.Linear(d, 2 * d), M.Linear(2 * d, d)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.patch = M.Conv2d(3, d, 4, stride=4)
            self.cls = mge.Parameter((rng.randn(1, 1, d) * 0.02).astype("float32"))
            self.pos = mge.Parameter((rng.randn(1, 65, d) * 0.02).astype("float32"))
            self.blocks = [Block() for _ in range(2)]
            self.norm = M.LayerNorm(d)
            self.head = M.Linear(d, 10)

        def forward(self, x):
            p = self.patch(x).reshape(x.shape[0], d, -1).transpose(0, 2, 1)  # (b, 64, d)
            cls = F.broadcast_to(self.cls, (x.shape[0], 1, d))
            x = F.concat([cls, p], axis=1) + self.pos
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x)[:, 0])

    net = Net()
    _randomize_biases(net, rng)
    return net, net, {"data": rng.rand(1, 3, 32, 32).astype("float32")}, {}


def case_mobilenetv3(rng):
    """MobileNetV3-small's first stages: a strided 3x3 stem with hswish, inverted residuals with
    3x3 and 5x5 depthwise convolutions, squeeze-excite (global pool, two 1x1 convs, hsigmoid
    scale), relu and hswish, odd widths (72, 88, 96), a pooled 1x1 head with hswish and a
    classifier; BatchNorm fused by optimize_for_inference."""
    _, F, M, _ = _mge()

    class SE(M.Module):
        def __init__(self, c):
            super().__init__()
            r = max(8, c // 4)
            self.fc1, self.fc2 = M.Conv2d(c, r, 1), M.Conv2d(r, c, 1)

        def forward(self, x):
            s = F.mean(x, axis=(2, 3), keepdims=True)
            return x * F.hsigmoid(self.fc2(F.relu(self.fc1(s))))

    class IR(M.Module):
        def __init__(self, cin, k, exp, cout, se, hs, stride):
            super().__init__()
            self.act = F.hswish if hs else F.relu
            self.expand = None if exp == cin else M.Sequential(M.Conv2d(cin, exp, 1, bias=False), M.BatchNorm2d(exp))
            self.dw = M.Sequential(M.Conv2d(exp, exp, k, stride=stride, padding=k // 2, groups=exp, bias=False),
                                   M.BatchNorm2d(exp))
            self.se = SE(exp) if se else None
            self.project = M.Sequential(M.Conv2d(exp, cout, 1, bias=False), M.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.act(self.expand(x)) if self.expand is not None else x
            y = self.act(self.dw(y))
            if self.se is not None:
                y = self.se(y)
            y = self.project(y)
            return x + y if self.residual else y

    # (in, kernel, expanded, out, SE, hswish, stride): MobileNetV3-small's table, first rows
    table = [(16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2), (24, 3, 88, 24, False, False, 1),
             (24, 5, 96, 40, True, True, 2), (40, 5, 240, 40, True, True, 1)]

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = M.Sequential(M.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), M.BatchNorm2d(16))
            self.blocks = [IR(*row) for row in table]
            self.last = M.Sequential(M.Conv2d(40, 96, 1, bias=False), M.BatchNorm2d(96))
            self.fc1 = M.Linear(96, 128)
            self.fc2 = M.Linear(128, 10)

        def forward(self, x):
            x = F.hswish(self.stem(x))
            for b in self.blocks:
                x = b(x)
            x = F.mean(F.hswish(self.last(x)), axis=(2, 3))
            return self.fc2(F.hswish(self.fc1(x)))

    net = Net()
    _randomize_biases(net, rng)
    _randomize_bn(net, rng)
    return net, net, {"data": rng.rand(1, 3, 64, 64).astype("float32")}, {}


def case_gru_topk(rng):
    """A GRU (16 inputs, 32 hidden) unrolled over 8 steps from a zero initial state (its first
    step's ``zeros @ W + b`` and slices are a constant-only subgraph), a linear head over 20
    classes and the top 5 of them (TopK: values and indices)."""
    mge, F, M, _ = _mge()
    hid, steps = 32, 8

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.x2h = M.Linear(16, 3 * hid)
            self.h2h = M.Linear(hid, 3 * hid)
            self.head = M.Linear(hid, 20)

        def forward(self, x):
            h = F.zeros((x.shape[0], hid), dtype="float32")
            for t in range(steps):
                gx, gh = self.x2h(x[:, t]), self.h2h(h)
                r = F.sigmoid(gx[:, :hid] + gh[:, :hid])
                z = F.sigmoid(gx[:, hid:2 * hid] + gh[:, hid:2 * hid])
                n = F.tanh(gx[:, 2 * hid:] + r * gh[:, 2 * hid:])
                h = (1 - z) * n + z * h
            values, indices = F.topk(self.head(h), 5, descending=True)
            return values, indices

    net = Net()
    _randomize_biases(net, rng)
    return net, net, {"data": rng.randn(2, steps, 16).astype("float32")}, {}


def case_topk_ties(rng):
    """Scores in steps of 0.5 (many exact ties in each row of 2 x 96), their TopK(8): values and
    int32 indices, a descending ArgSort and an ArgMax per row (issue 40 #2: index outputs whose
    order may legally change between kernels)."""
    _, F, M, _ = _mge()

    class Net(M.Module):
        def forward(self, x):
            s = F.relu(x)  # exact: the ties of the data stay ties
            values, indices = F.topk(s, 8, descending=True)
            return values, indices, F.argsort(s, descending=True), F.argmax(s, axis=1)

    net = Net()
    return net, net, {"data": (rng.randint(-2, 6, size=(2, 96)) / 2).astype("float32")}, {}


def case_resnet18(rng):
    """ResNet-18 at 224x224 with 1000 classes: 7x7 stem, max pooling, four stages of basic
    blocks (BatchNorm fused), global average pooling. The one case as big as a deployed model:
    a naive run takes seconds, so only the tests that need its depth and the benchmarks run it."""
    _, F, M, _ = _mge()

    class Basic(M.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = M.Sequential(M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), M.BatchNorm2d(cout))
            self.c2 = M.Sequential(M.Conv2d(cout, cout, 3, padding=1, bias=False), M.BatchNorm2d(cout))
            self.down = None if stride == 1 and cin == cout else M.Sequential(
                M.Conv2d(cin, cout, 1, stride=stride, bias=False), M.BatchNorm2d(cout))

        def forward(self, x):
            skip = x if self.down is None else self.down(x)
            return F.relu(self.c2(F.relu(self.c1(x))) + skip)

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = M.Sequential(M.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), M.BatchNorm2d(64))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
                cin = cout
            self.layers = layers
            self.fc = M.Linear(512, 1000)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.stem(x)), 3, stride=2, padding=1)
            for b in self.layers:
                x = b(x)
            return self.fc(F.mean(x, axis=(2, 3)))

    net = Net()
    _randomize_biases(net, rng)
    _randomize_bn(net, rng)
    # an image-like input: ImageNet-normalised values
    return net, net, {"data": ((rng.rand(1, 3, 224, 224) - 0.45) / 0.226).astype("float32")}, {}
