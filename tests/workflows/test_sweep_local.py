"""Local error in ``lar-prec sweep`` (issue 14), on real runs of the cases.

The layerwise model is built once from the plain model and the naive reference, and run
under each option that ran. Asserted on behaviour: fp16 options get float16 floors (their
conversions and convolutions are not roots, float32 floors would make them so); ``--no-local``
leaves the dump-only report; a layerwise run that fails or hangs under one option leaves a
note in that option's row and every other row measured.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lar_prec.workflows.sweep import local as sweep_local
from test_sweep import by_option, sweep_json


@pytest.mark.megengine
def test_fp16_options_get_float16_floors_and_their_local_roots_match_the_kernel_runs(manifest, tmp_path):
    d, _ = sweep_json(tmp_path, manifest["cnn"], ["weight-preprocess", "ioc16", "io16xc32"], "-j", "2",
                      expect=None)
    opts = by_option(d)
    plain = json.loads(Path(opts["weight-preprocess"]["local"]["dir"], "local.json").read_text())
    assert plain["compute_dtype"] == "float32" and plain["roots"] == []
    for name in ("ioc16", "io16xc32"):
        o = opts[name]
        loc = o["local"]
        assert o["status"] == "runs" and loc["measured"] and loc["compute_dtype"] == "float16", loc
        rec = json.loads(Path(loc["dir"], "local.json").read_text())
        half = {v["name"]: v for v in rec["vars"]}
        for v in plain["vars"]:
            h = half[v["name"]]
            if v["opr_type"] == "Reshape":  # moves float16-rounded values: one float16 ulp, not 0
                assert v["floor"] == 0.0 and 0 < h["local_err"] <= h["floor"] <= 2 ** -10
            if v["opr_type"] in ("ConvolutionForward", "MatrixMul"):  # float16 rounding: no root, though
                assert h["local_err"] > v["floor"]  # over the float32 floor: it would be one there
                assert h["floor"] > 100 * v["floor"] and h["label"] != "root", h
        roots = [r["name"] for r in loc["roots"]]
        if o["kernel_root"] is not None and "kernel wrong" in (o["cause"] or ""):
            # naive and default kernels under the option first differ there: made there
            assert roots and roots[0] == o["kernel_root"] and o["root"]["name"] == roots[0], o
            assert o["verdict"] == "diverges" and o["root_rule"] == "local"
        # a local root is an operator the reference and the option disagree on, by its own inputs
        for r in loc["roots"]:
            assert r["nonfinite"] or r["local_err"] > r["floor"] > 0
        assert (o["verdict"] == "diverges") == bool(roots)
        # each root has a repro under the option's flags, and it reproduces
        assert len(loc["repros"]) + len(loc["repro_errors"]) == len(roots[:sweep_local.REPROS_PER_OPTION])
        if loc["repros"]:
            from lar_prec.diagnosis.replay import replay, replay_verdict

            # the one-operator model under a graph-rewriting option need not be the layerwise
            # run bit for bit (the rewrite sees another graph), but its divergence must be there
            r = replay(loc["repros"][0])
            assert r.reference_bitwise and r.err > loc["roots"][0]["floor"], r
            assert replay_verdict(r)[0] == 1 and replay_verdict(r)[1].startswith("reproduced"), replay_verdict(r)
    assert d["exit_code"] == int(any(o["verdict"] == "diverges" for o in d["options"]))


@pytest.mark.megengine
def test_no_local_leaves_the_dump_only_report(manifest, tmp_path):
    d, res = sweep_json(tmp_path, manifest["cnn"], ["weight-preprocess", "const-shape"], "--no-local", expect=0)
    assert d["local"] == {"measured": False, "why": "local error not measured (--no-local)", "roots_by": "dump"}
    for o in d["options"]:
        assert o["local"]["measured"] is False and "--no-local" in o["local"]["why"] and o["root_rule"] == "dump"
        assert o["verdict"] == "ok" and o["root"] is None
    assert all("local" not in v for v in d["vars"])
    assert d["timing"]["local_seconds"] == 0 and not (tmp_path / "a" / "local").exists()
    assert "roots by local error" not in res.stdout


@pytest.mark.megengine
def test_layerwise_run_failing_or_hanging_under_one_option_leaves_a_note_and_the_other_rows(
        manifest, tmp_path, monkeypatch):
    real = sweep_local.run_option_layerwise

    def one_broken_one_slow(prep, flags, dump_dir, *, timeout):
        if "--enable-nchw44" in flags:  # a truncated layerwise model: the real load_and_run fails to load it
            bad = Path(dump_dir).parent / "truncated.mge"
            bad.parent.mkdir(parents=True, exist_ok=True)
            bad.write_bytes(prep.layerwise.path.read_bytes()[:256])
            prep = replace(prep, layerwise=replace(prep.layerwise, path=bad))
        if "--enable-nchw88" in flags:  # killed long before it can load
            timeout = 0.05
        return real(prep, flags, dump_dir, timeout=timeout)

    monkeypatch.setattr(sweep_local, "run_option_layerwise", one_broken_one_slow)
    # layouts: never the default run's bits (their relayouts are vars it has not), so each gets
    # its own layerwise run (an option with the default run's bits would take the default run's)
    d, res = sweep_json(tmp_path, manifest["cnn"], ["weight-preprocess", "nchw44", "nchw88"], "-j", "2",
                        expect=0)
    opts = by_option(d)
    broken, slow, fine = opts["nchw44"], opts["nchw88"], opts["weight-preprocess"]
    assert broken["local"]["measured"] is False and "failed under this option" in broken["local"]["why"]
    assert slow["local"]["measured"] is False and "hung under this option" in slow["local"]["why"]
    for o in (broken, slow):  # the option's row stays, judged by the dumps
        assert o["status"] == "runs" and o["verdict"] == "ok" and o["root_rule"] == "dump" and o["vars_paired"] > 0
    assert fine["local"]["measured"] and fine["local"]["roots"] == [] and fine["root_rule"] == "local"
    assert set(next(iter(d["vars"]))["local"]) == {"weight-preprocess"}
    assert "not measured" in res.stdout


@pytest.mark.megengine
def test_ctrl_c_while_layerwise_runs_are_under_way_is_130(manifest, tmp_path):
    import os
    import sys

    from conftest import ROOT
    from proc_helpers import ctrl_c
    from test_sweep import case_args

    out = tmp_path / "a"
    argv = [sys.executable, "-m", "lar_prec", "sweep", *case_args(manifest["cnn"]), "--options",
            "weight-preprocess,const-shape,record-comp-seq,fuse-preprocess", "-j", "2", "--out", str(out), "-q"]
    # the folder of the default run's layerwise run appears as that run starts (an option with the
    # default run's bits makes none of its own)
    rc, err, seconds = ctrl_c(argv, {**os.environ, "PYTHONPATH": str(ROOT)}, out / "local" / "default")
    assert rc == 130, err
    assert "interrupted" in err and str(out) in err and seconds < 30
    assert not (out / "report.json").exists()
