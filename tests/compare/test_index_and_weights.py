"""Index outputs compared by what they index, and weights or inputs that differ between the two
runs (issue 40 #2 and #3), on real runs of the built cases."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run_lar
from proc_helpers import user_lar
from lar_prec.diagnosis.local import scale_constant

INDEX_VARS = ("TopK:o1", "Argsort:o1", "Argmax", "RemoveAxis")


def nvd(case, out, *extra: object) -> tuple:
    """naive-vs-default of a case without local error: (exit code, report)."""
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "naive-vs-default", case.model, "--input",
                           ";".join(case.input_specs()), "--no-local", "-q", "--out", str(out), "--json",
                           str(out) + ".json", *map(str, extra)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out.parent / (out.name + ".json")).read_text())


def by_name(rep: dict) -> dict:
    return {v["name"]: v for v in rep["vars"]}


@pytest.mark.megengine
def test_default_kernels_that_order_ties_another_way_agree(manifest, tmp_path):
    # a build whose TopK, ArgSort and ArgMax list tied scores in another order
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_TIES="reorder")
    rc, rep = nvd(manifest["topk_ties"], tmp_path / "r", "--lar", lar)
    v = by_name(rep)
    assert rc == 0 and rep["summary"]["exit_code"] == 0 and rep["roots"] == []
    for name in INDEX_VARS:  # they differ (the stand-in reordered them), and are said to
        assert v[name]["status"] == "index_equivalent" and v[name]["max_err"] > 0, v[name]
    assert "ties may reorder" in v["TopK:o1"]["note"] and "moves the indices of var" in v["RemoveAxis"]["note"]
    assert v["TopK:o0"]["status"] == "ok" and v["TopK:o0"]["max_err"] == 0  # the values themselves
    assert rep["summary"]["by_status"]["index_equivalent"] == 4 and "4 index output(s)" in rep["verdict"]


@pytest.mark.megengine
def test_a_topk_index_of_another_value_diverges_and_is_the_root(manifest, tmp_path):
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_TIES="wrong")
    rc, rep = nvd(manifest["topk_ties"], tmp_path / "w", "--lar", lar)
    v = by_name(rep)
    assert rc == 1 and v["TopK:o1"]["status"] == "divergent" and [r["name"] for r in rep["roots"]] == ["TopK:o1"]
    assert "the values they index" in v["TopK:o1"]["note"] and "differ at 2" in v["TopK:o1"]["note"]


@pytest.mark.megengine
@pytest.mark.parametrize("flags", [(), ("--", "--fast-run")], ids=["default", "fast-run"])
def test_real_kernels_on_ties_agree(manifest, tmp_path, flags):
    # whichever order this CPU's kernels give tied scores, naive against default agrees
    rc, rep = nvd(manifest["topk_ties"], tmp_path / "t", *flags)
    assert rc == 0 and {by_name(rep)[n]["status"] for n in INDEX_VARS} <= {"ok", "index_equivalent"}


@pytest.fixture(scope="module")
def two_models(manifest, tmp_path_factory):
    """cnn re-dumped as it is and with c2.weight scaled by 1 + 1e-6 (var ids alike), and a
    default run of the first."""
    d = tmp_path_factory.mktemp("weights")
    case = manifest["cnn"]
    same = scale_constant(case.model, "c2.weight", 1.0, d / "same.mge")
    other = scale_constant(case.model, "c2.weight", 1.0 + 1e-6, d / "other.mge")
    run_lar(same, case.input_specs(), d / "a")
    return case, same, other, d


def compare(a, b, out) -> tuple:
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "compare", str(a), str(b), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(out.read_text()), proc.stdout


@pytest.mark.megengine
def test_runs_of_different_weights_are_said_first(two_models, tmp_path):
    case, _same, other, d = two_models
    run_lar(other, case.input_specs(), tmp_path / "b")
    rc, rep, out = compare(d / "a", tmp_path / "b", tmp_path / "r.json")
    w = by_name(rep)["c2.weight"]
    # far below any threshold, yet the weight is not the same: a finding of its own
    assert rc == 1 and w["status"] == "divergent" and 0 < w["max_err"] < 1e-5 and w["threshold"] == 0
    assert rep["different_weights"] == [{"id": w["id"], "name": "c2.weight", "shape": w["shape"], "dtype": "Float32",
                                         "max_abs_err": w["max_abs_err"]}]
    shape = ",".join(map(str, w["shape"]))
    assert rep["verdict"].startswith(f"the two runs used different weights: c2.weight ({shape}); divergence found")
    assert "Verdict: the two runs used different weights" in out and "different_inputs" not in rep


@pytest.mark.megengine
def test_runs_of_different_inputs_are_said_first(two_models, tmp_path):
    case, same, _other, d = two_models
    name, path = case.input_specs()[0].split(":", 1)
    x = np.load(path)
    x.flat[0] = np.nextafter(x.flat[0], np.float32(np.inf))  # one ulp in one element
    np.save(tmp_path / "x.npy", x)
    run_lar(same, [f"{name}:{tmp_path / 'x.npy'}"], tmp_path / "b")
    rc, rep, _ = compare(d / "a", tmp_path / "b", tmp_path / "r.json")
    assert rc == 1 and [s["name"] for s in rep["different_inputs"]] == [name] and "different_weights" not in rep
    assert rep["verdict"].startswith(f"the two runs used different inputs: {name} (")
