"""Per-layer quantization error (issue 23) on a real pair: a float model and the int8 model
MegEngine's quantization API made from the same weights (tests/quant_fixtures.py).

Scales come from the quantized model's graph (dump titles carry none); vars pair by the graph's
structure, through fused layers and conversions, and what does not pair says why; dequantized values
track the float ones; a layer whose weight scale was deliberately stretched is the worst by
local error, and every other layer's local error stays what it was in the clean pair.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_lar
from lar_prec.diagnosis.graphinfo import describe_model, read_graph_info
from lar_prec.diagnosis.graphpair import module_of
from lar_prec.diagnosis.quantinfo import (layer_errors, local_quant_errors, pair_quant, real_values, step_differences,
                                          with_local, worst_first)
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from quant_fixtures import misscaled_pair, quant_pair  # noqa: F401  (fixtures)

NAIVE = {"MGB_USE_MEGDNN_DBG": "2"}


def _analyse(pair, tmp_path):
    """Graphs, pairing, the float model's naive dump, the quantized model's default dump,
    and every layer's accumulated and local error."""
    fg = describe_model(pair["float"], tmp_path / "float.json")
    qg = describe_model(pair["quant"], tmp_path / "quant.json")
    inputs = [f"data:{pair['data']}"]
    run_lar(pair["float"], inputs, tmp_path / "float", env=NAIVE)
    run_lar(pair["quant"], inputs, tmp_path / "quant")
    fd, qd = DumpFolder(tmp_path / "float"), DumpFolder(tmp_path / "quant")
    pairing = pair_quant(fg, qg)
    local = local_quant_errors(pair["quant"], qg, fg, pairing, fd, qd, tmp_path / "local")
    layers = with_local(layer_errors(fg, qg, fd, qd, pairing), local)
    return fg, qg, fd, qd, pairing, {l.quant_name: l for l in layers}


@pytest.fixture(scope="module")
def clean(quant_pair, tmp_path_factory):  # noqa: F811
    return _analyse(quant_pair, tmp_path_factory.mktemp("clean"))


@pytest.fixture(scope="module")
def misscaled(misscaled_pair, tmp_path_factory):  # noqa: F811
    return _analyse(misscaled_pair, tmp_path_factory.mktemp("misscaled"))


def test_module_of_reads_the_module_path_of_a_var_name():
    assert module_of("c1.ConvBias") == "c1"
    assert module_of("blocks.0.RELU[1]") == "blocks.0"
    assert module_of("conv(data,const{16,3,3,3}[203])[205]") is None
    assert module_of("ADD(fc.bias,fc.MatrixMul)[51]") is None
    assert module_of("Reshape") is None


@pytest.mark.megengine
def test_scales_come_from_the_quantized_graph_and_dequantize_the_dumps(clean):
    fg, qg, fd, qd, pairing, layers = clean
    quantized = [v for v in qg.vars.values() if v.is_quantized]
    assert {v.dtype for v in quantized} == {"QuantizedS8", "QuantizedS32"}
    assert all(v.scale and v.scale > 0 and v.zero_point is None for v in quantized)  # symmetric int8
    # the dump says QuantizedS8 and holds raw integers; the graph's scale makes them real values
    pool = next(v for v in qg.vars.values() if v.name == "pool.Pooling")
    d = qd[pool.id]
    assert d.var.dtype == "QuantizedS8" and np.asarray(d.array()).dtype == np.int8
    assert np.array_equal(real_values(qd, pool), np.asarray(d.array(), np.float64) * pool.scale)
    # a dump read with the wrong model's graph is refused, not misread
    fpool = next(v for v in fg.vars.values() if v.name == "pool.Pooling")
    with pytest.raises(UsageError, match="dumped as Float32, the model says QuantizedS8"):
        real_values(fd, pool)
    assert real_values(fd, fpool).dtype == np.float64


@pytest.mark.megengine
def test_vars_pair_by_structure_through_fused_layers_and_conversions_and_the_rest_say_why(clean):
    _, _, _, _, pairing, _ = clean
    got = {(p.quant_name, p.float_name) for p in pairing.pairs}
    assert got == {
        ("q.TypeCvt", "data"),  # the input, quantized
        ("c1.ConvBias", "c1.RELU"),  # conv + batch norm + relu: one int8 operator
        ("g.ConvBias", "g.RELU"),
        ("dw.ConvBias", "dw.RELU"),
        ("pool.Pooling", "pool.Pooling"),
        ("Reshape", "Reshape"),
        ("fc.MatrixMul", "fc.MatrixMul"),  # QuantizedS32 accumulators, before the bias as the float one
        ("fc.ADD", "fc.ADD"),
        ("fc.TypeCvt", "fc.ADD"),  # requantized to int8
        ("dq.TypeCvt", "fc.ADD"),  # dequantized output
    }
    assert {p.how for p in pairing.pairs} == {"structure"} and not any(p.bias_id for p in pairing.pairs)
    assert (pairing.layers_paired, pairing.layers_total) == (6, 6) and pairing.mismatch("f", "q") is None
    unpaired = {(u.side, u.name): u for u in pairing.unpaired}
    assert set(unpaired) == {("float", "g.Convolution"), ("float", "dw.Convolution"),
                             ("float", next(n for s, n in unpaired if n.startswith("conv(data")))}
    assert all(u.fused for u in unpaired.values())
    assert "ConvBiasForward g.ConvBias computes this layer with its bias+relu" in unpaired[("float", "g.Convolution")].why


@pytest.mark.megengine
def test_dequantized_values_track_the_float_ones_layer_by_layer(clean):
    layers = clean[5]
    assert len(layers) == 10
    for name, l in layers.items():
        assert l.entire.cosine > 0.99 and l.entire.snr_db > 20, (name, l.entire)
        # local error leaves out what the layer's inputs carried: never much worse
        assert l.local is not None and l.local.snr_db >= l.entire.snr_db - 0.5, (name, l.entire, l.local)
    # the first layers read the model input itself: nothing to inherit
    assert layers["c1.ConvBias"].local.snr_db == pytest.approx(layers["c1.ConvBias"].entire.snr_db)
    assert json.loads(json.dumps(layers["g.ConvBias"].to_json()))["local"]["snr_db"] > 20


@pytest.mark.megengine
def test_a_mis_scaled_layer_is_the_worst_by_local_error_and_only_it_changes(clean, misscaled):
    base, bad = clean[5], misscaled[5]
    worst = worst_first(list(bad.values()), by="local")
    assert worst[0].quant_name == "g.ConvBias"
    assert bad["g.ConvBias"].local.snr_db < base["g.ConvBias"].local.snr_db - 6  # 8x coarser weights
    assert bad["g.ConvBias"].local.snr_db < min(l.local.snr_db for n, l in bad.items() if n != "g.ConvBias") - 6
    for name, l in bad.items():
        if name != "g.ConvBias":  # fed with the float reference's inputs: untouched by g
            assert l.local.snr_db == pytest.approx(base[name].local.snr_db, abs=0.5), name


@pytest.mark.megengine
def test_naive_and_default_int8_kernels_differ_by_one_step_at_most(quant_pair, clean, tmp_path):  # noqa: F811
    _, qg, _, qd, _, _ = clean
    run_lar(quant_pair["quant"], [f"data:{quant_pair['data']}"], tmp_path / "naive", env=NAIVE)
    naive = DumpFolder(tmp_path / "naive")
    diffs = {v.name: step_differences(naive[v.id].array(), qd[v.id].array())
             for v in qg.vars.values() if v.is_quantized and v.id in qd and v.id in naive}
    assert len(diffs) >= 8
    assert all(d.n_larger == 0 and d.max_steps <= 1 for d in diffs.values()), diffs
    one = step_differences(np.array([3, -4, 7, 0], np.int8), np.array([4, -4, 5, 0], np.int8))
    assert (one.n_one_step, one.n_larger, one.max_steps) == (1, 1, 2)


def test_a_graph_record_that_is_not_one_is_a_usage_error(tmp_path):
    bad = tmp_path / "g.json"
    bad.write_text(json.dumps({"schema": "lar-prec.graph/1", "operators": [{"name": "x"}], "vars": [],
                               "outputs": []}))
    with pytest.raises(UsageError, match=r"g\.json: malformed graph record"):
        read_graph_info(bad)
    bad.write_text("[]")
    with pytest.raises(UsageError, match="expected a graph record"):
        read_graph_info(bad)


def test_an_snr_that_is_not_a_number_is_null_in_strict_json_and_says_why():
    from lar_prec.diagnosis.quantinfo import metrics
    from lar_prec.report.quant import snr_text

    exact, zero = metrics(np.ones(4), np.ones(4)), metrics(np.zeros(4), np.ones(4))
    nan = metrics(np.array([1.0, np.nan, 2.0]), np.ones(3))
    assert exact.snr_db == float("inf") and zero.snr_db is None and nan.snr_db is None
    got = json.loads(json.dumps([m.to_json() for m in (exact, zero, nan)], allow_nan=False))
    assert [(g["snr_db"], g["snr_note"]) for g in got] == [
        (None, "exact"), (None, "zero signal"), (None, "non-finite values (1)")]
    assert [snr_text(g) for g in got] == ["exact", "no signal", "NaN/Inf"]
    assert snr_text(metrics(np.ones(4), np.array([1.0, 1.0, 1.0, 1.1])).to_json()) == "26.0"  # 10 log10(4 / 0.01)
