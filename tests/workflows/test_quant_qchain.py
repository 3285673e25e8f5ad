"""lar-prec quant pairs layers by what they compute, through constant-only subgraphs (issue 51).

The cases qchain_float / qchain_float_folded / qchain_int8 / qchain_int8_bad (cases/qchain.py):
five ConvBnRelu2d quantized by MegEngine's API. qchain_float keeps its first BatchNorm after the
conv (a Broadcast of the conv's output to its own shape, FUSE_MUL_ADD3, RELU) and folds the
others into constant conv weights; qchain_float_folded folds every BatchNorm at run time (conv
weights that are MULs of constants). Either way every int8 ConvBias pairs, local errors are the
same, the float weights are the same, and the mis-scaled first layer is kept in float with the
BatchNorm's scale folded into its weights.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from lar_prec.diagnosis.graphinfo import read_graph_info
from lar_prec.diagnosis.quantinfo import pair_quant
from lar_prec.diagnosis.quantkeep import float_weights
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.precision.quant import quant_analysis

BAD = "layers.0.ConvBias"
CONVS = [f"layers.{k}.ConvBias" for k in range(5)]


def _quant_cli(float_model, quant_model, inputs, *extra):
    argv = [sys.executable, "-m", "lar_prec", "quant", str(float_model), str(quant_model), "--input", inputs, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def clean(manifest, tmp_path_factory):
    """qchain_float and qchain_int8 through the command line, with --json."""
    tmp = tmp_path_factory.mktemp("qchain")
    f, q = manifest["qchain_float"], manifest["qchain_int8"]
    proc = _quant_cli(f.model, q.model, f.input_specs()[0], "--out", str(tmp / "a"), "--json", str(tmp / "q.json"))
    return proc, json.loads((tmp / "q.json").read_text()) if (tmp / "q.json").exists() else None, tmp / "a"


@pytest.fixture(scope="module")
def analyses(manifest, tmp_path_factory):
    """(float case, int8 case) -> its QuantAnalysis."""
    spec = manifest["qchain_float"].input_specs()
    return {(f, q): quant_analysis(manifest[f].model, manifest[q].model, list(spec),
                                   out=tmp_path_factory.mktemp(f"{f}-{q}") / "a")
            for f, q in (("qchain_float", "qchain_int8_bad"), ("qchain_float_folded", "qchain_int8"))}


def _ops(graph_path):
    g = read_graph_info(graph_path)
    made = {v: o for o in g.operators for v in o.outputs}
    return g, made


@pytest.mark.megengine
def test_the_float_models_have_the_shapes_the_user_reported(clean, analyses):
    g, made = _ops(clean[2] / "float.graph.json")
    conv0 = next(o for o in g.operators if o.type == "ConvolutionForward")
    after = [o for o in g.operators if conv0.outputs[0] in o.inputs and o.type == "Broadcast"]
    assert len(after) == 1 and g.vars[after[0].outputs[0]].shape == g.vars[conv0.outputs[0]].shape
    fma = [o for o in g.operators if after[0].outputs[0] in o.inputs]
    assert [o.param("mode") for o in fma] == ["FUSE_MUL_ADD3"]
    folded = [g.vars[o.inputs[1]].name for o in g.operators if o.type == "ConvolutionForward"][1:]
    assert sum(n.startswith("fuse():MUL(") for n in folded) >= 2, folded  # BatchNorm folded into the weight
    g, made = _ops(analyses[("qchain_float_folded", "qchain_int8")].analysis_dir / "float.graph.json")
    weights = [made.get(o.inputs[1]) for o in g.operators if o.type == "ConvolutionForward"]
    muls = [w for w in weights if w is not None]
    assert len(muls) >= 2 and all(w.param("mode") == "MUL" and not any(i in made for i in w.inputs) for w in muls)


@pytest.mark.megengine
def test_every_layer_pairs_through_the_unfolded_batch_norm_and_the_pair_exits_0(clean):
    proc, data, adir = clean
    assert proc.returncode == 0, proc.stderr
    assert data["pairing"]["layers_paired"] == data["pairing"]["layers_total"] == 5
    layers = {l["name"]: l for l in data["layers"]}
    assert {n: layers[n]["float_name"] for n in CONVS} == {n: f"layers.{k}.RELU" for k, n in enumerate(CONVS)}
    assert (layers["quant.TypeCvt"]["float_name"], layers["dequant.TypeCvt"]["float_name"]) == ("data", "layers.4.RELU")
    assert [o["name"] for o in data["outputs"]] == ["dequant.TypeCvt"]
    assert all(l["accumulated"]["cosine"] > 0.99 for l in data["layers"]), data["layers"]
    # nothing of the int8 model is unpaired; the conv, its Broadcast and the BatchNorm's
    # FUSE_MUL_ADD3 are values the int8 ConvBias holds none of
    assert not [u for u in data["unpaired"] if not u["fused"]]
    inside = {u["name"] for u in data["unpaired"] if "ConvBiasForward layers.0.ConvBias computes" in u["why"]}
    assert {n.split("(")[0] for n in inside} == {"layers.0.conv.Convolution", "broadcast", "ADD"}, inside
    assert "no layer to keep in float: every int8 layer's local SNR is within 6 dB of the median" in data["verdict"]
    assert data["keep_in_float"] == [] and data["verdict"] == proc.stdout.splitlines()[0]


@pytest.mark.megengine
def test_the_mis_scaled_layer_is_kept_first_with_the_batch_norm_scale_folded_into_its_weights(clean, analyses):
    res = analyses[("qchain_float", "qchain_int8_bad")]
    assert res.layers[0].quant_name == BAD and res.keep_in_float[0] == BAD, res.verdict
    assert "its weights use up to 16 of the 127 int8 steps" in res.keep.layers[0].why  # 127 / 8
    base = {l["name"]: l["local"]["snr_db"] for l in clean[1]["layers"] if l["int8"]}
    for l in res.layers:  # local error is local: the other layers are fed the float model's values
        if l.int8 and l.quant_name != BAD:
            assert l.local.snr_db == pytest.approx(base[l.quant_name], abs=0.5), l.quant_name
    pair = next(p for p in res.pairing.pairs if p.quant_name == BAD)
    assert len(pair.float_scales) == 1 and not pair.scales_problem  # the FUSE_MUL_ADD3's scale
    v = res.verification
    assert v.kept[0] == BAD and v.verified and not v.skipped, res.verdict
    # without the scale the kept layer would compute another function (its SNR fell to ~8 dB);
    # with it the output is as close to the float model's as the clean int8 model's
    clean_out = clean[1]["outputs"][0]["metrics"]["snr_db"]
    assert v.outputs[0].metrics.snr_db > res.outputs[0].metrics.snr_db
    assert v.outputs[0].metrics.snr_db > clean_out - 1.0, (v.outputs[0].metrics, clean_out)


@pytest.mark.megengine
def test_a_batch_norm_folded_at_run_time_pairs_and_measures_alike(clean, analyses):
    res = analyses[("qchain_float_folded", "qchain_int8")]
    assert (res.pairing.layers_paired, res.pairing.layers_total) == (5, 5)
    assert not [u for u in res.pairing.unpaired if u.side == "quant" and not u.fused]
    base = {l["name"]: l["local"]["snr_db"] for l in clean[1]["layers"]}
    assert {l.quant_name: l.local.snr_db for l in res.layers} == pytest.approx(base, abs=0.1)
    assert res.keep_in_float == ()


@pytest.mark.megengine
def test_the_float_weights_are_the_same_however_the_batch_norm_was_folded(clean, analyses):
    adir = clean[2]
    fg, qg = read_graph_info(adir / "float.graph.json"), read_graph_info(adir / "quant.graph.json")
    unfolded = {p.quant_name: p for p in pair_quant(fg, qg).pairs}
    folded = analyses[("qchain_float_folded", "qchain_int8")]
    fg2 = read_graph_info(folded.analysis_dir / "float.graph.json")
    fd, fd2 = DumpFolder(adir / "float-naive" / "dump"), DumpFolder(folded.analysis_dir / "float-naive" / "dump")
    for p2 in folded.pairing.pairs:
        if p2.quant_name not in CONVS:
            continue
        w, why = float_weights(unfolded[p2.quant_name], fg, fd)
        w2, why2 = float_weights(p2, fg2, fd2)
        assert w is not None and w2 is not None, (why, why2)
        assert w.shape == w2.shape and np.allclose(w, w2, rtol=1e-5, atol=1e-7), p2.quant_name


@pytest.mark.megengine
def test_a_pair_that_does_not_pair_still_exits_2_with_one_line(manifest, tmp_path):
    f, q = manifest["mbv2_float"], manifest["qchain_int8"]
    proc = _quant_cli(f.model, q.model, f.input_specs()[0], "--out", str(tmp_path / "a"))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"Error: .* is not the quantized model of .*: its output dequant.TypeCvt "
                                        r"has no float partner .*; 0 of its 5 layers pair$", lines[0]), lines
    assert not (tmp_path / "a").exists()
