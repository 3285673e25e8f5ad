"""A float model and its int8 counterpart from the same weights, built with MegEngine's own
quantization API (``quantize_qat``, a calibration pass, ``quantize``), for test_quantinfo.py and
test_oracle.py.

The network has what the cases lack: a grouped and a depthwise (strided) convolution, and a
convolution with batch norm; then max pooling and a linear layer. ``misscale`` builds the
quantized model with one layer's weight scale multiplied (its weight observer's range
stretched before ``quantize``): a deliberately mis-scaled layer. The build runs in a child
process (``python tests/quant_fixtures.py OUT [LAYER FACTOR]``): megengine stays out of pytest.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261123
#: the input's shape and the layers, in order
INPUT_SHAPE = (1, 3, 16, 16)
LAYERS = ("c1", "g", "dw", "pool", "fc")


def build(out: Path, misscale: Optional[Tuple[str, float]] = None) -> Dict[str, str]:
    """Write ``float.mge``, ``quant.mge`` and ``data.npy`` into ``out``; returns their paths."""
    import copy
    import warnings

    import numpy as np

    warnings.filterwarnings("ignore")  # numpy's float32 subnormal notes while megengine probes finfo
    import megengine as mge
    import megengine.functional as F
    import megengine.module as M
    from megengine.jit import trace
    from megengine.quantization import ema_fakequant_qconfig, quantize, quantize_qat

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q = M.QuantStub()
            self.c1 = M.ConvBnRelu2d(3, 16, 3, padding=1)
            self.g = M.ConvRelu2d(16, 16, 3, padding=1, groups=4)
            self.dw = M.ConvRelu2d(16, 16, 3, stride=2, padding=1, groups=16)
            self.pool = M.MaxPool2d(2)
            self.fc = M.Linear(16 * 4 * 4, 10)
            self.dq = M.DequantStub()

        def forward(self, x):
            x = self.pool(self.dw(self.g(self.c1(self.q(x)))))
            return self.dq(self.fc(F.flatten(x, 1)))

    def dump(net, x, path):
        net.eval()

        @trace(symbolic=True, capture_as_const=True)
        def run(data):
            return net(data)

        run(mge.tensor(x))
        run.dump(str(path), arg_names=["data"], optimize_for_inference=True)

    rng = np.random.RandomState(SEED)
    mge.random.seed(SEED)
    net = Net()
    net.train()  # a few batches so batch norm's statistics are not the identity
    for _ in range(3):
        net(mge.tensor(rng.rand(4, *INPUT_SHAPE[1:]).astype("float32")))
    x = rng.rand(*INPUT_SHAPE).astype("float32")
    out.mkdir(parents=True, exist_ok=True)
    dump(net, x, out / "float.mge")
    net.eval()
    q = copy.deepcopy(net)
    quantize_qat(q, qconfig=ema_fakequant_qconfig)
    # Calibration: the observers record in train mode only, and a train-mode batch norm
    # updates its running statistics, after which the int8 model would no longer have the
    # float model's (folded) weights: batch norm stays in eval mode.
    q.train()
    for m in q.modules():
        if isinstance(m, M.BatchNorm2d):
            m.eval()
    for _ in range(8):  # the observers see data like the input
        q(mge.tensor(rng.rand(4, *INPUT_SHAPE[1:]).astype("float32")))
    q(mge.tensor(x))
    if misscale is not None:
        layer, factor = misscale
        obs = getattr(q, layer).weight_observer
        obs.min_val._reset(obs.min_val * factor)
        obs.max_val._reset(obs.max_val * factor)
    q.eval()
    quantize(q)
    dump(q, x, out / "quant.mge")
    np.save(out / "data.npy", x)
    return {"float": str(out / "float.mge"), "quant": str(out / "quant.mge"), "data": str(out / "data.npy")}


def build_in_child(out: Path, misscale: Optional[Tuple[str, float]] = None) -> Dict[str, Path]:
    argv = [sys.executable, str(Path(__file__).resolve()), str(out)]
    if misscale:
        argv += [misscale[0], repr(float(misscale[1]))]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"building the quantized pair failed:\n{proc.stderr[-2000:]}")
    return {k: Path(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


@pytest.fixture(scope="session")
def quant_pair(tmp_path_factory) -> Dict[str, Path]:
    """float.mge, quant.mge (same weights, calibrated int8) and data.npy."""
    return build_in_child(tmp_path_factory.mktemp("quant_pair"))


@pytest.fixture(scope="session")
def misscaled_pair(tmp_path_factory) -> Dict[str, Path]:
    """The same pair with layer ``g``'s weight scale 8x too large (coarse int8 weights)."""
    return build_in_child(tmp_path_factory.mktemp("quant_misscaled"), ("g", 8.0))


if __name__ == "__main__":
    ms = (sys.argv[2], float(sys.argv[3])) if len(sys.argv) == 4 else None
    print(json.dumps(build(Path(sys.argv[1]), ms)))
