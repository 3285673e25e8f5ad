"""lar-prec quant on an int8 MobileNetV2 built as MegEngine's official quantized models (issue 35).

The cases mbv2_float / mbv2_int8 / mbv2_int8_expand / mbv2_int8_proj (cases/build.py): inverted
residuals whose ConvBn2d projections lose their names and their bias to optimize_for_inference
on the float side, residual QADDs, a float classifier left in the int8 model; calibrated with the
observers on. Every layer pairs by the graph, the output is compared, local error is each int8
operator on the float model's inputs, so a mis-scaled expand conv or projection is first and alone.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from browser_helpers import _clean_page, browser, chromium  # noqa: F401  (fixture)

from lar_prec.diagnosis.graphinfo import read_graph_info
from lar_prec.workflows.precision.quant import quant_analysis

MISSCALED = {"mbv2_int8_expand": "features.4.conv.0.ConvBias", "mbv2_int8_proj": "features.5.conv.2.ConvBias"}


def _quant_cli(float_model, quant_model, inputs, *extra):
    argv = [sys.executable, "-m", "lar_prec", "quant", str(float_model), str(quant_model), "--input", inputs, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def _strict(path):
    def refuse(name):
        raise ValueError(f"{name} in {path}")
    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def clean(manifest, tmp_path_factory):
    """The clean pair through the command line, with --json and --html."""
    tmp = tmp_path_factory.mktemp("mbv2")
    f, q = manifest["mbv2_float"], manifest["mbv2_int8"]
    proc = _quant_cli(f.model, q.model, f.input_specs()[0], "--out", str(tmp / "a"), "--json", str(tmp / "q.json"),
                      "--html", str(tmp / "q.html"))
    return proc, _strict(tmp / "q.json") if (tmp / "q.json").exists() else None, tmp


@pytest.fixture(scope="module")
def misscaled(manifest, tmp_path_factory):
    f = manifest["mbv2_float"]
    return {name: quant_analysis(f.model, manifest[name].model, list(f.input_specs()),
                                 out=tmp_path_factory.mktemp(name) / "a") for name in MISSCALED}


@pytest.mark.megengine
def test_every_int8_layer_pairs_and_the_output_is_compared(clean):
    proc, data, tmp = clean
    assert proc.returncode == 0, proc.stderr
    assert data["pairing"]["layers_paired"] == data["pairing"]["layers_total"] == 25
    layers = {l["name"]: l for l in data["layers"]}
    # every ConvBn2d projection (auto-named, its bias moved into the next operator on the float side)
    projections = ["features.1.conv.1.ConvBias"] + [f"features.{k}.conv.2.ConvBias" for k in range(2, 7)]
    assert all("+ the quantized model's bias" in layers[n]["reference"] for n in projections)
    # residual adds, the conversions at both ends, the float classifier left in the int8 model
    assert {layers[f"features.{k}.add.QADD"]["float_name"] for k in (3, 5, 6)} == {
        f"features.{k}.add.ADD" for k in (3, 5, 6)}
    assert (layers["quant.TypeCvt"]["float_name"], layers["dequant.TypeCvt"]["float_name"]) == ("data", "Reshape")
    assert layers["classifier.1.ADD"]["output"] and layers["classifier.1.ADD"]["float_name"] == "classifier.1.ADD"
    assert [o["name"] for o in data["outputs"]] == ["classifier.1.ADD"]
    # references are right: a float var without its bias would be far off (cosine ~0.85)
    assert all(l["accumulated"]["cosine"] > 0.95 for l in data["layers"]), data["layers"]
    # nothing of the int8 model is unpaired; the float values fused into an int8 operator say into which
    assert not [u for u in data["unpaired"] if not u["fused"]]
    fg = read_graph_info(tmp / "a" / "float.graph.json")
    float_of = {l["name"]: l["float_name"] for l in data["layers"]}
    ids = {v.name: v.id for v in fg.vars.values()}
    consumers = {}
    for o in fg.operators:
        for i in o.inputs:
            consumers.setdefault(i, set()).update(o.outputs)
    for u in data["unpaired"]:
        named = re.search(r"(?:ConvBiasForward|ElemwiseMultiType) (\S+) computes this layer", u["why"]).group(1)
        seen, todo = set(), [u["id"]]
        while todo:  # the float var feeds the float partner of the named int8 operator
            v = todo.pop()
            seen.add(v)
            todo += [c for c in consumers.get(v, ()) if c not in seen]
        assert u["side"] == "float" and ids[float_of[named]] in seen, u


@pytest.mark.megengine
def test_the_clean_pair_keeps_nothing_in_float_and_says_why(clean):
    proc, data, tmp = clean
    assert data["keep_in_float"] == [] and data["verification"] is None
    assert data["verdict"] == proc.stdout.splitlines()[0]
    assert "no layer to keep in float: every int8 layer's local SNR is within 6 dB of the median" in data["verdict"]
    out = data["outputs"][0]
    assert out["classifier"] and (out["samples"], out["classes"]) == (8, 20)
    assert f"top-1 {round(out['top1'] * 8)}/8, top-5 {round(out['top5'] * 8)}/8 against the float model" in data["verdict"]
    assert out["top5"] >= out["top1"] >= 0.75
    # an exact match (the float bias add, fed the float reference) is null in strict JSON, and says so
    local = {l["name"]: l["local"] for l in data["layers"]}
    assert local["classifier.1.ADD"]["snr_db"] is None and local["classifier.1.ADD"]["snr_note"] == "exact"
    assert (tmp / "q.html").stat().st_size > 0 and _strict(tmp / "a" / "quant.json") == data


@pytest.mark.megengine
def test_each_mis_scaled_layer_is_first_alone_and_keeping_it_in_float_is_verified(clean, misscaled):
    base = {l["name"]: l["local"]["snr_db"] for l in clean[1]["layers"] if l["int8"]}
    for case, bad in MISSCALED.items():
        res = misscaled[case]
        assert res.layers[0].quant_name == bad and res.keep_in_float == (bad,), (case, res.verdict)
        why = res.keep.layers[0].why
        assert why.startswith(f"local SNR {res.layers[0].local.snr_db:.1f} dB: ") and \
            "its weights use up to 16 of the 127 int8 steps" in why, why  # 127 / 8
        # local error is local: every other layer is fed the float model's values, untouched by the bad one
        for l in res.layers:
            if l.int8 and l.quant_name != bad:
                assert l.local.snr_db == pytest.approx(base[l.quant_name], abs=0.5), (case, l.quant_name)
        v = res.verification
        assert v.kept == (bad,) and v.verified, (case, res.verdict)
        assert v.outputs[0].metrics.snr_db > res.outputs[0].metrics.snr_db
        assert [r.label for r in res.runs] == ["float-naive", "quant-default", "kept-in-float"]
        assert res.verdict.startswith("output classifier.1.ADD: SNR ") and f"keep 1 layer(s) in float: {bad}" in res.verdict


@pytest.mark.megengine
def test_models_that_are_not_a_float_model_and_its_quantization_exit_2(manifest, tmp_path):
    f, q, other = manifest["mbv2_float"], manifest["mbv2_int8"], manifest["quant_mobile"]
    data = f.input_specs()[0]
    checks = [
        (f.model, f.model, data, "are the same model"),
        (q.model, f.model, data, "expected the float model, it has QuantizedS32, QuantizedS8 vars"),
        # another network, same input: its output pairs with nothing, and why
        (manifest["shufflenet"].model, other.model, manifest["shufflenet"].input_specs()[0],
         "is not the quantized model of .*: its output dq.TypeCvt has no float partner \\(its input c1.ConvBias did "
         "not pair: c1.ConvBias: no float layer computes a conv of shape \\[1, 6, 16, 16\\] from the same inputs"),
    ]
    for k, (fm, qm, inputs, why) in enumerate(checks):
        out = tmp_path / str(k)
        proc = _quant_cli(fm, qm, inputs, "--out", str(out), "--json", str(tmp_path / f"{k}.json"))
        assert proc.returncode == 2, (why, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and re.search(why, lines[0]), lines
        assert not out.exists() and not (tmp_path / f"{k}.json").exists()


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_the_page_shows_the_verdict_outputs_and_exact_matches(clean, chromium):  # noqa: F811
    _, data, tmp = clean
    chromium.open(tmp / "q.html")
    _clean_page(chromium)
    assert chromium.js("document.getElementById('verdict').innerText") == data["verdict"]
    rows = chromium.js("Array.from(document.querySelectorAll('#quant-layers tbody tr'))"
                       ".map(r => [r.cells[0].innerText, r.cells[3].innerText])")
    assert [r[0] for r in rows] == [l["name"] for l in data["layers"]]
    assert dict(rows)["classifier.1.ADD"].startswith("exact")


@pytest.mark.megengine
def test_a_reference_whose_bias_is_not_dumped_is_listed_as_not_measured(clean, tmp_path):
    """A load_and_run that dumps no constants: the projections' moved bias cannot be added back;
    they are listed with why, never compared with a float var that lacks its bias."""
    import shutil

    from lar_prec.diagnosis.quantinfo import layer_errors, not_in_dumps, pair_quant
    from lar_prec.dumps.folder import DumpFolder

    adir = clean[2] / "a"
    fg, qg = read_graph_info(adir / "float.graph.json"), read_graph_info(adir / "quant.graph.json")
    pairing = pair_quant(fg, qg)
    shutil.copytree(adir / "quant-default" / "dump", tmp_path / "q")
    biased = [p for p in pairing.pairs if p.bias_id is not None]
    for p in biased:
        DumpFolder(tmp_path / "q")[p.bias_id].path.unlink()
    fd, qd = DumpFolder(adir / "float-naive" / "dump"), DumpFolder(tmp_path / "q")
    layers = layer_errors(fg, qg, fd, qd, pairing)
    assert {l.quant_name for l in layers} == {p.quant_name for p in pairing.pairs} - {p.quant_name for p in biased}
    lost = dict(not_in_dumps(pairing, layers, fg, qg, fd, qd))
    assert set(lost) == {p.quant_name for p in biased} and len(lost) == 6
    assert all(w.endswith("is not in the quantized run's dump") and w.startswith("const{") for w in lost.values()), lost
