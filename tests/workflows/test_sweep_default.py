"""An option is judged by what it changes (issue 34 #4), on real runs of the cases.

The sweep runs the plain default run (no option) too, with its local error; an option whose
local roots are the default run's own and whose outputs stay within their tolerance of the
default run's is ``as_default``; only what an option adds is ``diverges``. Faults are made by a
stand-in load_and_run (tests/wrapped_lar.py: the bundled one, with one weight scaled in the
default kernels' runs, or only in the runs of one option), so they hold on every CPU.
"""
from __future__ import annotations

import pytest
from proc_helpers import user_lar

from lar_prec.compare.threshold import band
from lar_prec.compare.tolerance import fmt_num
from lar_prec.workflows.sweep.options import DEFAULT_OPTIONS, OPTIONS
from test_sweep import by_option, sweep_json


def _check_tolerance(o: dict) -> None:
    """The one rule: max(band, 2 x level), level 0 for options that keep float32; its words."""
    t = o["output_tolerance"]
    fp16 = OPTIONS[o["option"]].fp16 if o["option"] in OPTIONS else False
    assert t["dtype"] == ("Float16" if fp16 else "Float32") and t["band"] == band(t["dtype"])[1]
    if not fp16:
        assert t["level"] == 0.0
    assert t["value"] == o["tolerance"] == max(t["band"], 2 * (t["level"] or 0.0))
    if o["status"] == "runs":
        assert o["output_words"].startswith("output error ") and f"(tolerance {fmt_num(o['tolerance'])} = " in o["output_words"]


@pytest.mark.megengine
@pytest.mark.slow
@pytest.mark.parametrize("case", ["vit", "mobilenetv3"])
def test_every_x86_option_on_a_clean_model_diverges_only_where_it_adds_something(manifest, tmp_path, case):
    d, res = sweep_json(tmp_path, manifest[case], list(DEFAULT_OPTIONS["x86"]), "-j", "2", expect=None)
    plain = d["default"]
    assert plain["status"] == "runs" and plain["local"]["measured"], plain
    _check_tolerance(plain)
    own = {r["name"] for r in plain["local"]["roots"]}
    for o in d["options"]:
        _check_tolerance(o)
        if o["status"] != "runs":
            continue
        if OPTIONS[o["option"]].fp16:  # correct float16 ran: the naive kernels under the option
            assert o["output_tolerance"]["level"] is not None and o["naive_run_dir"], o
        else:  # a float32 option (layout, fusion, runtime) adds nothing to a clean model
            assert o["verdict"] in ("ok", "as_default"), o
        if o["verdict"] == "as_default":
            assert not o["added_roots"] and set(o["shared_roots"]) <= own
        if o["verdict"] == "diverges":  # only for what it adds over the default run
            tol = o["tolerance"]
            beyond = o["output_err"] is None or o["output_err"] > tol and not (o["default_err"] or 0) <= tol
            assert o["added_roots"] or beyond or (o["root_rule"] == "dump" and o["default_diverges"]), o
            assert not set(o["added_roots"]) & own
    assert "beyond the default run" in d["verdict"] and "None" not in res.stdout
    assert d["exit_code"] == int(plain["verdict"] == "diverges" or any(
        o["verdict"] == "diverges" or o["status"] in ("crashed", "hung", "stalled", "load_failed", "bad_dump")
        for o in d["options"]))


@pytest.mark.megengine
def test_an_option_is_as_default_with_the_default_kernels_roots_and_diverges_where_it_adds_one(manifest, tmp_path):
    """The default kernels get c1 wrong (1e-3) in every run; under --weight-preprocess they get c2
    wrong (1e-2) instead. const-shape shows the default run's own root: as default.
    weight-preprocess adds c2: diverges, rooted there. The default run's own verdict (a root)
    makes the exit code 1."""
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_FAULT="c1.weight:1e-3",
                   WRAPPED_LAR_FAULT_IF_FLAG="--weight-preprocess=c2.weight:1e-2")
    d, res = sweep_json(tmp_path, manifest["cnn"], ["const-shape", "weight-preprocess"], "--lar", str(lar), "-j", "2",
                        expect=1)
    plain, opts = d["default"], by_option(d)
    assert plain["verdict"] == "diverges" and plain["local"]["measured"], plain
    own = [r["name"] for r in plain["local"]["roots"]]
    assert own and own[0].startswith("c1."), own
    cs = opts["const-shape"]
    assert cs["verdict"] == "as_default" and cs["shared_roots"] == own[:len(cs["shared_roots"])] and not cs["added_roots"]
    wp = opts["weight-preprocess"]
    assert wp["verdict"] == "diverges" and wp["root_rule"] == "local", wp
    assert wp["root"]["name"].startswith("c2.") and wp["added_roots"][0] == wp["root"]["name"]
    assert [o["option"] for o in d["options"]] == ["weight-preprocess", "const-shape"]  # worst first
    # the report's roots: the option's, and the default run's own, each a var that is not ok
    assert {(r["option"], r["name"].split(".")[0]) for r in d["roots"]} == {("weight-preprocess", "c2"),
                                                                         ("default", "c1")}
    # the headline says which
    v = d["verdict"]
    assert v.startswith("1 of 2 option(s) that ran diverge beyond the default run; worst: weight-preprocess")
    assert f"1 as default (the default kernels' own roots: {own[0]}" in v and "the default run (no option) diverges" in v
    words = " ".join(res.stdout.split())
    assert "as default" in words and "None" not in words and "the default kernels' own roots" in words
