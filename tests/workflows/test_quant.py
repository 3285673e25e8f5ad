"""The quant workflow on a real quantized pair (QAT then quantize, tests/quant_fixtures.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from browser_helpers import _clean_page, browser, chromium  # noqa: F401  (fixture)
from quant_fixtures import misscaled_pair  # noqa: F401  (fixture)

from lar_prec.errors import UsageError
from lar_prec.workflows.precision.quant import quant_analysis


@pytest.fixture(scope="module")
def misscaled_analysis(misscaled_pair, tmp_path_factory):  # noqa: F811
    """One quant analysis of the mis-scaled pair, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("quant") / "a"
    return quant_analysis(misscaled_pair["float"], misscaled_pair["quant"], [f"data:{misscaled_pair['data']}"], out=out)


@pytest.mark.megengine
def test_the_mis_scaled_layer_is_the_worst_and_the_only_one_to_keep_in_float(misscaled_analysis):
    res = misscaled_analysis
    assert res.layers[0].quant_name == "g.ConvBias"
    assert [r.label for r in res.runs][:2] == ["float-naive", "quant-default"] and all(r.ok for r in res.runs)
    data = json.loads(json.dumps(res.to_json()))
    assert data["layers"][0]["local"]["snr_db"] < data["layers"][1]["local"]["snr_db"]
    assert data["keep_in_float"] == ["g.ConvBias"], [(l["name"], l["local"]) for l in data["layers"]]
    assert all(u["why"] for u in data["unpaired"])
    # kept in float by a rewritten model (the float model's weights), the output gets closer
    v = data["verification"]
    assert v["kept"] == ["g.ConvBias"] and v["verified"], v
    assert v["outputs"][0]["metrics"]["snr_db"] > data["outputs"][0]["metrics"]["snr_db"]
    assert [r.label for r in res.runs][2:] == ["kept-in-float"]


def test_a_missing_quantized_model_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="quantized model"):
        quant_analysis(tmp_path / "f.mge", tmp_path / "missing.mge", "data:x.npy")


@pytest.mark.megengine
def test_the_quant_command_prints_the_worst_layer_and_exits_1(misscaled_pair, tmp_path):  # noqa: F811
    argv = [sys.executable, "-m", "lar_prec", "quant", str(misscaled_pair["float"]), str(misscaled_pair["quant"]),
            "--input", f"data:{misscaled_pair['data']}", "--out", str(tmp_path), "--json", str(tmp_path / "q.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "keep 1 layer(s) in float: g.ConvBias (local SNR" in proc.stdout.splitlines()[0], proc.stdout
    assert "* g.ConvBias" in proc.stdout
    assert json.loads((tmp_path / "q.json").read_text())["layers"][0]["name"] == "g.ConvBias"
    # issue 41 #7: every JSON file the analysis wrote (records, runs, graphs, the result) is strict
    from test_strict_json import strict_load

    written = sorted(tmp_path.rglob("*.json"))
    assert {"quant.json", "quant_local.json", "run.json", "inputs.json", "q.json"} <= {f.name for f in written}
    for f in written:
        strict_load(f)


@pytest.mark.megengine
def test_quant_prints_its_verdict_before_a_late_write_fails(misscaled_pair, tmp_path):  # noqa: F811
    """Issue 41 #4: `quant FLOAT QUANT --input ... --out OUT --lar lar.sh`, quant.html unwritable at the end
    (a folder took its place while the runs ran, as a full disk fails it): the layers and the
    verdict on stdout, then one Error line naming quant.html, exit 2 (stdout was empty)."""
    from conftest import ROOT

    out = tmp_path / "a"
    lar = tmp_path / "lar.sh"
    # not on --helpfull: lar-prec asks for the flag list before it claims the analysis folder
    lar.write_text(f"#!/bin/sh\n[ \"$1\" = --helpfull ] || mkdir -p {out / 'quant.html'}\n"
                   f"PYTHONPATH={ROOT} exec {sys.executable} -m lar_prec.lar \"$@\"\n")
    lar.chmod(0o755)
    argv = [sys.executable, "-m", "lar_prec", "quant", str(misscaled_pair["float"]), str(misscaled_pair["quant"]),
            "--input", f"data:{misscaled_pair['data']}", "--out", str(out), "--lar", str(lar)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert "keep 1 layer(s) in float: g.ConvBias (local SNR" in proc.stdout.splitlines()[0], proc.stdout
    # the progress (one step counter, issue 53), then the one error line
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("lar-prec quant: step ")]
    assert [ln.split(":")[1] for ln in steps] == [" step 1/4", " step 2/4", " step 3/4", " step 4/4"], proc.stderr
    error = proc.stderr.splitlines()[len(steps):]
    assert len(error) == 1 and error[0].startswith("Error: cannot write the HTML report to") and "quant.html" in error[0]


@browser
@pytest.mark.browser
@pytest.mark.megengine
def test_the_page_draws_layers_worst_first_with_the_kept_one_marked(misscaled_analysis, chromium):  # noqa: F811
    res = misscaled_analysis
    data = json.loads((res.analysis_dir / "quant.json").read_text())
    assert data == json.loads(json.dumps(res.to_json()))
    chromium.open(res.analysis_dir / "quant.html")
    _clean_page(chromium)
    assert "g.ConvBias" in chromium.js("document.getElementById('verdict').innerText")
    names = chromium.js("Array.from(document.querySelectorAll('#quant-layers tbody tr')).map(r => r.cells[0].innerText)")
    assert names == [l["name"] for l in data["layers"]]
    assert chromium.js("Array.from(document.querySelectorAll('#advice tr.kept')).map(r => r.cells[0].innerText)") \
        == data["keep_in_float"]
    # each run named with its configuration's name (a run record's config is an object), and its folder
    runs = chromium.js("Array.from(document.querySelectorAll('#runs-table tbody tr')).map(r => r.innerText)")
    assert len(runs) == len(data["runs"]) and not any("[object Object]" in r for r in runs), runs
    for r, text in zip(data["runs"], runs):
        assert text.startswith(r["label"]) and r["dump_dir"] in text
