"""The dump-only check of where error is made recomputes LayerNorm (issue 34: transformers):
from each side's own inputs in float64, it tells an error made by the operator from one that came
through its input, on real runs of the ViT case."""
from __future__ import annotations

import numpy as np
import pytest

from lar_prec.compare import exact
from lar_prec.compare.explain import could_recompute, recompute
from lar_prec.dumps.folder import DumpFolder

OUTPUTS = ("values", "mean", "rstd")


def _layernorms(folder: DumpFolder):
    return [v for v in folder.ids if folder[v].var.opr_type == "LayerNormForward"]


def _recompute(a: DumpFolder, b: DumpFolder, v: int, ins_b=None, out_b=None):
    ins = a[v].input_ids
    return recompute("LayerNormForward", a[v].array(), [a[u].array() for u in ins],
                     b[v].array() if out_b is None else out_b,
                     [b[u].array() for u in ins] if ins_b is None else ins_b, "float32")


@pytest.mark.megengine
def test_correct_kernels_make_no_error_on_any_layernorm_output(lar_dump):
    a, b = DumpFolder(lar_dump("vit", "naive")), DumpFolder(lar_dump("vit", "default"))
    vars_ = _layernorms(a)
    assert len(vars_) >= 15  # 5 LayerNorms x (values, mean, rstd)
    for v in vars_:
        d = a[v]
        assert could_recompute("LayerNormForward", [a[u].shape for u in d.input_ids], d.shape)
        r = _recompute(a, b, v)
        assert r is not None and not r.made_here(), (d.var.name, r)
        # the output and the epsilon found are the ones the model has (its vars end in :o0, :o1, :o2)
        assert r.how.startswith(f"LayerNormForward {OUTPUTS[int(d.var.name[-1])]} ") and "eps 1e-05" in r.how


@pytest.mark.megengine
def test_an_error_made_in_a_layernorm_is_told_from_one_carried_into_it(lar_dump):
    a, b = DumpFolder(lar_dump("vit", "naive")), DumpFolder(lar_dump("vit", "default"))
    v = next(v for v in _layernorms(a) if a[v].var.name.endswith(":o0"))
    x_id, g_id, beta_id = b[v].input_ids
    x = np.asarray(b[x_id].array(), dtype=np.float64)
    g, beta = (np.asarray(b[u].array(), dtype=np.float64) for u in (g_id, beta_id))
    axis = x.ndim - g.ndim
    rng = np.random.default_rng(0)
    # carried: the input off by 1e-3 relative, the output what a correct float32 LayerNorm makes of it
    x_bad = (x * (1 + 1e-3 * rng.standard_normal(x.shape))).astype(np.float32)
    y_of_bad = exact.layernorm(x_bad.astype(np.float64), axis, 1e-5, g, beta).astype(np.float32)
    carried = _recompute(a, b, v, ins_b=[x_bad, b[g_id].array(), b[beta_id].array()], out_b=y_of_bad)
    assert carried is not None and not carried.made_here(), carried
    # made here: the same input, the output off by 1e-4 relative
    y = np.asarray(b[v].array(), dtype=np.float64)
    made = _recompute(a, b, v, out_b=(y * (1 + 1e-4 * rng.standard_normal(y.shape))).astype(np.float32))
    assert made is not None and made.made_here() and made.units_a <= 1.5 < made.units_b, made
