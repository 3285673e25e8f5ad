"""Floors from the rounding of each operator's own sums (issue 34), on the architectures the
first floors were not tuned on: a ViT (attention whose score products cancel), MobileNetV3
(depthwise 3x3 and 5x5, squeeze-excite means, hswish) and a GRU from a zero state (a
constant-only subgraph) with TopK outputs. Real runs of the bundled load_and_run; faults are
real rewrites of the model's weights, so they propagate through MegEngine."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import run_lar
from lar_prec.compare import bounds, exact
from lar_prec.compare.explain import recompute
from lar_prec.diagnosis.floors import TERMS_C, local_roots, noise_floors, over_floor_text
from lar_prec.diagnosis.local import local_errors, local_outputs, magnitude_ids, scale_constant
from lar_prec.diagnosis.local_analysis import run_local
from lar_prec.diagnosis.replay import replay
from lar_prec.dumps.folder import DumpFolder

NEW = ["vit", "mobilenetv3", "gru_topk"]


@pytest.fixture(scope="module")
def clean(manifest, lar_dump, tmp_path_factory):
    """``clean(case)`` -> LocalResult of default against naive on the unchanged model (cached)."""
    cache = {}

    def make(case: str):
        if case not in cache:
            out = tmp_path_factory.mktemp(f"units-{case}")
            cache[case] = local_errors(manifest[case].model, lar_dump(case, "naive"), "default", out_dir=out,
                                       test_dump=lar_dump(case, "default"), checks=False)
        return cache[case]

    return make


@pytest.mark.megengine
@pytest.mark.parametrize("case", NEW)
def test_every_sum_is_measured_in_rounding_units_and_clean_models_have_no_root(clean, case):
    result = clean(case)
    summed = [v for v in result.vars if v.opr_type in ("ConvolutionForward", "MatrixMul", "BatchedMatrixMul",
                                                       "SoftmaxForward") and not result.layerwise.var(v.id).static]
    assert summed and all(v.bound is not None for v in summed), [v.name for v in summed if v.bound is None]
    assert all(v.bound.worst <= TERMS_C for v in summed)  # rounding of correct kernels
    assert local_roots(result, noise_floors(result)).roots == ()


@pytest.mark.megengine
def test_the_magnitude_output_is_the_operator_on_absolute_values(clean, lar_dump):
    # vit's patch convolution (stride 4) and an attention product, recomputed in float64 on |inputs|
    result = clean("vit")
    local = DumpFolder(result.local_dump)
    mags, ref = magnitude_ids(local), DumpFolder(lar_dump("vit", "naive"))
    feeds = {f.id: f.ref_id for f in result.layerwise.feeds}
    checked = 0
    for m in result.layerwise.measured:
        if m.opr_type not in ("ConvolutionForward", "BatchedMatrixMul") or m.id not in mags:
            continue
        x, w = (np.abs(ref[feeds.get(u, u)].array().astype(np.float64)) for u in m.inputs)
        got = local[mags[m.id]].array().astype(np.float64)
        if m.opr_type == "ConvolutionForward":
            want = exact.conv2d(x, w, {"stride_h": 4, "stride_w": 4})
        else:  # q.k^T reads k transposed, attn.v does not: the shapes tell which
            tb = x.shape[-1] != w.shape[-2]
            want = exact.matmul(x, w, False, tb)
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-30), m.name
        checked += 1
    assert checked >= 3


def _weight(folder: DumpFolder, spec: str) -> str:
    """A weight constant by name, or (``shape:96,1,1,5,5``) the first of that shape: BatchNorm
    folded into a convolution leaves its weight an auto-generated name."""
    if not spec.startswith("shape:"):
        return spec
    shape = tuple(int(d) for d in spec[6:].split(","))
    return next(d.var.name for d in folder if d.var.opr_type == "ImmutableTensor" and tuple(d.var.shape) == shape)


@pytest.mark.megengine
@pytest.mark.parametrize("case, weight", [("vit", "blocks.0.attn.qkv.weight"),
                                          ("mobilenetv3", "shape:96,1,1,5,5"),  # the first 5x5 depthwise
                                          ("gru_topk", "x2h.weight")])
def test_a_weight_off_by_1e_5_roots_at_the_operator_reading_it(manifest, lar_dump, tmp_path, case, weight):
    c = manifest[case]
    weight = _weight(DumpFolder(lar_dump(case, "naive")), weight)
    model = scale_constant(c.model, weight, 1 + 1e-5, tmp_path / "faulty.mge")
    run_lar(model, c.input_specs(), tmp_path / "test")
    result = local_errors(model, lar_dump(case, "naive"), "default", out_dir=tmp_path / "local",
                          test_dump=tmp_path / "test", checks=False)
    verdict = local_roots(result)
    reads = {m.id for m in result.layerwise.measured if any(
        DumpFolder(lar_dump(case, "naive")).var_info(u).name == weight for u in m.inputs
        if u in DumpFolder(lar_dump(case, "naive")))}
    assert verdict.roots and {r.id for r in verdict.roots} <= reads, (
        [(r.name, r.local_err, r.floor) for r in verdict.roots], weight)


@pytest.mark.megengine
def test_a_fault_in_a_constant_subgraph_roots_where_it_meets_data_and_every_repro_replays(manifest, lar_dump, tmp_path):
    # the GRU's first step computes zeros @ W + b and slices it from constants alone: those
    # operators are the model's constants, and a fault in b roots at the operators mixing it
    # with data, each with a repro folder `lar-prec replay` accepts and reproduces
    c = manifest["gru_topk"]
    model = scale_constant(c.model, "h2h.bias", 1 + 1e-4, tmp_path / "faulty.mge")
    run_lar(model, c.input_specs(), tmp_path / "test")
    la = run_local(model, Path(lar_dump("gru_topk", "naive")), tmp_path / "test", "default", tmp_path / "a" / "local")
    labels, lw = la.verdict.labels, la.result.layerwise
    static = [m for m in lw.measured if m.static and m.dtype == "float32"]
    assert static and all(labels[m.id] == "constant" for m in static)
    assert la.verdict.roots and all(not lw.var(r.id).static for r in la.verdict.roots)
    assert all(r.opr_type not in ("Subtensor", "Broadcast") for r in la.verdict.roots)
    assert la.repros and not la.repro_errors
    for folder in la.repros:
        assert replay(folder).reproduced, folder


def test_a_root_margin_is_never_printed_as_x1_over_an_equal_floor():
    assert over_floor_text(8.7645e-07, 8.7612e-07) == "8.7645e-07 > floor 8.7612e-07 (x1.0004)"
    assert over_floor_text(3e-06, 1e-06) == "3e-06 > floor 1e-06 (x3)"


@pytest.mark.megengine
def test_dump_only_recomputation_tells_cancellation_from_a_fault(lar_dump, tmp_path):
    # vit's attention scores q.k^T cancel: the default run's error there is its inputs' error,
    # many times over; recomputed from each side's own inputs, neither side made any
    naive, default = DumpFolder(lar_dump("vit", "naive")), DumpFolder(lar_dump("vit", "default"))
    bmm = [d.id for d in naive if d.var.opr_type == "BatchedMatrixMul"]
    assert bmm
    for vid in bmm:
        ins = naive.inputs_of(vid)
        r = recompute("BatchedMatrixMul", naive[vid].array(), [naive[u].array() for u in ins],
                      default[vid].array(), [default[u].array() for u in ins], "float32")
        assert r is not None and not r.made_here(), (vid, r)
        # the same output scaled by 1+1e-5 on one side is made there
        faulty = default[vid].array().astype(np.float64) * (1 + 1e-5)
        r = recompute("BatchedMatrixMul", naive[vid].array(), [naive[u].array() for u in ins],
                      faulty, [default[u].array() for u in ins], "float32")
        assert r is not None and r.made_here() and r.units_b > TERMS_C and r.units_a <= TERMS_C


@pytest.mark.megengine
def test_the_oracle_judges_each_kernel_on_the_inputs_it_computed_from(manifest, lar_dump, tmp_path):
    # a weight fault in vit's first projection: the attention product after it gets wrong inputs
    # in the default run. On the naive run's inputs the default kernel is right: neither side
    # is wrong there. Against its own dumped output (what the old oracle compared) it would be.
    from lar_prec.diagnosis.graphinfo import describe_model
    from lar_prec.diagnosis.oracle import root_sides

    c = manifest["vit"]
    model = scale_constant(c.model, "blocks.0.attn.qkv.weight", 1 + 1e-3, tmp_path / "faulty.mge")
    run_lar(model, c.input_specs(), tmp_path / "test")
    naive = DumpFolder(lar_dump("vit", "naive"))
    result = local_errors(model, naive.path, "default", out_dir=tmp_path / "local", test_dump=tmp_path / "test",
                          checks=False)
    g = describe_model(model, tmp_path / "graph.json")
    bmm = next(d for d in naive if d.var.opr_type == "BatchedMatrixMul")
    asked = [(bmm.id, bmm.var.name, 1e-6)]
    local = local_outputs(result)
    [on_same] = root_sides(g, naive, asked, test_local=local)
    assert on_same.side == "neither" and on_same.test_units is not None and on_same.test_units <= TERMS_C
    [own_inputs] = root_sides(g, naive, asked, test_dump=DumpFolder(tmp_path / "test"))
    assert own_inputs.side == "neither"  # each on its own run's inputs: still right
    # while the default run's dumped output is far from the naive one: the old oracle, which
    # held it against exact arithmetic on the naive run's inputs, blamed the default kernel
    dumped = DumpFolder(tmp_path / "test")[bmm.id].array().astype(np.float64)
    assert np.max(np.abs(dumped - bmm.array())) > 1e3 * bounds.EPS["float32"] * np.max(np.abs(bmm.array()))
    assert math.isfinite(on_same.reference_units) and on_same.reference_units <= TERMS_C
