"""Inputs are never silently zero (issue 53 #1, #8): without --input every model input gets
seeded random data of the model's own shape and dtype, said in the verdict, the JSON and the
page; ``name:random[LOW,HIGH]@SEED`` chooses the range and seed; an input that is all zeros or
constant is a warning; the Python API takes arrays. Real models of ``cases/``, the bundled
load_and_run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lar_prec import inputspec
from lar_prec.errors import UsageError
from lar_prec.run.inputs import input_summary, plan_inputs, write_inputs
from browser_helpers import _clean_page, chromium  # noqa: F401  (chromium: a fixture)
from runner_fixtures import lar_prec


def test_no_input_gives_seeded_random_inputs_of_the_models_shape(manifest, tmp_path):
    multi = manifest["multi_input"]
    planned = plan_inputs([], multi.model, seed=5)
    by = {p.name: p for p in planned}
    assert set(by) == {"meta", "img"}  # every model input, none left to the model's zeros
    for k, p in enumerate(planned):
        assert p.generated["why"] == "no --input given" and p.generated["seed"] == 5 + k
        assert p.array.dtype == np.float32 and -1 <= p.array.min() < p.array.max() < 1
        assert len(np.unique(p.array)) > 1
    assert by["img"].array.shape == (2, 3, 16, 16) and by["meta"].array.shape == (2, 6)
    # the same seed gives the same data: the source names how to make it again
    again = {p.name: p for p in plan_inputs([by["img"].source], multi.model)}
    assert np.array_equal(again["img"].array, by["img"].array)
    summary = input_summary(write_inputs(planned, tmp_path / "in"))
    assert summary["line"] == "inputs: seeded random, no --input given" and summary["warnings"] == []


def test_random_items_take_range_and_seed_and_the_integer_rule(manifest):
    cnn, lm = manifest["cnn"], manifest["lstm_lm"]
    (p,) = plan_inputs(["data:random[2,3]@9"], cnn.model)
    assert p.generated["seed"] == 9 and 2 <= p.array.min() and p.array.max() < 3
    assert "why" not in p.generated  # asked for: not said as a missing --input
    (ids,) = plan_inputs(["ids:random[1,4]"], lm.model)
    assert ids.array.dtype == np.int32 and set(np.unique(ids.array)) <= {1, 2, 3, 4}
    assert {1, 4} <= set(np.unique(ids.array))  # both ends included for integers
    with pytest.raises(UsageError, match="range of integers"):
        plan_inputs(["ids:random[0,1.5]"], lm.model)
    with pytest.raises(UsageError, match="no input named"):
        plan_inputs(["nope:random"], cnn.model)


@pytest.mark.parametrize("item, msg", [
    ("random[1,x]", "bad range"), ("random[2,1]", "LOW < HIGH"), ("random[1]", "bad range"),
    ("random[0,inf]", "finite"), ("random@-1", "bad seed"), ("random@1.5", "bad seed"),
    ("random@99999999999999999999", "bad seed"), ("randomly", "bad random input"),
])
def test_a_range_or_seed_that_does_not_parse_is_refused(item, msg):
    with pytest.raises(inputspec.InputSpecError, match=msg):
        inputspec.parse_random(item)


@pytest.mark.parametrize("item", ["random[1,x]", "random[0,1]@seven"])
def test_a_bad_random_item_is_one_line_exit_2_and_no_folder(manifest, tmp_path, item):
    out = tmp_path / "out"
    proc = lar_prec("naive-vs-default", manifest["cnn"].model, "--input", f"data:{item}", "--out", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: ")
    assert f"data:{item}" in proc.stderr and not out.exists()


def test_api_takes_arrays_and_constant_inputs_are_warned(manifest, tmp_path):
    cnn = manifest["cnn"]
    arr = np.full((1, 3, 32, 32), 0.5, np.float32)
    (p,) = plan_inputs({"data": arr}, cnn.model)
    assert p.array is not None and np.array_equal(p.array, arr) and "array" in p.source
    summary = input_summary(write_inputs([p], tmp_path / "in"))
    assert summary["constant"] == [{"name": "data", "value": 0.5}]
    assert summary["warnings"][0].startswith("warning: input data is constant (0.5 everywhere)")
    with pytest.raises(UsageError, match="float64 array"):
        plan_inputs({"data": np.zeros((1, 3, 32, 32))}, cnn.model)  # never narrowed silently


def test_nvd_without_input_says_so_in_verdict_json_and_page(manifest, tmp_path, chromium):  # noqa: F811
    from lar_prec import naive_vs_default

    out = tmp_path / "nvd"
    a = naive_vs_default(manifest["cnn"].model, [], out=out, local=False)
    assert a.report.verdict.endswith("; inputs: seeded random, no --input given")
    data = json.loads((out / "report.json").read_text())
    assert data["input_summary"]["generated"] == ["data"] and data["verdict"] == a.report.verdict
    (rec,) = data["inputs"]
    saved = np.load(rec["path"])
    assert rec["path"].startswith(str(out / "inputs")) and saved.std() > 0.1  # not zeros
    chromium.open(out / "report.html")  # the page's header, drawn by report.js from the JSON
    _clean_page(chromium)
    assert "inputs\nseeded random, no --input given" in chromium.js("document.getElementById('meta').innerText")
    # arrays through the Python API into the same --out: one all zeros, one not given at all
    # (load_and_run then feeds whatever its buffer held: the two runs saw different values)
    b = naive_vs_default(manifest["multi_input"].model, {"meta": np.zeros((2, 6), np.float32)}, out=out, local=False)
    assert "warning: input meta is all zeros" in b.report.verdict and "no --input given" not in b.report.verdict
    assert "warning: input img was not given" in b.report.verdict
    assert b.report.extra["input_summary"]["not_given"] == ["img"]
    chromium.open(out / "report.html")
    meta = chromium.js("document.getElementById('meta').innerText")
    assert "inputs\ngiven; warning: input meta is all zeros" in meta and "input img was not given" in meta
    assert not (out / "naive-vs-default").exists() and not (tmp_path / "nvd.prev").exists()
