"""What every case module shares: MegEngine's import and trained-looking initialisation.

``cases/build.py``, ``cases/arch.py``, ``cases/arch2.py`` and ``cases/qchain.py`` import it; it imports none of them
(no import circle between the case modules). megengine is imported on first use only, so
``cases`` itself (the manifest reader) stays free of it.
"""
from __future__ import annotations

import numpy as np

#: every case is built from this seed (numpy's and MegEngine's)
SEED = 20261122


def mge():
    """``(megengine, functional, module, trace)``, imported once."""
    import warnings

    # numpy warns about float32 subnormals while megengine's quantization code probes finfo.
    warnings.filterwarnings("ignore", message="The value of the smallest subnormal")
    import megengine as mge
    import megengine.functional as F
    import megengine.module as M
    from megengine.jit import trace

    return mge, F, M, trace


def seed() -> np.random.RandomState:
    """Seed numpy and MegEngine with :data:`SEED`; the random state a case draws from."""
    m, _, _, _ = mge()
    np.random.seed(SEED)
    m.random.seed(SEED)
    return np.random.RandomState(SEED)


def randomize_bn(net, rng) -> None:
    """Running statistics as a trained BatchNorm has them (the fused conv's weights then vary
    per channel, as in a real model)."""
    _, _, M, _ = mge()
    for m in net.modules():
        if isinstance(m, M.BatchNorm2d):
            c = m.running_mean.shape[1]
            m.running_mean._reset(rng.uniform(-0.3, 0.3, size=(1, c, 1, 1)).astype("float32"))
            m.running_var._reset(rng.uniform(0.5, 2.0, size=(1, c, 1, 1)).astype("float32"))
            m.weight._reset(rng.uniform(0.6, 1.4, size=(1, c, 1, 1)).astype("float32"))
            m.bias._reset(rng.uniform(-0.2, 0.2, size=(1, c, 1, 1)).astype("float32"))


def randomize_biases(net, rng) -> None:
    """Biases as a trained model has them (MegEngine initialises them to zero, and a fault
    scaled into a zero bias changes nothing)."""
    _, _, M, _ = mge()
    for m in net.modules():
        if isinstance(m, (M.Linear, M.Conv2d)) and m.bias is not None:
            b = m.bias.numpy()
            m.bias._reset(rng.uniform(-0.1, 0.1, size=b.shape).astype("float32"))


#: the operators whose outputs are a model's constants (optimize_for_inference merges some of
#: them into a MultipleDeviceTensorHolder)
CONST_TYPES = ("ImmutableTensor", "SharedDeviceTensor", "MultipleDeviceTensorHolder")


def missing_consts(model: str, names) -> list:
    """The ``names`` that are not constants of the dumped ``model``."""
    import megengine.utils.comp_graph_tools as cgt
    from megengine.core.tensor import megbrain_graph as G

    with open(model, "rb") as f:
        outs = G.load_graph(f).output_vars_list
    consts = {v.name for t in CONST_TYPES for v in cgt.get_dep_vars(outs, t)}
    return [n for n in names if n not in consts]


def quantized(qat, misscaled=None, factor: float = 1.0):
    """A copy of the calibrated QAT model ``qat`` quantized to int8 (eval mode); ``misscaled``: the
    module whose weight scale becomes ``factor`` times too large (its weight observer's range
    stretched before ``quantize``)."""
    import copy

    from megengine.quantization import quantize

    q = copy.deepcopy(qat)
    if misscaled:
        obs = dict(q.named_modules())[misscaled].weight_observer
        obs.min_val._reset(obs.min_val * factor)
        obs.max_val._reset(obs.max_val * factor)
    quantize(q)
    q.eval()
    return q
