"""A zoo's regressions and nondeterminism land on the cell they belong to: a sweep of two options
(nchw44, fuse-conv-bias-nonlinearity) on cnn by the bundled build makes the history; then a build
whose kernel is wrong under --enable-nchw44 only (tests/wrapped_lar.py WRAPPED_LAR_FAULT_IF_FLAG)
regresses its nchw44 cell and not its other one, and a build whose c2 kernel reads memory it did
not write (WRAPPED_LAR_RACE) has each wrong cell run again on the worker, which names
c2.Convolution nondeterministic. Real runs, Dask worker processes, an SQLite store."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT
from remote_fixtures import write_exe
from zoo_helpers import write_manifest, zoo_cli

SWEEP = """
[[run]]
command = "sweep"
options = ["nchw44", "fuse-conv-bias-nonlinearity"]
[[build]]
name = "bundled"
"""


def _build(path, name: str, env: str) -> str:
    write_exe(path, f"#!/bin/sh\n{env} PYTHONPATH={ROOT} exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
    return f'[[build]]\nname = "{name}"\npath = "{path}"\n'


@pytest.fixture(scope="module")
def zoos(manifest, tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo-cells")
    (d / "k").mkdir()
    (d / "rewrites").mkdir()
    cache = f"WRAPPED_LAR_CACHE={d / 'rewrites'}"
    builds = (_build(d / "bin" / "optfault", "optfault",
                     f"{cache} WRAPPED_LAR_FAULT_IF_FLAG=--enable-nchw44=c2.weight:1e-2")
              + _build(d / "bin" / "race", "race",
                       f"{cache} WRAPPED_LAR_RACE=c2.weight:1e-2 WRAPPED_LAR_JITTER_DIR={d / 'k'}"))
    zoo = "local = false\nmin_history = 1\n"
    first = write_manifest(d / "first.toml", [manifest["cnn"]], SWEEP, zoo=zoo)
    second = write_manifest(d / "second.toml", [manifest["cnn"]], SWEEP + builds, zoo=zoo)
    out = {}
    for name, m in (("first", first), ("second", second)):
        proc = zoo_cli([m, "--store", d / "results.db", "--out", d / name, "--json", d / f"{name}.json",
                        "--workers", "2"], timeout=900)
        out[name] = (proc, json.loads((d / f"{name}.json").read_text()))
    return out


def _cells(z, build):
    [e] = [e for e in z["tasks"] if e["build"] == build]
    return e, {c["option"]: c for c in e["cells"]}


def test_a_regression_lands_on_the_option_it_belongs_to(zoos):
    proc, z = zoos["first"]
    assert proc.returncode == 0, proc.stderr
    proc, z = zoos["second"]
    assert proc.returncode == 1, proc.stderr
    e, cells = _cells(z, "optfault")
    assert set(cells) == {"nchw44", "fuse-conv-bias-nonlinearity"} and e["history_runs"] == 1
    assert cells["nchw44"]["bad"] and cells["nchw44"]["regressed"], cells["nchw44"]
    assert not cells["fuse-conv-bias-nonlinearity"]["bad"] and cells["fuse-conv-bias-nonlinearity"]["regressed"] == []
    assert cells["nchw44"]["run_to_run"]["same_bits"]  # the option's fault repeats: the same bits run again
    assert "run_to_run" not in cells["fuse-conv-bias-nonlinearity"]  # not wrong: not run again
    lines = [ln for ln in proc.stdout.splitlines() if " optfault @ " in ln]
    assert any(ln.startswith("REGRESSED") and "sweep nchw44" in ln for ln in lines), lines
    assert any(ln.startswith("ok ") and "sweep fuse-conv-bias-nonlinearity" in ln for ln in lines), lines


def test_a_wrong_cell_that_differs_run_to_run_names_the_nondeterministic_operator(zoos):
    proc, z = zoos["second"]
    e, cells = _cells(z, "race")
    for c in cells.values():
        rtr = c["run_to_run"]
        assert c["bad"] and rtr["nondeterministic"] and not rtr["same_bits"], c
        # the operator reading c2.weight: c2.Convolution, fused with its ReLU (RELU[1]) under both options
        assert rtr["operators"][0]["name"] in ("c2.Convolution", "RELU[1]") and rtr["operators"][0]["spread"] > 0, rtr
        assert rtr["under"] == c["option"]
    assert z["counts"]["nondeterministic"] == 1
    assert any(" race @ " in ln and "is nondeterministic under nchw44" in ln
               for ln in proc.stdout.splitlines()), proc.stdout
